// scan/ckpt_kernels.cuh — device code of the checkpointed selective scan
// (route Checkpointed of scan.hpp): forward and backward kernels, templated on
// the storage type T, the states per thread S, the exponential E and the
// checkpoint stride K. Launchers in ckpt_launch.cuh.
//
// Thread layout (both directions). A block serves CB consecutive channels d of
// one sample b; channel ch of the block is served by L consecutive lanes of one
// warp (L = lanes, a power of two <= 32); lane j of the group holds the S states
// n = j·S .. j·S+S-1 in registers (states >= d_state are masked: A = B = C = 0,
// so they stay 0 and contribute nothing). A warp holds CW = 32/L channels. Each
// thread walks ALL T steps of its (b, d, states) in order: the recurrence is
// never split in time, so nothing is composed and there is no scan tree.
//
// Per chunk of K steps, "phase 0" stages the per-(t, d) scalars in shared memory
// [K][CB]: lane j of a group loads and transforms steps k ≡ j (mod L) (δ, with
// the fused softplus; u; the gate), so an activation is evaluated once per
// (t, d), not once per lane. The lanes then read them back (broadcast).
//
// Forward, per step: dA = exp(δ·A); h = dA·h + (δ·u)·B; y = Σ_n h·C (in-thread
// over the S states, then an xor butterfly over the L lanes), then + D·u, then
// · silu(z). The state before every K-th step is stored as a checkpoint
// [B, n_ckpt, di, ds]; the final state to h_final.
//
// Backward, chunks from last to first. Per chunk: reload the checkpoint,
// recompute the chunk's K states into shared memory hs[K][thread][S] (one exp
// per element; the warp-level dB/dC sums read h_t from there too),
// then walk the chunk backwards with the carries dh = ∂L/∂h_{t+1} and dAn = dA_{t+1}:
//   dh   = dAn·dh + dy·C                      (∂L/∂h_t)
//   P    = dA·h_{t-1}   (dA recomputed: one more exp per element)
//   dAlog_acc += δ·dh·P          -> dA_log[n] += A·Σ_b,t δ·dh·P
//   S2  += A·dh·P,  S1 += dh·B   -> dδ = S2 + u·S1,  du = δ·S1 + D·dy
//   dC[t,n] = Σ_d dy·h_t,  dB[t,n] = Σ_d (δ·u)·dh
// dB/dC: every Q steps each warp writes its h_t and dh values to its own tile,
// and its 32 lanes sum them over the warp's CW channels (one n-quad per lane
// unit, channel order ascending); after one block barrier the warps' sums are
// added in warp order and written as the block's partial [q][b, t, group, n];
// a fixed-order kernel sums the groups (ckpt_reduce). dD and dA_log partials are
// per (b, d[, n]) — one thread owns each over all t — and are summed over b by
// the seed route's fixed-order reduction. No atomics anywhere.
#pragma once

#include "kernels/scan/device.cuh"

namespace mc::kern::scan_detail {

// ---- geometry shared by host and device --------------------------------------------
constexpr int kCkptQ = 4;  // backward: steps per dB/dC reduction batch

struct CkptGeom {
  int lanes = 1;       // L
  int log2_lanes = 0;
  int warps = 4;       // W per block
  int cb = 0;          // channels per block = W·32/L
  int ds_pad = 4;      // L·S rounded: states per channel the threads hold
  int64_t nblk_d = 0;  // channel blocks per sample = ceil(di / cb)
  int64_t n_ckpt = 0;  // ceil(T / K)
  bool vec_bc = false;    // B/C rows may be read as S-wide vectors
  bool vec_state = false; // ds % 4 == 0: states, checkpoints and partials as float4
};

template <class V>  // V: the storage type (T is the sequence length below)
struct CkptFwdArgs {
  int64_t B, T, di, ds;
  const V* delta;
  int64_t ld_delta;
  const float* delta_bias;
  const V* u;
  int64_t ld_u;
  const V* Bm;
  int64_t ld_B;
  const V* Cm;
  int64_t ld_C;
  const float* a_neg;
  const float* D;
  const V* z;
  int64_t ld_z;
  const float* h0;
  float* h_final;
  float* ckpt;  // [B, n_ckpt, di, ds] or null
  V* y;
  int64_t ld_y;
};

template <class V>  // V: the storage type (T is the sequence length below)
struct CkptBwdArgs {
  int64_t B, T, di, ds;
  const V* delta;
  int64_t ld_delta;
  const float* delta_bias;
  const V* u;
  int64_t ld_u;
  const V* Bm;
  int64_t ld_B;
  const V* Cm;
  int64_t ld_C;
  const float* a_neg;
  const float* D;
  const V* z;
  int64_t ld_z;
  const float* ckpt;
  const V* dy;
  int64_t ld_dy;
  const float* dh_final;
  V* d_delta;
  int64_t ld_dd;
  V* du;
  int64_t ld_du;
  V* dz;
  int64_t ld_dz;
  float* dB_part;     // [B, T, nblk_d, ds]
  float* dC_part;     // [B, T, nblk_d, ds]
  float* dAlog_part;  // [B, di, ds]
  float* dD_part;     // [B, di]
  float* dh0;         // [B, di, ds] or null
};

// Which thread serves what (both kernels).
struct LaneMap {
  int L, ch, j, lane, warp, n0, nvalid;
  int64_t b, dblk, d;  // d clamped to di-1 for the padding channels of the last block
  bool dvalid;
};
__device__ __forceinline__ LaneMap lane_map(const CkptGeom& g, int64_t di, int64_t ds, int S) {
  LaneMap m;
  const int tid = int(threadIdx.x);
  m.L = g.lanes;
  m.ch = tid >> g.log2_lanes;
  m.j = tid & (g.lanes - 1);
  m.lane = tid & 31;
  m.warp = tid >> 5;
  m.b = int64_t(blockIdx.x) / g.nblk_d;
  m.dblk = int64_t(blockIdx.x) - m.b * g.nblk_d;
  const int64_t d = m.dblk * g.cb + m.ch;
  m.dvalid = d < di;
  m.d = m.dvalid ? d : di - 1;
  m.n0 = m.j * S;
  const int64_t left = ds - m.n0;
  m.nvalid = int(left < 0 ? 0 : (left > S ? S : left));
  return m;
}

// S states of the f32 row `p` (checkpoints, h0, dh_final): float4 when allowed.
template <int S>
__device__ __forceinline__ void load_states(const float* p, bool vec, int valid, float (&v)[S]) {
  load_vec<S>(p, vec && valid == S, valid, v);
}
template <int S>
__device__ __forceinline__ void store_states(float* p, bool vec, int valid, const float (&v)[S]) {
  if (vec && valid == S) {
#pragma unroll
    for (int q = 0; q < S / 4; ++q)
      reinterpret_cast<float4*>(p)[q] =
          make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  } else {
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (s < valid) p[s] = v[s];
  }
}

// ---- forward --------------------------------------------------------------------------
// grid B·nblk_d blocks of 32·W threads; dynamic smem 4·K·CB floats:
//   sc_delta | sc_du (δ·u) | sc_skip (D·u) | sc_gate (silu(z) or 1), each [K][CB]
template <class T, int S, scan::ExpMath E, int K>
__global__ void __launch_bounds__(256) ckpt_fwd_kernel(CkptFwdArgs<T> p, CkptGeom g) {
  extern __shared__ float smem[];
  const LaneMap m = lane_map(g, p.di, p.ds, S);
  const int CB = g.cb, L = m.L;
  float* sc_delta = smem;
  float* sc_du = sc_delta + K * CB;
  float* sc_skip = sc_du + K * CB;
  float* sc_gate = sc_skip + K * CB;

  float a[S], h[S];
  {
    float A[S];
    load_vec<S>(p.a_neg + m.d * p.ds + m.n0, g.vec_state && m.nvalid == S, m.nvalid, A);
#pragma unroll
    for (int s = 0; s < S; ++s) a[s] = exp_coef<E>(A[s]);
    if (p.h0)
      load_states<S>(p.h0 + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid, h);
    else
#pragma unroll
      for (int s = 0; s < S; ++s) h[s] = 0.f;
  }
  const float Dd = p.D ? __ldg(p.D + m.d) : 0.f;
  const float bias = p.delta_bias ? __ldg(p.delta_bias + m.d) : 0.f;
  const bool vec_bc = g.vec_bc && m.nvalid == S;
  const int64_t row0 = m.b * p.T;

  for (int64_t t0 = 0; t0 < p.T; t0 += K) {
    const int nk = int(min(int64_t(K), p.T - t0));
    if (p.ckpt && m.dvalid && m.nvalid > 0)
      store_states<S>(p.ckpt + ((m.b * g.n_ckpt + t0 / K) * p.di + m.d) * p.ds + m.n0,
                      g.vec_state, m.nvalid, h);
    // phase 0: per-(t, d) scalars of this chunk
    for (int k = m.j; k < K; k += L) {
      float dl = 0.f, uv = 0.f, gate = 1.f;
      if (k < nk) {
        const int64_t r = row0 + t0 + k;
        const float x = load_f32(p.delta + r * p.ld_delta + m.d);
        dl = p.delta_bias ? act_softplus(x + bias) : x;
        uv = load_f32(p.u + r * p.ld_u + m.d);
        if (p.z) gate = act_silu(load_f32(p.z + r * p.ld_z + m.d));
      }
      sc_delta[k * CB + m.ch] = dl;
      sc_du[k * CB + m.ch] = dl * uv;
      sc_skip[k * CB + m.ch] = __fmul_rn(Dd, uv);
      sc_gate[k * CB + m.ch] = gate;
    }
    __syncwarp();
    const T* bp = p.Bm + (row0 + t0) * p.ld_B + m.n0;
    const T* cp = p.Cm + (row0 + t0) * p.ld_C + m.n0;
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
      if (k < nk) {  // block-uniform
        const float dl = sc_delta[k * CB + m.ch];
        const float du = sc_du[k * CB + m.ch];
        float bv[S], cv[S];
        load_vec<S>(bp + k * p.ld_B, vec_bc, m.nvalid, bv);
        load_vec<S>(cp + k * p.ld_C, vec_bc, m.nvalid, cv);
        float yp = 0.f;
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const float dA = expm<E>(dl * a[s]);
          h[s] = fmaf(dA, h[s], du * bv[s]);
          yp = fmaf(h[s], cv[s], yp);
        }
        const float ysum = group_sum(yp, L);
        if (m.j == (k & (L - 1)) && m.dvalid) {
          const float yv = (ysum + sc_skip[k * CB + m.ch]) * sc_gate[k * CB + m.ch];
          store_rn(p.y + (row0 + t0 + k) * p.ld_y + m.d, yv);
        }
      }
    }
    __syncwarp();  // the next chunk's phase 0 overwrites the scalars
  }
  if (p.h_final && m.dvalid && m.nvalid > 0)
    store_states<S>(p.h_final + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid, h);
}

// ---- backward -------------------------------------------------------------------------
// Shared memory (floats):
//   hs      [K][threads][S]: the chunk's recomputed states h_t of each thread
//   scalars [6][K][CB]: δ | u | dy (as the recurrence sees it) | δ·u | dΔ factor
//                       (σ(Δraw+bias) or 1) | dz factor (dG·silu'(z), with z)
//   tiles   [W][Q][CW][ds_pad]: per warp, dh_t (for dB; h_t is read from hs)
//   wsum    [2][W][2][Q][ds_pad]: per warp sums, double-buffered across batches
inline size_t ckpt_bwd_smem_floats(const CkptGeom& g, int K, int S) {
  const size_t cw = size_t(32 / g.lanes), threads = size_t(32) * g.warps;
  return size_t(K) * threads * S + size_t(6) * K * g.cb +
         size_t(g.warps) * kCkptQ * cw * g.ds_pad + size_t(2) * g.warps * 2 * kCkptQ * g.ds_pad;
}
inline size_t ckpt_fwd_smem_floats(const CkptGeom& g, int K) { return size_t(4) * K * g.cb; }

template <class T, int S, scan::ExpMath E, int K>
__global__ void __launch_bounds__(256) ckpt_bwd_kernel(CkptBwdArgs<T> p, CkptGeom g) {
  constexpr int Q = kCkptQ;
  static_assert(K % Q == 0, "chunk must be a multiple of the reduction batch");
  static_assert(S % 4 == 0, "states per thread in float4 units");
  extern __shared__ float smem[];
  const LaneMap m = lane_map(g, p.di, p.ds, S);
  const int CB = g.cb, L = m.L, W = g.warps, DP = g.ds_pad;
  const int CW = 32 / L;
  const int NT = 32 * W;
  const int wch = m.lane >> g.log2_lanes;  // channel within the warp
  float4* hs = reinterpret_cast<float4*>(smem);  // [K][NT][S/4]
  float* sc_delta = smem + size_t(K) * NT * S;
  float* sc_u = sc_delta + K * CB;
  float* sc_dy = sc_u + K * CB;
  float* sc_du = sc_dy + K * CB;
  float* sc_fd = sc_du + K * CB;
  float* sc_fz = sc_fd + K * CB;
  float* tiles = sc_fz + K * CB;                  // [W][Q][CW][DP]
  float* wsum = tiles + size_t(W) * Q * CW * DP;  // [2][W][2][Q][DP]
  float* my_tile_dh = tiles + size_t(m.warp) * Q * CW * DP;
  // this thread's state slot of step k (S/4 float4s)
  auto hs_at = [&](int k) { return hs + (size_t(k) * NT + threadIdx.x) * (S / 4); };

  // a = exp_coef(A); S2 is accumulated with a and scaled back once per step
  // (exp_coef_inverse), so A itself need not stay in registers.
  float a[S], dh[S], dAn[S], dal[S];
  load_vec<S>(p.a_neg + m.d * p.ds + m.n0, g.vec_state && m.nvalid == S, m.nvalid, a);
#pragma unroll
  for (int s = 0; s < S; ++s) {
    a[s] = exp_coef<E>(a[s]);
    dAn[s] = 1.f;  // dA_T := 1, so the last step sees dh_{T-1} = dy·C + dh_final
    dal[s] = 0.f;
  }
  if (p.dh_final)
    load_states<S>(p.dh_final + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid, dh);
  else
#pragma unroll
    for (int s = 0; s < S; ++s) dh[s] = 0.f;
  const float Dd = p.D ? __ldg(p.D + m.d) : 0.f;
  const float bias = p.delta_bias ? __ldg(p.delta_bias + m.d) : 0.f;
  const bool vec_bc = g.vec_bc && m.nvalid == S;
  const int64_t row0 = m.b * p.T;
  float dD_acc = 0.f;
  int buf = 0;

  for (int64_t c = g.n_ckpt - 1; c >= 0; --c) {
    const int64_t t0 = c * K;
    const int nk = int(min(int64_t(K), p.T - t0));
    float hck[S];
    load_states<S>(p.ckpt + ((m.b * g.n_ckpt + c) * p.di + m.d) * p.ds + m.n0, g.vec_state,
                   m.nvalid, hck);
    // phase 0: per-(t, d) scalars
    for (int k = m.j; k < K; k += L) {
      float dl = 0.f, uv = 0.f, dyv = 0.f, fd = 1.f, fz = 0.f;
      if (k < nk) {
        const int64_t r = row0 + t0 + k;
        const float x = load_f32(p.delta + r * p.ld_delta + m.d);
        if (p.delta_bias) {
          dl = act_softplus(x + bias);
          fd = act_sigmoid(x + bias);
        } else {
          dl = x;
        }
        uv = load_f32(p.u + r * p.ld_u + m.d);
        dyv = load_f32(p.dy + r * p.ld_dy + m.d);
        if (p.z) {
          const float zv = load_f32(p.z + r * p.ld_z + m.d);
          fz = dyv * act_silu_grad(zv);  // dz = dG·y·silu'(z), y from the recompute
          dyv = dyv * act_silu(zv);      // ∂L/∂y = dG·silu(z)
        }
        if (!m.dvalid) dyv = 0.f;  // padding channels add nothing to dB/dC
      }
      sc_delta[k * CB + m.ch] = dl;
      sc_u[k * CB + m.ch] = uv;
      sc_dy[k * CB + m.ch] = dyv;
      sc_du[k * CB + m.ch] = m.dvalid ? dl * uv : 0.f;
      sc_fd[k * CB + m.ch] = fd;
      sc_fz[k * CB + m.ch] = fz;
    }
    __syncwarp();
    const T* bp = p.Bm + (row0 + t0) * p.ld_B + m.n0;
    const T* cp = p.Cm + (row0 + t0) * p.ld_C + m.n0;

    // recompute the chunk's states into hs (and, with z, y for dz)
    {
      float h[S];
#pragma unroll
      for (int s = 0; s < S; ++s) h[s] = hck[s];
#pragma unroll 2
      for (int k = 0; k < nk; ++k) {  // nk is block-uniform
        const float dl = sc_delta[k * CB + m.ch];
        const float du = sc_du[k * CB + m.ch];
        float bv[S];
        load_vec<S>(bp + k * p.ld_B, vec_bc, m.nvalid, bv);
        // sc_du is 0 on padding channels; their states then only decay (finite)
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const float dA = expm<E>(dl * a[s]);
          h[s] = fmaf(dA, h[s], du * bv[s]);
        }
        float4* slot = hs_at(k);
#pragma unroll
        for (int q4 = 0; q4 < S / 4; ++q4)
          slot[q4] = make_float4(h[4 * q4], h[4 * q4 + 1], h[4 * q4 + 2], h[4 * q4 + 3]);
        if (p.z) {  // block-uniform
          float cv[S];
          load_vec<S>(cp + k * p.ld_C, vec_bc, m.nvalid, cv);
          float yp = 0.f;
#pragma unroll
          for (int s = 0; s < S; ++s) yp = fmaf(h[s], cv[s], yp);
          const float ysum = group_sum(yp, L);
          if (m.j == (k & (L - 1)) && m.dvalid) {
            const float yv = ysum + __fmul_rn(Dd, sc_u[k * CB + m.ch]);
            store_rn(p.dz + (row0 + t0 + k) * p.ld_dz + m.d, sc_fz[k * CB + m.ch] * yv);
          }
        }
      }
    }

    // walk the chunk backwards, Q steps per dB/dC batch
    for (int qb = (nk - 1) / Q; qb >= 0; --qb) {
#pragma unroll 2
      for (int kk = Q - 1; kk >= 0; --kk) {
        const int k = qb * Q + kk;
        if (k < nk) {  // block-uniform
          const float dl = sc_delta[k * CB + m.ch];
          const float uv = sc_u[k * CB + m.ch];
          const float dyv = sc_dy[k * CB + m.ch];
          float bv[S], cv[S], hp[S];
          load_vec<S>(bp + k * p.ld_B, vec_bc, m.nvalid, bv);
          load_vec<S>(cp + k * p.ld_C, vec_bc, m.nvalid, cv);
          if (k > 0) {
            const float4* prev = hs_at(k - 1);
#pragma unroll
            for (int q4 = 0; q4 < S / 4; ++q4) {
              const float4 v = prev[q4];
              hp[4 * q4] = v.x;
              hp[4 * q4 + 1] = v.y;
              hp[4 * q4 + 2] = v.z;
              hp[4 * q4 + 3] = v.w;
            }
          } else {
#pragma unroll
            for (int s = 0; s < S; ++s) hp[s] = hck[s];
          }
          float S1 = 0.f, S2 = 0.f;
#pragma unroll
          for (int s = 0; s < S; ++s) {
            const float dA = expm<E>(dl * a[s]);
            dh[s] = fmaf(dAn[s], dh[s], dyv * cv[s]);
            const float dhP = dh[s] * (dA * hp[s]);
            dal[s] = fmaf(dl, dhP, dal[s]);
            S2 = fmaf(a[s], dhP, S2);
            S1 = fmaf(dh[s], bv[s], S1);
            dAn[s] = dA;
          }
          // this warp's dh tile row (kk, wch)
          float4* td = reinterpret_cast<float4*>(my_tile_dh + (kk * CW + wch) * DP + m.n0);
#pragma unroll
          for (int q4 = 0; q4 < S / 4; ++q4)
            td[q4] = make_float4(dh[4 * q4], dh[4 * q4 + 1], dh[4 * q4 + 2], dh[4 * q4 + 3]);
          S1 = group_sum(S1, L);
          S2 = group_sum(S2, L) * exp_coef_inverse<E>();
          dD_acc = fmaf(dyv, uv, dD_acc);
          if (m.j == (k & (L - 1)) && m.dvalid) {
            const int64_t r = row0 + t0 + k;
            store_rn(p.d_delta + r * p.ld_dd + m.d, fmaf(uv, S1, S2) * sc_fd[k * CB + m.ch]);
            store_rn(p.du + r * p.ld_du + m.d, fmaf(dl, S1, __fmul_rn(Dd, dyv)));
          }
        }
      }
      __syncwarp();
      // warp-level sums over the warp's CW channels: unit = (q, kk, n-quad);
      // q = 0: dB = Σ (δ·u)·dh from the tile, q = 1: dC = Σ dy·h_t from hs
      {
        float* ws = wsum + size_t(buf) * W * 2 * Q * DP + size_t(m.warp) * 2 * Q * DP;
        const int nq = DP / 4;
        const int units = 2 * Q * nq;
        for (int u = m.lane; u < units; u += 32) {
          const int q = u / (Q * nq);
          const int kk = (u / nq) % Q;
          const int n4 = (u % nq) * 4;
          const int k = qb * Q + kk;
          const float* sc = (q == 0 ? sc_du : sc_dy) + k * CB + m.warp * CW;
          // the thread that holds states n4.. of channel cc of this warp
          const int lane_of = n4 / S, sub = (n4 % S) / 4;
          float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
          for (int cc = 0; cc < CW; ++cc) {
            const float w = sc[cc];
            const float4 v =
                q == 0 ? reinterpret_cast<const float4*>(my_tile_dh + (kk * CW + cc) * DP + n4)[0]
                       : hs_at(k)[sub + (m.warp * 32 + cc * L + lane_of - int(threadIdx.x)) *
                                            (S / 4)];
            acc.x = fmaf(w, v.x, acc.x);
            acc.y = fmaf(w, v.y, acc.y);
            acc.z = fmaf(w, v.z, acc.z);
            acc.w = fmaf(w, v.w, acc.w);
          }
          reinterpret_cast<float4*>(ws + (q * Q + kk) * DP + n4)[0] = acc;
        }
      }
      __syncthreads();  // every warp's sums of this batch are in wsum[buf]
      // block sums (warps ascending) -> the block's partials of rows t0 + qb·Q + kk
      {
        const float* wb = wsum + size_t(buf) * W * 2 * Q * DP;
        const int outs = 2 * Q * int(p.ds);
        for (int o = int(threadIdx.x); o < outs; o += int(blockDim.x)) {
          const int q = o / (Q * int(p.ds));
          const int kk = (o / int(p.ds)) % Q;
          const int n = o % int(p.ds);
          const int64_t t = t0 + qb * Q + kk;
          if (t < p.T) {
            float acc = 0.f;
            for (int w = 0; w < W; ++w) acc += wb[size_t(w) * 2 * Q * DP + (q * Q + kk) * DP + n];
            float* part = q == 0 ? p.dB_part : p.dC_part;
            part[((row0 + t) * g.nblk_d + m.dblk) * p.ds + n] = acc;
          }
        }
      }
      buf ^= 1;  // the next batch fills the other buffer; this one is read until the next barrier
    }
    __syncthreads();  // hs, the scalars and the tiles are rewritten by the next chunk
  }

  if (m.dvalid && m.nvalid > 0) {
    float out[S];
    load_vec<S>(p.a_neg + m.d * p.ds + m.n0, g.vec_state && m.nvalid == S, m.nvalid, out);
#pragma unroll
    for (int s = 0; s < S; ++s) out[s] *= dal[s];  // dA_log = A·Σ δ·dh·P
    store_states<S>(p.dAlog_part + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid, out);
    if (p.dh0) {
#pragma unroll
      for (int s = 0; s < S; ++s) out[s] = dAn[s] * dh[s];  // ∂L/∂h_{-1} = dA_0·∂L/∂h_0
      store_states<S>(p.dh0 + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid, out);
    }
  }
  if (m.dvalid && m.j == 0) p.dD_part[m.b * p.di + m.d] = dD_acc;
}

}  // namespace mc::kern::scan_detail
