// ctest-labels: cpu
// test_oracle_negative_control.cpp — proves the gradient check can fail: with
// a deliberate bug switched on in the oracle's backward (testing_faults.hpp),
// the directional FD check must report FAILURE and name the tensor(s) whose
// gradient is wrong — and only those. With the fault off, the same checks on
// the same problems pass (so the failure is the fault's doing).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/builtin_configs.hpp"
#include "check/gradcheck.hpp"
#include "validation/support/oracle_test_support.hpp"
#include "reference_cpu/testing_faults.hpp"

namespace mc::testing {
namespace {

const bool kThreads = single_thread_unless_asked();

using ref::testing::Fault;
using ref::testing::FaultGuard;

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

check::Problem problem(const char* name, uint64_t seed) {
  const ref::NamedConfig& c = ref::builtin_config(name);
  return check::make_problem(c.cfg, c.B, c.T, seed);
}

TEST(OracleNegativeControl, FaultSwitchIsOffByDefaultAndRestoredByGuard) {
  EXPECT_EQ(ref::testing::current_fault(), Fault::None);
  {
    FaultGuard g(Fault::ScanDeltaGradDropsTerm);
    EXPECT_EQ(ref::testing::current_fault(), Fault::ScanDeltaGradDropsTerm);
  }
  EXPECT_EQ(ref::testing::current_fault(), Fault::None);
}

// Fault 1: dδ loses Σ_n dh·A·dA·h_{t-1}. At the scan step only the input Δ has
// a wrong gradient.
TEST(OracleNegativeControl, ScanDeltaFaultFailsTheScanStepAndNamesDelta) {
  const check::Problem p = problem("small", 21);
  const check::DiffFunction f = check::step_function("selective_scan", p);
  ASSERT_TRUE(check::gradcheck(f).pass) << "control: the correct oracle must pass";
  FaultGuard g(Fault::ScanDeltaGradDropsTerm);
  const check::GradcheckResult r = check::gradcheck(f);
  std::cout << r.report();
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.guilty, std::vector<std::string>{"delta"}) << r.report();
}

// At the layer level the wrong dΔ propagates to everything upstream of Δ
// (dt_proj, x_proj, conv, in_proj, norm, the layer input, the conv state) but
// never to out_proj, A_log, D or the SSM initial state.
TEST(OracleNegativeControl, ScanDeltaFaultFailsTheLayerAndNamesUpstreamTensorsOnly) {
  const check::Problem p = problem("odd", 22);
  const check::DiffFunction f = check::layer_function(p, 1);
  ASSERT_TRUE(check::gradcheck(f).pass);
  FaultGuard g(Fault::ScanDeltaGradDropsTerm);
  const check::GradcheckResult r = check::gradcheck(f);
  std::cout << r.report();
  EXPECT_FALSE(r.pass);
  for (const char* t : {"layers.1.dt_proj_b", "layers.1.dt_proj_w", "layers.1.x_proj_w",
                        "layers.1.H"})
    EXPECT_TRUE(contains(r.guilty, t)) << t << " not named\n" << r.report();
  for (const char* t : {"layers.1.out_proj_w", "layers.1.a_log", "layers.1.d_param",
                        "layers.1.ssm0"})
    EXPECT_FALSE(contains(r.guilty, t)) << t << " wrongly named\n" << r.report();
}

TEST(OracleNegativeControl, ScanDeltaFaultFailsTheBackbone) {
  const check::Problem p = problem("tiny", 23);
  const check::DiffFunction f = check::backbone_function(p);
  ASSERT_TRUE(check::gradcheck(f).pass);
  FaultGuard g(Fault::ScanDeltaGradDropsTerm);
  const check::GradcheckResult r = check::gradcheck(f);
  std::cout << r.report();
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(contains(r.guilty, "layers.0.dt_proj_b")) << r.report();
  EXPECT_TRUE(contains(r.guilty, "layers.1.dt_proj_b")) << r.report();
  EXPECT_FALSE(contains(r.guilty, "norm_f_weight")) << r.report();
}

// Fault 2: dA_log misses the factor ∂A/∂A_log = A. Exactly the A_log tensors
// are wrong: the step check names "a_log", the backbone check every layer's
// a_log and nothing else.
TEST(OracleNegativeControl, ALogFaultNamesExactlyTheALogTensors) {
  const check::Problem p = problem("odd", 24);
  const check::DiffFunction step = check::step_function("selective_scan", p);
  const check::DiffFunction bb = check::backbone_function(p);
  ASSERT_TRUE(check::gradcheck(step).pass);
  ASSERT_TRUE(check::gradcheck(bb).pass);
  FaultGuard g(Fault::ALogGradMissesChainRule);
  const check::GradcheckResult rs = check::gradcheck(step);
  EXPECT_FALSE(rs.pass);
  EXPECT_EQ(rs.guilty, std::vector<std::string>{"a_log"}) << rs.report();
  const check::GradcheckResult rb = check::gradcheck(bb);
  std::cout << rb.report();
  EXPECT_FALSE(rb.pass);
  std::vector<std::string> expected;
  for (int l = 0; l < p.dims.L; ++l) expected.push_back("layers." + std::to_string(l) + ".a_log");
  EXPECT_EQ(rb.guilty, expected) << rb.report();
}

// The localisation must also work when the whole-direction comparison is not
// even asked to localise: Localise::Never reports failure without names.
TEST(OracleNegativeControl, FailureIsReportedWithoutLocalisationToo) {
  const check::Problem p = problem("tiny", 25);
  FaultGuard g(Fault::ALogGradMissesChainRule);
  check::GradcheckOptions opt;
  opt.localise = check::Localise::Never;
  const check::GradcheckResult r = check::gradcheck(check::backbone_function(p), opt);
  EXPECT_FALSE(r.pass);
  EXPECT_TRUE(r.guilty.empty());
  EXPECT_TRUE(r.per_segment.empty());
}

}  // namespace
}  // namespace mc::testing
