// gpu_test.hpp — the GoogleTest fixture every GPU test derives from: it skips
// with the reason ("no CUDA device: ...") when no GPU can be used, so CI on a
// GPU-less machine reports the GPU suites as skipped, not failed.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "pipeline.hpp"

namespace mc::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!mc::gpu::gpu_available(&reason)) GTEST_SKIP() << reason;
  }
};

}  // namespace mc::testing
