// ctest-labels: cpu
// test_oracle_gemm.cpp — the oracle's blocked GEMM (reference_cpu/gemm.hpp) is
// BITWISE the textbook loop
//     c = seed ? seed[j] : 0;  for p ascending: c += A(i,p)·B(j,p)
// on odd shapes (I past the 256-row tile, J past the 512-column tile, P past the
// 256-wide p-panel, and 1-wide edges), for float and double, on BOTH paths (the
// baseline x86-64 micro-kernel and the AVX2 one; the AVX2 tests skip, with the
// reason, on a CPU without AVX2), with the strided operands of all three Linear
// roles, with every parallel region forced on and off, and through the Linear
// steps themselves (linear_fwd, linear_bwd_dx, linear_bwd_dw of steps.hpp, whose
// comments state the summation order). A control shows the comparison is not
// vacuous: the same loop summing in descending p gives different bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "check/problem.hpp"
#include "check/stats.hpp"
#include "reference_cpu/mca_scalar.hpp"
#include "reference_cpu/gemm.hpp"
#include "reference_cpu/steps.hpp"
#include "validation/support/oracle_test_support.hpp"

namespace mc::testing {
namespace {

using ref::GemmOperand;
using ref::GemmPath;

struct Shape {
  int64_t I, J, P;
};
// I past MC = 256, J past NC = 512, P past KC = 256 (and 2·KC), 1-wide edges.
const Shape kShapes[] = {{1, 1, 1},   {1, 7, 300},  {5, 1, 257},    {17, 33, 255},
                         {17, 33, 256}, {23, 9, 257}, {260, 19, 513}, {3, 517, 29},
                         {37, 41, 700}};

template <class S>
std::vector<S> random_values(int64_t n, uint64_t seed) {
  check::SplitMix64 r(seed);
  std::vector<S> v(static_cast<size_t>(n));
  for (auto& x : v) x = S(float(r.uniform(-1.0, 1.0)));  // f32-exact in both scalars
  return v;
}

// The textbook loop over the strided operands; `descending` is the control.
template <class S>
std::vector<S> naive(const Shape& s, const GemmOperand<S>& A, const GemmOperand<S>& B,
                     const S* seed, bool descending = false) {
  std::vector<S> C(size_t(s.I * s.J));
  for (int64_t i = 0; i < s.I; ++i)
    for (int64_t j = 0; j < s.J; ++j) {
      S c = seed ? seed[j] : S(0);
      for (int64_t q = 0; q < s.P; ++q) {
        const int64_t p = descending ? s.P - 1 - q : q;
        c += A.base[i * A.si + p * A.sp] * B.base[j * B.si + p * B.sp];
      }
      C[size_t(i * s.J + j)] = c;
    }
  return C;
}

template <class S>
bool same_bits(const std::vector<S>& a, const std::vector<S>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0;
}

template <class S>
int64_t first_difference(const std::vector<S>& a, const std::vector<S>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(S)) != 0) return int64_t(i);
  return a.size() == b.size() ? -1 : int64_t(std::min(a.size(), b.size()));
}

class OracleGemm : public RestoresOracleThreading {};

// Every shape, the three operand layouts of the Linear roles, with and without
// a seed, every region forced parallel (2 threads) and serial.
template <class S>
void check_path(GemmPath path) {
  int checked = 0;
  for (const Shape& s : kShapes) {
    const auto a = random_values<S>(s.I * s.P, 1 + s.I * 7 + s.P);
    const auto b = random_values<S>(s.J * s.P, 2 + s.J * 5 + s.P);
    const auto seed = random_values<S>(s.J, 3 + s.J);
    struct Layout {
      const char* name;
      GemmOperand<S> A, B;
    };
    // row-major A [I, P] and B [P, J] (linear_fwd), B [J, P] (linear_bwd_dx),
    // A [P, I] and B [P, J] (linear_bwd_dw: both read down their columns).
    const Layout layouts[] = {{"fwd", {a.data(), s.P, 1}, {b.data(), 1, s.J}},
                              {"bwd_dx", {a.data(), s.P, 1}, {b.data(), s.P, 1}},
                              {"bwd_dw", {a.data(), 1, s.I}, {b.data(), 1, s.J}}};
    for (const Layout& l : layouts)
      for (const S* sd : {static_cast<const S*>(nullptr), seed.data()})
        for (int64_t min_work : {int64_t(0), int64_t(1) << 62}) {
          ref::set_parallel_min_work(min_work);
          omp_set_num_threads(2);
          const std::vector<S> want = naive<S>(s, l.A, l.B, sd);
          std::vector<S> got(size_t(s.I * s.J), S(-7));
          ref::ordered_gemm<S>(s.I, s.J, s.P, l.A, l.B, sd, got.data(), s.J, path);
          EXPECT_TRUE(same_bits(got, want))
              << ref::to_string(path) << " " << sizeof(S) * 8 << "-bit " << l.name << " I=" << s.I
              << " J=" << s.J << " P=" << s.P << (sd ? " seeded" : "") << " parallel="
              << (min_work == 0) << ": first difference at " << first_difference(got, want);
          ++checked;
        }
  }
  EXPECT_EQ(checked, int(std::size(kShapes)) * 3 * 2 * 2);
}

TEST_F(OracleGemm, BaselinePathIsTheTextbookLoopFloat) { check_path<float>(GemmPath::Baseline); }
TEST_F(OracleGemm, BaselinePathIsTheTextbookLoopDouble) { check_path<double>(GemmPath::Baseline); }

TEST_F(OracleGemm, Avx2PathIsTheTextbookLoopFloat) {
  if (!ref::gemm_avx2_available()) GTEST_SKIP() << "this CPU has no AVX2: only the baseline path";
  check_path<float>(GemmPath::Avx2);
}
TEST_F(OracleGemm, Avx2PathIsTheTextbookLoopDouble) {
  if (!ref::gemm_avx2_available()) GTEST_SKIP() << "this CPU has no AVX2: only the baseline path";
  check_path<double>(GemmPath::Avx2);
}

TEST_F(OracleGemm, Avx512PathIsTheTextbookLoopFloat) {
  if (!ref::gemm_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512F";
  check_path<float>(GemmPath::Avx512);
}
TEST_F(OracleGemm, Avx512PathIsTheTextbookLoopDouble) {
  if (!ref::gemm_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512F";
  check_path<double>(GemmPath::Avx512);
}

// The Linear steps (whatever path Auto picks here) against their documented loops.
template <class S>
void check_linear_steps() {
  for (const Shape& s : kShapes) {
    const int64_t M = s.I, N = s.J, K = s.P;
    const auto X = random_values<S>(M * K, 11 + M), W = random_values<S>(K * N, 12 + N),
               bias = random_values<S>(N, 13 + N), dY = random_values<S>(M * N, 14 + M),
               dW0 = random_values<S>(K * N, 15 + K);
    std::vector<S> Y(size_t(M * N)), dX(size_t(M * K)), dW = dW0;
    ref::linear_fwd<S>(X.data(), W.data(), bias.data(), M, K, N, Y.data());
    ref::linear_bwd_dx<S>(dY.data(), W.data(), M, K, N, dX.data());
    ref::linear_bwd_dw<S>(X.data(), dY.data(), M, K, N, dW.data());
    std::vector<S> Yn(Y.size()), dXn(dX.size()), dWn = dW0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {  // Y[m,n] = b[n] + Σ_k X[m,k]·W[k,n]
        S c = bias[size_t(n)];
        for (int64_t k = 0; k < K; ++k) c += X[size_t(m * K + k)] * W[size_t(k * N + n)];
        Yn[size_t(m * N + n)] = c;
      }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {  // dX[m,k] = Σ_n dY[m,n]·W[k,n]
        S c = S(0);
        for (int64_t n = 0; n < N; ++n) c += dY[size_t(m * N + n)] * W[size_t(k * N + n)];
        dXn[size_t(m * K + k)] = c;
      }
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {  // dW[k,n] += Σ_m X[m,k]·dY[m,n] (summed from 0)
        S c = S(0);
        for (int64_t m = 0; m < M; ++m) c += X[size_t(m * K + k)] * dY[size_t(m * N + n)];
        dWn[size_t(k * N + n)] += c;
      }
    const std::string ctx = std::to_string(sizeof(S) * 8) + "-bit M=" + std::to_string(M) +
                            " K=" + std::to_string(K) + " N=" + std::to_string(N) + " path " +
                            ref::to_string(ref::gemm_auto_path());
    EXPECT_TRUE(same_bits(Y, Yn)) << "linear_fwd " << ctx << " @" << first_difference(Y, Yn);
    EXPECT_TRUE(same_bits(dX, dXn)) << "linear_bwd_dx " << ctx << " @" << first_difference(dX, dXn);
    EXPECT_TRUE(same_bits(dW, dWn)) << "linear_bwd_dw " << ctx << " @" << first_difference(dW, dWn);
  }
}

// The Monte Carlo arithmetic scalar: its fast tiles (Avx2: the thread's random
// stream in a register; Auto: the draws 8 at a time with AVX-512 where the CPU has
// it) make the same draws in the same order as the generic tile (Baseline), so
// every run's values are bitwise the same.
TEST_F(OracleGemm, McaFastTileIsTheGenericTile) {
  // the per-operation tiles, whatever MC_ORACLE_MCA_GEMM says
  const ref::ScopedMcaGemm per_operation(ref::McaGemm::PerOperation);
  int checked = 0;
  for (const Shape& s : kShapes) {
    const auto a = random_values<ref::Mca>(s.I * s.P, 11 + s.I + s.P);
    const auto b = random_values<ref::Mca>(s.J * s.P, 12 + s.J + s.P);
    const auto seed = random_values<ref::Mca>(s.J, 13 + s.J);
    const GemmOperand<ref::Mca> A{a.data(), s.P, 1}, B{b.data(), 1, s.J};
    for (const ref::Mca* sd : {static_cast<const ref::Mca*>(nullptr), seed.data()})
      for (int64_t min_work : {int64_t(0), int64_t(1) << 62}) {
        ref::set_parallel_min_work(min_work);
        omp_set_num_threads(2);
        std::vector<std::vector<double>> out;
        for (GemmPath path : {GemmPath::Baseline, GemmPath::Auto, GemmPath::Avx2}) {
          if (path == GemmPath::Avx2 && !ref::gemm_avx2_available()) continue;
          std::vector<ref::Mca> c(size_t(s.I * s.J), ref::Mca(-7.0f));
          check::seed_mca(99, checked);
          ref::ordered_gemm<ref::Mca>(s.I, s.J, s.P, A, B, sd, c.data(), s.J, path);
          out.push_back(check::to_double_vec(c));
        }
        for (size_t k = 1; k < out.size(); ++k)
          EXPECT_TRUE(same_bits(out[0], out[k]))
              << (k == 1 ? "Auto" : "Avx2") << " tile, I=" << s.I << " J=" << s.J << " P=" << s.P
              << (sd ? " seeded" : "") << " parallel=" << (min_work == 0)
              << ": first difference at " << first_difference(out[0], out[k]);
        // and the runs are not trivially equal: the perturbations moved the values
        const std::vector<double> exact = [&] {
          std::vector<double> v(out[0].size());
          for (int64_t i = 0; i < s.I; ++i)
            for (int64_t j = 0; j < s.J; ++j) {
              double c = sd ? sd[j].v : 0.0;
              for (int64_t p = 0; p < s.P; ++p) c += a[size_t(i * s.P + p)].v * b[size_t(p * s.J + j)].v;
              v[size_t(i * s.J + j)] = c;
            }
          return v;
        }();
        if (s.P > 1) {
          EXPECT_FALSE(same_bits(out[1], exact)) << "no perturbation at I=" << s.I;
        }
        ++checked;
      }
  }
  EXPECT_EQ(checked, int(sizeof(kShapes) / sizeof(kShapes[0])) * 4);
}

// McaGemm::Moments (reference_cpu/mca_scalar.hpp) draws each GEMM output once, from
// a Gaussian with the variance the per-operation model gives it to first order,
// (u²/3)·(Σ_p (a_p b_p)² + Σ_p s_p²). Both modes are held to that law, output by
// output: with e = M − c the error of a run against the exact double sum and σ the
// analytic standard deviation, the n = I·J·R standardised errors z = e/σ of R runs
// have mean(z) ~ N(0, 1/n) and mean(z²) = 1 ± sqrt(2/n) (z close to Gaussian in both
// modes: a sum of 2P >= 128 uniform draws). Limits at 6 standard deviations. Two data
// sets: mixed signs (the products' term dominates) and positive values from a seed
// of 1 (the partial sums' term dominates); P past the p-panel, so the variance is
// carried from panel to panel. Control: the same statistic against a σ without the
// partial sums' term must fail (the test sees a missing term).
struct LawStats {
  double mean_z = 0, mean_z2 = 0;
  int64_t n = 0;
};

LawStats law_of_runs(ref::McaGemm mode, GemmPath path, bool positive, bool drop_sums_term,
                     bool parallel) {
  constexpr int64_t I = 64, J = 16, P = 300;  // several output tiles: both threads draw
  constexpr int R = 50;
  check::SplitMix64 rng(positive ? 71 : 72);
  auto draw = [&] { return float(positive ? rng.uniform(0.0, 1.0) : rng.uniform(-1.0, 1.0)); };
  std::vector<ref::Mca> a(size_t{I * P}), b(size_t{P * J}), seed(size_t{J});
  for (auto& x : a) x = ref::Mca(draw());
  for (auto& x : b) x = ref::Mca(draw());
  for (auto& x : seed) x = ref::Mca(positive ? 1.0f : draw());
  const GemmOperand<ref::Mca> A{a.data(), P, 1}, B{b.data(), 1, J};
  const double u = ref::Mca::unit();
  std::vector<double> exact(size_t(I * J)), sigma(size_t(I * J));
  for (int64_t i = 0; i < I; ++i)
    for (int64_t j = 0; j < J; ++j) {
      double s = seed[size_t(j)].v, var = 0;
      for (int64_t p = 0; p < P; ++p) {
        const double prod = a[size_t(i * P + p)].v * b[size_t(p * J + j)].v;
        s += prod;
        var += prod * prod + (drop_sums_term ? 0.0 : s * s);
      }
      exact[size_t(i * J + j)] = s;
      sigma[size_t(i * J + j)] = u * std::sqrt(var / 3);
    }
  const ref::ScopedMcaGemm scoped(mode);
  ref::set_parallel_min_work(parallel ? 0 : int64_t(1) << 62);
  omp_set_num_threads(2);
  LawStats st;
  for (int r = 0; r < R; ++r) {
    check::seed_mca(4242 + (positive ? 1000 : 0), r);
    std::vector<ref::Mca> c(size_t(I * J));
    ref::ordered_gemm<ref::Mca>(I, J, P, A, B, seed.data(), c.data(), J, path);
    for (size_t k = 0; k < c.size(); ++k) {
      const double z = (c[k].v - exact[k]) / sigma[k];
      st.mean_z += z;
      st.mean_z2 += z * z;
      ++st.n;
    }
  }
  st.mean_z /= double(st.n);
  st.mean_z2 /= double(st.n);
  return st;
}

bool law_holds(const LawStats& s) {
  const double n = double(s.n);
  return std::fabs(s.mean_z) <= 6 / std::sqrt(n) && std::fabs(s.mean_z2 - 1) <= 6 * std::sqrt(2 / n);
}

TEST_F(OracleGemm, McaMomentsHaveThePerOperationLaw) {
  struct Mode {
    const char* name;
    ref::McaGemm mode;
    GemmPath path;
  };
  std::vector<Mode> modes = {{"per-operation (generic tile)", ref::McaGemm::PerOperation, GemmPath::Baseline},
                             {"per-operation (fastest tile)", ref::McaGemm::PerOperation, GemmPath::Auto},
                             {"moments (baseline tile)", ref::McaGemm::Moments, GemmPath::Baseline},
                             {"moments (fastest tile)", ref::McaGemm::Moments, GemmPath::Auto}};
  if (ref::gemm_avx2_available())
    modes.push_back({"moments (AVX2 tile)", ref::McaGemm::Moments, GemmPath::Avx2});
  for (const Mode& m : modes)
    for (bool positive : {false, true})
      for (bool parallel : {false, true}) {
        const LawStats s = law_of_runs(m.mode, m.path, positive, /*drop_sums_term=*/false, parallel);
        std::cout << "  " << m.name << (positive ? ", positive data" : ", mixed signs")
                  << (parallel ? ", parallel" : ", serial") << ": mean z " << s.mean_z
                  << ", mean z^2 " << s.mean_z2 << " (n " << s.n << ")\n";
        EXPECT_TRUE(law_holds(s)) << m.name << (positive ? ", positive data" : ", mixed signs")
                                  << ": mean z " << s.mean_z << ", mean z^2 " << s.mean_z2
                                  << " over " << s.n << " standardised errors";
      }
  // Control: without the partial sums' term the law is visibly wrong in both modes.
  for (ref::McaGemm mode : {ref::McaGemm::PerOperation, ref::McaGemm::Moments}) {
    const LawStats s = law_of_runs(mode, GemmPath::Auto, /*positive=*/true, /*drop=*/true, false);
    EXPECT_FALSE(law_holds(s)) << "a variance without the partial sums' term passed: mean z^2 "
                               << s.mean_z2 << " (the test would be blind to the term)";
  }
}

// The moments mode is reproducible (the same seeds, the same bits), and a draw: not
// the exact sum. Below kMcaMomentsMinTerms terms it is the per-operation tile.
TEST_F(OracleGemm, McaMomentsRunIsReproducibleAndSmallSumsArePerOperation) {
  const ref::ScopedMcaGemm scoped(ref::McaGemm::Moments);
  ref::set_parallel_min_work(0);
  omp_set_num_threads(2);
  for (const Shape& s : kShapes) {
    const auto a = random_values<ref::Mca>(s.I * s.P, 31 + s.I + s.P);
    const auto b = random_values<ref::Mca>(s.J * s.P, 32 + s.J + s.P);
    const GemmOperand<ref::Mca> A{a.data(), s.P, 1}, B{b.data(), 1, s.J};
    auto run = [&](ref::McaGemm mode) {
      const ref::ScopedMcaGemm m(mode);
      std::vector<ref::Mca> c(size_t(s.I * s.J));
      check::seed_mca(5, int(s.P));
      ref::ordered_gemm<ref::Mca>(s.I, s.J, s.P, A, B, nullptr, c.data(), s.J);
      return check::to_double_vec(c);
    };
    const auto first = run(ref::McaGemm::Moments), second = run(ref::McaGemm::Moments);
    EXPECT_TRUE(same_bits(first, second)) << "I=" << s.I << " J=" << s.J << " P=" << s.P;
    const auto per_op = run(ref::McaGemm::PerOperation);
    EXPECT_EQ(same_bits(first, per_op), s.P < ref::kMcaMomentsMinTerms)
        << "P=" << s.P << ": the moments mode must take the per-operation tile exactly below "
        << ref::kMcaMomentsMinTerms << " terms";
    std::vector<double> exact(first.size());
    for (int64_t i = 0; i < s.I; ++i)
      for (int64_t j = 0; j < s.J; ++j) {
        double c = 0;
        for (int64_t p = 0; p < s.P; ++p) c += a[size_t(i * s.P + p)].v * b[size_t(p * s.J + j)].v;
        exact[size_t(i * s.J + j)] = c;
      }
    if (s.P > 1) {
      EXPECT_FALSE(same_bits(first, exact)) << "no perturbation at P=" << s.P;
    }
  }
}

TEST_F(OracleGemm, LinearStepsAreTheirDocumentedLoops) {
  check_linear_steps<float>();
  check_linear_steps<double>();
}

// Control: the comparison can tell summation orders apart on these data.
TEST_F(OracleGemm, ControlReorderedSumIsDetected) {
  const Shape s{23, 9, 257};
  const auto a = random_values<float>(s.I * s.P, 101), b = random_values<float>(s.J * s.P, 102);
  const GemmOperand<float> A{a.data(), s.P, 1}, B{b.data(), s.P, 1};
  std::vector<float> got(size_t(s.I * s.J));
  ref::ordered_gemm<float>(s.I, s.J, s.P, A, B, nullptr, got.data(), s.J, GemmPath::Baseline);
  EXPECT_TRUE(same_bits(got, naive<float>(s, A, B, nullptr)));
  EXPECT_FALSE(same_bits(got, naive<float>(s, A, B, nullptr, /*descending=*/true)))
      << "a descending-order sum gave the same bits: the bitwise test would be vacuous";
}

TEST_F(OracleGemm, Avx512PathRefusedWhereAbsent) {
  if (ref::gemm_avx512_available()) GTEST_SKIP() << "this CPU has AVX-512F: nothing to refuse";
  double x = 0;
  EXPECT_THROW(ref::ordered_gemm<double>(1, 1, 1, {&x, 1, 1}, {&x, 1, 1}, nullptr, &x, 1,
                                         GemmPath::Avx512),
               std::runtime_error);
}

TEST_F(OracleGemm, Avx2PathRefusedWhereAbsent) {
  if (ref::gemm_avx2_available()) GTEST_SKIP() << "this CPU has AVX2: nothing to refuse";
  float x = 0;
  EXPECT_THROW(ref::ordered_gemm<float>(1, 1, 1, {&x, 1, 1}, {&x, 1, 1}, nullptr, &x, 1,
                                        GemmPath::Avx2),
               std::runtime_error);
}

}  // namespace
}  // namespace mc::testing
