#!/usr/bin/env bash
# abpieces.sh — A/B of the pieces' passes (carry pass, state pass on the refill's layout):
# this build (new, STAGED_AT) against 39c481b's library (old, ablib/, ABLIB_AT), alternated
# twice; then ncu of the passes of each at B 8 :p2. Run through lease.sh's cmd mode:
#   LEASE_CMD='bash devcarry/abpieces.sh' bash devcarry/lease.sh 560 info cmd
B=$PWD/devcarry/build; R=$OUT/res; mkdir -p $R/ab
[ -d $B/ablib ] || tar -C $B -xJf devcarry/ablib.tar.xz
run() {  # side tag bench_scan-args...
  local side=$1 tag=$2; shift 2
  if [ $side = old ]; then export LD_LIBRARY_PATH=$B/ablib; else unset LD_LIBRARY_PATH; fi
  $B/bench/bench_scan "$@" --json=$R/ab/${tag}_${side}.json > $R/ab/${tag}_${side}.txt 2>&1
}
for i in 1 2; do
  for side in new old; do
    run $side b1_$i --batch=1 --cases=2048:16,8192:16 --routes=checkpointed-hw --dtypes=bf16,f32
    run $side b2_$i --batch=2 --cases=2048:16,8192:16 --routes=checkpointed-hw --dtypes=bf16,f32
    run $side b4_$i --batch=4 --cases=2048:16 --routes=checkpointed-hw --dtypes=bf16,f32
    run $side b8p2_$i --batch=8 --cases=2048:16 --routes=checkpointed-hw:p1,checkpointed-hw:p2 --dtypes=bf16
    echo "$side $i done at $SECONDS s" >> $R/ab/progress.txt
  done
done
for side in new old; do
  if [ $side = old ]; then export LD_LIBRARY_PATH=$B/ablib; else unset LD_LIBRARY_PATH; fi
  ncu --clock-control none -k regex:'piece_(carry|state)' -c 4 --csv --metrics \
    gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    $B/bench/bench_scan --batch=8 --cases=2048:16 --routes=checkpointed-hw:p2 --dtypes=bf16 \
    --benchmark_filter=fwdbwd --benchmark_min_time=0.01 > $R/ab/ncu_${side}.csv 2>&1
done
unset LD_LIBRARY_PATH
echo "all done at $SECONDS s" >> $R/ab/progress.txt
