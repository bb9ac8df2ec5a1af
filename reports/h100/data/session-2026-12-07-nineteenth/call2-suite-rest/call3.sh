#!/usr/bin/env bash
# call 3 (nineteenth session): the fast GPU suite's tests that call 2 did not reach before its
# limit (StepParity, StepRefusals, the graph replays, the bench smokes), then the slow suite's
# bf16/f16 d_model 768 tests side by side, on HEAD's kernels.
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-480} - ($(date +%s) - t0))); }
R=$OUT/res3; mkdir -p $R
rm -rf devcarry/x && mkdir -p devcarry/x && tar -C devcarry/x -xJf devcarry/build.tar.xz
B=$root/devcarry/x/build
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt; cat devcarry/STAGED_AT > $R/staged_at.txt
md5sum $B/kernels/libmc_kernels.so > $R/libs.md5
CTEST_ARGS="-LE slow -j 8 -R ^(Routes/StepGraphRoutes\.ReplayEqualsEagerBitwise|StepParity|StepRefusals|bench_scan_smoke|bench_train_step_smoke)" \
  TIMEOUT_ctest_gpu=$(( $(left) - 200 )) scripts/gpu_session.sh $B $R/r tests
echo "rest of the fast suite done at $(( $(date +%s) - t0 )) s" >> $R/done.txt
if [ $(left) -gt 170 ]; then
  OMP_NUM_THREADS=8 MAMBACHECK_PRECISION_JSON=$R/slow_precision.json timeout $(( $(left) - 15 )) \
    ctest --test-dir $B -L slow -R "Bf16DModel768|F16DModel768" -j 2 --output-on-failure > $R/slow_ctest.txt 2>&1
  echo "slow 768 rc=$? at $(( $(date +%s) - t0 )) s" >> $R/done.txt
fi
echo "finished at $(( $(date +%s) - t0 )) s" >> $R/done.txt
tar -C $OUT -czf /tmp/all3.tar.gz res3 && rm -rf $OUT/res3 && mv /tmp/all3.tar.gz $OUT/all3.tar.gz
