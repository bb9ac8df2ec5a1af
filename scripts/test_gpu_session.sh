#!/usr/bin/env bash
# test_gpu_session.sh — CPU-only checks of scripts/gpu_session.sh's DEADLINE, the limit a
# remote runner puts on a whole call: under it the script must cut its phases, stop a
# background build it waits for, skip what no longer fits, and still pack
# results.tar.gz before the deadline (a call cut by its runner's limit on 2026-12-08 lost
# its last phase and the archive). Uses only the phases that need no GPU: `cmd`, and the
# peer's build with a stand-in PEER_DIR whose build.py sleeps. ctest: GpuSession.Deadline.
#
# usage: scripts/test_gpu_session.sh
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mkdir -p "$tmp/build"  # a build folder with no CTest files: the cmd phases need nothing of it

# run_session <name> <env...> -- <phases...>: runs gpu_session.sh, sets rc, el (seconds), log
run_session() {
  local name="$1"; shift
  local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local t0; t0=$(date +%s)
  env "${envs[@]}" "$root/scripts/gpu_session.sh" "$tmp/build" "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1
  rc=$?
  el=$(( $(date +%s) - t0 ))
  log="$tmp/$name.log"
}
archive_has() {  # <out-name> <member>
  tar -tzf "$tmp/$1/results.tar.gz" 2>/dev/null | grep -qx "./$2"
}

# 1. No deadline: a short phase runs, the archive holds its log, exit 0.
run_session plain PHASE_CMD="echo hello" -- cmd
[ "$rc" -eq 0 ] || fail "plain: exit $rc, expected 0 ($(tail -n 3 "$log"))"
archive_has plain logs/cmd.txt || fail "plain: results.tar.gz lacks logs/cmd.txt"

# 2. DEADLINE 30 s with two 60 s phases: the first is cut to the 10 s left before the 20 s
#    packing reserve (timeout's rc 124), the second is skipped, the archive is written, the
#    script ends well inside the deadline and says it did not finish (exit 1).
run_session cut DEADLINE=30 PHASE_CMD="sleep 60" -- cmd cmd
[ "$rc" -eq 1 ] || fail "cut: exit $rc, expected 1"
[ "$el" -le 30 ] || fail "cut: took $el s, past DEADLINE 30"
[ "$el" -ge 8 ] || fail "cut: took $el s: the first phase did not get the ~10 s left"
grep -q "=== cmd: rc=124" "$log" || fail "cut: the first phase was not cut by its limit"
grep -q "=== cmd: skipped, DEADLINE 30 s" "$log" || fail "cut: the second phase was not skipped"
archive_has cut logs/cmd.txt || fail "cut: results.tar.gz not written"

# 3. DEADLINE 25 s with the peer's build (a stand-in that sleeps 120 s) and the peer phase
#    that waits for it: the wait gives up at the deadline and stops the build, peer_scan is
#    skipped, the archive is written in time.
mkdir -p "$tmp/peer"
printf 'import time\ntime.sleep(120)\n' >"$tmp/peer/build.py"
run_session peer DEADLINE=25 PEER_DIR="$tmp/peer" -- peerbuild peer
[ "$rc" -eq 1 ] || fail "peer: exit $rc, expected 1"
[ "$el" -le 25 ] || fail "peer: took $el s, past DEADLINE 25"
grep -q "=== peer build: stopped, DEADLINE 25 s reached" "$log" || fail "peer: the build wait did not give up"
grep -q "=== peer_scan: skipped, DEADLINE 25 s" "$log" || fail "peer: peer_scan was not skipped"
archive_has peer logs/peer_build.txt || fail "peer: results.tar.gz not written"
if pgrep -f "$tmp/peer/build" >/dev/null; then fail "peer: the stand-in build still runs"; fi

# 4. A DEADLINE that is not whole seconds is refused by name before anything runs.
run_session bad DEADLINE=10m -- cmd
[ "$rc" -eq 2 ] || fail "bad: exit $rc, expected 2"
grep -q "DEADLINE '10m' must be whole seconds" "$log" || fail "bad: message does not name DEADLINE"

if [ "$fails" -ne 0 ]; then
  echo "test_gpu_session: $fails check(s) failed"
  for f in "$tmp"/*.log; do echo "--- $f"; cat "$f"; done
  exit 1
fi
echo "test_gpu_session: all checks passed"
