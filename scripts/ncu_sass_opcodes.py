#!/usr/bin/env python3
"""ncu_sass_opcodes.py — executed instructions per opcode of one kernel, from an
Nsight Compute source page exported as CSV:

    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    scripts/ncu_sass_opcodes.py sass.csv --kernel 0 --elements 25165824

Prints, per opcode, the executed thread instructions divided by --elements (for
example the output elements of the launch) and the share of the warp-stall samples.
Used for the per-element counts in docs/performance-notes.md."""
import argparse
import collections
import csv
import re
import sys


def kernel_blocks(text):
    blocks, cur = [], None
    for line in text.split("\n"):
        if line.startswith('"Kernel Name"'):
            cur = {"name": line.split(",", 1)[1].strip('",'), "rows": []}
            blocks.append(cur)
        elif cur is not None:
            cur["rows"].append(line)
    return blocks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--kernel", type=int, default=0, help="index of the kernel block (0 = first)")
    ap.add_argument("--elements", type=float, required=True, help="divisor (e.g. output elements)")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    blocks = kernel_blocks(open(a.csv).read())
    if not blocks or a.kernel >= len(blocks):
        sys.exit(f"{a.csv}: kernel block {a.kernel} not found ({len(blocks)} blocks)")
    rows = list(csv.reader(blocks[a.kernel]["rows"]))
    h = rows[0]
    ii, si = h.index("Instructions Executed"), h.index("Source")
    wi = h.index("Warp Stall Sampling (All Samples)")
    ops, samples = collections.Counter(), collections.Counter()
    total = total_s = 0
    for r in rows[1:]:
        if len(r) <= ii:
            continue
        n = int(r[ii].replace(",", "") or 0)
        m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z0-9_]+)", r[si])
        op = m.group(2) if m else "?"
        s = int(r[wi] or 0)
        ops[op] += n
        samples[op] += s
        total += n
        total_s += s
    print(f"kernel: {blocks[a.kernel]['name']}")
    print(f"warp instructions {total}, thread instructions per element {total * 32 / a.elements:.2f}")
    for op, n in ops.most_common(a.top):
        print(f"  {op:10s} {n * 32 / a.elements:6.2f} per element   stall samples {100 * samples[op] / max(total_s, 1):5.1f} %")


if __name__ == "__main__":
    main()
