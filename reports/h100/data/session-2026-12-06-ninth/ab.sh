#!/usr/bin/env bash
# ab.sh — A/B of the refill: this build's kernels (new) against acbcdd6's (old, ablib/),
# alternated twice in one process order; then ncu of the refill launches of each.
B=$PWD/devcarry/build; R=$OUT/res; mkdir -p $R/ab
TS="--benchmark_filter=dm:768/L:1/B:8/T:2048/bf16|dm:2048/L:1/B:8/T:2048/bf16|dm:768/L:4/B:8/T:2048/bf16"
SC="--batch=8 --d_inner=1536 --cases=2048:16 --routes=checkpointed-hw,checkpointed-hw:g61,checkpointed-hw:g8 --dtypes=bf16,f32"
LD_LIBRARY_PATH=$B/ablib ldd $B/bench/bench_scan | grep mc_kernels > $R/ab/ldd_old.txt; ldd $B/bench/bench_scan | grep mc_kernels > $R/ab/ldd_new.txt
for i in 1 2; do
  for side in new old; do
    if [ $side = old ]; then export LD_LIBRARY_PATH=$B/ablib; else unset LD_LIBRARY_PATH; fi
    $B/bench/bench_scan $SC --json=$R/ab/scan_${side}_$i.json > $R/ab/scan_${side}_$i.txt 2>&1
    $B/bench/bench_train_step "$TS" --json=$R/ab/train_${side}_$i.json > $R/ab/train_${side}_$i.txt 2>&1
    echo "$side $i done at $SECONDS s" >> $R/ab/progress.txt
  done
done
unset LD_LIBRARY_PATH
$B/bench/bench_train_step --benchmark_filter=bf16 --json=$R/ab/train_new_allbf16.json > $R/ab/train_new_allbf16.txt 2>&1
$B/bench/bench_train_step "$TS" --scan-checkpoints=every --json=$R/ab/train_every.json > $R/ab/train_every.txt 2>&1
for side in new old; do
  if [ $side = old ]; then export LD_LIBRARY_PATH=$B/ablib; else unset LD_LIBRARY_PATH; fi
  ncu --clock-control none --kernel-name regex:'refill' --launch-count 3 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
    $B/bench/bench_scan --batch=8 --d_inner=1536 --cases=2048:16 --routes=checkpointed-hw:g61 --dtypes=bf16 \
    --benchmark_filter=bwd > $R/ab/ncu_${side}.txt 2>&1
done
echo "all done at $SECONDS s" >> $R/ab/progress.txt
