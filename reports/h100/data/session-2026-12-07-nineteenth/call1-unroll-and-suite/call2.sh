#!/usr/bin/env bash
# call 2 (nineteenth session): what issues 8 and 9 ask besides the speed, on HEAD's kernels
# (the f32 B/C copy is new since the last whole run): the fast GPU suite (-L gpu -LE slow) beside
# scripts/sanitize.sh on test_scan_parity (memcheck, racecheck, initcheck); then, with the time
# left, the slow suite's bf16/f16 768 tests.
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-575} - ($(date +%s) - t0))); }
R=$OUT/res2; mkdir -p $R
finish() { echo "finished at $(( $(date +%s) - t0 )) s" >> $R/done.txt; tar -C $OUT -czf /tmp/all2.tar.gz res2 && rm -rf $OUT/res2 && mv /tmp/all2.tar.gz $OUT/all2.tar.gz; }
if [ ! -d devcarry/x/build ]; then
  rm -rf devcarry/x && mkdir -p devcarry/x && tar -C devcarry/x -xJf devcarry/build.tar.xz
fi
B=$root/devcarry/x/build
# a fresh copy of HEAD's library (call 1's abscan restores it, but be sure)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt; cat devcarry/STAGED_AT > $R/staged_at.txt
md5sum $B/kernels/libmc_kernels.so > $R/libs.md5
echo "extracted at $(( $(date +%s) - t0 )) s" > $R/done.txt
( SANITIZE_BINARIES=test_scan_parity SANITIZE_LOG_DIR=$R/sanitize timeout $(( $(left) - 30 )) \
    scripts/sanitize.sh $B > $R/sanitize.txt 2>&1; echo "sanitize rc=$? at $(( $(date +%s) - t0 )) s" >> $R/done.txt ) &
spid=$!
CTEST_ARGS="-LE slow -j 8" TIMEOUT_ctest_gpu=$(( $(left) - 60 )) scripts/gpu_session.sh $B $R/r tests
echo "fast suite done at $(( $(date +%s) - t0 )) s" >> $R/done.txt
if [ $(left) -gt 200 ]; then
  mkdir -p $R/slow
  OMP_NUM_THREADS=8 MAMBACHECK_PRECISION_JSON=$R/slow/precision.json timeout $(( $(left) - 30 )) \
    ctest --test-dir $B -L slow -R "Bf16DModel768|F16DModel768" -j 2 --output-on-failure > $R/slow/ctest.txt 2>&1
  echo "slow 768 rc=$? at $(( $(date +%s) - t0 )) s" >> $R/done.txt
fi
wait $spid
finish
