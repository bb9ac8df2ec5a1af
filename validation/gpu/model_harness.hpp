// model_harness.hpp — test-side additions to validation/common/model_check.hpp
// (O/P/K runs of one backbone problem and their per-tensor k-rule comparison)
// for the model-level GPU suites: forward-only and target oracles, the
// sequential-vs-parallel agreement rule, and RecordProperty/printing of every
// tensor's k. Header only: it uses gtest, and each GPU suite is its own
// executable.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "compare.hpp"
#include "config.hpp"
#include "model.hpp"
#include "model_check.hpp"
#include "param_layout.hpp"

namespace mc::testing {

using check::compare_model;  // (label, in, K, O, P): per-tensor k-rule
using check::Comparison;
using check::describe;
using check::gpu_run;  // (in, scan, gemm = GemmMath::F32): gpu::Model with state grads
using check::kMinRuleElements;
using check::ModelInputs;
using check::ModelOutputs;
using check::shape_ok_for_k_rule;

template <class S>
std::vector<S> cast_vec(const std::vector<float>& v) {
  return std::vector<S>(v.begin(), v.end());
}

// f32 inputs of the seeded problem (problem.hpp): perturbed params, X,
// NON-ZERO initial states, d_out; all f32-exact.
inline ModelInputs make_inputs(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed) {
  return check::make_model_inputs(cfg, B, T, seed, DType::F32);
}

// The CPU oracle without storage rounding in scalar S: double = O, float = P
// (the same-precision baseline of the f32 pipeline).
template <class S>
ModelOutputs<S> oracle_run(const ModelInputs& in) {
  return check::oracle_run<S>(in, DType::F32);
}

// Forward only from the problem's initial states: out [B*T, dm] and the final
// states (the backward fields stay empty).
template <class S>
ModelOutputs<S> oracle_forward(const ModelInputs& in) {
  const Dims d = Dims::from(in.cfg);
  const ParamLayout lay(d);
  const std::vector<S> params = cast_vec<S>(in.params);
  const std::vector<S> X = cast_vec<S>(in.X);
  ref::RecurrentState<S> state(d, in.B);
  state.conv = cast_vec<S>(in.conv0);
  state.ssm = cast_vec<S>(in.ssm0);
  ModelOutputs<S> o;
  o.out.assign(size_t(in.B * in.T * d.dm), S(0));
  ref::backbone_forward<S>(lay, params.data(), in.B, in.T, X.data(), state, o.out.data(), nullptr);
  o.conv_final = state.conv;
  o.ssm_final = state.ssm;
  return o;
}

// Target "burn-in nosave" forward of the oracle (zero initial state): [B, dm].
template <class S>
std::vector<S> oracle_target(const ModelInputs& in) {
  const Dims d = Dims::from(in.cfg);
  const ParamLayout lay(d);
  const std::vector<S> params = cast_vec<S>(in.params);
  const std::vector<S> X = cast_vec<S>(in.X);
  std::vector<S> target(size_t(in.B * d.dm), S(0));
  ref::target_forward<S>(lay, params.data(), in.B, in.T, X.data(), target.data());
  return target;
}

// Print one summary() line per tensor, RecordProperty("k.<prefix><tensor>"),
// and EXPECT every tensor to pass (a failing line names the tensor).
inline void expect_pass_and_record(const Comparison& c, const std::string& prefix = "") {
  std::cout << c.report();
  for (const auto& r : c.tensors) {
    ::testing::Test::RecordProperty("k." + prefix + r.tensor, std::to_string(r.k));
    EXPECT_TRUE(r.pass) << c.label << " | " << r.summary();
  }
  EXPECT_FALSE(c.tensors.empty());
}

// Two f32 results of the same problem that differ only in summation order
// (sequential vs parallel scan) may be at most k_limit times the float
// oracle's own error apart, plus the 2-ulp floor: the scale the k-rule grants
// each of them against O, without the factor 2 the triangle inequality would
// allow. kernel stats = A vs B; baseline stats = P vs O.
inline check::KRuleResult agreement(const std::string& name, const float* A, const float* Bv,
                                    const double* O, const float* P, int64_t n, double k_limit) {
  const std::vector<double> Bd(Bv, Bv + n);
  check::KRuleResult r;
  r.tensor = name;
  r.kernel = check::error_stats(A, Bd.data(), n, DType::F32);
  r.baseline = check::error_stats(P, O, n, DType::F32);
  r.k_limit = k_limit;
  r.atol = 2.0 * check::ulp_at(DType::F32, r.baseline.ref_max_abs);
  r.bound = k_limit * r.baseline.max_abs + r.atol;
  r.k = r.baseline.max_abs > 0 ? r.kernel.max_abs / r.baseline.max_abs
                               : (r.kernel.max_abs > 0 ? INFINITY : 0.0);
  r.headroom = r.kernel.max_abs / r.bound;
  r.pass = r.kernel.nonfinite == 0 && r.kernel.ref_nonfinite == 0 &&
           r.baseline.nonfinite == 0 && r.baseline.ref_nonfinite == 0 &&
           r.kernel.max_abs <= r.bound;
  return r;
}

// Sequential vs parallel GPU results of one problem, with the same tensor
// split as compare_model (per layer, per ParamEntry).
inline Comparison compare_modes(const std::string& label, const ModelInputs& in,
                                const ModelOutputs<float>& Kseq, const ModelOutputs<float>& Kpar,
                                const ModelOutputs<double>& O, const ModelOutputs<float>& P,
                                double k_limit = check::kF32KLimit) {
  const Dims d = Dims::from(in.cfg);
  const ParamLayout lay(d);
  Comparison c;
  c.label = label + " seq-vs-par";
  auto add = [&](const std::string& name, const std::vector<float>& A,
                 const std::vector<float>& Bv, const std::vector<double>& Ov,
                 const std::vector<float>& Pv, int64_t off, int64_t n) {
    if (int64_t(A.size()) < off + n || int64_t(Bv.size()) < off + n ||
        int64_t(Ov.size()) < off + n || int64_t(Pv.size()) < off + n) {
      check::KRuleResult r;
      r.tensor = name + " (SIZE MISMATCH)";
      c.tensors.push_back(r);
      return;
    }
    c.tensors.push_back(agreement(name, A.data() + off, Bv.data() + off, Ov.data() + off,
                                  Pv.data() + off, n, k_limit));
  };
  auto add_per_layer = [&](const std::string& what, int64_t w, const std::vector<float>& A,
                           const std::vector<float>& Bv, const std::vector<double>& Ov,
                           const std::vector<float>& Pv) {
    const int64_t per = in.B * d.di * w;
    for (int64_t l = 0; l < d.L; ++l)
      add("layers." + std::to_string(l) + "." + what, A, Bv, Ov, Pv, l * per, per);
  };
  const int64_t R = in.B * in.T;
  add("out", Kseq.out, Kpar.out, O.out, P.out, 0, R * d.dm);
  add_per_layer("conv_final", d.dc, Kseq.conv_final, Kpar.conv_final, O.conv_final, P.conv_final);
  add_per_layer("ssm_final", d.ds, Kseq.ssm_final, Kpar.ssm_final, O.ssm_final, P.ssm_final);
  for (const ParamEntry& e : lay.entries)
    add("grad." + e.name, Kseq.grads, Kpar.grads, O.grads, P.grads, e.offset, e.size);
  add("d_input", Kseq.dX, Kpar.dX, O.dX, P.dX, 0, R * d.mid);
  add_per_layer("d_conv0", d.dc, Kseq.d_conv0, Kpar.d_conv0, O.d_conv0, P.d_conv0);
  add_per_layer("d_ssm0", d.ds, Kseq.d_ssm0, Kpar.d_ssm0, O.d_ssm0, P.d_ssm0);
  return c;
}

}  // namespace mc::testing
