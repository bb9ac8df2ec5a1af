// model_check.hpp — run one backbone problem three ways and compare them
// tensor by tensor under the k-x rule (compare.hpp):
//   O  the f64 CPU oracle (no rounding),
//   P  the float CPU oracle with the same storage rounding as the GPU dtype
//      (the same-precision baseline; for f32 simply the float oracle),
//   K  the GPU pipeline (gpu::Model).
// For bf16/f16 the GEMM weights and the input X are quantised to the dtype
// once, before any of the three runs, so all see identical inputs (input
// quantisation is not kernel error). Compared: every tensor of
// result_catalogue (catalogue.hpp: out, final conv/SSM states, every
// parameter gradient, the input gradient and the initial-state gradients,
// under their catalogue names). The f32 rule of the CLI and the model-level
// suites adds Monte Carlo arithmetic runs to the baseline (ensemble.hpp);
// compare_model here is the rule of the bf16/f16 precision suite (P, and
// with conforming_runs the worst of P and them, below).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "check/catalogue.hpp"
#include "check/compare.hpp"
#include "core/config.hpp"
#include "reference_cpu/model.hpp"
#include "core/param_layout.hpp"
#include "gpu/model.hpp"
#include "core/storage.hpp"

namespace mc::check {

// Everything a backbone forward+backward needs, as the GPU sees it (f32).
struct ModelInputs {
  ModelConfig cfg;
  int64_t B = 1, T = 1;
  DType dtype = DType::F32;   // quantisation applied to params' GEMM weights and X
  std::vector<float> params;  // [lay.total]
  std::vector<float> X;       // [B*T, mid]
  std::vector<float> conv0;   // [L, B, di, dc]  initial conv state
  std::vector<float> ssm0;    // [L, B, di, ds]  initial SSM state
  std::vector<float> d_out;   // [B*T, dm]       upstream gradient
  std::vector<float> d_conv_final;  // [L, B, di, dc] upstream gradient on the final conv state
  std::vector<float> d_ssm_final;   // [L, B, di, ds] (both empty or all zero: none)
};

// The input tensor a catalogue entry of an input field refers to.
const std::vector<float>& field(const ModelInputs& in, Field f);

// The seeded problem of problem.hpp, quantised for `dtype` (see above).
ModelInputs make_model_inputs(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                              DType dtype = DType::F32);

// Results of one forward + backward in precision S.
template <class S>
struct ModelOutputs {
  std::vector<S> out;         // [B*T, dm]
  std::vector<S> conv_final;  // [L, B, di, dc]
  std::vector<S> ssm_final;   // [L, B, di, ds]
  std::vector<S> grads;       // [lay.total]
  std::vector<S> dX;          // [B*T, mid]
  std::vector<S> d_conv0;     // [L, B, di, dc]
  std::vector<S> d_ssm0;      // [L, B, di, ds]
};

template <class S>
std::vector<S> cast_vec(const std::vector<float>& v) {
  return std::vector<S>(v.begin(), v.end());
}

// The result tensor a catalogue entry of an output field refers to.
template <class S>
const std::vector<S>& field(const ModelOutputs<S>& o, Field f) {
  switch (f) {
    case Field::ConvFinal: return o.conv_final;
    case Field::SsmFinal: return o.ssm_final;
    case Field::Grads: return o.grads;
    case Field::DX: return o.dX;
    case Field::DConv0: return o.d_conv0;
    case Field::DSsm0: return o.d_ssm0;
    default: return o.out;
  }
}

// True when the problem puts a non-zero upstream gradient on a final state.
bool has_final_state_grads(const ModelInputs& in);

// The CPU oracle in scalar S with storage rounding `storage` (O: double + F32;
// P: float + the GPU dtype; any scalar the oracle is instantiated for, e.g. the
// Monte Carlo arithmetic one), from the problem's initial states; with
// backward = false only out and the final states are filled.
template <class S>
ModelOutputs<S> oracle_run(const ModelInputs& in, DType storage, bool backward = true) {
  const Dims d = Dims::from(in.cfg);
  const ParamLayout lay(d);
  const int64_t R = in.B * in.T;
  const Storage st{storage};
  const std::vector<S> params = cast_vec<S>(in.params);
  const std::vector<S> X = cast_vec<S>(in.X);
  ref::RecurrentState<S> state(d, in.B);
  state.conv = cast_vec<S>(in.conv0);
  state.ssm = cast_vec<S>(in.ssm0);
  ModelOutputs<S> o;
  o.out.assign(size_t(R * d.dm), S(0));
  ref::BackboneActivations<S> act;
  ref::backbone_forward<S>(lay, params.data(), in.B, in.T, X.data(), state, o.out.data(),
                           backward ? &act : nullptr, st);
  o.conv_final = state.conv;
  o.ssm_final = state.ssm;
  if (!backward) return o;
  const std::vector<S> d_out = cast_vec<S>(in.d_out);
  const std::vector<S> d_conv_T = cast_vec<S>(in.d_conv_final);
  const std::vector<S> d_ssm_T = cast_vec<S>(in.d_ssm_final);
  ref::FinalStateGrads<S> fin;
  if (d_conv_T.size() == state.conv.size()) fin.conv = d_conv_T.data();
  if (d_ssm_T.size() == state.ssm.size()) fin.ssm = d_ssm_T.data();
  o.grads.assign(size_t(lay.total), S(0));
  o.dX.assign(size_t(R * d.mid), S(0));
  o.d_conv0.assign(in.conv0.size(), S(0));
  o.d_ssm0.assign(in.ssm0.size(), S(0));
  ref::BackboneGradOutputs<S> g;
  g.params = o.grads.data();
  g.dX = o.dX.data();
  g.d_conv0 = o.d_conv0.data();
  g.d_ssm0 = o.d_ssm0.data();
  ref::backbone_backward<S>(lay, params.data(), act, d_out.data(), fin, g, st);
  return o;
}

// The GPU pipeline (dtype = in.dtype) with state gradients and the problem's
// final-state upstream gradients (Model::set_final_state_grads). With check_finite
// every step's outputs are scanned and gpu::NonFiniteError names the first
// NaN/Inf (step, tensor, index, overflow). gemm: the f32 GEMMs' tier, typed:
// the bf16/f16 GEMMs' tier (gpu/model.hpp; defaults: strict f32, tensor cores).
ModelOutputs<float> gpu_run(const ModelInputs& in, ScanMode scan,
                            gpu::GemmMath gemm = gpu::GemmMath::F32, bool check_finite = false,
                            ScanExp exp = ScanExp::Auto,
                            gpu::TypedGemm typed = gpu::TypedGemm::TensorCore);

std::string describe(const ModelConfig& c, int64_t B, int64_t T);

// Smallest tensor the k-rule is applied to: for a handful of elements the
// ratio of two maxima of independent rounding errors is Cauchy-like and
// exceeds any small k often (1e-3 false-failure rate at n = 8, 4e-5 at 16 for
// k = 4, simulated), so cases must give every compared tensor >= 16 elements.
constexpr int64_t kMinRuleElements = 16;
bool shape_ok_for_k_rule(const ModelConfig& c, int64_t B, int64_t T);

double k_limit_for(DType dtype);  // kF32KLimit or kTypedKLimit

struct Comparison {
  std::string label;
  std::vector<KRuleResult> tensors;
  bool pass() const;            // every tensor's verdict (k-rule and, where computed, statistics)
  double max_k() const;         // over finite k
  double max_headroom() const;
  std::string report(bool failures_only = false) const;  // one line per tensor
};

// `runs` Monte Carlo arithmetic runs of the oracle (reference_cpu/mca_scalar.hpp)
// with storage rounding `storage` (each one perturbs every operation by ±u32 and
// every typed storage rounding by ±u_dtype): the ensemble of the statistical
// checks (stats.hpp). Run r is seeded from (seed, r, OpenMP thread), so it is
// reproducible for a fixed OMP_NUM_THREADS.
std::vector<ModelOutputs<double>> mca_ensemble(const ModelInputs& in, DType storage, int runs,
                                               uint64_t seed, bool backward = true);

// Conforming runs of the typed rule's baseline: `runs` Monte Carlo arithmetic runs
// of the oracle with round-to-nearest stores (ref::McaStore::Nearest): the same
// storage points as P, each rounded as P rounds it, the f32 arithmetic perturbed
// within one rounding per operation (libm within 2 ulp). Each one is an
// implementation of exactly P's accuracy class that makes other f32 rounding
// choices, as a GPU pipeline does (other GEMM orders, other libm).
//
// Why the typed rule needs them (docs/precision-statistics.md, "The typed k-rule's
// baseline"): where one stored element sits within a few f32 ulps of a rounding
// boundary of the dtype and its error dominates a tensor (a gradient summed over
// T rows), P's max error is that one rounding's, and an equally accurate pipeline
// that rounds the element the other way has 2-3x P's error. Measured on the f16
// shape the precision property found (dm 17, ds 64, T 1023, seed 13): 4 of 6
// conforming runs gave k = 2.4-2.8 on six gradients under the P-only rule, the
// same tensors and k as the H200 (validation/cpu/test_typed_rule_calibration.cpp).
// With e_P the largest max|B-O| over B in {P, runs}, as the f32 rule does with its
// ensemble (ensemble.hpp), a pipeline flips such an element and fails only when no
// run flipped it too: at most p(1-p)^m, p the flip probability, m = runs.
constexpr int kTypedBaselineRuns = 8;
// Run r alone (conforming_runs' r-th, the same bits).
ModelOutputs<double> conforming_run(const ModelInputs& in, DType storage, int r, uint64_t seed,
                                    bool backward = true);
std::vector<ModelOutputs<double>> conforming_runs(const ModelInputs& in, DType storage, int runs,
                                                  uint64_t seed, bool backward = true);

// K vs O with baseline P, every tensor of result_catalogue (catalogue names:
// out, layers.l.conv_final, ..., grad.<ParamEntry name>, grad.input,
// grad.layers.l.conv0, grad.layers.l.ssm0). With an ensemble (mca_ensemble)
// every tensor also gets the statistical checks. With baseline runs
// (conforming_runs) the rule's baseline error is the largest over P and them.
Comparison compare_model(const std::string& label, const ModelInputs& in,
                         const ModelOutputs<float>& K, const ModelOutputs<double>& O,
                         const ModelOutputs<float>& P,
                         const std::vector<ModelOutputs<double>>* ensemble = nullptr,
                         const std::vector<ModelOutputs<double>>* baselines = nullptr);

// The typed rule for several kernel results of one problem (one K per scan route), with
// the conforming runs of its baseline computed only as far as they can change a verdict.
// The rule's bound k·e + atol grows with e, and e over P and runs 1..j is at most e over
// P and runs 1..j+1. So a tensor that passes against P and the first j runs passes
// against P and all of them. The runs (conforming_run(in, in.dtype, r, seed), r = 0, 1,
// ...) are computed one at a time while some tensor of some K fails the k-rule against P
// and the runs so far, at most `baseline_runs` of them, every K judged again after each.
// The verdicts are the eager rule's (compare_model with conforming_runs(in, in.dtype,
// baseline_runs, seed)), with one exception: a later run with a non-finite result fails
// the eager rule and is not computed here once the earlier ones pass. k and the baseline
// source are those of the runs computed, so k can be larger than the eager rule's (never
// with another verdict). A problem whose tensors all pass against P costs no run; at the
// model shapes a run costs about one f64 oracle (validation/gpu/test_precision_model.cpp).
struct TypedVerdicts {
  std::vector<Comparison> comparisons;  // parallel to the kernel results
  std::vector<Comparison> p_only;       // the first judgement, against P alone (same order)
  int runs = 0;                          // conforming runs computed (0..baseline_runs)
  double seconds_runs = 0;               // their wall time
};
TypedVerdicts compare_models_lazy_baseline(const std::vector<std::string>& labels,
                                           const ModelInputs& in,
                                           const std::vector<ModelOutputs<float>>& Ks,
                                           const ModelOutputs<double>& O,
                                           const ModelOutputs<float>& P,
                                           const std::vector<ModelOutputs<double>>* ensemble,
                                           int baseline_runs, uint64_t seed);

// One element of a result tensor (its catalogue name, result_catalogue) as each source has
// it: O, K, P and every ensemble run, the ensemble's spread there (the RMS of its runs'
// errors) and K's and P's errors in units of it. For diagnosing a k-rule failure at the
// element where it is worst (KRuleResult::kernel.argmax_abs). An unknown tensor or an
// index outside it is refused with std::invalid_argument naming it and the limit.
std::string element_report(const std::string& tensor, int64_t index, const ModelInputs& in,
                           const ModelOutputs<float>& K, const ModelOutputs<double>& O,
                           const ModelOutputs<float>& P,
                           const std::vector<ModelOutputs<double>>* ensemble = nullptr);

// Convenience: O, P and K for one case under the bf16/f16 rule (the f32 rule of
// the CLI is ensemble.hpp's check_gpu_f32), with baseline_runs conforming runs
// (0: P alone), and with stat_runs > 0 the ensemble of the statistical checks.
Comparison check_gpu_against_oracle(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                                    DType dtype, ScanMode scan,
                                    gpu::GemmMath gemm = gpu::GemmMath::F32,
                                    bool check_finite = false,
                                    gpu::TypedGemm typed = gpu::TypedGemm::TensorCore,
                                    int stat_runs = 0, int baseline_runs = kTypedBaselineRuns);

}  // namespace mc::check
