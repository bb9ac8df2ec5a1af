// ctest-labels: gpu;property
// ctest-env: RC_PARAMS=max_success=25
// ctest-timeout: 1800
// test_shape_properties.cpp — rapidcheck over model shapes, GPU f32 pipeline
// vs the f64 oracle (k-rule of compare.hpp; baseline error e_P = the worst of
// the float oracle and 8 Monte Carlo arithmetic runs, model_harness.hpp) for every
// output, final state and gradient tensor: T from the chunk-boundary set
// {1, 2, 255, 256, 257, 1023, 1024, 1025, 3072} plus primes, d_state from
// {1, 16, 63, 64, 65, 128, 256}, d_conv 1..4, odd d_inner, B 1..4, 1-2
// layers, non-zero initial states, both scan modes where they apply; and a
// second property: the sequential and parallel GPU scans agree at the model
// level within the k-rule's own scale. A TEST_F on GpuTest (skips without a
// device) whose body calls rc::check: a GTEST_SKIP inside a property would run
// once per generated case.
//
// Cost: shapes are generated (shrinkable) plus a no-shrink data seed; d_model
// is bounded so that each case's CPU oracle (f64 + f32) stays below a fixed
// work budget (small d_model when T and d_state are large). Under
// scripts/sanitize.sh (MC_SANITIZE=1) only short sequences are drawn.
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
#include "validation/support/gpu_test.hpp"
#include "validation/support/model_harness.hpp"
#include "gpu/model.hpp"
#include "validation/support/shape_generator.hpp"

namespace mc::testing {
namespace {

class ShapeProperties : public GpuTest {};

std::string label_of(const Shape& s) {
  std::ostringstream os;
  os << describe(s.cfg, s.B, s.T) << " di=" << s.cfg.expand * s.cfg.d_model << " seed=" << s.seed;
  return os.str();
}


// Worst tensor of a comparison, for the one-line-per-case log.
std::string worst(const ModelCheck& c) {
  const TensorCheck* w = c.worst();
  if (!w) return "(no tensors)";
  std::ostringstream os;
  os << "worst " << w->r.tensor << " k=" << w->r.k << " headroom=" << w->r.headroom
     << " (e_P from " << w->source << ", k_P=" << w->k_P << ")";
  return os.str();
}

TEST_F(ShapeProperties, GpuMatchesOracleOverShapes) {
  double max_k_seen = 0;
  int cases = 0;
  const bool ok = rc::check("GPU f32 model == f64 oracle under the k-rule, over shapes", [&] {
    const Shape s = gen_shape(Limits::kMaxDState);
    const std::string label = label_of(s);
    RC_LOG() << label << "\n";
    RC_ASSERT(shape_ok_for_k_rule(s.cfg, s.B, s.T));
    const ModelInputs in = make_inputs(s.cfg, s.B, s.T, s.seed);
    const References refs = references(in, /*backward=*/true, s.seed);
    for (ScanMode m : modes_for(s)) {
      const auto K = gpu_run(in, m);
      const ModelCheck c = compare_model(label + " scan=" + to_string(m), in, K, refs, true);
      std::cout << "case " << c.label << ": " << (c.pass() ? "pass" : "FAIL") << ", " << worst(c)
                << "\n";
      max_k_seen = std::max(max_k_seen, c.max_k());
      if (!c.pass()) RC_FAIL(c.report(/*failures_only=*/true));
    }
    ++cases;
  });
  RecordProperty("cases_passed", std::to_string(cases));
  RecordProperty("max_k", std::to_string(max_k_seen));
  std::cout << "GpuMatchesOracleOverShapes: " << cases << " cases, max k over all tensors = "
            << max_k_seen << " (limit " << check::kF32KLimit << ")\n";
  EXPECT_TRUE(ok);
}

TEST_F(ShapeProperties, SequentialAndParallelScanAgree) {
  double max_k_seen = 0;
  int cases = 0;
  const bool ok = rc::check("sequential vs parallel GPU scan agree at the model level", [&] {
    const Shape s = gen_shape(Limits::kMaxSeqScanDState);
    const std::string label = label_of(s);
    RC_LOG() << label << "\n";
    RC_ASSERT(shape_ok_for_k_rule(s.cfg, s.B, s.T));
    const ModelInputs in = make_inputs(s.cfg, s.B, s.T, s.seed);
    const References refs = references(in, /*backward=*/true, s.seed);
    const auto Kseq = gpu_run(in, ScanMode::Sequential);
    const auto Kpar = gpu_run(in, ScanMode::Parallel);
    const ModelCheck c = compare_modes(label, in, Kseq, Kpar, refs);
    std::cout << "case " << c.label << ": " << (c.pass() ? "pass" : "FAIL") << ", " << worst(c)
              << "\n";
    max_k_seen = std::max(max_k_seen, c.max_k());
    if (!c.pass()) RC_FAIL(c.report(/*failures_only=*/true));
    ++cases;
  });
  RecordProperty("cases_passed", std::to_string(cases));
  RecordProperty("max_k_seq_vs_par", std::to_string(max_k_seen));
  std::cout << "SequentialAndParallelScanAgree: " << cases
            << " cases, max |seq-par| / max|P-O| = " << max_k_seen << " (limit "
            << check::kF32KLimit << ")\n";
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace mc::testing
