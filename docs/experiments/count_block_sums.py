#!/usr/bin/env python3
"""count_block_sums.py — SASS instructions of the scan backward's batch loop, per kernel
instance, in one or two builds of libmc_kernels.so (CPU only; docs/performance-notes.md,
"twenty-ninth session").

For each ckpt_bwd_kernel / tile_bwd_kernel instance of the bwd_{f32,bf16,f16} units it finds
the batch loop (the innermost loop that holds a block barrier and FFMAs) and prints:
  - its static size;
  - its size as run a batch: the loop, less its inner loops and, where the old block sums'
    entry count per thread is even, their peeled entry, plus each inner loop times its trip
    count. The inner loops are the old two-entry block-sum loop (entries / 2 trips; stores, no
    FFMA) and the tile plan's walk (Q / QD trips; FFMAs). A branch skipped inside the straight part still counts,
    so the figure is an upper bound for straight-line code;
  - that per element of the batch (Q steps x the states and channels a thread holds);
  - registers and stack (cuobjdump -res-usage), and LDL/STL inside the chunk loop.

usage: docs/experiments/count_block_sums.py LIB [LIB_OLD]
Needs cuobjdump and nvdisasm on PATH. A toolkit without them can take them from PyPI:
  pip download --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; unzip each wheel;
  PATH=<wheel>/nvidia/cu13/bin:$PATH
"""
import collections, os, re, subprocess, sys, tempfile

UNITS = ("bwd_f32", "bwd_bf16", "bwd_f16")
# (S, L) -> steps a batch (ckpt_q of L·S) and block-sum entries a thread (Q·2·L·S / 128)
PLANS = {(8, 32): (1, 4), (4, 32): (4, 8), (4, 16): (4, 4), (4, 4): (8, 2)}
TILE_Q, TILE_ENTRIES = 8, 2


def tile_qd(dt):
    return 2 if dt >= 3 else 4


def sass_of(lib, tmp):
    """{unit: (sass text, res-usage text)} of the backward units of lib."""
    out = {}
    for u in UNITS:
        d = os.path.join(tmp, os.path.basename(lib) + "." + u)
        os.makedirs(d, exist_ok=True)
        subprocess.run(["cuobjdump", "-xelf", f"{u}.sm_90.cubin", os.path.abspath(lib)], cwd=d,
                       check=True, capture_output=True)
        cub = os.path.join(d, f"{u}.sm_90.cubin")
        sass = subprocess.run(["cuobjdump", "-sass", cub], check=True, capture_output=True,
                              text=True).stdout
        res = subprocess.run(["cuobjdump", "-res-usage", cub], check=True, capture_output=True,
                             text=True).stdout
        out[u] = (sass, res)
    return out


def instructions(body):
    ins = []
    for line in body.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and not m.group(2).startswith("NOP"):
            ins.append((int(m.group(1), 16), m.group(2)))
    return ins


def loops_of(ins):
    """(first, last) instruction indices of every backward branch's loop."""
    loops = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"BRA\s+.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a:
            tgt = int(m.group(1), 16)
            loops.append((min(k for k, (aa, _) in enumerate(ins) if aa >= tgt), i))
    return loops


def has(ins, j, i, op):
    return any(re.search(r"\b" + op + r"\b", t) for _, t in ins[j:i + 1])


def peel_size(ins, bar, inner_first):
    """The old block sums' peeled entry: from the predicated branch before the first STG
    after the barrier to the BSYNC after it (0 when there is none)."""
    seg = ins[bar + 1:inner_first]
    stg = [k for k, (_, t) in enumerate(seg) if "STG" in t]
    if not stg:
        return 0
    s = stg[0]
    brs = [k for k in range(s) if re.search(r"@!?P\d BRA", seg[k][1])]
    ends = [k for k in range(s, len(seg)) if "BSYNC" in seg[k][1]]
    return ends[0] - brs[-1] - 1 if brs and ends else 0


def plan_of(name):
    """('ckpt', S, L) or ('tile', DT, None) from a mangled kernel name."""
    m = re.search(r"ckpt_bwd_kernelI\w+?Li(\d+)ELi(\d+)E", name)
    if m:
        return ("ckpt", int(m.group(1)), int(m.group(2)))
    m = re.search(r"tile_bwd_kernelI\w+?Li(\d+)E", name)
    if m:
        return ("tile", int(m.group(1)), None)
    return None


def short(name):
    dt = "bf16" if "bfloat16" in name else ("f16" if "half" in name else "f32")
    e = "hw" if "ScanExpE1" in name else "acc"
    pieces = " pieces" if re.search(r"Lb1EE", name) else ""
    kind, a, b = plan_of(name)
    return (f"ckpt {dt} ({a},{b}) {e}{pieces}" if kind == "ckpt" else f"tile {dt} DT{a} {e}")


def analyse(sass, res):
    usage = {}
    for m in re.finditer(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+)", res):
        usage[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    rows = {}
    for part in sass.split("Function : ")[1:]:
        name = part.split("\n")[0].strip()
        plan = plan_of(name)
        if plan is None:
            continue
        ins = instructions(part)
        loops = loops_of(ins)
        cand = sorted(((j, i) for j, i in loops if has(ins, j, i, "BAR.SYNC") and has(ins, j, i, "FFMA")),
                      key=lambda x: x[1] - x[0])
        if not cand:
            continue
        j, i = cand[0]
        bar = max(k for k in range(j, i + 1) if "BAR.SYNC" in ins[k][1])
        inner = [(a, b) for a, b in loops if j < a and b < i]
        kind, x, y = plan
        if kind == "ckpt":
            q, entries = PLANS[(x, y)]
            elems = q * x
        else:
            q, entries = TILE_Q, TILE_ENTRIES
            elems = q * 4 * x
        run = i - j + 1
        for a, b in inner:
            size = b - a + 1
            if has(ins, a, b, "FFMA"):  # the tile's walk: Q / QD trips
                run += (q // tile_qd(x) - 1) * size
            elif a > bar and has(ins, a, b, "STG"):  # the old block sums: two entries a trip
                run += (entries // 2 - 1) * size
                if entries % 2 == 0:
                    run -= peel_size(ins, bar, a)
        chunk = max(loops, key=lambda x: x[1] - x[0])
        spills = sum(1 for _, t in ins[chunk[0]:chunk[1] + 1] if re.search(r"\b(LDL|STL)", t))
        reg, stack = usage.get(name, (-1, -1))
        rows[name] = dict(static=i - j + 1, run=run, per_elem=run / elems, reg=reg, stack=stack,
                          spills=spills)
    return rows


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    libs = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        tables = [{} for _ in libs]
        for n, lib in enumerate(libs):
            for u, (sass, res) in sass_of(lib, tmp).items():
                tables[n].update(analyse(sass, res))
    new = tables[0]
    old = tables[1] if len(tables) > 1 else None
    head = "instance | batch loop static / as run | per element | REG / stack | LDL+STL in chunk loop"
    print(head if old is None else "instance | new: " + head.split(" | ", 1)[1] + " || old: the same")
    for name in sorted(new, key=short):
        r = new[name]
        line = (f"{short(name):28s} | {r['static']:5d} / {r['run']:5d} | {r['per_elem']:5.1f} | "
                f"{r['reg']:3d} / {r['stack']:2d} | {r['spills']}")
        if old is not None and name in old:
            o = old[name]
            line += (f" || {o['static']:5d} / {o['run']:5d} | {o['per_elem']:5.1f} | "
                     f"{o['reg']:3d} / {o['stack']:2d} | {o['spills']} | "
                     f"as run {100.0 * (r['run'] - o['run']) / o['run']:+.0f} %")
        print(line)


if __name__ == "__main__":
    main()
