#!/usr/bin/env bash
# da_halves_all.sh — A/B of the experiment in da_halves_all.patch (every accurate-exponential
# checkpointed backward walks its chunks in two halves, keeping their dA) against an unpatched
# build, on a GPU, through scripts/gpu_session.sh's abscan phase. Not part of the project's
# build; written and checked on the CPU in the twenty-third session (emulation 61/61, the same
# device-to-host hash with and without it; only the nine (4, 16), (4, 32) and (8, 32) accurate
# backward instances differ from head's SASS). Run in the twenty-fourth session (H100): slower
# at d_state 64-256, not adopted (the patch's header has the figures).
# Prediction: see the patch's header.
#
# Build the experiment's library on a build dir of this checkout, keep it, and restore:
#   git apply docs/experiments/da_halves_all.patch && cmake --build build --target mc_kernels
#   cp build/kernels/libmc_kernels.so /tmp/libmc_kernels.halves_all.so
#   git apply -R docs/experiments/da_halves_all.patch && cmake --build build --target mc_kernels
# Then, on the GPU machine (~3 min):
#   docs/experiments/da_halves_all.sh <build-dir> <experiment-library> <out-dir>
# abscan's "new" is the experiment, its "old" the unpatched build (two runs each, alternated).
set -u
if [[ $# -ne 3 ]]; then echo "usage: $0 <build-dir> <experiment-library> <out-dir>" >&2; exit 2; fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
xl="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
[[ -f "$xl" ]] || { echo "da_halves_all.sh: '$2' is not a file" >&2; exit 2; }
out="$3"; mkdir -p "$out"
lib="$build/kernels/libmc_kernels.so"
head_lib="$out/libmc_kernels.head.so"
cp "$lib" "$head_lib"
gs="$here/../../scripts/gpu_session.sh"
cp "$xl" "$lib"
AB_LIB="$head_lib" AB_ARGS="--cases=2048:16,2048:64,2048:128,2048:256 --routes=checkpointed-acc,checkpointed-hw --dtypes=f32,bf16 --benchmark_filter=scan_bwd" \
  "$gs" "$build" "$out/wide" abscan
cp "$head_lib" "$lib" && rm -f "$head_lib"
