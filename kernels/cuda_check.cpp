// cuda_check.cpp — message formatting and launch checking for cuda_check.hpp.
#include "kernels/cuda_check.hpp"

#include <cstdlib>
#include <sstream>

namespace mc::gpu {

std::string cuda_error_message(cudaError_t e, const char* call, const std::string& ctx,
                               const char* file, int line) {
  std::ostringstream os;
  os << "CUDA error " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ") in " << call;
  if (!ctx.empty()) os << " [" << ctx << "]";
  os << " at " << file << ":" << line;
  return os.str();
}

static bool sync_launches() {
  static const bool on = [] {
    const char* v = std::getenv("MAMBACHECK_SYNC_LAUNCHES");
    return v && *v && *v != '0';
  }();
  return on;
}

bool launch_sync_enabled() { return sync_launches(); }

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && sync_launches()) e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    throw CudaError(cuda_error_message(e, "kernel launch", kernel, file, line), e);
}

void set_smem_limit(const void* kernel, size_t bytes, size_t cap, const char* name) {
  if (bytes <= 48 * 1024) return;
  MC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(cap)),
                std::string(name) + " needs " + std::to_string(bytes) + " B of shared memory");
}

}  // namespace mc::gpu
