#!/usr/bin/env bash
# keep_da.sh — A/B of the experiment in keep_da.patch (the checkpointed backward keeps the
# recompute's dA of every step in shared memory and the walk reads it instead of a second
# exponential; accurate-exponential instances only) against an unpatched build, on a GPU,
# through scripts/gpu_session.sh's abscan phase, then the f32 training step (which runs the
# accurate route) with each library. Not part of the project's build; written and checked on
# the CPU in the twenty-first session: emulation 61/61 with the same device-to-host hash
# (2ec6f8d506d7769e), the walk's batch loop 1758 -> 856 SASS instructions, 2 blocks an SM
# instead of 3. Not yet run on a device.
# Prediction (docs/performance-notes.md, "twenty-first session"): the f32/bf16 accurate
# backward at B 8, d_inner 1536, T 2048, d_state 16 from 1892 to ~1650-1800 µs (1.45 waves
# at 2 blocks an SM), nearer 0.8x with forced pieces (:p2) and at d_state 64-256; the
# hardware-exp rows unchanged (the control).
#
# Build the experiment's library on a build dir of this checkout, keep it, and restore:
#   git apply docs/experiments/keep_da.patch && cmake --build build --target mc_kernels
#   cp build/kernels/libmc_kernels.so /tmp/libmc_kernels.keepda.so
#   git apply -R docs/experiments/keep_da.patch && cmake --build build --target mc_kernels
# Then, on the GPU machine (~2 min):
#   docs/experiments/keep_da.sh <build-dir> <keep-da-library> <out-dir>
# abscan's "new" is the experiment, its "old" the unpatched build (two runs each, alternated);
# <out-dir>/d16 and <out-dir>/wide hold the two abscans, <out-dir>/train the step rows.
set -u
if [[ $# -ne 3 ]]; then echo "usage: $0 <build-dir> <keep-da-library> <out-dir>" >&2; exit 2; fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
kd="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
[[ -f "$kd" ]] || { echo "keep_da.sh: '$2' is not a file" >&2; exit 2; }
out="$3"; mkdir -p "$out/train"
lib="$build/kernels/libmc_kernels.so"
head_lib="$out/libmc_kernels.head.so"
cp "$lib" "$head_lib"
gs="$here/../../scripts/gpu_session.sh"
# pieces (:p2) serve only the d_state <= 16 plan; elsewhere they are refused
cp "$kd" "$lib"
AB_LIB="$head_lib" AB_ARGS="--cases=2048:16 --routes=checkpointed-acc,checkpointed-acc:p2,checkpointed-hw --dtypes=f32,bf16 --benchmark_filter=scan_bwd" \
  "$gs" "$build" "$out/d16" abscan
cp "$kd" "$lib"
AB_ARGS="--cases=2048:64,2048:256 --routes=checkpointed-acc,checkpointed-hw --dtypes=f32,bf16 --benchmark_filter=scan_bwd" \
  AB_LIB="$head_lib" "$gs" "$build" "$out/wide" abscan
for i in 1 2; do
  for side in new old; do
    if [[ $side == new ]]; then cp "$kd" "$lib"; else cp "$head_lib" "$lib"; fi
    "$build/bench/bench_train_step" --benchmark_filter='dm:768/L:1/B:8/T:2048/f32' \
      --json="$out/train/${side}_$i.json" > "$out/train/${side}_$i.log" 2>&1
  done
done
cp "$head_lib" "$lib" && rm -f "$head_lib"
