// scan/tile_kernels.cuh — the checkpointed scan's plan for d_state <= 16 (Mamba's
// d_state): forward and backward kernels in which each thread owns a tile of DT
// channels x 4 states, templated on the storage type T, DT and the exponential E.
// Launchers in dispatch.cuh; the plan (DT per shape) in host.cu (ckpt_plan).
//
// Why tiles. Per element (b, t, d, n) the forward needs ~5 issue slots and the
// backward ~16; everything else is per (t, d) (the activations, the outputs) or
// per (t, n) (B, C rows, the dB/dC sums over d). A thread that owns one channel
// and 4 states pays the per-(t, d) work for 4 elements and reduces 2 values per
// element over the warp's channels. A thread that owns DT channels x 4 states
// pays the per-(t, d) loads once per DT channels, sums dB/dC over its DT channels
// in registers (then over 8 lane groups: 8 values a lane), and sums y (forward)
// and dδ/du's S1, S2 (backward) over its 4 states in registers (then over the
// group's 4 lanes: 2·4 values a lane): fewer instructions per element, but 4·DT
// times fewer warps than elements/4, and shared memory holds one block of 4 warps
// per SM. Measured on the H200 (docs/performance-notes.md, "2026-12-04"): where
// that leaves one warp per scheduler it issues at ~0.3 instructions a cycle
// (latency it cannot hide) and loses to the one-channel plan (B 8, d_inner 1536);
// where the one-channel plan needs more waves of blocks than this plan it wins
// the backward (d_inner 2048: 1.37–1.39x, 4096: 1.10x), and where both need two
// waves it loses (B 16, d_inner 1536 on the H100: 1.27x); the plan (host.cu)
// weighs the waves.
//
// Thread layout. A block is kTileWarps warps; lane l of warp w is group
// grp = l / 4, lane j = l % 4 of its group. The group owns the DT consecutive
// channels col0 .. col0 + DT - 1 of the block (col0 = (w·8 + grp)·DT; the block
// serves CB = 32·DT channels d0 .. d0 + CB - 1 of one sample b); lane j holds the
// states n = 4j .. 4j + 3 of each of them (states >= d_state are masked: A = B =
// C = 0, so they stay 0 and add nothing). After a lane-group reduction lane j
// owns "output slot" j of the group (channel col0 + j; with DT = 2, slot j / 2
// on the even lanes), which stores that channel's per-(t, d) outputs.
//
// Per-(t, d) scalars. Each warp transforms the activation tiles of its own 8·DT
// channels into f32 rows of 32 slots (slot grp·4 + i for channel i of group grp),
// so a group reads its DT scalars of a step with one vector load and the softplus,
// gate and skip are evaluated once per (t, d). Each warp also keeps an f32 copy of
// the B/C rows. Both are warp-local: a __syncwarp publishes them.
//
// Forward, per step: dA = exp(δ·A); h = dA·h + (δ·u)·B; y = Σ_n h·C (in-thread
// over 4 states, then over the group's 4 lanes), then + D·u, then · silu(z); the
// output lane stores y straight to device memory. The state before every K-th
// step is stored as a checkpoint [B, n_ckpt, di, ds] (K = kTileChunk, the same
// layout and stride as the 4-states plan of ckpt_kernels.cuh); the final state
// to h_final. Stages of kTileFwdStage steps are double-buffered with cp.async.
//
// Backward, chunks from last to first: reload the checkpoint, recompute the
// chunk's K states into shared memory (hs, each thread its own), walk back with
// the carry gc = dA_{t+1}·dh_{t+1} (dh_final at T):
//   dh   = gc + dy·C,  P = dA·h_{t-1} (dA recomputed),  dal += δ·dh·P,  gc = dA·dh
//   S1  += dh·B, S2 += A·dh·P (in-thread over 4 states, then over the 4 lanes)
//        -> dδ = u·S1 + S2, du = δ·S1 + D·dy (by the output lane)
//   dB[t, n] = Σ_d (δ·u)·dh, dC[t, n] = Σ_d dy·h_t: in-thread over DT channels,
//        a reduce-scatter over the warp's 8 groups (every lane one (q, n) sum),
//        over the block's warps every kTileQ steps (one barrier, warps ascending),
//        over the channel blocks by ckpt_reduce (the partials of ckpt_kernels.cuh).
// The raw activation tiles are single-buffered: chunk c-1 is staged after every
// warp has transformed chunk c (a second barrier per chunk), which leaves room
// for hs. Segments (long sequences) hand gc, dal and dD on through the carry
// buffer of ckpt_kernels.cuh (planes 0, 2 and 3; plane 1 unused). No atomics; every sum has a fixed order.
#pragma once

#include "kernels/scan/ckpt_kernels.cuh"

namespace mc::kern::scan_detail {

constexpr int kTileWarps = 4;
constexpr int kTileThreads = 32 * kTileWarps;
constexpr int kTileLanes = 4;                            // lanes of a channel group
constexpr int kTileMaxDState = kTileLanes * 4;           // 4 states a lane
constexpr int kTileChunk = 16;                           // checkpoint stride K
constexpr int kTileFwdStage = 32;                        // forward steps per pipeline stage
constexpr int kTileQ = 8;                                // backward steps per dB/dC batch
// Walked steps whose dB/dC sums wait in registers, and recomputed steps whose states
// do (a shared-memory store inside an unrolled run of steps would order every later
// load after it): fewer at 4 channels a thread, where the registers run out first.
// (Measured with ptxas -v at 255 registers a thread: no spill for any instance.)
__host__ __device__ constexpr int tile_qd(int dt) { return dt >= 3 ? 2 : 4; }
__host__ __device__ constexpr int tile_rg(int dt) { return dt >= 3 ? 2 : 4; }
constexpr int kTileSlots = 32;                           // a warp's per-step scalar row
static_assert(kTileChunk == 16, "the tile plan shares the 4-states plan's checkpoint stride");
static_assert(kTileChunk % kTileQ == 0, "batches divide the chunk");
static_assert(kTileFwdStage % kTileChunk == 0, "a stage is whole checkpoint chunks");

// Channels per block and channel slots per group (DT padded to a power of two).
__host__ __device__ constexpr int tile_cb(int dt) { return kTileWarps * 8 * dt; }
__host__ __device__ constexpr int tile_p2(int dt) { return dt <= 2 ? 2 : 4; }

struct TileGeom {
  int64_t nblk_d = 0;  // channel blocks per sample = ceil(di / CB)
  int64_t n_ckpt = 0;  // ceil(T / K)
  bool async_bc = false;   // B/C rows by 16-byte cp.async
  bool async_act = false;  // the activation rows of a block's channels by 16-byte cp.async
  bool vec_state = false;  // ds % 4 == 0: states, checkpoints as float4
};

// Shared memory layout (byte offsets, every region 16-byte aligned):
//   raw  [nbuf][n_act][KS][CB] T     staged activation rows (forward: δ u [z], 2 buffers;
//                                    backward: δ u dy [z], 1 buffer)
//   bc   [nbuf][2][KS][16] T         staged B and C rows (columns >= ds zero)
//   sc   [W][n_sc][KS][32] f32       each warp's per-(t, d) scalars, slot grp·4 + i
//   bcf  [W][2][KS][16] f32          each warp's f32 copy of the B and C rows
// backward only:
//   hs   [K][DT][kTileThreads] float4  the chunk's states: slot k = the state before step k
//   wsum [2][W][Q][32] f32           each warp's dB (0..15) and dC (16..31) sums of a batch
struct TileSmem {
  size_t raw, bc, sc, bcf, hs, wsum, total;
};
__host__ __device__ inline TileSmem tile_smem(int dt, size_t elem, int n_act, int n_sc,
                                              bool backward) {
  const int ks = backward ? kTileChunk : kTileFwdStage;
  const size_t nbuf = backward ? 1 : 2;
  TileSmem m;
  m.raw = 0;
  m.bc = m.raw + nbuf * size_t(n_act) * smem_region(size_t(ks) * tile_cb(dt), elem);
  m.sc = m.bc + nbuf * 2 * smem_region(size_t(ks) * 16, elem);
  m.bcf = m.sc + size_t(kTileWarps) * n_sc * smem_region(size_t(ks) * kTileSlots, 4);
  m.hs = m.bcf + size_t(kTileWarps) * 2 * smem_region(size_t(ks) * 16, 4);
  m.wsum = m.hs + (backward ? size_t(kTileChunk) * dt * kTileThreads * 16 : 0);
  m.total = m.wsum + (backward ? size_t(2) * kTileWarps * kTileQ * 32 * 4 : 0);
  return m;
}
// The tensors each direction stages and the scalars it keeps.
__host__ __device__ inline int tile_fwd_n_act(bool z) { return z ? 3 : 2; }  // δ u [z]
__host__ __device__ inline int tile_fwd_n_sc(bool z) { return z ? 4 : 3; }   // δ δu skip [gate]
__host__ __device__ inline int tile_bwd_n_act(bool z) { return z ? 4 : 3; }  // δ u dy [z]
__host__ __device__ inline int tile_bwd_n_sc(bool z, bool sp) { return 3 + z + sp; }  // δ u dy [fz] [fd]

// N steps' per-channel partials v[slot·N + step] summed over the group's 4 lanes: this
// lane's output slot (P2 = 4: slot j; P2 = 2: slot j / 2, the same on lanes j, j ^ 1) of
// every step in v[0 .. N). The steps' shuffles are independent of each other, so a run of
// N steps reduces with N-fold parallelism; each step is summed in the same order as alone.
template <int P2, int N>
__device__ __forceinline__ void group_slot_sums(float (&v)[P2 * N], int lane) {
  if constexpr (P2 == 4) {
    reduce_scatter_masks<4 * N, 2, 1>(v, lane);
  } else {
    reduce_scatter_masks<2 * N, 2, 2>(v, lane);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += shfl_xor(v[i], 1);
  }
}
// N steps' per-channel (S1, S2) pairs q[(slot·2 + pair)·N + step] summed over the group's
// 4 lanes: this lane's output slot's pairs in q[pair·N + step].
template <int P2, int N>
__device__ __forceinline__ void group_slot_pair_sums(float (&q)[2 * P2 * N], int lane) {
  if constexpr (P2 == 4) {
    reduce_scatter_masks<8 * N, 2, 1>(q, lane);
  } else {
    reduce_scatter_masks<4 * N, 2, 2>(q, lane);
#pragma unroll
    for (int i = 0; i < 2 * N; ++i) q[i] += shfl_xor(q[i], 1);
  }
}

// The per-warp transform's share of a lane: one fixed column wc of the warp's WC = 8·DT
// channels, rows r0, r0 + RS, ... (no division in the loop; with DT = 3 lanes 24..31 idle).
template <int DT>
struct TileCol {
  static constexpr int WC = 8 * DT, RS = WC >= 32 ? 1 : 32 / WC;
  bool active;
  int wc, r0, col, slot;  // col: the block column; slot: its place in a scalar row
  __device__ __forceinline__ TileCol(int lane, int w) {
    active = lane < WC * RS;
    wc = lane % WC;
    r0 = lane / WC;
    col = w * WC + wc;
    slot = (wc / DT) * 4 + wc % DT;
  }
};

// Which thread serves what (both tile kernels).
template <int DT>
struct TileMap {
  int tid, lane, w, grp, j, col0, oslot, n0, nvalid, cols_valid;
  int64_t b, dblk, d0;
  bool olane;  // this lane stores its output slot's per-(t, d) outputs
  int64_t dout;  // the output slot's channel (clamped to di - 1 when invalid)
  __device__ __forceinline__ int64_t d(int i) const { return d0 + col0 + i; }
  __device__ __forceinline__ bool valid(int i) const { return col0 + i < cols_valid; }
};
template <int DT>
__device__ __forceinline__ TileMap<DT> tile_map(const TileGeom& g, int64_t di, int64_t ds) {
  constexpr int P2 = tile_p2(DT), CB = tile_cb(DT);
  TileMap<DT> m;
  m.tid = int(threadIdx.x);
  m.lane = m.tid & 31;
  m.w = m.tid >> 5;
  m.grp = m.lane >> 2;
  m.j = m.lane & 3;
  m.b = int64_t(blockIdx.x) / g.nblk_d;
  m.dblk = int64_t(blockIdx.x) - m.b * g.nblk_d;
  m.d0 = m.dblk * CB;
  const int64_t left = di - m.d0;
  m.cols_valid = int(left < CB ? left : CB);
  m.col0 = (m.w * 8 + m.grp) * DT;
  m.oslot = P2 == 4 ? m.j : (m.j >> 1);
  m.olane = (P2 == 4 || (m.j & 1) == 0) && m.oslot < DT && m.col0 + m.oslot < m.cols_valid;
  const int64_t dout = m.d0 + m.col0 + m.oslot;
  m.dout = dout < di ? dout : di - 1;
  m.n0 = m.j * 4;
  const int64_t ln = ds - m.n0;
  m.nvalid = int(ln < 0 ? 0 : (ln > 4 ? 4 : ln));
  return m;
}

// DT consecutive f32 scalars of a group's slot row (16-byte aligned: slot grp·4).
template <int DT>
__device__ __forceinline__ void slot_vec(const float* p, float (&v)[DT]) {
  if constexpr (DT == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x;
    v[1] = x.y;
  } else {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    if constexpr (DT == 4) v[3] = x.w;
  }
}

// One step of the thread's DT x 4 recurrences, h = exp(δ·A)·h + (δu)·B (a = exp_coef(A)),
// then its y partials of the step, yv[slot·N + kk] = Σ_s h·C over its 4 states ascending
// (slots >= DT zero): the forward and the backward's recompute (for dz) share both, so the
// recomputed states and y have the forward's bits.
template <int DT, scan::ExpMath E>
__device__ __forceinline__ void advance_states(float (&h)[DT][4], const float (&a)[DT][4],
                                               const float (&dl)[DT], const float (&du)[DT],
                                               const float (&bv)[4]) {
#pragma unroll
  for (int i = 0; i < DT; ++i)
#pragma unroll
    for (int s = 0; s < 4; ++s) h[i][s] = fmaf(expm<E>(dl[i] * a[i][s]), h[i][s], du[i] * bv[s]);
}
template <int DT, int P2, int N>
__device__ __forceinline__ void y_partials(const float (&h)[DT][4], const float (&cv)[4],
                                           float (&yv)[P2 * N], int kk) {
#pragma unroll
  for (int i = 0; i < P2; ++i) yv[i * N + kk] = 0.f;
#pragma unroll
  for (int i = 0; i < DT; ++i)
#pragma unroll
    for (int s = 0; s < 4; ++s) yv[i * N + kk] = fmaf(h[i][s], cv[s], yv[i * N + kk]);
}

// The warp's f32 copy of the staged B and C rows [2][KS][16] (raw: the B tile, then the
// C tile right after it: both regions are whole 16-byte units).
template <class T, int KS>
__device__ __forceinline__ void copy_bc_rows(float* bcf, const T* raw, int lane) {
#pragma unroll 4
  for (int e = lane; e < 2 * KS * 16; e += 32) bcf[e] = smem_f32(raw[e]);
}

// ---- forward --------------------------------------------------------------------------
// grid B·nblk_d blocks of kTileThreads; dynamic smem tile_smem(DT, sizeof(T), .., false).
template <class T, int DT, scan::ExpMath E>
__global__ void __launch_bounds__(kTileThreads, 1) tile_fwd_kernel(CkptFwdArgs<T> p, TileGeom g) {
  constexpr int CB = tile_cb(DT), P2 = tile_p2(DT);
  constexpr int K = kTileChunk, KF = kTileFwdStage;
  // steps per unrolled body (ptxas: no spill at 255 registers with these)
  constexpr int FU = DT == 4 && E == scan::ExpMath::Accurate ? 2 : 4;
  extern __shared__ float smem[];
  const TileMap<DT> m = tile_map<DT>(g, p.di, p.ds);
  const bool has_z = p.z != nullptr;
  const int n_act = tile_fwd_n_act(has_z), n_sc = tile_fwd_n_sc(has_z);
  const TileSmem lay = tile_smem(DT, sizeof(T), n_act, n_sc, false);
  char* base = reinterpret_cast<char*>(smem);
  const size_t act_bytes = smem_region(size_t(KF) * CB, sizeof(T));
  const size_t bc_bytes = smem_region(size_t(KF) * 16, sizeof(T));
  const size_t sc_bytes = smem_region(size_t(KF) * kTileSlots, 4);
  auto raw = [&](int bf, int i) {
    return reinterpret_cast<T*>(base + lay.raw + (size_t(bf) * n_act + i) * act_bytes);
  };
  auto bct = [&](int bf, int i) { return reinterpret_cast<T*>(base + lay.bc + (2 * bf + i) * bc_bytes); };
  float* scw = reinterpret_cast<float*>(base + lay.sc + size_t(m.w) * n_sc * sc_bytes);
  float* sc_delta = scw;
  float* sc_du = scw + sc_bytes / 4;
  float* sc_skip = scw + 2 * sc_bytes / 4;
  float* sc_gate = scw + 3 * sc_bytes / 4;
  float* bcw = reinterpret_cast<float*>(base + lay.bcf + size_t(m.w) * 2 * KF * 16 * 4);

  float a[DT][4], h[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) {
    const int64_t d = m.valid(i) ? m.d(i) : p.di - 1;
    float A[4];
    load_vec<4>(p.a_neg + d * p.ds + m.n0, g.vec_state && m.nvalid == 4, m.nvalid, A);
#pragma unroll
    for (int s = 0; s < 4; ++s) a[i][s] = exp_coef<E>(A[s]);
    if (p.h0 && m.valid(i))
      load_states<4>(p.h0 + (m.b * p.di + d) * p.ds + m.n0, g.vec_state, m.nvalid, h[i]);
    else
#pragma unroll
      for (int s = 0; s < 4; ++s) h[i][s] = 0.f;
  }
  const int64_t row0 = m.b * p.T;
  const int64_t n_stage = (p.T + KF - 1) / KF;
  int64_t next_save = 0, save_slot = 0;  // the next chunk whose state is saved, and its slot
  zero_bc_padding<T>(bct(0, 0), KF, 16, p.ds);
  const UnitMap act_map = unit_map<T>(CB), bc_map = unit_map<T>(int(p.ds));

  auto stage = [&](int64_t c, int bf) {
    const int64_t r = row0 + c * KF;
    const int rv = int(min(int64_t(KF), p.T - c * KF));
    stage_tile<T>(raw(bf, 0), CB, p.delta + r * p.ld_delta + m.d0, p.ld_delta, KF, CB, rv,
                  m.cols_valid, g.async_act, act_map);
    stage_tile<T>(raw(bf, 1), CB, p.u + r * p.ld_u + m.d0, p.ld_u, KF, CB, rv, m.cols_valid,
                  g.async_act, act_map);
    if (has_z)
      stage_tile<T>(raw(bf, 2), CB, p.z + r * p.ld_z + m.d0, p.ld_z, KF, CB, rv, m.cols_valid,
                    g.async_act, act_map);
    stage_tile<T>(bct(bf, 0), 16, p.Bm + r * p.ld_B, p.ld_B, KF, int(p.ds), rv, int(p.ds),
                  g.async_bc, bc_map);
    stage_tile<T>(bct(bf, 1), 16, p.Cm + r * p.ld_C, p.ld_C, KF, int(p.ds), rv, int(p.ds),
                  g.async_bc, bc_map);
    cp_async_commit();
  };
  stage(0, 0);

  const int orow = m.grp * 4 + m.oslot;  // the output slot in a scalar row
  const TileCol<DT> tc(m.lane, m.w);
  const int64_t dcol = m.d0 + tc.col < p.di ? m.d0 + tc.col : p.di - 1;  // the lane's column
  const float Dcol = p.D ? __ldg(p.D + dcol) : 0.f;
  const float bcol = p.delta_bias ? __ldg(p.delta_bias + dcol) : 0.f;
  for (int64_t c = 0; c < n_stage; ++c) {
    const int bf = int(c & 1);
    const int64_t t0 = c * KF;
    const int nk = int(min(int64_t(KF), p.T - t0));
    cp_async_wait_all();
    __syncthreads();  // stage c's tiles are in buffer bf; every thread is done with stage c-1
    if (c + 1 < n_stage) stage(c + 1, bf ^ 1);  // copies overlap this stage's math
    // this warp's per-(t, d) scalars: its 8·DT channels, every step of the stage
    if (tc.active)
      for (int k = tc.r0; k < KF; k += tc.RS) {
        const float x = smem_f32(raw(bf, 0)[k * CB + tc.col]);
        const float dl = k < nk ? (p.delta_bias ? act_softplus(x + bcol) : x) : 0.f;
        const float uv = smem_f32(raw(bf, 1)[k * CB + tc.col]);
        const int e = k * kTileSlots + tc.slot;
        sc_delta[e] = dl;
        sc_du[e] = dl * uv;
        sc_skip[e] = p.D ? __fmul_rn(Dcol, uv) : 0.f;
        if (has_z) sc_gate[e] = act_silu(smem_f32(raw(bf, 2)[k * CB + tc.col]));
      }
    copy_bc_rows<T, KF>(bcw, bct(bf, 0), m.lane);
    __syncwarp();
    // Runs of FU steps: the states advance step by step, the FU steps' y are summed over
    // the group together, then the output lane stores them (a predicated store per step
    // through a pointer advanced by one row: no branch, no index arithmetic in the run).
    T* yrow = p.y + (row0 + t0) * p.ld_y + m.dout;
#pragma unroll 1
    for (int k0 = 0; k0 < KF; k0 += FU) {
      if (k0 % K == 0) {  // the state before step t0 + k0: chunk (t0 + k0) / K, saved
        const int64_t ci = (t0 + k0) / K;  // when it is a multiple of the group
        if (p.ckpt && ci == next_save && ci < g.n_ckpt) {
          if (m.nvalid > 0)
#pragma unroll
            for (int i = 0; i < DT; ++i)
              if (m.valid(i))
                store_states<4>(
                    p.ckpt + ((m.b * p.n_saved + save_slot) * p.di + m.d(i)) * p.ds + m.n0,
                    g.vec_state, m.nvalid, h[i]);
          next_save += p.ckpt_group;
          ++save_slot;
        }
      }
      float yv[P2 * FU];  // [slot][step]
#pragma unroll
      for (int kk = 0; kk < FU; ++kk) {  // branch-free: steps past T leave h unchanged
        const int k = k0 + kk;
        float dl[DT], du[DT], bv[4], cv[4];
        slot_vec<DT>(sc_delta + k * kTileSlots + m.grp * 4, dl);
        slot_vec<DT>(sc_du + k * kTileSlots + m.grp * 4, du);
        smem_vec<4>(bcw + k * 16 + m.n0, bv);
        smem_vec<4>(bcw + (KF + k) * 16 + m.n0, cv);
        advance_states<DT, E>(h, a, dl, du, bv);
        y_partials<DT, P2, FU>(h, cv, yv, kk);
      }
      group_slot_sums<P2, FU>(yv, m.lane);
#pragma unroll
      for (int kk = 0; kk < FU; ++kk) {
        const int k = k0 + kk;
        float y = yv[kk] + sc_skip[k * kTileSlots + orow];
        if (has_z) y *= sc_gate[k * kTileSlots + orow];
        if (m.olane && k < nk) store_rn(yrow, y);
        yrow += p.ld_y;
      }
    }
  }
  if (p.h_final && m.nvalid > 0)
#pragma unroll
    for (int i = 0; i < DT; ++i)
      if (m.valid(i))
        store_states<4>(p.h_final + (m.b * p.di + m.d(i)) * p.ds + m.n0, g.vec_state, m.nvalid,
                        h[i]);
}

// ---- backward -------------------------------------------------------------------------
// grid B·nblk_d blocks of kTileThreads; dynamic smem tile_smem(DT, sizeof(T), .., true).
template <class T, int DT, scan::ExpMath E>
__global__ void __launch_bounds__(kTileThreads, 1) tile_bwd_kernel(CkptBwdArgs<T> p, TileGeom g) {
  constexpr int CB = tile_cb(DT), P2 = tile_p2(DT), W = kTileWarps;
  constexpr int K = kTileChunk, Q = kTileQ, QD = tile_qd(DT), RG = tile_rg(DT);
  static_assert(Q % QD == 0 && K % RG == 0, "register runs divide the batch and the chunk");
  extern __shared__ float smem[];
  const TileMap<DT> m = tile_map<DT>(g, p.di, p.ds);
  const bool has_z = p.z != nullptr, has_sp = p.delta_bias != nullptr;
  const int n_act = tile_bwd_n_act(has_z), n_sc = tile_bwd_n_sc(has_z, has_sp);
  const TileSmem lay = tile_smem(DT, sizeof(T), n_act, n_sc, true);
  char* base = reinterpret_cast<char*>(smem);
  const size_t act_bytes = smem_region(size_t(K) * CB, sizeof(T));
  constexpr int SCN = K * kTileSlots;  // floats per scalar array
  auto raw = [&](int i) { return reinterpret_cast<T*>(base + lay.raw + size_t(i) * act_bytes); };
  T* bcr = reinterpret_cast<T*>(base + lay.bc);
  float* scw = reinterpret_cast<float*>(base + lay.sc) + size_t(m.w) * n_sc * SCN;
  float* sc_delta = scw;
  float* sc_u = scw + SCN;
  float* sc_dy = scw + 2 * SCN;
  float* sc_fz = scw + 3 * SCN;                  // with z
  float* sc_fd = scw + (3 + int(has_z)) * SCN;   // with the softplus
  float* bcw = reinterpret_cast<float*>(base + lay.bcf) + size_t(m.w) * 2 * K * 16;
  float4* hs4 = reinterpret_cast<float4*>(base + lay.hs);  // [K][DT][threads]
  float* wsum = reinterpret_cast<float*>(base + lay.wsum);

  // gc = dA_{t+1}·∂L/∂h_{t+1}: what the step after t hands back to h_t (the first step
  // walked gets dh_final, i.e. dA_T := 1); dal = Σ_t δ·dh·P per element.
  float a[DT][4], gc[DT][4], dal[DT][4];
  const int64_t carry_plane = p.B * p.di * p.ds;
  const bool first_seg = p.c_hi >= g.n_ckpt;  // the segment that ends at T: no carry in
#pragma unroll
  for (int i = 0; i < DT; ++i) {
    const bool ok = m.valid(i);
    const int64_t d = ok ? m.d(i) : p.di - 1;
    load_vec<4>(p.a_neg + d * p.ds + m.n0, g.vec_state && m.nvalid == 4, m.nvalid, a[i]);
    const int64_t so = (m.b * p.di + d) * p.ds + m.n0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      a[i][s] = exp_coef<E>(a[i][s]);
      gc[i][s] = 0.f;
      dal[i][s] = 0.f;
    }
    if (!first_seg) {  // the carry planes of this plan: gc (0) and dal (2)
      load_states<4>(p.carry + so, g.vec_state, m.nvalid, gc[i]);
      load_states<4>(p.carry + 2 * carry_plane + so, g.vec_state, m.nvalid, dal[i]);
    } else if (p.dh_final && ok) {
      load_states<4>(p.dh_final + so, g.vec_state, m.nvalid, gc[i]);
    }
  }
  float dD_acc = 0.f;
  if (!first_seg) dD_acc = p.carry[3 * carry_plane + m.b * p.di + m.dout];
  const float Dd = p.D ? __ldg(p.D + m.dout) : 0.f;
  const int64_t row0 = m.b * p.T;
  const int64_t t_lo = p.c_lo * K;                     // the segment's first step
  const int64_t part_row0 = m.b * p.seg_rows - t_lo;   // partial row of step t: part_row0 + t
  const int orow = m.grp * 4 + m.oslot;                // the output slot in a scalar row
  // the lane's dB/dC sum after the channel reduce-scatter: entry grp of (dB 0..3, dC 0..3)
  const int widx = (m.grp >> 2) * 16 + m.n0 + (m.grp & 3);
  int wb = 0;  // wsum buffer
  const TileCol<DT> tc(m.lane, m.w);
  const int64_t dcol = m.d0 + tc.col < p.di ? m.d0 + tc.col : p.di - 1;  // the lane's column
  const float bcol = has_sp ? __ldg(p.delta_bias + dcol) : 0.f;
  zero_bc_padding<T>(bcr, K, 16, p.ds, 2);
  const UnitMap act_map = unit_map<T>(CB), bc_map = unit_map<T>(int(p.ds));

  auto stage = [&](int64_t c) {
    const int64_t r = row0 + c * K;
    const int rv = int(min(int64_t(K), p.T - c * K));
    stage_tile<T>(raw(0), CB, p.delta + r * p.ld_delta + m.d0, p.ld_delta, K, CB, rv,
                  m.cols_valid, g.async_act, act_map);
    stage_tile<T>(raw(1), CB, p.u + r * p.ld_u + m.d0, p.ld_u, K, CB, rv, m.cols_valid,
                  g.async_act, act_map);
    stage_tile<T>(raw(2), CB, p.dy + r * p.ld_dy + m.d0, p.ld_dy, K, CB, rv, m.cols_valid,
                  g.async_act, act_map);
    if (has_z)
      stage_tile<T>(raw(3), CB, p.z + r * p.ld_z + m.d0, p.ld_z, K, CB, rv, m.cols_valid,
                    g.async_act, act_map);
    stage_tile<T>(bcr, 16, p.Bm + r * p.ld_B, p.ld_B, K, int(p.ds), rv, int(p.ds), g.async_bc,
                  bc_map);
    stage_tile<T>(bcr + K * 16, 16, p.Cm + r * p.ld_C, p.ld_C, K, int(p.ds), rv, int(p.ds),
                  g.async_bc, bc_map);
    cp_async_commit();
  };
  stage(p.c_hi - 1);

  for (int64_t c = p.c_hi - 1; c >= p.c_lo; --c) {
    const int64_t t0 = c * K;
    const int nk = int(min(int64_t(K), p.T - t0));
    float h[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i) {
      if (m.valid(i) && m.nvalid > 0)
        load_states<4>(
            p.ckpt + ((m.b * p.ckpt_slots + (c - p.ckpt_c0)) * p.di + m.d(i)) * p.ds + m.n0,
            g.vec_state, m.nvalid, h[i]);
      else
#pragma unroll
        for (int s = 0; s < 4; ++s) h[i][s] = 0.f;
    }
    cp_async_wait_all();
    __syncthreads();  // chunk c's tiles are staged; every thread is done with chunk c+1
    // this warp's per-(t, d) scalars: its 8·DT channels, every step of the chunk
    if (tc.active)
      for (int k = tc.r0; k < K; k += tc.RS) {
        const int es = k * kTileSlots + tc.slot;
        const float x = smem_f32(raw(0)[k * CB + tc.col]);
        float dl = 0.f, dyv = 0.f;
        if (k < nk) {
          dl = has_sp ? act_softplus(x + bcol) : x;
          dyv = smem_f32(raw(2)[k * CB + tc.col]);  // 0 on padding channels and rows
        }
        if (has_sp) sc_fd[es] = act_sigmoid(x + bcol);
        if (has_z) {
          const float zv = smem_f32(raw(3)[k * CB + tc.col]);
          sc_fz[es] = dyv * act_silu_grad(zv);  // dz = dG·y·silu'(z), y from the recompute
          dyv = dyv * act_silu(zv);             // ∂L/∂y = dG·silu(z)
        }
        sc_delta[es] = dl;
        sc_u[es] = smem_f32(raw(1)[k * CB + tc.col]);
        sc_dy[es] = dyv;
      }
    copy_bc_rows<T, K>(bcw, bcr, m.lane);
    __syncthreads();  // every warp has read the raw tiles: chunk c-1 may overwrite them
    if (c > p.c_lo) stage(c - 1);  // copies overlap this chunk's math

    // recompute the chunk's states into hs (and, with z, y for dz); branch-free. RG steps'
    // states stay in registers and are stored after the run's last step: a shared-memory
    // store inside the run would order the later steps' loads after it.
    {
      T* dzrow = has_z ? p.dz + (row0 + t0) * p.ld_dz + m.dout : nullptr;
#pragma unroll 1
      for (int k0 = 0; k0 < K; k0 += RG) {
        float hk[RG][DT][4], yv[P2 * RG];
#pragma unroll
        for (int r = 0; r < RG; ++r) {
          const int k = k0 + r;
          float dl[DT], uu[DT], bv[4];
          slot_vec<DT>(sc_delta + k * kTileSlots + m.grp * 4, dl);
          slot_vec<DT>(sc_u + k * kTileSlots + m.grp * 4, uu);
          smem_vec<4>(bcw + k * 16 + m.n0, bv);
          float du[DT];
#pragma unroll
          for (int i = 0; i < DT; ++i) {
            du[i] = dl[i] * uu[i];  // the forward's δu (its transform's product)
#pragma unroll
            for (int s = 0; s < 4; ++s) hk[r][i][s] = h[i][s];  // slot k: the state before step k
          }
          advance_states<DT, E>(h, a, dl, du, bv);
          if (has_z) {  // block-uniform: y of the step, as the forward sums it
            float cv[4];
            smem_vec<4>(bcw + (K + k) * 16 + m.n0, cv);
            y_partials<DT, P2, RG>(h, cv, yv, r);
          }
        }
        if (has_z) {  // dz = dG·silu'(z)·y of the output slot, y = Σ_n h·C + D·u
          group_slot_sums<P2, RG>(yv, m.lane);
#pragma unroll
          for (int r = 0; r < RG; ++r) {
            const int k = k0 + r;
            const float y = yv[r] + __fmul_rn(Dd, sc_u[k * kTileSlots + orow]);
            const float dzv = sc_fz[k * kTileSlots + orow] * y;
            if (m.olane && k < nk) store_rn(dzrow, dzv);
            dzrow += p.ld_dz;
          }
        }
        float4* hw = hs4 + size_t(k0) * DT * kTileThreads + m.tid;
#pragma unroll
        for (int r = 0; r < RG; ++r)
#pragma unroll
          for (int i = 0; i < DT; ++i)
            hw[(r * DT + i) * kTileThreads] =
                make_float4(hk[r][i][0], hk[r][i][1], hk[r][i][2], hk[r][i][3]);
      }
    }

    // walk the chunk backwards, Q steps per dB/dC batch; steps past T have dl = dy = 0:
    // dA = 1 and gc, dal, dD unchanged, no dB/dC terms. hcur = h_t of the step walked;
    // hp = h_{t-1} (hs slot k). Runs of QD steps: their dB/dC and S1/S2 partials are summed
    // over the warp's groups and the group's lanes together, then the output lane stores
    // dδ, du of each step through pointers moved back one row a step.
    float hcur[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i)
#pragma unroll
      for (int s = 0; s < 4; ++s) hcur[i][s] = h[i][s];
    T* ddrow = p.d_delta + (row0 + t0 + K - 1) * p.ld_dd + m.dout;
    T* durow = p.du + (row0 + t0 + K - 1) * p.ld_du + m.dout;
#pragma unroll 1
    for (int qb = K / Q - 1; qb >= 0; --qb) {
      float* ws = wsum + (size_t(wb) * W + m.w) * Q * 32;  // this warp's sums of this batch
#pragma unroll 1
      for (int kh = Q - QD; kh >= 0; kh -= QD) {
        float v[8 * QD], q[2 * P2 * QD];  // [entry][step], [slot][pair][step]
#pragma unroll
        for (int kk = QD - 1; kk >= 0; --kk) {
          const int k = qb * Q + kh + kk;
          float dl[DT], uu[DT], dyv[DT], bv[4], cv[4];
          slot_vec<DT>(sc_delta + k * kTileSlots + m.grp * 4, dl);
          slot_vec<DT>(sc_u + k * kTileSlots + m.grp * 4, uu);
          slot_vec<DT>(sc_dy + k * kTileSlots + m.grp * 4, dyv);
          smem_vec<4>(bcw + k * 16 + m.n0, bv);
          smem_vec<4>(bcw + (K + k) * 16 + m.n0, cv);
#pragma unroll
          for (int e = 0; e < 8; ++e) v[e * QD + kk] = 0.f;
#pragma unroll
          for (int e = 0; e < 2 * P2; ++e) q[e * QD + kk] = 0.f;
          const float4* hr = hs4 + size_t(k) * DT * kTileThreads + m.tid;
#pragma unroll
          for (int i = 0; i < DT; ++i) {
            const float4 hp4 = hr[i * kTileThreads];
            const float hp[4] = {hp4.x, hp4.y, hp4.z, hp4.w};
            const float wdu = dl[i] * uu[i];
            float& S1 = q[(2 * i) * QD + kk];
            float& S2 = q[(2 * i + 1) * QD + kk];  // scaled by exp_coef
#pragma unroll
            for (int s = 0; s < 4; ++s) {
              const float dA = expm<E>(dl[i] * a[i][s]);
              const float dh = fmaf(dyv[i], cv[s], gc[i][s]);  // ∂L/∂h_t
              const float dhP = dh * (dA * hp[s]);
              dal[i][s] = fmaf(dl[i], dhP, dal[i][s]);
              S2 = fmaf(a[i][s], dhP, S2);
              S1 = fmaf(dh, bv[s], S1);
              v[s * QD + kk] = fmaf(wdu, dh, v[s * QD + kk]);               // dB terms (δ·u)·dh
              v[(4 + s) * QD + kk] = fmaf(dyv[i], hcur[i][s], v[(4 + s) * QD + kk]);  // dC terms
              gc[i][s] = dA * dh;
              hcur[i][s] = hp[s];
            }
          }
        }
        reduce_scatter_masks<8 * QD, 16, 4>(v, m.lane);  // over the warp's 8 groups
        group_slot_pair_sums<P2, QD>(q, m.lane);         // over the group's 4 lanes
#pragma unroll
        for (int kk = QD - 1; kk >= 0; --kk) {
          const int k = qb * Q + kh + kk, e = k * kTileSlots + orow;
          const float uo = sc_u[e], dlo = sc_delta[e], dyo = sc_dy[e];
          const float S1 = q[kk], S2 = q[QD + kk] * exp_coef_inverse<E>();
          dD_acc = fmaf(dyo, uo, dD_acc);
          const float fd = has_sp ? sc_fd[e] : 1.f;
          const float ddv = fmaf(uo, S1, S2) * fd, duv = fmaf(dlo, S1, __fmul_rn(Dd, dyo));
          const bool ok = m.olane && k < nk;  // predicated stores: no branch in the run
          if (ok) store_rn(ddrow, ddv);
          if (ok) store_rn(durow, duv);
          ddrow -= p.ld_dd;
          durow -= p.ld_du;
        }
#pragma unroll
        for (int kk = 0; kk < QD; ++kk) ws[(kh + kk) * 32 + widx] = v[kk];
      }
      __syncthreads();  // every warp's sums of this batch are in wsum[wb]
      // block sums (warps ascending) -> the block's partials of rows t0 + qb·Q + kk (a warp's
      // row of a step is 32 floats: dB of states 0..15, then dC)
      store_batch_partials<Q * 32, kTileMaxDState, W, kTileThreads>(
          p, wsum + size_t(wb) * W * Q * 32, m.tid, g.nblk_d, m.dblk, part_row0, t0 + qb * Q);
      wb ^= 1;  // the next batch fills the other buffer; this one is read until the next barrier
    }
  }

  if (p.c_lo > 0) {  // more segments follow: hand the carries on
    if (m.nvalid > 0)
#pragma unroll
      for (int i = 0; i < DT; ++i)
        if (m.valid(i)) {
          const int64_t so = (m.b * p.di + m.d(i)) * p.ds + m.n0;
          store_states<4>(p.carry + so, g.vec_state, m.nvalid, gc[i]);
          store_states<4>(p.carry + 2 * carry_plane + so, g.vec_state, m.nvalid, dal[i]);
        }
    if (m.olane) p.carry[3 * carry_plane + m.b * p.di + m.dout] = dD_acc;
    return;
  }
  if (m.nvalid > 0)
#pragma unroll
    for (int i = 0; i < DT; ++i)
      if (m.valid(i)) {
        const int64_t so = (m.b * p.di + m.d(i)) * p.ds + m.n0;
        float out[4];
        load_vec<4>(p.a_neg + m.d(i) * p.ds + m.n0, g.vec_state && m.nvalid == 4, m.nvalid, out);
#pragma unroll
        for (int s = 0; s < 4; ++s) out[s] *= dal[i][s];  // dA_log = A·Σ δ·dh·P
        store_states<4>(p.dAlog_part + so, g.vec_state, m.nvalid, out);
        if (p.dh0) {
          store_states<4>(p.dh0 + so, g.vec_state, m.nvalid, gc[i]);  // dA_0·∂L/∂h_0
        }
      }
  if (m.olane) p.dD_part[m.b * p.di + m.dout] = dD_acc;
}

}  // namespace mc::kern::scan_detail
