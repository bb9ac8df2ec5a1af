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

// What the forward adds to its input before normalising it (kPre): nothing, the
// typed residual of F6, or input_proj's bias with its rounding (bias_add_round).
enum class NormPre { None, Residual, BiasRound };

//   x [R, D] f32 (+ residual [R, D] T | bias [D] f32 -> x_out [R, D] f32, may alias x),
//   g [D] -> y [R, D] T, rms [R] f32
// With a pre-add the value v = x + f32(residual) or f32(q(x + bias)) is written to
// x_out and normalised: the same v as a separate residual_add / bias_add_round would
// store, then the same sums in the same order, so the same bits as the two passes.
template <class T, NormPre kPre>
__global__ void __launch_bounds__(32 * kNormRowsPerBlock)
    rmsnorm_fwd_kernel(const float* x, const T* __restrict__ residual,
                       const float* __restrict__ bias, float* x_out,
                       const float* __restrict__ g, int64_t R, int64_t D, float eps,
                       T* __restrict__ y, float* __restrict__ rms) {
  const int lane = int(threadIdx.x & 31);
  MC_NORM_ROWS_LOOP(r, R) {
    const float* xr = x + r * D;
    float* xo = kPre == NormPre::None ? nullptr : x_out + r * D;
    float ss = 0.0f;
#pragma unroll 4
    for (int64_t i = lane; i < D; i += 32) {
      float v = xr[i];
      if (kPre == NormPre::Residual) v = v + dev::to_f32(residual[r * D + i]);
      if (kPre == NormPre::BiasRound) v = dev::round_f32<T>(v + bias[i]);
      if (kPre != NormPre::None) xo[i] = v;
      ss += v * v;
    }
    const float total = warp_row_sum(ss);
    const float rr = sqrtf(total / float(D) + eps);
    const float inv = 1.0f / rr;
    if (lane == 0) rms[r] = rr;
    const float* xn = kPre == NormPre::None ? xr : xo;  // this lane's own stores
    T* yr = y + r * D;
#pragma unroll 4
    for (int64_t i = lane; i < D; i += 32) yr[i] = dev::from_f32<T>((xn[i] * inv) * g[i]);
  }
}

// The backward serves groups of kNormBwdRows consecutive rows (a block per group,
// grid-stride) and writes one row of dg partials per group (its rows' Σ dy·x̂ per
// column, rows ascending), so the partials are [ceil(R / kNormBwdRows), D] instead of
// [R, D]. The groups are a function of R alone, so the dg bits do not depend on the
// grid or the device.
constexpr int kNormBwdWarps = 16;
constexpr int kNormBwdRows = 32;
static_assert(kNormBwdRows % kNormBwdWarps == 0, "every warp serves the same number of rows");

__host__ __device__ inline int64_t norm_bwd_groups(int64_t R) {
  return (R + kNormBwdRows - 1) / kNormBwdRows;
}

//   dy [R, D] T, x [R, D] f32, g [D], rms [R] -> dx [R, D] f32,
//   partials [ceil(R / kNormBwdRows), D] = Σ over the group's rows of dy·x̂
// Two phases per group. (1) One warp per row forms the row's mean m = (1/D)·Σ dy·x̂·g
// (lane-strided partials, then the xor butterfly: the same bits as a warp-per-row
// pass) into shared memory. (2) One thread per column walks the block's rows in
// order: dx, and its column's dg partial in a register. The second reads of dy and x
// are the block's own rows, just read in phase 1 (L2).
// kAccumulate: dx += the gradient (the residual path of B8 in the same pass),
// added as one f32 sum of the rounded gradient, like a separate residual add.
// dxq [R, D] Q (nullptr = not written): the RN copy of the final dx, as a separate
// cast_from_f32 of dx would write it (the typed dH the next GEMMs read, B0).
template <class T, class Q, bool kAccumulate>
__global__ void __launch_bounds__(32 * kNormBwdWarps)
    rmsnorm_bwd_kernel(const T* __restrict__ dy, const float* __restrict__ x,
                       const float* __restrict__ g, const float* __restrict__ rms, int64_t R,
                       int64_t D, float* __restrict__ dx, Q* __restrict__ dxq,
                       float* __restrict__ partials) {
  __shared__ float row_inv[kNormBwdRows], row_m[kNormBwdRows];
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const int64_t n_groups = norm_bwd_groups(R);
  for (int64_t grp = blockIdx.x; grp < n_groups; grp += gridDim.x) {
    const int64_t r0 = grp * kNormBwdRows;
    const int rows = int(R - r0 < kNormBwdRows ? R - r0 : kNormBwdRows);
    __syncthreads();  // the previous group's row_inv / row_m are no longer read
    for (int i = warp; i < rows; i += kNormBwdWarps) {
      const int64_t r = r0 + i;
      const float inv = 1.0f / rms[r];
      const T* dyr = dy + r * D;
      const float* xr = x + r * D;
      float dot = 0.0f;
#pragma unroll 4
      for (int64_t c = lane; c < D; c += 32) dot += dev::to_f32(dyr[c]) * (xr[c] * inv) * g[c];
      const float m = warp_row_sum(dot) / float(D);
      if (lane == 0) {
        row_inv[i] = inv;
        row_m[i] = m;
      }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
      const float gc = g[c];
      float part = 0.0f;  // Σ_i dy·x̂ over the block's rows, i ascending
      const T* dyc = dy + r0 * D + c;
      const float* xc = x + r0 * D + c;
      float* dxc = dx + r0 * D + c;
      Q* dxqc = dxq ? dxq + r0 * D + c : nullptr;
#pragma unroll 8
      for (int i = 0; i < rows; ++i, dyc += D, xc += D, dxc += D) {
        const float d = dev::to_f32(*dyc);
        const float inv = row_inv[i];
        const float xh = *xc * inv;
        const float v = __fmul_rn(gc * d - xh * row_m[i], inv);  // no contraction into the add
        const float out = kAccumulate ? __fadd_rn(*dxc, v) : v;
        *dxc = out;
        if (dxqc) dxqc[int64_t(i) * D] = dev::from_f32<Q>(out);
        part += d * xh;
      }
      partials[grp * D + c] = part;
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
void rmsnorm_fwd_add(const float* x, const RmsNormPreAdd<T>& add, const float* g, int64_t R,
                     int64_t D, double eps, T* y, float* rms, cudaStream_t stream) {
  const char* k = "rmsnorm_fwd";
  check_norm_shape(k, R, D);
  if (!(eps > 0.0)) throw ConfigError("rmsnorm_fwd: eps must be > 0");
  require_ptr(k, "x", x);
  require_ptr(k, "g", g);
  require_ptr(k, "y", y);
  require_ptr(k, "rms", rms);
  if (add.residual && add.bias)
    throw ConfigError("rmsnorm_fwd: give a residual or a bias to add first, not both");
  if ((add.residual || add.bias) && !add.x_out)
    throw ConfigError("rmsnorm_fwd: x_out is null (required with a residual or a bias)");
  const unsigned grid = norm_grid(R);
  constexpr unsigned block = 32 * kNormRowsPerBlock;
  if (add.residual)
    rmsnorm_fwd_kernel<T, NormPre::Residual><<<grid, block, 0, stream>>>(
        x, add.residual, nullptr, add.x_out, g, R, D, float(eps), y, rms);
  else if (add.bias)
    rmsnorm_fwd_kernel<T, NormPre::BiasRound><<<grid, block, 0, stream>>>(
        x, nullptr, add.bias, add.x_out, g, R, D, float(eps), y, rms);
  else
    rmsnorm_fwd_kernel<T, NormPre::None><<<grid, block, 0, stream>>>(
        x, nullptr, nullptr, nullptr, g, R, D, float(eps), y, rms);
  MC_LAUNCH_CHECK("rmsnorm_fwd_kernel");
}

template <class T>
void rmsnorm_fwd(const float* x, const float* g, int64_t R, int64_t D, double eps, T* y,
                 float* rms, cudaStream_t stream) {
  rmsnorm_fwd_add<T>(x, RmsNormPreAdd<T>{}, g, R, D, eps, y, rms, stream);
}

size_t rmsnorm_bwd_scratch_floats(int64_t R, int64_t D) {
  const int64_t P = norm_bwd_groups(R);
  return size_t(P) * size_t(D) + column_sum_scratch_floats(P, D);
}

template <class T, class Q>
void rmsnorm_bwd_impl(const T* dy, const float* x, const float* g, const float* rms, int64_t R,
                      int64_t D, float* dx, bool accumulate, float* dg, float* scratch,
                      cudaStream_t stream, Q* dxq) {
  const char* k = accumulate ? "rmsnorm_bwd_residual" : "rmsnorm_bwd";
  check_norm_shape(k, R, D);
  require_ptr(k, "dy", dy);
  require_ptr(k, "x", x);
  require_ptr(k, "g", g);
  require_ptr(k, "rms", rms);
  require_ptr(k, "dx", dx);
  require_ptr(k, "dg", dg);
  require_ptr(k, "scratch", scratch);
  const int64_t P = norm_bwd_groups(R);
  float* partials = scratch;  // [P, D]
  auto* kern = accumulate ? &rmsnorm_bwd_kernel<T, Q, true> : &rmsnorm_bwd_kernel<T, Q, false>;
  const unsigned grid = unsigned(P < kMaxNormGrid ? P : kMaxNormGrid);
  kern<<<grid, 32 * kNormBwdWarps, 0, stream>>>(dy, x, g, rms, R, D, dx, dxq, partials);
  MC_LAUNCH_CHECK("rmsnorm_bwd_kernel");
  reduce_sum_axis0(partials, P, D, dg, /*accumulate=*/true, partials + P * D, stream);
}

template <class T, class Q>
void rmsnorm_bwd(const T* dy, const float* x, const float* g, const float* rms, int64_t R,
                 int64_t D, float* dx, float* dg, float* scratch, cudaStream_t stream, Q* dxq) {
  rmsnorm_bwd_impl<T, Q>(dy, x, g, rms, R, D, dx, /*accumulate=*/false, dg, scratch, stream, dxq);
}

template <class T>
void rmsnorm_bwd_residual(const T* dy, const float* x, const float* g, const float* rms,
                          int64_t R, int64_t D, float* dH, float* dg, float* scratch,
                          cudaStream_t stream, T* dH_typed) {
  rmsnorm_bwd_impl<T, T>(dy, x, g, rms, R, D, dH, /*accumulate=*/true, dg, scratch, stream,
                         dH_typed);
}

#define MC_INSTANTIATE_NORM(T)                                                                \
  template void rmsnorm_fwd<T>(const float*, const float*, int64_t, int64_t, double, T*,      \
                               float*, cudaStream_t);                                         \
  template void rmsnorm_fwd_add<T>(const float*, const RmsNormPreAdd<T>&, const float*,       \
                                   int64_t, int64_t, double, T*, float*, cudaStream_t);       \
  template void rmsnorm_bwd<T, T>(const T*, const float*, const float*, const float*,         \
                                  int64_t, int64_t, float*, float*, float*, cudaStream_t, T*); \
  template void rmsnorm_bwd_residual<T>(const T*, const float*, const float*, const float*,   \
                                        int64_t, int64_t, float*, float*, float*,             \
                                        cudaStream_t, T*);
MC_INSTANTIATE_NORM(float)
MC_INSTANTIATE_NORM(__nv_bfloat16)
MC_INSTANTIATE_NORM(__half)
// norm_f's backward: f32 dy, the typed copy of dH for the last layer's GEMMs
template void rmsnorm_bwd<float, __nv_bfloat16>(const float*, const float*, const float*,
                                                const float*, int64_t, int64_t, float*, float*,
                                                float*, cudaStream_t, __nv_bfloat16*);
template void rmsnorm_bwd<float, __half>(const float*, const float*, const float*, const float*,
                                         int64_t, int64_t, float*, float*, float*, cudaStream_t,
                                         __half*);
#undef MC_INSTANTIATE_NORM

}  // namespace mc::kern
