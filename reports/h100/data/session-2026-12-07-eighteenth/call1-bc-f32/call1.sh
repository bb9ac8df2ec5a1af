#!/usr/bin/env bash
# call 1 of the 2026-12-07 eighteenth session. The staged build is HEAD's (old) library;
# devcarry/newlib.tar.xz holds the f32 B/C copy's library (new). Runs: the new library's
# backward stall profile (ncubwd), an A/B new vs old (abscan), the scan's GPU tests on the
# new library, the plan check; on an H200 also the report lease with the peer (ours with
# the new library if its tests passed, else the old one).
set -u
t0=$(date +%s)
root=$PWD
mkdir -p devcarry/x && tar -C devcarry/x -xJf devcarry/build.tar.xz && tar -C devcarry/x -xJf devcarry/newlib.tar.xz
B=$root/devcarry/x/build
cp $B/kernels/libmc_kernels.so devcarry/x/oldlib.so
cp devcarry/x/newlib/libmc_kernels.so $B/kernels/libmc_kernels.so
R=$OUT/res; mkdir -p $R
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu" > $R/gpu.txt; cat devcarry/STAGED_AT > $R/staged_at.txt
md5sum $B/kernels/libmc_kernels.so devcarry/x/oldlib.so > $R/libs.md5
export TIMEOUT_ncu_bwd=150 TIMEOUT_peer_train_step=200 TIMEOUT_peer_scan=90 TIMEOUT_ctest_gpu=170
export AB_LIB=$root/devcarry/x/oldlib.so
export AB_ARGS="--cases=2048:16 --routes=checkpointed-hw,checkpointed-hw:p1 --dtypes=bf16,f16,f32"
export CTEST_ARGS="-R ScanParity|ScanEmulationBits|ScanSegments -j 6"
left() { echo $((${DEADLINE:-560} - ($(date +%s) - t0))); }
if echo "$gpu" | grep -q H200 && [ "${SKIP_REPORT:-0}" = 0 ]; then
  rm -rf /tmp/peer && cp -r .peer /tmp/peer
  # part 1: the peer builds in the background of this invocation's own phases; it is waited
  # for by peerstep/peer, which therefore run in the same invocation
  cat > /tmp/pick_lib.sh <<EOS
#!/usr/bin/env bash
# keep the new library for the report only if the scan tests passed on it
if grep -q "100% tests passed" $R/r/logs/ctest-gpu.txt 2>/dev/null; then echo "report: new library" > $R/report_lib.txt
else cp $AB_LIB $B/kernels/libmc_kernels.so; echo "report: old library (tests did not all pass)" > $R/report_lib.txt; fi
EOS
  chmod +x /tmp/pick_lib.sh
  PHASE_CMD=/tmp/pick_lib.sh PEER_DIR=/tmp/peer SCAN_ARGS="--routes=checkpointed-hw,checkpointed-acc" \
    timeout $(left) scripts/gpu_session.sh $B $R/r \
    info peerbuild ncubwd abscan tests planbench cmd peerstep peer scanbench train
else
  timeout $(left) scripts/gpu_session.sh $B $R/r info ncubwd abscan tests planbench
fi
echo "gpu_session rc=$? at $(( $(date +%s) - t0 )) s" | tee $R/done.txt
# the layer step, new library against old, twice, bf16 rows (the scan's share of the step)
if [ $(left) -gt 70 ]; then
  mkdir -p $R/trainab
  cp $B/kernels/libmc_kernels.so devcarry/x/keep.so
  for i in 1 2; do
    cp devcarry/x/newlib/libmc_kernels.so $B/kernels/libmc_kernels.so
    timeout 40 $B/bench/bench_train_step --benchmark_filter=bf16 --json=$R/trainab/new_$i.json > $R/trainab/new_$i.log 2>&1
    cp $AB_LIB $B/kernels/libmc_kernels.so
    timeout 40 $B/bench/bench_train_step --benchmark_filter=bf16 --json=$R/trainab/old_$i.json > $R/trainab/old_$i.log 2>&1
  done
  cp devcarry/x/keep.so $B/kernels/libmc_kernels.so
fi
echo "all done at $(( $(date +%s) - t0 )) s" >> $R/done.txt
