// gpu_test.hpp — the GoogleTest fixture every GPU test derives from: it skips
// with the reason ("no CUDA device: ...") when no GPU can be used, so CI on a
// GPU-less machine reports the GPU suites as skipped, not failed. With a GPU
// it makes the test's device current and the default of RunOptions::device:
// the one CTest resource allocation assigned, else device 0
// (gpu_allocation.hpp; scripts/ctest_gpu_resources.sh). Also the bf16/f16 GEMM
// tier a suite may take from MAMBACHECK_TYPED_GEMM (typed_gemm_from_env).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "check/gpu_allocation.hpp"
#include "gpu/model.hpp"

namespace mc::testing {

// The bf16/f16 GEMM tier of this process's GPU runs where a suite takes it from the
// environment: MAMBACHECK_TYPED_GEMM = tensor-core (the default) | strict. The precision
// suites read it (precision_harness.hpp), test_nonfinite, and test_model_parity's models
// built with default options (its H0-rebuild and one-backward-per-forward tests), so that
// scripts/sanitize.sh can run initcheck on the strict tier (its comment says why). A bad
// value is a ConfigError naming it.
inline gpu::TypedGemm typed_gemm_from_env() {
  const char* v = std::getenv("MAMBACHECK_TYPED_GEMM");
  return (v && *v) ? gpu::parse_typed_gemm(v) : gpu::TypedGemm::TensorCore;
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!mc::gpu::gpu_available(&reason)) GTEST_SKIP() << reason;
    const GpuAllocation& a = ctest_gpu_allocation();
    // Thrown (not FAIL()) so that derived fixtures' SetUp stops here too.
    if (!a.error.empty()) throw std::runtime_error("GPU test allocation: " + a.error);
    mc::gpu::select_device(a.device);  // ConfigError if CTest names a device we cannot see
  }
};

}  // namespace mc::testing
