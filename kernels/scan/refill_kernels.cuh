// scan/refill_kernels.cuh — the refill of grouped checkpoints (scan.hpp, "Grouped
// checkpoints"): before the checkpointed backward walks a group of G chunks, this kernel
// runs the forward recurrence over the group from the one state the forward saved for it
// and writes the state before each of the group's chunks into the backward workspace,
// where the walk reads it as it reads a saved checkpoint at G = 1.
//
// The states are the forward's bit for bit: every element repeats the forward's
// arithmetic on the same inputs, in the same order (ckpt_kernels.cuh / tile_kernels.cuh):
//   δ = softplus(Δraw + bias) or Δ,  h = fma(exp(δ·A), h, (δ·u)·B)
// with exp as expm<E>(δ · exp_coef<E>(A)). Nothing else is computed (no y, no C).
//
// One thread per (b, d, 4 consecutive states); no shared memory, no barriers. Each step
// reads δ and u of its channel and 4 values of the B row (cached: the lanes of a channel
// and the channels of a warp share them). A chunk's K steps are loaded into registers
// before any of them is used (3·K loads in flight a thread): with ~12 warps an SM at
// B 8, d_inner 1536, d_state 16, one step's loads at a time would leave ~4 KB in flight
// an SM, ~0.6 TB/s by Little's law at ~1 µs latency, slower than the exponentials. The
// exponentials do not depend on h either, so only one FMA a step is on the h chain.
#pragma once

#include "kernels/scan/ckpt_kernels.cuh"

namespace mc::kern::scan_detail {

constexpr int kRefillThreads = 128;

// The inputs every per-state pass reads first (this refill, and the backward's carry pass
// of piece_kernels.cuh): the shape and δ. V: the storage type.
template <class V>
struct StatePassHead {
  int64_t B, T, di, ds;
  const V* delta;                     // [B*T, ld_delta]: Δ, or Δraw with delta_bias
  int64_t ld_delta;
  const float* delta_bias;            // [di] or null
};

template <class V>
struct CkptRefillArgs : StatePassHead<V> {
  const V* u;                         // [B*T, ld_u]
  int64_t ld_u;
  const V* Bm;                        // [B*T, ld_B]
  int64_t ld_B;
  const float* a_neg;                 // [di, ds]
  const float* saved;                 // [B, n_saved, di, ds]: the states before chunks 0, G, ..
  int64_t n_saved, group;
  float* dense;                       // [B, group, di, ds]: the states before chunks c_lo ..
  int64_t c_lo, c_hi;                 // the group: chunks c_lo .. c_hi-1 (c_lo a multiple of G)
  bool vec_b;                         // B rows as 4-element vectors (alignment checked)
  bool vec_state;                     // ds % 4 == 0: states as float4
};

// Threads per sample: di · ceil(ds / 4), in blocks of kRefillThreads.
__host__ __device__ inline int64_t refill_blocks_per_sample(int64_t di, int64_t ds) {
  const int64_t q = (ds + 3) / 4;
  return (di * q + kRefillThreads - 1) / kRefillThreads;
}

// grid: B · refill_blocks_per_sample(di, ds) blocks of kRefillThreads threads; K = the
// plan's steps per chunk. Writes dense[b, c - c_lo, d, :] = h before chunk c, for
// c_lo <= c < c_hi (c_hi - c_lo <= group).
template <class T, scan::ExpMath E, int K>
__global__ void __launch_bounds__(kRefillThreads) ckpt_refill_kernel(CkptRefillArgs<T> p) {
  const int64_t Q = (p.ds + 3) / 4;
  const int64_t nb = refill_blocks_per_sample(p.di, p.ds);
  const int64_t b = int64_t(blockIdx.x) / nb;
  const int64_t local = (int64_t(blockIdx.x) - b * nb) * kRefillThreads + int64_t(threadIdx.x);
  const int64_t d = local / Q;
  if (d >= p.di) return;
  const int n0 = int(local - d * Q) * 4;
  const int nvalid = int(p.ds - n0 < 4 ? p.ds - n0 : 4);
  const bool vs = p.vec_state && nvalid == 4;

  float a[4], h[4];
  load_vec<4>(p.a_neg + d * p.ds + n0, vs, nvalid, a);
#pragma unroll
  for (int s = 0; s < 4; ++s) a[s] = exp_coef<E>(a[s]);
  load_states<4>(p.saved + ((b * p.n_saved + p.c_lo / p.group) * p.di + d) * p.ds + n0,
                 p.vec_state, nvalid, h);
  const float bias = p.delta_bias ? __ldg(p.delta_bias + d) : 0.f;
  const int64_t plane = p.di * p.ds;
  float* out = p.dense + (b * p.group * p.di + d) * p.ds + n0;  // slot 0 of this thread's row
  const bool vb = p.vec_b && nvalid == 4;
  const T* dp = p.delta + (b * p.T + p.c_lo * K) * p.ld_delta + d;
  const T* up = p.u + (b * p.T + p.c_lo * K) * p.ld_u + d;
  const T* bp = p.Bm + (b * p.T + p.c_lo * K) * p.ld_B + n0;
  for (int64_t c = p.c_lo;; ++c) {
    store_states<4>(out, p.vec_state, nvalid, h);  // the state before chunk c
    if (c + 1 >= p.c_hi) break;  // chunk c + 1 exists, so chunk c's K steps are all < T
    out += plane;
    float x[K], uv[K], bv[K][4];  // the chunk's inputs, all loaded before the first step
#pragma unroll
    for (int k = 0; k < K; ++k) {
      x[k] = load_f32(dp + k * p.ld_delta);
      uv[k] = load_f32(up + k * p.ld_u);
      load_vec<4>(bp + k * p.ld_B, vb, nvalid, bv[k]);
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float dl = p.delta_bias ? act_softplus(x[k] + bias) : x[k];
      const float du = dl * uv[k];
#pragma unroll
      for (int s = 0; s < 4; ++s) h[s] = fmaf(expm<E>(dl * a[s]), h[s], du * bv[k][s]);
    }
    dp += K * p.ld_delta;
    up += K * p.ld_u;
    bp += K * p.ld_B;
  }
}

}  // namespace mc::kern::scan_detail
