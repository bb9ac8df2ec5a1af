#!/usr/bin/env bash
# call 1 (nineteenth session): on an H200, the report lease (peer built and timed beside ours:
# scan and step), after the transform-unroll A/B (abscan: "new" = HEAD's kernels, "old" = the
# unrolled experiment). On an H100: the A/B, then the scan GPU tests.
set -u
t0=$(date +%s)
root=$PWD
left() { echo $((${DEADLINE:-570} - ($(date +%s) - t0))); }
R=$OUT/res; mkdir -p $R
finish() { echo "finished at $(( $(date +%s) - t0 )) s" >> $R/done.txt; tar -C $OUT -czf /tmp/all.tar.gz res && rm -rf $OUT/res && mv /tmp/all.tar.gz $OUT/all.tar.gz; }
rm -rf devcarry/x && mkdir -p devcarry/x && tar -C devcarry/x -xJf devcarry/build.tar.xz && tar -C devcarry/x -xJf devcarry/unrolllib.tar.xz
B=$root/devcarry/x/build
export AB_LIB=$root/devcarry/x/unrolllib/libmc_kernels.so
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo "$gpu" > $R/gpu.txt; cat devcarry/STAGED_AT > $R/staged_at.txt
md5sum $B/kernels/libmc_kernels.so $AB_LIB > $R/libs.md5
echo "extracted at $(( $(date +%s) - t0 )) s" > $R/done.txt
export TIMEOUT_peer_train_step=220 TIMEOUT_peer_scan=120 TIMEOUT_ctest_gpu=240
export AB_ARGS="--cases=2048:16 --routes=checkpointed-hw:p1,checkpointed-acc --dtypes=bf16,f32"
if echo "$gpu" | grep -q H200; then
  rm -rf /tmp/peer && cp -r .peer /tmp/peer
  PEER_DIR=/tmp/peer SCAN_ARGS="--routes=checkpointed-hw,checkpointed-acc" \
    timeout $(( $(left) - 25 )) scripts/gpu_session.sh $B $R/r info peerbuild abscan peerstep peer scanbench train
else
  timeout $(( $(left) - 25 )) scripts/gpu_session.sh $B $R/r info abscan
  echo "abscan done at $(( $(date +%s) - t0 )) s" >> $R/done.txt
  DEADLINE=$(( $(left) - 15 )) devcarry/s19/call2.sh
fi
echo "gpu_session rc=$? at $(( $(date +%s) - t0 )) s" >> $R/done.txt
finish
