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
// level within the k-rule's own scale. Pattern of the guide §B2: a TEST_F on
// GpuTest (skips without a device) whose body calls rc::check.
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

#include "compare.hpp"
#include "config.hpp"
#include "gpu_test.hpp"
#include "model_harness.hpp"
#include "pipeline.hpp"

namespace mc::testing {
namespace {

class ShapeProperties : public GpuTest {};

bool under_sanitizer() {
  const char* s = std::getenv("MC_SANITIZE");
  return s && *s && std::string(s) != "0";
}

// Sequence lengths: chunk boundaries of the parallel scan and the Auto
// threshold (255/256/257, 1023/1024/1025), T = 1, 2, a long multi-chunk 3072,
// and primes. Ordered small to large: rapidcheck shrinks toward the front.
std::vector<int64_t> seq_lens() {
  if (under_sanitizer()) return {1, 2, 7, 31, 257};
  return {1, 2, 3, 5, 7, 13, 31, 61, 127, 251, 255, 256, 257, 509, 1021, 1023, 1024, 1025, 2039,
          3072};
}
std::vector<int> d_states() {
  if (under_sanitizer()) return {1, 16, 65};
  return {1, 16, 63, 64, 65, 128, 256};
}

struct Shape {
  ModelConfig cfg;
  int64_t B = 1, T = 1;
  uint64_t seed = 0;
};

// Work units of one case's CPU oracle (per precision, fwd + bwd): per layer
// and token the four GEMMs ~ di*(3*dm + xd + dr) and the scan ~ 10*di*ds.
double oracle_work(const ModelConfig& c, int64_t B, int64_t T) {
  const double di = double(c.expand) * c.d_model;
  return double(B) * double(T) * c.n_layers * di * (3.0 * c.d_model + 12.0 * c.d_state + 2.0);
}
// ~1 s of f64+f32 oracle on one core for the largest case (T 3072, d_state 256).
constexpr double kOracleWorkBudget = 1.6e8;

// Shrinkable shape generator; `max_ds` restricts d_state (64: both scan modes
// apply). d_model starts at kMinRuleElements (see model_check.hpp: every
// compared tensor needs >= 16 elements for the max-error ratio to be a
// reliable statistic); when a case exceeds the oracle budget, B, then the
// layer count, then d_model, then expand are reduced deterministically.
Shape gen_shape(int max_ds) {
  Shape s;
  s.T = *rc::gen::elementOf(seq_lens());
  std::vector<int> ds_set;
  for (int v : d_states())
    if (v <= max_ds) ds_set.push_back(v);
  s.cfg.d_state = *rc::gen::elementOf(ds_set);
  s.cfg.d_conv = *rc::gen::inRange(1, 5);
  const bool odd_inner = *rc::gen::arbitrary<bool>();
  s.cfg.expand = odd_inner ? *rc::gen::element(1, 3) : *rc::gen::element(1, 2, 3);
  int dm = *rc::gen::inRange(int(kMinRuleElements), 41);
  if (odd_inner && dm % 2 == 0) ++dm;  // d_inner = expand*dm odd
  s.cfg.d_model = dm;
  s.cfg.n_layers = *rc::gen::inRange(1, 3);
  s.B = *rc::gen::inRange<int64_t>(1, 5);
  s.cfg.input_dim = *rc::gen::inRange(1, 9);
  if (s.B * s.T * s.cfg.input_dim < kMinRuleElements)  // d_input needs >= 16 elements too
    s.cfg.input_dim = int((kMinRuleElements + s.B * s.T - 1) / (s.B * s.T));
  const int dm_min = odd_inner ? int(kMinRuleElements) + 1 : int(kMinRuleElements);
  while (oracle_work(s.cfg, s.B, s.T) > kOracleWorkBudget) {
    if (s.B > 1) {
      --s.B;
    } else if (s.cfg.n_layers > 1) {
      --s.cfg.n_layers;
    } else if (s.cfg.d_model > dm_min) {
      s.cfg.d_model = dm_min;
    } else if (s.cfg.expand > 1) {
      s.cfg.expand = 1;  // keeps d_inner odd when it was
    } else {
      break;  // smallest shape of this (T, d_state): run it anyway
    }
    if (s.B * s.T * s.cfg.input_dim < kMinRuleElements)
      s.cfg.input_dim = int((kMinRuleElements + s.B * s.T - 1) / (s.B * s.T));
  }
  s.seed = *rc::gen::noShrink(rc::gen::arbitrary<uint64_t>());
  return s;
}

std::string label_of(const Shape& s) {
  std::ostringstream os;
  os << describe(s.cfg, s.B, s.T) << " di=" << s.cfg.expand * s.cfg.d_model << " seed=" << s.seed;
  return os.str();
}

// The scan modes a shape exercises: both when d_state allows the sequential
// kernel, else only the parallel one (the dispatcher forces it).
std::vector<ScanMode> modes_for(const Shape& s) {
  if (s.cfg.d_state <= Limits::kMaxSeqScanDState) return {ScanMode::Sequential, ScanMode::Parallel};
  return {ScanMode::Parallel};
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
