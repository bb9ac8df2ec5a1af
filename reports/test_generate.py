#!/usr/bin/python3
"""test_generate.py — tests of reports/generate.py (ctest reports_generate, label cpu).

All inputs are SYNTHETIC FIXTURES built here in a temporary directory; their
numbers are invented to exercise the generator and are not results of
anything. Checks: the three reports and the plots are written; values, failed
verifications, skipped cases, precision failures and unexpected determinism
rows are shown; per-device shard files merge; missing inputs give "not
measured", with "no usable GPU on this machine (<reason>)" where that is the
cause; invalid inputs stop with an error naming the file and field; the
statistical-check columns and the mutation-testing section appear when given.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATE = os.path.join(HERE, "generate.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False


def bench_context(program, device, peak):
    return {
        "date": "fixture", "host_name": "fixture-host", "executable": program,
        "mc_program": program, "gpu_index": str(device), "gpu_name": "Fixture GPU",
        "gpu_cc": "9.0", "gpu_sm_count": "132", "gpu_sm_clock_khz": "1980000",
        "gpu_mem_clock_khz": "2619000", "gpu_mem_bus_width_bits": "6144",
        "gpu_total_mem_bytes": "150000000000", "gpu_l2_bytes": "52428800",
        "cuda_driver": "13.0", "cuda_runtime": "13.0", "cublas_version": "13.1.0",
        "git_sha": "fixturesha", "git_tree": "clean", "build_flags": "type=Release",
        "peak_copy_GBps": str(peak), "peak_copy_method": "fixture copy",
        "timing": "fixture timing", "l2_policy": "fixture L2 policy",
        "bytes_formula": "fixture bytes formula", "scan_B": "4", "scan_d_inner": "1536",
    }


# Google Benchmark 1.7.1 appends these to the registered name (checked against
# the real library's output).
GB_SUFFIX = "/min_time:0.050/manual_time"


def scan_row(op, dtype, mode, T, ds, us, gbps, peak, verified=1, **extra):
    row = {
        "name": f"scan_{op}/{dtype}/{mode}/T:{T}/ds:{ds}{GB_SUFFIX}",
        "run_name": f"scan_{op}/{dtype}/{mode}/T:{T}/ds:{ds}{GB_SUFFIX}",
        "run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1,
        "iterations": 100, "real_time": us, "cpu_time": us, "time_unit": "us",
        "tokens_per_s": 4 * T / (us * 1e-6), "state_updates_per_s": 4 * T * 1536 * ds / (us * 1e-6),
        "GBps": gbps, "GBps_impl": gbps * 1.5, "bytes_min": gbps * us * 1e3,
        "pct_peak_bw": 100.0 * gbps / peak, "verified": verified, "verify_worst": 0.1,
        "label": "ok" if verified else "INCORRECT: y(b=0,d=0)[t=3] gpu=1 ref=2",
    }
    row.update(extra)
    return row


def scan_error_row(op, dtype, mode, T, ds, msg):
    name = f"scan_{op}/{dtype}/{mode}/T:{T}/ds:{ds}/manual_time"
    return {"name": name, "run_name": name, "run_type": "iteration", "error_occurred": True,
            "error_message": msg, "iterations": 0, "real_time": 0, "cpu_time": 0,
            "time_unit": "us"}


def step_row(dm, L, T, dtype, ms, tflops, verified=1):
    name = f"train_step/mamba-130m/dm:{dm}/L:{L}/B:8/T:{T}/{dtype}/gemm:f32/min_time:0.200/manual_time"
    return {"name": name, "run_name": name, "run_type": "iteration", "iterations": 5,
            "real_time": ms, "cpu_time": ms, "time_unit": "ms",
            "tokens_per_s": 8 * T / (ms * 1e-3), "TFLOPs": tflops, "flops_per_step": tflops * ms * 1e9,
            "model_bytes": 3 * 2**30, "mem_used_bytes": 4 * 2**30, "parallel_scan": 1,
            "verified": verified, "label": "ok" if verified else "INCORRECT: non-finite gradient"}


def graph_step_row(dm, L, T, dtype, tier, graph_us, eager_us, peer_us, target, peak_gib, peer_gib,
                   equal=1):
    """A row of the issue-9 bench_train_step (graph replays, phases, peer figures)."""
    name = (f"train_step/mamba-130m/dm:{dm}/L:{L}/B:8/T:{T}/{dtype}/gemm:{tier}"
            "/min_time:0.200/manual_time")
    speedup = peer_us / graph_us
    return {"name": name, "run_name": name, "run_type": "iteration", "iterations": 50,
            "real_time": graph_us / 1e3, "cpu_time": graph_us / 1e3, "time_unit": "ms",
            "tokens_per_s": 8 * T / (graph_us * 1e-6), "TFLOPs": 300.0,
            "eager_us": eager_us, "graph_us": graph_us,
            "phase_gemm_us": 0.25 * eager_us, "phase_scan_us": 0.5 * eager_us,
            "phase_elementwise_us": 0.25 * eager_us, "gemm_TFLOPs": 600.0,
            "model_bytes": peak_gib * 2**30, "peak_bytes": peak_gib * 2**30,
            "mem_used_bytes": (peak_gib + 0.5) * 2**30, "graph_mem_bytes": 2**20,
            "peer_graph_us": peer_us, "peer_peak_gib": peer_gib, "speedup_vs_peer": speedup,
            "target_speedup": target, "meets_target": 1 if target and speedup >= target else 0,
            "peak_vs_peer": peak_gib / peer_gib, "checkpointed_scan": 1, "verified": 1,
            "graph_bitwise_equal": equal,
            "label": "ok" if equal else "ok; INCORRECT: graph replay differs from the eager step"}


def validation_doc():
    return {
        "schema": "mambacheck-validation/1",
        "context": {"gpu_name": "Fixture GPU", "gpu_sm_count": "132", "cuda_driver": "13.0",
                    "cuda_runtime": "13.0", "cublas_version": "13.1.0", "git_sha": "fixturesha",
                    "gemm_math": "f32"},
        "precision": [
            {"dtype": "bf16", "shape": "B2 T257", "tensor": "y", "k": 0.75, "k_limit": 2,
             "max_abs": 1e-3, "max_rel": 2e-3, "nmse": 1e-6, "max_ulp": 2, "pass": True},
            {"dtype": "bf16", "shape": "B2 T257", "tensor": "layers.0.in_proj_w", "k": 3.5,
             "k_limit": 2, "max_abs": 4e-3, "max_rel": 9e-3, "nmse": 4e-6, "max_ulp": 9,
             "pass": False},
            {"dtype": "f32", "shape": "B1 T8", "tensor": "y", "k": "inf", "k_limit": 4,
             "max_abs": 1e-7, "max_rel": 1e-7, "nmse": 1e-14, "max_ulp": 1, "pass": "false"},
            {"dtype": "f16", "shape": "B1 T8", "tensor": "dA_log", "k": 1.25, "k_limit": 2,
             "max_abs": 1e-4, "max_rel": 1e-4, "nmse": 1e-9, "max_ulp": 1, "pass": True,
             "suite": "fixture_suite"},
        ],
        "oracle_checks": [
            {"config": "tiny", "check": "gradcheck layer", "rel_error": 1e-9, "rel_tol": 1e-6,
             "pass": True},
            {"config": "tiny", "check": "gradcheck backbone", "rel_error": 1e-3, "rel_tol": 1e-6,
             "pass": False},
        ],
        "determinism": [
            {"test": "in_process_rerun", "dtype": "bf16", "scan": "parallel", "runs": 5,
             "hash": "0x0123456789abcdef", "identical": True, "first_diff_index": -1, "ulp": 0},
            {"test": "cross_process", "dtype": "f32", "scan": "sequential", "runs": 2,
             "hash": "0xfeedfacefeedface", "identical": False, "first_diff_index": 4242,
             "ulp": 3},
            {"test": "negative_control_atomic", "dtype": "f32", "scan": "parallel", "runs": 5,
             "hash": "0xaaaaaaaaaaaaaaaa", "identical": False, "first_diff_index": 7, "ulp": 1,
             "expected_identical": False},
            {"test": "batch_invariance", "dtype": "f32", "scan": "parallel", "runs": 3,
             "hash": "0xbbbbbbbbbbbbbbbb", "identical": False, "first_diff_index": 0, "ulp": 9,
             "required": False},
        ],
    }


class GenerateTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.out = os.path.join(self.dir, "out")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, obj):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            if isinstance(obj, str):
                f.write(obj)
            else:
                json.dump(obj, f)
        return path

    def run_gen(self, *args):
        return subprocess.run([sys.executable, GENERATE, "--out", self.out, *args],
                              capture_output=True, text=True, check=False)

    def read(self, name):
        with open(os.path.join(self.out, name), encoding="utf-8") as f:
            return f.read()

    def full_inputs(self):
        peak0, peak1 = 4000.0, 3900.0
        dev0 = {"context": bench_context("bench_scan", 0, peak0), "benchmarks": [
            scan_row("fwd", "f32", "sequential", 512, 16, 900.0, 300.0, peak0),
            scan_row("fwd", "f32", "parallel", 512, 16, 100.0, 2800.0, peak0,
                     speedup_vs_sequential=9.0),
            scan_row("fwd", "bf16", "parallel", 512, 16, 80.0, 2500.0, peak0,
                     speedup_vs_f32=1.25, verified=0),
            scan_row("fwd", "f32", "parallel", 2048, 16, 350.0, 3100.0, peak0),
            scan_error_row("bwd", "f32", "parallel", 32768, 256,
                           "skipped: needs 90 GiB of device memory > budget 56 GiB"),
        ]}
        dev1 = {"context": bench_context("bench_scan", 1, peak1), "benchmarks": [
            scan_row("bwd", "f16", "parallel", 128, 64, 55.0, 1200.0, peak1),
            # repetitions: two iteration rows + aggregates; the median aggregate wins
            scan_row("fwdbwd", "f32", "parallel", 128, 64, 110.0, 1000.0, peak1),
            scan_row("fwdbwd", "f32", "parallel", 128, 64, 130.0, 900.0, peak1),
            dict(scan_row("fwdbwd", "f32", "parallel", 128, 64, 120.0, 950.0, peak1),
                 run_type="aggregate", aggregate_name="median",
                 name=f"scan_fwdbwd/f32/parallel/T:128/ds:64{GB_SUFFIX}_median"),
            dict(scan_row("fwdbwd", "f32", "parallel", 128, 64, 10.0, 5.0, peak1),
                 run_type="aggregate", aggregate_name="stddev",
                 name=f"scan_fwdbwd/f32/parallel/T:128/ds:64{GB_SUFFIX}_stddev"),
        ]}
        steps = {"context": dict(bench_context("bench_train_step", 0, peak0),
                                 flop_model="fixture flop model"),
                 "benchmarks": [step_row(768, 1, 512, "f32", 12.5, 40.0),
                                step_row(768, 1, 512, "bf16", 9.5, 52.0, verified=0),
                                graph_step_row(768, 1, 2048, "bf16", "tensor-core", 1700.0, 2100.0,
                                               3458.0, 2.0, 0.7, 0.74),
                                graph_step_row(768, 1, 2048, "f32", "strict", 9000.0, 9500.0,
                                               11668.0, 1.5, 1.2, 1.41, equal=0),
                                dict(scan_error_row("fwd", "f32", "parallel", 1, 1, "x"),
                                     name="train_step/mamba-1.4b/dm:2048/L:4/B:8/T:2048/f32/gemm:f32",
                                     run_name="train_step/mamba-1.4b/dm:2048/L:4/B:8/T:2048/f32/gemm:f32",
                                     error_message="skipped: does not fit")]}
        return (self.write("scan.dev0.json", dev0), self.write("scan.dev1.json", dev1),
                self.write("steps.json", steps), self.write("validation.json", validation_doc()))

    def test_full_reports(self):
        s0, s1, st, v = self.full_inputs()
        r = self.run_gen("--bench", s0, s1, st, "--validation", v)
        self.assertEqual(r.returncode, 0, r.stderr)
        perf = self.read("performance.md")
        # context and method come from the inputs
        self.assertIn("Fixture GPU", perf)
        self.assertIn("fixturesha", perf)
        self.assertIn("fixture bytes formula", perf)
        self.assertIn("device 0: Fixture GPU: 4000 GB/s", perf)
        self.assertIn("B = 4, d_inner = 1536", perf)
        # a measured row: % of peak as given, speedup as given
        self.assertIn("| fwd | f32 | parallel | 512 | 16 | 100 |", perf)
        self.assertIn("| 70 |", perf)  # 2800 / 4000
        self.assertIn("| 9 |", perf)
        # the unverified row is listed under the failures heading, with its disposition
        fail_part = perf.split("FAILED verification")[1]
        self.assertIn("scan_fwd/bf16/parallel/T:512/ds:16", fail_part.split("##")[0])
        self.assertIn("INCORRECT: y(b=0,d=0)[t=3]", perf)
        # skipped case with reason
        self.assertIn("skipped: needs 90 GiB of device memory > budget 56 GiB", perf)
        # shards of two devices, both present
        self.assertIn("1: Fixture GPU", perf)
        self.assertIn("0: Fixture GPU", perf)
        # the median aggregate was used (120 us), not an iteration row or the stddev
        self.assertIn("| fwdbwd | f32 | parallel | 128 | 64 | 120 |", perf)
        # train step rows
        self.assertIn("| mamba-130m | 768 | 1 | 8 | 512 | f32 | strict | 12.5 | — |", perf)
        self.assertIn("INCORRECT: non-finite gradient", perf)
        self.assertIn("skipped: does not fit", perf)
        # graph rows: eager and graph time, the peer and the ratio, the target, phases, memory
        self.assertIn("| mamba-130m | 768 | 1 | 8 | 2048 | bf16 | tensor-core | 2.1 | 1.7 |", perf)
        peer = perf.split("### Against state-spaces/mamba")[1].split("###")[0]
        self.assertIn("| 768 / 2048, 1 | bf16 | tensor-core | 1700 | 3458 | 2.03 | ≥ 2 | yes | 0.7 | 0.74 |",
                      peer)
        self.assertIn("| 768 / 2048, 1 | f32 | strict | 9000 | 11668 | 1.3 | ≥ 1.5 | **NO** |",
                      peer)
        phases = perf.split("### Phase breakdown")[1].split("###")[0]
        self.assertIn("(50%)", phases)
        self.assertIn("| 600 |", phases)
        # a replay that differs from the eager step is a verification failure
        fail_steps = perf.split("## bench_train_step")[1].split("FAILED verification")[1]
        self.assertIn("gemm:strict", fail_steps.split("###")[0])

        prec = self.read("precision.md")
        self.assertIn("2 of 4 tensor comparisons pass; **2 FAIL**", prec)
        self.assertIn("layers.0.in_proj_w", prec.split("## Failures")[1].split("## All")[0])
        self.assertIn("| f32 | B1 T8 | y | inf | 4 |", prec)
        self.assertIn("fixture_suite", prec)
        self.assertIn("1 of 2 pass; **1 FAIL**", prec)
        self.assertIn("| tiny | gradcheck backbone | 0.001 | 1.00e-06 | **FAIL** |", prec)
        self.assertIn("Fixture GPU", prec)

        det = self.read("determinism.md")
        self.assertIn("What a bitwise claim here depends on", det)
        self.assertIn("cuBLAS", det)
        self.assertIn("2 of 3 required checks behave as expected; **1 do not**", det)
        self.assertIn("1 further rows are measured and reported, not required", det)
        batch = [l for l in det.splitlines() if l.startswith("| batch_invariance")][0]
        self.assertIn("| reported (not required) |", batch)
        self.assertIn("| cross_process | f32 | sequential | 2 | `0xfeedfacefeedface` | NO |", det)
        self.assertIn("4242", det)
        neg = [l for l in det.splitlines() if l.startswith("| negative_control_atomic")][0]
        self.assertIn("| ok |", neg)

        if have_matplotlib():
            for png in ("perf_scan_throughput.png", "perf_scan_pct_peak.png",
                        "perf_train_step.png", "precision_k.png"):
                with open(os.path.join(self.out, png), "rb") as f:
                    head = f.read(8)
                self.assertEqual(head, PNG_MAGIC, png)
                self.assertGreater(os.path.getsize(os.path.join(self.out, png)), 2000, png)
            self.assertIn("perf_scan_throughput.png", perf)
            self.assertIn("precision_k.png", prec)

    def test_scan_against_the_peer(self):
        s0, s1, st, v = self.full_inputs()
        peer = self.write("peer_scan.json", {
            "module": "/x/selective_scan_cuda.so", "gpu": "Fixture GPU", "torch": "9.9", "cuda": "99",
            "date": "today", "method": "fixture method",
            "rows": [{"dtype": "f32", "T": 512, "d_state": 16, "fwd_us": 250.0, "bwd_us": 500.0,
                      "fwdbwd_us": 750.0, "peak_scan_bytes": 1.0e8, "saved_state_bytes": 1.5e6,
                      "bitwise_stable": {"du": True, "dB": False, "dA": False}},
                     {"dtype": "bf16", "T": 99, "d_state": 16, "fwd_us": 1.0, "bwd_us": 1.0,
                      "fwdbwd_us": 2.0}]})
        r = self.run_gen("--bench", s0, s1, st, "--validation", v, "--peer", peer)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("; the peer: `peer_scan.json`", self.read("performance.md"))
        part = self.read("performance.md").split("selective scan (timed in the same run)")[1].split("###")[0]
        self.assertIn("fixture method", part)
        # f32 T512 ds16: ours fwd 100 us (parallel) -> x 2.5; sequential 900 us -> x 0.278;
        # no bwd / fwd+bwd rows of ours there -> dashes; the peer's varying grads named
        self.assertIn("| f32 | 512 | 16 | parallel | 100 / — / — | 250 / 500 / 750 | 2.5 / — / — |", part)
        self.assertIn("| f32 | 512 | 16 | sequential | 900 / — / — | 250 / 500 / 750 | 0.278 / — / — |", part)
        self.assertIn("| dA, dB |", part)
        self.assertNotIn("| bf16 | 99 |", part)  # no row of ours for that case
        bad = self.write("peer_bad.json", {"rows": [{"dtype": "f32", "T": 1}]})
        r = self.run_gen("--bench", s0, "--peer", bad)
        self.assertEqual(r.returncode, 2)
        self.assertIn("d_state", r.stderr)

    def test_step_against_the_peer_in_the_same_run(self):
        s0, s1, st, v = self.full_inputs()
        prow = dict(d_model=768, T=2048, layers=1, B=8, dtype="bf16", eager_us=4000.0,
                    graph_us=3400.0, peak_step_bytes=0.5 * 2**30, peak_total_bytes=0.8 * 2**30,
                    grads_bitwise_stable=5, grads=11, path="fast: mamba_inner_fn + causal_conv1d")
        peer = self.write("peer_train_step.json", {
            "peer": "fixture peer", "gpu": "Fixture GPU", "torch": "9.9", "cuda": "99",
            "date": "today", "model": "fixture stack", "method": "fixture step method",
            "rows": [prow,
                     dict(prow, dtype="f32", graph_us=18000.0, eager_us=18500.0,
                          peak_total_bytes=1.5 * 2**30, grads_bitwise_stable=3),
                     dict(prow, d_model=4096)]})  # no row of ours for d_model 4096
        r = self.run_gen("--bench", s0, s1, st, "--validation", v, "--peer-step", peer)
        self.assertEqual(r.returncode, 0, r.stderr)
        perf = self.read("performance.md")
        self.assertIn("; the peer's step: `peer_train_step.json`", perf)
        part = perf.split("training step (timed in the same run)")[1].split("###")[0]
        self.assertIn("fixture step method", part)
        # bf16: 3400 / 1700 = 2 -> meets the 2x target; peak 0.7 GiB against 0.8 -> 0.875
        self.assertIn("| 768 / 2048, 1 | bf16 | tensor-core | 1700 | 3400 | 4000 | 2 | ≥ 2 | yes "
                      "| 0.7 | 0.8 | 0.875 | 5 of 11 |", part)
        # f32: 18000 / 9000 = 2 -> meets 1.5; peak 1.2 against 1.5 -> 0.8
        self.assertIn("| 768 / 2048, 1 | f32 | strict | 9000 | 18000 | 18500 | 2 | ≥ 1.5 | yes "
                      "| 1.2 | 1.5 | 0.8 | 3 of 11 |", part)
        self.assertNotIn("4096", part)
        # a slower step misses its target, named as such
        slow = self.write("peer_slow.json", {"rows": [dict(prow, graph_us=1800.0)]})
        r = self.run_gen("--bench", st, "--peer-step", slow)
        self.assertEqual(r.returncode, 0, r.stderr)
        part = self.read("performance.md").split("training step (timed in the same run)")[1]
        self.assertIn("| 1.06 | ≥ 2 | **NO** |", part)
        bad = self.write("peer_step_bad.json", {"rows": [{"d_model": 768, "T": 512}]})
        r = self.run_gen("--bench", st, "--peer-step", bad)
        self.assertEqual(r.returncode, 2)
        self.assertIn("layers", r.stderr)

    def test_missing_inputs_say_not_measured(self):
        r = self.run_gen()
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("performance.md", "precision.md", "determinism.md"):
            self.assertIn("not measured", self.read(name), name)

    def test_missing_sections_say_not_measured(self):
        doc = validation_doc()
        del doc["determinism"]
        v = self.write("v.json", doc)
        only_steps = {"context": bench_context("bench_train_step", 0, 1.0),
                      "benchmarks": [step_row(768, 1, 512, "f32", 12.5, 40.0)]}
        b = self.write("b.json", only_steps)
        r = self.run_gen("--bench", b, "--validation", v)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("not measured", self.read("determinism.md"))
        self.assertNotIn("not measured", self.read("precision.md"))
        perf = self.read("performance.md")
        self.assertIn("no bench_scan rows", perf)
        self.assertNotIn("no bench_train_step rows", perf)

    def test_no_gpu_says_why_and_shows_cpu_thread_invariance(self):
        # as `mambacheck validate` writes it on a machine without a usable GPU
        doc = {
            "schema": "mambacheck-validation/1",
            "context": {"tool": "mambacheck validate", "gpu_name": "none",
                        "gpu_unavailable_reason": "fixture: no CUDA device",
                        "gpu_checks": "not run: no usable GPU (fixture: no CUDA device)"},
            "checks": [{"config": "tiny", "check": "gradcheck backbone", "status": "pass"},
                       {"config": "big", "check": "cpu checks", "status": "not_run",
                        "detail": "not run: fixture needs 9 TiB of host memory"}],
            "oracle_checks": [{"config": "tiny", "check": "gradcheck backbone",
                               "rel_error": 1e-11, "rel_tol": 1e-7, "pass": True}],
            "precision": [],
            "determinism": [{"id": "cpu_thread_invariance|tiny", "test": "cpu_thread_invariance",
                             "dtype": "f64", "scan": "cpu oracle", "runs": 3,
                             "hash": "0x00000000000000aa", "identical": True,
                             "first_diff_index": -1, "ulp": 0, "config": "tiny",
                             "note": "fixture"}],
        }
        r = self.run_gen("--validation", self.write("v.json", doc))
        self.assertEqual(r.returncode, 0, r.stderr)
        why = "not measured** — {}no usable GPU on this machine (fixture: no CUDA device)"
        self.assertIn(why.format(""), self.read("performance.md"))
        self.assertNotIn("no benchmark JSON was given", self.read("performance.md"))
        prec = self.read("precision.md")
        self.assertIn(why.format("GPU comparisons: "), prec)
        self.assertIn("1 of 1 pass", prec)  # the oracle self-checks are still shown
        self.assertIn("fixture needs 9 TiB of host memory", prec)  # and what did not run
        det = self.read("determinism.md")
        self.assertIn(why.format("GPU determinism: "), det)
        self.assertIn("cpu_thread_invariance (tiny)", det)
        self.assertIn("0x00000000000000aa", det)

    def test_cpu_only_run_says_not_requested(self):
        doc = {"schema": "mambacheck-validation/1",
               "context": {"gpu_name": "none", "gpu_checks": "not requested (--cpu-only)"},
               "oracle_checks": [{"config": "tiny", "check": "gradcheck backbone",
                                  "rel_error": 1e-11, "rel_tol": 1e-7, "pass": True}]}
        r = self.run_gen("--validation", self.write("v.json", doc))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("GPU checks were not requested (--cpu-only)", self.read("precision.md"))

    def test_invalid_json_is_an_error_naming_the_file(self):
        bad = self.write("broken.json", "{ not json")
        r = self.run_gen("--bench", bad)
        self.assertEqual(r.returncode, 2)
        self.assertIn("broken.json", r.stderr)

    def test_missing_field_is_an_error_naming_the_field(self):
        doc = validation_doc()
        del doc["precision"][1]["k_limit"]
        v = self.write("v.json", doc)
        r = self.run_gen("--validation", v)
        self.assertEqual(r.returncode, 2)
        self.assertIn("precision[1]", r.stderr)
        self.assertIn("k_limit", r.stderr)

    def test_statistics_and_mutation_sections(self):
        doc = validation_doc()
        stat = {"z_bias": 0.5, "z_mag": -1.2, "z_limit": 9.08, "k_rms": 0.9, "k_rms_limit": 2.2,
                "stat_runs": 12, "stat_pass": True, "stat_failed": ""}
        doc["precision"] = [dict(doc["precision"][0], **stat),
                            dict(doc["precision"][3], **dict(stat, z_mag=-130.0, stat_pass="false",
                                                             stat_failed="bias_mag"))]
        mut = {"schema": "mambacheck-mutation/1",
               "context": {"git_sha": "fixturesha", "gpu": "Fixture GPU", "suite": ["scan-bits", "steps"]},
               "control": {"pass": True, "seconds": 41.5},
               "mutants": [
                   {"id": "fixture-killed", "family": "norm", "kind": "logic", "what": "a fault",
                    "status": "killed", "killed_by": "steps: StepParity.RmsNormForward", "seconds": 3},
                   {"id": "fixture-equivalent", "family": "elementwise", "kind": "equivalent-candidate",
                    "what": "x > 20 becomes x >= 20", "equivalent": "the same value at x = 20",
                    "status": "survived", "seconds": 40},
                   {"id": "fixture-survivor", "family": "reduce", "kind": "precision",
                    "what": "another fault", "equivalent": "", "status": "survived", "seconds": 40}],
               "summary": {"total": 3, "killed": 1, "survived": 2, "not_run": 0, "kill_rate": 0.3333}}
        r = self.run_gen("--validation", self.write("v.json", doc), "--mutation", self.write("m.json", mut))
        self.assertEqual(r.returncode, 0, r.stderr)
        prec = self.read("precision.md")
        self.assertIn("## Statistical checks", prec)
        self.assertIn("1 of 2 tensor comparisons pass; **1 FAIL**", prec)  # the k-rule passes both
        self.assertIn("FAIL (bias_mag)", prec.split("## Failures")[1].split("## All")[0])
        self.assertIn("## Mutation testing", prec)
        self.assertIn("**Kill rate 33.3 %**: 1 killed, 2 survived of 3 mutants", prec)
        surv = prec.split("### Survivors")[1].split("###")[0]
        self.assertIn("`fixture-equivalent`", surv)
        self.assertIn("equivalent: the same value at x = 20", surv)
        self.assertIn("`fixture-survivor`", surv)
        self.assertIn("a test that sees it is still missing", surv)
        self.assertIn("steps: StepParity.RmsNormForward", prec)
        if have_matplotlib():
            self.assertIn("precision_stats.png", prec)
            with open(os.path.join(self.out, "precision_stats.png"), "rb") as f:
                self.assertEqual(f.read(8), PNG_MAGIC)
        bad = dict(mut, schema="other/1")
        r = self.run_gen("--mutation", self.write("bad.json", bad))
        self.assertEqual(r.returncode, 2)
        self.assertIn("mambacheck-mutation/1", r.stderr)

    def test_wrong_schema_is_an_error(self):
        doc = validation_doc()
        doc["schema"] = "something-else/9"
        r = self.run_gen("--validation", self.write("v.json", doc))
        self.assertEqual(r.returncode, 2)
        self.assertIn("schema", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
