// scan/piece_kernels.cuh — the passes that start the parallel pieces of the checkpointed scan
// (scan.hpp, "Pieces of the backward" and "of the forward"). Where a shape gives the
// one-channel kernels too few blocks to fill the GPU, their chunks are cut into pieces that
// one launch walks at once, and each piece starts from a state these passes produce.
//
// The backward's carry pass. Each piece but the last needs the walk's state at its end,
// (dh, dAn): the adjoint of the state and the decay of the step after the piece. This pass
// produces it from the adjoint recurrence alone, walking back from T:
//   dA_t = exp(δ_t·A),  dh_t = fma(dA_{t+1}, dh_{t+1}, dy_t·C_t)     (dA_T := 1, dh_T = dh_final)
// with δ = softplus(Δraw + bias) or Δ and dy = dG·silu(z) or dG, exactly as the backward
// kernels' walk computes them (ckpt_kernels.cuh, the transform and the walk), so the (dh, dAn)
// a piece starts from have the bits the sequential walk would hold there, and so does every
// output that depends on them (dδ, du, dz, dB, dC, dh0). Only dA_log and dD, which each
// piece sums from 0, depend on the pieces (a pure function of the shape). It needs no state
// h and no sums across states: one thread per (b, d, 4 states), which loads its inputs as
// the refill does (refill_kernels.cuh: a ring of register batches in the storage type).
//
// The forward's state pass: the state before each piece, from h0 by the forward's
// recurrence. It is the refill's walk (refill_kernels.cuh), run from h0 over the chunks
// before the last piece, writing only at the pieces' edges.
//
// Both passes replaced 16-lane versions (one state a lane, each step's transform passed by
// shuffle), which issued 17.2 (carry) and 14.6 (state) instructions an element against the
// ~4 of their arithmetic (docs/performance-notes.md, "fifteenth session").
#pragma once

#include "kernels/scan/refill_kernels.cuh"

namespace mc::kern::scan_detail {

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
  bool vec_state;               // ds % 4 == 0: dh_final and the carries as float4
};

// ---- the backward's carry pass ------------------------------------------------------------
// One thread per (b, d, 4 consecutive states), as the refill (refill_kernels.cuh), whose
// loading scheme it shares: each thread reads δ (or Δraw), dy (and z) of its channel and 4
// values of the C row per step itself (the lanes of a channel and the channels of a warp
// share them through the cache), through a ring of kRefillBatches batches of registers in
// the storage type, each loaded kRefillBatches - 1 batches before it is walked and converted
// only there. The steps' transforms are evaluated by each of a channel's threads.

// One batch of a chunk's inputs of one thread, in the storage type, in walk order (the
// chunk's steps from the last): δ (or Δraw), dy, z (with the gate), 4 C values a step.
template <class T, int N>
struct CarryBatch {
  T x[N], g[N], zv[N];
  Quad<T> c[N];
};

// The walk of one thread over chunks n_ckpt-1 down to piece_chunks, from (dh, dAn) at T,
// writing them after each piece's first chunk. BIAS (Δ's softplus) and VC (C by 4-element
// vector loads) are compile-time; the gate is a run-time branch of the transform (uniform).
// The first walked chunk (the last one, which may end past T) and the last walked one are
// peeled off the loop, so that the loop's loads and steps test nothing.
template <class T, scan::ExpMath E, int K, bool BIAS, bool VC>
__device__ __forceinline__ void carry_walk(const CkptPieceCarryArgs<T>& p, int64_t b, int64_t d,
                                           int n0, int nvalid, const float (&a)[4],
                                           float (&dh)[4], float (&dAn)[4], float* out) {
  const float bias = BIAS ? __ldg(p.delta_bias + d) : 0.f;
  const bool gate = p.z != nullptr;
  const int64_t plane = p.B * p.di * p.ds;
  const int64_t last = p.n_ckpt - 1, pc = p.piece_chunks;
  const int last_nk = int(p.T - last * K);  // steps of the last chunk before T
  const int64_t r0 = b * p.T + last * K;    // its first row
  const T* dp = p.delta + r0 * p.ld_delta + d;
  const T* gp = p.dy + r0 * p.ld_dy + d;
  const T* zp = gate ? p.z + r0 * p.ld_z + d : p.dy + r0 * p.ld_dy + d;  // unread without gate
  const int64_t ld_z = gate ? p.ld_z : p.ld_dy;
  const T* cp = p.Cm + r0 * p.ld_C + n0;
  constexpr int NB = kRefillBatches, KB = K / NB;
  static_assert(K % NB == 0, "the batches divide the chunk");
  // walk-order batch j (steps K-1-j·KB down to K-KB-j·KB) of the chunk the row pointers are
  // at, minus `back` chunks; of a chunk with nk < K steps before T, the rows past T read its
  // first row (a valid address; the walk zeroes what they give)
  auto load = [&](CarryBatch<T, KB>& r, int j, int back, int nk) {
#pragma unroll
    for (int i = 0; i < KB; ++i) {
      const int k = K - 1 - (j * KB + i);
      const int64_t row = int64_t(k < nk ? k : 0) - int64_t(back) * K;
      r.x[i] = __ldg(dp + row * p.ld_delta);
      r.g[i] = __ldg(gp + row * p.ld_dy);
      if (gate) r.zv[i] = __ldg(zp + row * ld_z);
      r.c[i] = load_quad(cp + row * p.ld_C, VC, nvalid);
    }
  };
  // the backward kernels' transform and adjoint step (ckpt_kernels.cuh, the walk): steps
  // past T have δ = dy = C = 0, so dA = 1 and (dh, dAn) pass through them unchanged
  auto walk = [&](const CarryBatch<T, KB>& r, int j, int nk) {
#pragma unroll
    for (int i = 0; i < KB; ++i) {
      const bool in = K - 1 - (j * KB + i) < nk;
      const float x = as_f32(r.x[i]);
      const float dl = in ? (BIAS ? act_softplus(x + bias) : x) : 0.f;
      float dyv = in ? as_f32(r.g[i]) : 0.f;
      if (gate) dyv = dyv * act_silu(in ? as_f32(r.zv[i]) : 0.f);
      const float cv[4] = {in ? quad_f32<0>(r.c[i]) : 0.f, in ? quad_f32<1>(r.c[i]) : 0.f,
                           in ? quad_f32<2>(r.c[i]) : 0.f, in ? quad_f32<3>(r.c[i]) : 0.f};
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const float dA = expm<E>(dl * a[s]);
        dh[s] = fmaf(dAn[s], dh[s], dyv * cv[s]);
        dAn[s] = dA;
      }
    }
  };
  // after chunk c: the carries entering piece c / pc - 1 where c is a piece's first chunk
  int64_t to_edge = last % pc;
  auto edge = [&](int64_t c) {
    if (to_edge == 0) {
      float* o = out + 2 * (c / pc - 1) * plane;
      store_states<4>(o, p.vec_state, nvalid, dh);
      store_states<4>(o + plane, p.vec_state, nvalid, dAn);
      to_edge = pc;
    }
    --to_edge;
  };
  auto step_back = [&] {
    dp -= K * p.ld_delta;
    gp -= K * p.ld_dy;
    zp -= K * ld_z;
    cp -= K * p.ld_C;
  };
  // one chunk from the ring; `next`: the following walked chunk's first batches load beside it
  auto chunk = [&](CarryBatch<T, KB>(&ring)[NB], int nk, bool next) {
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int jl = j + NB - 1;  // the batch loaded now: this chunk's last, or the next's
      if (jl < NB) load(ring[jl], jl, 0, nk);
      else if (next) load(ring[jl - NB], jl - NB, 1, K);
      walk(ring[j], j, nk);
    }
  };
  CarryBatch<T, KB> ring[NB];
#pragma unroll
  for (int j = 0; j < NB - 1; ++j) load(ring[j], j, 0, last_nk);
  const bool more = last > pc;  // more than one chunk to walk
  if (more) chunk(ring, last_nk, true);
  else chunk(ring, last_nk, false);
  edge(last);
  if (!more) return;
  step_back();
  int64_t c = last - 1;
  for (; c > pc; --c) {  // every chunk whose next walked chunk exists: whole, before T
    chunk(ring, K, true);
    edge(c);
    step_back();
  }
  chunk(ring, K, false);  // c == pc, the last walked
  edge(c);
}

// grid: B · refill_blocks_per_sample(di, ds) blocks of kRefillThreads threads (one thread per
// (b, d, 4 states)); K = the plan's steps per chunk. Walks chunks n_ckpt-1 down to
// piece_chunks; after chunk c = p·piece_chunks (p >= 1) it writes
// carry[p - 1] = (dh, dAn) [B, di, ds]. One kernel per variant of the walk (BIAS: Δraw with
// its softplus; VC: C by 4-element vectors, which the launcher checked): with the variants as
// branches of one kernel ptxas gave every thread the registers of the largest (255 and 140
// bytes of spill in bf16; one variant alone: 142-184 registers, no spill).
template <class T, scan::ExpMath E, int K, bool BIAS, bool VC>
__global__ void __launch_bounds__(kRefillThreads) ckpt_piece_carry_kernel(CkptPieceCarryArgs<T> p) {
  const StateQuad q = state_quad(p.di, p.ds);
  if (q.d >= p.di) return;
  const int64_t state_off = (q.b * p.di + q.d) * p.ds + q.n0;
  float a[4], dh[4] = {0.f, 0.f, 0.f, 0.f}, dAn[4] = {1.f, 1.f, 1.f, 1.f};  // dA_T := 1
  state_coefs<E>(p.a_neg, q, p.ds, p.vec_state, a);
  if (p.dh_final) load_states<4>(p.dh_final + state_off, p.vec_state, q.nvalid, dh);
  // VC holds for a thread with 4 states; one with fewer (d_state % 4 != 0 makes vec_c false
  // for all) never runs a VC instance
  carry_walk<T, E, K, BIAS, VC>(p, q.b, q.d, q.n0, q.nvalid, a, dh, dAn, p.carry + state_off);
}

// ---- the forward's pieces --------------------------------------------------------------
// The forward walk of a piece needs the state h before its first chunk. This pass runs the
// state recurrence alone, forward from h0, with the forward kernels' arithmetic:
//   dA_t = exp(δ_t·A),  h_t = fma(dA_t, h_{t-1}, (δ_t·u_t)·B_t)
// (δ = softplus(Δraw + bias) or Δ; 0 past T), and writes h before chunk p·piece_chunks
// (p >= 1) into that chunk's saved checkpoint, where the piece's walk reads it and which
// it would have written there anyway: y, the checkpoints and h_final keep the bits of one
// walk (the refill repeats the forward's arithmetic, op for op).
template <class V>  // V: the storage type
struct CkptPieceStateArgs : StatePassHead<V> {
  const V* u;                   // [B*T, ld_u]
  int64_t ld_u;
  const V* Bm;                  // [B*T, ld_B]
  int64_t ld_B;
  const float* a_neg;           // [di, ds]
  const float* h0;              // [B, di, ds] or null
  int64_t n_ckpt, piece_chunks;
  float* ckpt;                  // [B, n_ckpt, di, ds]: the forward's checkpoints (G = 1)
  int64_t c_lo, c_hi;           // the walk: chunks c_lo = 0 .. c_hi - 2, c_hi - 1 = the last
                                // piece's first chunk (refill_walk's fields)
  bool vec_b;                   // B rows as 4-element vectors (alignment checked)
  bool vec_state;               // ds % 4 == 0: h0 and the states as float4
};

// grid: B · refill_blocks_per_sample(di, ds) blocks of kRefillThreads threads (one thread per
// (b, d, 4 states), as the refill); K = the plan's steps per chunk. Walks chunks 0 up to
// (pieces - 1)·piece_chunks - 1 (all whole: the last piece holds the chunk past T) with the
// refill's walk (refill_kernels.cuh), from h0; before chunk c = p·piece_chunks (p >= 1) it
// writes ckpt[b, c, d, :] = h.
template <class T, scan::ExpMath E, int K>
__global__ void __launch_bounds__(kRefillThreads) ckpt_piece_state_kernel(CkptPieceStateArgs<T> p) {
  const StateQuad q = state_quad(p.di, p.ds);
  if (q.d >= p.di) return;
  float a[4], h[4] = {0.f, 0.f, 0.f, 0.f};
  state_coefs<E>(p.a_neg, q, p.ds, p.vec_state, a);
  if (p.h0) load_states<4>(p.h0 + (q.b * p.di + q.d) * p.ds + q.n0, p.vec_state, q.nvalid, h);
  // the refill's walk over chunks c_lo = 0 .. c_hi - 2, writing at the pieces' edges only
  float* out = p.ckpt + ((q.b * p.n_ckpt) * p.di + q.d) * p.ds + q.n0;  // slot 0 of this row
  refill_walk_variant<T, E, K, true>(p, q.b, q.d, q.n0, q.nvalid, a, h, out, p.piece_chunks);
}

}  // namespace mc::kern::scan_detail
