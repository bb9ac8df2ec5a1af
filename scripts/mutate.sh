#!/usr/bin/env bash
# mutate.sh — mutation testing of the kernels: how many plausible small faults in
# kernels/ the GPU suites catch. The mutants are the project's own list,
# validation/mutants/*.patch (README.md there); the fast GPU suite they face is
# validation/mutants/suite.json. The work is split between a build machine
# (nvcc, no GPU) and a GPU machine:
#
#   scripts/mutate.sh build [--build build] [--out build-mutants] [--jobs 2] [--only id,...]
#       rebuilds ONLY libmc_kernels.so per mutant (the translation units that
#       include the patched file; ~20 s each on 2 cores), relinks it from the
#       build's own link line (to prove it links), and stages what the GPU
#       machine needs under build-mutants/ (the staged build, one xz archive of
#       the kernel objects — the build's and each mutant's —, manifest.json with
#       the link line, the patches, the suite): ~35 MiB, one carry.
#   scripts/mutate.sh run [build-mutants] [--out DIR] [--jobs 8] [--budget 170] [--only id,...]
#       on the GPU machine (python3, tar, a C++ driver to link with): links each
#       library, runs the unmutated control first (must pass), then every
#       mutant, several at a time on the one GPU, each in its own hard-linked copy
#       of the staged build with its libmc_kernels.so swapped in; killed/survived
#       per mutant and the kill rate in DIR/mutation.json (default
#       build-mutants/results), for reports/generate.py --mutation.
#   scripts/mutate.sh check [--build build] [--suite validation/mutants/suite.json]
#       no GPU: every suite command selects at least one test of its binary (a
#       ctest, label cpu); the run also fails a control whose command ran no test.
#   scripts/mutate.sh emulate [--build build] [--only id,...]
#       a CPU-side prediction for the scan mutants, no GPU: each patch compiled
#       into the CPU emulation of the scan kernels; killed when the emulated
#       bits dump differs (what the device-vs-emulation test will see), else when
#       the emulated scan parity suite fails on its fused/chained cases.
# Logic: scripts/mutate.py (python3, standard library only).
set -euo pipefail
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
exec "$PY" "$(dirname "${BASH_SOURCE[0]}")/mutate.py" "$@"
