#!/usr/bin/env python3
"""ncu_sass_opcodes.py — executed instructions per opcode of one kernel, from an
Nsight Compute source page exported as CSV:

    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    scripts/ncu_sass_opcodes.py sass.csv --kernel 0 --elements 25165824

Prints, per opcode, the executed thread instructions divided by --elements (for
example the output elements of the launch) and the share of the warp-stall samples.
With --stalls, the warp-stall samples by reason (the stall_* columns); with --loops,
the same per loop of the SASS (a backward branch spanning at least --min-loop bytes,
in the order of the loops' closing branches): its warp instructions per --warp-steps
(e.g. warps x steps: the instructions a warp issues per step in that loop), its share
of the stall samples (a sampled warp's place, so roughly its share of the time) and its
top stall reasons.
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
    ap.add_argument("--stalls", action="store_true", help="warp-stall samples by reason")
    ap.add_argument("--loops", action="store_true", help="instructions and stalls per SASS loop")
    ap.add_argument("--warp-steps", type=float, default=0.0,
                    help="divisor of the per-loop warp instructions (default: --elements / 32)")
    ap.add_argument("--min-loop", type=lambda v: int(v, 0), default=0x1000,
                    help="smallest loop span in bytes that --loops reports")
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
    if not (a.stalls or a.loops):
        return
    # each instruction's stall samples by reason, parsed once for both reports
    reasons = [(k, i) for i, k in enumerate(h) if k.startswith("stall_") and "Not Issued" not in k]

    def num(r, i):
        try:
            return float(r[i].replace(",", "") or 0)
        except ValueError:
            return 0.0

    ai = h.index("Address")
    body = [r for r in rows[1:] if len(r) == len(h)]
    base = int(body[0][ai], 16)
    ins = [(int(r[ai], 16) - base, r[si], num(r, ii),
            collections.Counter({k: num(r, i) for k, i in reasons})) for r in body]
    tot = max(sum(sum(x[3].values()) for x in ins), 1)
    if a.stalls:
        by = sum((x[3] for x in ins), collections.Counter())
        print("warp-stall samples by reason:")
        for k, v in by.most_common(12):
            print(f"  {k[6:]:18s} {100 * v / tot:5.1f} %")
    if a.loops:
        per = a.warp_steps or a.elements / 32
        print(f"loops (warp instructions per {per:.0f}, share of the stall samples):")
        for off, src, _, _ in ins:
            m = re.search(r"BRA (?:\S+, )?0x([0-9a-f]+)", src)
            if not m:
                continue
            tgt = int(m.group(1), 16)
            tgt = tgt - base if tgt >= base else tgt
            if tgt > off or off - tgt < a.min_loop:
                continue
            sub = [x for x in ins if tgt <= x[0] <= off]
            st = sum((x[3] for x in sub), collections.Counter())
            n = sum(st.values())
            top = ", ".join(f"{k[6:]} {100 * v / max(n, 1):.0f}" for k, v in st.most_common(5))
            print(f"  {tgt:#x}-{off:#x}: {sum(x[2] for x in sub) / per:7.1f}   stalls "
                  f"{100 * n / tot:5.1f} %   ({top})")

if __name__ == "__main__":
    main()
