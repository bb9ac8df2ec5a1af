// scan_reduce_kernels.cuh — device code of the fixed-order reductions that
// follow the scan backward (fixed-order reductions, docs/DESIGN.md determinism rules): per-(b,t,d,n)
// dB/dC partials summed over d, per-b dA_log/dD partials summed over b. One
// thread owns one output element and adds its terms sequentially in ascending
// index order starting from 0.0 — no atomics, no trees, so the bits depend on
// nothing but the data. Launchers in scan_reduce.cu (the only includer: the
// kernels are plain, non-inline definitions).
#pragma once

#include "kernels/scan/seed_common.cuh"

namespace mc::kern::scan_detail {

constexpr int kReduceThreads = 256;

// dB_part, dC_part [rows, ngrp, ds] -> dB, dC [rows, ds] (=), Σ over the channel
// groups ascending (a group holds one channel, or dt consecutive channels already
// summed in ascending d by the scan kernel).
// Threads of a warp take consecutive (r, n): for each d the warp reads runs of
// ds contiguous floats (coalesced). 64-bit indices: rows·di·ds may exceed 2^31.
__global__ void __launch_bounds__(kReduceThreads)
    reduce_over_d_kernel(const float* __restrict__ dB_part, const float* __restrict__ dC_part,
                         float* __restrict__ dB, float* __restrict__ dC, int64_t rows, int64_t ngrp,
                         int64_t ds) {
  const int64_t n_out = rows * ds;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_out; i += stride) {
    const int64_t r = i / ds, n = i - r * ds;
    const float* pb = dB_part + r * ngrp * ds + n;
    const float* pc = dC_part + r * ngrp * ds + n;
    float sb = 0.f, sc = 0.f;
    for (int64_t q = 0; q < ngrp; ++q) {
      sb += __ldg(pb + q * ds);
      sc += __ldg(pc + q * ds);
    }
    dB[i] = sb;
    dC[i] = sc;
  }
}

// dAlog_part [B, di*ds] -> dA_log [di*ds] (+=); dD_part [B, di] -> dD [di] (+=);
// Σ over b ascending from 0.0, then one add into the accumulator.
__global__ void __launch_bounds__(kReduceThreads)
    reduce_over_b_kernel(const float* __restrict__ dAlog_part, const float* __restrict__ dD_part,
                         float* __restrict__ dA_log, float* __restrict__ dD, int64_t B, int64_t di,
                         int64_t ds) {
  const int64_t n_a = di * ds;
  const int64_t n_out = n_a + di;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_out; i += stride) {
    float acc = 0.f;
    if (i < n_a) {
      for (int64_t b = 0; b < B; ++b) acc += __ldg(dAlog_part + b * n_a + i);
      dA_log[i] += acc;
    } else {
      const int64_t k = i - n_a;
      for (int64_t b = 0; b < B; ++b) acc += __ldg(dD_part + b * di + k);
      dD[k] += acc;
    }
  }
}

}  // namespace mc::kern::scan_detail
