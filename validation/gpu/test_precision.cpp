// ctest-labels: gpu;precision
// ctest-env: RC_PARAMS=max_success=25
// ctest-timeout: 1800
// test_precision.cpp — the mixed-precision (bf16, f16) GPU pipeline against
// the f64 oracle over random model shapes, with rapidcheck: every
// output, final state and gradient tensor satisfies
//     max|K-O| <= 2 * max|P-O| + 2 ulp_dtype(max|O|)
// where P is the float oracle that rounds to the dtype at the GPU's typed
// storage points, on the same dtype-quantised inputs (precision_harness.hpp).
// The shapes are those of the f32 suite (test_shape_properties.cpp): T from
// the chunk-boundary set {1, 2, 255, 256, 257, 1023, 1024, 1025, 3072} plus
// primes, d_state from {1, 16, 63, 64, 65, 128, 256}, d_conv 1..4, odd
// d_inner, B 1..4, 1-2 layers, NON-ZERO initial states (problem.hpp), both
// scan modes where the sequential kernel applies (d_state <= 64). A TEST_F on
// the GPU fixture whose body calls rc::check (a GTEST_SKIP inside a property
// would run once per generated case).
//
// Per case one line (pass/fail, the tensor closest to its bound); per
// property the table of the largest k per tensor family over all cases, also
// recorded with RecordProperty. JSON rows: MAMBACHECK_PRECISION_JSON (see
// precision_harness.hpp). The model-like shapes are in test_precision_model.cpp.
//
// Cost: one case = O (f64) + P (f32) on the CPU and 1-2 GPU runs; d_model is
// bounded so that the CPU oracle of a case stays below a fixed work budget.
// Under scripts/sanitize.sh (MC_SANITIZE=1) only short sequences are drawn.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "core/config.hpp"
#include "check/model_check.hpp"
#include "gpu/model.hpp"
#include "validation/support/shape_generator.hpp"
#include "validation/support/precision_harness.hpp"

namespace mc::testing {
namespace {

class PrecisionProperties : public PrecisionTest {};

void check_over_shapes(DType dtype) {
  FamilyTable families;
  int cases = 0;
  const std::string name = std::string(to_string(dtype)) + " GPU pipeline vs f64 oracle, k-rule " +
                           "(k <= 2 x the same-precision baseline), over shapes";
  const bool ok = rc::check(name, [&] {
    const Shape s = gen_shape();
    RC_LOG() << check::describe(s.cfg, s.B, s.T) << " seed=" << s.seed << "\n";
    RC_ASSERT(check::shape_ok_for_k_rule(s.cfg, s.B, s.T));
    const PrecisionCase pc = run_precision_case(s.cfg, s.B, s.T, s.seed, dtype, modes_for(s));
    for (size_t i = 0; i < pc.comparisons.size(); ++i)
      families.add(pc.comparisons[i], to_string(pc.scans[i]));
    std::cout << "case " << pc.shape << " di=" << s.cfg.expand * s.cfg.d_model << " seed=" << s.seed
              << " " << to_string(dtype) << ": " << (pc.pass() ? "pass" : "FAIL") << ", max k "
              << pc.max_k() << ", " << pc.worst() << "\n";
    if (!pc.pass()) RC_FAIL(pc.failures());
    ++cases;
  });
  ::testing::Test::RecordProperty("cases_passed", std::to_string(cases));
  ::testing::Test::RecordProperty("max_k", std::to_string(families.max_k()));
  ::testing::Test::RecordProperty("max_headroom", std::to_string(families.max_headroom()));
  families.record("");
  std::cout << families.str(std::string("largest k per tensor family, ") + to_string(dtype) +
                                ", over " + std::to_string(cases) + " passing cases (and any failing one)",
                            /*with_case=*/true);
  EXPECT_TRUE(ok);
}

TEST_F(PrecisionProperties, Bf16MatchesOracleOverShapes) { check_over_shapes(DType::BF16); }
TEST_F(PrecisionProperties, F16MatchesOracleOverShapes) { check_over_shapes(DType::F16); }

}  // namespace
}  // namespace mc::testing
