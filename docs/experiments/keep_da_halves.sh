#!/usr/bin/env bash
# keep_da_halves.sh — A/B of the experiment in keep_da_halves.patch (the d_state <= 16 accurate-
# exponential backward keeps dA, walking each chunk in two halves so that 3 blocks still fit an
# SM) against an unpatched build, on a GPU, through scripts/gpu_session.sh's abscan phase, then
# the strict-f32 training step (which runs that route) with each library. Not part of the
# project's build; written and checked on the CPU in the twenty-second session (emulation 61/61,
# the same device-to-host hash with and without it). Not yet run on a device.
# Prediction (docs/performance-notes.md, "twenty-second session"): the f32/bf16 accurate backward
# at B 8, d_inner 1536, T 2048, d_state 16 from ~1890 to ~1700 µs (0.89x the instructions at the
# same issue rate, one wave of blocks); with forced pieces (:p2) about the same ratio against
# head's :p2; the hardware-exp rows unchanged (the control); the f32 768/2048 step ~150-200 µs
# faster.
#
# Build the experiment's library on a build dir of this checkout, keep it, and restore:
#   git apply docs/experiments/keep_da_halves.patch && cmake --build build --target mc_kernels
#   cp build/kernels/libmc_kernels.so /tmp/libmc_kernels.halves.so
#   git apply -R docs/experiments/keep_da_halves.patch && cmake --build build --target mc_kernels
# Then, on the GPU machine (~1 min):
#   docs/experiments/keep_da_halves.sh <build-dir> <halves-library> <out-dir>
# abscan's "new" is the experiment, its "old" the unpatched build (two runs each, alternated);
# <out-dir>/d16 holds the abscan, <out-dir>/train the step rows.
set -u
if [[ $# -ne 3 ]]; then echo "usage: $0 <build-dir> <halves-library> <out-dir>" >&2; exit 2; fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
hv="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
[[ -f "$hv" ]] || { echo "keep_da_halves.sh: '$2' is not a file" >&2; exit 2; }
out="$3"; mkdir -p "$out/train"
lib="$build/kernels/libmc_kernels.so"
head_lib="$out/libmc_kernels.head.so"
cp "$lib" "$head_lib"
gs="$here/../../scripts/gpu_session.sh"
cp "$hv" "$lib"
AB_LIB="$head_lib" AB_ARGS="--cases=2048:16 --routes=checkpointed-acc,checkpointed-acc:p2,checkpointed-hw --dtypes=f32,bf16 --benchmark_filter=scan_bwd" \
  "$gs" "$build" "$out/d16" abscan
for i in 1 2; do
  for side in new old; do
    if [[ $side == new ]]; then cp "$hv" "$lib"; else cp "$head_lib" "$lib"; fi
    "$build/bench/bench_train_step" --benchmark_filter='dm:768/L:1/B:8/T:2048/f32' \
      --json="$out/train/${side}_$i.json" > "$out/train/${side}_$i.log" 2>&1
  done
done
cp "$head_lib" "$lib" && rm -f "$head_lib"
