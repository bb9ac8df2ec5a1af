#!/usr/bin/env bash
# test_cli.sh — end-to-end checks of the mambacheck command, run by ctest:
#   help     every subcommand answers --help with exit 0
#   dump     `dump` output is byte-identical under OMP_NUM_THREADS=1 and 2, and
#            numpy.load reads every file with the shape manifest.json states
#   errors   a bad config name / dtype exits 2 and names the field
# Usage: test_cli.sh <mambacheck binary> help|dump|errors
set -euo pipefail
bin="$1"; what="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
case "$what" in
  help)
    for c in validate dump configs devices; do "$bin" "$c" --help >/dev/null; done
    "$bin" --help | grep -q "commands:"
    echo "help: ok" ;;
  dump)
    for dt in f32 bf16; do
      OMP_NUM_THREADS=1 "$bin" dump --config odd --seed 7 --dtype "$dt" --out "$tmp/a_$dt" >/dev/null
      OMP_NUM_THREADS=2 "$bin" dump --config odd --seed 7 --dtype "$dt" --out "$tmp/b_$dt" >/dev/null
      diff -r "$tmp/a_$dt" "$tmp/b_$dt"
      PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
      "$PY" - "$tmp/a_$dt" <<'PYEOF'
import json, os, sys
import numpy as np
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
files = {t["file"] for t in m["tensors"]}
on_disk = {f for f in os.listdir(d) if f.endswith(".npy")}
assert files == on_disk, (files ^ on_disk)
for t in m["tensors"]:
    a = np.load(os.path.join(d, t["file"]))
    assert list(a.shape) == t["shape"], (t["name"], a.shape, t["shape"])
    assert str(a.dtype) == t["dtype"], (t["name"], a.dtype)
    assert np.isfinite(a).all(), t["name"]
print(f"{len(files)} tensors load with numpy, shapes match the manifest")
PYEOF
    done
    echo "dump: byte-identical under OMP_NUM_THREADS 1 and 2" ;;
  errors)
    set +e
    msg=$("$bin" dump --config nope --seed 1 --out "$tmp/x" 2>&1); rc=$?
    set -e
    [ "$rc" -eq 2 ] && grep -q "config = 'nope'" <<<"$msg"
    set +e
    msg=$("$bin" validate --dtype f8 2>&1); rc=$?
    set -e
    [ "$rc" -eq 2 ] && grep -q "dtype = 'f8'" <<<"$msg"
    echo "errors: ok" ;;
  *) echo "unknown check $what"; exit 2 ;;
esac
