// probe_check.hpp — error checks of the stand-alone cuBLAS probes
// (initcheck_cublas_probe.cu, gemm_rounding_probe.cu): each CUDA or cuBLAS call's
// failure printed with its file, line and call text, and exit code 2. The probes
// use nothing of mambacheck on purpose (what they show is about the tool and the
// library), so they do not use kernels/cuda_check.hpp either.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace mc::probe {

inline void check_cuda(cudaError_t e, const char* file, int line, const char* call) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s:%d %s: %s\n", file, line, call, cudaGetErrorString(e));
  std::exit(2);
}
inline void check_cublas(cublasStatus_t s, const char* file, int line, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "%s:%d %s: cuBLAS status %d\n", file, line, call, int(s));
  std::exit(2);
}

}  // namespace mc::probe

#define PROBE_CHECK(call) ::mc::probe::check_cuda((call), __FILE__, __LINE__, #call)
#define PROBE_CUBLAS(call) ::mc::probe::check_cublas((call), __FILE__, __LINE__, #call)
