#!/usr/bin/env bash
# test.sh — setup + build + the whole ctest suite. On a machine without a GPU
# the GPU tests are reported as skipped with the reason ("no CUDA device: ...").
# Usage: scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L cpu
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
