// shape_generator.hpp — the rapidcheck shape generator shared by the GPU
// property suites (f32 test_shape_properties, bf16/f16 test_precision): the
// sequence lengths and d_state values the issues name, odd d_inner, d_conv
// 1..4, B 1..4, a bounded CPU-oracle cost per case, and the scan modes a shape
// exercises. Header only: each GPU suite is its own executable.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "check/model_check.hpp"

namespace mc::testing {

// scripts/sanitize.sh sets MC_SANITIZE=1: draw only a few small cases there.
inline bool under_sanitizer() {
  const char* s = std::getenv("MC_SANITIZE");
  return s && *s && std::string(s) != "0";
}

// Sequence lengths: chunk boundaries of the parallel scan and the Auto
// threshold (255/256/257, 1023/1024/1025), T = 1, 2, a long multi-chunk 3072,
// and primes. Ordered small to large: rapidcheck shrinks toward the front.
inline std::vector<int64_t> seq_lens() {
  if (under_sanitizer()) return {1, 2, 7, 31, 257};
  return {1, 2, 3, 5, 7, 13, 31, 61, 127, 251, 255, 256, 257, 509, 1021, 1023, 1024, 1025, 2039,
          3072};
}
inline std::vector<int> d_states() {
  if (under_sanitizer()) return {1, 16, 65};
  return {1, 16, 63, 64, 65, 128, 256};
}

struct Shape {
  ModelConfig cfg;
  int64_t B = 1, T = 1;
  uint64_t seed = 0;
};

// Work units of one case's CPU oracle (per precision, fwd + bwd): per layer
// and token the four GEMMs ~ di*(3*dm + xd + dr) and the scan ~ 12*di*ds.
inline double oracle_work(const ModelConfig& c, int64_t B, int64_t T) {
  const double di = double(c.expand) * c.d_model;
  return double(B) * double(T) * c.n_layers * di * (3.0 * c.d_model + 12.0 * c.d_state + 2.0);
}
// ~1 s of f64+f32 oracle on one core for the largest case (T 3072, d_state 256).
constexpr double kOracleWorkBudget = 1.6e8;

// Shrinkable shape generator; `max_ds` restricts d_state (64: both scan modes
// apply). d_model starts at kMinRuleElements (model_check.hpp: every compared
// tensor needs >= 16 elements for the max-error ratio to be a reliable
// statistic); when a case exceeds the oracle budget, B, then the layer count,
// then d_model, then expand are reduced deterministically.
inline Shape gen_shape(int max_ds = int(Limits::kMaxDState)) {
  using check::kMinRuleElements;
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
  auto fix_input_dim = [&] {  // d_input [B*T, mid] needs >= 16 elements too
    if (s.B * s.T * s.cfg.input_dim < kMinRuleElements)
      s.cfg.input_dim = int((kMinRuleElements + s.B * s.T - 1) / (s.B * s.T));
  };
  fix_input_dim();
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
    fix_input_dim();
  }
  s.seed = *rc::gen::noShrink(rc::gen::arbitrary<uint64_t>());
  return s;
}

// The scan modes a shape exercises: the checkpointed route, the chunked seed
// route, and the sequential one when d_state allows it.
inline std::vector<ScanMode> modes_for(const Shape& s) {
  if (s.cfg.d_state <= Limits::kMaxSeqScanDState)
    return {ScanMode::Checkpointed, ScanMode::Sequential, ScanMode::Parallel};
  return {ScanMode::Checkpointed, ScanMode::Parallel};
}

}  // namespace mc::testing
