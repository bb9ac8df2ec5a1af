// bench_context.cpp — device start-up and the JSON context of every benchmark
// run (bench_context.hpp).
#include "bench/bench_context.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "generated/build_info.hpp"
#include "core/config.hpp"
#include "kernels/cuda_check.hpp"

namespace mc::bench {

int check_gpu_or_explain(const std::string& program) {
  std::string reason;
  if (gpu::gpu_available(&reason)) return 0;
  // gpu_available's reason already starts with "no CUDA device: ".
  if (reason.rfind("no CUDA device", 0) != 0) reason = "no CUDA device: " + reason;
  std::fprintf(stderr, "%s: %s\n", program.c_str(), reason.c_str());
  return kExitNoDevice;
}

BenchDevice open_bench_device(const BenchFlags& f, cudaStream_t stream) {
  const int count = gpu::device_count();
  if (f.device >= count)
    throw ConfigError("--device=" + std::to_string(f.device) + ": only " + std::to_string(count) +
                      " CUDA device(s) (valid: 0.." + std::to_string(count - 1) + ")");
  for (int d : f.devices)
    if (d >= count)
      throw ConfigError("--devices: device " + std::to_string(d) + " does not exist (" +
                        std::to_string(count) + " CUDA device(s))");
  MC_CUDA_CHECK(cudaSetDevice(f.device), "bench: select device " + std::to_string(f.device));
  BenchDevice d;
  d.index = f.device;
  d.info = gpu::device_info(f.device);
  size_t free_b = 0;
  device_memory(&free_b, &d.total_mem);
  int l2 = 0;
  MC_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, f.device), "bench: L2 size");
  d.l2_bytes = size_t(l2);
  // 1 GiB (256 MiB with --quick), at most 1/8 of free memory: large enough
  // that launch overhead is negligible and the copy streams from HBM.
  size_t probe = (f.quick ? size_t(256) : size_t(1024)) << 20;
  probe = std::min(probe, free_b / 8);
  d.copy = measure_d2d_copy(probe, f.quick ? 5 : 20, stream);
  return d;
}

std::string cuda_version_string(int v) {
  std::ostringstream os;
  os << v / 1000 << "." << (v % 1000) / 10;
  return os.str();
}

std::string cublas_version_string(int v) {
  std::ostringstream os;
  os << v / 10000 << "." << (v / 100) % 100 << "." << v % 100;
  return os.str();
}

void add_common_context(const BenchDevice& d, const BenchFlags& f, const std::string& program,
                        const std::string& timing) {
  using benchmark::AddCustomContext;
  const auto& i = d.info;
  AddCustomContext("mc_program", program);
  AddCustomContext("gpu_index", std::to_string(d.index));
  AddCustomContext("gpu_name", i.name);
  AddCustomContext("gpu_cc", std::to_string(i.cc_major) + "." + std::to_string(i.cc_minor));
  AddCustomContext("gpu_sm_count", std::to_string(i.sm_count));
  AddCustomContext("gpu_sm_clock_khz", std::to_string(i.sm_clock_khz));
  AddCustomContext("gpu_mem_clock_khz", std::to_string(i.mem_clock_khz));
  AddCustomContext("gpu_mem_bus_width_bits", std::to_string(i.mem_bus_width_bits));
  AddCustomContext("gpu_total_mem_bytes", std::to_string(d.total_mem));
  AddCustomContext("gpu_l2_bytes", std::to_string(d.l2_bytes));
  AddCustomContext("cuda_driver", cuda_version_string(i.driver_version));
  AddCustomContext("cuda_runtime", cuda_version_string(i.runtime_version));
  AddCustomContext("cublas_version", cublas_version_string(i.cublas_version));
  AddCustomContext("git_sha", build::kGitSha);
  AddCustomContext("git_tree", build::kGitDirty);
  AddCustomContext("build_flags", build::kBuildFlags);
  std::ostringstream pk;
  pk.precision(6);
  pk << d.copy.best_gbps;
  AddCustomContext("peak_copy_GBps", pk.str());
  std::ostringstream pm;
  pm.precision(6);
  pm << d.copy.median_gbps;
  AddCustomContext("peak_copy_median_GBps", pm.str());
  AddCustomContext("peak_copy_method",
                   "cudaMemcpyAsync device-to-device of " + std::to_string(d.copy.bytes) +
                       " bytes, best of " + std::to_string(d.copy.reps) +
                       " after 1 warm-up, GB/s = 2*bytes/s (read + write), measured at the "
                       "start of this run on this device");
  AddCustomContext("shard", std::to_string(f.shard_index) + "/" + std::to_string(f.shard_count));
  AddCustomContext("sweep", f.sweep ? "true" : "false");
  AddCustomContext("quick", f.quick ? "true" : "false");
  AddCustomContext("timing", timing);
  AddCustomContext("timing_note",
                   "times are CUDA-event manual times; the 'library was built as DEBUG' notice of "
                   "the Debian libbenchmark concerns its own CPU timers and does not apply");
}

void progress(const BenchFlags& f, int i, int n, const std::string& name) {
  if (f.is_shard_child)
    std::fprintf(stderr, "[dev %d] [%d/%d] %s ...\n", f.device, i, n, name.c_str());
  else
    std::fprintf(stderr, "[%d/%d] %s ...\n", i, n, name.c_str());
  std::fflush(stderr);
}

}  // namespace mc::bench
