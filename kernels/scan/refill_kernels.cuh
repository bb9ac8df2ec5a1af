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
// and the channels of a warp share them). The inputs go through a ring of registers in
// kRefillBatches batches of K / kRefillBatches steps, in the storage type: each batch is
// loaded three batches (12 steps at K = 16) before it is walked and converted to f32 only
// there, so a thread waits for memory only at its first batches. Why: with ~12 warps an SM
// at B 8, d_inner 1536, d_state 16 the walk of a step takes ~50 ns of an SM's
// exponentials, and a load ~0.5-1 µs. Measured on an H100 (ncu; bf16, T 2048, one group
// of 61 chunks, so 60 walked; their exponentials alone take ~45 µs): loading a chunk and
// then walking it took 153 µs (0.39 instructions issued per scheduler and cycle); the ring
// converting bf16 at the load, 622 µs (0.10: every conversion is a use, so every load was
// waited for where it was issued); the ring in the storage type with each B word split
// into 16-bit registers after its load (again a use), 194 µs; this version, 126 µs (0.52).
// docs/performance-notes.md, "2026-12-06, ninth session". The ring holds no more registers
// than the first version's one chunk (96 at K = 16 in f32, fewer in bf16/f16). The
// exponentials do not depend on h either, so only one FMA a step is on the h chain.
// Twelfth session: Δ's softplus and the B vector loads became compile-time variants of the
// walk (one branch a thread instead of several a step) and the last walked chunk is peeled,
// so that the loop's loads are unconditional: the bf16 K = 16 walk went from 1646 SASS
// instructions a chunk (both branches of every step) to 557 for the step's variant, ~35 a
// step against the 47 ncu counted issued. Two tries that did not work, for whoever comes
// next: 2 states a thread under a 6-blocks-an-SM bound (80 registers) spilled the ring; and
// with the chunk's loads at offsets from a chunk base ptxas kept every row address live
// (254 registers).
#pragma once

#include <type_traits>

#include "kernels/scan/ckpt_kernels.cuh"

namespace mc::kern::scan_detail {

constexpr int kRefillThreads = 128;
// Batches a chunk's inputs are loaded in (refill_kernels.cuh): NB - 1 of them in flight
// while one is walked.
constexpr int kRefillBatches = 4;

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

// The storage value as f32 (the conversion load_f32 makes), for values loaded earlier in
// the storage type (this refill, and the passes of piece_kernels.cuh).
__device__ __forceinline__ float as_f32(float v) { return v; }
__device__ __forceinline__ float as_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float as_f32(__half v) { return __half2float(v); }

// 4 consecutive values of a typed row, kept as the one word a vector load gives (float4 in
// f32, uint2 of four 16-bit values otherwise) until they are used: unpacking 16-bit values
// into registers of their own is itself a use, and made the thread wait for the load there.
template <class T>
struct Quad {
  using Word = typename std::conditional<sizeof(T) == 4, float4, uint2>::type;
  Word w;
};
// One load of 4 values when `vec` (the launcher checked the alignment), else `valid`
// scalar loads and zeros after. f32 needs no conversion, so load_vec's loads serve.
template <class T>
__device__ __forceinline__ Quad<T> load_quad(const T* p, bool vec, int valid) {
  Quad<T> q;
  if constexpr (sizeof(T) == 4) {
    float v[4];
    load_vec<4>(p, vec, valid, v);
    q.w = make_float4(v[0], v[1], v[2], v[3]);
  } else if (vec) {
    q.w = __ldg(reinterpret_cast<const uint2*>(p));
  } else {
    uint32_t v[4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      unsigned short bits = 0;  // +0.0
      if (s < valid) {
        const T t = __ldg(p + s);
        memcpy(&bits, &t, sizeof bits);
      }
      v[s] = bits;
    }
    q.w = make_uint2(v[0] | (v[1] << 16), v[2] | (v[3] << 16));
  }
  return q;
}
// Value s (0..3, a constant) of the quad, as f32.
template <int s>
__device__ __forceinline__ float quad_f32(const Quad<float>& q) {
  return s == 0 ? q.w.x : s == 1 ? q.w.y : s == 2 ? q.w.z : q.w.w;
}
template <int s, class H>
__device__ __forceinline__ float quad_f32(const Quad<H>& q) {
  const uint32_t word = s < 2 ? q.w.x : q.w.y;
  return half_bits_to_f32<H>((unsigned short)(s % 2 ? word >> 16 : word & 0xffffu));
}

// One batch of a chunk's inputs of one thread, in registers and in the storage type: δ (or
// Δraw), u, and 4 B values a step. Converting at load time would make the thread wait for
// each load as soon as it is issued (measured: see the file header).
template <class T, int N>
struct RefillBatch {
  T x[N], u[N];
  Quad<T> b[N];
};

// Threads per sample: di · ceil(ds / 4), in blocks of kRefillThreads.
__host__ __device__ inline int64_t refill_blocks_per_sample(int64_t di, int64_t ds) {
  const int64_t q = (ds + 3) / 4;
  return (di * q + kRefillThreads - 1) / kRefillThreads;
}

// The walk of one thread over chunks c_lo .. c_hi-1, from h (the state before chunk c_lo),
// writing the state before each chunk from `out` on (this thread's row of slot 0). BIAS (Δ's
// softplus) and VB (B by 4-element vector loads) are compile-time, so that no step branches
// on them; the last walked chunk is peeled off the loop, so that every load in the loop is
// unconditional (the 2026-12-06 twelfth-session notes: the per-step branches and the
// conditional loads of the next chunk).
template <class T, scan::ExpMath E, int K, bool BIAS, bool VB>
__device__ __forceinline__ void refill_walk(const CkptRefillArgs<T>& p, int64_t b, int64_t d,
                                            int n0, int nvalid, const float (&a)[4],
                                            float (&h)[4], float* out) {
  const float bias = BIAS ? __ldg(p.delta_bias + d) : 0.f;
  const int64_t plane = p.di * p.ds;
  const T* dp = p.delta + (b * p.T + p.c_lo * K) * p.ld_delta + d;
  const T* up = p.u + (b * p.T + p.c_lo * K) * p.ld_u + d;
  const T* bp = p.Bm + (b * p.T + p.c_lo * K) * p.ld_B + n0;
  // The chunk's steps in kRefillBatches batches of KB; batch j of chunk c goes into ring
  // slot j, loaded kRefillBatches - 1 batches before it is walked.
  constexpr int NB = kRefillBatches, KB = K / NB;
  static_assert(K % NB == 0, "the refill's batches divide the chunk");
  // steps j·KB .. j·KB+KB-1 of the chunk the row pointers are at, plus `ahead` chunks
  auto load = [&](RefillBatch<T, KB>& r, int j, int ahead) {
#pragma unroll
    for (int k = 0; k < KB; ++k) {
      const int64_t i = int64_t(ahead) * K + j * KB + k;
      r.x[k] = __ldg(dp + i * p.ld_delta);
      r.u[k] = __ldg(up + i * p.ld_u);
      r.b[k] = load_quad(bp + i * p.ld_B, VB, nvalid);
    }
  };
  auto walk = [&](const RefillBatch<T, KB>& r) {
#pragma unroll
    for (int k = 0; k < KB; ++k) {
      const float x = as_f32(r.x[k]);
      const float dl = BIAS ? act_softplus(x + bias) : x;
      const float du = dl * as_f32(r.u[k]);
      h[0] = fmaf(expm<E>(dl * a[0]), h[0], du * quad_f32<0>(r.b[k]));
      h[1] = fmaf(expm<E>(dl * a[1]), h[1], du * quad_f32<1>(r.b[k]));
      h[2] = fmaf(expm<E>(dl * a[2]), h[2], du * quad_f32<2>(r.b[k]));
      h[3] = fmaf(expm<E>(dl * a[3]), h[3], du * quad_f32<3>(r.b[k]));
    }
  };
  // Chunk c is walked iff chunk c + 1 exists (its state is wanted), so its K steps are < T.
  RefillBatch<T, KB> ring[NB];
  store_states<4>(out, p.vec_state, nvalid, h);  // the state before chunk c_lo
  if (p.c_lo + 1 >= p.c_hi) return;
#pragma unroll
  for (int j = 0; j < NB - 1; ++j) load(ring[j], j, 0);
  // every chunk but the last walked one: its next chunk is walked too, so its batches load
  for (int64_t c = p.c_lo; c + 2 < p.c_hi; ++c) {
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int jl = j + NB - 1;  // the batch loaded now: this chunk's last, or the next's
      if (jl < NB) load(ring[jl], jl, 0);
      else load(ring[jl - NB], jl - NB, 1);
      walk(ring[j]);
    }
    dp += K * p.ld_delta;
    up += K * p.ld_u;
    bp += K * p.ld_B;
    out += plane;
    store_states<4>(out, p.vec_state, nvalid, h);  // the state before chunk c + 1
  }
  // the last walked chunk: only its own last batch is still to load
#pragma unroll
  for (int j = 0; j < NB; ++j) {
    if (j + NB - 1 < NB) load(ring[j + NB - 1], j + NB - 1, 0);
    walk(ring[j]);
  }
  out += plane;
  store_states<4>(out, p.vec_state, nvalid, h);  // the state before chunk c_hi - 1
}

//   δ, u [B*T, ld] V, B [B*T, ld_B] V, a_neg [di, ds], saved [B, n_saved, di, ds]
//   -> dense [B, group, di, ds] f32.
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
  float* out = p.dense + (b * p.group * p.di + d) * p.ds + n0;  // slot 0 of this thread's row
  const bool vb = p.vec_b && nvalid == 4;
  // One branch a thread, to the walk's variant (four instances of it in this kernel).
  if (p.delta_bias) {
    if (vb) refill_walk<T, E, K, true, true>(p, b, d, n0, nvalid, a, h, out);
    else refill_walk<T, E, K, true, false>(p, b, d, n0, nvalid, a, h, out);
  } else {
    if (vb) refill_walk<T, E, K, false, true>(p, b, d, n0, nvalid, a, h, out);
    else refill_walk<T, E, K, false, false>(p, b, d, n0, nvalid, a, h, out);
  }
}

}  // namespace mc::kern::scan_detail
