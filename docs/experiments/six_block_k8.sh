#!/usr/bin/env bash
# six_block_k8.sh — A/B of the experiment in six_block_k8.patch (the d_state <= 16 backward at
# 8-step chunks with launch bounds for 6 blocks an SM) against an unpatched build, on a GPU.
# Not part of the project's build: the notes' "sixteenth session" holds its prediction.
#
# Build the experiment's library on a build dir of this checkout, keep it, and restore:
#   git apply docs/experiments/six_block_k8.patch && cmake --build build --target mc_kernels
#   mkdir -p /tmp/k8lib && cp build/kernels/libmc_kernels.so /tmp/k8lib/
#   git apply -R docs/experiments/six_block_k8.patch && cmake --build build --target mc_kernels
# Then, on the GPU machine:
#   docs/experiments/six_block_k8.sh <build-dir> <k8-lib-dir> <out-dir>
# It runs bench_scan (bf16, d_inner 1536, T 2048, d_state 16) with each library through
# LD_LIBRARY_PATH, alternated twice: B 8 :p1 and :p2, B 16 :cpt1:p1 and the plan, B 2 the plan;
# then Nsight Compute of the backward (and carry pass) at B 16 :cpt1:p1 and B 8 :p2 with each.
set -u
if [[ $# -ne 3 ]]; then echo "usage: $0 <build-dir> <k8-lib-dir> <out-dir>" >&2; exit 2; fi
B=$(cd "$1" && pwd) || exit 2; K8=$(cd "$2" && pwd) || exit 2; R=$3; mkdir -p "$R"
run() {  # side tag bench_scan-args...
  local side=$1 tag=$2; shift 2
  if [ "$side" = k8 ]; then export LD_LIBRARY_PATH=$K8; else unset LD_LIBRARY_PATH; fi
  "$B/bench/bench_scan" "$@" --dtypes=bf16 --cases=2048:16 --json="$R/${tag}_${side}.json" \
    > "$R/${tag}_${side}.txt" 2>&1
}
for i in 1 2; do
  for side in k8 base; do
    run $side b8_$i --batch=8 --routes=checkpointed-hw:p1,checkpointed-hw:p2
    run $side b16_$i --batch=16 --routes=checkpointed-hw:cpt1:p1,checkpointed-hw
    run $side b2_$i --batch=2 --routes=checkpointed-hw
    echo "$side $i done at $SECONDS s" >> "$R/progress.txt"
  done
done
metrics=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
for side in k8 base; do
  if [ "$side" = k8 ]; then export LD_LIBRARY_PATH=$K8; else unset LD_LIBRARY_PATH; fi
  ncu --clock-control none -k regex:'ckpt_(bwd|piece_carry)' -c 3 --csv \
    --metrics $metrics,launch__registers_per_thread,sm__sass_inst_executed_op_local_ld.sum \
    "$B/bench/bench_scan" --batch=16 --cases=2048:16 --routes=checkpointed-hw:cpt1:p1 --dtypes=bf16 \
    --benchmark_filter=scan_bwd --benchmark_min_time=0.01 > "$R/ncu_b16_${side}.csv" 2>&1
  ncu --clock-control none -k regex:'ckpt_(bwd|piece_carry)' -c 3 --csv --metrics $metrics \
    "$B/bench/bench_scan" --batch=8 --cases=2048:16 --routes=checkpointed-hw:p2 --dtypes=bf16 \
    --benchmark_filter=scan_bwd --benchmark_min_time=0.01 > "$R/ncu_b8p2_${side}.csv" 2>&1
done
echo "all done at $SECONDS s" >> "$R/progress.txt"
