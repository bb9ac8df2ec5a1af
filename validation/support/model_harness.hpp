// model_harness.hpp — model-level GPU-vs-oracle comparison for the f32 suites
// (test_model_parity, test_shape_properties). The rule itself — O, the
// baseline ensemble {P, kMcaRuns Monte Carlo arithmetic runs}, the per-tensor
// k-rule over the tensor catalogue — lives in check/ensemble.hpp, so that
// `mambacheck validate` applies exactly the same one; this header adds the
// GoogleTest side (recording and expecting).
//
// The same MCA runs are the ensemble of the statistical checks (check/stats.hpp:
// bias and magnitude bias in units of the ensemble's noise, k_rms against its
// derived limit; docs/precision-statistics.md), computed for every tensor with
// P as the baseline; a tensor passes when both the k-rule and the statistics do
// (KRuleResult::verdict()).
//
// Header only: it uses gtest, and each GPU suite is its own executable.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "check/ensemble.hpp"
#include "check/model_check.hpp"
#include "check/problem.hpp"
#include "core/config.hpp"
#include "core/param_layout.hpp"

namespace mc::testing {

using check::describe;
using check::gpu_run;  // (in, scan, gemm = GemmMath::F32): gpu::Model with state grads
using check::kMinRuleElements;
using check::ModelInputs;
using check::ModelOutputs;
using check::shape_ok_for_k_rule;

using check::cast_vec;
using check::compare_modes;
using check::ensemble_rule;
using check::kMcaRuns;
using check::ModelCheck;
using check::References;
using check::references;
using check::seed_mca;
using check::setup_failure;
using check::target_references;
using check::TargetReferences;
using check::TensorCheck;
using check::to_double_vec;

// f32 inputs of the seeded problem (problem.hpp): perturbed params, X,
// NON-ZERO initial states, d_out, final-state upstream gradients; all f32-exact.
inline ModelInputs make_inputs(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed) {
  return check::make_model_inputs(cfg, B, T, seed, DType::F32);
}

// Forward (+ backward when `backward`) of the oracle without storage rounding.
template <class S>
ModelOutputs<S> oracle_model(const ModelInputs& in, bool backward) {
  return check::oracle_run<S>(in, DType::F32, backward);
}

// K vs the references, tensor by tensor (check::compare_ensemble).
inline ModelCheck compare_model(const std::string& label, const ModelInputs& in,
                                const ModelOutputs<float>& K, const References& ref,
                                bool backward) {
  return check::compare_ensemble(label, in, K, ref, backward);
}

// Print one line per tensor, RecordProperty("k.<prefix><tensor>"), and
// EXPECT every tensor to pass (a failing line names the tensor).
inline void expect_pass_and_record(const ModelCheck& c, const std::string& prefix = "") {
  std::cout << c.report();
  for (const auto& t : c.tensors) {
    ::testing::Test::RecordProperty("k." + prefix + t.r.tensor, std::to_string(t.r.k));
    EXPECT_TRUE(t.r.verdict()) << ModelCheck::line(c.label, t);
  }
  EXPECT_FALSE(c.tensors.empty());
}

}  // namespace mc::testing
