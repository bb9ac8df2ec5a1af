#!/usr/bin/env bash
# run.sh — setup + build + the main job: `mambacheck validate` on the embedded
# default config set, with its report under reports/out/. On a GPU machine it
# also runs the GPU checks, the benchmarks and generates the reports.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build="${BUILD_DIR:-$root/build}"
out="${REPORT_DIR:-$root/reports/out}"
mkdir -p "$out"
"$build/cli/mambacheck" validate --dtype all --json "$out/validation.json" | tee "$out/validate.txt"
if [ -x "$root/scripts/gpu_reports.sh" ] && "$build/cli/mambacheck" devices >/dev/null 2>&1; then
  "$root/scripts/gpu_reports.sh" "$build" "$out"
fi
echo "run: reports in $out"
