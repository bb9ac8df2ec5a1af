#!/usr/bin/env bash
# twenty-fourth session's last device call: devcarry/s26/run.sh PART...
#   ckws  bench_train_step's bf16 rows: the new default (the tier's 4 MiB workspace) against
#         --cublas-workspace=33554432 (the old default), alternated twice (~40 s)
#   fast  the fast GPU suite without ScanParity and ScanEmulationBits (run on the same kernels,
#         SASS equal, in call 2 of this session)
# Carry ["devcarry/s26"]; results under $OUT/res, packed into $OUT/all.tar.gz.
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-575} - ($(date +%s) - t0))); }
R=$OUT/res; mkdir -p $R
X=$root/devcarry/x6; B=$X/build
[ -d $B ] || { mkdir -p $X && tar -C $X -xJf devcarry/s26/build.tar.xz; }
sa=$(sed -n 's/^# Build directory: //p' "$B/CTestTestfile.cmake")
[ -n "$sa" ] && [ "$sa" != "$B" ] && find "$B" -name '*.cmake' -print0 | xargs -0 sed -i "s#$sa#$B#g"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 > $R/gpu.txt
cat devcarry/s26/STAGED_AT > $R/staged_at.txt
log() { echo "$* at $(( $(date +%s) - t0 )) s" >> $R/done.txt; }
log "extracted ($*)"
for part in "$@"; do case $part in
  ckws)
    mkdir -p $R/ckws
    for i in 1 2; do
      for v in tier ws32; do
        case $v in tier) a="";; ws32) a="--cublas-workspace=33554432";; esac
        timeout $(( $(left) - 10 )) $B/bench/bench_train_step --benchmark_filter=bf16 $a \
          --json=$R/ckws/${v}_$i.json > $R/ckws/${v}_$i.log 2>&1
      done
    done
    log "ckws rc=$?" ;;
  model)
    CTEST_ARGS="-LE slow -R Model|Step|Determinism|MemoryPlan|ScanSegments|bench_train_step -j 8" \
      timeout $(( $(left) - 15 )) scripts/gpu_session.sh $B $R/model tests > $R/model.txt 2>&1
    log "model suites rc=$?" ;;
  fast)
    CTEST_ARGS="-LE slow -E ScanParity|ScanEmulationBits -j 8" timeout $(( $(left) - 15 )) \
      scripts/gpu_session.sh $B $R/fast tests > $R/fast.txt 2>&1
    log "fast suite rc=$?" ;;
esac; done
log finished
tar -C $OUT -czf /tmp/all.tar.gz res && rm -rf $OUT/res && mv /tmp/all.tar.gz $OUT/all.tar.gz
