// norm.cu — RMSNorm forward/backward kernels and launchers of norm.cuh.
// Explicit instantiations for float, __nv_bfloat16 and __half.
#include "kernels/norm.cuh"

#include "kernels/cuda_check.hpp"
#include "kernels/launch_args.hpp"
#include "kernels/reduce.cuh"
#include "kernels/typed.cuh"

namespace mc::kern {

namespace {

constexpr int kMaxNormThreads = 512;
constexpr int64_t kMaxNormGrid = int64_t(1) << 20;

// Block size: next power of two >= D, clamped to [32, kMaxNormThreads]; a pure
// function of D so the summation tree (and the bits) depend on the shape only.
int norm_threads(int64_t D) {
  int t = 32;
  while (t < D && t < kMaxNormThreads) t *= 2;
  return t;
}

unsigned norm_grid(int64_t R) { return unsigned(R < kMaxNormGrid ? R : kMaxNormGrid); }

// Sum of v over the block (blockDim.x a power of two) with a fixed halving tree;
// every thread gets the total. sm has blockDim.x floats.
__device__ float block_sum(float v, float* sm) {
  sm[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s >= 1; s >>= 1) {
    if (int(threadIdx.x) < s) sm[threadIdx.x] += sm[threadIdx.x + s];
    __syncthreads();
  }
  const float total = sm[0];
  __syncthreads();  // sm is reused by the caller's next block_sum
  return total;
}

// One block per row (grid-stride over rows).
//   x [R, D] f32, g [D] -> y [R, D] T, rms [R] f32
template <class T>
__global__ void rmsnorm_fwd_kernel(const float* __restrict__ x, const float* __restrict__ g,
                                   int64_t R, int64_t D, float eps, T* __restrict__ y,
                                   float* __restrict__ rms) {
  __shared__ float sm[kMaxNormThreads];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float* xr = x + r * D;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += xr[i] * xr[i];
    const float total = block_sum(ss, sm);
    const float rr = sqrtf(total / float(D) + eps);
    const float inv = 1.0f / rr;
    if (threadIdx.x == 0) rms[r] = rr;
    T* yr = y + r * D;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
      yr[i] = dev::from_f32<T>((xr[i] * inv) * g[i]);
  }
}

// One block per row (grid-stride over rows).
//   dy [R, D] T, x [R, D] f32, g [D], rms [R] -> dx [R, D] f32, partials [R, D] = dy·x̂
// kAccumulate: dx += the gradient (the residual path of B8 in the same pass),
// added as one f32 sum of the rounded gradient, like a separate residual add.
template <class T, bool kAccumulate>
__global__ void rmsnorm_bwd_kernel(const T* __restrict__ dy, const float* __restrict__ x,
                                   const float* __restrict__ g, const float* __restrict__ rms,
                                   int64_t R, int64_t D, float* __restrict__ dx,
                                   float* __restrict__ partials) {
  __shared__ float sm[kMaxNormThreads];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float inv = 1.0f / rms[r];
    const T* dyr = dy + r * D;
    const float* xr = x + r * D;
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
      dot += dev::to_f32(dyr[i]) * (xr[i] * inv) * g[i];
    const float m = block_sum(dot, sm) / float(D);
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
      const float d = dev::to_f32(dyr[i]);
      const float xh = xr[i] * inv;
      const float v = __fmul_rn(g[i] * d - xh * m, inv);  // no contraction into the add
      dx[r * D + i] = kAccumulate ? __fadd_rn(dx[r * D + i], v) : v;
      partials[r * D + i] = d * xh;
    }
  }
}

void check_norm_shape(const char* k, int64_t R, int64_t D) {
  require_positive(k, "rows", R);
  require_positive(k, "dim", D);
}

}  // namespace

template <class T>
void rmsnorm_fwd(const float* x, const float* g, int64_t R, int64_t D, double eps, T* y,
                 float* rms, cudaStream_t stream) {
  const char* k = "rmsnorm_fwd";
  check_norm_shape(k, R, D);
  if (!(eps > 0.0)) throw ConfigError("rmsnorm_fwd: eps must be > 0");
  require_ptr(k, "x", x);
  require_ptr(k, "g", g);
  require_ptr(k, "y", y);
  require_ptr(k, "rms", rms);
  rmsnorm_fwd_kernel<T><<<norm_grid(R), norm_threads(D), 0, stream>>>(x, g, R, D, float(eps), y,
                                                                      rms);
  MC_LAUNCH_CHECK("rmsnorm_fwd_kernel");
}

size_t rmsnorm_bwd_scratch_floats(int64_t R, int64_t D) {
  return size_t(R) * size_t(D) + column_sum_scratch_floats(R, D);
}

template <class T>
void rmsnorm_bwd_impl(const T* dy, const float* x, const float* g, const float* rms, int64_t R,
                      int64_t D, float* dx, bool accumulate, float* dg, float* scratch,
                      cudaStream_t stream) {
  const char* k = accumulate ? "rmsnorm_bwd_residual" : "rmsnorm_bwd";
  check_norm_shape(k, R, D);
  require_ptr(k, "dy", dy);
  require_ptr(k, "x", x);
  require_ptr(k, "g", g);
  require_ptr(k, "rms", rms);
  require_ptr(k, "dx", dx);
  require_ptr(k, "dg", dg);
  require_ptr(k, "scratch", scratch);
  float* partials = scratch;
  if (accumulate)
    rmsnorm_bwd_kernel<T, true><<<norm_grid(R), norm_threads(D), 0, stream>>>(dy, x, g, rms, R, D,
                                                                              dx, partials);
  else
    rmsnorm_bwd_kernel<T, false><<<norm_grid(R), norm_threads(D), 0, stream>>>(dy, x, g, rms, R, D,
                                                                               dx, partials);
  MC_LAUNCH_CHECK("rmsnorm_bwd_kernel");
  reduce_sum_axis0(partials, R, D, dg, /*accumulate=*/true, partials + R * D, stream);
}

template <class T>
void rmsnorm_bwd(const T* dy, const float* x, const float* g, const float* rms, int64_t R,
                 int64_t D, float* dx, float* dg, float* scratch, cudaStream_t stream) {
  rmsnorm_bwd_impl<T>(dy, x, g, rms, R, D, dx, /*accumulate=*/false, dg, scratch, stream);
}

template <class T>
void rmsnorm_bwd_residual(const T* dy, const float* x, const float* g, const float* rms,
                          int64_t R, int64_t D, float* dH, float* dg, float* scratch,
                          cudaStream_t stream) {
  rmsnorm_bwd_impl<T>(dy, x, g, rms, R, D, dH, /*accumulate=*/true, dg, scratch, stream);
}

#define MC_INSTANTIATE_NORM(T)                                                                \
  template void rmsnorm_fwd<T>(const float*, const float*, int64_t, int64_t, double, T*,      \
                               float*, cudaStream_t);                                         \
  template void rmsnorm_bwd<T>(const T*, const float*, const float*, const float*, int64_t,   \
                               int64_t, float*, float*, float*, cudaStream_t);         \
  template void rmsnorm_bwd_residual<T>(const T*, const float*, const float*, const float*,   \
                                        int64_t, int64_t, float*, float*, float*,             \
                                        cudaStream_t);
MC_INSTANTIATE_NORM(float)
MC_INSTANTIATE_NORM(__nv_bfloat16)
MC_INSTANTIATE_NORM(__half)
#undef MC_INSTANTIATE_NORM

}  // namespace mc::kern
