#!/usr/bin/env python3
"""check_sanitize_filters.py — every gtest filter pattern scripts/sanitize.sh passes by default
must select at least one test of its binary.

sanitize.sh fails a run where no test passed at all, but a colon-separated filter with one
stale pattern (a case renamed or removed) still runs the others and passes: the geometry that
pattern was meant to cover would silently go unchecked. Listing tests needs no GPU, so this
runs on the CPU (ctest label cpu).

usage: scripts/check_sanitize_filters.py --build <build-dir> [--script scripts/sanitize.sh]
Exit status 0 when every positive pattern of DEFAULT_FILTER and DEFAULT_FILTER_RACECHECK
selects a test; 1 with the offending binary and pattern named otherwise; 2 on bad input.
"""
import argparse
import os
import re
import sys

from gtest_list import selected_tests


def read_filters(script_text):
    """{array name: {binary: filter}} for the `declare -A NAME=( [bin]="filter" ... )` blocks."""
    out = {}
    for m in re.finditer(r"declare -A (\w+)=\((.*?)\n\)", script_text, re.S):
        entries = dict(re.findall(r'\[(\w+)\]="([^"]*)"', m.group(2)))
        out[m.group(1)] = entries
    return out


def positive_patterns(gtest_filter):
    """The patterns before gtest's '-' (the negative part), split on ':'."""
    positive = gtest_filter.split("-", 1)[0] if not gtest_filter.startswith("-") else ""
    return [p for p in positive.split(":") if p]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="the build folder (its validation/ binaries)")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--script", default=os.path.join(here, "sanitize.sh"))
    a = ap.parse_args()
    try:
        text = open(a.script).read()
    except OSError as e:
        print(f"check_sanitize_filters: cannot read --script {a.script}: {e}", file=sys.stderr)
        return 2
    arrays = read_filters(text)
    wanted = [n for n in ("DEFAULT_FILTER", "DEFAULT_FILTER_RACECHECK") if n in arrays]
    if len(wanted) != 2:
        print(f"check_sanitize_filters: {a.script} defines {sorted(arrays)}; expected "
              "DEFAULT_FILTER and DEFAULT_FILTER_RACECHECK", file=sys.stderr)
        return 2
    bad, checked = [], 0
    listed = {}  # binary: how many tests it has
    for array in wanted:
        for binary, flt in sorted(arrays[array].items()):
            exe = os.path.join(a.build, "validation", binary)
            if not os.access(exe, os.X_OK):
                print(f"check_sanitize_filters: {array}[{binary}]: {exe} is not built",
                      file=sys.stderr)
                return 2
            if binary not in listed:
                listed[binary] = len(selected_tests(exe))
            for pat in positive_patterns(flt):
                checked += 1
                if not selected_tests(exe, pat):  # gtest's own matching of the pattern
                    bad.append(f"{array}[{binary}]: pattern '{pat}' selects no test "
                               f"(of {listed[binary]} listed)")
    for b in bad:
        print("check_sanitize_filters: " + b, file=sys.stderr)
    if bad:
        return 1
    print(f"check_sanitize_filters: OK ({checked} patterns over {len(listed)} binaries each "
          "select at least one test)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
