// shard_launcher.hpp — multi-device runs (--devices=0,1,...): this program is
// re-executed once per listed device as a child process with --device=d and
// --shard=i/N. Each child owns one GPU and its own CUDA context, measures its
// own copy-bandwidth peak, and runs the disjoint set of case groups g with
// g % N == i, so the measured times of different devices cannot interfere
// (they share only the host). Child i writes its JSON to STEM.dev<d>.json and
// its console table to STEM.dev<d>.txt; its progress lines go to stderr
// prefixed with "[dev d]". reports/generate.py reads the per-device files.
#pragma once

#include <string>

#include "bench/bench_flags.hpp"

namespace mc::bench {

// STEM is --json without a trailing ".json", or `program` when --json is absent.
// Returns 0 when every child exits 0, 77 when every child reports "no CUDA
// device", 1 otherwise (each failing child is named on stderr).
int run_device_shards(const BenchFlags& f, const std::string& program);

}  // namespace mc::bench
