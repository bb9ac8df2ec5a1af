// scan/reduce.cuh — the fixed-order reductions after the checkpointed scan
// backward: the dB/dC block partials [B, rows, ngrp, ds] of one segment summed over the channel
// groups (ascending, from 0.0) into f32 or typed, possibly strided, outputs, and
// the per-sample dA_log / dD partials summed over b (ascending) into the
// accumulators (+=). One thread owns one output element: no atomics, no trees;
// the bits depend on nothing but the data and the group count (test_scan_parity.cpp's
// backward reruns, test_determinism.cpp).
#pragma once

#include "kernels/scan/detail.hpp"
#include "kernels/scan/device.cuh"

namespace mc::kern::scan_detail {

constexpr int kCkptReduceThreads = 256;

// dB_part, dC_part [B, part_rows, ngrp, ds] -> dB[(b·T + t)·ld_b + n], dC likewise (=),
// RN to O, for the rows t = t0 .. t0+rows-1 of every sample (PartialRows, detail.hpp).
template <class O>
__global__ void __launch_bounds__(kCkptReduceThreads)
    ckpt_reduce_bc_kernel(const float* __restrict__ dB_part, const float* __restrict__ dC_part,
                          O* __restrict__ dB, int64_t ld_b, O* __restrict__ dC, int64_t ld_c,
                          PartialRows pr) {
  const int64_t ds = pr.ds, ngrp = pr.ngrp;
  const int64_t n_out = pr.B * pr.rows * ds;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_out; i += stride) {
    const int64_t r = i / ds, n = i - r * ds;
    const int64_t b = r / pr.rows, tt = r - b * pr.rows;
    const int64_t pr_row = b * pr.part_rows + tt, out_row = b * pr.T + pr.t0 + tt;
    const float* pb = dB_part + pr_row * ngrp * ds + n;
    const float* pc = dC_part + pr_row * ngrp * ds + n;
    float sb = 0.f, sc = 0.f;
    for (int64_t q = 0; q < ngrp; ++q) {
      sb += __ldg(pb + q * ds);
      sc += __ldg(pc + q * ds);
    }
    store_rn(dB + out_row * ld_b + n, sb);
    store_rn(dC + out_row * ld_c + n, sc);
  }
}

// dAlog_part [B, di*ds] -> dA_log (+=); dD_part [B, di] -> dD (+=) when dD is set.
__global__ void __launch_bounds__(kCkptReduceThreads)
    ckpt_reduce_b_kernel(const float* __restrict__ dAlog_part, const float* __restrict__ dD_part,
                         float* __restrict__ dA_log, float* __restrict__ dD, int64_t B, int64_t di,
                         int64_t ds) {
  const int64_t n_a = di * ds;
  const int64_t n_out = n_a + (dD ? di : 0);
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
