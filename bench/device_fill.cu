// device_fill.cu — kernels and launchers of device_fill.cuh.
#include <string>
#include <vector>

#include "kernels/cuda_check.hpp"
#include "bench/cuda_util.hpp"
#include "bench/device_fill.cuh"
#include "kernels/typed.cuh"

namespace mc::bench {
namespace {

using kern::dev::from_f32;  // RN stores, as in the kernels (typed.cuh)
using kern::dev::to_f32;

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

// splitmix64 of (seed, i) -> 24-bit uniform in [0, 1).
__device__ __forceinline__ float hash_unit(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return float(z >> 40) * (1.0f / 16777216.0f);
}

// p [n]: p[i] = log_scale ? exp(lo + (hi-lo)·U) : lo + (hi-lo)·U
template <class T>
__global__ void fill_kernel(T* p, int64_t n, float lo, float hi, uint64_t seed, bool log_scale) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = lo + (hi - lo) * hash_unit(seed, uint64_t(i));
    p[i] = from_f32<T>(log_scale ? expf(v) : v);
  }
}

// p [n] -> partial[blockIdx.x] = #non-finite entries seen by the block.
template <class T>
__global__ void count_nonfinite_kernel(const T* p, int64_t n, unsigned long long* partial) {
  __shared__ unsigned long long s[kThreads];
  unsigned long long c = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    c += isfinite(to_f32(p[i])) ? 0ull : 1ull;
  s[threadIdx.x] = c;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h /= 2) {
    if (int(threadIdx.x) < h) s[threadIdx.x] += s[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

}  // namespace

template <class T>
void fill_uniform(T* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(p, n, lo, hi, seed, false);
  MC_LAUNCH_CHECK("bench fill_uniform");
}

template <class T>
void fill_log_uniform(T* p, int64_t n, float lo, float hi, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return;
  fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(p, n, logf(lo), logf(hi), seed, true);
  MC_LAUNCH_CHECK("bench fill_log_uniform");
}

template <class T>
int64_t count_nonfinite(const T* p, int64_t n, cudaStream_t stream) {
  if (n <= 0) return 0;
  const int blocks = blocks_for(n);
  DeviceBuffer partial(sizeof(unsigned long long) * blocks, "non-finite partial counts");
  count_nonfinite_kernel<T><<<blocks, kThreads, 0, stream>>>(p, n,
                                                               partial.as<unsigned long long>());
  MC_LAUNCH_CHECK("bench count_nonfinite");
  std::vector<unsigned long long> h(blocks);
  MC_CUDA_CHECK(cudaMemcpyAsync(h.data(), partial.get(), partial.bytes(), cudaMemcpyDeviceToHost,
                                stream),
                "bench: non-finite counts to host");
  MC_CUDA_CHECK(cudaStreamSynchronize(stream), "bench: non-finite count");
  int64_t total = 0;
  for (auto c : h) total += int64_t(c);
  return total;
}

#define MC_BENCH_INSTANTIATE(T)                                                              \
  template void fill_uniform<T>(T*, int64_t, float, float, uint64_t, cudaStream_t);          \
  template void fill_log_uniform<T>(T*, int64_t, float, float, uint64_t, cudaStream_t);      \
  template int64_t count_nonfinite<T>(const T*, int64_t, cudaStream_t);
MC_BENCH_INSTANTIATE(float)
MC_BENCH_INSTANTIATE(__nv_bfloat16)
MC_BENCH_INSTANTIATE(__half)
#undef MC_BENCH_INSTANTIATE

}  // namespace mc::bench
