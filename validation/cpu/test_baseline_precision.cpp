// ctest-labels: cpu;property
// test_baseline_precision.cpp — the CPU side of the mixed-precision k-rule.
// The GPU precision suites accept a bf16/f16 result K when
//     max|K-O| <= 2·max|P-O| + 2 ulp,
// with O the f64 oracle and P the float oracle that rounds to the dtype at
// the GPU's typed storage points (Storage{BF16|F16}, reference_cpu/model.cpp),
// both on the same dtype-quantised inputs (model_check.hpp). That bound means
// something only if P's error is the error of bf16/f16 storage at those
// points: not ~0 (rounding points inactive — the bound collapses to the 2-ulp
// floor) and not inflated by anything else (the bound would hide GPU bugs).
// test_oracle_precision.cpp covers the unrounded float oracle (f32 noise);
// test_oracle_configs.cpp checks which tensors are representable in the
// dtype. This suite checks the SIZE of P's error against O, tensor by tensor
// (every output, final state, parameter gradient, d_input, d_conv0, d_ssm0):
//     R = ‖P − O‖₂ / ‖σ̂‖₂,   σ̂_i² = (1/K) Σ_k (m_k,i − O_i)²,
// where m_1..m_K (K = 16) are Monte Carlo arithmetic runs of the same oracle
// code with the same Storage (mca_scalar.hpp: every operation perturbed by a
// relative ±2^-24, every storage rounding of a value the dtype does not hold
// exactly by ±u_dtype, u_bf16 = 2^-8, u_f16 = 2^-11, and a value it holds
// stored unchanged, as round-to-nearest stores it: McaStore::RandomWhereInexact)
// — samples of the modelled rounding process on this very problem. Asserted:
//   upper  R <= 10 for every tensor (the bound of test_oracle_precision.cpp:
//          R² is at worst F(1, 16)-distributed, P(R > 10) ≈ 3e-8 per tensor);
//   lower  the median of R over the tensors of a run >= 0.1, for d_inner >=
//          kLowerMinDInner. A single tensor can have R near 0 by chance (one
//          dominant element whose error happens to be small), the median of ~20
//          cannot while the tensors' errors come from many independent roundings;
//          with inactive rounding points R is ~u_f32/u_dtype, i.e. 1e-4 (bf16) /
//          1e-3 (f16).
// Where the lower bound's premise fails: with 2–4 channels a few storage roundings
// dominate every tensor, so the tensors' R are not independent and their median is one
// draw of a few. Counterexamples: RC_PARAMS="seed=11409417928398283467" (B 1 T 37 dm 2
// expand 1 ds 12 dc 2 L 2 mid 9, bf16: median R 0.094) and "seed=8328310328338023429"
// (B 3 T 3 dm 3 expand 1 ds 20 dc 3 L 3 mid 19, f16: 0.096); the same problems in the
// other dtype, or with a neighbouring problem seed, give 0.4–0.9. Measured with this
// suite's functions (2026-12-04, 400 random shapes per d_inner and dtype): a median below
// 0.1 in 35 of 800 at d_inner 2 (min 0.005), 2 of 800 at 3, 1 of 800 at 4, none of 1600
// at 5 and 6; and none in 2888 shapes of the property's generator with d_inner >= 5 (min
// 0.203). So the lower bound applies from d_inner 5; the upper bound to every shape.
// Negative controls show both sides can fail: P without storage rounding
// (the lower bound fails) and a noise model without storage rounding for a P
// that rounds (the upper bound fails). Printed: R and the normwise error in
// units of u_dtype, ‖P − O‖₂ / (u_dtype·‖O‖₂), per tensor.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/builtin_configs.hpp"
#include "reference_cpu/mca_scalar.hpp"
#include "check/model_check.hpp"
#include "validation/support/oracle_test_support.hpp"

namespace mc::testing {
namespace {

const bool kThreads = single_thread_unless_asked();

constexpr int kMcaRuns = 16;
constexpr double kUpper = 10;     // per tensor
constexpr double kLowerMedian = 0.1;
constexpr int64_t kLowerMinDInner = 5;  // the lower bound's domain (file comment)

double unit_roundoff(DType t) {
  switch (t) {
    case DType::BF16: return 0x1p-8;
    case DType::F16: return 0x1p-11;
    case DType::F32: return 0x1p-24;
  }
  return 0x1p-24;
}

// The problem as the GPU suites see it: make_problem's data with the GEMM
// weights and X quantised to `dtype` (as make_model_inputs does, same seed) —
// except for the softplus identity channels (problem.hpp): with Δ ≈ 25 on one
// of a tiny model's few channels, the handful of bf16/f16 roundings of that
// Δ dominate the error of EVERY tensor, so the tensors' R are no longer
// independent samples and their median says nothing about the rounding
// points (measured: median R 0.08 on dm 2, di 4). The identity branch itself
// is covered by the gradient checks, the oracle precision suite and the GPU
// suites.
check::Problem quantised_problem(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                                 DType dtype) {
  check::ProblemOptions opt;
  opt.softplus_identity = false;
  check::Problem p = check::make_problem(cfg, B, T, seed, opt);
  for (const ParamEntry& e : p.layout.entries)
    if (e.gemm_weight)
      for (int64_t i = e.offset; i < e.offset + e.size; ++i)
        p.params[size_t(i)] = double(round_to(dtype, float(p.params[size_t(i)])));
  for (double& x : p.X) x = double(round_to(dtype, float(x)));
  return p;
}

struct TensorError {
  std::string name;
  int64_t n = 0;
  double err = 0;    // ‖P − O‖₂
  double noise = 0;  // ‖σ̂‖₂
  double ref = 0;    // ‖O‖₂
  bool finite = true;
  double ratio() const { return err == 0 ? 0.0 : (noise > 0 ? err / noise : INFINITY); }
};

struct Runs {
  OracleRun<double> O;
  OracleRun<float> P;
  std::vector<OracleRun<ref::Mca>> mca;
};

// O (f64, no rounding), P (float, `p_storage`), K MCA runs with `model_storage`.
Runs run_all(const check::Problem& p, DType p_storage, DType model_storage) {
  Runs r;
  r.O = run_oracle<double>(p);
  r.P = run_oracle<float>(p, Storage{p_storage});
  const ref::ScopedMcaStore inexact(ref::McaStore::RandomWhereInexact);
  for (int k = 0; k < kMcaRuns; ++k) {
    check::seed_mca(p.seed, k);
    r.mca.push_back(run_oracle<ref::Mca>(p, Storage{model_storage}));
  }
  return r;
}

TensorError measure(const std::string& name, const Runs& r, std::vector<double> OracleRun<double>::*fo,
                    std::vector<float> OracleRun<float>::*fp,
                    std::vector<ref::Mca> OracleRun<ref::Mca>::*fm, int64_t off, int64_t n) {
  TensorError t;
  t.name = name;
  t.n = n;
  const double* o = (r.O.*fo).data() + off;
  const float* pv = (r.P.*fp).data() + off;
  double se = 0, sn = 0, so = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = double(pv[i]) - o[i];
    if (!std::isfinite(e)) t.finite = false;
    se += e * e;
    so += o[i] * o[i];
    for (const OracleRun<ref::Mca>& m : r.mca) {
      const double em = (m.*fm)[size_t(off + i)].v - o[i];
      sn += em * em / kMcaRuns;
    }
  }
  t.err = std::sqrt(se);
  t.noise = std::sqrt(sn);
  t.ref = std::sqrt(so);
  return t;
}

std::vector<TensorError> measure_all(const check::Problem& p, const Runs& r) {
  using D = OracleRun<double>;
  using F = OracleRun<float>;
  using M = OracleRun<ref::Mca>;
  std::vector<TensorError> v;
  auto whole = [&](const std::string& name, auto fo, auto fp, auto fm) {
    v.push_back(measure(name, r, fo, fp, fm, 0, int64_t((r.O.*fo).size())));
  };
  whole("out", &D::out, &F::out, &M::out);
  whole("final_conv_state", &D::conv_T, &F::conv_T, &M::conv_T);
  whole("final_ssm_state", &D::ssm_T, &F::ssm_T, &M::ssm_T);
  whole("d_input", &D::dX, &F::dX, &M::dX);
  whole("d_conv0", &D::d_conv0, &F::d_conv0, &M::d_conv0);
  whole("d_ssm0", &D::d_ssm0, &F::d_ssm0, &M::d_ssm0);
  for (const ParamEntry& e : p.layout.entries)
    v.push_back(measure("grad." + e.name, r, &D::grads, &F::grads, &M::grads, e.offset, e.size));
  return v;
}

double median_ratio(const std::vector<TensorError>& v) {
  std::vector<double> r;
  for (const TensorError& t : v) r.push_back(t.ratio());
  if (r.empty()) return 0;
  std::sort(r.begin(), r.end());
  const size_t m = r.size() / 2;
  return r.size() % 2 ? r[m] : 0.5 * (r[m - 1] + r[m]);
}

double max_ratio(const std::vector<TensorError>& v) {
  double w = 0;
  for (const TensorError& t : v) w = std::max(w, t.ratio());
  return w;
}

std::string table(const std::vector<TensorError>& v, DType dtype) {
  std::string s =
      "  tensor                            n    ‖P-O‖/(u‖O‖)   ‖P-O‖      ‖σ̂‖      R\n";
  char buf[256];
  const double u = unit_roundoff(dtype);
  for (const TensorError& t : v) {
    std::snprintf(buf, sizeof buf, "  %-28s %7lld  %12.3g  %10.3e %10.3e %7.3f%s\n",
                  t.name.c_str(), (long long)t.n, t.ref > 0 ? t.err / (u * t.ref) : 0.0, t.err,
                  t.noise, t.ratio(), (t.finite && t.ratio() <= kUpper) ? "" : "  FAIL");
    s += buf;
  }
  std::snprintf(buf, sizeof buf,
                "  median R %.3f (>= %.2g where d_inner >= %lld), max R %.3f (<= %.3g)\n",
                median_ratio(v), kLowerMedian, (long long)kLowerMinDInner, max_ratio(v), kUpper);
  return s + buf;
}

// The assertions of the file comment, as one verdict with the table (the lower bound
// where d_inner >= kLowerMinDInner).
::testing::AssertionResult baseline_error_is_storage_rounding(const std::vector<TensorError>& v,
                                                              DType dtype, int64_t d_inner) {
  bool ok = !v.empty() && (d_inner < kLowerMinDInner || median_ratio(v) >= kLowerMedian);
  for (const TensorError& t : v) ok = ok && t.finite && t.ratio() <= kUpper;
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << to_string(dtype) << " baseline:\n" << table(v, dtype);
}

std::vector<TensorError> baseline_errors(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                                         DType dtype) {
  const check::Problem p = quantised_problem(cfg, B, T, seed, dtype);
  return measure_all(p, run_all(p, dtype, dtype));
}

// The small built-in configs (the two large ones take minutes of MCA runs).
bool is_large(const std::string& name) {
  return name == "mamba-rs-default" || name == "mamba-130m-layer";
}

void check_builtins(DType dtype) {
  for (const ref::NamedConfig& c : ref::builtin_configs()) {
    if (is_large(c.name)) continue;
    const std::vector<TensorError> v = baseline_errors(c.cfg, c.B, c.T, 43, dtype);
    EXPECT_GE(c.cfg.d_model * c.cfg.expand, kLowerMinDInner) << c.name << ": the lower bound applies";
    EXPECT_TRUE(baseline_error_is_storage_rounding(v, dtype, c.cfg.d_model * c.cfg.expand))
        << c.name;
    std::cout << c.name << " (" << to_string(dtype) << "):\n" << table(v, dtype);
  }
}

TEST(BaselinePrecision, Bf16BaselineErrorIsBf16StorageRounding) { check_builtins(DType::BF16); }
TEST(BaselinePrecision, F16BaselineErrorIsF16StorageRounding) { check_builtins(DType::F16); }

// Lower bound not vacuous: a "baseline" whose rounding points are inactive
// (the plain float oracle on the same quantised inputs) fails it, by orders
// of magnitude, for both dtypes.
TEST(BaselinePrecision, InactiveRoundingPointsAreDetected) {
  const ref::NamedConfig& c = ref::builtin_config("small");
  for (DType dtype : {DType::BF16, DType::F16}) {
    const check::Problem p = quantised_problem(c.cfg, c.B, c.T, 44, dtype);
    const std::vector<TensorError> v = measure_all(p, run_all(p, DType::F32, dtype));
    std::cout << "P without storage rounding, noise model " << to_string(dtype) << ":\n"
              << table(v, dtype);
    EXPECT_LT(median_ratio(v), kLowerMedian) << table(v, dtype);
    EXPECT_FALSE(baseline_error_is_storage_rounding(v, dtype, c.cfg.d_model * c.cfg.expand));
  }
}

// Upper bound not vacuous: a P that rounds to the dtype, judged against a
// noise model without storage rounding (f32 arithmetic noise only), fails it.
TEST(BaselinePrecision, RoundingBeyondTheModelIsDetected) {
  const ref::NamedConfig& c = ref::builtin_config("small");
  for (DType dtype : {DType::BF16, DType::F16}) {
    const check::Problem p = quantised_problem(c.cfg, c.B, c.T, 45, dtype);
    const std::vector<TensorError> v = measure_all(p, run_all(p, dtype, DType::F32));
    std::cout << to_string(dtype) << " P, noise model without storage rounding:\n" << table(v, dtype);
    EXPECT_GT(max_ratio(v), kUpper) << table(v, dtype);
    EXPECT_FALSE(baseline_error_is_storage_rounding(v, dtype, c.cfg.d_model * c.cfg.expand));
  }
}

RC_GTEST_PROP(BaselinePrecisionProperty, BaselineErrorIsStorageRounding, ()) {
  const OracleShape s = *gen_oracle_shape();
  const DType dtype = *rc::gen::element(DType::BF16, DType::F16);
  const std::vector<TensorError> v = baseline_errors(s.config(), s.B, s.T, s.seed, dtype);
  RC_LOG() << s.str() << " " << to_string(dtype) << "\n" << table(v, dtype);
  RC_ASSERT(bool(baseline_error_is_storage_rounding(v, dtype, s.d_model * s.expand)));
}

}  // namespace
}  // namespace mc::testing
