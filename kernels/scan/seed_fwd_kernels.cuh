// scan_fwd_kernels.cuh — forward selective-scan kernels (spec §3.2 F4d),
// device code only (the launcher is scan_fwd.cuh), templated on the storage
// type T and on whether h_saved is written (the nosave twin serves the target
// forward).
//
// Per (b, d), with A = a_neg[d, :] and h loaded from the initial state:
//   h_saved[b, 0, d, :] = h
//   for t: dA = exp(δ_t·A[n]); h[n] = dA·h[n] + (δ_t·u_t)·Bm[b,t,n]
//          y[b,t,d] = D[d]·u_t + Σ_n h[n]·Cm[b,t,n];  h_saved[b, t+1, d, :] = h
//   final h written back.
// All arithmetic f32. exp is scan_expf (exp_math.cuh: ~0.6 ulp, unbiased, no
// MUFU) on the same f32 argument δ·A the oracle exponentiates — neither CUDA's
// 2-ulp expf nor mamba-rs's exp2f(δ·(A·log2e)). Every multiply-add is an
// explicit fmaf and the few products that must not be contracted use
// __fmul_rn, so the arithmetic is fixed at the source level (and a host
// emulation build reproduces it bit for bit: validation/gpu/test_scan_emulation_bits.cpp).
//
// Sequential kernel: one thread per (b, d), state in registers (ds <= 64,
// arrays unrolled to 64 with a run-time guard; no template on d_state).
//
// Parallel kernel ("segmented lanes"): one block per (b, d) (blockIdx.x = b*di + d).
// Lane j of a group of sw lanes owns states n = j, j+sw, ...; the group g owns
// the kItems consecutive timesteps [c0 + g*kItems, +kItems) of chunk c. Per chunk:
//   pass 1  each thread composes its segment into an affine map h -> A·h + Bc
//           per state (the pair (A, Bc)); stored to smem agg[g][n]
//   sync
//   pass 2  h_in(g) = agg[g-1] ∘ ... ∘ agg[0] applied to the chunk carry (fixed
//           ascending order), then the thread re-runs its kItems steps from h_in:
//           stores h_saved (a group writes ds contiguous floats per t: coalesced),
//           y partials per lane -> smem; the group holding the chunk's last valid
//           step writes the next chunk's carry (double-buffered smem)
//   sync
//   output  one thread per t: y = D·u + Σ_j partial_j (j ascending)
// Timesteps t >= T are identity pairs: they are skipped outright (never loaded,
// never composed), so padding cannot leak into the state (mamba #368). The
// chunk carry, the written-back final state and h_saved[:, T] are the same
// value bit for bit (all from the same re-run; test_scan_parity.cpp checks the last two). No atomics; every sum has a
// fixed order that depends only on (T, ds).
#pragma once

#include "kernels/scan/seed_common.cuh"
#include "kernels/scan/exp_math.cuh"

namespace mc::kern::scan_detail {

// ---- sequential --------------------------------------------------------------------
// grid_1d(B*di) x kSeqThreads; thread (b, d) loops t = 0..T-1 and n = 0..ds-1.
//   δ, u [B, T, di] T, B/C [B*T, ld_bc] T, a_neg [di, ds], D [di], h [B, di, ds] (in/out)
//   -> y [B, T, di] T, h_saved [B, T+1, di, ds] f32 (kSave)
template <class T, bool kSave>
__global__ void __launch_bounds__(kSeqThreads, kMinSeqBlocks)
    scan_fwd_seq_kernel(FwdArgs<T> p, bool vec4) {
  const ScanShape& s = p.s;
  const int64_t bd = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // = b*di + d
  if (bd >= s.B * s.di) return;  // grid tail only
  const int64_t b = bd / s.di, d = bd - b * s.di;
  const int ds = int(s.ds);
  const float* a_row = p.a_neg + d * s.ds;
  float* h_state = p.h + bd * s.ds;  // [B, di, ds] row of (b, d)
  const float Dd = p.D[d];

  float h[kSeqMaxState];
  float a[kSeqMaxState];
#pragma unroll
  for (int n = 0; n < kSeqMaxState; ++n) {
    h[n] = n < ds ? h_state[n] : 0.f;
    a[n] = n < ds ? a_row[n] : 0.f;
  }
  if (kSave) {
#pragma unroll
    for (int n = 0; n < kSeqMaxState; ++n)
      if (n < ds) p.h_saved[hs_idx(s, b, 0, d, n)] = h[n];
  }

  for (int64_t t = 0; t < s.T; ++t) {
    const int64_t ia = act_idx(s, b, t, d);
    const float dl = load_f32(p.delta + ia);
    const float uv = load_f32(p.u + ia);
    const float du = dl * uv;
    const T* Brow = p.Bm + bc_idx(s, b, t, 0);
    const T* Crow = p.Cm + bc_idx(s, b, t, 0);
    float y = __fmul_rn(Dd, uv);
#pragma unroll
    for (int n = 0; n < kSeqMaxState; ++n) {
      if (n < ds) {
        const float dA = scan_expf(dl * a[n]);
        h[n] = fmaf(dA, h[n], du * load_f32(Brow + n));
        y = fmaf(h[n], load_f32(Crow + n), y);
      }
    }
    if (kSave) {
      float* row = p.h_saved + hs_idx(s, b, t + 1, d, 0);
      if (vec4) {  // ds % 4 == 0 and h_saved 16-byte aligned (checked by the launcher)
#pragma unroll
        for (int n = 0; n < kSeqMaxState; n += 4)
          if (n < ds)
            *reinterpret_cast<float4*>(row + n) = make_float4(h[n], h[n + 1], h[n + 2], h[n + 3]);
      } else {
#pragma unroll
        for (int n = 0; n < kSeqMaxState; ++n)
          if (n < ds) row[n] = h[n];
      }
    }
    store_rn(p.y + ia, y);
  }
#pragma unroll
  for (int n = 0; n < kSeqMaxState; ++n)
    if (n < ds) h_state[n] = h[n];
}

// ---- parallel ------------------------------------------------------------------------
// grid (B*di) x geo.threads, dynamic smem par_fwd_smem_floats(geo, ds) floats:
//   agg_a [groups][ds] | agg_b [groups][ds] | carry [2][ds] | ys [sw][part_ld]
template <class T, bool kSave>
__global__ void __launch_bounds__(kMaxParThreads, kMinParBlocks)
    scan_fwd_par_kernel(FwdArgs<T> p, ParGeom geo) {
  extern __shared__ float smem[];
  const ScanShape& s = p.s;
  const int64_t bd = blockIdx.x;  // = b*di + d
  const int64_t b = bd / s.di, d = bd - b * s.di;
  const int ds = int(s.ds);
  const int SW = geo.sw, G = geo.groups, CT = geo.chunk;
  const int tid = threadIdx.x;
  const int j = tid & (SW - 1);  // state lane
  const int g = tid / SW;        // time segment
  const int ys_ld = part_ld(geo);

  float* agg_a = smem;
  float* agg_b = agg_a + G * ds;
  float* carry = agg_b + G * ds;
  float* ys = carry + 2 * ds;

  const float* a_row = p.a_neg + d * s.ds;
  float* h_state = p.h + bd * s.ds;
  const float Dd = p.D[d];

  for (int n = tid; n < ds; n += blockDim.x) {
    const float h0 = h_state[n];
    carry[n] = h0;
    if (kSave) p.h_saved[hs_idx(s, b, 0, d, n)] = h0;
  }
  // (made visible by the first barrier below; h_state is rewritten only in the last chunk)

  for (int64_t c = 0; c < geo.nchunks; ++c) {
    const int64_t c0 = c * CT;
    const int64_t t0 = c0 + int64_t(g) * kItems;
    const int nvalid = int(max(int64_t(0), min(int64_t(kItems), s.T - t0)));
    const int g_end = int(min(int64_t(G - 1), (s.T - 1 - c0) / kItems));  // last segment with steps
    const float* carry_in = carry + (c & 1) * ds;
    float* carry_out = carry + ((c + 1) & 1) * ds;

    float dl[kItems], du[kItems], yp[kItems];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      dl[k] = 0.f;
      du[k] = 0.f;
      yp[k] = 0.f;
      if (k < nvalid) {
        const int64_t ia = act_idx(s, b, t0 + k, d);
        dl[k] = load_f32(p.delta + ia);
        du[k] = dl[k] * load_f32(p.u + ia);
      }
    }

    // pass 1: segment aggregates, needed only by later segments (g < g_end).
    // With one state per thread (ds <= sw) its dA values are kept for pass 2.
    const bool keep_dA = ds <= SW && g < g_end;
    float dAk[kItems];
    if (g < g_end) {
      for (int n = j; n < ds; n += SW) {
        const float a = a_row[n];
        const T* bp = p.Bm + bc_idx(s, b, t0, n);
        float A = 1.f, Bc = 0.f;
#pragma unroll
        for (int k = 0; k < kItems; ++k, bp += s.ld_bc) {
          if (k < nvalid) {
            const float dA = scan_expf(dl[k] * a);
            dAk[k] = dA;
            A *= dA;
            Bc = fmaf(dA, Bc, du[k] * load_f32(bp));
          }
        }
        agg_a[g * ds + n] = A;
        agg_b[g * ds + n] = Bc;
      }
    }
    __syncthreads();

    // pass 2: prefix from earlier segments, then re-run the segment
    if (g <= g_end) {
      for (int n = j; n < ds; n += SW) {
        const float a = a_row[n];
        float h = carry_in[n];
        for (int gp = 0; gp < g; ++gp) h = fmaf(agg_a[gp * ds + n], h, agg_b[gp * ds + n]);
        const T* bp = p.Bm + bc_idx(s, b, t0, n);
        const T* cp = p.Cm + bc_idx(s, b, t0, n);
        float* hs = kSave ? p.h_saved + hs_idx(s, b, t0 + 1, d, n) : nullptr;
        const int64_t hs_step = s.di * s.ds;
#pragma unroll
        for (int k = 0; k < kItems; ++k, bp += s.ld_bc, cp += s.ld_bc) {
          if (k < nvalid) {
            const float dA = keep_dA ? dAk[k] : scan_expf(dl[k] * a);
            h = fmaf(dA, h, du[k] * load_f32(bp));
            if (kSave) {
              *hs = h;
              hs += hs_step;
            }
            yp[k] = fmaf(h, load_f32(cp), yp[k]);
          }
        }
        if (g == g_end) {
          carry_out[n] = h;
          if (c == geo.nchunks - 1) h_state[n] = h;  // final state (all reads were before barrier 1)
        }
      }
#pragma unroll
      for (int k = 0; k < kItems; ++k) ys[j * ys_ld + g * kItemStride + k] = yp[k];
    }
    __syncthreads();

    // output: y = D·u + Σ_j partial_j (j ascending), one thread per slot q = g*kItemStride + k
    for (int q = tid; q < G * kItemStride; q += blockDim.x) {
      const int k = q % kItemStride;
      const int64_t t = c0 + int64_t(q / kItemStride) * kItems + k;
      if (k < kItems && t < s.T) {
        const int64_t ia = act_idx(s, b, t, d);
        float acc = __fmul_rn(Dd, load_f32(p.u + ia));
        for (int jj = 0; jj < SW; ++jj) acc += ys[jj * ys_ld + q];
        store_rn(p.y + ia, acc);
      }
    }
    // ys / agg / carry_in are next written after the next chunk's first barrier.
  }
}

}  // namespace mc::kern::scan_detail
