// scan/whole_kernels.cuh — the checkpointed scan's forward with a channel's whole state
// in one thread (d_state <= 16, Mamba's): one thread per (b, d) holds all 16 states,
// templated on the storage type T, the exponential E and the checkpoint stride K.
// Launcher in dispatch.cuh; the plan's choice in host.cu (ckpt_plan).
//
// Why. The lane plan of ckpt_kernels.cuh spreads a channel's 16 states over 4 lanes of
// 4: every lane loads its own 4 values of the B and C rows each step (two 16-byte shared
// loads, 4 wavefronts a warp each), which kept that forward at ~82 % of L1 throughput
// (Nsight Compute, docs/performance-notes.md). Here the 32 lanes of a warp serve 32
// consecutive channels of one sample, so each step's B and C rows are the same for the
// whole warp (broadcast loads), and δ, u, z are one consecutive word a lane. Per step and
// warp: 512 elements for ~10 shared wavefronts, against 128 elements for ~17.5. With 16
// independent state chains a thread, the step's exponentials (16 a lane) need no other
// warp to keep the special-function unit busy.
//
// The same bits as the lane plan (S = 4, L = 4) of ckpt_kernels.cuh: every state runs the
// same arithmetic (dA = exp(δ·A), h = fma(dA, h, (δ·u)·B)); y is formed per group of 4
// states as the lane plan's lane j forms its partial (p_j = Σ_s h·C, fma from 0), then
// ((p0 + p1) + (p2 + p3)), the lane plan's butterfly order, then + D·u, then · silu(z).
// The checkpoints [B, n_saved, di, ds] and the final state are the same values.
//
// Thread layout: a block is kWholeThreads channels d0 .. d0 + CB - 1 of one sample b
// (CB = kWholeThreads); thread i serves d0 + i. Stages of KF = kWholeStage steps
// (KF a multiple of K) of δ/Δraw, u, z (rows of CB) and the B/C rows (rows of 16,
// columns >= d_state zero) are double-buffered in shared memory with cp.async; each
// thread keeps its y of the stage in registers and stores them after the stage's last
// step (a global store inside the step loop would be ordered before the next step's
// shared loads), one coalesced row a step.
#pragma once

#include "kernels/scan/ckpt_kernels.cuh"

namespace mc::kern::scan_detail {

constexpr int kWholeThreads = 32;    // one warp a block: B 8, d_inner 1536 -> 384 blocks
constexpr int kWholeStates = 16;     // the states a thread holds (d_state <= 16)
constexpr int kWholeGroups = 4;      // groups of 4 states: the lane plan's lanes
constexpr int kWholeStage = 32;      // steps per pipeline stage (two chunks of 16)

struct WholeGeom {
  int64_t nblk_d = 0;      // channel blocks per sample = ceil(di / kWholeThreads)
  int64_t n_ckpt = 0;      // ceil(T / K)
  bool async_bc = false;   // the B and C rows may be copied in 16-byte units
  bool async_act = false;  // the δ/u/z rows of a block's channels (full blocks only)
  bool vec_state = false;  // ds % 4 == 0: states and checkpoints as float4
};

// Shared memory (bytes): raw [2][n_act][KF][CB] T, then bc [2][2][KF][16] T; every
// region 16-byte aligned.
__host__ __device__ inline size_t whole_act_bytes(size_t elem) {
  return smem_region(size_t(kWholeStage) * kWholeThreads, elem);
}
__host__ __device__ inline size_t whole_bc_bytes(size_t elem) {
  return smem_region(size_t(kWholeStage) * kWholeStates, elem);
}
__host__ __device__ inline size_t whole_smem(size_t elem, bool has_z) {
  return 2 * size_t(fwd_n_act(has_z)) * whole_act_bytes(elem) + 4 * whole_bc_bytes(elem);
}

// Σ over the 4 state groups' partials in the lane plan's order (its group butterfly):
// (p0 + p1) + (p2 + p3). In the backward, whose groups are held permuted, the physical
// pairs {0, 1}, {2, 3} are the logical ones, possibly swapped: + commutes.
__device__ __forceinline__ float whole_group_sum(const float (&p)[kWholeGroups]) {
  return (p[0] + p[1]) + (p[2] + p[3]);
}
// Σ_n h·C in the lane plan's order: per group of 4 states an fma chain from 0 (a lane's
// partial there), then whole_group_sum.
__device__ __forceinline__ float whole_y_dot(const float (&h)[kWholeStates],
                                             const float (&c)[kWholeStates]) {
  float part[kWholeGroups];
#pragma unroll
  for (int q = 0; q < kWholeGroups; ++q) {
    part[q] = 0.f;
#pragma unroll
    for (int s = 4 * q; s < 4 * q + 4; ++s) part[q] = fmaf(h[s], c[s], part[q]);
  }
  return whole_group_sum(part);
}

// grid B·nblk_d blocks of kWholeThreads threads; dynamic smem whole_smem(sizeof(T), z).
// Shapes: δ, u, z, y [B·T, ld] rows; B, C [B·T, ld] rows of ds; a_neg [di, ds];
// h0, h_final [B, di, ds]; ckpt [B, n_saved, di, ds].
template <class T, scan::ExpMath E, int K>
__global__ void __launch_bounds__(kWholeThreads) whole_fwd_kernel(CkptFwdArgs<T> p, WholeGeom g) {
  constexpr int CB = kWholeThreads, DP = kWholeStates, KF = kWholeStage, FS = KF / K;
  static_assert(KF % K == 0, "a stage is whole chunks");
  extern __shared__ float smem[];
  const bool has_z = p.z != nullptr;
  const int n_act = fwd_n_act(has_z);
  const int tid = int(threadIdx.x);
  const int64_t b = int64_t(blockIdx.x) / g.nblk_d;
  const int64_t d0 = (int64_t(blockIdx.x) - b * g.nblk_d) * CB;
  const int cols_valid = int(p.di - d0 < CB ? p.di - d0 : CB);
  const bool dvalid = tid < cols_valid;
  const int64_t d = dvalid ? d0 + tid : p.di - 1;  // padding channels compute, never store
  const int nvalid = int(p.ds < DP ? p.ds : DP);
  char* base = reinterpret_cast<char*>(smem);
  const size_t act_bytes = whole_act_bytes(sizeof(T)), bc_bytes = whole_bc_bytes(sizeof(T));
  auto raw = [&](int bf, int i) {
    return reinterpret_cast<T*>(base + (size_t(bf) * n_act + i) * act_bytes);
  };
  auto bct = [&](int bf, int i) {
    return reinterpret_cast<T*>(base + 2 * size_t(n_act) * act_bytes + (2 * bf + i) * bc_bytes);
  };

  float a[DP], h[DP];
  {
    float A[DP];
    load_vec<DP>(p.a_neg + d * p.ds, g.vec_state && nvalid == DP, nvalid, A);
#pragma unroll
    for (int s = 0; s < DP; ++s) a[s] = exp_coef<E>(A[s]);
    if (p.h0)
      load_states<DP>(p.h0 + (b * p.di + d) * p.ds, g.vec_state, nvalid, h);
    else
#pragma unroll
      for (int s = 0; s < DP; ++s) h[s] = 0.f;
  }
  const float Dd = p.D ? __ldg(p.D + d) : 0.f;
  const float bias = p.delta_bias ? __ldg(p.delta_bias + d) : 0.f;
  const int64_t row0 = b * p.T;
  const int64_t n_stage = (p.T + KF - 1) / KF;
  const bool saves = p.ckpt && dvalid;
  float* ckpt_row = saves ? p.ckpt + ((b * p.n_saved) * p.di + d) * p.ds : nullptr;
  const int64_t ckpt_step = p.di * p.ds;
  int64_t next_save = 0;
  zero_bc_padding<T>(bct(0, 0), KF, DP, p.ds);
  const UnitMap act_map = unit_map<T>(CB), bc_map = unit_map<T>(int(p.ds));

  auto stage = [&](int64_t c, int bf) {
    const int64_t r = row0 + c * KF;
    const int rv = int(min(int64_t(KF), p.T - c * KF));
    stage_tile<T>(raw(bf, 0), CB, p.delta + r * p.ld_delta + d0, p.ld_delta, KF, CB, rv,
                  cols_valid, g.async_act, act_map);
    stage_tile<T>(raw(bf, 1), CB, p.u + r * p.ld_u + d0, p.ld_u, KF, CB, rv, cols_valid,
                  g.async_act, act_map);
    if (has_z)
      stage_tile<T>(raw(bf, 2), CB, p.z + r * p.ld_z + d0, p.ld_z, KF, CB, rv, cols_valid,
                    g.async_act, act_map);
    stage_tile<T>(bct(bf, 0), DP, p.Bm + r * p.ld_B, p.ld_B, KF, int(p.ds), rv, int(p.ds),
                  g.async_bc, bc_map);
    stage_tile<T>(bct(bf, 1), DP, p.Cm + r * p.ld_C, p.ld_C, KF, int(p.ds), rv, int(p.ds),
                  g.async_bc, bc_map);
    cp_async_commit();
  };
  stage(0, 0);

  T* yp_base = p.y + row0 * p.ld_y + d;  // this thread's y column
  for (int64_t c = 0; c < n_stage; ++c) {
    const int bf = int(c & 1);
    const int64_t t0 = c * KF;
    const int nk = int(min(int64_t(KF), p.T - t0));
    cp_async_wait_all();
    __syncthreads();  // stage c's tiles are in buffer bf; every thread is done with stage c-1
    if (c + 1 < n_stage) stage(c + 1, bf ^ 1);  // copies overlap this stage's math
    const T* dt = raw(bf, 0) + tid;
    const T* ut = raw(bf, 1) + tid;
    const T* zt = raw(bf, 2) + tid;
    const T* Bt = bct(bf, 0);
    const T* Ct = bct(bf, 1);
    float ys[KF];
#pragma unroll
    for (int k = 0; k < KF; ++k) {  // branch-free: steps past T leave h unchanged
      if (k % K == 0) {  // the state before step t0 + k: chunk (t0 + k) / K
        const int64_t ci = c * FS + k / K;
        if (saves && ci == next_save && ci < g.n_ckpt) {
          store_states<DP>(ckpt_row, g.vec_state, nvalid, h);
          ckpt_row += ckpt_step;
          next_save += p.ckpt_group;
        }
      }
      const float x = smem_f32(dt[k * CB]);
      const float uv = smem_f32(ut[k * CB]);
      const float dl = k < nk ? (p.delta_bias ? act_softplus(x + bias) : x) : 0.f;
      const float du = dl * uv;
      float bv[DP], cv[DP];
      smem_vec<DP>(Bt + k * DP, bv);
      smem_vec<DP>(Ct + k * DP, cv);
#pragma unroll
      for (int s = 0; s < DP; ++s) h[s] = fmaf(expm<E>(dl * a[s]), h[s], du * bv[s]);
      float yv = whole_y_dot(h, cv) + __fmul_rn(Dd, uv);
      if (has_z) yv *= act_silu(smem_f32(zt[k * CB]));
      ys[k] = yv;
    }
    if (dvalid) {
      T* yrow = yp_base + t0 * p.ld_y;
#pragma unroll
      for (int k = 0; k < KF; ++k)
        if (k < nk) store_rn(yrow + k * p.ld_y, ys[k]);
    }
  }
  if (p.h_final && dvalid)
    store_states<DP>(p.h_final + (b * p.di + d) * p.ds, g.vec_state, nvalid, h);
}


// ---- backward ---------------------------------------------------------------------------
// The whole-state backward gives the lane plan's (S = 4, L = 4) bits as well. Its block is
// one warp of 32 channels, the lane plan's block of 4 warps x 8 channels: lane l plays
// channel l of that block, in "virtual warp" vw = l / 8 at channel l % 8, and every sum is
// taken in the lane plan's order:
// - S1, S2 (dδ, du) and y (dz) per group of 4 states, then ((g0 + g1) + (g2 + g3));
// - dB/dC over a virtual warp's 8 channels by the lane plan's butterfly: xor levels on lane
//   bits 2, 1, 0 (the lane plan's 16, 8, 4, i.e. channel bits 2, 1, 0), then over the four
//   virtual warps in order (((w0 + w1) + w2) + w3) when a batch's sums are written as the
//   block's partials [b, t, dblk, n] (the same partial layout: 32 channels a block).
// The reduce-scatter needs no selects on its first two levels: each lane holds its state
// groups permuted, physical group gp = logical group (gp ^ x) with x = (lane >> 1) & 3, so
// that at the levels that split on the group bits every lane keeps its physical lower
// half and sends the upper one (which is the logical half its partner keeps). Loads and
// stores of states (checkpoints, carries, dh_final, dh0, dA_log) and of the B/C rows map
// the groups back; each group's 4 states stay in order, and the group sums pair {0, 1}
// and {2, 3} whatever x is (+ commutes), so no value changes.
// Per chunk (last first): reload the chunk's state, recompute the chunk's states into
// the thread's hs slots (with z: y for dz), then walk back in batches of kWholeQD steps
// with the lane plan's carries (dh, dAn = dA of the step after, dal, dD).
constexpr int kWholeQ = 8;    // steps per dB/dC batch (the lane plan's ckpt_q(16))
constexpr int kWholeQD = 4;   // walked steps whose sums and outputs are stored together
constexpr int kWholeVW = 4;   // virtual warps: the lane plan's warps of 8 channels
constexpr int kWholeRG = 2;   // recomputed steps held in registers before their hs stores

// Shared memory (bytes), every region 16-byte aligned:
//   raw  [2][n_act][K][CB] T        δ/Δraw, u, dy, [z] of the block's channels
//   bc   [2][2][K][16] T            B and C rows (columns >= ds zero)
//   sc   [n_sc][K][CB] f32          δ, u, dy·[silu(z)], [dz factor], [softplus']
//   hs   [K+1][4][CB] float4        per thread: slot i = the state before step i, physical groups
//   wsum [kWholeVW][kWholeQ][2][16] f32  a batch's sums per virtual warp (dB 0, dC 1)
struct WholeBwdSmem {
  size_t raw, bc, sc, hs, wsum, total;
};
__host__ __device__ inline WholeBwdSmem whole_bwd_smem(int K, size_t elem, bool has_z, bool has_sp) {
  WholeBwdSmem m;
  m.raw = 0;
  m.bc = m.raw + 2 * size_t(bwd_n_act(has_z)) * smem_region(size_t(K) * kWholeThreads, elem);
  m.sc = m.bc + 4 * smem_region(size_t(K) * kWholeStates, elem);
  m.hs = m.sc + size_t(bwd_n_sc(has_z, has_sp)) * smem_region(size_t(K) * kWholeThreads, 4);
  m.wsum = m.hs + size_t(K + 1) * kWholeStates * kWholeThreads * 4;
  m.total = m.wsum + size_t(kWholeVW) * kWholeQ * 2 * kWholeStates * 4;
  return m;
}

// States of logical group g (4 consecutive, masked past ds) of the row `p` [ds] to / from
// physical group slot v[4·gp ..] — the permuted groups of the whole-state backward.
__device__ __forceinline__ int whole_group_valid(int64_t ds, int g) {
  const int64_t left = ds - 4 * g;
  return int(left < 0 ? 0 : (left > 4 ? 4 : left));
}
__device__ __forceinline__ void whole_load_groups(const float* p, bool vec, int64_t ds, int x,
                                                  float (&v)[kWholeStates]) {
#pragma unroll
  for (int gp = 0; gp < kWholeGroups; ++gp) {
    const int g = gp ^ x, nv = whole_group_valid(ds, g);
    float q[4];
    load_vec<4>(p + 4 * g, vec && nv == 4, nv, q);
#pragma unroll
    for (int s = 0; s < 4; ++s) v[4 * gp + s] = q[s];
  }
}
__device__ __forceinline__ void whole_store_groups(float* p, bool vec, int64_t ds, int x,
                                                   const float (&v)[kWholeStates]) {
#pragma unroll
  for (int gp = 0; gp < kWholeGroups; ++gp) {
    const int g = gp ^ x, nv = whole_group_valid(ds, g);
    if (nv == 0) continue;
    const float q[4] = {v[4 * gp], v[4 * gp + 1], v[4 * gp + 2], v[4 * gp + 3]};
    store_states<4>(p + 4 * g, vec, nv, q);
  }
}
// The step's B or C row (f32 or 2-byte shared-memory row of 16) in physical group order.
template <class T>
__device__ __forceinline__ void whole_row_groups(const T* row, int x, float (&v)[kWholeStates]) {
#pragma unroll
  for (int gp = 0; gp < kWholeGroups; ++gp) {
    float q[4];
    smem_vec<4>(row + 4 * (gp ^ x), q);
#pragma unroll
    for (int s = 0; s < 4; ++s) v[4 * gp + s] = q[s];
  }
}

// grid B·nblk_d blocks of kWholeThreads threads (blockIdx = b·nblk_d + dblk, as the lane
// plan's); dynamic smem whole_bwd_smem(K, sizeof(T), z, softplus).total. Arguments and
// segments as ckpt_bwd_kernel's (ckpt_kernels.cuh).
template <class T, scan::ExpMath E, int K>
__global__ void __launch_bounds__(kWholeThreads) whole_bwd_kernel(CkptBwdArgs<T> p, WholeGeom g) {
  constexpr int CB = kWholeThreads, DP = kWholeStates, Q = kWholeQ, QD = kWholeQD;
  constexpr int RG = kWholeRG, NV = 2 * DP, NO = Q * 2 * DP;
  static_assert(K % Q == 0 && Q % QD == 0 && K % RG == 0, "batches of whole steps");
  extern __shared__ float smem[];
  const bool has_z = p.z != nullptr, has_sp = p.delta_bias != nullptr;
  const WholeBwdSmem lay = whole_bwd_smem(K, sizeof(T), has_z, has_sp);
  const int n_act = bwd_n_act(has_z);
  const int lane = int(threadIdx.x);
  const int x = (lane >> 1) & 3;  // this lane's group permutation
  const int vw = lane >> 3;       // virtual warp
  const BwdPiece pw = bwd_piece(p, g.nblk_d, g.n_ckpt);
  const int64_t b = pw.bid / g.nblk_d;
  const int64_t dblk = pw.bid - b * g.nblk_d;
  const int64_t d0 = dblk * CB;
  const int cols_valid = int(p.di - d0 < CB ? p.di - d0 : CB);
  const bool dvalid = lane < cols_valid;
  const int64_t d = dvalid ? d0 + lane : p.di - 1;  // padding channels: u = dy = 0, add ±0
  char* base = reinterpret_cast<char*>(smem);
  const size_t act_bytes = smem_region(size_t(K) * CB, sizeof(T));
  const size_t bc_bytes = smem_region(size_t(K) * DP, sizeof(T));
  const size_t sc_bytes = smem_region(size_t(K) * CB, 4);
  auto raw = [&](int bf, int i) {
    return reinterpret_cast<T*>(base + lay.raw + (size_t(bf) * n_act + i) * act_bytes);
  };
  auto bct = [&](int bf, int i) {
    return reinterpret_cast<T*>(base + lay.bc + (2 * bf + i) * bc_bytes);
  };
  float* sc_delta = reinterpret_cast<float*>(base + lay.sc) + lane;
  float* sc_u = reinterpret_cast<float*>(base + lay.sc + sc_bytes) + lane;
  float* sc_dy = reinterpret_cast<float*>(base + lay.sc + 2 * sc_bytes) + lane;
  float* sc_fz = reinterpret_cast<float*>(base + lay.sc + 3 * sc_bytes) + lane;  // with z
  float* sc_fd = reinterpret_cast<float*>(base + lay.sc + (3 + int(has_z)) * sc_bytes) + lane;
  // this thread's hs: slot i, physical group gp at float4 index (i·4 + gp)·CB + lane
  float4* hs = reinterpret_cast<float4*>(base + lay.hs) + lane;
  auto put_states = [&](int i, const float* v) {
#pragma unroll
    for (int gp = 0; gp < 4; ++gp)
      hs[(i * 4 + gp) * CB] = make_float4(v[4 * gp], v[4 * gp + 1], v[4 * gp + 2], v[4 * gp + 3]);
  };
  auto get_states = [&](int i, float (&v)[DP]) {
#pragma unroll
    for (int gp = 0; gp < 4; ++gp) {
      const float4 q = hs[(i * 4 + gp) * CB];
      v[4 * gp] = q.x;
      v[4 * gp + 1] = q.y;
      v[4 * gp + 2] = q.z;
      v[4 * gp + 3] = q.w;
    }
  };
  float* wsum = reinterpret_cast<float*>(base + lay.wsum);

  float a[DP], dh[DP], dAn[DP], dal[DP];
  whole_load_groups(p.a_neg + d * p.ds, g.vec_state, p.ds, x, a);
#pragma unroll
  for (int s = 0; s < DP; ++s) {
    a[s] = exp_coef<E>(a[s]);
    dAn[s] = 1.f;
    dal[s] = 0.f;
  }
  const int64_t state_off = (b * p.di + d) * p.ds;
  const int64_t carry_plane = p.B * p.di * p.ds;
  float dD_acc = 0.f;
  if (!pw.last) {  // as ckpt_bwd_kernel: the carry pass's state, or a launch's
    const float* cin = p.parallel_pieces ? p.piece_carry + 2 * pw.piece * carry_plane : p.carry;
    whole_load_groups(cin + state_off, g.vec_state, p.ds, x, dh);
    whole_load_groups(cin + carry_plane + state_off, g.vec_state, p.ds, x, dAn);
    if (!pw.fresh) {
      whole_load_groups(p.carry + 2 * carry_plane + state_off, g.vec_state, p.ds, x, dal);
      dD_acc = p.carry[3 * carry_plane + b * p.di + d];
    }
  } else if (p.dh_final) {
    whole_load_groups(p.dh_final + state_off, g.vec_state, p.ds, x, dh);
  } else {
#pragma unroll
    for (int s = 0; s < DP; ++s) dh[s] = 0.f;
  }
  const float Dd = p.D ? __ldg(p.D + d) : 0.f;
  const float bias = p.delta_bias ? __ldg(p.delta_bias + d) : 0.f;
  const int64_t row0 = b * p.T;
  const int64_t t_lo = p.c_lo * K;
  const int64_t part_row0 = b * p.seg_rows - t_lo;
  zero_bc_padding<T>(bct(0, 0), K, DP, p.ds);
  const UnitMap act_map = unit_map<T>(CB), bc_map = unit_map<T>(int(p.ds));

  auto stage = [&](int64_t c, int bf) {
    const int64_t r = row0 + c * K;
    const int rv = int(min(int64_t(K), p.T - c * K));
    stage_tile<T>(raw(bf, 0), CB, p.delta + r * p.ld_delta + d0, p.ld_delta, K, CB, rv,
                  cols_valid, g.async_act, act_map);
    stage_tile<T>(raw(bf, 1), CB, p.u + r * p.ld_u + d0, p.ld_u, K, CB, rv, cols_valid,
                  g.async_act, act_map);
    stage_tile<T>(raw(bf, 2), CB, p.dy + r * p.ld_dy + d0, p.ld_dy, K, CB, rv, cols_valid,
                  g.async_act, act_map);
    if (has_z)
      stage_tile<T>(raw(bf, 3), CB, p.z + r * p.ld_z + d0, p.ld_z, K, CB, rv, cols_valid,
                    g.async_act, act_map);
    stage_tile<T>(bct(bf, 0), DP, p.Bm + r * p.ld_B, p.ld_B, K, int(p.ds), rv, int(p.ds),
                  g.async_bc, bc_map);
    stage_tile<T>(bct(bf, 1), DP, p.Cm + r * p.ld_C, p.ld_C, K, int(p.ds), rv, int(p.ds),
                  g.async_bc, bc_map);
    cp_async_commit();
  };
  stage(pw.c_hi - 1, int((pw.c_hi - 1) & 1));

  for (int64_t c = pw.c_hi - 1; c >= pw.c_lo; --c) {
    const int bf = int(c & 1);
    const int64_t t0 = c * K;
    const int nk = int(min(int64_t(K), p.T - t0));
    float hck[DP];
    whole_load_groups(p.ckpt + ((b * p.ckpt_slots + (c - p.ckpt_c0)) * p.di + d) * p.ds,
                      g.vec_state, p.ds, x, hck);
    cp_async_wait_all();
    __syncthreads();  // chunk c's tiles are in buffer bf; the warp is done with chunk c+1
    if (c > pw.c_lo) stage(c - 1, bf ^ 1);
    // per-(t, d) scalars of this lane's channel (the lane plan's transform)
    for (int k = 0; k < K; ++k) {
      const int e = k * CB + lane;
      const float xr = smem_f32(raw(bf, 0)[e]);
      float dl = 0.f, dyv = 0.f;
      if (k < nk) {
        dl = has_sp ? act_softplus(xr + bias) : xr;
        dyv = smem_f32(raw(bf, 2)[e]);
      }
      if (has_sp) sc_fd[k * CB] = act_sigmoid(xr + bias);
      if (has_z) {
        const float zv = smem_f32(raw(bf, 3)[e]);
        sc_fz[k * CB] = dyv * act_silu_grad(zv);
        dyv = dyv * act_silu(zv);
      }
      sc_delta[k * CB] = dl;
      sc_u[k * CB] = smem_f32(raw(bf, 1)[e]);
      sc_dy[k * CB] = dyv;
    }
    const T* Bt = bct(bf, 0);
    const T* Ct = bct(bf, 1);

    // recompute the chunk's states into hs (with z: dz = fz·y, stored as it goes)
    {
      float h[DP];
#pragma unroll
      for (int s = 0; s < DP; ++s) h[s] = hck[s];
      put_states(0, hck);
      T* dzrow = has_z ? p.dz + (row0 + t0) * p.ld_dz + d : nullptr;
#pragma unroll
      for (int k0 = 0; k0 < K; k0 += RG) {
        float hk[RG][DP], yk[RG];
#pragma unroll
        for (int i = 0; i < RG; ++i) {
          const int k = k0 + i;
          const float dl = sc_delta[k * CB];
          const float du = dl * sc_u[k * CB];
          float bv[DP];
          whole_row_groups<T>(Bt + k * DP, x, bv);
#pragma unroll
          for (int s = 0; s < DP; ++s) {
            const float dA = expm<E>(dl * a[s]);
            h[s] = fmaf(dA, h[s], du * bv[s]);
            hk[i][s] = h[s];
          }
          if (has_z) {
            float cv[DP];
            whole_row_groups<T>(Ct + k * DP, x, cv);
            yk[i] = whole_y_dot(h, cv) + __fmul_rn(Dd, sc_u[k * CB]);
          }
        }
#pragma unroll
        for (int i = 0; i < RG; ++i) put_states(k0 + i + 1, hk[i]);
        if (has_z && dvalid)
#pragma unroll
          for (int i = 0; i < RG; ++i)
            if (k0 + i < nk) store_rn(dzrow + (k0 + i) * p.ld_dz, sc_fz[(k0 + i) * CB] * yk[i]);
      }
    }

    // walk the chunk backwards (branch-free: steps past T have dl = dy = 0)
    float hcur[DP];
    get_states(K, hcur);
    T* ddrow = p.d_delta + (row0 + t0) * p.ld_dd + d;
    T* durow = p.du + (row0 + t0) * p.ld_du + d;
    for (int qb = K / Q - 1; qb >= 0; --qb) {
#pragma unroll
      for (int kh = Q - QD; kh >= 0; kh -= QD) {
        float wv[QD][4], o_dd[QD], o_du[QD];
#pragma unroll
        for (int kk = kh + QD - 1; kk >= kh; --kk) {
          const int k = qb * Q + kk;
          const float dl = sc_delta[k * CB];
          const float uv = sc_u[k * CB];
          const float dyv = sc_dy[k * CB];
          float bv[DP], cv[DP], hp[DP];
          whole_row_groups<T>(Bt + k * DP, x, bv);
          whole_row_groups<T>(Ct + k * DP, x, cv);
          get_states(k, hp);
          float s1[4], s2[4];
#pragma unroll
          for (int gp = 0; gp < 4; ++gp) {
            s1[gp] = 0.f;
            s2[gp] = 0.f;
#pragma unroll
            for (int s = 4 * gp; s < 4 * gp + 4; ++s) {
              const float dA = expm<E>(dl * a[s]);
              dh[s] = fmaf(dAn[s], dh[s], dyv * cv[s]);
              const float dhP = dh[s] * (dA * hp[s]);
              dal[s] = fmaf(dl, dhP, dal[s]);
              s2[gp] = fmaf(a[s], dhP, s2[gp]);
              s1[gp] = fmaf(dh[s], bv[s], s1[gp]);
              dAn[s] = dA;
            }
          }
          const float S1 = whole_group_sum(s1);
          const float S2 = whole_group_sum(s2) * exp_coef_inverse<E>();
          const float fd = has_sp ? sc_fd[k * CB] : 1.f;
          o_dd[kk - kh] = fmaf(uv, S1, S2) * fd;
          o_du[kk - kh] = fmaf(dl, S1, __fmul_rn(Dd, dyv));
          // dB terms (δ·u)·dh and dC terms dy·h_t at v[8·gp + 4·q + s], each product rounded
          // (__fmul_rn): the first level adds them straight to the partner's, and a
          // contracted fma there would not round the product as the lane plan does (its
          // selects keep the compiler from contracting)
          float v[NV];
          const float w = dl * uv;
#pragma unroll
          for (int gp = 0; gp < 4; ++gp)
#pragma unroll
            for (int s = 0; s < 4; ++s) {
              v[8 * gp + s] = __fmul_rn(w, dh[4 * gp + s]);
              v[8 * gp + 4 + s] = __fmul_rn(dyv, hcur[4 * gp + s]);
              hcur[4 * gp + s] = hp[4 * gp + s];
            }
          // levels on lane bits 2 and 1 (the group bits, permuted: keep the lower half),
          // then bit 0 (dB / dC: the lane's q = lane & 1 half)
#pragma unroll
          for (int i = 0; i < 16; ++i) v[i] += shfl_xor(v[16 + i], 4);
#pragma unroll
          for (int i = 0; i < 8; ++i) v[i] += shfl_xor(v[8 + i], 2);
          reduce_scatter_level<NV, 4, 1, 1>(v, lane);
#pragma unroll
          for (int r = 0; r < 4; ++r) wv[kk - kh][r] = v[r];
          dD_acc = fmaf(dyv, uv, dD_acc);
        }
        // the batch's sums: virtual warp vw, q = lane & 1, logical group x
#pragma unroll
        for (int kk = kh; kk < kh + QD; ++kk) {
          float* ws = wsum + ((vw * Q + kk) * 2 + (lane & 1)) * DP + 4 * x;
          *reinterpret_cast<float4*>(ws) =
              make_float4(wv[kk - kh][0], wv[kk - kh][1], wv[kk - kh][2], wv[kk - kh][3]);
        }
        if (dvalid)
#pragma unroll
          for (int kk = kh; kk < kh + QD; ++kk) {
            const int k = qb * Q + kk;
            if (k < nk) {
              store_rn(ddrow + k * p.ld_dd, o_dd[kk - kh]);
              store_rn(durow + k * p.ld_du, o_du[kk - kh]);
            }
          }
      }
      __syncwarp();  // the batch's sums of every virtual warp are in wsum
      // block sums (virtual warps ascending) -> the block's partials of rows t0 + qb·Q + kk
      store_batch_partials<NO, DP, kWholeVW, CB>(p, wsum, lane, g.nblk_d, dblk, part_row0,
                                                 t0 + qb * Q);
      __syncwarp();  // read before the next batch overwrites it
    }
  }

  if (pw.c_lo > 0 && !p.parallel_pieces && dvalid) {  // more launches follow: the carries
    whole_store_groups(p.carry + state_off, g.vec_state, p.ds, x, dh);
    whole_store_groups(p.carry + carry_plane + state_off, g.vec_state, p.ds, x, dAn);
    whole_store_groups(p.carry + 2 * carry_plane + state_off, g.vec_state, p.ds, x, dal);
    p.carry[3 * carry_plane + b * p.di + d] = dD_acc;
  }
  if (pw.done && dvalid) {  // this piece's dA_log / dD partials, slot b·n_pieces + piece
    const int64_t slot = b * p.n_pieces + pw.piece;
    float out[DP];
    whole_load_groups(p.a_neg + d * p.ds, g.vec_state, p.ds, x, out);
#pragma unroll
    for (int s = 0; s < DP; ++s) out[s] *= dal[s];  // dA_log = A·Σ δ·dh·P
    whole_store_groups(p.dAlog_part + (slot * p.di + d) * p.ds, g.vec_state, p.ds, x, out);
    if (p.dh0 && pw.c_lo == 0) {
#pragma unroll
      for (int s = 0; s < DP; ++s) out[s] = dAn[s] * dh[s];
      whole_store_groups(p.dh0 + state_off, g.vec_state, p.ds, x, out);
    }
    p.dD_part[slot * p.di + d] = dD_acc;
  }
}

}  // namespace mc::kern::scan_detail
