#!/usr/bin/env bash
# call 2 (eighteenth session): the staged build's library is new2 (f32 B/C copy + staged
# checkpoints, 60d560f); devcarry/newlib.tar.xz is new1 (the f32 B/C copy alone, ce5778b).
# Scan GPU tests on new2, A/B new2 vs new1 (scan + step), Nsight Compute of new2's backward and
# forward; on an H200 also the report lease with the peer.
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-560} - ($(date +%s) - t0))); }
R=$OUT/res; mkdir -p $R
finish() { echo "finished at $(( $(date +%s) - t0 )) s" >> $R/done.txt; tar -C $OUT -czf /tmp/all.tar.gz res && rm -rf $OUT/res && mv /tmp/all.tar.gz $OUT/all.tar.gz; }
rm -rf devcarry/x && mkdir -p devcarry/x && tar -C devcarry/x -xJf devcarry/build.tar.xz && tar -C devcarry/x -xJf devcarry/newlib.tar.xz
B=$root/devcarry/x/build
find $B -name '*.cmake' -print0 | xargs -0 sed -i "s#/tmp/stage#$B#g"
export AB_LIB=$root/devcarry/x/newlib/libmc_kernels.so
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu" > $R/gpu.txt; cat devcarry/STAGED_AT > $R/staged_at.txt
md5sum $B/kernels/libmc_kernels.so $AB_LIB > $R/libs.md5
export TIMEOUT_ncu_bwd=120 TIMEOUT_peer_train_step=200 TIMEOUT_peer_scan=90 TIMEOUT_ctest_gpu=200
export AB_ARGS="--cases=2048:16 --routes=checkpointed-hw:p1,checkpointed-acc --dtypes=bf16,f32"
export CTEST_ARGS="-R ScanParity|ScanEmulationBits|ScanSegments -j 8"
cat > /tmp/ncufwd.sh <<EOS
ncu --clock-control none --kernel-name regex:ckpt_fwd --launch-count 1 --section WarpStateStats \
  --section SchedulerStats --section InstructionStats --section SourceCounters --section Occupancy \
  --section SpeedOfLight --section MemoryWorkloadAnalysis -f -o $R/ncu_fwd $B/bench/bench_scan \
  --cases=2048:16 --routes=checkpointed-hw:p1 --dtypes=bf16 --benchmark_filter=scan_fwd/ --benchmark_min_time=0.01
ncu --import $R/ncu_fwd.ncu-rep --page details > $R/ncu_fwd_details.txt
ncu --import $R/ncu_fwd.ncu-rep --page source --csv --print-source sass > $R/ncu_fwd_sass.csv
EOS
chmod +x /tmp/ncufwd.sh
if echo "$gpu" | grep -q H200 && [ "${SKIP_REPORT:-0}" = 0 ]; then
  rm -rf /tmp/peer && cp -r .peer /tmp/peer
  cat > /tmp/pick_lib.sh <<EOS
#!/usr/bin/env bash
/tmp/ncufwd.sh > $R/ncufwd.log 2>&1
if grep -q "100% tests passed" $R/r/logs/ctest-gpu.txt 2>/dev/null; then echo "report: new2 library" > $R/report_lib.txt
else cp $AB_LIB $B/kernels/libmc_kernels.so; echo "report: new1 library (new2's tests did not all pass)" > $R/report_lib.txt; fi
EOS
  chmod +x /tmp/pick_lib.sh
  PHASE_CMD=/tmp/pick_lib.sh PEER_DIR=/tmp/peer SCAN_ARGS="--routes=checkpointed-hw,checkpointed-acc" \
    timeout $(( $(left) - 50 )) scripts/gpu_session.sh $B $R/r \
    info peerbuild tests ncubwd abscan cmd peerstep peer scanbench train
else
  PHASE_CMD=/tmp/ncufwd.sh timeout $(( $(left) - 50 )) scripts/gpu_session.sh $B $R/r info tests ncubwd abscan cmd
fi
echo "gpu_session rc=$? at $(( $(date +%s) - t0 )) s" | tee $R/done.txt
# the layer step, new2 against new1, twice, every default row
if [ $(left) -gt 110 ]; then
  mkdir -p $R/trainab
  cp $B/kernels/libmc_kernels.so devcarry/x/new2.so
  for i in 1 2; do
    for side in new2 new1; do
      [ $side = new2 ] && cp devcarry/x/new2.so $B/kernels/libmc_kernels.so || cp $AB_LIB $B/kernels/libmc_kernels.so
      [ $(left) -gt 60 ] && timeout 45 $B/bench/bench_train_step --json=$R/trainab/${side}_$i.json > $R/trainab/${side}_$i.log 2>&1
    done
  done
  cp devcarry/x/new2.so $B/kernels/libmc_kernels.so
fi
finish
