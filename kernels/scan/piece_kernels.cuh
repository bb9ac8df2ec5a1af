// scan/piece_kernels.cuh — the carry pass of the checkpointed backward's parallel pieces
// (scan.hpp, "Pieces of the backward"). Where a shape gives the one-channel backward too few
// blocks to fill the GPU, its chunks are cut into pieces that one launch walks at once. Each
// piece but the last needs the walk's state at its end, (dh, dAn): the adjoint of the state
// and the decay of the step after the piece. This pass produces it from the adjoint
// recurrence alone, walking back from T:
//   dA_t = exp(δ_t·A),  dh_t = fma(dA_{t+1}, dh_{t+1}, dy_t·C_t)     (dA_T := 1, dh_T = dh_final)
// with δ = softplus(Δraw + bias) or Δ and dy = dG·silu(z) or dG, exactly as the backward
// kernels' walk computes them (ckpt_kernels.cuh, the transform and the walk), so the (dh, dAn)
// a piece starts from have the bits the sequential walk would hold there, and so does every
// output that depends on them (dδ, du, dz, dB, dC, dh0). Only dA_log and dD, which each
// piece sums from 0, depend on the pieces (a pure function of the shape).
//
// The pass needs no state h and no sums across threads: one thread per (b, d, 4 consecutive
// states), no shared memory, no barriers (the refill's layout, refill_kernels.cuh). A chunk's
// steps are loaded in batches of 8 before the first of them is used; only one FMA a step and state
// is on the dh chain.
#pragma once

#include "kernels/scan/refill_kernels.cuh"

namespace mc::kern::scan_detail {

// Steps whose inputs a thread loads before walking them (8 x 7 values in flight; a
// whole 16-step chunk spilled 176 bytes at f32).
constexpr int kCarryBatch = 8;

template <class V>  // V: the storage type
struct CkptPieceCarryArgs : StatePassHead<V> {
  const V* Cm;                  // [B*T, ld_C]
  int64_t ld_C;
  const V* z;                   // [B*T, ld_z] or null
  int64_t ld_z;
  const V* dy;                  // [B*T, ld_dy]
  int64_t ld_dy;
  const float* a_neg;           // [di, ds]
  const float* dh_final;        // [B, di, ds] or null
  int64_t n_ckpt, piece_chunks;
  float* carry;                 // [n_pieces - 1][2][B, di, ds]: (dh, dAn) entering piece p's walk
  bool vec_c;                   // C rows as 4-element vectors (alignment checked)
  bool vec_state;               // ds % 4 == 0: states as float4
};

// grid: B · refill_blocks_per_sample(di, ds) blocks of kRefillThreads threads; K = the
// plan's steps per chunk. Walks chunks n_ckpt-1 down to piece_chunks; after chunk
// c = p·piece_chunks (p >= 1) it writes carry[p - 1] = (dh, dAn).
template <class T, scan::ExpMath E, int K>
__global__ void __launch_bounds__(kRefillThreads) ckpt_piece_carry_kernel(CkptPieceCarryArgs<T> p) {
  // the refill's thread layout (refill_kernels.cuh), spelled out as there: (b, d, n0)
  const int64_t Q = (p.ds + 3) / 4;
  const int64_t nb = refill_blocks_per_sample(p.di, p.ds);
  const int64_t b = int64_t(blockIdx.x) / nb;
  const int64_t local = (int64_t(blockIdx.x) - b * nb) * kRefillThreads + int64_t(threadIdx.x);
  const int64_t d = local / Q;
  if (d >= p.di) return;
  const int n0 = int(local - d * Q) * 4;
  const int nvalid = int(p.ds - n0 < 4 ? p.ds - n0 : 4);
  const bool vs = p.vec_state && nvalid == 4;

  float a[4], dh[4], dAn[4];
  load_vec<4>(p.a_neg + d * p.ds + n0, vs, nvalid, a);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    a[s] = exp_coef<E>(a[s]);
    dAn[s] = 1.f;
    dh[s] = 0.f;
  }
  const int64_t state_off = (b * p.di + d) * p.ds + n0;
  if (p.dh_final) load_states<4>(p.dh_final + state_off, p.vec_state, nvalid, dh);
  const float bias = p.delta_bias ? __ldg(p.delta_bias + d) : 0.f;
  const int64_t plane = p.B * p.di * p.ds;
  const bool vc = p.vec_c && nvalid == 4;
  for (int64_t c = p.n_ckpt - 1; c >= p.piece_chunks; --c) {
    const int64_t t0 = c * K;
    const int nk = int(min(int64_t(K), p.T - t0));  // steps past T: δ = dy = C = 0
    const int64_t r0 = b * p.T + t0;
#pragma unroll
    for (int h = K / kCarryBatch - 1; h >= 0; --h) {  // batches of the chunk, last first
      // the batch's inputs, all loaded before its first step
      float x[kCarryBatch], g[kCarryBatch], zv[kCarryBatch], cv[kCarryBatch][4];
#pragma unroll
      for (int i = 0; i < kCarryBatch; ++i) {
        const int k = h * kCarryBatch + i;
        x[i] = 0.f;
        g[i] = 0.f;
        zv[i] = 0.f;
#pragma unroll
        for (int s = 0; s < 4; ++s) cv[i][s] = 0.f;
        if (k < nk) {
          x[i] = load_f32(p.delta + (r0 + k) * p.ld_delta + d);
          g[i] = load_f32(p.dy + (r0 + k) * p.ld_dy + d);
          if (p.z) zv[i] = load_f32(p.z + (r0 + k) * p.ld_z + d);
          load_vec<4>(p.Cm + (r0 + k) * p.ld_C + n0, vc, nvalid, cv[i]);
        }
      }
#pragma unroll
      for (int i = kCarryBatch - 1; i >= 0; --i) {
        const int k = h * kCarryBatch + i;
        // the backward kernels' transform: δ (0 on steps past T), dy with the gate folded in
        const float dl = k < nk ? (p.delta_bias ? act_softplus(x[i] + bias) : x[i]) : 0.f;
        const float dyv = p.z ? g[i] * act_silu(zv[i]) : g[i];
#pragma unroll
        for (int s = 0; s < 4; ++s) {  // the walk's adjoint step
          const float dA = expm<E>(dl * a[s]);
          dh[s] = fmaf(dAn[s], dh[s], dyv * cv[i][s]);
          dAn[s] = dA;
        }
      }
    }
    if (c % p.piece_chunks == 0) {  // the state entering piece c / piece_chunks - 1's walk
      float* out = p.carry + 2 * (c / p.piece_chunks - 1) * plane + state_off;
      store_states<4>(out, p.vec_state, nvalid, dh);
      store_states<4>(out + plane, p.vec_state, nvalid, dAn);
    }
  }
}

}  // namespace mc::kern::scan_detail
