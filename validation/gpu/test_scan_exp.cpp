// ctest-labels: gpu
// test_scan_exp.cpp — the error of the scan's two exponentials on the device
// (kernels/scan/device.cuh expm<E>(δ·exp_coef<E>(A)), evaluated by the test-only
// probe kernel exactly as the checkpointed kernels do), against exp(δ·A) in
// double, over the scan's argument range: δ log-uniform in [1e-4, 30] (softplus
// outputs, the identity branch included) and A = -exp(U(-3, 3)) (|A| in
// [0.05, 20]), i.e. x = δ·A in about [-600, -5e-6].
//
// What is asserted is what kernels/scan/scan.hpp documents:
//   Accurate: |err| <= 0.65 ulp of the result (normal results; the same bound as
//             the host test ScanExp.AccurateAndUnbiased, and bitwise the host
//             function's value: the source is shared).
//   Hardware: ex2.approx on x' = RN(δ·RN(A·log2 e)): relative error at most
//             2^-22 (ex2.approx's 2 ulp) plus the argument path's rounding,
//             |x|·4·2^-24 — results >= 2^-126 only (ex2.approx.ftz flushes smaller
//             ones to 0, an absolute error below 1.2e-38).
// Both against exp(RN(δ·A)) in double: the float argument the float baseline
// exponentiates too (the f64 oracle uses the exact product; that difference,
// |x|·2^-24 relative, is common to every f32 implementation).
// The signed mean error (bias) and the RMS error of each, in ulps, are printed
// and recorded (RecordProperty), beside those of the correctly rounded exp: the
// evidence behind ExpMath::Auto's choice per dtype.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "check/problem.hpp"
#include "gpu/device_buffer.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/scan/exp_math.cuh"
#include "validation/gpu/testing_exp_probe.cuh"
#include "validation/support/gpu_test.hpp"

namespace {

using mc::gpu::DeviceBuffer;

double ulp_of(double v) {
  int e;
  std::frexp(v, &e);
  return std::max(std::ldexp(1.0, e - 24), std::ldexp(1.0, -149));
}

struct ExpStats {
  double max_ulp = 0, mean_signed_ulp = 0, rms_ulp = 0, rn_mean_signed_ulp = 0;
  int64_t n = 0, over_bound = 0;
};

class ScanExpDevice : public mc::testing::GpuTest {};

TEST_F(ScanExpDevice, BothExponentialsWithinTheirDocumentedBounds) {
  const int64_t n = int64_t(1) << 22;
  std::vector<float> delta(static_cast<size_t>(n)), A(static_cast<size_t>(n));
  mc::check::SplitMix64 rng(20261201);
  for (int64_t i = 0; i < n; ++i) {
    delta[size_t(i)] = float(std::exp(rng.uniform(std::log(1e-4), std::log(30.0))));
    A[size_t(i)] = -float(std::exp(rng.uniform(-3.0, 3.0)));
  }
  DeviceBuffer<float> d_delta(size_t(n), "delta"), d_A(size_t(n), "A"), d_out(size_t(n), "out");
  d_delta.upload(delta.data(), delta.size(), nullptr);
  d_A.upload(A.data(), A.size(), nullptr);
  for (bool hw : {false, true}) {
    mc::testing::probe_scan_exp(d_delta.get(), d_A.get(), n, hw, d_out.get(), nullptr);
    std::vector<float> out(static_cast<size_t>(n));
    d_out.download(out.data(), out.size(), nullptr);
    MC_CUDA_CHECK(cudaDeviceSynchronize(), "probe_scan_exp");
    ExpStats st;
    double sum_sq = 0, sum = 0, sum_rn = 0;
    for (int64_t i = 0; i < n; ++i) {
      // the float argument RN(δ·A) that the float baseline exponentiates too
      const float x = delta[size_t(i)] * A[size_t(i)];
      const double ref = std::exp(double(x));
      if (ref < std::ldexp(1.0, -126)) continue;  // the flushed / subnormal range
      const double u = ulp_of(ref);
      const double err = (double(out[size_t(i)]) - ref) / u;
      double bound;
      if (hw) {
        // ex2.approx's 2 ulp (2^-22 relative) plus the base-2 argument's distance from
        // x·log2 e: RN(log2 e), RN(A·log2 e), RN(δ·a) and RN(δ·A) each move it by at
        // most 2^-24 relative, i.e. the result by |x|·4·2^-24 relative
        bound = (std::ldexp(1.0, -22) + std::fabs(double(x)) * 4 * std::ldexp(1.0, -24)) * ref / u +
                1e-9;
      } else {
        bound = 0.65;
        EXPECT_EQ(out[size_t(i)], mc::kern::scan_detail::scan_expf(x)) << "device != host at " << i;
      }
      if (std::fabs(err) > bound) ++st.over_bound;
      st.max_ulp = std::max(st.max_ulp, std::fabs(err));
      sum += err;
      sum_sq += err * err;
      sum_rn += (double(float(ref)) - ref) / u;
      ++st.n;
    }
    st.mean_signed_ulp = sum / double(st.n);
    st.rms_ulp = std::sqrt(sum_sq / double(st.n));
    st.rn_mean_signed_ulp = sum_rn / double(st.n);
    const std::string name = hw ? "hardware" : "accurate";
    std::cout << "[scan exp " << name << "] n=" << st.n << " max " << st.max_ulp << " ulp, rms "
              << st.rms_ulp << " ulp, mean signed " << st.mean_signed_ulp
              << " ulp (correctly rounded: " << st.rn_mean_signed_ulp << "), over bound "
              << st.over_bound << "\n";
    RecordProperty("exp." + name + ".max_ulp", std::to_string(st.max_ulp));
    RecordProperty("exp." + name + ".rms_ulp", std::to_string(st.rms_ulp));
    RecordProperty("exp." + name + ".mean_signed_ulp", std::to_string(st.mean_signed_ulp));
    EXPECT_EQ(st.over_bound, 0) << name;
    EXPECT_GT(st.n, n / 2) << name << ": too few normal results to judge";
  }
}

}  // namespace
