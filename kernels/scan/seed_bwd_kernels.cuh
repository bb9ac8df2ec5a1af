// seed_bwd_kernels.cuh — backward selective-scan kernels (docs/math.md B3),
// device code only (the launcher is scan_bwd.cuh), templated on the storage
// type T.
//
// Per (b, d, n), walking t = T-1..0 with e = dA_{t+1}·dh_{t+1} (e_T = dh_final or 0):
//   dA     = exp(δ_t·A[n])                       (recomputed; not stored by the forward)
//   dh     = dy_t·C_t[n] + e
//   dCp    = dy_t·h_t[n]          (h_t = h_saved[t+1])   -> partial [b,t,d,n]
//   dBp    = dh·(δ_t·u_t)                                 -> partial [b,t,d,n]
//   dδ_t  += dh·(A[n]·dA·h_{t-1}[n] + u_t·B_t[n])         (h_{t-1} = h_saved[t])
//   du_t  += dh·δ_t·B_t[n]        (plus dy_t·D[d] once)
//   dA_log[n] += dh·dA·δ_t·A[n]·h_{t-1}[n]                (∂A/∂A_log = A)
//   e      = dA·dh
// and dD += Σ_t dy_t·u_t; after t = 0, e = ∂L/∂h_init -> dh0.
// Carrying e instead of dh makes the reverse recurrence use step-t data only:
// e_t = dA_t·(dy_t·C_t + e_{t+1}), an affine map e_{t+1} -> α·e_{t+1} + β, which
// is what the parallel kernel composes per segment.
//
// Outputs of the kernels (all "=", no atomics): d_delta, du (typed, RN), the
// f32 partials dB_part/dC_part [B,T,ngrp,ds] (kept in f32 for every dtype — spec
// pitfall 18 avoided; ngrp = di, or di/dt when the parallel kernel groups dt
// channels per block and pre-sums them in ascending d), dAlog_part [B,di,ds],
// dD_part [B,di], dh0. Fixed-order reduction kernels (scan_reduce.cu) then sum
// over the channel groups and over b.
//
// Parallel kernel: same segmented-lanes layout as the forward (seed_fwd_kernels.cuh),
// walked backwards: chunks from last to first, inside a chunk the segment
// prefix composes the LATER segments (g_end down to g+1) onto the carry from
// the next chunk; the first segment's final e is the carry for the previous
// chunk (and dh0 for chunk 0). With dt > 1 the block repeats that for each of
// its dt channels inside every chunk (per-channel carries in shared memory).
#pragma once

#include "kernels/scan/seed_common.cuh"
#include "kernels/scan/exp_math.cuh"

namespace mc::kern::scan_detail {

// ---- sequential --------------------------------------------------------------------
// grid_1d(B*di) x kSeqThreads; thread (b, d) loops t = T-1..0 and n = 0..ds-1.
// Registers: e[64], dal[64]; A is re-read from a_neg (L1) to keep spills away.
template <class T>
__global__ void __launch_bounds__(kSeqThreads, kMinSeqBlocks) scan_bwd_seq_kernel(BwdArgs<T> p) {
  const ScanShape& s = p.s;
  const int64_t bd = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // = b*di + d
  if (bd >= s.B * s.di) return;  // grid tail only
  const int64_t b = bd / s.di, d = bd - b * s.di;
  const int ds = int(s.ds);
  const float* a_row = p.a_neg + d * s.ds;
  const float Dd = p.D[d];

  float e[kSeqMaxState];    // dA_{t+1}·dh_{t+1}
  float dal[kSeqMaxState];  // Σ_t dh·dA·δ·A·h_{t-1}
#pragma unroll
  for (int n = 0; n < kSeqMaxState; ++n) {
    e[n] = (n < ds && p.dh_final) ? p.dh_final[bd * s.ds + n] : 0.f;
    dal[n] = 0.f;
  }
  float dD_acc = 0.f;

  for (int64_t t = s.T - 1; t >= 0; --t) {
    const int64_t ia = act_idx(s, b, t, d);
    const float dl = load_f32(p.delta + ia);
    const float uv = load_f32(p.u + ia);
    const float dyv = load_f32(p.dy + ia);
    const float dlu = dl * uv;
    dD_acc = fmaf(dyv, uv, dD_acc);
    float du_acc = __fmul_rn(dyv, Dd);
    float dd_acc = 0.f;
    const T* Brow = p.Bm + bc_idx(s, b, t, 0);
    const T* Crow = p.Cm + bc_idx(s, b, t, 0);
    const float* hc_row = p.h_saved + hs_idx(s, b, t + 1, d, 0);  // h_t
    const float* hp_row = p.h_saved + hs_idx(s, b, t, d, 0);      // h_{t-1}
    float* dBp = p.dB_part + part_idx(s, s.di, b, t, d, 0);
    float* dCp = p.dC_part + part_idx(s, s.di, b, t, d, 0);
#pragma unroll
    for (int n = 0; n < kSeqMaxState; ++n) {
      if (n < ds) {
        const float a = __ldg(a_row + n);
        const float bv = load_f32(Brow + n);
        const float cv = load_f32(Crow + n);
        const float hp = __ldg(hp_row + n);
        const float dA = scan_expf(dl * a);
        const float dh = fmaf(dyv, cv, e[n]);
        dCp[n] = dyv * __ldg(hc_row + n);
        dBp[n] = dh * dlu;
        dd_acc = fmaf(dh, fmaf(a * dA, hp, uv * bv), dd_acc);
        du_acc = fmaf(dh, dl * bv, du_acc);
        dal[n] = fmaf(dh * dA, dl * a * hp, dal[n]);
        e[n] = dA * dh;
      }
    }
    store_rn(p.d_delta + ia, dd_acc);
    store_rn(p.du + ia, du_acc);
  }
#pragma unroll
  for (int n = 0; n < kSeqMaxState; ++n) {
    if (n < ds) {
      p.dAlog_part[bd * s.ds + n] = dal[n];
      if (p.dh0) p.dh0[bd * s.ds + n] = e[n];
    }
  }
  p.dD_part[bd] = dD_acc;
}

// ---- parallel ------------------------------------------------------------------------
// grid (B * ngrp) x geo.threads, ngrp = ceil(di / geo.dt). Block (b, grp) runs the
// channels d = grp·dt .. grp·dt + dt − 1 one after another through each chunk, so
// with dt > 1 (d_state <= 64, see bwd_par_geom) it sums their dB/dC terms in a
// shared-memory tile (d ascending) and writes one partial per (b, t, grp, n):
// dt times less partial traffic than one per (b, t, d, n). Dynamic smem
// par_bwd_smem_floats(geo, ds) floats:
//   agg_a [groups][ds] | agg_b [groups][ds] | carry [dt][2][ds] | dal [dt][groups][ds] |
//   rdd [sw][part_ld] | rdu [sw][part_ld] | red [dt][threads] | tile_b, tile_c [items][groups][ds]
// (the tile only when dt > 1). Every tile, dal and red entry is owned by one thread.
template <class T>
__global__ void __launch_bounds__(kMaxParThreads, kMinParBlocks)
    scan_bwd_par_kernel(BwdArgs<T> p, ParGeom geo) {
  extern __shared__ float smem[];
  const ScanShape& s = p.s;
  const int64_t ngrp = (s.di + geo.dt - 1) / geo.dt;
  const int64_t b = blockIdx.x / ngrp, grp = blockIdx.x - b * ngrp;
  const int64_t d0 = grp * geo.dt;
  const int ndt = int(min(int64_t(geo.dt), s.di - d0));
  const bool tiled = geo.dt > 1;
  const int ds = int(s.ds);
  const int SW = geo.sw, G = geo.groups, CT = geo.chunk, NT = geo.threads;
  const int tid = threadIdx.x;
  const int j = tid & (SW - 1);  // state lane
  const int g = tid / SW;        // time segment
  const int r_ld = part_ld(geo);

  float* agg_a = smem;
  float* agg_b = agg_a + G * ds;
  float* carry = agg_b + G * ds;
  float* dal = carry + 2 * geo.dt * ds;
  float* rdd = dal + geo.dt * G * ds;
  float* rdu = rdd + SW * r_ld;
  float* red = rdu + SW * r_ld;
  float* tile_b = red + geo.dt * NT;
  float* tile_c = tile_b + (tiled ? kItems * G * ds : 0);

  for (int i = tid; i < ndt * ds; i += NT) {
    const int dd = i / ds, n = i - dd * ds;
    carry[(2 * dd) * ds + n] = p.dh_final ? p.dh_final[(b * s.di + d0 + dd) * s.ds + n] : 0.f;
    carry[(2 * dd + 1) * ds + n] = 0.f;
  }
  for (int i = tid; i < ndt * G * ds; i += NT) dal[i] = 0.f;
  for (int dd = 0; dd < ndt; ++dd) red[dd * NT + tid] = 0.f;  // Σ dy·u of the outputs of tid
  // (made visible by the first barrier below)

  for (int64_t cc = 0; cc < geo.nchunks; ++cc) {
    const int64_t c = geo.nchunks - 1 - cc;  // chunks last to first
    const int64_t c0 = c * CT;
    const int64_t t0 = c0 + int64_t(g) * kItems;
    const int nvalid = int(max(int64_t(0), min(int64_t(kItems), s.T - t0)));
    const int g_end = int(min(int64_t(G - 1), (s.T - 1 - c0) / kItems));

    for (int dd = 0; dd < ndt; ++dd) {
      const int64_t d = d0 + dd, bd = b * s.di + d;
      const float* a_row = p.a_neg + d * s.ds;
      const float Dd = p.D[d];
      const float* carry_in = carry + (2 * dd + (cc & 1)) * ds;
      float* carry_out = carry + (2 * dd + ((cc + 1) & 1)) * ds;

      float dl[kItems], uu[kItems], dyv[kItems], pdd[kItems], pdu[kItems];
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        dl[k] = 0.f;
        uu[k] = 0.f;
        dyv[k] = 0.f;
        pdd[k] = 0.f;
        pdu[k] = 0.f;
        if (k < nvalid) {
          const int64_t ia = act_idx(s, b, t0 + k, d);
          dl[k] = load_f32(p.delta + ia);
          uu[k] = load_f32(p.u + ia);
          dyv[k] = load_f32(p.dy + ia);
        }
      }

      // pass 1: reverse aggregates e_in -> α·e_in + β, needed only by earlier
      // segments (0 < g <= g_end). (dA is recomputed in pass 2: keeping it, as the
      // forward does, spills at 128 registers.)
      if (g > 0 && g <= g_end) {
        for (int n = j; n < ds; n += SW) {
          const float a = a_row[n];
          const T* Ccol = p.Cm + bc_idx(s, b, t0, n);
          float A = 1.f, Bc = 0.f;
#pragma unroll
          for (int k = kItems - 1; k >= 0; --k) {
            if (k < nvalid) {
              const float dA = scan_expf(dl[k] * a);
              A *= dA;
              Bc = dA * fmaf(dyv[k], load_f32(Ccol + k * s.ld_bc), Bc);
            }
          }
          agg_a[g * ds + n] = A;
          agg_b[g * ds + n] = Bc;
        }
      }
      __syncthreads();

      // pass 2: suffix from later segments, then re-run the segment backwards
      if (g <= g_end) {
        const int64_t hs_step = s.di * s.ds;
        const int64_t part_step = ngrp * s.ds;
        for (int n = j; n < ds; n += SW) {
          const float a = a_row[n];
          float e = carry_in[n];
          for (int gp = g_end; gp > g; --gp) e = fmaf(agg_a[gp * ds + n], e, agg_b[gp * ds + n]);
          const T* Bcol = p.Bm + bc_idx(s, b, t0, n);
          const T* Ccol = p.Cm + bc_idx(s, b, t0, n);
          const float* hs = p.h_saved + hs_idx(s, b, t0, d, n);  // row t0 = h_{t0-1}
          float* dBp = p.dB_part + part_idx(s, ngrp, b, t0, grp, n);
          float* dCp = p.dC_part + part_idx(s, ngrp, b, t0, grp, n);
          float hc = __ldg(hs + nvalid * hs_step);  // h_t for the last valid t of the segment
          float dal_seg = 0.f;
#pragma unroll
          for (int k = kItems - 1; k >= 0; --k) {
            if (k < nvalid) {
              const float hp = __ldg(hs + k * hs_step);
              const float bv = load_f32(Bcol + k * s.ld_bc);
              const float cv = load_f32(Ccol + k * s.ld_bc);
              const float dA = scan_expf(dl[k] * a);
              const float dh = fmaf(dyv[k], cv, e);
              // Products and sums spelled out (__fmul_rn/__fadd_rn cannot be contracted):
              // left to the compiler, the tile's `*tc + dy·h` became one FFMA on the
              // device but not in the host emulation (test_scan_emulation_bits, dt = 2).
              float gB = __fmul_rn(dh, __fmul_rn(dl[k], uu[k]));
              float gC = __fmul_rn(dyv[k], hc);
              if (tiled) {  // Σ over this block's channels, d ascending, in the owned tile entry
                float* tb = tile_b + (k * G + g) * ds + n;
                float* tc = tile_c + (k * G + g) * ds + n;
                if (dd > 0) {
                  gB = __fadd_rn(*tb, gB);
                  gC = __fadd_rn(*tc, gC);
                }
                *tb = gB;
                *tc = gC;
              }
              if (dd == ndt - 1) {
                dBp[k * part_step] = gB;
                dCp[k * part_step] = gC;
              }
              pdd[k] = fmaf(dh, fmaf(a * dA, hp, uu[k] * bv), pdd[k]);
              pdu[k] = fmaf(dh, dl[k] * bv, pdu[k]);
              dal_seg = fmaf(dh * dA, dl[k] * a * hp, dal_seg);
              e = dA * dh;
              hc = hp;
            }
          }
          dal[(dd * G + g) * ds + n] += dal_seg;  // entry owned by this thread
          if (g == 0) {
            carry_out[n] = e;
            if (c == 0 && p.dh0) p.dh0[bd * s.ds + n] = e;
          }
        }
#pragma unroll
        for (int k = 0; k < kItems; ++k) {
          rdd[j * r_ld + g * kItemStride + k] = pdd[k];
          rdu[j * r_ld + g * kItemStride + k] = pdu[k];
        }
      }
      __syncthreads();

      // output: one thread per slot q = g*kItemStride + k, lanes summed in ascending j
      for (int q = tid; q < G * kItemStride; q += NT) {
        const int k = q % kItemStride;
        const int64_t t = c0 + int64_t(q / kItemStride) * kItems + k;
        if (k < kItems && t < s.T) {
          const int64_t ia = act_idx(s, b, t, d);
          const float dyt = load_f32(p.dy + ia);
          red[dd * NT + tid] = fmaf(dyt, load_f32(p.u + ia), red[dd * NT + tid]);
          float sdd = 0.f, sdu = __fmul_rn(dyt, Dd);
          for (int jj = 0; jj < SW; ++jj) {
            sdd += rdd[jj * r_ld + q];
            sdu += rdu[jj * r_ld + q];
          }
          store_rn(p.d_delta + ia, sdd);
          store_rn(p.du + ia, sdu);
        }
      }
      // rdd/rdu/agg/carry_in are next written after the next first barrier.
    }
  }

  // dA_log partials: Σ over segments g ascending; dD partials: Σ over threads ascending.
  __syncthreads();
  for (int i = tid; i < ndt * ds; i += NT) {
    const int dd = i / ds, n = i - dd * ds;
    float acc = 0.f;
    for (int gg = 0; gg < G; ++gg) acc += dal[(dd * G + gg) * ds + n];
    p.dAlog_part[(b * s.di + d0 + dd) * s.ds + n] = acc;
  }
  for (int dd = tid; dd < ndt; dd += NT) {
    float acc = 0.f;
    for (int i = 0; i < NT; ++i) acc += red[dd * NT + i];
    p.dD_part[b * s.di + d0 + dd] = acc;
  }
}

}  // namespace mc::kern::scan_detail
