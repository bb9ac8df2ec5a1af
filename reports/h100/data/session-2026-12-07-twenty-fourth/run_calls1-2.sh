#!/usr/bin/env bash
# next session's device calls (prepared in the twenty-third session): devcarry/s25/run.sh PART...
#   hxab     docs/experiments/da_halves_all.sh: the halves-everywhere library (hxlib.tar.xz)
#            against the build's own (8a7bc7c's kernels), backward at d_state 16/64/128/256 (~3 min)
#   hxcheck  `checks` with that library swapped in (then the build's own restored)
#   ckab     the bf16 step rows three ways, alternated twice (~1 min): default; a 4 MiB cuBLAS
#            workspace; every chunk's scan state with a 4 MiB workspace (no refill; the plan fits
#            under the peer's peak at 768/512, 768/2048, 1024/2048 - performance-notes.md)
#   checks   the scan suites (ScanParity with the new bf16/f16 d_state 48 cases, ScanEmulationBits,
#            ScanSegments) beside scripts/sanitize.sh on test_scan_parity: racecheck (7 cases now,
#            ~350 s on an H100) and memcheck + initcheck, in parallel
#   bf16slow the slow suite's Bf16DModel2048 alone (16 OpenMP threads; 333 s on the H200)
#   report   the report lease in the README's order (~560 s on the H100, 428 s on the H200)
#   fast     the fast GPU suite (ctest -L gpu -LE slow -j 8, ~470 s)
# Carry ["devcarry/s25", ".peer"]; results under $OUT/res, packed into $OUT/all.tar.gz.
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-575} - ($(date +%s) - t0))); }
R=$OUT/res; mkdir -p $R
X=$root/devcarry/x5; B=$X/build
[ -d $B ] || { mkdir -p $X && tar -C $X -xJf devcarry/s25/build.tar.xz && tar -C $X -xJf devcarry/s25/hxlib.tar.xz; }
[ -f $X/headlib.so ] || cp $B/kernels/libmc_kernels.so $X/headlib.so
cp $X/headlib.so $B/kernels/libmc_kernels.so
# the stage's CTest files name /tmp/stage: point them here (gpu_session.sh does the same)
sa=$(sed -n 's/^# Build directory: //p' "$B/CTestTestfile.cmake")
[ -n "$sa" ] && [ "$sa" != "$B" ] && find "$B" -name '*.cmake' -print0 | xargs -0 sed -i "s#$sa#$B#g"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 > $R/gpu.txt
cat devcarry/s25/STAGED_AT > $R/staged_at.txt
md5sum $X/headlib.so $X/hxlib/libmc_kernels.so > $R/libs.md5
log() { echo "$* at $(( $(date +%s) - t0 )) s" >> $R/done.txt; }
log "extracted ($*)"
for part in "$@"; do case $part in
  hxab)
    timeout $(( $(left) - 10 )) docs/experiments/da_halves_all.sh $B $X/hxlib/libmc_kernels.so $R/hxab > $R/hxab.txt 2>&1
    log "hxab rc=$?"
    cp $X/headlib.so $B/kernels/libmc_kernels.so ;;
  hxcheck)
    cp $X/hxlib/libmc_kernels.so $B/kernels/libmc_kernels.so
    R0=$R; R=$R/hx; mkdir -p $R
    ( export SANITIZE_BINARIES=test_scan_parity SANITIZE_TOOLS=racecheck
      timeout $(( $(left) - 10 )) scripts/gpu_session.sh $B $R/san_rc sanitize > $R/san_rc.txt 2>&1
      log "racecheck rc=$?" ) &
    ( export SANITIZE_BINARIES=test_scan_parity SANITIZE_TOOLS="memcheck initcheck"
      timeout $(( $(left) - 10 )) scripts/gpu_session.sh $B $R/san_mi sanitize > $R/san_mi.txt 2>&1
      log "memcheck initcheck rc=$?" ) &
    CTEST_ARGS="-R ScanParity|ScanEmulationBits|ScanSegments -j 6" \
      timeout $(( $(left) - 15 )) scripts/gpu_session.sh $B $R/suites tests > $R/suites.txt 2>&1
    log "scan suites rc=$?"
    wait
    R=$R0
    cp $X/headlib.so $B/kernels/libmc_kernels.so ;;
  ckab)
    mkdir -p $R/ckab
    for i in 1 2; do
      for v in default ws4 every_ws4; do
        case $v in default) a="";; ws4) a="--cublas-workspace=4194304";;
          every_ws4) a="--cublas-workspace=4194304 --scan-checkpoints=every";; esac
        timeout $(( $(left) - 10 )) $B/bench/bench_train_step --benchmark_filter=bf16 $a \
          --json=$R/ckab/${v}_$i.json > $R/ckab/${v}_$i.log 2>&1
      done
    done
    log "ckab rc=$?" ;;
  ckab32)
    mkdir -p $R/ckab32
    for i in 1 2; do
      for v in default ws4; do
        case $v in default) a="";; ws4) a="--cublas-workspace=4194304";; esac
        timeout $(( $(left) - 10 )) $B/bench/bench_train_step --benchmark_filter=f32 $a \
          --json=$R/ckab32/${v}_$i.json > $R/ckab32/${v}_$i.log 2>&1
      done
    done
    log "ckab32 rc=$?" ;;
  checks)
    ( export SANITIZE_BINARIES=test_scan_parity SANITIZE_TOOLS=racecheck
      timeout $(( $(left) - 10 )) scripts/gpu_session.sh $B $R/san_rc sanitize > $R/san_rc.txt 2>&1
      log "racecheck rc=$?" ) &
    ( export SANITIZE_BINARIES=test_scan_parity SANITIZE_TOOLS="memcheck initcheck"
      timeout $(( $(left) - 10 )) scripts/gpu_session.sh $B $R/san_mi sanitize > $R/san_mi.txt 2>&1
      log "memcheck initcheck rc=$?" ) &
    CTEST_ARGS="-R ScanParity|ScanEmulationBits|ScanSegments -j 6" \
      timeout $(( $(left) - 15 )) scripts/gpu_session.sh $B $R/suites tests > $R/suites.txt 2>&1
    log "scan suites rc=$?"
    wait ;;
  bf16slow)
    mkdir -p $R/slow
    OMP_NUM_THREADS=16 MAMBACHECK_PRECISION_JSON=$R/slow/precision_bf16_2048.json timeout $(( $(left) - 10 )) \
      ctest --test-dir $B -L slow -R "Bf16DModel2048" --output-on-failure > $R/slow/ctest_bf16_2048.txt 2>&1
    log "Bf16DModel2048 rc=$?" ;;
  report)
    rm -rf /tmp/peer && cp -r .peer /tmp/peer
    PEER_DIR=/tmp/peer SCAN_ARGS="--routes=checkpointed-hw,checkpointed-acc" \
      timeout $(( $(left) - 20 )) scripts/gpu_session.sh $B $R/r info peerbuild scanbench train peer peerstep > $R/report.txt 2>&1
    log "report rc=$?" ;;
  fast)
    CTEST_ARGS="-LE slow -j 8" timeout $(( $(left) - 15 )) scripts/gpu_session.sh $B $R/fast tests > $R/fast.txt 2>&1
    log "fast suite rc=$?" ;;
esac; done
log finished
tar -C $OUT -czf /tmp/all.tar.gz res && rm -rf $OUT/res && mv /tmp/all.tar.gz $OUT/all.tar.gz
