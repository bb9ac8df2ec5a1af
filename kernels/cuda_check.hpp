// cuda_check.hpp — error checking for every CUDA runtime call, kernel launch
// and cuBLAS call. Each error carries the failing call, a context string and
// the source location; out-of-memory errors say how many bytes were asked for.
// Host-only header, shared by kernels/ launchers and gpu/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mc::gpu {

class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& msg, cudaError_t code) : std::runtime_error(msg), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

std::string cuda_error_message(cudaError_t e, const char* call, const std::string& ctx,
                               const char* file, int line);

inline void check_cuda(cudaError_t e, const char* call, const std::string& ctx, const char* file,
                       int line) {
  if (e != cudaSuccess) throw CudaError(cuda_error_message(e, call, ctx, file, line), e);
}

// After a <<<...>>> launch: catches bad launch configurations immediately.
// With MAMBACHECK_SYNC_LAUNCHES=1 in the environment it also synchronises, so
// an asynchronous fault is attributed to the kernel that caused it.
void check_launch(const char* kernel, const char* file, int line);
// True when MAMBACHECK_SYNC_LAUNCHES asks check_launch to synchronise (read once).
bool launch_sync_enabled();

// Raises `kernel`'s dynamic shared-memory limit to `cap` bytes (the kernel's worst case,
// never the current need: the attribute only permits, so concurrent launches of other
// shapes cannot lower it under each other) when a launch needs `bytes` > 48 KiB. `name`
// (the kernel) goes into the error.
void set_smem_limit(const void* kernel, size_t bytes, size_t cap, const char* name);

}  // namespace mc::gpu

#define MC_CUDA_CHECK(call, ctx) ::mc::gpu::check_cuda((call), #call, (ctx), __FILE__, __LINE__)
#define MC_LAUNCH_CHECK(kernel_name) ::mc::gpu::check_launch((kernel_name), __FILE__, __LINE__)
