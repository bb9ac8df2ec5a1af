// ctest-labels: cpu
// test_precision_statistics.cpp — the statistical precision checks of
// check/stats.hpp (bias z, magnitude-bias z, RMS ratio against a Monte Carlo
// arithmetic ensemble; derivation in docs/precision-statistics.md), on the CPU,
// with stand-ins for a kernel K that live in this file only:
//
//   negative controls (must FAIL the statistics; the k-rule's verdict is printed,
//   and asserted to PASS where the point is that the k-rule cannot see the fault)
//     * a biased rounding at a storage point: the bf16 store of the gating output
//       and of the scan output y rounds toward zero (the RZ default of
//       __float2bfloat16_rz, spec pitfall 12) or upward, instead of to nearest;
//     * an accuracy loss in an elementary function: exp accurate to ~16 ulp
//       (relative error up to ±32u) in SiLU and ~8 ulp (±16u) in the scan's
//       dA = exp(δ·A), instead of within 2 ulp (the ensemble models libm as within
//       ±4u and the RMS limit allows a kernel's own summation order 1.5x, so in
//       SiLU the threshold is about ±16u: printed, at the edge);
//     * one storage rounding more or less (the storage agreement check): the
//       dt_proj epilogue's softplus of the unrounded raw, the conv's SiLU of the
//       rounded pre-activation, a toward-zero store; the k-rule passes them;
//   controls that must PASS
//     * the same stores after other f32 arithmetic (a stable softplus formula, a
//       contracted sum): the storage agreement check passes;
//     * an equally accurate reordering of a sum: the scan's y = Σ_n h·C summed in
//       descending n, the GEMM's k-sum reversed, the recurrence with one fused
//       multiply-add;
//     * the calibration: the float oracle itself, and every ensemble run judged
//       against the other runs (leave one out) — the hypothesis the limits are
//       derived under — over many seeds and shapes.
// The GPU side of the same checks is in every GPU suite that compares tensors
// (positive control: the current kernels pass) and in the mutants of
// validation/mutants/ (scripts/mutate.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "check/problem.hpp"
#include "check/stats.hpp"
#include "core/storage.hpp"
#include "reference_cpu/mca_scalar.hpp"
#include "reference_cpu/steps.hpp"
#include "validation/support/oracle_test_support.hpp"

namespace mc::testing {
namespace {

const bool kThreads = single_thread_unless_asked();

using check::StatResult;
using ref::Mca;

constexpr int kRuns = check::kStatRuns;

std::vector<float> uniform(int64_t n, uint64_t seed, double lo, double hi, DType q = DType::F32) {
  check::SplitMix64 r(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_to(q, float(r.uniform(lo, hi)));
  return v;
}

template <class S>
std::vector<S> as(const std::vector<float>& v) {
  return std::vector<S>(v.begin(), v.end());
}

// ---- the reference side of one computation ---------------------------------------------
// f(tag) runs the computation in scalar decltype(tag) (double: O, float: P, Mca: one
// ensemble run) and returns every output value in order.
struct References {
  std::vector<double> O;
  std::vector<float> P;
  std::vector<std::vector<double>> M;  // kRuns + 1 runs (one spare for leave-one-out)
};

// `count` Monte Carlo runs of f, run k seeded from seed·γ + offset + k.
template <class F>
std::vector<std::vector<double>> mca_runs(F f, uint64_t seed, uint64_t offset, int count) {
  std::vector<std::vector<double>> runs;
  for (int k = 0; k < count; ++k) {
    Mca::seed(seed * 0x9e3779b97f4a7c15ULL + offset + uint64_t(k));
    runs.push_back(check::to_double_vec(f(Mca{})));
  }
  return runs;
}

template <class F>
References references(F f, uint64_t seed) {
  References r;
  r.O = check::to_double_vec(f(double{}));
  r.P = [&] {
    auto p = f(float{});
    return std::vector<float>(p.begin(), p.end());
  }();
  r.M = mca_runs(f, seed, 1, kRuns + 1);
  return r;
}

std::vector<const double*> ensemble(const References& r, int skip = -1, int64_t off = 0) {
  std::vector<const double*> e;
  for (int k = 0; k <= kRuns && int(e.size()) < kRuns; ++k)
    if (k != skip) e.push_back(r.M[size_t(k)].data() + off);
  return e;
}

StatResult stats_of(const std::vector<float>& K, const References& r, int64_t off, int64_t n) {
  return check::stat_check(K.data() + off, r.O.data() + off, r.P.data() + off, ensemble(r, -1, off),
                           n);
}

check::KRuleResult k_rule_of(const std::string& name, const std::vector<float>& K,
                             const References& r, int64_t off, int64_t n, DType dt) {
  return check::k_rule(name, K.data() + off, r.O.data() + off, r.P.data() + off, n, dt,
                       dt == DType::F32 ? check::kF32KLimit : check::kTypedKLimit);
}

void print(const std::string& what, const check::KRuleResult& k, const StatResult& s) {
  std::cout << "  " << what << ": k-rule " << (k.pass ? "PASS" : "FAIL") << " (k=" << k.k
            << ")" << s.summary() << "\n";
}

// ---- storage roundings of the K stand-ins ------------------------------------------------
float bf16_toward_zero(float x) {  // truncation: __float2bfloat16_rz
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
float bf16_upward(float x) {  // toward +inf
  const float t = bf16_toward_zero(x);
  if (t == x || x < 0) return t;  // exact, or a negative: truncation is toward +inf
  uint32_t u;
  std::memcpy(&u, &t, 4);
  u += 0x10000u;  // one bf16 ulp up in magnitude
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// The typed store of each scalar: O none, P round to nearest, Mca random rounding.
double store(DType, double x) { return x; }
float store(DType t, float x) { return round_to(t, x); }
Mca store(DType t, Mca x) { return ref::round_to(t, x); }

// ---- exponentials of the K stand-ins -------------------------------------------------------
// Correctly rounded exp with an extra deterministic relative error of up to ±w·u32,
// pseudo-random per input: an exp accurate to ~w/2 ulp instead of within 2 ulp.
float exp_lossy(float x, double w) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  uint64_t h = (uint64_t(b) + 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 31;
  const double r = double(h >> 11) * 0x1p-53 * 2 - 1;  // [-1, 1)
  return float(std::exp(double(x)) * (1 + w * 0x1p-24 * r));
}

// ---- the scan forward, as the oracle writes it, with K's variations ---------------------
struct ScanVariant {
  std::function<float(float)> exp = [](float x) { return std::exp(x); };
  bool reverse_n = false;  // y = Σ_n h·C in descending n
  bool fma = false;        // h = fma(dA, h, du·B)
  std::function<float(float)> store_y = [](float x) { return x; };
};

struct ScanProblem {
  int64_t B = 2, T = 64, di = 24, ds = 16;
  DType dtype = DType::F32;
  uint64_t seed = 1;
  std::vector<float> delta, u, Bm, Cm, a, D, h0;
  void make() {
    const int64_t n = B * T * di;
    check::SplitMix64 r(seed);
    delta.resize(size_t(n));
    u.resize(size_t(n));
    for (auto& x : delta) x = round_to(dtype, float(std::log1p(std::exp(r.uniform(-7.0, 0.0)))));
    for (auto& x : u) x = round_to(dtype, float(r.uniform(-2.0, 2.0)));
    Bm = uniform(B * T * ds, seed + 1, -1, 1, dtype);
    Cm = uniform(B * T * ds, seed + 2, -1, 1, dtype);
    a.resize(size_t(di * ds));
    for (int64_t d = 0; d < di; ++d)
      for (int64_t k = 0; k < ds; ++k)
        a[size_t(d * ds + k)] = -std::exp(float(std::log(double(k + 1)) + r.uniform(-0.3, 0.3)));
    D = uniform(di, seed + 3, 0.5, 1.5);
    h0 = uniform(B * di * ds, seed + 4, -1, 1);
  }
  // outputs: y [B*T*di] (stored in dtype) then h_final [B*di*ds]
  template <class S>
  std::vector<S> reference() const {
    std::vector<S> h = as<S>(h0), hs(size_t(B * (T + 1) * di * ds)), y(size_t(B * T * di));
    const auto dl = as<S>(delta), uu = as<S>(u), b = as<S>(Bm), c = as<S>(Cm), aa = as<S>(a),
               dd = as<S>(D);
    ref::selective_scan_fwd<S>(dl.data(), uu.data(), b.data(), c.data(), aa.data(), dd.data(), B, T,
                               di, ds, h.data(), hs.data(), y.data());
    for (auto& v : y) v = store(dtype, v);
    y.insert(y.end(), h.begin(), h.end());
    return y;
  }
  std::vector<float> kernel(const ScanVariant& v) const {
    std::vector<float> h = h0, y(size_t(B * T * di));
    for (int64_t i = 0; i < B * di; ++i) {
      const int64_t bb = i / di, d = i % di;
      float* hb = h.data() + (bb * di + d) * ds;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t r = bb * T + t, idx = r * di + d;
        const float dl = delta[size_t(idx)], uv = u[size_t(idx)], du = dl * uv;
        for (int64_t k = 0; k < ds; ++k) {
          const float dA = v.exp(dl * a[size_t(d * ds + k)]);
          const float inj = du * Bm[size_t(r * ds + k)];
          hb[k] = v.fma ? std::fma(dA, hb[k], inj) : dA * hb[k] + inj;
        }
        float acc = 0;
        for (int64_t q = 0; q < ds; ++q) {
          const int64_t k = v.reverse_n ? ds - 1 - q : q;
          acc += hb[k] * Cm[size_t(r * ds + k)];
        }
        y[size_t(idx)] = v.store_y(acc + D[size_t(d)] * uv);
      }
    }
    y.insert(y.end(), h.begin(), h.end());
    return y;
  }
  int64_t ny() const { return B * T * di; }
  int64_t nh() const { return B * di * ds; }
};

// ---- unit behaviour ------------------------------------------------------------------------

TEST(PrecisionStatistics, DistributionsMatchTables) {
  EXPECT_NEAR(check::student_t_quantile(0.975, 8), 2.306, 1e-3);
  EXPECT_NEAR(check::student_t_quantile(0.999, 8), 4.501, 1e-3);
  EXPECT_NEAR(check::f_quantile(0.95, 5, 10), 3.326, 1e-3);
  EXPECT_NEAR(check::f_quantile(0.99, 1, 8), 11.26, 1e-2);
  EXPECT_NEAR(check::chi2_quantile(0.05, 7), 2.167, 1e-3);
  EXPECT_NEAR(check::student_t_cdf(0, 5), 0.5, 1e-15);
  // the limits the suites use (m = kStatRuns, α = kStatAlpha)
  std::cout << "  z_limit(m=8) = " << check::student_t_quantile(1 - check::kStatAlpha / 2, 8)
            << ", z_limit(m=" << kRuns
            << ") = " << check::student_t_quantile(1 - check::kStatAlpha / 2, kRuns) << "\n";
}

TEST(PrecisionStatistics, ExactKernelAndNonFinite) {
  const std::vector<double> O = {1, -2, 3, 4};
  const std::vector<float> P = {1.5f, -2, 3, 4}, K = {1, -2, 3, 4};
  const std::vector<double> m1 = {1.1, -2, 3, 4}, m2 = {0.9, -2, 3.1, 4};
  const StatResult s = check::stat_check(K.data(), O.data(), P.data(), {m1.data(), m2.data()}, 4);
  EXPECT_TRUE(s.computed && s.pass) << s.summary();
  EXPECT_EQ(s.k_rms, 0);
  const std::vector<float> bad = {1, NAN, 3, 4};
  const StatResult f = check::stat_check(bad.data(), O.data(), P.data(), {m1.data(), m2.data()}, 4);
  EXPECT_FALSE(f.pass);
  EXPECT_EQ(f.failed, "non-finite");
  const StatResult none = check::stat_check(K.data(), O.data(), P.data(), {}, 4);
  EXPECT_FALSE(none.computed);
  EXPECT_TRUE(none.ok());
}

// An f16 store of values below f16's normal range (softplus of a very negative
// argument, ~1e-13 .. 1e-6) is a round to nearest on an absolute grid (2^-24): K
// stored that way, O exact, an ensemble of randomly rounded stores of O. Found on
// the H200: a one-element softplus output of 3.8e-13 flushes to 0 in K and in P,
// while a relative-only ensemble model (±2^-11 of the value) claimed ~1e-16 of
// noise and failed the correct store by z = 113.
TEST(PrecisionStatistics, F16StoreBelowTheNormalRangeIsInTheEnsembleClass) {
  for (const int64_t n : {int64_t(1), int64_t(7), int64_t(4096)}) {
    check::SplitMix64 r(5 + uint64_t(n));
    std::vector<double> O(static_cast<size_t>(n));
    std::vector<float> K(O.size());
    for (size_t i = 0; i < O.size(); ++i) {
      O[i] = std::exp(r.uniform(-30.0, -7.0));  // 1e-13 .. 9e-4: mostly subnormal in f16
      K[i] = round_to(DType::F16, float(O[i]));
    }
    std::vector<std::vector<double>> M(kRuns, std::vector<double>(O.size()));
    std::vector<const double*> runs;
    for (int j = 0; j < kRuns; ++j) {
      Mca::seed(0x51ab + uint64_t(j));
      for (size_t i = 0; i < O.size(); ++i)
        M[size_t(j)][i] = double(ref::round_to(DType::F16, Mca::raw(O[i])));
      runs.push_back(M[size_t(j)].data());
    }
    const StatResult s = check::stat_check(K.data(), O.data(), K.data(), runs, n);
    EXPECT_TRUE(s.computed && s.pass) << "n = " << n << ": " << s.summary();
  }
}

// ---- calibration: the hypothesis the limits are derived under -----------------------------

TEST(PrecisionStatistics, CalibrationFloatOracleAndLeaveOneOutPass) {
  int checked = 0, failed = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed)
    for (DType dt : {DType::F32, DType::BF16}) {
      ScanProblem p;
      p.seed = seed;
      p.dtype = dt;
      p.T = 16 + int64_t(seed) * 9;
      p.ds = seed % 2 ? 16 : 5;
      p.make();
      const References r = references([&](auto tag) { return p.reference<decltype(tag)>(); }, seed);
      for (auto [off, n] : {std::pair<int64_t, int64_t>{0, p.ny()}, {p.ny(), p.nh()}}) {
        const StatResult s = stats_of(r.P, r, off, n);  // K = P
        ++checked;
        if (!s.pass) {
          ++failed;
          ADD_FAILURE() << "float oracle as K: " << s.summary();
        }
        for (int k = 0; k <= kRuns; ++k) {  // K = run k, ensemble = the other runs
          const StatResult t = check::stat_check(r.M[size_t(k)].data() + off, r.O.data() + off,
                                                 r.P.data() + off, ensemble(r, k, off), n);
          ++checked;
          if (!t.pass) {
            ++failed;
            ADD_FAILURE() << "leave-one-out run " << k << ": " << t.summary();
          }
        }
      }
    }
  std::cout << "  calibration: " << failed << " of " << checked << " in-class stand-ins failed\n";
}

// ---- equally accurate reorderings pass ------------------------------------------------------

TEST(PrecisionStatistics, EquallyAccurateReorderingsPass) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    ScanProblem p;
    p.seed = 100 + seed;
    p.ds = 16 + int64_t(seed);
    p.make();
    const References r = references([&](auto tag) { return p.reference<decltype(tag)>(); }, p.seed);
    ScanVariant descending, fused;
    descending.reverse_n = true;
    fused.fma = true;
    for (const auto& [name, var] : {std::pair<const char*, ScanVariant>{"y summed in descending n", descending},
                                    {"fused multiply-add in the recurrence", fused}}) {
      const std::vector<float> K = p.kernel(var);
      ASSERT_NE(std::memcmp(K.data(), r.P.data(), 4 * K.size()), 0) << name << ": no reordering";
      for (auto [tensor, off, n] : {std::tuple<const char*, int64_t, int64_t>{"y", 0, p.ny()},
                                    {"h_final", p.ny(), p.nh()}}) {
        const StatResult s = stats_of(K, r, off, n);
        const auto k = k_rule_of(tensor, K, r, off, n, DType::F32);
        print(std::string(name) + " " + tensor, k, s);
        EXPECT_TRUE(s.pass) << name << " " << tensor << s.summary();
        EXPECT_TRUE(k.pass) << k.summary();
      }
    }
  }
  // the GEMM's k-sum reversed (linear_fwd with K = 300 terms)
  const int64_t M = 40, Kd = 300, N = 30;
  const auto X = uniform(M * Kd, 7, -1, 1), W = uniform(Kd * N, 8, -1, 1);
  auto f = [&](auto tag) {
    using S = decltype(tag);
    const auto x = as<S>(X), w = as<S>(W);
    std::vector<S> y(size_t(M * N));
    ref::linear_fwd<S>(x.data(), w.data(), static_cast<const S*>(nullptr), M, Kd, N, y.data());
    return y;
  };
  const References r = references(f, 77);
  std::vector<float> K(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float c = 0;
      for (int64_t k = Kd - 1; k >= 0; --k) c += X[size_t(m * Kd + k)] * W[size_t(k * N + n)];
      K[size_t(m * N + n)] = c;
    }
  const StatResult s = stats_of(K, r, 0, M * N);
  const auto k = k_rule_of("Y", K, r, 0, M * N, DType::F32);
  print("GEMM k-sum reversed", k, s);
  EXPECT_TRUE(s.pass) << s.summary();
  EXPECT_TRUE(k.pass) << k.summary();
}

// ---- negative control 1: a biased rounding at a storage point -------------------------------

TEST(PrecisionStatistics, BiasedStorageRoundingFailsWhereTheKRulePasses) {
  // gating g = y·gs stored in bf16 (inputs bf16-exact), n = 8192
  const int64_t n = 8192;
  const auto y = uniform(n, 21, -2, 2, DType::BF16), gs = uniform(n, 22, -1.1, 1.1, DType::BF16);
  auto f = [&](auto tag) {
    using S = decltype(tag);
    const auto a = as<S>(y), b = as<S>(gs);
    std::vector<S> g(static_cast<size_t>(n));
    ref::gating_fwd<S>(a.data(), b.data(), n, g.data());
    for (auto& v : g) v = store(DType::BF16, v);
    return g;
  };
  const References r = references(f, 5);
  for (const auto& [name, rounder] :
       {std::pair<const char*, float (*)(float)>{"toward zero", bf16_toward_zero},
        {"upward", bf16_upward}}) {
    std::vector<float> K(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) K[size_t(i)] = rounder(y[size_t(i)] * gs[size_t(i)]);
    const StatResult s = stats_of(K, r, 0, n);
    const auto k = k_rule_of("g", K, r, 0, n, DType::BF16);
    print(std::string("gating bf16 store rounded ") + name, k, s);
    EXPECT_TRUE(k.pass) << "the point of this control: the k-rule cannot see it. " << k.summary();
    EXPECT_FALSE(s.pass) << name << s.summary();
  }
  // the scan output y stored in bf16 with round-toward-zero (inputs bf16)
  ScanProblem p;
  p.dtype = DType::BF16;
  p.seed = 31;
  p.make();
  const References rs = references([&](auto tag) { return p.reference<decltype(tag)>(); }, 31);
  ScanVariant v;
  v.store_y = bf16_toward_zero;
  const std::vector<float> K = p.kernel(v);
  const StatResult s = stats_of(K, rs, 0, p.ny());
  const auto k = k_rule_of("y", K, rs, 0, p.ny(), DType::BF16);
  print("scan y bf16 store rounded toward zero", k, s);
  EXPECT_TRUE(k.pass) << k.summary();
  EXPECT_FALSE(s.pass) << s.summary();
  EXPECT_NE(s.failed.find("bias_mag"), std::string::npos) << s.summary();
  // and with round to nearest the same stand-in passes (the failure is the rounding's)
  ScanVariant rn;
  rn.store_y = [](float x) { return round_to(DType::BF16, x); };
  const StatResult ok = stats_of(p.kernel(rn), rs, 0, p.ny());
  EXPECT_TRUE(ok.pass) << ok.summary();
}

// ---- negative control 2: an accuracy loss in an elementary function -------------------------

TEST(PrecisionStatistics, LessAccurateExpIsDetected) {
  // SiLU gs = z / (1 + exp(−z)) over z in (−3, 3), f32 (the oracle's formula): where the
  // gate's inputs live, and where exp's error reaches the output undamped
  const int64_t R = 64, di = 64;
  const auto P2 = uniform(R * 2 * di, 41, -3, 3);
  auto f = [&](auto tag) {
    using S = decltype(tag);
    const auto x = as<S>(P2);
    std::vector<S> xb(size_t(R * di)), z(size_t(R * di)), gs(size_t(R * di));
    ref::split_gate_silu_fwd<S>(x.data(), R, di, xb.data(), z.data(), gs.data());
    return gs;
  };
  const References r = references(f, 9);
  for (double w : {32.0, 16.0}) {
    std::vector<float> K(size_t(R * di));
    for (int64_t i = 0; i < R * di; ++i) {
      const float zv = P2[size_t((i / di) * 2 * di + di + i % di)];
      K[size_t(i)] = zv / (1.0f + exp_lossy(-zv, w));
    }
    const StatResult s = stats_of(K, r, 0, R * di);
    const auto k = k_rule_of("gs", K, r, 0, R * di, DType::F32);
    print("SiLU with exp off by up to ±" + std::to_string(int(w)) + "u", k, s);
    if (w < 32) continue;  // ±16u (8 ulp) is at the edge: printed, not asserted
    EXPECT_TRUE(k.pass) << "the point of this control: the k-rule cannot see it. " << k.summary();
    EXPECT_FALSE(s.pass) << s.summary();
    EXPECT_NE(s.failed.find("rms"), std::string::npos) << s.summary();
  }
  // within the libm class (±2u, i.e. ~1 ulp) the same stand-in passes
  std::vector<float> K(size_t(R * di));
  for (int64_t i = 0; i < R * di; ++i) {
    const float zv = P2[size_t((i / di) * 2 * di + di + i % di)];
    K[size_t(i)] = zv / (1.0f + exp_lossy(-zv, 2.0));
  }
  const StatResult ok = stats_of(K, r, 0, R * di);
  print("SiLU with exp off by up to ±2u (in class)", k_rule_of("gs", K, r, 0, R * di, DType::F32), ok);
  EXPECT_TRUE(ok.pass) << ok.summary();

  // the scan's dA = exp(δ·A) off by up to ±16u: the state and the output drift
  ScanProblem p;
  p.seed = 51;
  p.T = 200;
  p.make();
  const References rs = references([&](auto tag) { return p.reference<decltype(tag)>(); }, 51);
  ScanVariant v;
  v.exp = [](float x) { return exp_lossy(x, 16.0); };
  const std::vector<float> Ks = p.kernel(v);
  bool detected = false;
  for (auto [tensor, off, n] : {std::tuple<const char*, int64_t, int64_t>{"y", 0, p.ny()},
                                {"h_final", p.ny(), p.nh()}}) {
    const StatResult s = stats_of(Ks, rs, off, n);
    print(std::string("scan with exp off by up to ±16u: ") + tensor,
          k_rule_of(tensor, Ks, rs, off, n, DType::F32), s);
    detected = detected || !s.pass;
  }
  EXPECT_TRUE(detected) << "a 16u-class exp in the recurrence went unnoticed";
}

// ---- negative control 3: one storage rounding more or less (storage agreement) ------------

// kAgreeRuns runs of f in Monte Carlo arithmetic with round-to-nearest stores.
template <class F>
std::vector<std::vector<double>> nearest_store_runs(F f, uint64_t seed) {
  const ref::ScopedMcaStore nearest(ref::McaStore::Nearest);
  return mca_runs(f, seed, 0x51, check::kAgreeRuns);
}

check::AgreeResult agreement_of(const std::vector<float>& K, const References& r,
                                const std::vector<std::vector<double>>& runs) {
  std::vector<const double*> ptrs;
  for (const auto& v : runs) ptrs.push_back(v.data());
  return check::storage_agreement(K.data(), r.P.data(), ptrs, int64_t(K.size()));
}

// `conforming` (the same stores after other f32 arithmetic) passes the storage
// agreement check; `faulty` (one storage rounding more or less) fails it, while the
// k-rule passes it (the point of the control). The statistics are printed.
void expect_agreement_separates(const std::string& what_ok, const std::vector<float>& conforming,
                                const std::string& what_bad, const std::vector<float>& faulty,
                                const References& r, const std::vector<std::vector<double>>& runs,
                                DType q) {
  const int64_t n = int64_t(faulty.size());
  const check::AgreeResult ok = agreement_of(conforming, r, runs);
  std::cout << "  " << what_ok << ":" << ok.summary() << "\n";
  EXPECT_TRUE(ok.pass) << what_ok << ok.summary();
  const check::AgreeResult bad = agreement_of(faulty, r, runs);
  const auto k = k_rule_of(what_bad, faulty, r, 0, n, q);
  print(what_bad, k, stats_of(faulty, r, 0, n));
  std::cout << "   " << bad.summary() << "\n";
  EXPECT_TRUE(k.pass) << "the point of this control: the k-rule cannot see it. " << k.summary();
  EXPECT_FALSE(bad.pass) << what_bad << bad.summary();
}

TEST(PrecisionStatistics, StorageAgreementSeesOneRoundingMoreOrLess) {
  // the dt_proj epilogue in bf16: raw = q(a + b), delta = q(softplus(raw)), both
  // stored; a in (−6, 3) as the GEMM leaves it (f32), b bf16
  const int64_t n = 8192;
  const auto acc = uniform(n, 61, -6, 3), bias = uniform(n, 62, -1, 1, DType::BF16);
  const DType q = DType::BF16;
  auto f = [&](auto tag) {
    using S = decltype(tag);
    using std::exp;
    using std::log1p;
    std::vector<S> delta(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const S raw = store(q, S(acc[size_t(i)]) + S(bias[size_t(i)]));
      delta[size_t(i)] = store(q, raw > S(20) ? raw : log1p(exp(raw)));
    }
    return delta;
  };
  const References r = references(f, 13);
  const auto runs = nearest_store_runs(f, 13);
  auto softplus_stable = [](float x) {  // max(x, 0) + log1p(e^−|x|): as accurate, other f32 bits
    return std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x)));
  };
  std::vector<float> conforming(static_cast<size_t>(n)), unrounded(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float pre = acc[size_t(i)] + bias[size_t(i)];
    conforming[size_t(i)] = round_to(q, softplus_stable(round_to(q, pre)));
    unrounded[size_t(i)] = round_to(q, softplus_stable(pre));  // raw's store skipped
  }
  expect_agreement_separates("softplus, another f32 formula, same stores", conforming,
                             "softplus of the unrounded raw", unrounded, r, runs, q);

  // the conv forward's output in bf16: u = q(SiLU(pc)) with pc the f32 sum (also
  // stored, q(pc)); the fault: u = q(SiLU(q(pc))), one rounding more
  auto g = [&](auto tag) {
    using S = decltype(tag);
    using std::exp;
    std::vector<S> u(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const S pc = S(acc[size_t(i)]) * S(bias[size_t(i)]) + S(bias[size_t((i + 1) % n)]);
      u[size_t(i)] = store(q, pc / (S(1) + exp(-pc)));
    }
    return u;
  };
  const References rg = references(g, 17);
  const auto runs_g = nearest_store_runs(g, 17);
  std::vector<float> conv_ok(static_cast<size_t>(n)), conv_bad(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float pc = std::fma(acc[size_t(i)], bias[size_t(i)], bias[size_t((i + 1) % n)]);
    auto silu = [](float x) { return x / (1.0f + std::exp(-x)); };
    conv_ok[size_t(i)] = round_to(q, silu(pc));  // contracted: other f32 bits, same stores
    conv_bad[size_t(i)] = round_to(q, silu(round_to(q, pc)));
  }
  expect_agreement_separates("SiLU of a contracted sum, same stores", conv_ok,
                             "SiLU of the rounded pre-activation", conv_bad, rg, runs_g, q);
  // a biased store is another kind of fault the check sees
  std::vector<float> rz(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float pc = acc[size_t(i)] * bias[size_t(i)] + bias[size_t((i + 1) % n)];
    rz[size_t(i)] = bf16_toward_zero(pc / (1.0f + std::exp(-pc)));
  }
  EXPECT_FALSE(agreement_of(rz, rg, runs_g).pass);
}

TEST(PrecisionStatistics, PoissonQuantileAndAgreementLimit) {
  // P(X > c) <= α at the quantile and > α one below it
  for (double lam : {0.0, 0.5, 3.45, 13.8, 200.0, 5e4}) {
    const int64_t c = check::poisson_upper_quantile(lam, 1e-6);
    if (lam == 0) {
      EXPECT_EQ(c, 0);
      continue;
    }
    EXPECT_LE(check::incomplete_gamma_p(double(c + 1), lam), 1e-6) << lam;
    if (c > 0) {
      EXPECT_GT(check::incomplete_gamma_p(double(c), lam), 1e-6) << lam;
    }
  }
  // no boundary case in the runs: λ⁺ = χ²_2(1 − α) / (2r) = −ln(α) / r
  const std::vector<float> K(100, 1.0f), P(100, 1.0f);
  const std::vector<double> run(100, 1.0);
  const std::vector<const double*> runs(size_t(check::kAgreeRuns), run.data());
  const check::AgreeResult a = check::storage_agreement(K.data(), P.data(), runs, 100);
  EXPECT_NEAR(a.lambda_up, -std::log(check::kStatAlpha) / check::kAgreeRuns, 1e-6);
  EXPECT_EQ(a.mismatches, 0);
  EXPECT_TRUE(a.pass);
  std::vector<float> K2 = K;
  for (int64_t i = 0; i <= a.limit && i < 100; ++i) K2[size_t(i)] = 2.0f;
  EXPECT_FALSE(check::storage_agreement(K2.data(), P.data(), runs, 100).pass);
  EXPECT_FALSE(check::storage_agreement(K.data(), P.data(), {}, 100).computed);
}

}  // namespace
}  // namespace mc::testing
