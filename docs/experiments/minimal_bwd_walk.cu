// docs/experiments/minimal_bwd_walk.cu — not product code: the smallest backward walk we can
// write in the checkpointed scan's d_state <= 16 layout (4 states a thread, 4 lanes a channel,
// 8 channels a warp, 4 warps a block), compiled only so that count_sass.py can count its SASS
// instructions a step. It answers one question for a rewrite of ckpt_bwd_kernel
// (kernels/scan/ckpt_kernels.cuh): how many instructions a step does the walk's arithmetic
// cost in this layout with nothing else in it: no staging, no bf16 unpacking, no segment
// logic, f32 inputs already in shared memory. The values are never meant to be right (no
// recompute fills hs); nothing launches this kernel.
//
// Two ways to sum the dB / dC terms over d (MC_DSUM):
//   0  the layout's warp reduce-scatter (3 xor levels over the warp's 8 channels, a select
//      per value and level, as ckpt_kernels.cuh does), one value a lane a step to shared;
//   1  no shuffles: every lane stores its 8 terms a step (two 16-byte stores) into a chunk
//      tile, and after the chunk each thread sums one (step, dB|dC, 4 states) float4 over the
//      block's 32 channels from shared memory.
//   2  as 1 without the sums (one run-time read keeps the stores): count_sass.py takes the
//      sums' own code as the difference of 1 and 2.
// K (steps a chunk, fully unrolled) is a compile-time define, so that the count of K = 16
// minus the count of K = 8 is exactly 8 steps of the walk.
#include <cuda_runtime.h>

#include "docs/experiments/walk_common.cuh"

#ifndef K
#define K 8
#endif
#ifndef MC_DSUM
#define MC_DSUM 0
#endif

namespace {
constexpr int S = 4, CB = 32, NT = 128;

using walk_count::ex2;
using walk_count::rs_level;

struct __align__(16) Smem {
  float delta[K][CB], u[K][CB], dy[K][CB];  // the chunk's per-(t, d) scalars
  float Bm[K][16], Cm[K][16];               // the chunk's B and C rows
  float hs[K + 1][NT * S];                  // the recomputed states, slot k = before step k
  float s12[K][2][NT];                      // the lanes' S1, S2 partials (summed later)
#if MC_DSUM == 0
  float ws[K][4][32];                       // the warps' reduce-scattered dB/dC sums
#else
  float terms[K][2][CB][16];                // every channel's dB/dC terms of the chunk
#endif
};
}  // namespace

// grid: any; block: 128 threads; dynamic shared memory sizeof(Smem). a: [128, 4].
__global__ void __launch_bounds__(NT, 3) minimal_bwd_walk(const float* __restrict__ a_in,
                                                          float* out, int nchunks) {
  extern __shared__ __align__(16) unsigned char raw[];
  Smem& sm = *reinterpret_cast<Smem*>(raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = lane & 3;
  const int ch = warp * 8 + (lane >> 2);
  float a[S], dh[S], dAn[S], dal[S];
  walk_count::init_walk<S>(a_in, a, dh, dAn, dal);
  float dD = 0.f;
  for (int c = 0; c < nchunks; ++c) {
    __syncthreads();
    float hcur[S];
    *reinterpret_cast<float4*>(hcur) = *reinterpret_cast<const float4*>(&sm.hs[K][threadIdx.x * S]);
#pragma unroll
    for (int k = K - 1; k >= 0; --k) {
      const float dl = sm.delta[k][ch], uv = sm.u[k][ch], dyv = sm.dy[k][ch];
      float bv[S], cv[S], hp[S];
      *reinterpret_cast<float4*>(bv) = *reinterpret_cast<const float4*>(&sm.Bm[k][j * S]);
      *reinterpret_cast<float4*>(cv) = *reinterpret_cast<const float4*>(&sm.Cm[k][j * S]);
      *reinterpret_cast<float4*>(hp) = *reinterpret_cast<const float4*>(&sm.hs[k][threadIdx.x * S]);
      float S1 = 0.f, S2 = 0.f, v[2 * S];
      const float w = dl * uv;
      // the per-state arithmetic of ckpt_bwd_kernel's walk (ckpt_kernels.cuh), copied on
      // purpose: this file exists to count it alone
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const float dA = ex2(dl * a[s]);
        dh[s] = fmaf(dAn[s], dh[s], dyv * cv[s]);
        const float dhP = dh[s] * (dA * hp[s]);
        dal[s] = fmaf(dl, dhP, dal[s]);
        S2 = fmaf(a[s], dhP, S2);
        S1 = fmaf(dh[s], bv[s], S1);
        dAn[s] = dA;
        v[s] = w * dh[s];
        v[S + s] = dyv * hcur[s];
        hcur[s] = hp[s];
      }
#if MC_DSUM == 0
      rs_level<8, 16>(v, lane);
      rs_level<4, 8>(v, lane);
      rs_level<2, 4>(v, lane);
      sm.ws[k][warp][lane] = v[0];
#else
      *reinterpret_cast<float4*>(&sm.terms[k][0][ch][j * S]) = make_float4(v[0], v[1], v[2], v[3]);
      *reinterpret_cast<float4*>(&sm.terms[k][1][ch][j * S]) = make_float4(v[4], v[5], v[6], v[7]);
#endif
      sm.s12[k][0][threadIdx.x] = S1;
      sm.s12[k][1][threadIdx.x] = S2;
      dD = fmaf(dyv, uv, dD);
    }
    __syncthreads();
#if MC_DSUM == 1
    // K·2·4 float4 sums a chunk, over the 32 channels, channels ascending: at K = 16 exactly
    // one for each of the 128 threads (so its code runs once a thread a chunk)
    if (threadIdx.x < K * 2 * 4) {
      const int o = threadIdx.x, k = o / 8, q = (o / 4) % 2, n0 = (o % 4) * 4;
      float4 acc = *reinterpret_cast<const float4*>(&sm.terms[k][q][0][n0]);
#pragma unroll
      for (int d = 1; d < CB; ++d) {
        const float4 x = *reinterpret_cast<const float4*>(&sm.terms[k][q][d][n0]);
        acc.x += x.x; acc.y += x.y; acc.z += x.z; acc.w += x.w;
      }
      reinterpret_cast<float4*>(out)[(c * K * 2 * 4) + o] = acc;
    }
#endif
    // a reader at a run-time index, so that no shared-memory store above is dead
    const int q = (threadIdx.x + c) % K;
#if MC_DSUM == 0
    out[c * NT + threadIdx.x] += sm.ws[q][warp][lane] + sm.s12[q][0][threadIdx.x] + sm.s12[q][1][threadIdx.x];
#elif MC_DSUM == 2
    out[c * NT + threadIdx.x] += sm.terms[q][c & 1][lane][warp] + sm.s12[q][0][threadIdx.x] + sm.s12[q][1][threadIdx.x];
#else
    out[c * NT + threadIdx.x] += sm.s12[q][0][threadIdx.x] + sm.s12[q][1][threadIdx.x];
#endif
  }
  out[threadIdx.x] += dD + dal[0] + dal[1] + dal[2] + dal[3] + dh[0] + dh[1] + dh[2] + dh[3];
}
