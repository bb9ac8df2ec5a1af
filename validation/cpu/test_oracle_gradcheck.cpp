// ctest-labels: cpu;property
// test_oracle_gradcheck.cpp — the directional finite-difference gradient check
// (gradcheck.hpp) of the CPU oracle in double: every step function, each layer
// and the whole backbone, with the direction over ALL differentiable inputs at
// once (parameters, input, non-zero initial conv and SSM states). First on the
// built-in configs (reports printed, tolerance included), then as rapidcheck
// properties over random shapes.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <iostream>

#include "core/builtin_configs.hpp"
#include "check/gradcheck.hpp"
#include "validation/support/oracle_test_support.hpp"

namespace mc::testing {
namespace {

const bool kThreads = single_thread_unless_asked();

using check::gradcheck;
using check::GradcheckResult;

// Built-in configs small enough for a double FD check in a unit test.
const char* const kCheckedConfigs[] = {"tiny", "dconv1-t1", "odd", "small", "dstate-128"};

check::Problem builtin_problem(const std::string& name, uint64_t seed) {
  const ref::NamedConfig& c = ref::builtin_config(name);
  return check::make_problem(c.cfg, c.B, c.T, seed);
}

TEST(OracleGradcheck, StepsOfBuiltinConfigs) {
  for (const char* name : kCheckedConfigs) {
    const check::Problem p = builtin_problem(name, 11);
    for (const std::string& step : check::step_names()) {
      const GradcheckResult r = gradcheck(check::step_function(step, p));
      std::cout << r.report();
      EXPECT_TRUE(r.pass) << name << " / " << step << "\n" << r.report();
    }
  }
}

TEST(OracleGradcheck, EachLayerOfBuiltinConfigs) {
  for (const char* name : kCheckedConfigs) {
    const check::Problem p = builtin_problem(name, 12);
    for (int l = 0; l < p.dims.L; ++l) {
      check::GradcheckOptions opt;
      opt.localise = check::Localise::Always;  // print the per-tensor table too
      const GradcheckResult r = gradcheck(check::layer_function(p, l), opt);
      std::cout << r.report();
      EXPECT_TRUE(r.pass) << name << " layer " << l << "\n" << r.report();
    }
  }
}

TEST(OracleGradcheck, BackboneOfBuiltinConfigs) {
  for (const char* name : kCheckedConfigs) {
    const check::Problem p = builtin_problem(name, 13);
    check::GradcheckOptions opt;
    opt.localise = check::Localise::Always;
    const GradcheckResult r = gradcheck(check::backbone_function(p), opt);
    std::cout << r.report();
    EXPECT_TRUE(r.pass) << name << "\n" << r.report();
  }
}

// Gaussian directions as well as Rademacher ones (directional checks work with either;
// a bug that cancels for ±1 entries would not cancel for both).
TEST(OracleGradcheck, GaussianDirectionBackbone) {
  const check::Problem p = builtin_problem("odd", 14);
  check::GradcheckOptions opt;
  opt.direction = check::Direction::Gaussian;
  opt.seed = 99;
  const GradcheckResult r = gradcheck(check::backbone_function(p), opt);
  EXPECT_TRUE(r.pass) << r.report();
}

RC_GTEST_PROP(OracleGradcheckProperty, EveryStep, ()) {
  const OracleShape s = *gen_oracle_shape();
  const check::Problem p = s.problem();
  for (const std::string& step : check::step_names()) {
    const GradcheckResult r = gradcheck(check::step_function(step, p));
    RC_LOG() << r.report();
    RC_ASSERT(r.pass);
  }
}

RC_GTEST_PROP(OracleGradcheckProperty, OneLayer, ()) {
  const OracleShape s = *gen_oracle_shape();
  const check::Problem p = s.problem();
  const int l = *rc::gen::inRange(0, s.n_layers);
  const GradcheckResult r = gradcheck(check::layer_function(p, l));
  RC_LOG() << r.report();
  RC_ASSERT(r.pass);
}

RC_GTEST_PROP(OracleGradcheckProperty, Backbone, ()) {
  const OracleShape s = *gen_oracle_shape();
  RC_CLASSIFY(s.T >= 32, "T>=32");
  RC_CLASSIFY(s.d_state > 32, "d_state>32");
  RC_CLASSIFY(s.n_layers == 3, "L=3");
  RC_CLASSIFY(s.d_model >= 24, "d_model>=24");
  const check::Problem p = s.problem();
  check::GradcheckOptions opt;
  opt.seed = *rc::gen::noShrink(rc::gen::arbitrary<uint64_t>());
  const GradcheckResult r = gradcheck(check::backbone_function(p), opt);
  RC_LOG() << r.report();
  RC_ASSERT(r.pass);
}

}  // namespace
}  // namespace mc::testing
