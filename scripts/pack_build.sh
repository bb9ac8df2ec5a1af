#!/usr/bin/env bash
# pack_build.sh — one xz archive of a build folder for a remote GPU machine, small
# enough for a size-limited carry: scripts/stage_build.sh's copy, without the
# CPU-only emulation binaries (test_scan_emulation*, scan_bits_emulated: labelled
# cpu, they run here and in CI, never on the GPU machine; they are a quarter of
# the stage), packed as build/ inside the archive. Beside it, <archive>.txt says
# what was packed: the commit, whether the tree was dirty, the md5 of
# libmc_kernels.so. scripts/gpu_session.sh takes the archive in place of a build
# folder and unpacks it there.
#
# usage: scripts/pack_build.sh <build-dir> <archive.tar.xz>
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 <build-dir> <archive.tar.xz>" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "$1" && pwd)"; archive="$2"
case "$archive" in *.tar.xz) ;; *) echo "pack_build: archive '$archive' must end in .tar.xz" >&2; exit 2 ;; esac
[ -f "$build/CTestTestfile.cmake" ] || { echo "pack_build: $build is not a configured build folder (no CTestTestfile.cmake)" >&2; exit 2; }
lib="$build/kernels/libmc_kernels.so"
[ -f "$lib" ] || { echo "pack_build: $build has no kernels/libmc_kernels.so (a CPU-only build: nothing for a GPU machine to run)" >&2; exit 2; }
mkdir -p "$(dirname "$archive")"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
"$root/scripts/stage_build.sh" "$build" "$tmp/build" >/dev/null
rm -f "$tmp/build/validation/scan_bits_emulated" "$tmp/build/validation/emulation"/test_scan_emulat*
if [ -f "$tmp/build/validation/emulation/CTestTestfile.cmake" ]; then
  echo "# pack_build.sh: the CPU-only emulation tests are left out of this archive" \
    > "$tmp/build/validation/emulation/CTestTestfile.cmake"
fi
tar -C "$tmp" -cf - build | xz -T0 -9 > "$archive"
{
  echo "packed $(date -u +%FT%TZ) from $build"
  echo "commit $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)')"
  echo "libmc_kernels.so md5 $(md5sum "$lib" | cut -d' ' -f1)"
} > "$archive.txt"
bytes=$(stat -c %s "$archive")
echo "packed $((bytes / 1048576)) MiB into $archive ($(sed -n 2p "$archive.txt"))"
