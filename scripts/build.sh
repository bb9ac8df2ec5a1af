#!/usr/bin/env bash
# build.sh — configure and build mambacheck (Release, sm_90) into ./build.
# Usage: scripts/build.sh [extra cmake args...]   (BUILD_DIR overrides ./build)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90-real;90-virtual}" "$@"
cmake --build "$build" -j "$jobs"
