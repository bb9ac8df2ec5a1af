// scan/reduce.cu — launchers of the checkpointed scan's fixed-order
// reductions (kernels in reduce.cuh): grid-stride over the outputs.
#include "kernels/cuda_check.hpp"
#include "kernels/scan/detail.hpp"
#include "kernels/scan/reduce.cuh"

namespace mc::kern::scan_detail {

namespace {
unsigned reduce_blocks(int64_t n) {
  const int64_t blocks = (n + kCkptReduceThreads - 1) / kCkptReduceThreads;
  return unsigned(blocks < 1 ? 1 : (blocks > (int64_t(1) << 16) ? (int64_t(1) << 16) : blocks));
}
}  // namespace

template <class O>
void launch_reduce_bc(const float* dB_part, const float* dC_part, O* dB, int64_t ld_b, O* dC,
                      int64_t ld_c, const PartialRows& pr, cudaStream_t stream) {
  launch(&ckpt_reduce_bc_kernel<O>, dim3(reduce_blocks(pr.B * pr.rows * pr.ds)),
         dim3(kCkptReduceThreads), 0, stream, dB_part, dC_part, dB, ld_b, dC, ld_c, pr);
  MC_LAUNCH_CHECK("scan ckpt_reduce_bc_kernel (dB, dC over channel groups)");
}

void launch_reduce_b(const float* dAlog_part, const float* dD_part, float* dA_log, float* dD,
                     int64_t B, int64_t di, int64_t ds, cudaStream_t stream) {
  launch(&ckpt_reduce_b_kernel, dim3(reduce_blocks(di * ds + di)), dim3(kCkptReduceThreads), 0,
         stream, dAlog_part, dD_part, dA_log, dD, B, di, ds);
  MC_LAUNCH_CHECK("scan ckpt_reduce_b_kernel (dA_log, dD over b)");
}

template void launch_reduce_bc<float>(const float*, const float*, float*, int64_t, float*, int64_t,
                                      const PartialRows&, cudaStream_t);
template void launch_reduce_bc<__nv_bfloat16>(const float*, const float*, __nv_bfloat16*, int64_t,
                                              __nv_bfloat16*, int64_t, const PartialRows&,
                                              cudaStream_t);
template void launch_reduce_bc<__half>(const float*, const float*, __half*, int64_t, __half*,
                                       int64_t, const PartialRows&, cudaStream_t);

}  // namespace mc::kern::scan_detail
