// timed_loop.hpp — the manual-time loop every benchmark shares: per iteration
// an untimed prepare() (state reset, L2 scrub, ...), then CUDA events on
// `stream` around launch(); Google Benchmark gets the event time.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <exception>
#include <string>

#include "bench/cuda_util.hpp"

namespace mc::bench {

// Returns the mean seconds per timed iteration (0 when none ran). If an
// iteration throws, the benchmark is skipped with "error while timing: ...",
// the message is left in *error and -1 is returned.
template <class Prepare, class Launch>
double run_timed_loop(benchmark::State& st, EventTimer& timer, cudaStream_t stream,
                      Prepare&& prepare, Launch&& launch, std::string* error) {
  double total = 0;
  try {
    for (auto _ : st) {
      prepare();
      timer.start(stream);
      launch();
      timer.stop(stream);
      const double s = timer.seconds();
      st.SetIterationTime(s);
      total += s;
    }
  } catch (const std::exception& e) {
    *error = std::string("error while timing: ") + e.what();
    st.SkipWithError(error->c_str());
    return -1;
  }
  if (st.iterations() == 0 || total <= 0) return 0;
  return total / double(st.iterations());
}

}  // namespace mc::bench
