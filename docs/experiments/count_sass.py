#!/usr/bin/env python3
"""count_sass.py — SASS instructions a step of docs/experiments/minimal_bwd_walk.cu (CPU only).

With --tile: of docs/experiments/tile_bwd_walk.cu instead (4 or 2 channels x 4 states a
thread, the layouts counted for d_state > 16), at K = 8 and 16, per step and per element.

Compiles the walk for sm_90 with nvcc at K = 8 and K = 16 steps a chunk (fully unrolled), and
counts its instructions with cuobjdump. The count for K = 16 minus the count for K = 8 is exactly
8 steps of the walk. For MC_DSUM = 1 (the dB/dC d-sums from a shared-memory tile after the
chunk), the sums' code is the K = 16 count of MC_DSUM 1 minus that of MC_DSUM 2. At K = 16 each
of the 128 threads runs it once a chunk, so it adds 1/16 of itself to each step.

usage: docs/experiments/count_sass.py [--nvcc PATH] [--tile]
Static counts of straight-line code: every counted instruction is issued once a step by every
thread, except that branches over padding, which this walk does not have, would count too.
"""
import argparse, collections, os, re, shutil, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository: includes name their folder
SRC = os.path.join(HERE, "minimal_bwd_walk.cu")
TILE_SRC = os.path.join(HERE, "tile_bwd_walk.cu")


def compile_count(nvcc, k, dsum, tmp, src=SRC, defs=()):
    cubin = os.path.join(tmp, f"w_{dsum}_{k}_{'_'.join(defs)}.cubin")
    r = subprocess.run([nvcc, "-arch=sm_90", "-O3", "-cubin", f"-DK={k}", f"-DMC_DSUM={dsum}",
                        *(f"-D{d}" for d in defs),
                        "-I", ROOT, "-Xptxas", "-v", "-o", cubin, src], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"count_sass: nvcc failed (K={k}, MC_DSUM={dsum}):\n{r.stderr}")
    regs = re.search(r"Used (\d+) registers", r.stderr)
    stack = re.search(r"(\d+) bytes stack frame", r.stderr)
    sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
    ops = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
        if m and m.group(2) != "NOP":
            ops[m.group(2).split(".")[0]] += 1
    return ops, int(regs.group(1)) if regs else -1, int(stack.group(1)) if stack else 0


def per_unit(more, less, n):
    """The per-opcode difference of two counts, divided by n (e.g. the 8 steps between K 16 and 8)."""
    # opcodes in name order, so that equal counts print in the same order in every run
    return collections.Counter({op: (more[op] - less[op]) / n for op in sorted(set(more) | set(less))})


def ops_line(c, floor):
    """The opcodes of a count, most first, those of at least `floor`."""
    return ", ".join(f"{op} {n:g}" for op, n in c.most_common() if abs(n) >= floor)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("--tile", action="store_true", help="count tile_bwd_walk.cu instead")
    a = ap.parse_args()
    if shutil.which("cuobjdump") is None:
        sys.exit("count_sass: cuobjdump is not on PATH (the Debian CUDA toolkit has none; PyPI's "
                 "nvidia-cuda-cuobjdump wheel carries it)")
    if a.tile:
        for ct in (4, 2):
            for minb in (1, 3, 4):  # the register budget: 255, 168, 128 a thread
                with tempfile.TemporaryDirectory() as tmp:
                    (o8, r8, s8), (o16, r16, s16) = (
                        compile_count(a.nvcc, k, 0, tmp, TILE_SRC, (f"CT={ct}", f"MINB={minb}"))
                        for k in (8, 16))
                step = per_unit(o16, o8, 8)
                total = sum(step.values())
                print(f"tile_bwd_walk ({ct} channels x 4 states a thread, launch bound {minb} "
                      f"blocks): registers {r8} (K 8) / {r16} (K 16), stack {s8} / {s16} bytes")
                print(f"  walk: {total:.1f} instructions a step and thread; " + ops_line(step, 0.5))
                print(f"  = {total / (4 * ct):.2f} an element ({4 * ct} a thread)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        res = {(k, d): compile_count(a.nvcc, k, d, tmp) for d in (0, 1, 2) for k in (8, 16)}
    for d, name in ((0, "warp reduce-scatter (today's layout)"), (1, "shared-memory tile, summed after the chunk")):
        o8, r8, s8 = res[(8, d)]
        o16, r16, s16 = res[(16, d)]
        step = per_unit(o16, o8, 8)
        extra = per_unit(o16, res[(16, 2)][0], 16) if d == 1 else collections.Counter()
        total = sum(step.values()) + sum(extra.values())
        print(f"MC_DSUM={d} ({name}): registers {r8} (K 8) / {r16} (K 16), stack {s8} / {s16} bytes")
        print(f"  walk: {sum(step.values()):.1f} instructions a step and thread; " + ops_line(step, 0.5))
        if d == 1:
            print(f"  d-sums after the chunk: {sum(extra.values()):.1f} a step; " + ops_line(extra, 0.25))
        print(f"  in all {total:.1f} a step = {total / 4:.1f} an element (4 states a thread)")


if __name__ == "__main__":
    main()
