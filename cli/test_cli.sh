#!/usr/bin/env bash
# test_cli.sh — end-to-end checks of the mambacheck command, run by ctest (label cpu):
#   help        every subcommand answers --help with exit 0 and documents the exit codes
#   dump        `dump` output is byte-identical under OMP_NUM_THREADS=1 and 2, numpy.load
#               reads every file with the shape manifest.json states, the names are the
#               catalogue's, and the problem reaches the softplus identity branch
#   errors      a bad config name / dtype exits 2 and names the field
#   bad_inputs  the bad-input suite: for every kind of bad input the exit code and the
#               message are asserted; nothing crashes and nothing exits 0 without checking
#   user_shape  a user shape (options, a JSON file, a dump's manifest) validates end to end
#               on the CPU; without a GPU, GPU checks are reported as not run
# Usage: test_cli.sh <mambacheck binary> help|dump|errors|bad_inputs|user_shape
set -euo pipefail
bin="$1"; what="$2"
tmp="$(mktemp -d)"; trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
fails=0; cases=0

# expect RC REGEX CMD...: runs CMD, asserts its exit code, that REGEX matches its output
# (stdout + stderr as one text: . also matches newlines), and that it was not killed by a
# signal.
expect() {
  local want="$1" re="$2"; shift 2
  local out rc
  set +e; out="$("$@" 2>&1)"; rc=$?; set -e
  cases=$((cases + 1))
  if [ "$rc" -ge 128 ]; then
    echo "CRASH (signal $((rc - 128))): $*"; echo "$out" | tail -5; fails=$((fails + 1)); return
  fi
  if [ "$rc" -ne "$want" ] || ! grep -qzE -- "$re" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $want), output must match /$re/:"; echo "$out" | tail -8
    fails=$((fails + 1)); return
  fi
  echo "ok   exit $rc  $*"
}
finish() {
  echo "$what: $cases cases, $fails failed"
  [ "$fails" -eq 0 ]
}

# No GPU for the cases whose exit code depends on it, also on a GPU machine.
nogpu() { CUDA_VISIBLE_DEVICES= "$@"; }

case "$what" in
  help)
    for c in validate dump configs devices; do
      "$bin" "$c" --help >/dev/null
    done
    "$bin" --help | grep -q "Subcommands:"
    "$bin" --help | grep -q "a requested check could not run"
    "$bin" validate --help | grep -q "Exit status:"
    "$bin" validate --help | grep -q -- "--d-state"
    "$bin" dump --help | grep -q -- "--force"
    echo "help: ok" ;;

  dump)
    for dt in f32 bf16; do
      OMP_NUM_THREADS=1 "$bin" dump --config odd --seed 7 --dtype "$dt" --out "$tmp/a_$dt" >/dev/null
      OMP_NUM_THREADS=2 "$bin" dump --config odd --seed 7 --dtype "$dt" --out "$tmp/b_$dt" >/dev/null
      diff -r "$tmp/a_$dt" "$tmp/b_$dt"
      "$PY" - "$tmp/a_$dt" "$dt" <<'PYEOF'
import json, os, sys
import numpy as np
d, dt = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(d, "manifest.json")))
files = {t["file"] for t in m["tensors"]}
on_disk = {f for f in os.listdir(d) if f.endswith(".npy")}
assert files == on_disk, (files ^ on_disk)
names = {t["name"] for t in m["tensors"]}
L = m["config"]["n_layers"]
# one catalogue, one naming scheme: every tensor X has its gradient grad.X
for base in ["input"] + [f"layers.{l}.{s}" for l in range(L) for s in ("conv0", "ssm0")]:
    assert base in names and "grad." + base in names, base
for base in ["out"] + [f"layers.{l}.{s}" for l in range(L) for s in ("conv_final", "ssm_final")]:
    assert base in names and "grad." + base in names, base
for t in m["tensors"]:
    a = np.load(os.path.join(d, t["file"]))
    assert list(a.shape) == t["shape"], (t["name"], a.shape, t["shape"])
    assert str(a.dtype) == t["dtype"], (t["name"], a.dtype)
    assert np.isfinite(a).all(), t["name"]
# upstream gradients on the final states are part of the problem
assert np.abs(np.load(os.path.join(d, "grad.layers.0.ssm_final.npy"))).max() > 0
# the softplus identity branch: some dt_proj_b far above 20, Δraw > 20 there
for l in range(L):
    b = np.load(os.path.join(d, f"layers.{l}.dt_proj_b.npy"))
    ch = m["problem"]["softplus_identity_channels"][l]
    assert len(ch) >= 1 and (b[ch] > 27).all() and (np.delete(b, ch) < 5).all(), (l, b)
if dt != "f32":
    assert any(n.startswith("baseline.") for n in names)
print(f"{len(files)} tensors load with numpy, shapes and names match the manifest")
PYEOF
    done
    echo "dump: byte-identical under OMP_NUM_THREADS 1 and 2" ;;

  errors)
    expect 2 "config = 'nope'" "$bin" dump --config nope --seed 1 --out "$tmp/x"
    expect 2 "dtype = 'f8'" "$bin" validate --dtype f8
    finish ;;

  bad_inputs)
    V=("$bin" validate --cpu-only --config tiny)
    # zero, negative and huge dimensions (ConfigError: field, value, limit)
    expect 2 "d_model = 0 violates d_model >= 1"            "${V[@]}" --d-model 0
    expect 2 "d_model = -5 violates d_model >= 1"           "${V[@]}" --d-model -5
    expect 2 "d_model = 99999999999 violates d_model <= 1048576" "${V[@]}" --d-model 99999999999
    expect 2 "d_model = 9{30} violates .*64-bit"            "${V[@]}" --d-model 999999999999999999999999999999
    expect 2 "d_inner \(= expand\*d_model\) = 80000 violates" "${V[@]}" --d-model 40000
    expect 2 "expand = 0 violates expand >= 1"              "${V[@]}" --expand 0
    expect 2 "n_layers = -1 violates n_layers >= 1"         "${V[@]}" --n-layers -1
    expect 2 "n_layers = 5000 violates n_layers <= 4096"    "${V[@]}" --n-layers 5000
    expect 2 "input_dim = 0 violates input_dim >= 1"        "${V[@]}" --input-dim 0
    expect 2 "batch = 0 violates batch >= 1"                "${V[@]}" --batch 0
    expect 2 "batch = -3 violates batch >= 1"               "${V[@]}" -B -3
    expect 2 "seq_len = 0 violates seq_len >= 1"            "${V[@]}" --seq-len 0
    expect 2 "seq_len = 99999999 violates seq_len <= 16777216" "${V[@]}" -T 99999999
    expect 2 "eps = 0 violates 0 < eps < 1"                 "${V[@]}" --eps 0
    expect 2 "eps = 'abc' is not a number"                  "${V[@]}" --eps abc
    expect 2 "d_model = 'abc' is not an integer"            "${V[@]}" --d-model abc
    expect 2 "d_model = '1.5' is not an integer"            "${V[@]}" --d-model 1.5
    # d_state and d_conv limits
    expect 2 "d_state = 257 violates d_state <= 256"        "${V[@]}" --d-state 257
    expect 2 "d_state = 0 violates d_state >= 1"            "${V[@]}" --d-state 0
    expect 2 "d_conv = 0 violates d_conv >= 1"              "${V[@]}" --d-conv 0
    expect 2 "d_conv = 9 violates d_conv <= 8"              "${V[@]}" --d-conv 9
    expect 2 "d_conv = 9 violates d_conv <= 8"              "$bin" dump --d-conv 9 --seed 1 --out "$tmp/dc9"
    [ ! -e "$tmp/dc9" ] || { echo "FAIL: a refused dump created its folder"; fails=$((fails + 1)); }
    # garbage dtype, seed, scan, thread count
    expect 2 "dtype = 'f8' is not one of f32\|bf16\|f16"    "$bin" validate --dtype f8
    expect 2 "dtype = 'int8' is not one of"                 "$bin" dump --config tiny --seed 1 --dtype int8 --out "$tmp/d8"
    expect 2 "scan_mode = 'fast' is not one of"             "$bin" validate --scan fast
    expect 2 "seed = 'abc' is not a non-negative integer"   "${V[@]}" --seed abc
    expect 2 "seed = '-1' is not a non-negative integer"    "${V[@]}" --seed -1
    expect 2 "seed = '1.5' is not a non-negative integer"   "$bin" dump --config tiny --seed 1.5 --out "$tmp/s"
    expect 2 "seed = 9{25} violates seed <= 2\^64-1"        "${V[@]}" --seed 9999999999999999999999999
    expect 2 "missing required option --seed"               "$bin" dump --config tiny --out "$tmp/s"
    expect 2 "--threads = 'abc' is not a positive integer"  "${V[@]}" --threads abc
    expect 2 "--threads = '0' is not a positive integer"    "${V[@]}" --threads 0
    expect 2 "--threads = '-4' is not a positive integer"   "${V[@]}" --threads -4
    expect 2 "OMP_NUM_THREADS = 'lots' is not a positive integer" env OMP_NUM_THREADS=lots "${V[@]}"
    # a huge thread count is capped with a note, not a crash (libgomp segfaulted before)
    expect 0 "capped at [0-9]+ .*passed \(exit 0\)|passed \(exit 0\).*capped" env OMP_NUM_THREADS=100000 "${V[@]}"
    expect 0 "capped at"                                    "$bin" dump --config mamba-rs-default --seed 1 --threads 1000000 --out "$tmp/cap"
    # usage errors of the command line itself
    expect 2 "unknown command 'frobnicate'"                 "$bin" frobnicate
    expect 2 "not expected: --no-such-option"               "$bin" validate --no-such-option
    expect 2 "--d-model: 1 required"                        "$bin" validate --d-model
    expect 2 "excludes"                                     "$bin" validate --cpu-only --gpu-only
    expect 2 "--cpu-only excludes the GPU options"          "$bin" validate --cpu-only --dtype bf16
    expect 2 "config = 'nope' is not a built-in config"     "$bin" validate --config nope
    expect 2 "Subcommands:"                                 "$bin"
    # config files
    echo '{"d_model": 16, "d_state": 257}' >"$tmp/ds257.json"
    echo '{"d_modle": 16}' >"$tmp/typo.json"
    echo '{"d_model": "wide"}' >"$tmp/type.json"
    echo '{"d_model": 16,' >"$tmp/broken.json"
    expect 2 "d_state = 257 violates d_state <= 256"        "$bin" validate --cpu-only --config-file "$tmp/ds257.json"
    expect 2 "unknown key 'd_modle'"                        "$bin" validate --cpu-only --config-file "$tmp/typo.json"
    expect 2 "d_model = 'wide' is not an integer"           "$bin" validate --cpu-only --config-file "$tmp/type.json"
    expect 2 "is not valid JSON"                            "$bin" validate --cpu-only --config-file "$tmp/broken.json"
    expect 2 "cannot read .*No such file or directory"      "$bin" validate --cpu-only --config-file "$tmp/absent.json"
    # unwritable outputs: the OS reason is named
    touch "$tmp/afile"
    expect 2 "--out '/dev/null' exists and is not a folder" "$bin" dump --config tiny --seed 1 --out /dev/null
    expect 2 "exists and is not a folder \(a file\)"        "$bin" dump --config tiny --seed 1 --out "$tmp/afile"
    expect 2 "Not a directory"                              "$bin" dump --config tiny --seed 1 --out "$tmp/afile/sub"
    expect 2 "No such file or directory"                    "$bin" dump --config tiny --seed 1 --out "$tmp/no/such/dir"
    expect 2 "--json: '/dev/null' exists and is not a regular file" "${V[@]}" --json /dev/null
    expect 2 "--json: '$tmp' is a folder"                   "${V[@]}" --json "$tmp"
    expect 2 "--json: .*No such file or directory"          "${V[@]}" --json "$tmp/no/such/v.json"
    if [ "$(id -u)" -ne 0 ]; then  # root ignores permission bits
      mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
      expect 2 "Permission denied"                          "$bin" dump --config tiny --seed 1 --out "$tmp/ro/d"
      expect 2 "Permission denied"                          "${V[@]}" --json "$tmp/ro/v.json"
    fi
    # a write that fails half-way (file size limit) leaves no folder that looks complete
    expect 3 "File too large.*nothing was written"         bash -c "trap '' XFSZ; ulimit -f 64; exec \"\$0\" \"\$@\"" \
      "$bin" dump --config mamba-rs-default --seed 1 --out "$tmp/partial"
    if [ -e "$tmp/partial" ] || ls -a "$tmp" | grep -q '^\.partial\.tmp'; then
      echo "FAIL: a failed dump left $(ls -a "$tmp" | grep partial)"; fails=$((fails + 1))
    fi
    # non-empty output folder: refused without --force; --force clears dump files only
    mkdir "$tmp/full" && touch "$tmp/full/notes.txt"
    expect 2 "is not empty \(1 entries, e.g. 'notes.txt'\); pass --force" "$bin" dump --config tiny --seed 1 --out "$tmp/full"
    expect 2 "--force will not clear .* 'notes.txt', which is not a dump file" "$bin" dump --config tiny --seed 1 --out "$tmp/full" --force
    [ -e "$tmp/full/notes.txt" ] || { echo "FAIL: --force deleted a foreign file"; fails=$((fails + 1)); }
    "$bin" dump --config odd --seed 1 --out "$tmp/old" >/dev/null   # 3 layers
    expect 2 "is not empty"                                 "$bin" dump --config tiny --seed 1 --out "$tmp/old"
    expect 0 "dump: wrote"                                  "$bin" dump --config tiny --seed 1 --out "$tmp/old" --force
    if ls "$tmp/old" | grep -q '^layers\.2\.\|^grad\.layers\.2\.'; then  # tiny has 2 layers
      echo "FAIL: --force left the old dump's files behind"; fails=$((fails + 1))
    fi
    # shapes too big for memory: refused before allocating, bytes needed and available named
    expect 3 "needs about .* bytes\) of host memory; available: .* bytes" \
      "$bin" validate --cpu-only --d-model 4096 --batch 1048576 --seq-len 16777216
    expect 3 "needs about .* of host memory; available"     "$bin" dump --batch 65536 --seq-len 65536 --seed 1 --out "$tmp/huge"
    [ ! -e "$tmp/huge" ] || { echo "FAIL: a refused dump created its folder"; fails=$((fails + 1)); }
    expect 3 "available: .*MAMBACHECK_MEMORY_LIMIT.*NOTHING CHECKED|NOTHING CHECKED" \
      env MAMBACHECK_MEMORY_LIMIT=1000 "${V[@]}"
    # nothing may exit 0 without having checked something
    expect 3 "requested GPU checks cannot run: no usable GPU on this machine \(.+\); no check ran" \
      nogpu "$bin" validate --gpu-only
    expect 3 "requested GPU checks cannot run: no usable GPU" nogpu "$bin" validate --gpu-only --config small --dtype all
    expect 3 "REQUESTED BUT not run: no usable GPU.*INCOMPLETE" nogpu "$bin" validate --config tiny --require-gpu
    expect 3 "INCOMPLETE"                                   nogpu "$bin" validate --config tiny --dtype bf16
    expect 3 "no usable GPU on this machine"                nogpu "$bin" devices
    finish ;;

  user_shape)
    shape=(--d-model 24 --d-state 20 --d-conv 3 --expand 2 --n-layers 2 --input-dim 12 --batch 2 --seq-len 41)
    expect 0 "8 checks ran: 8 passed, 0 failed.*passed \(exit 0\)" \
      "$bin" validate --cpu-only "${shape[@]}" --json "$tmp/v.json"
    "$PY" - "$tmp/v.json" <<'PYEOF'
import json, sys
v = json.load(open(sys.argv[1]))
assert v["context"]["exit_code"] == 0 and v["context"]["verdict"] == "passed"
assert [r for r in v["determinism"] if r["test"] == "cpu_thread_invariance" and r["identical"]]
assert all(r["status"] == "pass" for r in v["checks"]), v["checks"]
assert len(v["oracle_checks"]) == 7
print("validation.json: checks, oracle_checks and the CPU thread-invariance row present")
PYEOF
    # without a GPU the default run checks the CPU side and says why the GPU side did not run
    expect 0 "GPU checks: not run: no usable GPU on this machine \(.+\).*passed \(exit 0\)" \
      nogpu "$bin" validate "${shape[@]}"
    # a JSON config file with two shapes, one overriding dtype-free defaults
    cat >"$tmp/shapes.json" <<'EOF'
{"configs": [
  {"name": "narrow", "d_model": 16, "d_state": 8, "d_conv": 2, "expand": 1, "n_layers": 1,
   "input_dim": 7, "batch": 3, "seq_len": 9},
  {"name": "long", "d_model": 8, "d_state": 4, "d_conv": 4, "expand": 2, "n_layers": 2,
   "input_dim": 5, "batch": 1, "seq_len": 300, "eps": 1e-6}
]}
EOF
    expect 0 "16 checks ran: 16 passed.*passed \(exit 0\)" "$bin" validate --cpu-only --config-file "$tmp/shapes.json"
    # options override a built-in config and a file
    expect 0 "small\+custom \(dm=32 ds=16 dc=4 expand=2 L=2 mid=20 B=1 T=70\)" \
      "$bin" validate --cpu-only --config small -B 1 -T 70
    # a dump of a user shape, and its manifest.json back into validate
    expect 0 "dump: wrote" "$bin" dump "${shape[@]}" --seed 3 --out "$tmp/dump"
    expect 0 "custom \(dm=24 ds=20 dc=3 expand=2 L=2 mid=12 B=2 T=41\).*passed \(exit 0\)" \
      "$bin" validate --cpu-only --seed 3 --config-file "$tmp/dump/manifest.json"
    finish ;;

  *) echo "unknown check $what"; exit 2 ;;
esac
