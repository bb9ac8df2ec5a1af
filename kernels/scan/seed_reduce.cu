// scan_reduce.cu — launchers of the fixed-order scan reductions
// (kernels in scan_reduce_kernels.cuh): grid-stride over the outputs.
#include "kernels/cuda_check.hpp"
#include "kernels/scan/seed_reduce_kernels.cuh"

namespace mc::kern::scan_detail {

namespace {

constexpr int64_t kMaxReduceBlocks = int64_t(1) << 16;

unsigned reduce_grid(int64_t n) {
  const int64_t blocks = (n + kReduceThreads - 1) / kReduceThreads;
  return unsigned(blocks < 1 ? 1 : (blocks > kMaxReduceBlocks ? kMaxReduceBlocks : blocks));
}

}  // namespace

void launch_reduce_over_d(const ScanShape& s, int64_t ngrp, const float* dB_part,
                          const float* dC_part, float* dB, float* dC, cudaStream_t stream) {
  const int64_t rows = s.B * s.T;
  launch(&reduce_over_d_kernel, dim3(reduce_grid(rows * s.ds)), dim3(kReduceThreads), 0, stream,
         dB_part, dC_part, dB, dC, rows, ngrp, s.ds);
  MC_LAUNCH_CHECK("scan reduce_over_d_kernel (dB, dC)");
}

void launch_reduce_over_b(const ScanShape& s, const float* dAlog_part, const float* dD_part,
                          float* dA_log, float* dD, cudaStream_t stream) {
  launch(&reduce_over_b_kernel, dim3(reduce_grid(s.di * s.ds + s.di)), dim3(kReduceThreads), 0,
         stream, dAlog_part, dD_part, dA_log, dD, s.B, s.di, s.ds);
  MC_LAUNCH_CHECK("scan reduce_over_b_kernel (dA_log, dD)");
}

}  // namespace mc::kern::scan_detail
