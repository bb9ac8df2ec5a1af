// device_fill.cuh — benchmark input generation and output screening on the
// device: deterministic hash-based uniform / log-uniform fills (no host
// round-trip for multi-GB tensors) and a non-finite counter, each templated on
// the storage type T in {float, __nv_bfloat16, __half}.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mc::bench {

// p[i] = lo + (hi - lo) * U(seed, i), rounded to T (RN). p [n]
template <class T>
void fill_uniform(T* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);

// p[i] = exp(log(lo) + (log(hi) - log(lo)) * U(seed, i)), rounded to T. p [n], 0 < lo < hi
template <class T>
void fill_log_uniform(T* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);

// Number of NaN/Inf entries of p [n]; per-block counts summed on the host
// (integer sums: exact in any order). Synchronises `stream`.
template <class T>
int64_t count_nonfinite(const T* p, int64_t n, cudaStream_t stream);

}  // namespace mc::bench
