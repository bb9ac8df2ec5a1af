// docs/experiments/tile_bwd_walk.cu — not product code: the backward walk of a tile layout for
// d_state > 16 (CT = 4 channels x 4 states a thread; a warp's lanes are 8 state quads x 4 channel
// quads, i.e. 32 states x 16 channels; 4 warps a block over channels, 64 channels x 32 states),
// compiled only so that count_sass.py --tile can count its SASS instructions a step. It answers
// one question for a rewrite of the d_state 256 backward (ckpt_bwd_kernel's S = 8, L = 32 plan
// in kernels/scan/ckpt_kernels.cuh): what does a step cost in this layout, with the dB/dC terms
// summed over the thread's 4 channels in registers and then over the warp's 4 channel quads
// (reduce-scatter), and S1/S2 summed over the thread's 4 states and then over the warp's 8 state
// quads (reduce-scatter). Like minimal_bwd_walk.cu it has only the walk: f32 inputs already in
// shared memory, no staging, no recompute (nothing fills hs), no segment logic, and its values
// are never meant to be right; nothing launches it.
// K (steps a chunk, fully unrolled) is a compile-time define: the count of K = 16 minus the count
// of K = 8 is exactly 8 steps. CT (channels a thread, 4 or 2; default 4) is one too: at 2 a warp
// is 8 state quads x 4 channel pairs, and the S1/S2 sums end in one butterfly level.
#include <cuda_runtime.h>

#include "docs/experiments/walk_common.cuh"

#ifndef K
#define K 8
#endif
#ifndef CT
#define CT 4
#endif
#ifndef MINB  // blocks an SM that __launch_bounds__ asks for (sets the register budget)
#define MINB 1
#endif
static_assert(CT == 4 || CT == 2, "channels a thread: 4 or 2");

namespace {
constexpr int ST = 4, E = CT * ST;             // states, recurrences a thread
constexpr int NT = 128, CB = 16 * CT, SB = 32;  // threads, channels, states a block

using walk_count::ex2;
using walk_count::rs_level;

// CT consecutive floats of a shared-memory row, as one vector load
__device__ __forceinline__ void load_channels(float (&dst)[CT], const float* src) {
  if constexpr (CT == 4)
    *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
  else
    *reinterpret_cast<float2*>(dst) = *reinterpret_cast<const float2*>(src);
}

struct __align__(16) Smem {
  float delta[K][CB], u[K][CB], dy[K][CB];  // the chunk's per-(t, d) scalars
  float Bm[K][SB], Cm[K][SB];               // the chunk's B and C rows (the block's states)
  float hs[K + 1][NT * E];                  // the recomputed states, slot k = before step k
  float s12[K][4][2][CB];                   // S1, S2 per (step, state-quad group, channel)
  float ws[K][4][2][SB];                    // dB/dC per (step, warp, q, state)
};
}  // namespace

// grid: any; block: 128 threads; dynamic shared memory sizeof(Smem). a: [128, 16].
// Lane bits 0-2: the state quad (states 4·sq .. 4·sq+3); bits 3-4: the channel quad.
__global__ void __launch_bounds__(NT, MINB) tile_bwd_walk(const float* __restrict__ a_in, float* out,
                                                       int nchunks) {
  extern __shared__ __align__(16) unsigned char raw[];
  Smem& sm = *reinterpret_cast<Smem*>(raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sq = lane & 7, cq = lane >> 3;
  const int c0 = warp * 4 * CT + cq * CT, s0 = sq * ST;  // the thread's first channel and state
  float a[E], dh[E], dAn[E], dal[E];
  walk_count::init_walk<E>(a_in, a, dh, dAn, dal);
  float dD[CT] = {};
  for (int c = 0; c < nchunks; ++c) {
    __syncthreads();
    float hcur[E];
#pragma unroll
    for (int i = 0; i < E / 4; ++i)
      *reinterpret_cast<float4*>(hcur + 4 * i) =
          *reinterpret_cast<const float4*>(&sm.hs[K][threadIdx.x * E + 4 * i]);
#pragma unroll
    for (int k = K - 1; k >= 0; --k) {
      float dl[CT], uv[CT], dyv[CT], bv[ST], cv[ST], hp[E];
      load_channels(dl, &sm.delta[k][c0]);
      load_channels(uv, &sm.u[k][c0]);
      load_channels(dyv, &sm.dy[k][c0]);
      *reinterpret_cast<float4*>(bv) = *reinterpret_cast<const float4*>(&sm.Bm[k][s0]);
      *reinterpret_cast<float4*>(cv) = *reinterpret_cast<const float4*>(&sm.Cm[k][s0]);
#pragma unroll
      for (int i = 0; i < E / 4; ++i)
        *reinterpret_cast<float4*>(hp + 4 * i) =
            *reinterpret_cast<const float4*>(&sm.hs[k][threadIdx.x * E + 4 * i]);
      // v[0..3]: dB terms of the thread's 4 states summed over its CT channels; v[4..7]: dC.
      // w[0..CT-1]: S1 of its CT channels summed over its 4 states; w[CT..2CT-1]: S2.
      float v[2 * ST] = {}, w[2 * CT] = {};
#pragma unroll
      for (int ci = 0; ci < CT; ++ci) {
        const float du = dl[ci] * uv[ci];
#pragma unroll
        for (int si = 0; si < ST; ++si) {
          const int e = ci * ST + si;
          const float dA = ex2(dl[ci] * a[e]);
          dh[e] = fmaf(dAn[e], dh[e], dyv[ci] * cv[si]);
          const float dhP = dh[e] * (dA * hp[e]);
          dal[e] = fmaf(dl[ci], dhP, dal[e]);
          w[CT + ci] = fmaf(a[e], dhP, w[CT + ci]);
          w[ci] = fmaf(dh[e], bv[si], w[ci]);
          dAn[e] = dA;
          v[si] = fmaf(du, dh[e], v[si]);
          v[ST + si] = fmaf(dyv[ci], hcur[e], v[ST + si]);
          hcur[e] = hp[e];
        }
        dD[ci] = fmaf(dyv[ci], uv[ci], dD[ci]);
      }
      // dB/dC over the warp's 4 channel groups (lane bits 3, 4): 8 values -> 2 a lane
      rs_level<8, 16>(v, lane);
      rs_level<4, 8>(v, lane);
      // S1/S2 over the warp's 8 state quads (lane bits 0-2): 2·CT values -> 1 a lane (CT 4),
      // or -> 1 a lane pair, summed by a last butterfly level (CT 2)
      if constexpr (CT == 4) {
        rs_level<8, 4>(w, lane);
        rs_level<4, 2>(w, lane);
        rs_level<2, 1>(w, lane);
      } else {
        rs_level<4, 4>(w, lane);
        rs_level<2, 2>(w, lane);
        w[0] += __shfl_xor_sync(0xffffffffu, w[0], 1);
      }
      sm.ws[k][warp][cq >> 1][s0 + (cq & 1) * 2] = v[0];
      sm.ws[k][warp][cq >> 1][s0 + (cq & 1) * 2 + 1] = v[1];
      sm.s12[k][0][sq >> 2][c0 + (sq & (CT - 1))] = w[0];
    }
    __syncthreads();
    // a reader at a run-time index, so that no shared-memory store above is dead
    const int q = (threadIdx.x + c) % K;
    out[c * NT + threadIdx.x] += sm.ws[q][warp][lane & 1][lane] + sm.s12[q][0][lane & 1][threadIdx.x & 63];
  }
  float r = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) r += dal[e] + dh[e];
#pragma unroll
  for (int ci = 0; ci < CT; ++ci) r += dD[ci];
  out[threadIdx.x] += r;
}
