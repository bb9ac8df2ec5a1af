// problem.hpp — deterministic test problems for the oracle's validation:
// from (config, B, T, seed) a perturbed parameter arena, an input X, NON-ZERO
// initial conv/SSM states, an upstream gradient d_out and upstream gradients
// on the FINAL conv/SSM states (names: check/catalogue.hpp), all exactly
// representable in f32 so that the float and double instantiations of the
// oracle (and the GPU) see bit-identical inputs (test: Problem.EveryValueIsF32Exact).
// PRNG: splitmix64.
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.hpp"
#include "reference_cpu/model.hpp"
#include "core/param_layout.hpp"

namespace mc::check {

// splitmix64 (Steele, Lea & Flood 2014, constants of Vigna's reference code).
// Stated here because every generated test problem depends on its exact bits.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1), 53 bits
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal();                                                  // N(0, 1), Box–Muller
  double rademacher() { return (next() >> 63) ? 1.0 : -1.0; }

 private:
  uint64_t s_;
};

// The nearest float, as a double (inputs are generated f32-exact).
inline double f32_exact(double x) { return double(float(x)); }

// Independent sub-streams of one seed (so e.g. X does not change when the
// parameter count changes).
enum class Stream : uint64_t {
  Params = 1, Input = 2, ConvState = 3, SsmState = 4, DOut = 5, Extra = 6,
  FinalStateGrads = 7, SoftplusIdentity = 8
};
SplitMix64 stream(uint64_t seed, Stream s, uint64_t salt = 0);

struct ProblemOptions {
  double x_scale = 1.0;      // X ~ N(0, x_scale²)
  double state_scale = 0.5;  // conv0, ssm0 ~ N(0, state_scale²)
  bool zero_state = false;   // mamba-rs's own tests start from zero state
  // Upstream gradients on the final conv/SSM states ~ N(0, final_grad_scale²)
  // (false: zero, the loss sees `out` alone).
  bool final_state_grads = true;
  double final_grad_scale = 0.5;
  // Some channels of every layer get a dt_proj bias far above 20, so that
  // Δraw > 20 there and softplus takes its identity branch (spec §3.2 F4c).
  bool softplus_identity = true;
};

// The softplus identity channels: max(1, d_inner / 8) channels per layer have
// dt_proj_b = kIdentityBias + U(0, 1), so Δraw = dt_in·W + b stays above 20
// with a wide margin (the dt_proj part of Δraw is a few units at most; no
// Δraw comes near the branch point, where the finite differences of the
// gradient checks would straddle it). All other channels stay below ~3.
constexpr double kIdentityBias = 28.0;
// The channels chosen for layer `layer` (ascending), from the seed.
std::vector<int64_t> softplus_identity_channels(const Dims& d, uint64_t seed, int64_t layer);

struct Problem {
  ModelConfig cfg;
  Dims dims;
  ParamLayout layout;
  int64_t B = 1, T = 1;
  uint64_t seed = 0;
  std::vector<double> params;  // [layout.total]
  std::vector<double> X;       // [B*T, mid]
  std::vector<double> conv0;   // [L, B, di, dc]
  std::vector<double> ssm0;    // [L, B, di, ds]
  std::vector<double> d_out;   // [B*T, dm]
  std::vector<double> d_conv_final;  // [L, B, di, dc] upstream gradient on the final conv state
  std::vector<double> d_ssm_final;   // [L, B, di, ds] upstream gradient on the final SSM state

  Problem(const ModelConfig& c, int64_t B, int64_t T, uint64_t seed);
  // The initial states as a RecurrentState of scalar S.
  template <class S>
  ref::RecurrentState<S> state() const {
    ref::RecurrentState<S> s(dims, B);
    for (size_t i = 0; i < conv0.size(); ++i) s.conv[i] = S(conv0[i]);
    for (size_t i = 0; i < ssm0.size(); ++i) s.ssm[i] = S(ssm0[i]);
    return s;
  }
};

// init_params(layout, seed) (spec §1.4), then a seeded perturbation so that no
// tensor is degenerate: input_proj_b, conv1d_bias ~ U(-0.5, 0.5); norm weights
// 1 + U(-0.3, 0.3); A_log += U(-0.3, 0.3); D = 1 + U(-0.5, 0.5);
// dt_proj_b += U(-0.5, 2) (Δ spans ~1e-3 .. ~1, so exp(ΔA) is far from 1 for
// some channels), except the softplus identity channels (see above). GEMM and
// conv weights keep the Kaiming-uniform init. X ~ N(0, 1), conv0/ssm0 ~
// N(0, 0.25), d_out ~ N(0, 1), d_conv_final/d_ssm_final ~ N(0, 0.25). All f32-exact.
Problem make_problem(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                     const ProblemOptions& opt = {});

// Element-type conversions (double -> float rounds to nearest).
std::vector<float> to_float(const std::vector<double>& v);
std::vector<double> to_double(const std::vector<float>& v);
template <class S>
std::vector<S> convert(const std::vector<double>& v) {
  std::vector<S> r;
  r.reserve(v.size());
  for (double x : v) r.push_back(S(x));
  return r;
}

// Fills v with f32-exact N(0, scale²) draws.
void fill_normal(SplitMix64& rng, std::vector<double>& v, double scale = 1.0);

}  // namespace mc::check
