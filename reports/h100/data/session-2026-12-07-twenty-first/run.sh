#!/usr/bin/env bash
# twenty-first session's device calls: devcarry/s21/run.sh PART...
#   ab     prefetch_wide.patch's library ("new") against HEAD's ("old"): d_state 64/128/256
#          (bf16, f32) and the pieces (B 2, d_state 16), gpu_session.sh abscan
#   check  the scan suites (ScanParity|ScanEmulationBits|ScanSegments) and the sanitizer on
#          test_scan_parity, with HEAD's library
#   report the report lease: the peer built and timed beside ours, scan and step (no kind check)
#   fast   the fast GPU suite (ctest -L gpu -LE slow) with HEAD's library
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-575} - ($(date +%s) - t0))); }
R=$OUT/res; mkdir -p $R
X=$root/devcarry/x; B=$X/build
if [ ! -d $B ] || [ ! -f $X/headlib/libmc_kernels.so ]; then
  rm -rf $X && mkdir -p $X && tar -C $X -xJf devcarry/s21/buildnolib.tar.xz && tar -C $X -xJf devcarry/s21/libs2.tar.xz
fi
cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo "$gpu" > $R/gpu.txt; cat devcarry/STAGED_AT > $R/staged_at.txt
md5sum $X/*/libmc_kernels.so > $R/libs.md5
log() { echo "$* at $(( $(date +%s) - t0 )) s" >> $R/done.txt; }
log "extracted ($*)"
for part in "$@"; do case $part in
  ab)
    scripts/gpu_session.sh $B $R/r info > /dev/null 2>&1
    cp $X/widelib/libmc_kernels.so $B/kernels/libmc_kernels.so
    AB_LIB=$X/headlib/libmc_kernels.so AB_ARGS="--cases=2048:64,2048:128,2048:256 --routes=checkpointed-hw,checkpointed-acc --dtypes=bf16,f32 --benchmark_filter=scan_bwd" \
      timeout 200 scripts/gpu_session.sh $B $R/wide abscan
    log "wide abscan rc=$?"
    cp $X/widelib/libmc_kernels.so $B/kernels/libmc_kernels.so
    AB_LIB=$X/headlib/libmc_kernels.so AB_ARGS="--batch=2 --cases=2048:16,8192:16 --routes=checkpointed-hw,checkpointed-acc --dtypes=bf16,f32 --benchmark_filter=scan_bwd" \
      timeout 100 scripts/gpu_session.sh $B $R/pieces abscan
    log "pieces abscan rc=$?"
    cp $X/headlib/libmc_kernels.so $B/kernels/libmc_kernels.so ;;
  check)
    ( SANITIZE_BINARIES=test_scan_parity SANITIZE_TOOLS=racecheck timeout $(( $(left) - 10 )) scripts/gpu_session.sh $B $R/san_rc sanitize > $R/san_rc.txt 2>&1
      log "racecheck rc=$?" ) &
    ( SANITIZE_BINARIES=test_scan_parity "SANITIZE_TOOLS=memcheck initcheck" timeout $(( $(left) - 10 )) scripts/gpu_session.sh $B $R/san_mi sanitize > $R/san_mi.txt 2>&1
      log "memcheck initcheck rc=$?" ) &
    CTEST_ARGS="-R ScanParity|ScanEmulationBits|ScanSegments -j 6" \
      timeout $(( $(left) - 15 )) scripts/gpu_session.sh $B $R/check tests > $R/check.txt 2>&1
    log "check rc=$?"
    wait ;;
  report)
    rm -rf /tmp/peer && cp -r .peer /tmp/peer
    export TIMEOUT_peer_train_step=200 TIMEOUT_peer_scan=100
    PEER_DIR=/tmp/peer SCAN_ARGS="--routes=checkpointed-hw,checkpointed-acc" \
      timeout $(( $(left) - 20 )) scripts/gpu_session.sh $B $R/r info peerbuild peerstep peer scanbench train > $R/report.txt 2>&1
    log "report rc=$?" ;;
  fast)
    CTEST_ARGS="-LE slow -j 8" timeout $(( $(left) - 15 )) scripts/gpu_session.sh $B $R/fast tests
    log "fast rc=$?" ;;
esac; done
log finished
tar -C $OUT -czf /tmp/all.tar.gz res && rm -rf $OUT/res && mv /tmp/all.tar.gz $OUT/all.tar.gz
