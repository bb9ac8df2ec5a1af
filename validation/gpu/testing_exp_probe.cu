// testing_exp_probe.cu — TEST-ONLY kernel behind testing_exp_probe.cuh: the
// scan's exponential of δ·A exactly as the checkpointed kernels evaluate it
// (expm<E>(delta · exp_coef<E>(A)), kernels/scan/device.cuh).
#include "kernels/cuda_check.hpp"
#include "kernels/scan/device.cuh"
#include "validation/gpu/testing_exp_probe.cuh"

namespace mc::testing {
namespace {

namespace sd = mc::kern::scan_detail;

template <mc::ScanExp E>
__global__ void probe_kernel(const float* delta, const float* A, int64_t n, float* out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = sd::expm<E>(delta[i] * sd::exp_coef<E>(A[i]));
}

}  // namespace

void probe_scan_exp(const float* delta, const float* A, int64_t n, bool hardware, float* out,
                    cudaStream_t stream) {
  const unsigned blocks = unsigned((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  if (hardware)
    probe_kernel<mc::ScanExp::Hardware><<<blocks, 256, 0, stream>>>(delta, A, n, out);
  else
    probe_kernel<mc::ScanExp::Accurate><<<blocks, 256, 0, stream>>>(delta, A, n, out);
  MC_LAUNCH_CHECK("probe_scan_exp");
}

}  // namespace mc::testing
