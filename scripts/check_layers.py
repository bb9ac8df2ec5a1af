#!/usr/bin/env python3
"""check_layers.py — check that the quoted includes of the tree follow the layers
of docs/DESIGN.md ("Layers and dependencies").

Every quoted include must name its folder from the repository root
(#include "core/config.hpp") and resolve to a file of the tree (or to the
generated header "generated/build_info.hpp"), and a file may include only from
its own folder and from the folders its layer is allowed to use (ALLOWED
below, the same table as DESIGN.md). Prints one line per violation and exits 1
if there is any, else prints the folder-to-folder include counts and exits 0.

usage: scripts/check_layers.py [REPO_ROOT]   (default: this script's repository)
"""
import os
import re
import subprocess
import sys

# folder -> folders it may include from (besides itself). The link graph of the
# CMake targets is the same (mc_core <- mc_reference, mc_kernels <- mc_gpu <-
# mc_check <- cli, bench, suites); `cmake --graphviz` shows it.
ALLOWED = {
    "core": set(),
    "reference_cpu": {"core"},
    "kernels": {"core"},
    "gpu": {"core", "kernels"},
    "check": {"core", "reference_cpu", "gpu", "generated"},
    "cli": {"core", "reference_cpu", "gpu", "check", "generated"},
    "bench": {"core", "kernels", "gpu", "check", "generated"},
    "validation/support": {"core", "reference_cpu", "gpu", "check"},
    "validation/cpu": {"core", "reference_cpu", "check", "validation/support"},
    "validation/gpu": {"core", "reference_cpu", "kernels", "gpu", "check", "validation/support",
                       "validation/emulation"},
    # the CPU emulation of the scan kernels and the device-vs-emulation bit cases
    # (its emulator is force-included by the build, never included by kernels/)
    "validation/emulation": {"core", "reference_cpu", "kernels", "gpu", "check",
                             "validation/support"},
    # the SASS-count experiments (docs/experiments/count_sass.py compiles them one by one;
    # no build target): their own shared helpers only
    "docs/experiments": set(),
}
GENERATED = {"generated/build_info.hpp"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    """The ALLOWED key a repository path belongs to (longest matching folder)."""
    best = None
    for layer in ALLOWED:
        if path.startswith(layer + "/") and (best is None or len(layer) > len(best)):
            best = layer
    return best


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    files = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    tracked = set(files)
    sources = [f for f in files if re.search(r"\.(hpp|cuh|h|cpp|cu)$", f)]
    problems, counts = [], {}
    for f in sources:
        src_layer = layer_of(f)
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                where = f"{f}:{n}: #include \"{inc}\""
                if inc not in tracked and inc not in GENERATED:
                    problems.append(f"{where}: not a path from the repository root to a tracked file")
                    continue
                dst_layer = "generated" if inc in GENERATED else layer_of(inc)
                if src_layer is None:
                    problems.append(f"{where}: {f} is in no layer of ALLOWED")
                    continue
                if dst_layer != src_layer and dst_layer not in ALLOWED[src_layer]:
                    problems.append(f"{where}: {src_layer}/ may not include from {dst_layer}/ "
                                    f"(allowed: {', '.join(sorted(ALLOWED[src_layer])) or 'none'})")
                    continue
                key = (src_layer, dst_layer)
                counts[key] = counts.get(key, 0) + 1
    if problems:
        print("\n".join(problems))
        print(f"check_layers: {len(problems)} include(s) break the layering (docs/DESIGN.md)")
        return 1
    for (a, b), c in sorted(counts.items()):
        if a != b:
            print(f"  {a:20s} -> {b:20s} {c:4d}")
    print(f"check_layers: OK ({sum(counts.values())} quoted includes in {len(sources)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
