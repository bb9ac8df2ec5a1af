// testing_exp_probe.cuh — TEST-ONLY: evaluates the scan's two exponentials
// (kernels/scan/device.cuh, expm<ExpMath>) on the device for given arguments, so
// test_scan_exp can measure their error against double-precision exp. Built into
// mc_testing_kernels (test-only), never into mc_kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mc::testing {

// x [n] f32 (device) -> out [n] (device): out[i] = exp(x[i]) as the checkpointed scan
// computes it with the hardware (ex2.approx of x·RN(log2 e)-scaled argument) or the
// accurate exponential. `coef` mimics the scan: the argument is delta[i]·exp_coef(A[i]).
void probe_scan_exp(const float* delta, const float* A, int64_t n, bool hardware, float* out,
                    cudaStream_t stream);

}  // namespace mc::testing
