// testing_atomic_reduce.cu — the TEST-ONLY atomicAdd column sum and its
// fixed-order twin (see testing_atomic_reduce.cuh).
#include "validation/gpu/testing_atomic_reduce.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.hpp"

namespace mc::testing {

namespace {

constexpr int kThreads = 256;

// x [rows, cols] -> out [cols] += x[r, c] for every (r, c), one atomicAdd per
// element: consecutive threads hit consecutive columns, so every column
// receives rows atomics from thousands of blocks in a hardware-chosen order.
__global__ void atomic_column_sum_kernel(const float* __restrict__ x, float* __restrict__ out,
                                         int64_t n, int64_t cols) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    atomicAdd(&out[i % cols], x[i]);
}

// x [rows, cols] -> out [cols]; thread c sums rows 0, 1, ..., rows-1 in order.
__global__ void fixed_order_column_sum_kernel(const float* __restrict__ x, float* __restrict__ out,
                                              int64_t rows, int64_t cols) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.f;
  for (int64_t r = 0; r < rows; ++r) s += x[r * cols + c];
  out[c] = s;
}

void check_shape(const char* fn, const float* x, const float* out, int64_t rows, int64_t cols) {
  if (x == nullptr || out == nullptr) throw std::invalid_argument(std::string(fn) + ": null pointer");
  if (rows <= 0 || cols <= 0)
    throw std::invalid_argument(std::string(fn) + ": rows = " + std::to_string(rows) +
                                ", cols = " + std::to_string(cols) + " violate rows, cols > 0");
}

}  // namespace

void atomic_column_sum(const float* x, float* out, int64_t rows, int64_t cols,
                       cudaStream_t stream) {
  check_shape("atomic_column_sum", x, out, rows, cols);
  MC_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(cols) * sizeof(float), stream),
                "atomic_column_sum: zero out");
  const int64_t n = rows * cols;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20);
  atomic_column_sum_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(x, out, n, cols);
  MC_LAUNCH_CHECK("atomic_column_sum_kernel");
}

void fixed_order_column_sum(const float* x, float* out, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  check_shape("fixed_order_column_sum", x, out, rows, cols);
  MC_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(cols) * sizeof(float), stream),
                "fixed_order_column_sum: zero out");
  const int64_t blocks = (cols + kThreads - 1) / kThreads;
  fixed_order_column_sum_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(x, out, rows, cols);
  MC_LAUNCH_CHECK("fixed_order_column_sum_kernel");
}

}  // namespace mc::testing
