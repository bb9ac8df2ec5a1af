// elementwise.cu — kernels and launchers of elementwise.cuh. Every kernel is
// a 64-bit grid-stride loop over independent outputs (1-D geometry of launch_args.hpp; the
// [R, N] ones loop over rows and columns, no division per element). Explicit
// instantiations for float, __nv_bfloat16, __half.
#include "kernels/elementwise.cuh"

#include "kernels/cuda_check.hpp"
#include "kernels/launch_args.hpp"
#include "kernels/typed.cuh"

#include <cstdint>
#include <initializer_list>

namespace mc::kern {

namespace {

using dev::delta_raw_of;
using dev::from_f32;
using dev::softplus_grad;
using dev::to_f32;

#define MC_GRID_LOOP(i, n) \
  for (int64_t i = dev::global_index(); i < (n); i += dev::grid_stride())

// Row-major [R, N] loops without a division per element: blocks stride over the rows
// (grid y) and over each row's columns (grid x); i = r·N + c, where the 1-D loop
// above would need the 64-bit i / N and i % N per element. On the H200 dropping them
// alone gained at most 5 % (gate_fwd 121 -> 116 us); the packing below is what made
// these kernels stream. Launch with rows_cols_grid / rows_cols_block.
#define MC_ROWS_COLS_LOOP(r, c, R, N)                                                    \
  for (int64_t r = blockIdx.y; r < (R); r += gridDim.y)                                 \
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < (N);            \
         c += int64_t(blockDim.x) * gridDim.x)

// V consecutive elements moved as 16-byte words where V·sizeof(E) allows it (one
// 16-byte access instead of V small ones: enough bytes in flight per thread for
// these [R, d_inner] kernels to stream, where one 2-byte access per thread left them
// latency-bound), element by element otherwise. The host picks V (pack_width) only
// where `packable` says so: every pointer 16-byte aligned, every row length and
// stride a multiple of V. The arithmetic per element is the same for every V.
template <class E, int V>
struct alignas((V * sizeof(E)) % 16 == 0 ? 16 : sizeof(E)) Pack {
  E e[V];
};
template <int V, class E>
__device__ __forceinline__ Pack<E, V> load_pack(const E* p) {
  Pack<E, V> x;
  if constexpr ((V * sizeof(E)) % 16 == 0) {
#pragma unroll
    for (int j = 0; j < int(V * sizeof(E) / 16); ++j)
      reinterpret_cast<uint4*>(&x)[j] = reinterpret_cast<const uint4*>(p)[j];
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) x.e[j] = p[j];
  }
  return x;
}
template <int V, class E>
__device__ __forceinline__ void store_pack(E* p, const Pack<E, V>& x) {
  if constexpr ((V * sizeof(E)) % 16 == 0) {
#pragma unroll
    for (int j = 0; j < int(V * sizeof(E) / 16); ++j)
      reinterpret_cast<uint4*>(p)[j] = reinterpret_cast<const uint4*>(&x)[j];
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = x.e[j];
  }
}

// P [R, 2di] -> xb, z, gs [R, di]
template <class T>
__global__ void split_gate_silu_kernel(const T* __restrict__ P, int64_t R, int64_t di,
                                       T* __restrict__ xb, T* __restrict__ z, T* __restrict__ gs) {
  MC_GRID_LOOP(i, R * di) {
    const int64_t r = i / di, d = i % di;
    const T zv = P[r * 2 * di + di + d];
    xb[i] = P[r * 2 * di + d];
    z[i] = zv;
    gs[i] = from_f32<T>(dev::silu(to_f32(zv)));
  }
}

// dxb, dz [R, di] -> dP [R, 2di]
template <class T>
__global__ void concat_halves_kernel(const T* __restrict__ dxb, const T* __restrict__ dz,
                                     int64_t R, int64_t di, T* __restrict__ dP) {
  MC_GRID_LOOP(i, R * 2 * di) {
    const int64_t r = i / (2 * di), c = i % (2 * di);
    dP[i] = c < di ? dxb[r * di + c] : dz[r * di + c - di];
  }
}

// acc [R, di] f32, bias [di] -> delta_raw, delta [R, di]
template <class T, int V>
__global__ void softplus_bias_fwd_kernel(const float* __restrict__ acc,
                                         const float* __restrict__ bias, int64_t R, int64_t di,
                                         T* __restrict__ delta_raw, T* __restrict__ delta) {
  MC_ROWS_COLS_LOOP(r, cv, R, di / V) {
    const int64_t d = cv * V, i = r * di + d;
    const Pack<float, V> a = load_pack<V>(acc + i);
    Pack<T, V> raw, dl;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      raw.e[j] = delta_raw_of<T>(a.e[j], bias[d + j]);
      dl.e[j] = from_f32<T>(dev::softplus(to_f32(raw.e[j])));
    }
    if (delta_raw) store_pack<V>(delta_raw + i, raw);  // null: Δraw not kept (forward)
    store_pack<V>(delta + i, dl);
  }
}

// delta_raw, d_delta [n] -> d_delta_raw [n]  (n a multiple of V)
template <class T, int V>
__global__ void softplus_bwd_kernel(const T* __restrict__ delta_raw, const T* __restrict__ d_delta,
                                    int64_t n, T* __restrict__ d_delta_raw) {
  MC_GRID_LOOP(iv, n / V) {
    const int64_t i = iv * V;
    const Pack<T, V> xr = load_pack<V>(delta_raw + i), gr = load_pack<V>(d_delta + i);
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.e[j] = softplus_grad<T>(to_f32(xr.e[j]), to_f32(gr.e[j]));
    store_pack<V>(d_delta_raw + i, out);
  }
}

// acc [R, di] f32, bias [di], d_delta [R, di] -> d_delta_raw [R, di]: the two kernels
// above in one pass (the same delta_raw_of and softplus_grad), Δraw never stored.
// d_delta_raw may be d_delta itself (each element is read, then written, by one thread:
// no __restrict__ on the two)
template <class T, int V>
__global__ void softplus_bias_bwd_kernel(const float* __restrict__ acc,
                                         const float* __restrict__ bias, int64_t R, int64_t di,
                                         const T* d_delta, T* d_delta_raw) {
  MC_ROWS_COLS_LOOP(r, cv, R, di / V) {
    const int64_t d = cv * V, i = r * di + d;
    const Pack<float, V> a = load_pack<V>(acc + i);
    const Pack<T, V> gr = load_pack<V>(d_delta + i);
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j)
      out.e[j] = softplus_grad<T>(to_f32(delta_raw_of<T>(a.e[j], bias[d + j])), to_f32(gr.e[j]));
    store_pack<V>(d_delta_raw + i, out);
  }
}

// y, gs [n] -> g [n]
template <class T>
__global__ void gating_fwd_kernel(const T* __restrict__ y, const T* __restrict__ gs, int64_t n,
                                  T* __restrict__ g) {
  MC_GRID_LOOP(i, n) g[i] = from_f32<T>(to_f32(y[i]) * to_f32(gs[i]));
}

// dG, y, z, gs [n] -> dY, dz [n]
template <class T>
__global__ void gating_bwd_kernel(const T* __restrict__ dG, const T* __restrict__ y,
                                  const T* __restrict__ z, const T* __restrict__ gs, int64_t n,
                                  T* __restrict__ dY, T* __restrict__ dz) {
  MC_GRID_LOOP(i, n) {
    const float g = to_f32(dG[i]);
    dY[i] = from_f32<T>(g * to_f32(gs[i]));
    dz[i] = from_f32<T>(g * to_f32(y[i]) * dev::silu_grad(to_f32(z[i])));
  }
}

// y [R, di], z (row stride ld_z) -> g [R, di] = q(y·q(SiLU(z))): the gate SiLU
// and the gating of F3/F4e in one pass, rounded exactly as split_gate_silu +
// gating_fwd store them
template <class T, int V>
__global__ void gate_fwd_kernel(const T* __restrict__ y, const T* __restrict__ z, int64_t ld_z,
                                int64_t R, int64_t di, T* __restrict__ g, int64_t ld_g) {
  MC_ROWS_COLS_LOOP(r, cv, R, di / V) {
    const int64_t d = cv * V, i = r * di + d;
    const Pack<T, V> zv = load_pack<V>(z + r * ld_z + d), yv = load_pack<V>(y + i);
    Pack<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const T gs = from_f32<T>(dev::silu(to_f32(zv.e[j])));
      out.e[j] = from_f32<T>(to_f32(yv.e[j]) * to_f32(gs));
    }
    store_pack<V>(g + r * ld_g + d, out);
  }
}

// dG, y [R, di], z (row stride ld_z) -> dY [R, di] = q(dG·gs), dz (row stride
// ld_dz) = q(dG·y·SiLU'(z)), gs = q(SiLU(z)) recomputed: gating_bwd without the
// saved gs and with dz written in place (the z half of the in_proj gradient). dY may
// be y itself (each thread loads its elements of y before it stores them: no
// __restrict__ on the pair), which is how the training step writes dY over the saved y.
template <class T, int V>
__global__ void gate_bwd_kernel(const T* __restrict__ dG, const T* y,
                                const T* __restrict__ z, int64_t ld_z, int64_t R, int64_t di,
                                T* dY, T* __restrict__ dz, int64_t ld_dz) {
  MC_ROWS_COLS_LOOP(r, cv, R, di / V) {
    const int64_t d = cv * V, i = r * di + d;
    const Pack<T, V> zp = load_pack<V>(z + r * ld_z + d), gp = load_pack<V>(dG + i),
                     yp = load_pack<V>(y + i);
    Pack<T, V> dy, dzv;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float zv = to_f32(zp.e[j]);
      const T gs = from_f32<T>(dev::silu(zv));
      const float g = to_f32(gp.e[j]);
      dy.e[j] = from_f32<T>(g * to_f32(gs));
      dzv.e[j] = from_f32<T>(g * to_f32(yp.e[j]) * dev::silu_grad(zv));
    }
    store_pack<V>(dY + i, dy);
    store_pack<V>(dz + r * ld_dz + d, dzv);
  }
}

// a [n] f32, b [n] T -> out [n] f32 (out may alias a: no __restrict__); n a multiple of V
template <class T, int V>
__global__ void residual_add_kernel(const float* a, const T* __restrict__ b, int64_t n,
                                    float* out) {
  MC_GRID_LOOP(iv, n / V) {
    const int64_t i = iv * V;
    Pack<float, V> x = load_pack<V>(a + i);
    const Pack<T, V> y = load_pack<V>(b + i);
#pragma unroll
    for (int j = 0; j < V; ++j) x.e[j] = x.e[j] + to_f32(y.e[j]);
    store_pack<V>(out + i, x);
  }
}

// a [n] T (in/out), b [n] T; n a multiple of V
template <class T, int V>
__global__ void add_inplace_kernel(T* __restrict__ a, const T* __restrict__ b, int64_t n) {
  MC_GRID_LOOP(iv, n / V) {
    const int64_t i = iv * V;
    Pack<T, V> x = load_pack<V>(a + i);
    const Pack<T, V> y = load_pack<V>(b + i);
#pragma unroll
    for (int j = 0; j < V; ++j) x.e[j] = from_f32<T>(to_f32(x.e[j]) + to_f32(y.e[j]));
    store_pack<V>(a + i, x);
  }
}

// y [M, N] f32 (in/out), bias [N]
template <class T>
__global__ void bias_add_round_kernel(float* __restrict__ y, const float* __restrict__ bias,
                                      int64_t M, int64_t N) {
  MC_ROWS_COLS_LOOP(r, c, M, N) y[r * N + c] = dev::round_f32<T>(y[r * N + c] + bias[c]);
}

// src [n] f32 -> dst [n] T; n a multiple of V
template <class T, int V>
__global__ void cast_from_f32_kernel(const float* __restrict__ src, int64_t n,
                                     T* __restrict__ dst) {
  MC_GRID_LOOP(iv, n / V) {
    const int64_t i = iv * V;
    const Pack<float, V> x = load_pack<V>(src + i);
    Pack<T, V> y;
#pragma unroll
    for (int j = 0; j < V; ++j) y.e[j] = from_f32<T>(x.e[j]);
    store_pack<V>(dst + i, y);
  }
}

// src [n] T -> dst [n] f32; n a multiple of V
template <class T, int V>
__global__ void cast_to_f32_kernel(const T* __restrict__ src, int64_t n, float* __restrict__ dst) {
  MC_GRID_LOOP(iv, n / V) {
    const int64_t i = iv * V;
    const Pack<T, V> x = load_pack<V>(src + i);
    Pack<float, V> y;
#pragma unroll
    for (int j = 0; j < V; ++j) y.e[j] = to_f32(x.e[j]);
    store_pack<V>(dst + i, y);
  }
}

// src [R, ld] cols [off, off+w) -> dst [R, w]
template <class T>
__global__ void gather_cols_kernel(const T* __restrict__ src, int64_t R, int64_t ld, int64_t off,
                                   int64_t w, T* __restrict__ dst) {
  MC_GRID_LOOP(i, R * w) dst[i] = src[(i / w) * ld + off + i % w];
}

// dst [R, ld] cols [off, off+w) += src [R, w]
template <class T>
__global__ void scatter_add_cols_kernel(const T* __restrict__ src, int64_t R, int64_t ld,
                                        int64_t off, int64_t w, T* __restrict__ dst) {
  MC_GRID_LOOP(i, R * w) {
    T* p = dst + (i / w) * ld + off + i % w;
    *p = from_f32<T>(to_f32(*p) + to_f32(src[i]));
  }
}

// d_dt_in [R, dr] T, dB, dC [R, ds] f32 -> d_xdbl [R, dr + 2ds] T
template <class T>
__global__ void assemble_dxdbl_kernel(const T* __restrict__ d_dt_in, const float* __restrict__ dB,
                                      const float* __restrict__ dC, int64_t R, int64_t dr,
                                      int64_t ds, T* __restrict__ d_xdbl) {
  const int64_t xd = dr + 2 * ds;
  MC_GRID_LOOP(i, R * xd) {
    const int64_t r = i / xd, c = i % xd;
    d_xdbl[i] = c < dr        ? d_dt_in[r * dr + c]
                : c < dr + ds ? from_f32<T>(dB[r * ds + c - dr])
                              : from_f32<T>(dC[r * ds + c - dr - ds]);
  }
}

// src [B*T, D] T -> dst [B, D] f32
template <class T>
__global__ void gather_last_timestep_kernel(const T* __restrict__ src, int64_t B, int64_t T_len,
                                            int64_t D, float* __restrict__ dst) {
  MC_GRID_LOOP(i, B * D) {
    const int64_t b = i / D, j = i % D;
    dst[i] = to_f32(src[(b * T_len + T_len - 1) * D + j]);
  }
}

// a_log [n] -> a_neg [n]
__global__ void exp_negate_kernel(const float* __restrict__ a_log, int64_t n,
                                  float* __restrict__ a_neg) {
  MC_GRID_LOOP(i, n) a_neg[i] = -expf(a_log[i]);
}

#undef MC_GRID_LOOP

void require_rows_cols(const char* k, int64_t R, const char* cols_name, int64_t cols) {
  require_positive(k, "rows", R);
  require_positive(k, cols_name, cols);
}

void require_count(const char* k, int64_t n) { require_range(k, "n", n, 0, INT64_MAX); }

// Elements per 16-byte word of the packed kernels: 4 f32, 8 bf16/f16.
template <class T>
constexpr int pack_width() {
  return int(16 / sizeof(T));
}

void check_cols(const char* k, int64_t R, int64_t ld, int64_t off, int64_t w) {
  require_rows_cols(k, R, "width", w);
  require_range(k, "offset", off, 0, INT64_MAX);
  require_range(k, "offset + width", off + w, 1, ld, "columns must lie inside the row stride");
}

}  // namespace

template <class T>
void split_gate_silu(const T* P, int64_t R, int64_t di, T* xb, T* z, T* gs, cudaStream_t stream) {
  const char* k = "split_gate_silu";
  require_rows_cols(k, R, "d_inner", di);
  require_ptr(k, "P", P);
  require_ptr(k, "xb", xb);
  require_ptr(k, "z", z);
  require_ptr(k, "gs", gs);
  split_gate_silu_kernel<T><<<grid_1d(R * di), kBlock1D, 0, stream>>>(P, R, di, xb, z, gs);
  MC_LAUNCH_CHECK("split_gate_silu_kernel");
}

template <class T>
void gate_fwd(const T* y, const T* z, int64_t ld_z, int64_t R, int64_t di, T* g, int64_t ld_g,
              cudaStream_t stream) {
  const char* k = "gate_fwd";
  require_rows_cols(k, R, "d_inner", di);
  require_ptr(k, "y", y);
  require_ptr(k, "z", z);
  require_ptr(k, "g", g);
  if (ld_z < di) fail_arg(k, "ld_z", ld_z, ">=", di, "row stride of z");
  if (ld_g < di) fail_arg(k, "ld_g", ld_g, ">=", di, "row stride of g");
  constexpr int V = pack_width<T>();
  if (packable(V, {di, ld_z, ld_g}, {y, z, g}))
    gate_fwd_kernel<T, V><<<rows_cols_grid(R, di / V), rows_cols_block(di / V), 0, stream>>>(
        y, z, ld_z, R, di, g, ld_g);
  else
    gate_fwd_kernel<T, 1><<<rows_cols_grid(R, di), rows_cols_block(di), 0, stream>>>(
        y, z, ld_z, R, di, g, ld_g);
  MC_LAUNCH_CHECK("gate_fwd_kernel");
}

template <class T>
void gate_bwd(const T* dG, const T* y, const T* z, int64_t ld_z, int64_t R, int64_t di, T* dY,
              T* dz, int64_t ld_dz, cudaStream_t stream) {
  const char* k = "gate_bwd";
  require_rows_cols(k, R, "d_inner", di);
  require_ptr(k, "dG", dG);
  require_ptr(k, "y", y);
  require_ptr(k, "z", z);
  require_ptr(k, "dY", dY);
  require_ptr(k, "dz", dz);
  if (ld_z < di) fail_arg(k, "ld_z", ld_z, ">=", di, "row stride of z");
  if (ld_dz < di) fail_arg(k, "ld_dz", ld_dz, ">=", di, "row stride of dz");
  constexpr int V = pack_width<T>();
  if (packable(V, {di, ld_z, ld_dz}, {dG, y, z, dY, dz}))
    gate_bwd_kernel<T, V><<<rows_cols_grid(R, di / V), rows_cols_block(di / V), 0, stream>>>(
        dG, y, z, ld_z, R, di, dY, dz, ld_dz);
  else
    gate_bwd_kernel<T, 1><<<rows_cols_grid(R, di), rows_cols_block(di), 0, stream>>>(
        dG, y, z, ld_z, R, di, dY, dz, ld_dz);
  MC_LAUNCH_CHECK("gate_bwd_kernel");
}

template <class T>
void concat_halves(const T* dxb, const T* dz, int64_t R, int64_t di, T* dP, cudaStream_t stream) {
  const char* k = "concat_halves";
  require_rows_cols(k, R, "d_inner", di);
  require_ptr(k, "dxb", dxb);
  require_ptr(k, "dz", dz);
  require_ptr(k, "dP", dP);
  concat_halves_kernel<T><<<grid_1d(R * 2 * di), kBlock1D, 0, stream>>>(dxb, dz, R, di, dP);
  MC_LAUNCH_CHECK("concat_halves_kernel");
}

template <class T>
void softplus_bias_fwd(const float* acc, const float* bias, int64_t R, int64_t di, T* delta_raw,
                       T* delta, cudaStream_t stream) {
  const char* k = "softplus_bias_fwd";
  require_rows_cols(k, R, "d_inner", di);
  require_ptr(k, "acc", acc);
  require_ptr(k, "bias", bias);
  require_ptr(k, "delta", delta);
  constexpr int V = pack_width<T>();
  if (packable(V, {di}, {acc, delta_raw, delta}))
    softplus_bias_fwd_kernel<T, V><<<rows_cols_grid(R, di / V), rows_cols_block(di / V), 0,
                                     stream>>>(acc, bias, R, di, delta_raw, delta);
  else
    softplus_bias_fwd_kernel<T, 1><<<rows_cols_grid(R, di), rows_cols_block(di), 0, stream>>>(
        acc, bias, R, di, delta_raw, delta);
  MC_LAUNCH_CHECK("softplus_bias_fwd_kernel");
}

template <class T>
void softplus_bwd(const T* delta_raw, const T* d_delta, int64_t n, T* d_delta_raw,
                  cudaStream_t stream) {
  const char* k = "softplus_bwd";
  require_count(k, n);
  if (n == 0) return;
  require_ptr(k, "delta_raw", delta_raw);
  require_ptr(k, "d_delta", d_delta);
  require_ptr(k, "d_delta_raw", d_delta_raw);
  constexpr int V = pack_width<T>();
  if (packable(V, {n}, {delta_raw, d_delta, d_delta_raw}))
    softplus_bwd_kernel<T, V><<<grid_1d(n / V), kBlock1D, 0, stream>>>(delta_raw, d_delta, n,
                                                                       d_delta_raw);
  else
    softplus_bwd_kernel<T, 1><<<grid_1d(n), kBlock1D, 0, stream>>>(delta_raw, d_delta, n,
                                                                   d_delta_raw);
  MC_LAUNCH_CHECK("softplus_bwd_kernel");
}

template <class T>
void softplus_bias_bwd(const float* acc, const float* bias, int64_t R, int64_t di,
                       const T* d_delta, T* d_delta_raw, cudaStream_t stream) {
  const char* k = "softplus_bias_bwd";
  require_rows_cols(k, R, "d_inner", di);
  require_ptr(k, "acc", acc);
  require_ptr(k, "bias", bias);
  require_ptr(k, "d_delta", d_delta);
  require_ptr(k, "d_delta_raw", d_delta_raw);
  constexpr int V = pack_width<T>();
  if (packable(V, {di}, {acc, d_delta, d_delta_raw}))
    softplus_bias_bwd_kernel<T, V><<<rows_cols_grid(R, di / V), rows_cols_block(di / V), 0,
                                     stream>>>(acc, bias, R, di, d_delta, d_delta_raw);
  else
    softplus_bias_bwd_kernel<T, 1><<<rows_cols_grid(R, di), rows_cols_block(di), 0, stream>>>(
        acc, bias, R, di, d_delta, d_delta_raw);
  MC_LAUNCH_CHECK("softplus_bias_bwd_kernel");
}

template <class T>
void gating_fwd(const T* y, const T* gs, int64_t n, T* g, cudaStream_t stream) {
  const char* k = "gating_fwd";
  require_count(k, n);
  if (n == 0) return;
  require_ptr(k, "y", y);
  require_ptr(k, "gs", gs);
  require_ptr(k, "g", g);
  gating_fwd_kernel<T><<<grid_1d(n), kBlock1D, 0, stream>>>(y, gs, n, g);
  MC_LAUNCH_CHECK("gating_fwd_kernel");
}

template <class T>
void gating_bwd(const T* dG, const T* y, const T* z, const T* gs, int64_t n, T* dY, T* dz,
                cudaStream_t stream) {
  const char* k = "gating_bwd";
  require_count(k, n);
  if (n == 0) return;
  require_ptr(k, "dG", dG);
  require_ptr(k, "y", y);
  require_ptr(k, "z", z);
  require_ptr(k, "gs", gs);
  require_ptr(k, "dY", dY);
  require_ptr(k, "dz", dz);
  gating_bwd_kernel<T><<<grid_1d(n), kBlock1D, 0, stream>>>(dG, y, z, gs, n, dY, dz);
  MC_LAUNCH_CHECK("gating_bwd_kernel");
}

template <class T>
void residual_add(const float* a, const T* b, int64_t n, float* out, cudaStream_t stream) {
  const char* k = "residual_add";
  require_count(k, n);
  if (n == 0) return;
  require_ptr(k, "a", a);
  require_ptr(k, "b", b);
  require_ptr(k, "out", out);
  constexpr int V = pack_width<T>();
  if (packable(V, {n}, {a, b, out}))
    residual_add_kernel<T, V><<<grid_1d(n / V), kBlock1D, 0, stream>>>(a, b, n, out);
  else
    residual_add_kernel<T, 1><<<grid_1d(n), kBlock1D, 0, stream>>>(a, b, n, out);
  MC_LAUNCH_CHECK("residual_add_kernel");
}

template <class T>
void add_inplace(T* a, const T* b, int64_t n, cudaStream_t stream) {
  const char* k = "add_inplace";
  require_count(k, n);
  if (n == 0) return;
  require_ptr(k, "a", a);
  require_ptr(k, "b", b);
  constexpr int V = pack_width<T>();
  if (packable(V, {n}, {a, b}))
    add_inplace_kernel<T, V><<<grid_1d(n / V), kBlock1D, 0, stream>>>(a, b, n);
  else
    add_inplace_kernel<T, 1><<<grid_1d(n), kBlock1D, 0, stream>>>(a, b, n);
  MC_LAUNCH_CHECK("add_inplace_kernel");
}

template <class T>
void bias_add_round(float* y, const float* bias, int64_t M, int64_t N, cudaStream_t stream) {
  const char* k = "bias_add_round";
  require_rows_cols(k, M, "cols", N);
  require_ptr(k, "y", y);
  require_ptr(k, "bias", bias);
  bias_add_round_kernel<T><<<rows_cols_grid(M, N), rows_cols_block(N), 0, stream>>>(y, bias, M, N);
  MC_LAUNCH_CHECK("bias_add_round_kernel");
}

template <class T>
void cast_from_f32(const float* src, int64_t n, T* dst, cudaStream_t stream) {
  const char* k = "cast_from_f32";
  require_count(k, n);
  if (n == 0) return;
  require_ptr(k, "src", src);
  require_ptr(k, "dst", dst);
  constexpr int V = pack_width<T>();
  if (packable(V, {n}, {src, dst}))
    cast_from_f32_kernel<T, V><<<grid_1d(n / V), kBlock1D, 0, stream>>>(src, n, dst);
  else
    cast_from_f32_kernel<T, 1><<<grid_1d(n), kBlock1D, 0, stream>>>(src, n, dst);
  MC_LAUNCH_CHECK("cast_from_f32_kernel");
}

template <class T>
void cast_to_f32(const T* src, int64_t n, float* dst, cudaStream_t stream) {
  const char* k = "cast_to_f32";
  require_count(k, n);
  if (n == 0) return;
  require_ptr(k, "src", src);
  require_ptr(k, "dst", dst);
  constexpr int V = pack_width<T>();
  if (packable(V, {n}, {src, dst}))
    cast_to_f32_kernel<T, V><<<grid_1d(n / V), kBlock1D, 0, stream>>>(src, n, dst);
  else
    cast_to_f32_kernel<T, 1><<<grid_1d(n), kBlock1D, 0, stream>>>(src, n, dst);
  MC_LAUNCH_CHECK("cast_to_f32_kernel");
}

template <class T>
void gather_cols(const T* src, int64_t R, int64_t ld, int64_t off, int64_t w, T* dst,
                 cudaStream_t stream) {
  const char* k = "gather_cols";
  check_cols(k, R, ld, off, w);
  require_ptr(k, "src", src);
  require_ptr(k, "dst", dst);
  gather_cols_kernel<T><<<grid_1d(R * w), kBlock1D, 0, stream>>>(src, R, ld, off, w, dst);
  MC_LAUNCH_CHECK("gather_cols_kernel");
}

template <class T>
void scatter_add_cols(const T* src, int64_t R, int64_t ld, int64_t off, int64_t w, T* dst,
                      cudaStream_t stream) {
  const char* k = "scatter_add_cols";
  check_cols(k, R, ld, off, w);
  require_ptr(k, "src", src);
  require_ptr(k, "dst", dst);
  scatter_add_cols_kernel<T><<<grid_1d(R * w), kBlock1D, 0, stream>>>(src, R, ld, off, w, dst);
  MC_LAUNCH_CHECK("scatter_add_cols_kernel");
}

template <class T>
void assemble_dxdbl(const T* d_dt_in, const float* dB, const float* dC, int64_t R, int64_t dr,
                    int64_t ds, T* d_xdbl, cudaStream_t stream) {
  const char* k = "assemble_dxdbl";
  require_rows_cols(k, R, "dt_rank", dr);
  require_positive(k, "d_state", ds);
  require_ptr(k, "d_dt_in", d_dt_in);
  require_ptr(k, "dB", dB);
  require_ptr(k, "dC", dC);
  require_ptr(k, "d_xdbl", d_xdbl);
  assemble_dxdbl_kernel<T><<<grid_1d(R * (dr + 2 * ds)), kBlock1D, 0, stream>>>(d_dt_in, dB, dC,
                                                                                R, dr, ds, d_xdbl);
  MC_LAUNCH_CHECK("assemble_dxdbl_kernel");
}

template <class T>
void gather_last_timestep(const T* src, int64_t B, int64_t seq_len, int64_t D, float* dst,
                          cudaStream_t stream) {
  const char* k = "gather_last_timestep";
  require_positive(k, "batch", B);
  require_positive(k, "seq_len", seq_len);
  require_positive(k, "dim", D);
  require_ptr(k, "src", src);
  require_ptr(k, "dst", dst);
  gather_last_timestep_kernel<T><<<grid_1d(B * D), kBlock1D, 0, stream>>>(src, B, seq_len, D, dst);
  MC_LAUNCH_CHECK("gather_last_timestep_kernel");
}

void exp_negate(const float* a_log, int64_t n, float* a_neg, cudaStream_t stream) {
  const char* k = "exp_negate";
  require_count(k, n);
  if (n == 0) return;
  require_ptr(k, "a_log", a_log);
  require_ptr(k, "a_neg", a_neg);
  exp_negate_kernel<<<grid_1d(n), kBlock1D, 0, stream>>>(a_log, n, a_neg);
  MC_LAUNCH_CHECK("exp_negate_kernel");
}

#define MC_INSTANTIATE_ELEMENTWISE(T)                                                          \
  template void split_gate_silu<T>(const T*, int64_t, int64_t, T*, T*, T*, cudaStream_t);      \
  template void gate_fwd<T>(const T*, const T*, int64_t, int64_t, int64_t, T*, int64_t,         \
                            cudaStream_t);                                                     \
  template void gate_bwd<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, T*,  \
                            int64_t, cudaStream_t);                                          \
  template void concat_halves<T>(const T*, const T*, int64_t, int64_t, T*, cudaStream_t);      \
  template void softplus_bias_fwd<T>(const float*, const float*, int64_t, int64_t, T*, T*,     \
                                     cudaStream_t);                                            \
  template void softplus_bwd<T>(const T*, const T*, int64_t, T*, cudaStream_t);                \
  template void softplus_bias_bwd<T>(const float*, const float*, int64_t, int64_t, const T*,   \
                                     T*, cudaStream_t);                                        \
  template void gating_fwd<T>(const T*, const T*, int64_t, T*, cudaStream_t);                  \
  template void gating_bwd<T>(const T*, const T*, const T*, const T*, int64_t, T*, T*,         \
                              cudaStream_t);                                                   \
  template void residual_add<T>(const float*, const T*, int64_t, float*, cudaStream_t);        \
  template void add_inplace<T>(T*, const T*, int64_t, cudaStream_t);                           \
  template void bias_add_round<T>(float*, const float*, int64_t, int64_t, cudaStream_t);       \
  template void cast_from_f32<T>(const float*, int64_t, T*, cudaStream_t);                     \
  template void cast_to_f32<T>(const T*, int64_t, float*, cudaStream_t);                       \
  template void gather_cols<T>(const T*, int64_t, int64_t, int64_t, int64_t, T*, cudaStream_t); \
  template void scatter_add_cols<T>(const T*, int64_t, int64_t, int64_t, int64_t, T*,          \
                                    cudaStream_t);                                             \
  template void assemble_dxdbl<T>(const T*, const float*, const float*, int64_t, int64_t,      \
                                  int64_t, T*, cudaStream_t);                                  \
  template void gather_last_timestep<T>(const T*, int64_t, int64_t, int64_t, float*,           \
                                        cudaStream_t);
MC_INSTANTIATE_ELEMENTWISE(float)
MC_INSTANTIATE_ELEMENTWISE(__nv_bfloat16)
MC_INSTANTIATE_ELEMENTWISE(__half)
#undef MC_INSTANTIATE_ELEMENTWISE

}  // namespace mc::kern
