#!/usr/bin/env bash
# six-block K=8 experiment via the committed driver, then ncu of the bwd at B16 cpt1:p1 for both libs
R=$OUT/res/k8; mkdir -p $R
[ -d /tmp/k8lib ] || tar -C /tmp -xJf devcarry/k8lib.tar.xz
docs/experiments/six_block_k8.sh $B /tmp/k8lib/libmc_kernels.so $R > $R/driver.log 2>&1
echo "driver done at $SECONDS s" >> $R/progress.txt
for side in k8 base; do
  if [ $side = k8 ]; then export LD_LIBRARY_PATH=/tmp/k8lib; else unset LD_LIBRARY_PATH; fi
  timeout 90 ncu --clock-control none -k regex:'ckpt_(bwd|piece_carry)' -c 3 --csv --metrics \
    gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__sass_inst_executed_op_local_ld.sum \
    $B/bench/bench_scan --batch=16 --cases=2048:16 --routes=checkpointed-hw:cpt1:p1 --dtypes=bf16 \
    --benchmark_filter=scan_bwd --benchmark_min_time=0.01 > $R/ncu_b16_${side}.csv 2>&1
done
unset LD_LIBRARY_PATH
echo "all done at $SECONDS s" >> $R/progress.txt
