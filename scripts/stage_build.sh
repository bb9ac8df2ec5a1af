#!/usr/bin/env bash
# stage_build.sh — copy a build folder without what running it does not need
# (object files, static archives, CMakeFiles, the mutation runner's scratch
# folders), rewriting the absolute paths in
# its CTest files, so that it can be carried to a GPU machine under the 64 MiB
# limit and run there with `ctest` as it is.
# usage: scripts/stage_build.sh <build-dir> <stage-dir>
set -euo pipefail
src="$(cd "$1" && pwd)"; dst="$2"
mkdir -p "$dst"; dst="$(cd "$dst" && pwd)"
rm -rf "${dst:?}"/*
tar -C "$src" --exclude=CMakeFiles --exclude='*.o' --exclude='*.a' --exclude='*.ninja*' \
  --exclude=compile_commands.json --exclude=sanitize-logs \
  --exclude=mutant-work --exclude=mutant-emu -cf - . | tar -C "$dst" -xf -
find "$dst" -name '*.cmake' -print0 | xargs -0 sed -i "s#$src#$dst#g"
echo "staged $(du -sh "$dst" | cut -f1) into $dst"
