// docs/experiments/walk_common.cuh — the device helpers that the walk count experiments
// (minimal_bwd_walk.cu, tile_bwd_walk.cu) share: the hardware exponential, one level of a warp
// reduce-scatter, and the walk's registers at the start. Not product code; count_sass.py
// compiles each experiment on its own.
#pragma once
#include <cuda_runtime.h>

namespace walk_count {

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One level of a reduce-scatter over lanes lane ^ M: keep half of the first N values, send the
// other half and add what comes back.
template <int N, int M, int NV>
__device__ __forceinline__ void rs_level(float (&v)[NV], int lane) {
  const bool up = lane & M;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float send = up ? v[i] : v[i + N / 2];
    const float keep = up ? v[i + N / 2] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, M);
  }
}

// The walk's per-recurrence registers at the start: a from a_in (N a thread, thread-major), and
// dh = 0, dAn = 1 (dA_T := 1), dal = 0.
template <int N>
__device__ __forceinline__ void init_walk(const float* __restrict__ a_in, float (&a)[N],
                                          float (&dh)[N], float (&dAn)[N], float (&dal)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    a[e] = a_in[threadIdx.x * N + e];
    dh[e] = 0.f;
    dAn[e] = 1.f;
    dal[e] = 0.f;
  }
}

}  // namespace walk_count
