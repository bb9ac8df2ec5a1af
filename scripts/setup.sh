#!/usr/bin/env bash
# setup.sh — install the Debian packages mambacheck needs, and nothing when
# they are all present. Works as root on a fresh Debian 12 machine (uses sudo
# otherwise). The CUDA toolkit is not a Debian package here: when nvcc is
# absent the build simply leaves the GPU side out.
set -euo pipefail

PACKAGES=(
  cmake g++ make            # build
  libgtest-dev              # GoogleTest
  librapidcheck-dev         # property-based tests
  libbenchmark-dev          # Google Benchmark (bench_scan, bench_train_step)
  nlohmann-json3-dev        # JSON: result files, dump manifests, config files (header-only)
  libcli11-dev              # the mambacheck command line (header-only)
  python3 python3-numpy python3-matplotlib   # report generator, .npy checks
  procps                    # pgrep/pkill: scripts/test_gpu_session.sh (GpuSession.Deadline)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
