#!/usr/bin/env bash
# six_block_k8.sh — A/B of the experiment in six_block_k8.patch (the d_state <= 16 backward at
# 8-step chunks with launch bounds for 6 blocks an SM) against an unpatched build, on a GPU,
# through scripts/gpu_session.sh's abscan phase. Not part of the project's build: the notes'
# "sixteenth session" holds its prediction, "seventeenth session" its result (slower
# everywhere; twice the warps raised the issue rate only from 62 to 65 %).
#
# Build the experiment's library on a build dir of this checkout, keep it, and restore:
#   git apply docs/experiments/six_block_k8.patch && cmake --build build --target mc_kernels
#   cp build/kernels/libmc_kernels.so /tmp/libmc_kernels.k8.so
#   git apply -R docs/experiments/six_block_k8.patch && cmake --build build --target mc_kernels
# Then, on the GPU machine:
#   docs/experiments/six_block_k8.sh <build-dir> <k8-library> <out-dir>
# bench_scan bf16, d_inner 1536, T 2048, d_state 16, one abscan per batch (B 8 :p1 and :p2,
# B 16 :cpt1:p1 and the plan, B 2 the plan) -> <out-dir>/b{8,16,2}/; abscan's "new" is the
# unpatched build, its "old" the experiment. With AB_NCU=1 in the environment, each run also
# takes Nsight Compute of each library's first scan launches.
set -u
if [[ $# -ne 3 ]]; then echo "usage: $0 <build-dir> <k8-library> <out-dir>" >&2; exit 2; fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
[[ -f "$k8" ]] || { echo "six_block_k8.sh: '$2' is not a file" >&2; exit 2; }
status=0
for run in "b8|--batch=8 --routes=checkpointed-hw:p1,checkpointed-hw:p2" \
           "b16|--batch=16 --routes=checkpointed-hw:cpt1:p1,checkpointed-hw" \
           "b2|--batch=2 --routes=checkpointed-hw"; do
  tag=${run%%|*}; mkdir -p "$3/$tag"
  AB_LIB="$k8" AB_ARGS="${run#*|} --dtypes=bf16 --cases=2048:16" \
    "$here/../../scripts/gpu_session.sh" "$1" "$3/$tag" abscan || status=1
done
exit $status
