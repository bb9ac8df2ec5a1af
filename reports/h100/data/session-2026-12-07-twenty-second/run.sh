#!/usr/bin/env bash
# next session's device calls (prepared in the twenty-first session): devcarry/s22/run.sh PART...
#   kd      docs/experiments/keep_da.patch's library ("new") against HEAD's ("old"): the backward
#           at d_state 16/64/256, accurate exp (plan, :p2) with the hardware exp as the control,
#           f32 and bf16 (abscan); then bench_train_step f32 768/2048 one layer, alternated twice
#   kdcheck the scan suites and the sanitizer on test_scan_parity with the keep-dA library (~300 s)
#   report  the report lease (README order): ours, then the peer built and timed
#   f16slow the slow suite's F16DModel2048 alone (16 OpenMP threads)
# Results under $OUT/res, packed into $OUT/all.tar.gz. Staged at devcarry/STAGED_AT.
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-575} - ($(date +%s) - t0))); }
R=$OUT/res; mkdir -p $R
X=$root/devcarry/x; B=$X/build
if [ ! -d $B ] || [ ! -f $X/headlib/libmc_kernels.so ]; then
  rm -rf $X && mkdir -p $X && tar -C $X -xJf devcarry/s22/buildnolib.tar.xz && tar -C $X -xJf devcarry/s22/libs2.tar.xz
fi
cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo "$gpu" > $R/gpu.txt; cat devcarry/STAGED_AT > $R/staged_at.txt
md5sum $X/*/libmc_kernels.so > $R/libs.md5
log() { echo "$* at $(( $(date +%s) - t0 )) s" >> $R/done.txt; }
log "extracted ($*)"
for part in "$@"; do case $part in
  kd)
    scripts/gpu_session.sh $B $R/r info > /dev/null 2>&1
    cp $X/keepdalib/libmc_kernels.so $B/kernels/libmc_kernels.so
    AB_LIB=$X/headlib/libmc_kernels.so AB_ARGS="--cases=2048:16 --routes=checkpointed-acc,checkpointed-acc:p2,checkpointed-hw --dtypes=f32,bf16 --benchmark_filter=scan_bwd" \
      timeout 100 scripts/gpu_session.sh $B $R/kd16 abscan
    log "kd16 abscan rc=$?"
    cp $X/keepdalib/libmc_kernels.so $B/kernels/libmc_kernels.so
    AB_LIB=$X/headlib/libmc_kernels.so AB_ARGS="--cases=2048:64,2048:256 --routes=checkpointed-acc,checkpointed-hw --dtypes=f32,bf16 --benchmark_filter=scan_bwd" \
      timeout 200 scripts/gpu_session.sh $B $R/kdwide abscan
    log "kdwide abscan rc=$?"
    mkdir -p $R/trainab
    for i in 1 2; do for side in new old; do
      [ $side = new ] && cp $X/keepdalib/libmc_kernels.so $B/kernels/libmc_kernels.so || cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so
      timeout 40 $B/bench/bench_train_step --benchmark_filter='dm:768/L:1/B:8/T:2048/f32' \
        --json=$R/trainab/${side}_$i.json > $R/trainab/${side}_$i.log 2>&1
    done; done
    cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so
    log "trainab" ;;
  all)  # the report lease (README order) with the d_state 16 keep-dA A/B while the peer builds
    rm -rf /tmp/peer && cp -r .peer /tmp/peer
    cat > /tmp/swap.sh <<EOS
if cmp -s $B/kernels/libmc_kernels.so $X/headlib/libmc_kernels.so; then cp $X/keepdalib/libmc_kernels.so $B/kernels/libmc_kernels.so; echo "now keepda"; else cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so; echo "now head"; fi
EOS
    PHASE_CMD="sh /tmp/swap.sh" AB_LIB=$X/headlib/libmc_kernels.so \
    AB_ARGS="--cases=2048:16 --routes=checkpointed-acc,checkpointed-acc:p2,checkpointed-hw --dtypes=f32,bf16 --benchmark_filter=scan_bwd" \
    PEER_DIR=/tmp/peer SCAN_ARGS="--routes=checkpointed-hw,checkpointed-acc" \
      timeout $(( $(left) - 20 )) scripts/gpu_session.sh $B $R/r info peerbuild scanbench train cmd abscan cmd peer peerstep > $R/report.txt 2>&1
    log "all rc=$?"
    cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so ;;
  kdwide)
    cp $X/keepdalib/libmc_kernels.so $B/kernels/libmc_kernels.so
    AB_LIB=$X/headlib/libmc_kernels.so AB_ARGS="--cases=2048:64,2048:256 --routes=checkpointed-acc,checkpointed-hw --dtypes=f32,bf16 --benchmark_filter=scan_bwd" \
      timeout $(( $(left) - 20 )) scripts/gpu_session.sh $B $R/kdwide abscan
    log "kdwide abscan rc=$?"
    cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so ;;
  trainab)
    mkdir -p $R/trainab
    for i in 1 2; do for side in new old; do
      [ $side = new ] && cp $X/keepdalib/libmc_kernels.so $B/kernels/libmc_kernels.so || cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so
      timeout 40 $B/bench/bench_train_step --benchmark_filter='dm:768/L:1/B:8/T:2048/f32' \
        --json=$R/trainab/${side}_$i.json > $R/trainab/${side}_$i.log 2>&1
    done; done
    cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so
    log "trainab" ;;
  kdcheck)  # the scan suites and the sanitizer on the keep-dA library (to turn it on with device evidence)
    cp $X/keepdalib/libmc_kernels.so $B/kernels/libmc_kernels.so
    ( SANITIZE_BINARIES=test_scan_parity SANITIZE_TOOLS=racecheck timeout $(( $(left) - 10 )) scripts/gpu_session.sh $B $R/kdsan_rc sanitize > $R/kdsan_rc.txt 2>&1
      log "kd racecheck rc=$?" ) &
    ( export SANITIZE_BINARIES=test_scan_parity SANITIZE_TOOLS="memcheck initcheck"
      timeout $(( $(left) - 10 )) scripts/gpu_session.sh $B $R/kdsan_mi sanitize > $R/kdsan_mi.txt 2>&1
      log "kd memcheck initcheck rc=$?" ) &
    CTEST_ARGS="-R ScanParity|ScanEmulationBits|ScanSegments -j 6" \
      timeout $(( $(left) - 15 )) scripts/gpu_session.sh $B $R/kdcheck tests > $R/kdcheck.txt 2>&1
    log "kd check rc=$?"
    wait
    cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so ;;
  report)
    rm -rf /tmp/peer && cp -r .peer /tmp/peer
    PEER_DIR=/tmp/peer SCAN_ARGS="--routes=checkpointed-hw,checkpointed-acc" \
      timeout $(( $(left) - 20 )) scripts/gpu_session.sh $B $R/r info peerbuild scanbench train peer peerstep > $R/report.txt 2>&1
    log "report rc=$?" ;;
  f16slow)
    mkdir -p $R/slow
    OMP_NUM_THREADS=16 MAMBACHECK_PRECISION_JSON=$R/slow/precision_f16_2048.json timeout $(( $(left) - 10 )) \
      ctest --test-dir $B -L slow -R "F16DModel2048" --output-on-failure > $R/slow/ctest_f16_2048.txt 2>&1
    log "F16DModel2048 rc=$?" ;;
esac; done
log finished
tar -C $OUT -czf /tmp/all.tar.gz res && rm -rf $OUT/res && mv /tmp/all.tar.gz $OUT/all.tar.gz
