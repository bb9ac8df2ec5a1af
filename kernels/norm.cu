// norm.cu — RMSNorm forward/backward kernels and launchers of norm.cuh.
// Explicit instantiations for float, __nv_bfloat16 and __half.
#include "kernels/norm.cuh"

#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.cuh"
#include "kernels/launch_args.hpp"
#include "kernels/reduce.cuh"
#include "kernels/typed.cuh"

#include <string>
#include <type_traits>

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

// V consecutive elements in one access (8 or 16 bytes) where V·sizeof(E) is one of
// those sizes, else element by element. The caller guarantees the alignment.
template <class E, int V>
struct alignas(V * sizeof(E) >= 16 ? 16 : V * sizeof(E) >= 8 ? 8 : sizeof(E)) NormVec {
  E e[V];
};
template <int V, class E>
__device__ __forceinline__ NormVec<E, V> load_vec(const E* p) {
  NormVec<E, V> v;
  if constexpr (V * sizeof(E) == 16) {
    *reinterpret_cast<uint4*>(&v) = *reinterpret_cast<const uint4*>(p);
  } else if constexpr (V * sizeof(E) == 8) {
    *reinterpret_cast<uint2*>(&v) = *reinterpret_cast<const uint2*>(p);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) v.e[j] = p[j];
  }
  return v;
}
template <int V, class E>
__device__ __forceinline__ void store_vec(E* p, const NormVec<E, V>& v) {
  if constexpr (V * sizeof(E) == 16) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);
  } else if constexpr (V * sizeof(E) == 8) {
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(&v);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = v.e[j];
  }
}

// The rows a warp serves: r = blockIdx.x·rows_per_block + warp, grid-stride.
#define MC_NORM_ROWS_LOOP(r, R)                                                          \
  for (int64_t r = int64_t(blockIdx.x) * kNormRowsPerBlock + (threadIdx.x >> 5); r < (R); \
       r += int64_t(gridDim.x) * kNormRowsPerBlock)

// What the forward adds to its input before normalising it (kPre): nothing,
// input_proj's bias with its rounding (bias_add_round), or F6's residual (residual_add:
// x + f32(o), no rounding). Each is the value the separate pass would store.
enum class NormPre { None, BiasRound, Residual };

// The forward's operands (norm.cuh, rmsnorm_fwd_add): x [R, D] f32, optional bias [D]
// or residual [R, D] T and x_out [R, D] f32 (may alias x), g [D] -> y [R, D] T, rms [R].
template <class T>
struct NormFwdArgs {
  const float* x;
  const float* bias;
  const T* residual;
  float* x_out;
  const float* g;
  int64_t R, D;
  float eps;
  T* y;
  float* rms;
};

// Element i of row r after the pre-add.
template <class T, NormPre kPre>
__device__ __forceinline__ float pre_added(const NormFwdArgs<T>& a, int64_t r, int64_t i) {
  const float v = a.x[r * a.D + i];
  if constexpr (kPre == NormPre::BiasRound) return dev::round_f32<T>(v + a.bias[i]);
  if constexpr (kPre == NormPre::Residual) return v + dev::to_f32(a.residual[r * a.D + i]);
  return v;
}

// rms = sqrt(Σ/D + eps) of a row's sum of squares; lane 0 stores it. Returns 1/rms.
__device__ __forceinline__ float row_inverse_rms(float total, int64_t D, float eps, float* rms,
                                                 int64_t r, int lane) {
  const float rr = sqrtf(total / float(D) + eps);
  if (lane == 0) rms[r] = rr;
  return 1.0f / rr;
}

// Rows of D <= 32·KR: lane l holds elements l, l + 32, ... of its row in registers
// (KR = rmsnorm_fwd_regs(D)), so the row is read once and x_out, y are written from
// registers. The sum of squares runs over the lane's elements ascending, as in the
// streaming kernel below, so both give the same bits.
//   x [R, D] f32 (+ bias [D] f32 or residual [R, D] T), g [D] f32 -> x_out [R, D] f32,
//   y [R, D] T, rms [R] f32; one warp a row.
template <class T, NormPre kPre, int KR>
__global__ void __launch_bounds__(32 * kNormRowsPerBlock, KR <= 24 ? 3 : 1)  // 3 blocks/SM at <= 80 regs
    rmsnorm_fwd_regs_kernel(NormFwdArgs<T> a) {
  const int lane = int(threadIdx.x & 31);
  const int64_t D = a.D;
  MC_NORM_ROWS_LOOP(r, a.R) {
    float v[KR];
#pragma unroll
    for (int k = 0; k < KR; ++k) {
      const int64_t i = lane + 32 * k;
      v[k] = i < D ? pre_added<T, kPre>(a, r, i) : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < KR; ++k)
      if (lane + 32 * k < D) {
        if (kPre != NormPre::None) a.x_out[r * D + lane + 32 * k] = v[k];
        ss += v[k] * v[k];
      }
    const float inv = row_inverse_rms(warp_row_sum(ss), D, a.eps, a.rms, r, lane);
    T* yr = a.y + r * D;
#pragma unroll
    for (int k = 0; k < KR; ++k) {
      const int64_t i = lane + 32 * k;
      if (i < D) yr[i] = dev::from_f32<T>((v[k] * inv) * a.g[i]);
    }
  }
}

// Elements per lane the register kernel is compiled for: the smallest of 8, 24, 32, 64
// with 32·KR >= D; 0 above 2048 (the streaming kernel).
inline int rmsnorm_fwd_regs(int64_t D) {
  for (int kr : {8, 24, 32, 64})
    if (D <= 32 * kr) return kr;
  return 0;
}

// Any D (used above 2048, kPre None or BiasRound): two passes over the row, the second
// reading back what the first stored (x_out) or x.
// With the pre-add the value v = f32(q(x + bias)) is written to x_out and normalised:
// the same v as a separate bias_add_round would store, then the same sums in the same
// order, so the same bits as the two passes.
//   x [R, D] f32 (+ bias [D] f32), g [D] f32 -> x_out [R, D] f32, y [R, D] T, rms [R] f32;
//   one warp a row.
template <class T, NormPre kPre>
__global__ void __launch_bounds__(32 * kNormRowsPerBlock)
    rmsnorm_fwd_stream_kernel(NormFwdArgs<T> a) {
  static_assert(kPre != NormPre::Residual, "the launcher adds the residual first");
  const int lane = int(threadIdx.x & 31);
  const int64_t D = a.D;
  MC_NORM_ROWS_LOOP(r, a.R) {
    float* xo = kPre == NormPre::None ? nullptr : a.x_out + r * D;
    float ss = 0.0f;
    // kU elements of the lane at a time, loaded before any is stored: x_out may alias x,
    // so a store would otherwise keep the compiler from issuing the next loads early.
    // ss still sums the lane's elements in ascending order.
    constexpr int kU = 4;
    for (int64_t i0 = lane; i0 < D; i0 += 32 * kU) {
      float v[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t i = i0 + 32 * u;
        v[u] = i < D ? pre_added<T, kPre>(a, r, i) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t i = i0 + 32 * u;
        if (i < D) {
          if (kPre != NormPre::None) xo[i] = v[u];
          ss += v[u] * v[u];
        }
      }
    }
    const float inv = row_inverse_rms(warp_row_sum(ss), D, a.eps, a.rms, r, lane);
    const float* xn = kPre == NormPre::None ? a.x + r * D : xo;  // this lane's own stores
    T* yr = a.y + r * D;
#pragma unroll 4
    for (int64_t i = lane; i < D; i += 32) yr[i] = dev::from_f32<T>((xn[i] * inv) * a.g[i]);
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
template <class T, class Q, bool kAccumulate, int V>
__global__ void __launch_bounds__(32 * kNormBwdWarps, 2)  // 2 blocks per SM: <= 64 registers
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
      // kU of the lane's elements loaded at a time, then added in ascending order (the
      // same sum as one element at a time: fewer round trips, the same bits)
      constexpr int kU = 8;
      float dot = 0.0f;
      for (int64_t c0 = lane; c0 < D; c0 += 32 * kU) {
        float dv[kU], xv[kU], gv[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t c = c0 + 32 * u;
          const bool in = c < D;
          dv[u] = in ? dev::to_f32(dyr[c]) : 0.0f;
          xv[u] = in ? xr[c] : 0.0f;
          gv[u] = in ? g[c] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kU; ++u)
          if (c0 + 32 * u < D) dot += dv[u] * (xv[u] * inv) * gv[u];
      }
      const float m = warp_row_sum(dot) / float(D);
      if (lane == 0) {
        row_inv[i] = inv;
        row_m[i] = m;
      }
    }
    __syncthreads();
    // V consecutive columns per thread (V = rmsnorm_bwd_width: 4 or 2 where D and the
    // pointers allow it): the same per-column arithmetic and row order for every V.
    for (int64_t c = int64_t(threadIdx.x) * V; c < D; c += int64_t(blockDim.x) * V) {
      const NormVec<float, V> gc = load_vec<V>(g + c);
      float part[V];  // Σ_i dy·x̂ over the group's rows, i ascending
#pragma unroll
      for (int j = 0; j < V; ++j) part[j] = 0.0f;
      const T* dyc = dy + r0 * D + c;
      const float* xc = x + r0 * D + c;
      float* dxc = dx + r0 * D + c;
      Q* dxqc = dxq ? dxq + r0 * D + c : nullptr;
      constexpr int kRowUnroll = V == 4 ? 4 : 8;  // 8 rows' loads in flight at V <= 2
#pragma unroll kRowUnroll
      for (int i = 0; i < rows; ++i, dyc += D, xc += D, dxc += D) {
        const NormVec<T, V> dv = load_vec<V>(dyc);
        const NormVec<float, V> xv = load_vec<V>(xc);
        NormVec<float, V> out;
        if (kAccumulate) out = load_vec<V>(dxc);
        const float inv = row_inv[i], m = row_m[i];
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = dev::to_f32(dv.e[j]);
          const float xh = xv.e[j] * inv;
          const float v = __fmul_rn(gc.e[j] * d - xh * m, inv);  // no contraction into the add
          out.e[j] = kAccumulate ? __fadd_rn(out.e[j], v) : v;
          part[j] += d * xh;
        }
        store_vec<V>(dxc, out);
        if (dxqc) {
          NormVec<Q, V> q;
#pragma unroll
          for (int j = 0; j < V; ++j) q.e[j] = dev::from_f32<Q>(out.e[j]);
          store_vec<V>(dxqc + int64_t(i) * D, q);
        }
      }
#pragma unroll
      for (int j = 0; j < V; ++j) partials[grp * D + c + j] = part[j];
    }
  }
}

#undef MC_NORM_ROWS_LOOP

void check_norm_shape(const char* k, int64_t R, int64_t D) {
  require_positive(k, "rows", R);
  require_positive(k, "dim", D);
}

}  // namespace

template <class T, NormPre kPre>
void launch_rmsnorm_fwd(const NormFwdArgs<T>& a, cudaStream_t stream) {
  const unsigned grid = norm_grid(a.R);
  constexpr unsigned block = 32 * kNormRowsPerBlock;
  switch (rmsnorm_fwd_regs(a.D)) {
    case 8: rmsnorm_fwd_regs_kernel<T, kPre, 8><<<grid, block, 0, stream>>>(a); break;
    case 24: rmsnorm_fwd_regs_kernel<T, kPre, 24><<<grid, block, 0, stream>>>(a); break;
    case 32: rmsnorm_fwd_regs_kernel<T, kPre, 32><<<grid, block, 0, stream>>>(a); break;
    case 64: rmsnorm_fwd_regs_kernel<T, kPre, 64><<<grid, block, 0, stream>>>(a); break;
    default:
      if constexpr (kPre == NormPre::Residual) {  // x_out = x + f32(residual), then normalise it
        residual_add<T>(a.x, a.residual, a.R * a.D, a.x_out, stream);
        NormFwdArgs<T> b = a;
        b.x = a.x_out;
        rmsnorm_fwd_stream_kernel<T, NormPre::None><<<grid, block, 0, stream>>>(b);
      } else {
        rmsnorm_fwd_stream_kernel<T, kPre><<<grid, block, 0, stream>>>(a);
      }
  }
  MC_LAUNCH_CHECK("rmsnorm_fwd_kernel");
}

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
  if (add.bias && add.residual)
    throw ConfigError("rmsnorm_fwd: bias and residual are both set (at most one pre-add)");
  if ((add.bias || add.residual) && !add.x_out)
    throw ConfigError(std::string("rmsnorm_fwd: x_out is null (required with a ") +
                      (add.bias ? "bias" : "residual") + " to add first)");
  const NormFwdArgs<T> a{x, add.bias, add.residual, add.x_out, g, R, D, float(eps), y, rms};
  if (add.bias)
    launch_rmsnorm_fwd<T, NormPre::BiasRound>(a, stream);
  else if (add.residual)
    launch_rmsnorm_fwd<T, NormPre::Residual>(a, stream);
  else
    launch_rmsnorm_fwd<T, NormPre::None>(a, stream);
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
  // Columns per thread in phase 2: 4 where D needs them to fit the block in one pass, else
  // 2 (twice the threads walking rows: more loads in flight), where every row start is
  // aligned to the width's bytes; else 1.
  const auto aligned = [](const void* q, size_t b) { return reinterpret_cast<uintptr_t>(q) % b == 0; };
  const auto rows_aligned = [&](int v) {
    const size_t b = size_t(v) * sizeof(float);
    return D % v == 0 && aligned(dy, size_t(v) * sizeof(T)) && aligned(x, b) && aligned(dx, b) &&
           aligned(g, b) && (!dxq || aligned(dxq, size_t(v) * sizeof(Q)));
  };
  const int64_t threads = 32 * kNormBwdWarps;
  const int V = D > 2 * threads && rows_aligned(4) ? 4 : rows_aligned(2) ? 2 : 1;
  auto pick = [&](auto acc_tag) {
    constexpr bool kAcc = decltype(acc_tag)::value;
    return V == 4 ? &rmsnorm_bwd_kernel<T, Q, kAcc, 4>
                  : V == 2 ? &rmsnorm_bwd_kernel<T, Q, kAcc, 2> : &rmsnorm_bwd_kernel<T, Q, kAcc, 1>;
  };
  auto* kern = accumulate ? pick(std::true_type{}) : pick(std::false_type{});
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
