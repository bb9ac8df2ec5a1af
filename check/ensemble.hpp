// ensemble.hpp — the f32 GPU-vs-oracle rule of `mambacheck validate` and of
// the model-level GPU suites (test_model_parity, test_shape_properties), one
// implementation for both. One backbone problem is run as
//   O  the f64 CPU oracle,
//   P  the float CPU oracle (the same-precision baseline of compare.hpp),
//   M  kMcaRuns Monte Carlo arithmetic runs of the same oracle code
//      (reference_cpu/mca_scalar.hpp: every operation perturbed by a random
//      relative error in ±2^-24 — samples of the f32 rounding process),
//   K  the GPU pipeline (gpu::Model, f32),
// and every tensor of result_catalogue (catalogue.hpp) is compared under the
// k-rule of compare.hpp:  max|K-O| <= kF32KLimit * e_P + 2 ulp_f32(max|O|).
//
// The baseline error e_P is the largest max|B-O| over the ensemble B in
// {P, M_1..M_kMcaRuns}, not over P alone. Why: the rule compares two maxima
// of |error| over a tensor, and at model level one badly conditioned element
// often dominates both (a cancellation in a gradient sum), so max|K-O| /
// max|P-O| is close to a ratio of two single rounding-error samples — a
// Cauchy-like variable that exceeds 4 about 15% of the time for two equally
// accurate f32 implementations. Measured: the float oracle compiled with FMA
// contraction as "K" failed ~4% of random model shapes against P alone (k up
// to 14 on a 3060-element d_input). With e_P the maximum of 1 + 8 samples, an
// equally accurate K exceeds 4·e_P with probability ~7e-5 per tensor even in
// that worst case (|N| > 4·max of 9 |N_i|, simulated), and MCA noise (uniform
// in ±u) is ~1.4x the RMS of round-to-nearest, which lowers it further. k
// against P alone is reported as well (k_P).
//
// The same MCA runs are the ensemble of the statistical checks (stats.hpp:
// bias and magnitude bias in units of the ensemble's noise, RMS against its
// derived limit; docs/precision-statistics.md), computed for every tensor with
// P as the baseline; a tensor passes when both the k-rule and the statistics
// do (KRuleResult::verdict()).
//
// The bf16/f16 rule (model_check.hpp compare_model) takes its e_P over P and
// conforming runs with round-to-nearest stores (check::conforming_runs): P
// carries the storage rounding there, and Monte Carlo runs with random stores
// would be noisier than any pipeline that rounds to nearest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "check/catalogue.hpp"
#include "check/compare.hpp"
#include "check/model_check.hpp"

namespace mc::check {

// Number of Monte Carlo arithmetic runs in the baseline ensemble (see above).
constexpr int kMcaRuns = 8;

// The reference side of one case: O, and the baseline ensemble {P, MCA runs}.
struct References {
  ModelOutputs<double> O;
  std::vector<ModelOutputs<double>> baselines;  // [0] = P (float oracle), then MCA runs
  std::vector<std::string> names;               // "P", "mca1", ...
};
References references(const ModelInputs& in, bool backward, uint64_t seed);

// Target "burn-in nosave" forward (zero initial state): O and the ensemble, [B, dm].
struct TargetReferences {
  std::vector<double> O;
  std::vector<std::vector<double>> baselines;
  std::vector<std::string> names;
};
TargetReferences target_references(const ModelInputs& in, uint64_t seed);

struct TensorCheck {
  KRuleResult r;       // K vs O, baseline = the worst ensemble member
  std::string source;  // which member set e_P
  double k_P = 0;      // max|K-O| / max|P-O| (P alone, for information)
};

// One tensor: K[0, n) vs O with the worst of the baselines (bases[0] = P).
TensorCheck ensemble_rule(const std::string& name, const float* K, const double* O,
                          const std::vector<const double*>& bases,
                          const std::vector<std::string>& names, int64_t n,
                          double k_limit = kF32KLimit);

// A tensor that cannot be compared (size mismatch, too small): a failing entry.
TensorCheck setup_failure(const std::string& what);

struct ModelCheck {
  std::string label;
  std::vector<TensorCheck> tensors;
  bool pass() const;            // false when empty
  double max_k() const;         // over finite k
  const TensorCheck* worst() const;  // largest headroom (closest to failing)
  static std::string line(const std::string& label, const TensorCheck& t);
  std::string report(bool failures_only = false) const;
};

// K vs the references, every tensor of result_catalogue(in, backward).
ModelCheck compare_ensemble(const std::string& label, const ModelInputs& in,
                            const ModelOutputs<float>& K, const References& ref, bool backward);

// Two f32 GPU results of one problem that differ only in the scan's summation
// order may be at most kF32KLimit * e_P (+ the 2-ulp floor) apart: the scale
// the rule grants each of them against O, without the factor 2 that the
// triangle inequality would allow. kernel stats = a vs b (b as the reference),
// baseline = the worst ensemble member vs O.
ModelCheck compare_modes(const std::string& label, const ModelInputs& in,
                         const ModelOutputs<float>& Ka, const ModelOutputs<float>& Kb,
                         const References& ref);

// The CLI's f32 check of one problem: references (O, P, MCA) and the GPU run
// (scan, gemm, check_finite as in gpu_run), compared by compare_ensemble.
ModelCheck check_gpu_f32(const ModelInputs& in, uint64_t seed, ScanMode scan,
                         gpu::GemmMath gemm = gpu::GemmMath::F32, bool check_finite = false);

}  // namespace mc::check
