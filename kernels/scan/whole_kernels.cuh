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

// The lane plan's y order over the 4 groups' partials: (p0 + p1) + (p2 + p3).
__device__ __forceinline__ float whole_y_sum(const float (&p)[kWholeGroups]) {
  return (p[0] + p[1]) + (p[2] + p[3]);
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
      float part[kWholeGroups];
#pragma unroll
      for (int q = 0; q < kWholeGroups; ++q) {
        float yp = 0.f;
#pragma unroll
        for (int s = 4 * q; s < 4 * q + 4; ++s) {
          const float dA = expm<E>(dl * a[s]);
          h[s] = fmaf(dA, h[s], du * bv[s]);
          yp = fmaf(h[s], cv[s], yp);
        }
        part[q] = yp;
      }
      float yv = whole_y_sum(part) + __fmul_rn(Dd, uv);
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

}  // namespace mc::kern::scan_detail
