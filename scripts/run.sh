#!/usr/bin/env bash
# run.sh — setup + build + the main job: `mambacheck validate` on the embedded
# default config set (CPU oracle self-checks; on a GPU machine also the GPU
# checks for f32, bf16 and f16), then the reports under reports/out/. On a GPU
# machine it also runs the GPU test suites (precision and determinism rows),
# the bench_scan sweep and the training-step benchmark, so precision.md,
# determinism.md and performance.md are all produced in one go.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build="${BUILD_DIR:-$root/build}"
out="${REPORT_DIR:-$root/reports/out}"
mkdir -p "$out"
status=0
gpu=0
"$build/cli/mambacheck" devices >/dev/null 2>&1 && gpu=1
# With a GPU every dtype and scan route is requested (exit 3 if they cannot run); without
# one, validate runs the CPU checks and records why the GPU checks did not run.
gpu_args=(); [ $gpu -eq 1 ] && gpu_args=(--dtype all --scan all)
set -o pipefail
"$build/cli/mambacheck" validate ${gpu_args[@]+"${gpu_args[@]}"} --json "$out/validation.json" |
  tee "$out/validate.txt" || status=1
bench=()
validation=("$out/validation.json")
if [ -x "$build/bench/bench_scan" ] && [ $gpu -eq 1 ]; then
  rm -rf "$out/gpu"
  "$root/scripts/gpu_session.sh" "$build" "$out/gpu" info tests sweep train || status=1
  tar -xzf "$out/gpu/results.tar.gz" -C "$out/gpu"
  for f in "$out"/gpu/bench_*.json; do [ -f "$f" ] && bench+=("$f"); done
  for f in "$out"/gpu/validation-*.json; do [ -f "$f" ] && validation+=("$f"); done
else
  echo "run: no usable GPU: CPU checks only; the GPU sections of the reports say 'not measured'"
fi
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
"$PY" "$root/reports/generate.py" --out "$out" --validation "${validation[@]}" \
  ${bench[@]+--bench "${bench[@]}"}
echo "run: reports in $out"
exit $status
