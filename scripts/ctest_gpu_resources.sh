#!/usr/bin/env bash
# ctest_gpu_resources.sh — write a CTest resource specification with one "gpus"
# resource (1 slot) per visible CUDA device and print the ctest command that
# spreads the GPU tests over them, one test per GPU at a time:
#   MAMBACHECK_GPU_SPREAD=1 ctest -L gpu --resource-spec-file <spec> -j <N>
# Every GPU test declares RESOURCE_GROUPS "gpus:1" (validation/CMakeLists.txt);
# CTest then runs at most one GPU test per GPU at a time and passes its device
# to the test process as CTEST_RESOURCE_GROUP_0_GPUS=id:<ordinal>,slots:1 (read
# by GpuTest, check/gpu_allocation.hpp). MAMBACHECK_GPU_SPREAD=1
# lifts the tests' RESOURCE_LOCK gpu, which CTest would otherwise apply on top
# of the spec and so run the spread one test at a time (still correct, just
# not parallel). Without the spec file the suite runs on device 0, one GPU test
# at a time even under `ctest -j`.
#
# usage: scripts/ctest_gpu_resources.sh [--count N] [--out FILE] [BUILD_DIR]
#   BUILD_DIR  the build folder the command is for (default: current directory);
#              its cli/mambacheck, when built, is asked how many devices CUDA sees
#   --count N  use N GPUs instead of detecting them
#   --out FILE where to write the spec (default: BUILD_DIR/ctest_gpu_resources.json)
# GPU count, first that applies: --count; `BUILD_DIR/cli/mambacheck devices`
# (the CUDA runtime's own view); CUDA_VISIBLE_DEVICES (its entries); nvidia-smi -L.
# Ids are CUDA ordinals 0..N-1 as the test processes see them (relative to
# CUDA_VISIBLE_DEVICES when that is set).
# Exit status: 0 written, 1 no GPU found, 2 usage.
set -euo pipefail

usage() { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

count="" out="" build="."
while [ $# -gt 0 ]; do
  case "$1" in
    --count) [ $# -ge 2 ] || usage; count="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; out="$2"; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "ctest_gpu_resources.sh: unknown option $1" >&2; usage ;;
    *) build="$1"; shift ;;
  esac
done
[ -d "$build" ] || { echo "ctest_gpu_resources.sh: build folder '$build' not found" >&2; exit 2; }
build="$(cd "$build" && pwd)"
[ -n "$out" ] || out="$build/ctest_gpu_resources.json"

source_of_count=""
if [ -n "$count" ]; then
  source_of_count="--count"
elif [ -x "$build/cli/mambacheck" ] && devs="$("$build/cli/mambacheck" devices 2>/dev/null)"; then
  count="$(printf '%s\n' "$devs" | grep -cE '^[0-9]+: ' || true)"
  source_of_count="$build/cli/mambacheck devices"
elif [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
  count="$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c '[^[:space:]]' || true)"
  source_of_count="CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
elif command -v nvidia-smi >/dev/null 2>&1; then
  count="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
  source_of_count="nvidia-smi -L"
else
  echo "ctest_gpu_resources.sh: cannot count GPUs: no --count, no $build/cli/mambacheck that" \
       "sees a device, CUDA_VISIBLE_DEVICES unset and no nvidia-smi" >&2
  exit 1
fi
if ! [[ "$count" =~ ^[0-9]+$ ]]; then
  echo "ctest_gpu_resources.sh: --count '$count' is not a number" >&2
  exit 2
fi
if [ "$count" -lt 1 ]; then
  echo "ctest_gpu_resources.sh: no GPU found ($source_of_count reported 0)" >&2
  exit 1
fi

{
  printf '{\n  "version": {"major": 1, "minor": 0},\n  "local": [\n    {\n      "gpus": [\n'
  for ((i = 0; i < count; i++)); do
    sep=","; [ "$i" -eq $((count - 1)) ] && sep=""
    printf '        {"id": "%d", "slots": 1}%s\n' "$i" "$sep"
  done
  printf '      ]\n    }\n  ]\n}\n'
} >"$out"

echo "wrote $out: $count GPU(s) (from $source_of_count), 1 slot each" >&2
echo "cd '$build' && MAMBACHECK_GPU_SPREAD=1 ctest -L gpu --resource-spec-file '$out' -j $count --output-on-failure"
