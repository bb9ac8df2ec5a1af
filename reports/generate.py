#!/usr/bin/python3
"""generate.py — precision.md, determinism.md and performance.md (+ PNG plots)
from the JSON of the benchmarks (Google Benchmark output of bench_scan and
bench_train_step) and of the validation suites (schema in reports/README.md).

Every number in the reports comes from the input files; a report whose input
is missing says "not measured". Invalid input (bad JSON, a row without a
required field) is an error naming the file and the field (exit code 2).

Usage:
  /usr/bin/python3 reports/generate.py --bench B.json ... --validation V.json ... --out DIR
"""

import argparse
import json
import math
import os
import re
import statistics
import sys

VALIDATION_SCHEMA = "mambacheck-validation/1"

# Context keys shown first (benchmark and validation files use the same names).
CONTEXT_KEYS = [
    ("gpu_name", "GPU"),
    ("gpu_index", "device index"),
    ("gpu_cc", "compute capability"),
    ("gpu_sm_count", "SM count"),
    ("gpu_sm_clock_khz", "SM clock (kHz)"),
    ("gpu_mem_clock_khz", "memory clock (kHz)"),
    ("gpu_mem_bus_width_bits", "memory bus (bits)"),
    ("gpu_total_mem_bytes", "device memory (bytes)"),
    ("gpu_l2_bytes", "L2 (bytes)"),
    ("cuda_driver", "CUDA driver"),
    ("cuda_runtime", "CUDA runtime"),
    ("cublas_version", "cuBLAS"),
    ("git_sha", "git sha"),
    ("git_tree", "git tree"),
    ("build_flags", "build flags"),
]

# What a bitwise-reproducibility claim depends on (determinism.md).
BITWISE_DEPENDS_ON = [
    "the GPU model and its SM count (launch geometry and cuBLAS kernel choice follow them)",
    "the driver, CUDA runtime and cuBLAS versions (cuBLAS may pick other kernels in another "
    "version: no stability across versions is claimed)",
    "the git sha and build flags (architecture list, no fast-math)",
    "the route: storage dtype, scan mode (sequential and parallel scans round differently) "
    "and GEMM math (f32 / TF32)",
    "the problem shape (B, T, d_model, d_state, ...): launch geometry is a pure function of the "
    "shape, but reductions are not batch-invariant — a different B or T gives other bits",
    "for CPU results, the OpenMP thread count where a reduction depends on it",
]


class InputError(Exception):
    """Invalid input file; the message names the file and the field."""


# ----------------------------------------------------------------------------
# Small helpers

def step_peak_bytes(r):
    """A bench_train_step row's peak device memory: peak_bytes, or model_bytes in files
    from before peak_bytes was recorded (the same figure); None when neither is there."""
    return r.get("peak_bytes") or r.get("model_bytes")


def num(v):
    """JSON number or numeric string (incl. 'inf', 'nan') -> float; None stays None."""
    if v is None:
        return None
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def truth(v, path, where):
    """JSON bool (or 'true'/'false', 0/1) -> bool; anything else is an input error."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise InputError(f"{path}: {where}: expected true/false, got {v!r}")


def fmt_us(v):
    """A time in µs for the side-by-side tables: whole µs from 100 up, one decimal below."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.1f}" if abs(v) < 99.95 else fmt(v, 6)  # 99.95 and up print as whole µs


def fmt(v, digits=3):
    """Compact number formatting for tables."""
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        return f"{v:.{digits - 1}e}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def si(v, unit=""):
    """1.23e9 -> '1.23 G<unit>'."""
    if v is None:
        return "—"
    for scale, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {p}{unit}"
    return f"{v:.3g} {unit}".rstrip()


def md_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        cells = [str(c).replace("|", "\\|").replace("\n", " ") for c in r]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def load_json(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e}")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON: {e}")


def require(obj, field, path, where):
    if not isinstance(obj, dict) or field not in obj:
        raise InputError(f"{path}: {where}: missing required field '{field}'")
    return obj[field]


def context_section(contexts, title="Context"):
    """contexts: list of (label, dict). Known keys first, then the rest verbatim."""
    lines = [f"## {title}", ""]
    if not contexts:
        lines.append("No context recorded.")
        return "\n".join(lines)
    for label, ctx in contexts:
        lines.append(f"**{label}**")
        lines.append("")
        rows = []
        for k, name in CONTEXT_KEYS:
            rows.append((name, ctx.get(k, "not recorded")))
        known = {k for k, _ in CONTEXT_KEYS}
        for k in sorted(ctx):
            if k not in known and not isinstance(ctx[k], (list, dict)):
                rows.append((k, ctx[k]))
        lines.append(md_table(["key", "value"], rows))
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------
# Benchmark JSON

SCAN_NAME = re.compile(r"^scan_(fwd|bwd|fwdbwd)/(f32|bf16|f16)/(sequential|parallel|chunked|checkpointed-hw|checkpointed-acc)/T:(\d+)/ds:(\d+)$")
STEP_NAME = re.compile(
    r"^train_step/([^/]+)/dm:(\d+)/L:(\d+)/B:(\d+)/T:(\d+)/(f32|bf16|f16)/gemm:([\w-]+)$")
TIME_UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
# Components Google Benchmark appends to a registered name (…/min_time:0.050/manual_time).
GB_SUFFIX = re.compile(r"^(min_time|min_warmup_time|iterations|repeats|threads):[^/]*$"
                       r"|^(manual_time|real_time|process_time)$")


def case_name(run_name):
    """The name the program registered: Google Benchmark's suffixes removed."""
    parts = run_name.split("/")
    while len(parts) > 1 and GB_SUFFIX.match(parts[-1]):
        parts.pop()
    return "/".join(parts)


def pick_rows(benchmarks, path):
    """One row per benchmark name: the 'median' aggregate when repetitions ran,
    else the median of the iteration rows; error rows kept as they are."""
    by_name = {}
    for i, b in enumerate(benchmarks):
        name = require(b, "name", path, f"benchmarks[{i}]")
        run_name = b.get("run_name", name)
        by_name.setdefault(run_name, []).append(b)
    out = []
    for run_name, rows in by_name.items():
        errors = [r for r in rows if r.get("error_occurred")]
        if errors:
            out.append(dict(errors[0], name=run_name))
            continue
        med = [r for r in rows if r.get("run_type") == "aggregate" and r.get("aggregate_name") == "median"]
        if med:
            out.append(dict(med[0], name=run_name))
            continue
        its = [r for r in rows if r.get("run_type", "iteration") == "iteration"]
        if not its:
            continue
        if len(its) == 1:
            out.append(dict(its[0], name=run_name))
            continue
        # several iteration rows (repetitions without aggregates): median per numeric field
        merged = dict(its[0], name=run_name)
        for k, v in its[0].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                vals = [num(r.get(k)) for r in its if num(r.get(k)) is not None]
                if vals:
                    merged[k] = statistics.median(vals)
        out.append(merged)
    return out


def seconds_of(row):
    t = num(row.get("real_time"))
    unit = row.get("time_unit", "ns")
    if t is None or unit not in TIME_UNIT_S:
        return None
    return t * TIME_UNIT_S[unit]


def load_bench(paths):
    """-> (contexts, scan_rows, step_rows, other_names)."""
    contexts, scan, step, other = [], [], [], []
    for path in paths:
        data = load_json(path)
        ctx = require(data, "context", path, "top level")
        benchmarks = require(data, "benchmarks", path, "top level")
        if not isinstance(benchmarks, list):
            raise InputError(f"{path}: 'benchmarks' is not a list")
        dev = f"{ctx.get('gpu_index', '?')}: {ctx.get('gpu_name', 'unknown GPU')}"
        prog = ctx.get("mc_program", os.path.basename(path))
        contexts.append((f"{prog} — {os.path.basename(path)} (device {dev})", ctx))
        for b in pick_rows(benchmarks, path):
            name = case_name(b["name"])
            b = dict(b, name=name)
            base = {
                "device": dev,
                "file": os.path.basename(path),
                "seconds": seconds_of(b),
                "error": b.get("error_message") if b.get("error_occurred") else None,
                "label": b.get("label", ""),
                "peak": num(ctx.get("peak_copy_GBps")),
                "raw": b,
            }
            m = SCAN_NAME.match(name)
            if m:
                base.update(op=m.group(1), dtype=m.group(2), mode=m.group(3),
                            T=int(m.group(4)), ds=int(m.group(5)))
                for k in ("tokens_per_s", "state_updates_per_s", "GBps", "GBps_impl", "bytes_min",
                          "pct_peak_bw", "speedup_vs_sequential", "speedup_vs_f32", "verified",
                          "verify_worst"):
                    base[k] = num(b.get(k))
                scan.append(base)
                continue
            m = STEP_NAME.match(name)
            if m:
                base.update(model=m.group(1), dm=int(m.group(2)), L=int(m.group(3)),
                            B=int(m.group(4)), T=int(m.group(5)), dtype=m.group(6),
                            # "gemm:f32" in files before the tiers: the strict tier
                            # (f32 PEDANTIC; bf16/f16 were always PEDANTIC then)
                            gemm="strict" if m.group(7) == "f32" else m.group(7))
                for k in ("tokens_per_s", "TFLOPs", "flops_per_step", "flops_gemm", "flops_scan",
                          "model_bytes", "mem_used_bytes", "parallel_scan", "checkpointed_scan",
                          "verified", "eager_us", "graph_us", "phase_gemm_us", "phase_scan_us",
                          "phase_elementwise_us", "gemm_TFLOPs", "peak_bytes", "graph_mem_bytes",
                          "peer_graph_us", "peer_peak_gib", "speedup_vs_peer", "target_speedup",
                          "meets_target", "peak_vs_peer", "graph_bitwise_equal",
                          "scan_checkpoint_group"):
                    base[k] = num(b.get(k))
                step.append(base)
                continue
            other.append(name)
    return contexts, scan, step, other


# ----------------------------------------------------------------------------
# Validation JSON

PREC_REQUIRED = ["dtype", "shape", "tensor", "k", "k_limit", "max_abs", "max_rel", "nmse",
                 "max_ulp", "pass"]
ORACLE_REQUIRED = ["config", "check", "rel_error", "rel_tol", "pass"]
DET_REQUIRED = ["test", "dtype", "scan", "runs", "hash", "identical", "first_diff_index", "ulp"]


def load_validation(paths, checks=None):
    """-> (contexts, precision_rows or None, determinism_rows or None, oracle_rows or None).
    `checks` (a list), when given, receives the rows of the optional 'checks' section
    (`mambacheck validate`: one row per check with its status and detail)."""
    contexts, prec, det, oracle = [], None, None, None
    for path in paths:
        data = load_json(path)
        if not isinstance(data, dict):
            raise InputError(f"{path}: top level is not an object")
        schema = data.get("schema", VALIDATION_SCHEMA)
        if schema != VALIDATION_SCHEMA:
            raise InputError(f"{path}: schema '{schema}' is not '{VALIDATION_SCHEMA}'")
        ctx = data.get("context", {})
        if not isinstance(ctx, dict):
            raise InputError(f"{path}: 'context' is not an object")
        contexts.append((os.path.basename(path), ctx))
        if "precision" in data:
            prec = prec or []
            for i, r in enumerate(data["precision"]):
                for f in PREC_REQUIRED:
                    require(r, f, path, f"precision[{i}]")
                fixed = {"pass": truth(r["pass"], path, f"precision[{i}].pass")}
                if "stat_pass" in r:  # the statistical checks (check/stats.hpp), optional
                    fixed["stat_pass"] = truth(r["stat_pass"], path, f"precision[{i}].stat_pass")
                prec.append(dict(r, file=os.path.basename(path), **fixed))
        if "determinism" in data:
            det = det or []
            for i, r in enumerate(data["determinism"]):
                for f in DET_REQUIRED:
                    require(r, f, path, f"determinism[{i}]")
                fixed = {"identical": truth(r["identical"], path, f"determinism[{i}].identical")}
                if "expected_identical" in r:
                    fixed["expected_identical"] = truth(r["expected_identical"], path,
                                                        f"determinism[{i}].expected_identical")
                det.append(dict(r, file=os.path.basename(path), **fixed))
        if "checks" in data and checks is not None:
            if not isinstance(data["checks"], list):
                raise InputError(f"{path}: 'checks' is not an array")
            for i, r in enumerate(data["checks"]):
                for f in ("config", "check", "status"):
                    require(r, f, path, f"checks[{i}]")
                checks.append(dict(r, file=os.path.basename(path)))
        if "oracle_checks" in data:
            oracle = oracle or []
            for i, r in enumerate(data["oracle_checks"]):
                for f in ORACLE_REQUIRED:
                    require(r, f, path, f"oracle_checks[{i}]")
                oracle.append(dict(r, file=os.path.basename(path),
                                   **{"pass": truth(r["pass"], path, f"oracle_checks[{i}].pass")}))
    return contexts, prec, det, oracle


MUTATION_SCHEMA = "mambacheck-mutation/1"


def load_mutation(path):
    data = load_json(path)
    if not isinstance(data, dict) or data.get("schema") != MUTATION_SCHEMA:
        raise InputError(f"{path}: not a '{MUTATION_SCHEMA}' document")
    for f in ("context", "control", "mutants", "summary"):
        require(data, f, path, "top level")
    for i, m in enumerate(data["mutants"]):
        for f in ("id", "status"):
            require(m, f, path, f"mutants[{i}]")
    return data


def load_peer_rows(path, kind, fields):
    """A peer document of bench/ (kind: its script's name): an object whose 'rows'
    each carry `fields`; the path is kept for the report's inputs line."""
    data = load_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a {kind} document (an object with 'rows')")
    rows = require(data, "rows", path, "top level")
    for i, r in enumerate(rows):
        for f in fields:
            require(r, f, path, f"rows[{i}]")
    return dict(data, _path=path)


def load_peer(path):
    """bench/peer_scan.py's JSON: state-spaces/mamba's selective scan timed on the
    same cases, in the same lease as bench_scan."""
    return load_peer_rows(path, "peer_scan",
                          ("dtype", "T", "d_state", "fwd_us", "bwd_us", "fwdbwd_us"))


def peer_section(peer, scan):
    """Ours against the peer, per case and op: µs side by side and peer / ours."""
    out = ["### Against state-spaces/mamba's selective scan (timed in the same run)", ""]
    out.append(f"Peer: `{os.path.basename(str(peer.get('module', '?')))}` on {peer.get('gpu', '?')}, "
               f"PyTorch {peer.get('torch', '?')}, CUDA {peer.get('cuda', '?')}, {peer.get('date', '?')}; "
               f"method: {peer.get('method', '?')}.")
    out.append("× = peer µs / our µs (above 1: ours is faster). Memory: our scan's own "
               "allocation (saved checkpoints + backward workspace, `scan_mem_bytes`) and the "
               "case's whole allocation (inputs, outputs and gradients too, `total_alloc_bytes`) "
               "beside the peer's peak allocation during its scan and its saved states. The peer's gradients "
               "that differ from run to run (atomics) are listed; ours are bitwise stable "
               "(determinism.md).")
    out.append("")
    ours = {}
    for r in scan:
        if r["error"] is None and r["seconds"]:
            ours[(r["dtype"], r["T"], r["ds"], r["mode"], r["op"])] = r
    modes = sorted({r["mode"] for r in scan})
    rows = []
    for pr in sorted(peer["rows"], key=lambda r: (DTYPES.index(r["dtype"]) if r["dtype"] in DTYPES else 9,
                                                  r["d_state"], r["T"])):
        key = (pr["dtype"], int(pr["T"]), int(pr["d_state"]))
        unstable = ", ".join(k for k, v in sorted((pr.get("bitwise_stable") or {}).items()) if not v)
        for mode in modes:
            rs = [ours.get(key + (mode, op)) for op in OPS]
            if not any(rs):
                continue
            us = [r["seconds"] * 1e6 if r else None for r in rs]
            pus = [num(pr["fwd_us"]), num(pr["bwd_us"]), num(pr["fwdbwd_us"])]
            ratio = [fmt(p / o) if (p and o) else "—" for p, o in zip(pus, us)]
            mem = next((num(r["raw"].get("scan_mem_bytes")) for r in reversed(rs) if r), None)
            alloc = next((num(r["raw"].get("total_alloc_bytes")) for r in reversed(rs) if r), None)
            rows.append((pr["dtype"], pr["T"], pr["d_state"], mode,
                         " / ".join(fmt_us(u) for u in us),
                         " / ".join(fmt_us(u) for u in pus), " / ".join(ratio),
                         si(mem, "B"), si(alloc, "B"), si(num(pr.get("peak_scan_bytes")), "B"),
                         si(num(pr.get("saved_state_bytes")), "B"), unstable or "none"))
    if not rows:
        return out + ["No case of the peer's file matches a bench_scan row.", ""]
    out.append(md_table(["dtype", "T", "d_state", "our route", "ours µs fwd / bwd / fwd+bwd",
                         "peer µs fwd / bwd / fwd+bwd", "× fwd / bwd / fwd+bwd", "our scan memory",
                         "our total allocation", "peer peak", "peer saved states",
                         "peer run-to-run varying"], rows))
    out.append("")
    return out


def load_peer_step(path):
    """bench/peer_train_step.py's JSON: the peer's Mamba-1 block stack timed for one
    training step on bench_train_step's rows, in the same lease as bench_train_step."""
    return load_peer_rows(path, "peer_train_step", ("d_model", "T", "layers", "dtype", "eager_us",
                                                     "graph_us", "peak_total_bytes"))


def peer_step_section(peer_step, step):
    """Our step against the peer's step timed in the same run: graph µs side by side,
    peer / ours, and the peak allocations."""
    out = ["### Against state-spaces/mamba's training step (timed in the same run)", ""]
    out.append(f"Peer: {peer_step.get('peer', '?')} on {peer_step.get('gpu', '?')}, PyTorch "
               f"{peer_step.get('torch', '?')}, CUDA {peer_step.get('cuda', '?')}, "
               f"{peer_step.get('date', '?')}; model: {peer_step.get('model', '?')}; method: "
               f"{peer_step.get('method', '?')}.")
    out.append("× = peer graph µs / our graph µs (above 1: ours is faster). Our step also runs "
               "the input projection and the final norm, which the peer's stack does not. "
               "Peak: our step's whole device allocation (`peak_bytes`) beside the peer's "
               "peak allocation, parameters and inputs included (`peak_total_bytes`). "
               "Stable gradients: tensors bitwise equal over two steps (ours: all, "
               "determinism.md).")
    out.append("")
    ours = {}
    for r in step:
        if r["error"] is None and r.get("graph_us"):
            ours[(r["dm"], r["T"], r["L"], r["dtype"])] = r
    rows = []
    for pr in sorted(peer_step["rows"], key=lambda r: (r["d_model"], r["layers"], r["T"],
                                                       DTYPES.index(r["dtype"]) if r["dtype"] in DTYPES else 9)):
        o = ours.get((int(pr["d_model"]), int(pr["T"]), int(pr["layers"]), pr["dtype"]))
        if o is None:
            continue
        pg, og = num(pr["graph_us"]), num(o.get("graph_us"))
        tgt = o.get("target_speedup")
        ratio = pg / og if (pg and og) else None
        ours_peak = step_peak_bytes(o)
        ppeak = num(pr["peak_total_bytes"])
        met = "—"
        if tgt and ratio is not None:
            met = "yes" if ratio >= tgt else "**NO**"
        stable = (f"{pr['grads_bitwise_stable']} of {pr['grads']}"
                  if pr.get("grads") is not None and pr.get("grads_bitwise_stable") is not None else "—")
        rows.append((f"{pr['d_model']} / {pr['T']}, {pr['layers']}", pr["dtype"], o["gemm"],
                     fmt(og), fmt(pg), fmt(num(pr["eager_us"])), fmt(ratio),
                     f"≥ {fmt(tgt)}" if tgt else "—", met,
                     fmt(ours_peak / 2**30 if ours_peak else None),
                     fmt(ppeak / 2**30 if ppeak else None),
                     fmt(ours_peak / ppeak if (ours_peak and ppeak) else None),
                     stable, pr.get("path", "?")))
    if not rows:
        return out + ["No row of the peer's file matches a bench_train_step row.", ""]
    out.append(md_table(["d_model / T, layers", "dtype", "our GEMM tier", "our graph µs",
                         "peer graph µs", "peer eager µs", "× peer", "target", "met",
                         "our peak GiB", "peer peak GiB", "peak / peer",
                         "peer stable gradients", "peer path"], rows))
    out.append("")
    return out


# ----------------------------------------------------------------------------
# Plots (matplotlib optional)

def get_pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except Exception:  # noqa: BLE001 — any import problem means "no plots"
        return None


OPS = ["fwd", "bwd", "fwdbwd"]
# Line style per scan route (bench_scan's route names, and the older files' two modes).
SCAN_MODE_STYLES = (("checkpointed-hw", "-"), ("checkpointed-acc", "-."), ("chunked", ":"),
                    ("parallel", "-"), ("sequential", "--"))
DTYPES = ["f32", "bf16", "f16"]


def plot_scan(plt, rows, metric, ylabel, path, logy):
    ok = [r for r in rows if r["error"] is None and r.get(metric) is not None]
    if not ok:
        return False
    ops = [o for o in OPS if any(r["op"] == o for r in ok)]
    dts = [d for d in DTYPES if any(r["dtype"] == d for r in ok)]
    dss = sorted({r["ds"] for r in ok})
    devices = sorted({r["device"] for r in ok})
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(len(ops), len(dts), figsize=(4.2 * len(dts), 3.2 * len(ops)),
                             squeeze=False, sharex=True)
    for i, op in enumerate(ops):
        for j, dt in enumerate(dts):
            ax = axes[i][j]
            for k, ds in enumerate(dss):
                color = cmap(k / max(1, len(dss) - 1))
                for mode, style in SCAN_MODE_STYLES:
                    for dev in devices:
                        pts = sorted((r["T"], r[metric], r.get("verified")) for r in ok
                                     if r["op"] == op and r["dtype"] == dt and r["ds"] == ds
                                     and r["mode"] == mode and r["device"] == dev)
                        if not pts:
                            continue
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color,
                                marker="o", markersize=3,
                                label=f"ds={ds} {mode}" if dev == devices[0] else None)
                        bad = [p for p in pts if p[2] is not None and p[2] < 1]
                        if bad:
                            ax.plot([p[0] for p in bad], [p[1] for p in bad], "x", color="red",
                                    markersize=9, mew=2)
            ax.set_xscale("log", base=2)
            if logy:
                ax.set_yscale("log")
            ax.set_title(f"{op} / {dt}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if i == len(ops) - 1:
                ax.set_xlabel("T")
            if j == 0:
                ax.set_ylabel(ylabel)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=7)
    fig.suptitle(f"bench_scan: {ylabel} (solid checkpointed-hw / parallel, dash-dot checkpointed-acc, "
                 "dotted chunked, dashed sequential; red x = unverified)", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_steps(plt, rows, path):
    ok = [r for r in rows if r["error"] is None and r.get("TFLOPs") is not None]
    if not ok:
        return False
    ok = sorted(ok, key=lambda r: (r["dm"], r["L"], r["T"], r["dtype"]))
    labels = [f"dm{r['dm']} L{r['L']} T{r['T']} {r['dtype']}" for r in ok]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(ok)), 4))
    colors = ["tab:blue" if r["dtype"] == "f32" else "tab:orange" for r in ok]
    ax.bar(range(len(ok)), [r["TFLOPs"] for r in ok], color=colors)
    ax.set_xticks(range(len(ok)))
    ax.set_xticklabels(labels, rotation=70, fontsize=7)
    ax.set_ylabel("TFLOP/s (flop model in performance.md)")
    ax.set_title("bench_train_step: forward + backward", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_k(plt, rows, path):
    pts = [r for r in rows if num(r["k"]) is not None]
    if not pts:
        return False
    dts = [d for d in DTYPES if any(r["dtype"] == d for r in pts)] + sorted(
        {r["dtype"] for r in pts} - set(DTYPES))
    tensors = sorted({r["tensor"] for r in pts})
    worst = {}
    limits = {}
    for r in pts:
        k = num(r["k"])
        key = (r["tensor"], r["dtype"])
        worst[key] = max(worst.get(key, -1.0), k)
        limits[r["dtype"]] = max(limits.get(r["dtype"], 0.0), num(r["k_limit"]) or 0.0)
    fig, ax = plt.subplots(figsize=(8, max(3, 0.28 * len(tensors) * max(1, len(dts)) / 1.5)))
    h = 0.8 / max(1, len(dts))
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    finite_max = max([v for v in worst.values() if math.isfinite(v)] + list(limits.values()) + [1.0])
    for j, dt in enumerate(dts):
        ys, ks = [], []
        for i, t in enumerate(tensors):
            if (t, dt) in worst:
                ys.append(i + (j - (len(dts) - 1) / 2) * h)
                k = worst[(t, dt)]
                ks.append(k if math.isfinite(k) else 1.5 * finite_max)
        ax.barh(ys, ks, height=h, color=colors[j % len(colors)], label=f"{dt} (k_limit {fmt(limits[dt])})")
        for i, t in enumerate(tensors):
            if (t, dt) in worst and not math.isfinite(worst[(t, dt)]):
                ax.text(1.5 * finite_max, i + (j - (len(dts) - 1) / 2) * h, " inf",
                        va="center", fontsize=7)
        ax.axvline(limits[dt], color=colors[j % len(colors)], linestyle="--", linewidth=1)
    ax.set_yticks(range(len(tensors)))
    ax.set_yticklabels(tensors, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("k = max|K-O| / max|P-O|  (worst over shapes; dashed: k_limit; inf drawn past the axis)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def row_verdict(r):
    """A precision row passes when the k-rule and (where present) the statistics do."""
    return bool(r["pass"]) and r.get("stat_pass", True) is not False


def stat_ratios(r):
    """(max(|z_bias|, |z_mag|) / z_limit, k_rms / k_rms_limit) of a row, None where absent."""
    zl, kl = num(r.get("z_limit")), num(r.get("k_rms_limit"))
    zs = [abs(num(r.get(f))) for f in ("z_bias", "z_mag") if num(r.get(f)) is not None]
    z = max(zs) / zl if zs and zl else None
    k = num(r.get("k_rms")) / kl if num(r.get("k_rms")) is not None and kl else None
    return z, k


def plot_stats(plt, rows, path):
    """Every tensor's two statistics against their limits: inside the unit box passes."""
    pts = [(r, *stat_ratios(r)) for r in rows]
    pts = [(r, z, k) for r, z, k in pts if z is not None and k is not None]
    if not pts:
        return False
    fig, ax = plt.subplots(figsize=(7, 5))
    colors = {"f32": "tab:blue", "bf16": "tab:orange", "f16": "tab:green"}
    cap = 4.0
    for dt in sorted({r["dtype"] for r, _, _ in pts}):
        sel = [(min(z, cap), min(k, cap)) for r, z, k in pts if r["dtype"] == dt]
        ax.scatter([x for x, _ in sel], [y for _, y in sel], s=10, alpha=0.6,
                   color=colors.get(dt, "tab:gray"), label=f"{dt} ({len(sel)} tensors)")
    ax.axvline(1.0, color="k", linestyle="--", linewidth=1)
    ax.axhline(1.0, color="k", linestyle="--", linewidth=1)
    ax.set_xlim(0, cap * 1.05)
    ax.set_ylim(0, cap * 1.05)
    ax.set_xlabel("bias: max(|z_bias|, |z_mag|) / z_limit")
    ax.set_ylabel("RMS: k_rms / k_rms_limit")
    ax.set_title("statistical checks per tensor (pass: inside the dashed box; capped at 4)",
                 fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------
# Reports

NOT_MEASURED = "**not measured** — {why}"


def gpu_absence(contexts):
    """Why there are no GPU results, from the validation contexts: "no usable GPU on this
    machine (<reason>)" when no input ran on a GPU and one recorded the reason, "GPU checks
    were not requested (...)" when they were switched off; None otherwise."""
    if not contexts or any(str(c.get("gpu_name", "none")) != "none" for _, c in contexts):
        return None
    for _, c in contexts:
        if c.get("gpu_unavailable_reason"):
            return f"no usable GPU on this machine ({c['gpu_unavailable_reason']})."
    for _, c in contexts:
        g = str(c.get("gpu_checks", ""))
        if g.startswith("not requested"):
            return f"GPU checks were {g}."
    return None


def not_run_section(checks):
    """Requested checks that did not run (with the reason), from the 'checks' rows."""
    rows = [r for r in checks or [] if r.get("status") == "not_run"]
    if not rows:
        return []
    out = ["## Checks that did not run", ""]
    out.append(md_table(["config", "check", "reason"],
                        [(r["config"], r["check"], r.get("detail", "")) for r in rows]))
    out.append("")
    return out


def performance_md(bench_paths, contexts, scan, step, other, plots, val_contexts=None, peer=None,
                   peer_step=None):
    out = ["# Performance", ""]
    if not bench_paths:
        why = gpu_absence(val_contexts) or "no benchmark JSON was given (--bench)."
        out += [NOT_MEASURED.format(why=why), ""]
        return "\n".join(out) + "\n"
    out.append("Inputs: " + ", ".join(f"`{os.path.basename(p)}`" for p in bench_paths)
               + (f"; the peer: `{os.path.basename(peer['_path'])}`" if peer else "")
               + (f"; the peer's step: `{os.path.basename(peer_step['_path'])}`" if peer_step else ""))
    out.append("")
    out.append("Speeds are measurements of this run on this device, reported, never asserted. "
               "Ratios (speedup_*) compare against baselines measured in the same run.")
    out.append("")
    out.append(context_section(contexts, "Context (per input file)"))
    # Method sentences, once per distinct value.
    method_keys = ["timing", "l2_policy", "peak_copy_method", "bytes_formula", "baselines",
                   "inputs", "verify_method", "flop_model", "memory"]
    out += ["## Method", ""]
    for k in method_keys:
        vals = sorted({str(c.get(k)) for _, c in contexts if c.get(k) is not None})
        for v in vals:
            out.append(f"* **{k}**: {v}")
    out.append("")

    # bench_scan
    out += ["## bench_scan", ""]
    if not scan:
        out += [NOT_MEASURED.format(why="no bench_scan rows in the inputs."), ""]
    else:
        shapes = sorted({(c.get("scan_B"), c.get("scan_d_inner")) for _, c in contexts
                         if c.get("scan_B") is not None})
        for B, di in shapes:
            out.append(f"Fixed shape: B = {B}, d_inner = {di}.")
        peaks = sorted({(r["device"], r["peak"]) for r in scan})
        for dev, pk in peaks:
            out.append(f"Measured peak (device-to-device copy) on device {dev}: "
                       f"{fmt(pk)} GB/s.")
        out.append("")
        if plots.get("throughput"):
            out.append("![tokens/s vs T](perf_scan_throughput.png)")
        if plots.get("pct_peak"):
            out.append("![% of peak bandwidth vs T](perf_scan_pct_peak.png)")
        out.append("")
        bad = [r for r in scan if r["error"] is None and r.get("verified") is not None
               and r["verified"] < 1]
        if bad:
            out += ["### Rows that FAILED verification (their speeds are meaningless)", ""]
            out.append(md_table(["case", "device", "disposition"],
                                [(r["raw"]["name"], r["device"], r["label"]) for r in bad]))
            out.append("")
        rows = []
        order = {o: i for i, o in enumerate(OPS)}
        dto = {d: i for i, d in enumerate(DTYPES)}
        for r in sorted([r for r in scan if r["error"] is None],
                        key=lambda r: (order.get(r["op"], 9), dto.get(r["dtype"], 9), r["ds"],
                                       r["T"], r["mode"], r["device"])):
            rows.append((r["op"], r["dtype"], r["mode"], r["T"], r["ds"],
                         fmt(r["seconds"] * 1e6 if r["seconds"] else None),
                         si(r["tokens_per_s"]), fmt(r["GBps"]), fmt(r["GBps_impl"]),
                         fmt(r["pct_peak_bw"]), fmt(r["speedup_vs_sequential"]),
                         fmt(r["speedup_vs_f32"]),
                         "yes" if r.get("verified") == 1 else ("NO" if r.get("verified") is not None else "—"),
                         r["device"]))
        if rows:
            out.append(md_table(["op", "dtype", "mode", "T", "d_state", "µs", "tokens/s",
                                 "GB/s (min bytes)", "GB/s (impl bytes)", "% peak",
                                 "× vs sequential", "× vs f32", "verified", "device"], rows))
            out.append("")
        if peer:
            out += peer_section(peer, scan)
        skipped = [r for r in scan if r["error"] is not None]
        if skipped:
            out += ["### Skipped or failed cases", ""]
            out.append(md_table(["case", "device", "reason"],
                                [(r["raw"]["name"], r["device"], r["error"]) for r in skipped]))
            out.append("")

    # bench_train_step
    out += ["## bench_train_step", ""]
    if not step:
        out += [NOT_MEASURED.format(why="no bench_train_step rows in the inputs."), ""]
    else:
        if plots.get("steps"):
            out += ["![TFLOP/s per case](perf_train_step.png)", ""]
        bad = [r for r in step if r["error"] is None and
               ((r.get("verified") is not None and r["verified"] < 1) or
                (r.get("graph_bitwise_equal") is not None and r["graph_bitwise_equal"] < 1))]
        if bad:
            out += ["### Rows that FAILED verification", ""]
            out.append(md_table(["case", "device", "disposition"],
                                [(r["raw"]["name"], r["device"], r["label"]) for r in bad]))
            out.append("")
        step_ctx = [c for _, c in contexts if c.get("mc_program") == "bench_train_step"]
        for k in ("graph", "phases", "peer", "targets"):
            for v in sorted({str(c[k]) for c in step_ctx if c.get(k) is not None}):
                out.append(f"* **{k}**: {v}")
        if any(c.get(k) is not None for c in step_ctx for k in ("graph", "phases", "peer", "targets")):
            out.append("")

        def ms(us):
            return fmt(us / 1e3) if us else "—"

        def scan_name(r):
            if r.get("checkpointed_scan") is not None:
                if r["checkpointed_scan"] != 1:
                    return "other"
                g = r.get("scan_checkpoint_group")
                # grouped checkpoints: one saved state per g chunks (kernels/scan/scan.hpp)
                return f"checkpointed, a state per {int(g)} chunks" if g and g > 1 else "checkpointed"
            return "parallel" if r.get("parallel_scan") == 1 else "sequential"

        def yes_no(v):
            return "yes" if v == 1 else ("NO" if v is not None else "—")

        ok = sorted([r for r in step if r["error"] is None],
                    key=lambda r: (r["dm"], r["L"], r["T"], r["dtype"], r["gemm"]))
        rows = []
        for r in ok:
            # real_time is the eager step in files without eager_us (before graphs)
            eager = r["eager_us"] if r.get("eager_us") else (
                r["seconds"] * 1e6 if r["seconds"] and r.get("graph_us") is None else None)
            peak = step_peak_bytes(r)
            rows.append((r["model"], r["dm"], r["L"], r["B"], r["T"], r["dtype"], r["gemm"],
                         ms(eager), ms(r.get("graph_us")),
                         si(r["tokens_per_s"]), fmt(r["TFLOPs"]),
                         fmt(peak / 2**30 if peak else None),
                         fmt(r["mem_used_bytes"] / 2**30 if r["mem_used_bytes"] else None),
                         scan_name(r), yes_no(r.get("verified")),
                         yes_no(r.get("graph_bitwise_equal")), r["device"]))
        if rows:
            out.append(md_table(["width of", "d_model", "layers", "B", "T", "dtype", "GEMM tier",
                                 "eager ms", "graph ms", "tokens/s", "TFLOP/s", "peak GiB",
                                 "used GiB", "scan", "verified", "graph = eager bits", "device"],
                                rows))
            out.append("")
        peer = [r for r in ok if r.get("peer_graph_us")]
        if peer:
            out += ["### Against state-spaces/mamba (graph figures, bench/README.md's peer table)", ""]
            out.append("× peer = peer graph time / our graph time (higher is faster); the target "
                       "applies to bf16 on the tensor-core tier (≥ 2×) and f32 on the strict "
                       "tier (≥ 1.5×). The peer's figures are the ones compiled into "
                       "bench_train_step (its `peer` line above says where they were measured), "
                       "not measured in this run"
                       + ("; the next table has the peer timed in this run." if peer_step else
                          "; bench/peer_train_step.py times the peer where ours runs."))
            out.append("")
            prow = []
            for r in peer:
                tgt = r.get("target_speedup")
                prow.append((f"{r['dm']} / {r['T']}, {r['L']}", r["dtype"], r["gemm"],
                             fmt(r.get("graph_us")), fmt(r["peer_graph_us"]),
                             fmt(r.get("speedup_vs_peer")),
                             f"≥ {fmt(tgt)}" if tgt else "—",
                             ("yes" if r.get("meets_target") == 1 else "**NO**") if tgt else "—",
                             fmt((step_peak_bytes(r) or 0) / 2**30),
                             fmt(r.get("peer_peak_gib")), fmt(r.get("peak_vs_peer"))))
            out.append(md_table(["d_model / T, layers", "dtype", "GEMM tier", "graph µs",
                                 "peer graph µs", "× peer", "target", "met", "peak GiB",
                                 "peer peak GiB", "peak / peer"], prow))
            out.append("")
        if peer_step:
            out += peer_step_section(peer_step, ok)
        phased = [r for r in ok if r.get("phase_gemm_us") is not None]
        if phased:
            out += ["### Phase breakdown (eager steps, CUDA events)", ""]
            frow = []
            for r in phased:
                g, sc, e = r["phase_gemm_us"], r["phase_scan_us"] or 0, r["phase_elementwise_us"] or 0
                tot = (g or 0) + sc + e

                def pct(v):
                    return f"{fmt(v)} ({100 * v / tot:.0f}%)" if tot else fmt(v)
                frow.append((f"{r['dm']} / {r['T']}, {r['L']}", r["dtype"], r["gemm"], pct(g or 0),
                             pct(sc), pct(e), fmt(tot), fmt(r.get("gemm_TFLOPs"))))
            out.append(md_table(["d_model / T, layers", "dtype", "GEMM tier", "GEMM µs",
                                 "scan µs", "elementwise µs", "total µs", "GEMM TFLOP/s"], frow))
            out.append("")
        skipped = [r for r in step if r["error"] is not None]
        if skipped:
            out += ["### Skipped or failed cases", ""]
            out.append(md_table(["case", "device", "reason"],
                                [(r["raw"]["name"], r["device"], r["error"]) for r in skipped]))
            out.append("")
    if other:
        out += ["## Other benchmark rows (not recognised, listed only)", ""]
        out += [f"* `{n}`" for n in other]
        out.append("")
    return "\n".join(out) + "\n"


def oracle_section(oracle):
    """The CPU oracle's own checks (f64 finite differences), when the input has them."""
    if not oracle:
        return []
    n_fail = sum(1 for r in oracle if not r["pass"])
    out = ["## Oracle self-checks (CPU, f64 finite differences)", ""]
    out.append(f"{len(oracle) - n_fail} of {len(oracle)} pass"
               + (f"; **{n_fail} FAIL** — GPU comparisons against a failing oracle mean nothing."
                  if n_fail else "."))
    out.append("")
    out.append(md_table(["config", "check", "rel error", "rel tol", "verdict"],
                        [(r["config"], r["check"], fmt(num(r["rel_error"])),
                          fmt(num(r["rel_tol"])), "pass" if r["pass"] else "**FAIL**")
                         for r in oracle]))
    out.append("")
    return out


def stats_section(prec, plots):
    rows = [r for r in prec if "k_rms" in r]
    if not rows:
        return []
    out = ["## Statistical checks", ""]
    out.append("Beside the k-rule, every tensor gets three statistics against an ensemble of Monte "
               "Carlo arithmetic runs of the oracle (check/stats.hpp; derivation in "
               "docs/precision-statistics.md): the bias z = mean(K−O) / σ̂ and the magnitude bias "
               "z_mag = mean((K−O)·sign O) / σ̂ in units of the ensemble's noise, limit z_limit "
               "(Student t_m, α = 1e-6), and k_rms = rms(K−O) / rms(P−O) against its derived "
               "limit k_rms_limit (F distribution with the tensor's effective degrees of freedom, "
               "times 1.5 for the kernel's own summation order). They see what stays inside the "
               "k-rule's bound: a biased rounding at a storage point, a less accurate elementary "
               "function.")
    out.append("")
    table = []
    for dt in sorted({r["dtype"] for r in rows}, key=lambda d: (DTYPES + [d]).index(d)):
        rs = [r for r in rows if r["dtype"] == dt]
        ratios = [stat_ratios(r) for r in rs]
        zs = [z for z, _ in ratios if z is not None]
        ks = [k for _, k in ratios if k is not None]
        worst = max(rs, key=lambda r: max([x for x in stat_ratios(r) if x is not None] + [-1]))
        table.append((dt, len(rs), sum(1 for r in rs if r.get("stat_pass") is False),
                      fmt(max(zs) if zs else None), fmt(max(ks) if ks else None),
                      f"{worst['tensor']} @ {worst['shape']}"))
    out.append(md_table(["dtype", "tensors", "stat fail", "worst |z|/z_limit",
                         "worst k_rms/limit", "closest to a limit"], table))
    out.append("")
    if plots.get("stats"):
        out += ["![statistics per tensor](precision_stats.png)", ""]
    return out


def mutation_section(mut):
    """The mutation runner's result (scripts/mutate.sh run -> mutation.json)."""
    if mut is None:
        return []
    out = ["## Mutation testing", ""]
    s = mut.get("summary", {})
    ctx = mut.get("context", {})
    ctrl = mut.get("control", {})
    out.append("Plausible small faults planted in kernels/, one at a time (validation/mutants/*.patch, "
               "scripts/mutate.sh): each mutant libmc_kernels.so is swapped into a copy of the staged "
               "build and faces the fast GPU suite " + ", ".join(f"`{c}`" for c in ctx.get("suite", []))
               + f" on {ctx.get('gpu', '?')} (commit {ctx.get('git_sha', '?')}). A mutant is killed "
               "when a suite command fails, crashes or times out. The unmutated control runs first: "
               + ("**it passed**" if ctrl.get("pass") else f"**it FAILED** ({ctrl.get('why', '?')})")
               + f" in {fmt(num(ctrl.get('seconds')))} s.")
    out.append("")
    rate = num(s.get("kill_rate"))
    out.append(f"**Kill rate {fmt(100 * rate) + ' %' if rate is not None else 'n/a'}**: "
               f"{s.get('killed', 0)} killed, {s.get('survived', 0)} survived"
               + (f", {s.get('not_run')} not run" if s.get("not_run") else "")
               + f" of {s.get('total', 0)} mutants"
               + (f"; {s.get('equivalent_survivors')} of the survivors are equivalent (explained below), "
                  f"so **{fmt(100 * num(s.get('kill_rate_non_equivalent')))} %** of the mutants a test "
                  "could see were killed." if s.get("kill_rate_non_equivalent") is not None else "."))
    out.append("")
    ms = mut.get("mutants", [])
    fams = {}
    for m in ms:
        f = fams.setdefault(m.get("family", "?"), [0, 0, 0])
        f[0 if m.get("status") == "killed" else 1 if m.get("status") == "survived" else 2] += 1
    if fams:
        out.append(md_table(["kernel family", "killed", "survived", "not run"],
                            [(k, v[0], v[1], v[2]) for k, v in sorted(fams.items())]))
        out.append("")
    surv = [m for m in ms if m.get("status") == "survived"]
    if surv:
        out += ["### Survivors", ""]
        for m in surv:
            why = (f"equivalent: {m['equivalent']}" if m.get("equivalent") else
                   "not equivalent: a test that sees it is still missing")
            out.append(f"* `{m['id']}` ({m.get('family')}, {m.get('kind')}): {m.get('what')} — {why}")
        out.append("")
    if ms:
        out += ["### Every mutant", ""]
        out.append(md_table(["mutant", "family", "kind", "status", "killed by", "s"],
                            [(m.get("id"), m.get("family"), m.get("kind"),
                              m.get("status") if m.get("status") != "survived" else "**survived**",
                              m.get("killed_by", m.get("why", "—")), fmt(num(m.get("seconds"))))
                             for m in ms]))
        out.append("")
    return out


def precision_md(val_paths, contexts, prec, plots, oracle=None, checks=None, mutation=None):
    out = ["# Precision", ""]
    if mutation is not None and (not val_paths or prec is None):
        out += mutation_section(mutation)
    if val_paths and not prec and (oracle or gpu_absence(contexts)):
        why = gpu_absence(contexts) or ("the validation JSON has no 'precision' section "
                                        "(GPU comparisons).")
        out += [NOT_MEASURED.format(why="GPU comparisons: " + why), ""]
        out += oracle_section(oracle)
        out += not_run_section(checks)
        out.append(context_section(contexts))
        return "\n".join(out) + "\n"
    if not val_paths or prec is None:
        why = ("no validation JSON was given (--validation)." if not val_paths
               else "the validation JSON has no 'precision' section.")
        out += [NOT_MEASURED.format(why=why), ""]
        return "\n".join(out) + "\n"
    out.append("Rule (check/compare.hpp): a kernel result K passes when "
               "max|K − O| ≤ k_limit · max|P − O| + atol, with O the f64 CPU oracle and P the "
               "CPU baseline in the same storage precision on the same quantised inputs; "
               "k = max|K − O| / max|P − O| is the measured, dimensionless error ratio.")
    out.append("")
    out.append(context_section(contexts))
    out += oracle_section(oracle)
    out += not_run_section(checks)
    if not prec:
        out += [NOT_MEASURED.format(why="the 'precision' section is empty."), ""]
        return "\n".join(out) + "\n"
    n_fail = sum(1 for r in prec if not row_verdict(r))
    out += ["## Summary", ""]
    out.append(f"{len(prec) - n_fail} of {len(prec)} tensor comparisons pass"
               + (f"; **{n_fail} FAIL**." if n_fail else "."))
    out.append("")
    summary = []
    for dt in sorted({r["dtype"] for r in prec}, key=lambda d: (DTYPES + [d]).index(d)):
        rs = [r for r in prec if r["dtype"] == dt]
        ks = [num(r["k"]) for r in rs if num(r["k"]) is not None]
        ratio = [num(r["k"]) / num(r["k_limit"]) for r in rs
                 if num(r["k"]) is not None and num(r["k_limit"])]
        worst = max(rs, key=lambda r: num(r["k"]) if num(r["k"]) is not None else -1)
        summary.append((dt, len(rs), sum(1 for r in rs if not row_verdict(r)),
                        fmt(max(ks) if ks else None), fmt(statistics.median(ks) if ks else None),
                        fmt(max(ratio) if ratio else None),
                        f"{worst['tensor']} @ {worst['shape']}"))
    out.append(md_table(["dtype", "comparisons", "fail", "worst k", "median k", "worst k/k_limit",
                         "worst at"], summary))
    out.append("")
    if plots.get("k"):
        out += ["![k per tensor](precision_k.png)", ""]
    out += stats_section(prec, plots)
    out += mutation_section(mutation)
    fails = [r for r in prec if not row_verdict(r)]
    if fails:
        out += ["## Failures", ""]
        out.append(md_table(["dtype", "shape", "tensor", "k", "k_limit", "max abs", "statistics"],
                            [(r["dtype"], r["shape"], r["tensor"], fmt(num(r["k"])),
                              fmt(num(r["k_limit"])), fmt(num(r["max_abs"])),
                              ("FAIL (" + str(r.get("stat_failed", "")) + ")")
                              if r.get("stat_pass") is False else "—") for r in fails]))
        out.append("")
    out += ["## All comparisons", ""]
    extra = [f for f in ("suite", "config", "scan", "headroom", "baseline_max_abs", "z_bias",
                         "z_mag", "z_limit", "k_rms", "k_rms_limit")
             if any(f in r for r in prec)]
    rows = []
    for r in sorted(prec, key=lambda r: ((DTYPES + [r["dtype"]]).index(r["dtype"]), str(r["shape"]),
                                         str(r["tensor"]))):
        rows.append([r["dtype"], r["shape"], r["tensor"], fmt(num(r["k"])), fmt(num(r["k_limit"])),
                     fmt(num(r["max_abs"])), fmt(num(r["max_rel"])), fmt(num(r["nmse"])),
                     fmt(num(r["max_ulp"])), "pass" if row_verdict(r) else "**FAIL**"]
                    + [fmt(num(r[f])) if num(r.get(f)) is not None else str(r.get(f, "—"))
                       for f in extra])
    out.append(md_table(["dtype", "shape", "tensor", "k", "k_limit", "max abs", "max rel", "NMSE",
                         "max ULP", "verdict"] + extra, rows))
    out.append("")
    return "\n".join(out) + "\n"


def determinism_md(val_paths, contexts, det):
    out = ["# Determinism", ""]
    if not val_paths or det is None:
        why = ("no validation JSON was given (--validation)." if not val_paths
               else "the validation JSON has no 'determinism' section.")
        out += [NOT_MEASURED.format(why=why), ""]
        return "\n".join(out) + "\n"
    out += ["## What a bitwise claim here depends on", ""]
    out.append("A row marked identical means: on the tuple below, repeated runs produced the same "
               "bytes. It is not a claim about any other tuple. The tuple is:")
    out.append("")
    out += [f"* {s}" for s in BITWISE_DEPENDS_ON]
    out.append("")
    out.append(context_section(contexts))
    if not det:
        out += [NOT_MEASURED.format(why="the 'determinism' section is empty."), ""]
        return "\n".join(out) + "\n"
    cpu_rows = [r for r in det if str(r["test"]).startswith("cpu_")]
    if len(cpu_rows) == len(det) and gpu_absence(contexts):
        out += [NOT_MEASURED.format(why="GPU determinism: " + gpu_absence(contexts)), ""]
        out.append("The rows below are the CPU oracle's OpenMP thread-count invariance "
                   "(`mambacheck validate`).")
        out.append("")

    def required(r):
        return r.get("required", True) is not False

    def verdict(r):
        expected = r.get("expected_identical", True)
        return bool(r["identical"]) == bool(expected)

    def verdict_text(r):
        if not required(r):
            return "reported (not required)"
        return "ok" if verdict(r) else "**UNEXPECTED**"

    req = [r for r in det if required(r)]
    n_bad = sum(1 for r in req if not verdict(r))
    n_info = len(det) - len(req)
    out += ["## Summary", ""]
    out.append(f"{len(req) - n_bad} of {len(req)} required checks behave as expected"
               + (f"; **{n_bad} do not**." if n_bad else ".")
               + (f" {n_info} further rows are measured and reported, not required "
                  f"(e.g. batch composition)." if n_info else ""))
    out.append("Negative controls (expected_identical = false) pass when a difference IS detected.")
    out.append("")
    rows = []
    for r in det:
        test = f"{r['test']} ({r['config']})" if r.get("config") else r["test"]
        rows.append((test, r["dtype"], r["scan"], r["runs"], f"`{r['hash']}`",
                     "yes" if r["identical"] else "NO",
                     "yes" if r.get("expected_identical", True) else "no (negative control)",
                     r["first_diff_index"] if not r["identical"] else "—",
                     r["ulp"] if not r["identical"] else "—",
                     verdict_text(r),
                     r.get("note", "")))
    out.append(md_table(["test", "dtype", "scan", "runs", "hash (FNV-1a 64)", "identical",
                         "expected identical", "first diff index", "ULP there", "verdict", "note"],
                        rows))
    out.append("")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", nargs="*", default=[], help="Google Benchmark JSON files")
    ap.add_argument("--validation", nargs="*", default=[], help="validation JSON files")
    ap.add_argument("--mutation", help="the mutation runner's mutation.json (scripts/mutate.sh run)")
    ap.add_argument("--peer", help="bench/peer_scan.py's JSON (the peer's scan, same cases, same run)")
    ap.add_argument("--peer-step", help="bench/peer_train_step.py's JSON (the peer's training step, "
                                        "same rows, same run)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"))
    a = ap.parse_args(argv)
    try:
        b_ctx, scan, step, other = load_bench(a.bench)
        checks = []
        v_ctx, prec, det, oracle = load_validation(a.validation, checks)
        mutation = load_mutation(a.mutation) if a.mutation else None
        peer = load_peer(a.peer) if a.peer else None
        peer_step = load_peer_step(a.peer_step) if a.peer_step else None
    except InputError as e:
        print(f"generate.py: error: {e}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    plt = get_pyplot()
    plots = {}
    if plt is not None:
        plots["throughput"] = plot_scan(plt, scan, "tokens_per_s", "tokens/s",
                                        os.path.join(a.out, "perf_scan_throughput.png"), True)
        plots["pct_peak"] = plot_scan(plt, scan, "pct_peak_bw", "% of peak bandwidth",
                                      os.path.join(a.out, "perf_scan_pct_peak.png"), False)
        plots["steps"] = plot_steps(plt, step, os.path.join(a.out, "perf_train_step.png"))
        plots["k"] = plot_k(plt, prec or [], os.path.join(a.out, "precision_k.png"))
        plots["stats"] = plot_stats(plt, prec or [], os.path.join(a.out, "precision_stats.png"))
    reports = {
        "performance.md": performance_md(a.bench, b_ctx, scan, step, other, plots, v_ctx, peer,
                                         peer_step),
        "precision.md": precision_md(a.validation, v_ctx, prec, plots, oracle, checks, mutation),
        "determinism.md": determinism_md(a.validation, v_ctx, det),
    }
    if plt is None:
        for k in reports:
            reports[k] += "\n_Plots not drawn: matplotlib is not importable._\n"
    for name, text in reports.items():
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            f.write(text)
    print(f"generate.py: wrote {', '.join(sorted(reports))} and "
          f"{sum(1 for v in plots.values() if v)} plot(s) to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
