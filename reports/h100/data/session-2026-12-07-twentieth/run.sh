#!/usr/bin/env bash
# twentieth session's device calls: scripts/s20/run.sh PART... with PART one of
#   report  (H200 only) the report lease: the peer built and timed beside ours, scan and step
#   ab      gpu_session.sh abscan: MC_SCAN_PREFETCH_CKPT=1's library ("new") against HEAD's
#           ("old"), bf16/f16/f32, B 8, d_inner 1536, T 2048, d_state 16; then the f32 step
#           (768 / 512 and 2048, one layer) with HEAD's library against 054da3f's, alternated twice
#   f16slow the slow suite's F16DModel2048 alone (16 OpenMP threads)
#   sanslow scripts/sanitize.sh on the step binaries (three processes) beside Bf16DModel2048
# Results under $OUT/res, packed into $OUT/all.tar.gz. HEAD = 1da184f's staged build (its
# kernels are a2eaecf's, checked by cuobjdump); libs: headlib, pflib, oldlib (054da3f).
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-575} - ($(date +%s) - t0))); }
R=$OUT/res; mkdir -p $R
X=$root/devcarry/x; B=$X/build
if [ ! -d $B ] || [ ! -f $X/headlib/libmc_kernels.so ]; then
  rm -rf $X && mkdir -p $X && tar -C $X -xJf devcarry/s20/buildnolib.tar.xz && tar -C $X -xJf devcarry/s20/libs3.tar.xz
fi
cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo "$gpu" > $R/gpu.txt; cat devcarry/STAGED_AT > $R/staged_at.txt
md5sum $X/*/libmc_kernels.so > $R/libs.md5
log() { echo "$* at $(( $(date +%s) - t0 )) s" >> $R/done.txt; }
log "extracted ($*)"
for part in "$@"; do case $part in
  report)
    echo "$gpu" | grep -q H200 || { log "report skipped: not an H200"; continue; }
    rm -rf /tmp/peer && cp -r .peer /tmp/peer
    export TIMEOUT_peer_train_step=220 TIMEOUT_peer_scan=120
    PEER_DIR=/tmp/peer SCAN_ARGS="--routes=checkpointed-hw,checkpointed-acc" \
      timeout $(( $(left) - 20 )) scripts/gpu_session.sh $B $R/r info peerbuild peerstep peer scanbench train
    log "report rc=$?" ;;
  ab)
    scripts/gpu_session.sh $B $R/r info > /dev/null 2>&1
    cp $X/pflib/libmc_kernels.so $B/kernels/libmc_kernels.so
    AB_LIB=$X/headlib/libmc_kernels.so AB_ARGS="--cases=2048:16 --routes=checkpointed-hw:p1,checkpointed-acc --dtypes=bf16,f16,f32" \
      timeout 150 scripts/gpu_session.sh $B $R/pf abscan
    log "pf abscan rc=$?"
    mkdir -p $R/trainab
    for i in 1 2; do for side in new old; do
      [ $side = new ] && cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so || cp $X/oldlib/libmc_kernels.so $B/kernels/libmc_kernels.so
      timeout 40 $B/bench/bench_train_step --benchmark_filter='dm:768/L:1/B:8/T:(512|2048)/f32' \
        --json=$R/trainab/${side}_$i.json > $R/trainab/${side}_$i.log 2>&1
    done; done
    cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so
    log "trainab" ;;
  f16slow)
    mkdir -p $R/slow
    OMP_NUM_THREADS=16 MAMBACHECK_PRECISION_JSON=$R/slow/precision_f16_2048.json timeout $(( $(left) - 10 )) \
      ctest --test-dir $B -L slow -R "F16DModel2048" --output-on-failure > $R/slow/ctest_f16_2048.txt 2>&1
    log "F16DModel2048 rc=$?" ;;
  sanslow)
    mkdir -p $R/san $R/slow
    san() { local tag=$1; shift
      ( env "$@" SANITIZE_LOG_DIR=$R/san/$tag timeout $(( $(left) - 15 )) scripts/sanitize.sh $B > $R/san/$tag.txt 2>&1
        log "sanitize $tag rc=$?" ) & }
    san step_mi SANITIZE_BINARIES=test_step_parity "SANITIZE_TOOLS=memcheck initcheck"
    san step_rc SANITIZE_BINARIES=test_step_parity SANITIZE_TOOLS=racecheck
    san rest "SANITIZE_BINARIES=test_model_parity test_nonfinite test_shape_properties"
    OMP_NUM_THREADS=12 MAMBACHECK_PRECISION_JSON=$R/slow/precision_bf16_2048.json timeout $(( $(left) - 10 )) \
      ctest --test-dir $B -L slow -R "Bf16DModel2048" --output-on-failure > $R/slow/ctest_bf16_2048.txt 2>&1
    log "Bf16DModel2048 rc=$?"
    wait ;;
esac; done
log finished
tar -C $OUT -czf /tmp/all.tar.gz res && rm -rf $OUT/res && mv /tmp/all.tar.gz $OUT/all.tar.gz
