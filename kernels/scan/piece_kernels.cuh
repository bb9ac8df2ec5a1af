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
// The pass needs no state h and no sums across states: 16 lanes per (b, d), one state each
// (d_state <= 16, the only plans with pieces). The per-step transform (softplus, gate) is
// the same for every state of a channel, so each lane of the 16 computes it for one step of
// the chunk and the walk takes it by shuffle; each lane loads its own column of C. The
// next chunk's inputs are loaded while the current one is walked. Only one FMA a step is on
// the dh chain.
#pragma once

#include "kernels/scan/refill_kernels.cuh"

namespace mc::kern::scan_detail {

// Lanes per (b, d): one state each, and one step of a chunk each for the transform.
constexpr int kCarryLanes = 16;
constexpr int kCarryThreads = 128;

// Blocks per sample: di · kCarryLanes threads in blocks of kCarryThreads.
__host__ __device__ inline int64_t carry_blocks_per_sample(int64_t di) {
  return (di * kCarryLanes + kCarryThreads - 1) / kCarryThreads;
}

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
};

// A thread of a 16-lane pass (grid B · carry_blocks_per_sample(di) blocks of kCarryThreads):
// sample b, channel d, lane = the state n and the step of the chunk whose transform it
// computes, with its state's coefficient and its channel's Δ bias. Lanes past di read
// d_inner-1's inputs and write nothing (every lane of a warp takes part in its shuffles);
// lanes past d_state load column 0 and hold no state.
struct CarryThread {
  int64_t b, d;
  int lane;
  int src0;    // the first lane of this (b, d) in the warp
  int col;     // the B or C column this lane loads
  bool live;   // the lane holds state (b, d, lane)
  float a;     // exp_coef(A[d, lane]) (0 without state)
  float bias;  // delta_bias[d] (0 without)
};
template <scan::ExpMath E>
__device__ __forceinline__ CarryThread carry_thread(int64_t di, int64_t ds, const float* a_neg,
                                                    const float* delta_bias) {
  CarryThread t;
  const int64_t nb = carry_blocks_per_sample(di);
  t.b = int64_t(blockIdx.x) / nb;
  const int64_t local = (int64_t(blockIdx.x) - t.b * nb) * kCarryThreads + int64_t(threadIdx.x);
  t.lane = int(local % kCarryLanes);
  t.src0 = int(threadIdx.x % 32) - t.lane;
  const bool live_d = local / kCarryLanes < di;
  t.d = live_d ? local / kCarryLanes : di - 1;
  t.live = live_d && t.lane < ds;
  t.col = t.live ? t.lane : 0;
  t.a = t.live ? exp_coef<E>(__ldg(a_neg + t.d * ds + t.lane)) : 0.f;
  t.bias = delta_bias ? __ldg(delta_bias + t.d) : 0.f;
  return t;
}

// The row of a chunk starting at r0 that a lane loads for step k: rows at or past nk (past T)
// read r0, and the walk zeroes what they give.
__device__ __forceinline__ int64_t chunk_row(int64_t r0, int nk, int k) {
  return r0 + (k < nk ? k : 0);
}

// Column `col` of the chunk's K rows of m [rows, ld], in the storage type.
template <class T, int K>
__device__ __forceinline__ void load_chunk_column(const T* m, int64_t ld, int64_t r0, int nk,
                                                  int col, T (&out)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) out[k] = __ldg(m + chunk_row(r0, nk, k) * ld + col);
}

// The 16-lane passes keep a chunk's loads in the storage type until the chunk is walked, in
// two buffers that alternate (ping-pong): the loads of chunk c±1 stay in flight during chunk
// c's walk. Converting on load, or copying the next buffer into the current one, made every
// chunk wait for its loads (measured: the bf16 state pass at 226 us on an H200, B 2, about
// 4700 cycles a chunk; see docs/performance-notes.md). Every load reads a valid address:
// rows past T and lanes past d_state read row / column 0 of the chunk, and the walk zeroes
// them, so the arithmetic is that of zero inputs there.

// The chunks c = first, first + dir, ... (n of them, n >= 1) through two buffers of type
// Chunk: chunk i + 1's loads go into the other buffer before chunk i is walked.
// load(c, buffer) issues chunk c's loads; walk(c, buffer) walks chunk c from them.
template <class Chunk, class Load, class Walk>
__device__ __forceinline__ void walk_chunks_ping_pong(int64_t first, int64_t n, int dir,
                                                      const Load& load, const Walk& walk) {
  Chunk a, b;
  load(first, a);
  for (int64_t i = 0;;) {
    if (i + 1 < n) load(first + dir * (i + 1), b);
    walk(first + dir * i, a);
    if (++i >= n) return;
    if (i + 1 < n) load(first + dir * (i + 1), a);
    walk(first + dir * i, b);
    if (++i >= n) return;
  }
}

// One chunk's inputs as one lane holds them: the transform inputs of step `lane` of the
// chunk (δ or Δraw, dy, z) and its own state's C column for all K steps.
template <class T, int K>
struct CarryChunk {
  T x, g, zv;
  T cv[K];
};

template <class T, int K>
__device__ __forceinline__ void load_carry_chunk(const CkptPieceCarryArgs<T>& p, int64_t r0,
                                                 int nk, int64_t d, int lane, int col,
                                                 CarryChunk<T, K>& in) {
  const int64_t r = chunk_row(r0, nk, lane);
  in.x = __ldg(p.delta + r * p.ld_delta + d);
  in.g = __ldg(p.dy + r * p.ld_dy + d);
  if (p.z) in.zv = __ldg(p.z + r * p.ld_z + d);
  load_chunk_column<T, K>(p.Cm, p.ld_C, r0, nk, col, in.cv);
}

//   δ [B*T, ld] V, C, z, dy [B*T, ld] V, a_neg [di, ds], dh_final [B, di, ds]
//   -> carry [n_pieces - 1][2][B, di, ds] f32.
// grid: B · carry_blocks_per_sample(di) blocks of kCarryThreads threads, kCarryLanes per
// (b, d); K = the plan's steps per chunk; d_state <= kCarryLanes. Walks chunks n_ckpt-1
// down to piece_chunks; after chunk c = p·piece_chunks (p >= 1) it writes
// carry[p - 1] = (dh, dAn) [B, di, ds].
template <class T, scan::ExpMath E, int K>
__global__ void __launch_bounds__(kCarryThreads) ckpt_piece_carry_kernel(CkptPieceCarryArgs<T> p) {
  static_assert(K <= kCarryLanes, "a lane computes the transform of one step of a chunk");
  const CarryThread th = carry_thread<E>(p.di, p.ds, p.a_neg, p.delta_bias);
  const int64_t b = th.b, d = th.d;
  const int lane = th.lane, src0 = th.src0, col = th.col;
  const bool live = th.live;
  const float a = th.a, bias = th.bias;

  const int64_t state_off = (b * p.di + d) * p.ds + lane;
  float dh = live && p.dh_final ? __ldg(p.dh_final + state_off) : 0.f;
  float dAn = 1.f;
  const int64_t plane = p.B * p.di * p.ds;
  const int64_t last = p.n_ckpt - 1;  // the walk's first chunk (it may end past T)
  const int last_nk = int(p.T - last * K);
  auto rows = [&](int64_t c) { return b * p.T + c * K; };
  auto steps = [&](int64_t c) { return c == last ? last_nk : K; };
  int to_edge = int(last % p.piece_chunks);  // chunks left before a piece's first chunk

  // Walk chunk c from `in`: steps past T have δ = dy = C = 0.
  auto walk = [&](int64_t c, const CarryChunk<T, K>& in) {
    const int nk = steps(c);
    // the backward kernels' transform of step `lane`: δ (0 past T), dy with the gate folded in
    const float x = as_f32(in.x), g = lane < nk ? as_f32(in.g) : 0.f;
    const float zv = p.z && lane < nk ? as_f32(in.zv) : 0.f;
    const float dl_own = lane < nk ? (p.delta_bias ? act_softplus(x + bias) : x) : 0.f;
    const float dy_own = p.z ? g * act_silu(zv) : g;
#pragma unroll
    for (int k = K - 1; k >= 0; --k) {  // the walk's adjoint step
      const float dl = shfl_idx(dl_own, src0 + k);
      const float dyv = shfl_idx(dy_own, src0 + k);
      const float cv = live && k < nk ? as_f32(in.cv[k]) : 0.f;
      const float dA = expm<E>(dl * a);
      dh = fmaf(dAn, dh, dyv * cv);
      dAn = dA;
    }
    if (to_edge == 0) {  // c = (piece + 1)·piece_chunks: the state entering piece `piece`
      if (live) {
        float* out = p.carry + 2 * (c / p.piece_chunks - 1) * plane + state_off;
        out[0] = dh;
        out[plane] = dAn;
      }
      to_edge = int(p.piece_chunks);
    }
    --to_edge;
  };

  // chunks last down to piece_chunks
  walk_chunks_ping_pong<CarryChunk<T, K>>(
      last, last - p.piece_chunks + 1, -1,
      [&](int64_t c, CarryChunk<T, K>& in) {
        load_carry_chunk<T, K>(p, rows(c), steps(c), d, lane, col, in);
      },
      walk);
}

// ---- the forward's pieces --------------------------------------------------------------
// The forward walk of a piece needs the state h before its first chunk. This pass runs the
// state recurrence alone, forward from h0, with the forward kernels' arithmetic:
//   dA_t = exp(δ_t·A),  h_t = fma(dA_t, h_{t-1}, (δ_t·u_t)·B_t)
// (δ = softplus(Δraw + bias) or Δ; 0 past T), and writes h before chunk p·piece_chunks
// (p >= 1) into that chunk's saved checkpoint, where the piece's walk reads it and which
// it would have written there anyway: y, the checkpoints and h_final keep the bits of one
// walk. The same 16-lane layout as the carry pass: lane j computes (δ, δ·u) of step j of
// the chunk, every lane walks its own state.
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
};

// One chunk's inputs as one lane holds them: Δ (or Δraw) and u of step `lane` of the chunk,
// and its own state's B column for all K steps (loaded as the carry pass loads).
template <class T, int K>
struct StateChunk {
  T x, uv;
  T bv[K];
};

template <class T, int K>
__device__ __forceinline__ void load_state_chunk(const CkptPieceStateArgs<T>& p, int64_t r0,
                                                 int nk, int64_t d, int lane, int col,
                                                 StateChunk<T, K>& in) {
  const int64_t r = chunk_row(r0, nk, lane);
  in.x = __ldg(p.delta + r * p.ld_delta + d);
  in.uv = __ldg(p.u + r * p.ld_u + d);
  load_chunk_column<T, K>(p.Bm, p.ld_B, r0, nk, col, in.bv);
}

//   δ, u [B*T, ld] V, B [B*T, ld_B] V, a_neg [di, ds], h0 [B, di, ds]
//   -> ckpt [B, n_ckpt, di, ds] f32 (the chunks that start a piece only).
// grid: B · carry_blocks_per_sample(di) blocks of kCarryThreads threads, kCarryLanes per
// (b, d); K = the plan's steps per chunk; d_state <= kCarryLanes. Walks chunks 0 up to
// (pieces - 1)·piece_chunks - 1 (all whole: the last piece holds the chunk past T); before
// chunk c = p·piece_chunks (p >= 1) it writes ckpt[b, c, d, :] = h.
template <class T, scan::ExpMath E, int K>
__global__ void __launch_bounds__(kCarryThreads) ckpt_piece_state_kernel(CkptPieceStateArgs<T> p) {
  static_assert(K <= kCarryLanes, "a lane computes the transform of one step of a chunk");
  const CarryThread th = carry_thread<E>(p.di, p.ds, p.a_neg, p.delta_bias);
  const int64_t b = th.b, d = th.d;
  const int lane = th.lane, src0 = th.src0, col = th.col;
  const bool live = th.live;
  const float a = th.a, bias = th.bias;

  float h = live && p.h0 ? __ldg(p.h0 + (b * p.di + d) * p.ds + lane) : 0.f;
  const int64_t n_pieces = (p.n_ckpt + p.piece_chunks - 1) / p.piece_chunks;
  const int64_t c_end = (n_pieces - 1) * p.piece_chunks;  // the last piece's first chunk
  // ckpt[b, c, d, lane]
  float* row = p.ckpt + ((b * p.n_ckpt) * p.di + d) * p.ds + lane;
  const int64_t chunk_step = p.di * p.ds;
  auto rows = [&](int64_t c) { return b * p.T + c * K; };
  int to_edge = int(p.piece_chunks) - 1;  // chunks left before the next piece

  // Walk chunk c (whole: c < c_end <= n_ckpt - 1) from `in`.
  auto walk = [&](int64_t c, const StateChunk<T, K>& in) {
    // the forward kernels' per-step scalars of step `lane`: δ and δ·u (lanes past K: 0)
    const float x = as_f32(in.x), uv = lane < K ? as_f32(in.uv) : 0.f;
    const float dl_own = lane < K ? (p.delta_bias ? act_softplus(x + bias) : x) : 0.f;
    const float du_own = dl_own * uv;
#pragma unroll
    for (int k = 0; k < K; ++k) {  // the forward's step
      const float dl = shfl_idx(dl_own, src0 + k);
      const float du = shfl_idx(du_own, src0 + k);
      const float bv = live ? as_f32(in.bv[k]) : 0.f;
      const float dA = expm<E>(dl * a);
      h = fmaf(dA, h, du * bv);
    }
    if (to_edge == 0) {  // the state before chunk c + 1, a piece's first
      if (live) row[(c + 1) * chunk_step] = h;
      to_edge = int(p.piece_chunks);
    }
    --to_edge;
  };

  // chunks 0 up to c_end - 1
  walk_chunks_ping_pong<StateChunk<T, K>>(
      0, c_end, 1,
      [&](int64_t c, StateChunk<T, K>& in) {
        load_state_chunk<T, K>(p, rows(c), K, d, lane, col, in);
      },
      walk);
}

}  // namespace mc::kern::scan_detail
