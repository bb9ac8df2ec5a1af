// norm.cu — RMSNorm forward/backward kernels and launchers of norm.cuh.
// Explicit instantiations for float, __nv_bfloat16 and __half.
#include "kernels/norm.cuh"

#include "kernels/cuda_check.hpp"
#include "kernels/launch_args.hpp"
#include "kernels/reduce.cuh"
#include "kernels/typed.cuh"

namespace mc::kern {

namespace {

// One warp per row, kNormRowsPerBlock rows per block. A row's sum is each lane's
// strided partial (i = lane, lane + 32, ...), then an xor butterfly over the 32
// lanes: a pure function of D, the same bits in every lane and every run (tests:
// StepParity.RmsNormBackward reruns the launch bitwise; the determinism suite reruns
// whole steps), and no block barrier on the row's critical path (the previous
// block-per-row tree of up to 512 threads spent most of its time in ten barriers).
constexpr int kNormRowsPerBlock = 8;
constexpr int64_t kMaxNormGrid = int64_t(1) << 20;

unsigned norm_grid(int64_t R) {
  const int64_t blocks = (R + kNormRowsPerBlock - 1) / kNormRowsPerBlock;
  return unsigned(blocks < kMaxNormGrid ? blocks : kMaxNormGrid);
}

// Sum of v over the warp (xor butterfly, offsets 16 .. 1); every lane gets the total.
__device__ float warp_row_sum(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The rows a warp serves: r = blockIdx.x·rows_per_block + warp, grid-stride.
#define MC_NORM_ROWS_LOOP(r, R)                                                          \
  for (int64_t r = int64_t(blockIdx.x) * kNormRowsPerBlock + (threadIdx.x >> 5); r < (R); \
       r += int64_t(gridDim.x) * kNormRowsPerBlock)

//   x [R, D] f32, g [D] -> y [R, D] T, rms [R] f32
template <class T>
__global__ void __launch_bounds__(32 * kNormRowsPerBlock)
    rmsnorm_fwd_kernel(const float* __restrict__ x, const float* __restrict__ g, int64_t R,
                       int64_t D, float eps, T* __restrict__ y, float* __restrict__ rms) {
  const int lane = int(threadIdx.x & 31);
  MC_NORM_ROWS_LOOP(r, R) {
    const float* xr = x + r * D;
    float ss = 0.0f;
#pragma unroll 4
    for (int64_t i = lane; i < D; i += 32) ss += xr[i] * xr[i];
    const float total = warp_row_sum(ss);
    const float rr = sqrtf(total / float(D) + eps);
    const float inv = 1.0f / rr;
    if (lane == 0) rms[r] = rr;
    T* yr = y + r * D;
#pragma unroll 4
    for (int64_t i = lane; i < D; i += 32) yr[i] = dev::from_f32<T>((xr[i] * inv) * g[i]);
  }
}

//   dy [R, D] T, x [R, D] f32, g [D], rms [R] -> dx [R, D] f32, partials [R, D] = dy·x̂
// kAccumulate: dx += the gradient (the residual path of B8 in the same pass),
// added as one f32 sum of the rounded gradient, like a separate residual add.
template <class T, bool kAccumulate>
__global__ void __launch_bounds__(32 * kNormRowsPerBlock)
    rmsnorm_bwd_kernel(const T* __restrict__ dy, const float* __restrict__ x,
                       const float* __restrict__ g, const float* __restrict__ rms, int64_t R,
                       int64_t D, float* __restrict__ dx, float* __restrict__ partials) {
  const int lane = int(threadIdx.x & 31);
  MC_NORM_ROWS_LOOP(r, R) {
    const float inv = 1.0f / rms[r];
    const T* dyr = dy + r * D;
    const float* xr = x + r * D;
    float dot = 0.0f;
#pragma unroll 4
    for (int64_t i = lane; i < D; i += 32) dot += dev::to_f32(dyr[i]) * (xr[i] * inv) * g[i];
    const float m = warp_row_sum(dot) / float(D);
#pragma unroll 4
    for (int64_t i = lane; i < D; i += 32) {
      const float d = dev::to_f32(dyr[i]);
      const float xh = xr[i] * inv;
      const float v = __fmul_rn(g[i] * d - xh * m, inv);  // no contraction into the add
      dx[r * D + i] = kAccumulate ? __fadd_rn(dx[r * D + i], v) : v;
      partials[r * D + i] = d * xh;
    }
  }
}

#undef MC_NORM_ROWS_LOOP

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
  rmsnorm_fwd_kernel<T><<<norm_grid(R), 32 * kNormRowsPerBlock, 0, stream>>>(x, g, R, D,
                                                                          float(eps), y, rms);
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
    rmsnorm_bwd_kernel<T, true><<<norm_grid(R), 32 * kNormRowsPerBlock, 0, stream>>>(
        dy, x, g, rms, R, D, dx, partials);
  else
    rmsnorm_bwd_kernel<T, false><<<norm_grid(R), 32 * kNormRowsPerBlock, 0, stream>>>(
        dy, x, g, rms, R, D, dx, partials);
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
