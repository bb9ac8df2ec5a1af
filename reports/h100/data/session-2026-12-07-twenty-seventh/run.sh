#!/usr/bin/env bash
# twenty-seventh session's device calls: devcarry/s29/run.sh PART...
#   report   the report lease in the README's order (ours and the peer; 428 s on the H200)
#   fast     the fast GPU suite without ScanParity and ScanEmulationBits (they ran on kernels with
#            the same SASS in the twenty-fourth session's call 2)
#   b768     the slow suite's Bf16DModel768 (16 OpenMP threads; ~98 s at 8)
#   f768     the slow suite's F16DModel768 (16 OpenMP threads; ~122 s at 8)
#   f16slow  the slow suite's F16DModel2048 alone (16 OpenMP threads; ~380 s)
#   bf16slow the slow suite's Bf16DModel2048 alone (16 OpenMP threads; 333 s on the H200)
#   step     StepParity alone (-j 8): the fixture's workspace by tier (9eabac6)
#   san2     initcheck and racecheck on test_model_parity, test_nonfinite, test_step_parity
#   ifh200   runs the next part only on an H200 (e.g. "ifh200 report"); else skips it
# Carry ["devcarry/s29", ".peer"]; results under $OUT/res, packed into $OUT/all.tar.gz.
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-575} - ($(date +%s) - t0))); }
R=$OUT/res; mkdir -p $R
X=$root/devcarry/x9; B=$X/build
[ -d $B ] || { mkdir -p $X && tar -C $X -xJf devcarry/s29/build.tar.xz; }
sa=$(sed -n 's/^# Build directory: //p' "$B/CTestTestfile.cmake")
[ -n "$sa" ] && [ "$sa" != "$B" ] && find "$B" -name '*.cmake' -print0 | xargs -0 sed -i "s#$sa#$B#g"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 > $R/gpu.txt
cat devcarry/s29/STAGED_AT > $R/staged_at.txt
log() { echo "$* at $(( $(date +%s) - t0 )) s" >> $R/done.txt; }
log "extracted ($*)"
slow() {  # slow <ctest regex> <json tag>
  mkdir -p $R/slow
  OMP_NUM_THREADS=16 MAMBACHECK_PRECISION_JSON=$R/slow/precision_$2.json timeout $(( $(left) - 10 )) \
    ctest --test-dir $B -L slow -R "$1" --output-on-failure > $R/slow/ctest_$2.txt 2>&1
  log "$1 rc=$?"
}
skipnext=0
for part in "$@"; do
  if [ $skipnext = 1 ]; then skipnext=0; log "skipped $part (not an H200)"; continue; fi
  case $part in
  ifh200) grep -q H200 $R/gpu.txt || skipnext=1 ;;
  step)
    CTEST_ARGS="-R StepParity -j 8" timeout $(( $(left) - 15 )) \
      scripts/gpu_session.sh $B $R/step tests > $R/step.txt 2>&1
    log "step rc=$?" ;;
  san2)
    SANITIZE_BINARIES="test_model_parity test_nonfinite test_step_parity" SANITIZE_TOOLS="initcheck racecheck" \
      timeout $(( $(left) - 15 )) scripts/gpu_session.sh $B $R/san2 sanitize > $R/san2.txt 2>&1
    log "san2 rc=$?" ;;
  report)
    rm -rf /tmp/peer && cp -r .peer /tmp/peer
    PEER_DIR=/tmp/peer SCAN_ARGS="--routes=checkpointed-hw,checkpointed-acc" \
      timeout $(( $(left) - 20 )) scripts/gpu_session.sh $B $R/r info peerbuild scanbench train peer peerstep > $R/report.txt 2>&1
    log "report rc=$?" ;;
  fast)
    CTEST_ARGS="-LE slow -E ScanParity|ScanEmulationBits -j 8" timeout $(( $(left) - 15 )) \
      scripts/gpu_session.sh $B $R/fast tests > $R/fast.txt 2>&1
    log "fast suite rc=$?" ;;
  b768) slow Bf16DModel768 bf16_768 ;;
  f768) slow F16DModel768 f16_768 ;;
  f16slow) slow F16DModel2048 f16_2048 ;;
  bf16slow) slow Bf16DModel2048 bf16_2048 ;;
esac; done
log finished
tar -C $OUT -czf /tmp/all.tar.gz res && rm -rf $OUT/res && mv /tmp/all.tar.gz $OUT/all.tar.gz
