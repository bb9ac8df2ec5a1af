// bench_context.hpp — what every benchmark run records about itself, so a
// number can be traced to the machine and the code that produced it: the
// device (name, SMs, clocks, memory, L2), driver / CUDA runtime / cuBLAS
// versions, git sha and build flags, the measured device-to-device copy
// bandwidth (the peak of every %-of-peak column), and the timing method.
// Also the shared start-up path (no-GPU exit, device selection) and the
// "[i/N] name ..." progress lines on stderr.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "bench/bench_flags.hpp"
#include "bench/cuda_util.hpp"
#include "gpu/model.hpp"

namespace mc::bench {

// Exit code of a benchmark program on a machine without a usable GPU
// (ctest SKIP_RETURN_CODE); distinct from 1 = error.
constexpr int kExitNoDevice = 77;

struct BenchDevice {
  int index = 0;
  gpu::DeviceInfo info;
  size_t total_mem = 0;
  size_t l2_bytes = 0;
  CopyProbe copy;  // measured peak (see cuda_util.hpp)
};

// Prints "<program>: no CUDA device: <reason>" to stderr and returns
// kExitNoDevice when no GPU can be used; returns 0 otherwise.
int check_gpu_or_explain(const std::string& program);

// Selects f.device (ConfigError if it does not exist), reads its properties
// and measures the copy bandwidth on `stream` (quick: a smaller probe).
BenchDevice open_bench_device(const BenchFlags& f, cudaStream_t stream);

// benchmark::AddCustomContext for the device, toolkit, git and build, the
// peak copy bandwidth, the shard and the timing method (`timing` sentence).
void add_common_context(const BenchDevice& d, const BenchFlags& f, const std::string& program,
                        const std::string& timing);

// "[dev d] [i/n] name ..." on stderr (i is 1-based).
void progress(const BenchFlags& f, int i, int n, const std::string& name);

// "13.0" from 13000 (driver / runtime encoding); "13.1.0" from 130100 (cuBLAS).
std::string cuda_version_string(int v);
std::string cublas_version_string(int v);

}  // namespace mc::bench
