#!/usr/bin/env python3
# peer_scan.py — times state-spaces/mamba's selective scan (the `selective_scan_cuda`
# extension: fwd, bwd, fwd+bwd) on the cases bench_scan runs, with the same method,
# and writes JSON that reports/generate.py merges into performance.md.
#
# The peer is not part of this project: point --module at a built
# selective_scan_cuda*.so (or have it importable). Its interface:
#   fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus) -> [out, x, ...]
#   bwd(u, delta, A, B, C, D, z, delta_bias, dout, x, out, dz, delta_softplus,
#       recompute_out_z) -> [du, ddelta, dA, dB, dC, dD, ddelta_bias, ...]
# with u, delta [B, D, L] (channel-major), A [D, N] f32, B, C [B, 1, N, L]
# ("variable B/C", one group), D [D] f32. Each implementation is timed in its own
# layout; no transposes are timed.
#
# Method (matches bench_scan): per timed iteration, untimed, the L2 is scrubbed by
# writing a buffer of twice its size; then CUDA events on the current stream around
# the call(s); one warm-up call per case; median over --reps iterations. Also
# reported: the back-to-back figure (events around 10 consecutive calls, median of
# 15), the method of the peer's own published numbers. Bitwise run-to-run
# stability of each gradient is recorded (two backward calls on identical inputs).
#
# Inputs as bench_scan's: delta log-uniform in [1e-3, 0.1], u, B, C, dout uniform
# in [-1, 1], A[d, n] = -(n + 1), D = 1, no z, delta precomputed (no softplus).
#
# usage: peer_scan.py --out peer_scan.json [--module PATH.so] [--batch 8] [--d_inner 1536]
#                     [--cases 512:16,2048:16,8192:16,2048:256] [--dtypes float32,bfloat16]
import argparse
import importlib
import importlib.util
import json
import statistics
import sys

from peer_common import device_fields, events_median_us, torch_with_gpu, write_doc


def load_module(path):
    if path:
        spec = importlib.util.spec_from_file_location("selective_scan_cuda", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod, path
    mod = importlib.import_module("selective_scan_cuda")
    return mod, getattr(mod, "__file__", "selective_scan_cuda")


def main():
    ap = argparse.ArgumentParser(description="time state-spaces/mamba's selective_scan_cuda "
                                             "with bench_scan's method")
    ap.add_argument("--out", required=True)
    ap.add_argument("--module", default="", help="path to selective_scan_cuda*.so")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--d_inner", type=int, default=1536)
    ap.add_argument("--cases", default="512:16,2048:16,8192:16,2048:256",
                    help="comma-separated T:d_state pairs")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()

    torch, skip = torch_with_gpu("peer_scan")
    if skip:
        return skip
    try:
        ssc, where = load_module(a.module)
    except Exception as e:  # the peer is optional: say why it is not measured
        print(f"peer_scan: selective_scan_cuda not loadable ({e!r})", file=sys.stderr)
        return 77
    dev = "cuda"
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    scrub = torch.empty(2 * l2 // 4, dtype=torch.float32, device=dev)

    def time_cold(fn, reps):
        fn()  # warm-up
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            scrub.fill_(1.0)  # untimed L2 scrub
            s, e = torch.cuda.Event(True), torch.cuda.Event(True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) * 1e3)
        return statistics.median(ts)

    def time_b2b(fn):
        return events_median_us(torch, fn, inner=10, reps=15, warm=3)

    rows = []
    B, D = a.batch, a.d_inner
    for case in a.cases.split(","):
        L, N = (int(x) for x in case.split(":"))
        for dt in a.dtypes.split(","):
            t = getattr(torch, dt)
            g = torch.Generator(device=dev).manual_seed(1234)
            u = (torch.rand(B, D, L, device=dev, generator=g) * 2 - 1).to(t)
            delta = (torch.rand(B, D, L, device=dev, generator=g) * 4.605170186 - 6.907755279).exp().to(t)
            A = -(torch.arange(1, N + 1, device=dev, dtype=torch.float32)).repeat(D, 1).contiguous()
            Bm = (torch.rand(B, 1, N, L, device=dev, generator=g) * 2 - 1).to(t)
            Cm = (torch.rand(B, 1, N, L, device=dev, generator=g) * 2 - 1).to(t)
            Dv = torch.ones(D, device=dev)
            dout = (torch.rand(B, D, L, device=dev, generator=g) * 2 - 1).to(t)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            o = ssc.fwd(u, delta, A, Bm, Cm, Dv, None, None, False)
            x = o[1]
            f = lambda: ssc.fwd(u, delta, A, Bm, Cm, Dv, None, None, False)
            b = lambda: ssc.bwd(u, delta, A, Bm, Cm, Dv, None, None, dout, x, None, None, False, False)

            def fb():
                o2 = f()
                return ssc.bwd(u, delta, A, Bm, Cm, Dv, None, None, dout, o2[1], None, None, False, False)

            fb()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
            r = dict(B=B, D=D, T=L, d_state=N, dtype={"float32": "f32", "bfloat16": "bf16",
                                                      "float16": "f16"}.get(dt, dt),
                     fwd_us=time_cold(f, a.reps), bwd_us=time_cold(b, a.reps),
                     fwdbwd_us=time_cold(fb, a.reps),
                     fwd_us_b2b=time_b2b(f), bwd_us_b2b=time_b2b(b), fwdbwd_us_b2b=time_b2b(fb),
                     saved_state_bytes=int(x.numel() * x.element_size()),
                     peak_scan_bytes=int(peak))
            g1, g2 = b(), b()
            r["bitwise_stable"] = {n: bool(torch.equal(p, q)) for n, p, q in
                                   zip(("du", "ddelta", "dA", "dB", "dC", "dD"), g1, g2)}
            rows.append(r)
            print(json.dumps(r), flush=True)
            del u, delta, Bm, Cm, dout, o, x, g1, g2
            torch.cuda.empty_cache()
    out = dict(schema="mambacheck-peer-scan/1", peer="state-spaces/mamba selective_scan_cuda",
               module=where, **device_fields(torch), l2_bytes=l2,
               method="median of per-call CUDA-event times, L2 scrubbed (2x L2 write) before each "
                      "call, 1 warm-up; *_b2b: events around 10 back-to-back calls, median of 15",
               inputs="delta log-uniform [1e-3,0.1]; u,B,C,dout uniform [-1,1]; A[d,n] = -(n+1); "
                      "D = 1; no z; delta precomputed; zero initial state; channel-major [B,D,L]",
               rows=rows)
    write_doc(a.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
