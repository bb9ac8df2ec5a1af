#!/usr/bin/env bash
# gpu_session.sh — everything a GPU machine should run in one go, for a build
# folder made elsewhere (CMAKE_CUDA_ARCHITECTURES=90) and carried over:
# device info, the GPU ctest suites, compute-sanitizer, `mambacheck validate`
# on all dtypes, and the benchmarks. Results (JSON files at the top, logs under
# logs/) are packed into <out>/results.tar.gz.
#
# usage: scripts/gpu_session.sh <build-dir | build.tar.xz> <out-dir> [phase ...]
# An archive made by scripts/pack_build.sh is unpacked beside itself (<archive>.d/build),
# once: a later call on the same machine reuses the folder.
# phases (default: info tests sanitize validate bench):
#   info      nvidia-smi, `mambacheck devices`
#   tests     the host CPU (lscpu), then ctest -L gpu (JUnit XML + log)
#   sanitize  scripts/sanitize.sh (memcheck, racecheck, initcheck on a reduced suite)
#   validate  mambacheck validate --gpu-only --dtype all --scan all --json validation.json
#   bench     bench_scan --sweep -> bench_scan.json; bench_train_step -> bench_train_step.json
#   quickbench bench_scan (default small set) -> bench_scan_quick.json
#   multigpu  ctest -L gpu spread over all GPUs (CTest resource spec) and the cross-GPU
#             bit check
#   sweep     bench_scan --sweep $SWEEP_ARGS on one GPU -> bench_scan.json
#   sweep_sharded  bench_scan --sweep sharded over all GPUs (bench_scan.dev<i>.json)
#   train     bench_train_step -> bench_train_step.json
#   scanbench bench_scan on the scan targets' cases (B 8, d_inner 1536; T 512/2048/8192 at
#             d_state 16, T 2048 at d_state 256; every route) -> bench_scan.json
#   peer      state-spaces/mamba's selective_scan_cuda, built from the folder PEER_DIR
#             (default .peer: a copy of the peer's source with its build.py), timed by
#             bench/peer_scan.py on the same cases -> peer_scan.json
#   peerbuild only start that build in the background (the peer phase waits for it); with
#             peerstep among the phases, causal_conv1d's build starts beside it
#   peerstep  state-spaces/mamba's Mamba-1 block stack (mamba_inner_fn, causal_conv1d; the
#             peer's Python packages in PEER_DIR/py), one training step on bench_train_step's
#             rows, timed by bench/peer_train_step.py -> peer_train_step.json ($PEER_STEP_ARGS)
#   smallbatch bench_scan at B $SMALL_B (default 1 2 4), T 2048 and 8192, d_state 16
#             (SMALL_CASES), checkpointed-hw with the plan's pieces, with one (:p1, the
#             A/B in one build) and with 8/B forced in both directions (the forward's
#             pieces, which its plan gives bf16/f16 only), f32 and bf16 -> bench_scan_b<B>.json, and the peer on the
#             same cases when its module is built -> peer_scan_b<B>.json
#   ncu       Nsight Compute (--clock-control none) on the checkpointed scan kernels at
#             T 2048, d_state 16, f32 and bf16 -> logs/ncu_scan.txt
#   ncubwd    Nsight Compute report of one checkpointed backward (B 8, d_inner 1536, T 2048,
#             d_state 16, bf16, one walk :p1): stall reasons, scheduler and instruction
#             statistics, per-instruction source counters, shared-memory wavefronts and bank
#             conflicts -> ncu_bwd.ncu-rep, logs/ncu_bwd_details.txt and the SASS source page
#             ncu_bwd_sass.csv (scripts/ncu_sass_opcodes.py reads it); NCUBWD_ARGS replaces
#             the bench_scan case arguments
#   planbench the backward at T 2048, d_state 16 with the plan's channels per thread against
#             one channel a thread (:cpt1) and the tile plan (:cpt4) forced, at PLAN_SHAPES
#             (default 16x1536 8x2048 12x1536 8x4096, B x d_inner) -> bench_scan_plan_*.json
#   ncutile   Nsight Compute on the d_state <= 16 tile kernels at T 2048 (B 8, d_inner 1536):
#             one forward and one backward launch each of f32 and bf16, the sections that
#             say what bounds them -> logs/ncu_tile_<op>_<dtype>.txt
#   scantiles bench_scan at T 2048, d_state 16 with the channels per thread forced to 1
#             (one channel a thread) and 2, 3, 4 (the tile plan) -> bench_scan_tiles.json
#   ncutrain  Nsight Compute on the first bf16 training step at d_model 768, T 2048, one
#             layer (every kernel's duration, DRAM and SM throughput) -> ncu_train.csv
#   abscan    A/B of two kernel libraries in one lease: bench_scan $AB_ARGS with the build's
#             libmc_kernels.so, then with $AB_LIB swapped in, twice (new, old, new, old)
#             -> bench_scan_ab_{new,old}_{1,2}.json; with AB_NCU=1 also Nsight Compute on
#             the first AB_NCU_LAUNCHES (default 2) scan launches of each -> logs/ncu_ab_*.txt;
#             the build's library is restored after
#   cmd       sh -c "$PHASE_CMD" between two phases (e.g. to swap the library a later phase
#             uses, depending on an earlier phase's log)
# The tests phase writes the precision and determinism rows the suites record to
# validation-precision.json / validation-determinism.json.
# Environment: PHASE_TIMEOUT (seconds per phase, default 900; TIMEOUT_<phase> for one
# phase, non-alphanumerics as _), DEADLINE (seconds from the start by which the script has
# packed its results and ended, for a runner that kills the whole call at a time limit:
# each phase's limit is cut to the time left less 20 s for the packing, a phase with under
# 5 s left is skipped with a line saying so, a wait for the peer's build gives up and stops
# that build; 0 or unset = no deadline), CTEST_ARGS, SCAN_ARGS, TRAIN_ARGS, PEER_DIR. The *_ARGS
# are split on white space and passed as arguments, never through a shell: a regex such
# as CTEST_ARGS="-R ScanParity|ScanEmulationBits" reaches ctest whole.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$1"; out="$2"; shift 2
if [ -f "$build" ]; then
  case "$build" in
    *.tar.xz)
      if [ ! -d "$build.d/build" ]; then
        mkdir -p "$build.d" && tar -C "$build.d" -xJf "$build" \
          || { echo "gpu_session: could not unpack $build into $build.d" >&2; exit 2; }
      fi
      build="$build.d/build" ;;
    *) echo "gpu_session: $build is a file but not a .tar.xz archive of scripts/pack_build.sh" >&2; exit 2 ;;
  esac
fi
abs="$(cd "$build" 2>/dev/null && pwd)" || { echo "gpu_session: no build folder or archive '$build'" >&2; exit 2; }
build="$abs"
phases=("$@"); [ ${#phases[@]} -eq 0 ] && phases=(info tests sanitize validate bench)
mkdir -p "$out/logs"
out="$(cd "$out" && pwd)"  # absolute: the suites write their JSON from their own folders
export PATH="$PATH:/usr/local/cuda/bin"
tmo="${PHASE_TIMEOUT:-900}"
status=0
t_start=$(date +%s)
deadline="${DEADLINE:-0}"
case "$deadline" in ''|*[!0-9]*) echo "gpu_session: DEADLINE '$deadline' must be whole seconds (0 = none)" >&2; exit 2 ;; esac
pack_reserve=20  # seconds kept for packing results.tar.gz
# Seconds a phase may still take under DEADLINE (a large number without one).
time_left() {
  if [ "$deadline" -eq 0 ]; then echo 1000000; return; fi
  echo $(( deadline - ( $(date +%s) - t_start ) - pack_reserve ))
}
# wait_for <pid> <what>: wait for a background job, or under DEADLINE until the time is
# up, then stop it (the phases that need it are then skipped or fail on their own).
wait_for() {
  local pid="$1" what="$2"
  [ -n "$pid" ] || return 0
  if [ "$deadline" -eq 0 ]; then wait "$pid"; return $?; fi
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(time_left)" -le 0 ]; then
      echo "=== $what: stopped, DEADLINE ${deadline} s reached"
      pkill -TERM -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
      status=1; return 1
    fi
    sleep 1
  done
  wait "$pid"
}
run_phase() {  # name, command...
  local name="$1"; shift
  local t0=$(date +%s)
  local var="TIMEOUT_${name//[^A-Za-z0-9]/_}"  # per-phase limit, e.g. TIMEOUT_ctest_gpu=240
  local limit="${!var:-$tmo}"
  local left; left=$(time_left)
  if [ "$left" -lt 5 ]; then
    echo "=== $name: skipped, DEADLINE ${deadline} s: ${left} s left before packing"
    echo "skipped: DEADLINE ${deadline} s reached before this phase" >"$out/logs/$name.txt"
    status=1; return 0
  fi
  if [ "$left" -lt "$limit" ]; then limit="$left"; fi
  echo "=== $name: $*"
  timeout "$limit" "$@" >"$out/logs/$name.txt" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $(( $(date +%s) - t0 )) s"
  tail -n 25 "$out/logs/$name.txt"
  [ $rc -ne 0 ] && status=1
  return 0
}
# A build staged elsewhere (scripts/stage_build.sh rewrites its CTest files to the stage
# folder) and unpacked here: point its CTest files at this folder, or ctest finds no tests
# (2026-12-07: a tests phase failed that way in 0 s)
staged_at=$(sed -n 's/^# Build directory: //p' "$build/CTestTestfile.cmake" 2>/dev/null)
if [ -n "$staged_at" ] && [ "$staged_at" != "$build" ]; then
  echo "=== CTest files name $staged_at: rewritten to $build"
  find "$build" -name '*.cmake' -print0 | xargs -0 sed -i "s#$staged_at#$build#g"
fi
peer_dir="$(cd "${PEER_DIR:-$root/.peer}" 2>/dev/null && pwd || echo "${PEER_DIR:-$root/.peer}")"
peer_build_pid=""
peer_conv_pid=""
want_peer_step=0
for p in "${phases[@]}"; do [ "$p" = peerstep ] && want_peer_step=1; done
# start_peer_part <part> <subdir> <module>: builds one of the peer's extensions in the
# background (build.py <out> <part>, log logs/peer_build[_<part>].txt), its pid in
# peer_part_pid; a module already built from this source (an earlier call on the same
# machine) is reused
peer_part_pid=""
start_peer_part() {
  local part="$1" sub="$2" mod="$3" log="$out/logs/peer_build.txt"
  [ "$part" = scan ] || log="$out/logs/peer_build_$part.txt"
  local so; so=$(ls "$peer_dir/build/$sub/$mod"*.so 2>/dev/null | head -n 1)
  if [ -n "$so" ] && [ "$so" -nt "$peer_dir/build.py" ]; then
    echo "peer: reusing $so" >"$log"; sleep 0 & peer_part_pid=$!; return 0
  fi
  mkdir -p "$peer_dir/build"
  (cd "$peer_dir" && python3 build.py "$peer_dir/build" "$part") >"$log" 2>&1 &
  peer_part_pid=$!
}
start_peer_build() {
  [ -n "$peer_build_pid" ] && return 0
  if [ ! -f "$peer_dir/build.py" ]; then
    echo "=== peer: no $peer_dir/build.py (PEER_DIR): the peer is not measured"; return 1
  fi
  start_peer_part scan ss selective_scan_cuda; peer_build_pid=$peer_part_pid
  # the step's peer also needs causal_conv1d (slow to build: start it with the scan's)
  if [ "$want_peer_step" = 1 ] && [ -z "$peer_conv_pid" ]; then
    start_peer_part conv cc causal_conv1d_cuda; peer_conv_pid=$peer_part_pid
  fi
}
for p in "${phases[@]}"; do
  case "$p" in
    peerbuild)
      start_peer_build ;;
    peer)
      start_peer_build || continue
      wait_for "$peer_build_pid" "peer build"; echo "=== peer build: rc=$? ($(tail -n 2 "$out/logs/peer_build.txt" | tr '\n' ' '))"
      so=$(ls "$peer_dir"/build/ss/selective_scan_cuda*.so 2>/dev/null | head -n 1)
      run_phase peer_scan env PYTHONUNBUFFERED=1 python3 "$root/bench/peer_scan.py" --module "$so" \
        --out "$out/peer_scan.json" ;;
    peerstep)
      # the peer's Mamba-1 block stack, one training step on bench_train_step's rows
      start_peer_build || continue
      wait_for "$peer_build_pid" "peer build"; wait_for "$peer_conv_pid" "peer conv build"
      echo "=== peer builds: $(tail -n 1 "$out/logs/peer_build.txt"); $(tail -n 1 "$out/logs/peer_build_conv.txt")"
      run_phase peer_train_step env PYTHONUNBUFFERED=1 python3 "$root/bench/peer_train_step.py" \
        --peer-py "$peer_dir/py" --ext "$peer_dir/build/ss" --ext "$peer_dir/build/cc" \
        --require-fast-path --out "$out/peer_train_step.json" ${PEER_STEP_ARGS:-} ;;
    scanbench)
      run_phase bench_scan "$build/bench/bench_scan" --json="$out/bench_scan.json" ${SCAN_ARGS:-} ;;
    smallbatch)
      # the scan at small batches (the backward's pieces, scan.hpp), ours then the peer's when
      # its module is built (peerbuild/peer): B in $SMALL_B (default 1 2 4), d_inner 1536
      wait_for "$peer_build_pid" "peer build"
      so=$(ls "$peer_dir"/build/ss/selective_scan_cuda*.so 2>/dev/null | head -n 1)
      for bb in ${SMALL_B:-1 2 4}; do
        # :pN with the backward's own count at d_inner 1536 (8 / B) also forces the forward's
        # pieces, which its plan gives bf16/f16 storage only (scan.hpp)
        np=$(( bb < 8 ? 8 / bb : 1 ))
        run_phase "bench_scan_b$bb" "$build/bench/bench_scan" --json="$out/bench_scan_b$bb.json" \
          --batch=$bb --cases=${SMALL_CASES:-2048:16,8192:16} \
          --routes=checkpointed-hw,checkpointed-hw:p1,checkpointed-hw:p$np --dtypes=f32,bf16
        if [ -n "$so" ]; then
          run_phase "peer_scan_b$bb" env PYTHONUNBUFFERED=1 python3 "$root/bench/peer_scan.py" \
            --module "$so" --batch $bb --cases ${SMALL_CASES:-2048:16,8192:16} \
            --out "$out/peer_scan_b$bb.json"
        fi
      done ;;
    planbench)
      # the backward's plan (kernels/scan/host.cu: one channel a thread or the tile plan, by
      # waves) against both plans forced, at shapes on either side of its rule (PLAN_SHAPES,
      # BxDINNER) -> bench_scan_plan_<B>x<d_inner>.json
      for sh in ${PLAN_SHAPES:-16x1536 8x2048 12x1536 8x4096}; do
        run_phase "bench_scan_plan_$sh" "$build/bench/bench_scan" --json="$out/bench_scan_plan_$sh.json" \
          --batch=${sh%x*} --d_inner=${sh#*x} --cases=2048:16 --dtypes=${PLAN_DTYPES:-bf16,f32} \
          --routes=checkpointed-hw,checkpointed-hw:cpt1,checkpointed-hw:cpt4 --benchmark_filter=scan_bwd
      done ;;
    ncutile)
      for op in fwd bwd; do for dt in f32 bf16; do
        run_phase "ncu_tile_${op}_${dt}" ncu --clock-control none --kernel-name "regex:tile_${op}_kernel" \
          --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy \
          --section LaunchStats --section SchedulerStats --section WarpStateStats \
          --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
          --print-details all "$build/bench/bench_scan" --cases=2048:16 \
          --routes=checkpointed-hw:cpt${NCU_CPT:-3} --dtypes=$dt \
          --benchmark_min_time=0.001 --benchmark_filter="scan_${op}/"
      done; done ;;
    scantiles)
      run_phase bench_scan_tiles "$build/bench/bench_scan" --json="$out/bench_scan_tiles.json" \
        --cases=2048:16 --routes=checkpointed-hw:cpt1,checkpointed-hw:cpt2,checkpointed-hw:cpt3,checkpointed-hw:cpt4 \
        ${TILES_ARGS:---dtypes=f32,bf16} ;;
    ncu)
      run_phase ncu_scan ncu --clock-control none --kernel-name regex:'(ckpt|tile)_' --launch-skip 0 \
        --launch-count 8 --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section InstructionStats --section SourceCounters \
        "$build/bench/bench_scan" --cases=2048:16 --routes=checkpointed-hw --dtypes=f32,bf16 \
        --benchmark_min_time=0.001 --benchmark_filter='scan_(fwd|bwd)/' ;;
    ncubwd)
      run_phase ncu_bwd ncu --clock-control none --kernel-name regex:ckpt_bwd --launch-count 1 \
        --section WarpStateStats --section SchedulerStats --section InstructionStats \
        --section SourceCounters --section Occupancy --section MemoryWorkloadAnalysis_Tables \
        -f -o "$out/ncu_bwd" "$build/bench/bench_scan" \
        ${NCUBWD_ARGS:---cases=2048:16 --routes=checkpointed-hw:p1 --dtypes=bf16} \
        --benchmark_filter=scan_bwd --benchmark_min_time=0.01
      run_phase ncu_bwd_details ncu --import "$out/ncu_bwd.ncu-rep" --page details
      run_phase ncu_bwd_sass sh -c 'ncu --import "$1" --page source --csv --print-source sass > "$2"' \
        _ "$out/ncu_bwd.ncu-rep" "$out/ncu_bwd_sass.csv" ;;
    ncutrain)
      run_phase ncu_train ncu --clock-control none --csv --launch-count 80 \
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed \
        --log-file "$out/ncu_train.csv" "$build/bench/bench_train_step" --reps=1 \
        --benchmark_filter='dm:768/L:1/B:8/T:2048/bf16' --benchmark_min_time=0.001 ;;
    abscan)
      lib="$build/kernels/libmc_kernels.so"
      if [ -z "${AB_LIB:-}" ] || [ ! -f "${AB_LIB:-}" ]; then
        echo "=== abscan: AB_LIB (the library to compare against) is not a file"; status=1; continue
      fi
      keep="$build/kernels/libmc_kernels.ab_new.so"  # beside the build, not in the results
      cp "$lib" "$keep"
      for i in 1 2; do
        cp "$keep" "$lib"
        run_phase "bench_scan_ab_new_$i" "$build/bench/bench_scan" --json="$out/bench_scan_ab_new_$i.json" ${AB_ARGS:-}
        cp "$AB_LIB" "$lib"
        run_phase "bench_scan_ab_old_$i" "$build/bench/bench_scan" --json="$out/bench_scan_ab_old_$i.json" ${AB_ARGS:-}
      done
      if [ -n "${AB_NCU:-}" ]; then  # the first launches of each library (narrow them with
                                     # --benchmark_filter in AB_ARGS)
        for side in new old; do
          if [ "$side" = new ]; then cp "$keep" "$lib"; else cp "$AB_LIB" "$lib"; fi
          run_phase "ncu_ab_$side" ncu --clock-control none --kernel-name regex:'(ckpt|tile)_' \
            --launch-skip 0 --launch-count "${AB_NCU_LAUNCHES:-2}" --section SpeedOfLight \
            --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis \
            --section InstructionStats --section SourceCounters "$build/bench/bench_scan" \
            --benchmark_min_time=0.001 ${AB_ARGS:-}
        done
      fi
      cp "$keep" "$lib" && rm -f "$keep" ;;
    info)
      run_phase nvidia-smi nvidia-smi
      run_phase devices "$build/cli/mambacheck" devices ;;
    tests)
      # the host CPU times the suites' CPU oracle (the slow suite's wall times depend on it)
      run_phase host-cpu sh -c 'lscpu 2>/dev/null || grep -m1 -A25 "^processor" /proc/cpuinfo'
      run_phase ctest-gpu env MAMBACHECK_PRECISION_JSON="$out/validation-precision.json" \
        MAMBACHECK_DETERMINISM_JSON="$out/validation-determinism.json" \
        ctest --test-dir "$build" -L gpu --output-on-failure --output-junit "$out/logs/ctest-gpu.xml" ${CTEST_ARGS:-} ;;
    multigpu)
      ngpu=$(nvidia-smi -L | grep -c '^GPU')
      run_phase resources "$root/scripts/ctest_gpu_resources.sh" "$build"
      run_phase ctest-spread env MAMBACHECK_GPU_SPREAD=1 \
        MAMBACHECK_PRECISION_JSON="$out/validation-precision.json" \
        MAMBACHECK_DETERMINISM_JSON="$out/validation-determinism.json" \
        ctest --test-dir "$build" -L gpu --resource-spec-file "$build/ctest_gpu_resources.json" -j "$ngpu" \
        --output-on-failure ${CTEST_ARGS:-}
      run_phase crossgpu env MAMBACHECK_DETERMINISM_JSON="$out/validation-determinism.json" \
        "$build/validation/test_determinism" --gtest_filter='CrossGpu.*' ;;
    sweep)
      run_phase bench_scan "$build/bench/bench_scan" --sweep ${SWEEP_ARGS:-} --json="$out/bench_scan.json" ;;
    sweep_sharded)
      ngpu=$(nvidia-smi -L | grep -c '^GPU')
      run_phase bench_scan_sharded "$build/bench/bench_scan" --sweep --devices="$(seq -s, 0 $((ngpu - 1)))" \
        --json="$out/bench_scan.json" ;;
    train)
      run_phase bench_train_step "$build/bench/bench_train_step" --json="$out/bench_train_step.json" ${TRAIN_ARGS:-} ;;
    sanitize)
      run_phase sanitize env SANITIZE_LOG_DIR="$out/logs/sanitize" "$root/scripts/sanitize.sh" "$build" ;;
    validate)
      run_phase validate "$build/cli/mambacheck" validate --gpu-only --dtype all --scan all --json "$out/validation.json" ;;
    bench)
      run_phase bench_scan "$build/bench/bench_scan" --sweep --json="$out/bench_scan.json"
      run_phase bench_train_step "$build/bench/bench_train_step" --json="$out/bench_train_step.json" ;;
    quickbench)
      run_phase bench_scan_quick "$build/bench/bench_scan" --json="$out/bench_scan_quick.json" ;;
    cmd)
      run_phase cmd sh -c "${PHASE_CMD:-true}" ;;
    *) echo "unknown phase $p"; status=2 ;;
  esac
done
# One archive of everything (a remote runner may fetch only a few files). <out> is emptied
# into it: a command that runs after this script in the same call writes to <out> itself
# (its logs/ folder is gone; on 2026-12-05 two Nsight Compute logs were lost that way).
(cd "$out" && tar -czf ../gpu_session_results.tar.gz . && rm -rf ./* && mv ../gpu_session_results.tar.gz results.tar.gz)
exit $status
