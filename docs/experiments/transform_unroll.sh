#!/usr/bin/env bash
# transform_unroll.sh — A/B of the experiment in transform_unroll.patch (the checkpointed scan's
# per-chunk transform loops, `for k = j; k < K; k += L`, unrolled to their fixed trip count)
# against an unpatched build, on a GPU, through scripts/gpu_session.sh's abscan phase. Not part
# of the project's build; written and checked on the CPU in the eighteenth session (emulation
# 61/61 with the same device-to-host hash); first run on a device in the nineteenth session.
# Why: Nsight Compute (H100, B 8, d_inner 1536, T 2048, bf16) put 7.9 % of the backward's stall
# samples in that loop for 7 warp instructions a step (short-scoreboard and fixed-latency
# waits: each trip loads, converts and stores one step). The unrolled loops issue their loads
# together; ptxas spills more in the bf16 backward (16/24 -> 28/48 bytes) and the kernel
# grows by 336 instructions (the instruction cache already missed: 7.7 % no_instruction).
# The forward's transform loop (8 trips a stage) is worse: 5.2 warp instructions a step and
# 19.7 % of the forward's stall samples (short-scoreboard 34 %, wait 25 %; ncu of the bf16
# forward, same shape, reports/h100/data/session-2026-12-07-eighteenth/call2-staged-ckpt).
# Prediction: the backward 2-4 % faster if the spill stays off the walk; the forward 5-15 %
# faster, unless its shared-memory pipe (79 % busy) takes over.
#
# Measured in the nineteenth session (H100, docs/performance-notes.md, "nineteenth session"):
# wrong in sign but for one instance. The unrolled build was slower in the bf16 forward
# (253 -> 285 µs), the f32 hardware-exp forward (247 -> 263) and every backward (bf16 966 -> 990).
# It was faster only in the one-channel f32 forward with the accurate exponential (807 -> 758).
# That one instance keeps the unroll (166a24a, kUnrollFwdTransform in ckpt_kernels.cuh).
# The patch applies to 054da3f; its forward hunk conflicts with 166a24a.
#
# Build the experiment's library on a build dir of this checkout, keep it, and restore:
#   git apply docs/experiments/transform_unroll.patch && cmake --build build --target mc_kernels
#   cp build/kernels/libmc_kernels.so /tmp/libmc_kernels.unroll.so
#   git apply -R docs/experiments/transform_unroll.patch && cmake --build build --target mc_kernels
# Then, on the GPU machine:
#   docs/experiments/transform_unroll.sh <build-dir> <unroll-library> <out-dir>
# abscan's "new" is the unpatched build, its "old" the experiment (bench_scan B 8, d_inner 1536,
# T 2048, d_state 16, bf16 and f32, :p1 and the accurate route; two runs each).
set -u
if [[ $# -ne 3 ]]; then echo "usage: $0 <build-dir> <unroll-library> <out-dir>" >&2; exit 2; fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lib="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
[[ -f "$lib" ]] || { echo "transform_unroll.sh: '$2' is not a file" >&2; exit 2; }
AB_LIB="$lib" AB_ARGS="--cases=2048:16 --routes=checkpointed-hw:p1,checkpointed-acc --dtypes=bf16,f32" \
  "$here/../../scripts/gpu_session.sh" "$1" "$3" abscan
