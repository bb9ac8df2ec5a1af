#!/usr/bin/env python3
# peer_train_step.py — times state-spaces/mamba's Mamba-1 block stack for one training
# step (forward + backward, no optimizer) on bench_train_step's rows, and writes JSON
# that reports/generate.py sets beside our step in performance.md (--peer-step).
#
# Why: bench_train_step compiles in the peer's H200 graph figures (bench/README.md) so
# that every run has a ratio. A ratio against figures from another machine or another
# day mixes two measurements; this script measures the peer on the machine and in the
# lease where ours runs, so the ratio compares like with like.
#
# The peer is not part of this project. Point --peer-py at a folder where its Python
# packages `mamba_ssm` (the block, mamba_inner_fn) and `causal_conv1d` import, and
# --ext at the folders holding its built extensions `selective_scan_cuda*.so` and
# `causal_conv1d_cuda*.so`. Without causal_conv1d the block falls back to its slow
# path (nn.Conv1d and separate ops); the JSON records which path ran ("path"), and
# --require-fast-path refuses the slow one.
#
# What is timed (the peer's own fast path, as the issue that set the targets measured
# it): x [B, T, d_model] -> L times x = x + Mamba(RMSNorm(x)), d_state 16, d_conv 4,
# expand 2; loss = sum(out * g) with a fixed random g; backward into every parameter.
# f32 runs with TF32 off (strict), bf16 with the whole stack in bf16 (parameters and
# activations), as the peer's users run it. Our step does more than this stack: its
# input projection and final norm (bench/README.md), so the comparison is not in our
# favour.
#
# Method: eager = CUDA events around --inner back-to-back steps, median of --reps;
# graph = the step captured once as a CUDA graph (after warm-up steps on a side
# stream) and replayed, events around --inner replays, median of --reps. Peak memory:
# torch.cuda.max_memory_allocated during one step, as the allocation above what was
# held before the step (peak_step_bytes: activations, gradients, workspaces) and in
# all (peak_total_bytes: that plus the bytes of the parameters, x and g, counted from
# the tensors, so that nothing an earlier row left allocated is charged to this one).
# Each row runs in a fresh process (--in-process to turn that off), so the peak also
# holds the workspaces PyTorch allocates on a process's first GEMMs, as ours holds its
# cuBLAS workspace. Reproducibility: two steps
# from the same inputs; a gradient tensor counts as stable if it is bitwise equal.
#
# usage: peer_train_step.py --out peer_train_step.json --peer-py DIR --ext DIR [--ext DIR]
#            [--rows 768:512:1,768:2048:1,1024:2048:1,2048:2048:1,768:2048:4]
#            [--dtypes float32,bfloat16] [--batch 8] [--reps 15] [--inner 3]
import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile

from peer_common import device_fields, events_median_us, torch_with_gpu, write_doc

DEFAULT_ROWS = "768:512:1,768:2048:1,1024:2048:1,2048:2048:1,768:2048:4"
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def parse_rows(text):
    rows = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 3:
            raise ValueError(f"--rows: '{item}' is not d_model:T:layers")
        try:
            dm, T, L = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"--rows: '{item}' is not three integers d_model:T:layers") from None
        if dm <= 0 or T <= 0 or L <= 0:
            raise ValueError(f"--rows: '{item}' needs d_model, T and layers > 0")
        rows.append((dm, T, L))
    return rows


def import_peer(peer_py, ext_dirs):
    """Puts the peer's packages and extensions on sys.path; returns (Mamba, path name)."""
    for d in reversed([peer_py] + ext_dirs):
        if d:
            sys.path.insert(0, os.path.abspath(d))
    from mamba_ssm.modules import mamba_simple  # noqa: E402 (after the path is set)
    fast = mamba_simple.causal_conv1d_fn is not None
    return mamba_simple.Mamba, ("fast: mamba_inner_fn + causal_conv1d" if fast else
                                "slow: no causal_conv1d (nn.Conv1d + selective_scan_fn)")


def time_row(torch, Mamba, dm, T, L, dtype_name, a):
    dtype = getattr(torch, dtype_name)
    nn = torch.nn

    class Block(nn.Module):  # x + Mamba(RMSNorm(x))
        def __init__(self):
            super().__init__()
            self.norm = nn.RMSNorm(dm, eps=1e-5)
            self.mixer = Mamba(dm, d_state=16, d_conv=4, expand=2)

        def forward(self, x):
            return x + self.mixer(self.norm(x))

    torch.manual_seed(0)
    model = nn.Sequential(*[Block() for _ in range(L)]).cuda().to(dtype)
    params = list(model.parameters())
    x = torch.randn(a.batch, T, dm, device="cuda", dtype=dtype)
    g = torch.randn_like(x)

    def step():
        (model(x) * g).sum().backward()

    def clear_grads():
        for p in params:
            p.grad = None

    clear_grads()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    held = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    first = [p.grad.clone() for p in params]
    clear_grads()
    step()
    torch.cuda.synchronize()
    stable = sum(bool(torch.equal(f, p.grad)) for f, p in zip(first, params))
    first = None
    eager = events_median_us(torch, step, a.inner, a.reps, warm=3)
    graph, graph_error = None, None
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            step()
        gr.replay()
        graph = events_median_us(torch, gr.replay, a.inner, a.reps)
        gr.reset()  # frees the graph's private memory pool before the next row
        del gr
    except Exception as e:  # recorded, not fatal: the eager figure still stands
        graph_error = repr(e)[:300]
    # the row's own tensors: parameters, x and g (not what an earlier row may have left)
    own = sum(t.numel() * t.element_size() for t in params + [x, g])
    row = dict(d_model=dm, T=T, layers=L, B=a.batch, dtype=SHORT[dtype_name],
               eager_us=round(eager, 1), graph_us=None if graph is None else round(graph, 1),
               peak_step_bytes=int(peak - held), peak_total_bytes=int(peak - held + own),
               grads_bitwise_stable=int(stable), grads=len(params))
    if graph_error:
        row["graph_error"] = graph_error
    return row


def run_rows_in_children(a, rows):
    """Each (row, dtype) in a fresh process of this script (--in-process); their
    documents merged into a.out. A child's skip (77) or refusal (2) ends the run with
    its code, since every later row would meet the same cause."""
    doc = None
    with tempfile.TemporaryDirectory() as tmp:
        for i, (dm, T, L) in enumerate(rows):
            for j, name in enumerate(a.dtypes.split(",")):
                part = os.path.join(tmp, f"row{i}_{j}.json")
                cmd = [sys.executable, os.path.abspath(__file__), "--in-process", "--out", part,
                       "--peer-py", a.peer_py, "--rows", f"{dm}:{T}:{L}", "--dtypes", name,
                       "--batch", str(a.batch), "--reps", str(a.reps), "--inner", str(a.inner)]
                for e in a.ext:
                    cmd += ["--ext", e]
                if a.require_fast_path:
                    cmd.append("--require-fast-path")
                rc = subprocess.run(cmd).returncode
                if rc != 0:
                    print(f"peer_train_step: row {dm}:{T}:{L} {name} exited {rc}", file=sys.stderr)
                    return rc
                with open(part) as fh:
                    d = json.load(fh)
                if doc is None:
                    doc = d
                else:
                    doc["rows"] += d["rows"]
    doc["method"] += "; each row in a fresh process"
    write_doc(a.out, doc)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="time state-spaces/mamba's Mamba-1 block stack "
                                             "for one training step on bench_train_step's rows")
    ap.add_argument("--out", required=True)
    ap.add_argument("--peer-py", default="", help="folder where mamba_ssm and causal_conv1d import")
    ap.add_argument("--ext", action="append", default=[],
                    help="folder with a built peer extension (repeat for each)")
    ap.add_argument("--rows", default=DEFAULT_ROWS, help="comma-separated d_model:T:layers")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--require-fast-path", action="store_true",
                    help="exit 2 if causal_conv1d does not import (the slow path would run)")
    ap.add_argument("--in-process", action="store_true",
                    help="time every row in this process (default: each row in a fresh one, so "
                         "that no row's peak is read against what an earlier row left allocated, "
                         "such as PyTorch's cuBLAS workspaces)")
    a = ap.parse_args(argv)
    try:
        rows = parse_rows(a.rows)
    except ValueError as e:
        print(f"peer_train_step: {e}", file=sys.stderr)
        return 2
    bad = [d for d in a.dtypes.split(",") if d not in SHORT]
    if bad:
        print(f"peer_train_step: --dtypes {a.dtypes!r}: {', '.join(bad)} not one of "
              f"{', '.join(SHORT)}", file=sys.stderr)
        return 2
    if a.batch <= 0 or a.reps <= 0 or a.inner <= 0:
        print(f"peer_train_step: --batch {a.batch}, --reps {a.reps}, --inner {a.inner}: each must "
              "be > 0", file=sys.stderr)
        return 2
    if not a.in_process:
        return run_rows_in_children(a, rows)
    torch, skip = torch_with_gpu("peer_train_step")
    if skip:
        return skip
    try:
        Mamba, path = import_peer(a.peer_py, a.ext)
    except Exception as e:  # the peer is optional: say why it is not measured
        print(f"peer_train_step: the peer's Mamba block does not import ({e!r}); "
              f"--peer-py {a.peer_py!r}, --ext {a.ext!r}", file=sys.stderr)
        return 77
    print(f"peer_train_step: path {path}", flush=True)
    if a.require_fast_path and not path.startswith("fast"):
        print("peer_train_step: --require-fast-path and causal_conv1d did not import", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out_rows = []
    for dm, T, L in rows:
        for name in a.dtypes.split(","):
            r = time_row(torch, Mamba, dm, T, L, name, a)
            gc.collect()  # the row's model and tensors, before the next row (--in-process)
            torch.cuda.empty_cache()
            r["path"] = path
            out_rows.append(r)
            print(json.dumps(r), flush=True)
    doc = dict(schema="mambacheck-peer-train-step/1",
               peer="state-spaces/mamba Mamba-1 block stack (mamba_inner_fn, causal_conv1d)",
               model="x [B,T,d_model] -> layers x (x + Mamba(RMSNorm(x))), d_state 16, d_conv 4, "
                     "expand 2; loss sum(out*g); no optimizer",
               **device_fields(torch), tf32=False,
               method=f"eager: CUDA events around {a.inner} back-to-back steps, median of {a.reps}; "
                      f"graph: the step captured once, events around {a.inner} replays, median of "
                      f"{a.reps}; peak: torch.cuda.max_memory_allocated over one step",
               rows=out_rows)
    write_doc(a.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
