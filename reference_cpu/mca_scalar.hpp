// mca_scalar.hpp — a scalar for Monte Carlo arithmetic (Parker, Pierce &
// Eggert 2000; the "random rounding" mode of Verificarlo): the oracle is also
// instantiated on it (steps.cpp, model.cpp), so that one run computes in
// double but perturbs the result of EVERY arithmetic operation by a random
// relative error δ, uniform in ±u, where u is the unit roundoff of the format
// being emulated (u32 = 2^-24 unless set otherwise). Each run is one
// realisation of the rounding errors a float execution of the same operation
// sequence makes, with the correct correlations (a reused value carries the
// same error everywhere, a recurrence carries its error forward): the spread
// of a few runs around the exact (double) result estimates the float
// rounding noise of every output element, cancellations and conditioning
// included. Standard model (Higham, Accuracy and Stability, §2.2; Higham &
// Mary 2019): round-to-nearest errors of a float run behave like such
// independent mean-zero perturbations.
//
// Per operation: + − · / and sqrt: one perturbation of ±u (IEEE correctly
// rounded); exp, log1p: ±4u (libm results are within 2 ulp <= 4u·|v|).
// A constant converted from double that is not f32-representable (eps) is
// perturbed once; f32-exact inputs are not. Storage::q rounding to bf16/f16
// adds a perturbation of that type's unit roundoff (2^-8, 2^-11), and below f16's
// normal range an absolute one of half its subnormal spacing (2^-25).
//
// Randomness: a thread_local splitmix64 stream (seed with Mca::seed). A run is
// reproducible when the oracle runs on one OpenMP thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "core/config.hpp"
#include "core/storage.hpp"

namespace mc::ref {

struct Mca {
  double v = 0;

  Mca() = default;
  template <class A, std::enable_if_t<std::is_arithmetic_v<A>, int> = 0>
  Mca(A x)  // NOLINT: implicit, so that S(0), S(eps), S(D) work in the oracle
      : v(double(x)) {
    if (double(float(v)) != v) v = perturb(v, unit());
  }
  static Mca raw(double x) {
    Mca m;
    m.v = x;
    return m;
  }
  explicit operator double() const { return v; }

  // The emulated unit roundoff (default 2^-24) and the random stream.
  static double& unit() {
    thread_local double u = 0x1p-24;
    return u;
  }
  static uint64_t& state() {
    thread_local uint64_t s = 0x9e3779b97f4a7c15ULL;
    return s;
  }
  static void seed(uint64_t s) { state() = s; }
  // Uniform in [−half, half], the next draw of the stream `s` (a copy of state()
  // held in a register by a hot loop, stored back after it: the same draws).
  // The stream is splitmix64: the state advances by kGamma per draw, and each
  // state is mixed by two xor-shift multiplies (kMix1, kMix2).
  static constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
  static constexpr uint64_t kMix1 = 0xbf58476d1ce4e5b9ULL, kMix2 = 0x94d049bb133111ebULL;
  static double uniform_from(uint64_t& s, double half) {
    uint64_t z = (s += kGamma);
    z = (z ^ (z >> 30)) * kMix1;
    z = (z ^ (z >> 27)) * kMix2;
    z ^= z >> 31;
    const double r = double(z >> 11) * 0x1p-53;  // [0, 1)
    return half * (2 * r - 1);
  }
  // Uniform in [−half, half] from this thread's stream.
  static double uniform(double half) { return uniform_from(state(), half); }
  // Two independent standard normal draws from the stream `s` (Box–Muller: two
  // uniform draws, r1 in (0, 1] and r2 in [0, 1)).
  static void gaussian_pair_from(uint64_t& s, double& g0, double& g1) {
    const double r1 = 0.5 - uniform_from(s, 0.5);
    const double r2 = 0.5 + uniform_from(s, 0.5);
    const double radius = std::sqrt(-2 * std::log(r1)), angle = 6.283185307179586 * r2;
    g0 = radius * std::cos(angle);
    g1 = radius * std::sin(angle);
  }
  // x·(1 + δ), δ uniform in [−eu, eu].
  static double perturb(double x, double eu) { return x * (1 + uniform(eu)); }
  static Mca rounded(double x) { return raw(perturb(x, unit())); }
};

inline Mca operator+(Mca a, Mca b) { return Mca::rounded(a.v + b.v); }
inline Mca operator-(Mca a, Mca b) { return Mca::rounded(a.v - b.v); }
inline Mca operator-(Mca a) { return Mca::raw(-a.v); }
inline Mca operator*(Mca a, Mca b) { return Mca::rounded(a.v * b.v); }
inline Mca operator/(Mca a, Mca b) { return Mca::rounded(a.v / b.v); }
inline Mca& operator+=(Mca& a, Mca b) { return a = a + b; }
inline Mca& operator-=(Mca& a, Mca b) { return a = a - b; }
inline Mca& operator*=(Mca& a, Mca b) { return a = a * b; }
inline Mca& operator/=(Mca& a, Mca b) { return a = a / b; }
inline bool operator<(Mca a, Mca b) { return a.v < b.v; }
inline bool operator>(Mca a, Mca b) { return a.v > b.v; }
inline bool operator<=(Mca a, Mca b) { return a.v <= b.v; }
inline bool operator>=(Mca a, Mca b) { return a.v >= b.v; }
inline bool operator==(Mca a, Mca b) { return a.v == b.v; }
inline bool operator!=(Mca a, Mca b) { return a.v != b.v; }

inline Mca exp(Mca a) { return Mca::raw(Mca::perturb(std::exp(a.v), 4 * Mca::unit())); }
inline Mca log1p(Mca a) { return Mca::raw(Mca::perturb(std::log1p(a.v), 4 * Mca::unit())); }
inline Mca sqrt(Mca a) { return Mca::rounded(std::sqrt(a.v)); }

// How Storage::q rounds an MCA value. Random (the default): one perturbation of
// the storage type's unit roundoff, as above. RandomWhereInexact: the same, except
// that a value the storage type holds exactly is stored unchanged, as round-to-nearest
// stores it (no error), instead of being perturbed as if it were rounded; the noise
// model of the baseline-size check (validation/cpu/test_baseline_precision.cpp), where
// perturbations that round-to-nearest never makes inflate the modelled noise of tiny
// problems whose few storage roundings dominate. Nearest: round to nearest through
// f32, as a kernel stores: a run is then one realisation of a float
// implementation that follows the storage points exactly and differs only in its
// f32 arithmetic (the runs of the storage agreement check, check/stats.hpp).
// Process-wide, so that every OpenMP thread sees it: set it (ScopedMcaStore)
// outside parallel regions.
enum class McaStore { Random, RandomWhereInexact, Nearest };
inline McaStore& mca_store_mode() {
  static McaStore m = McaStore::Random;
  return m;
}

// Sets the process-wide mode that `slot()` holds for the scope, and restores it.
template <class Mode, Mode& (*slot)()>
class ScopedMode {
 public:
  explicit ScopedMode(Mode m) : old_(slot()) { slot() = m; }
  ~ScopedMode() { slot() = old_; }
  ScopedMode(const ScopedMode&) = delete;
  ScopedMode& operator=(const ScopedMode&) = delete;

 private:
  Mode old_;
};
using ScopedMcaStore = ScopedMode<McaStore, mca_store_mode>;

// How ordered_gemm<Mca> (gemm.hpp) perturbs a GEMM. PerOperation (the default):
// every product and every addition of each dot product gets its own ±u draw, as
// every other operation does. Moments: each output c = seed + Σ_p a_p·b_p is
// computed in double and given ONE Gaussian perturbation with the variance that the
// per-operation draws give it to first order in u,
//     Var = (u²/3)·(Σ_p (a_p·b_p)² + Σ_p s_p²),   s_p = seed + Σ_{q<=p} a_q·b_q
// (a uniform draw in ±u has variance u²/3; the product's draw scales a_p·b_p, the
// addition's the partial sum s_p it rounds, and later draws only rescale these by
// 1 + O(u)). The outputs stay independent of one another, as their operations are.
// Same law to first order in u (mean and covariance; with P >= kMcaMomentsMinTerms
// terms the sum of 2P independent uniforms is Gaussian in shape too, and below that
// the per-operation tile runs in either mode), at about the cost of a double GEMM
// instead of two random draws per multiply-add: the mode of the model-shape suites,
// where the draws dominated a Monte Carlo run (docs/precision-statistics.md).
// Test: OracleGemm.McaMomentsHaveThePerOperationLaw. Process-wide, like McaStore;
// MC_ORACLE_MCA_GEMM=moments in the environment makes Moments the process default.
enum class McaGemm { PerOperation, Moments };
constexpr int64_t kMcaMomentsMinTerms = 64;
McaGemm& mca_gemm_mode();  // reference_cpu/gemm.cpp
using ScopedMcaGemm = ScopedMode<McaGemm, mca_gemm_mode>;

// Storage::q on an MCA value (mca_store_mode() says how).
inline Mca round_to(DType t, Mca x) {
  if (t != DType::F32 && mca_store_mode() == McaStore::Nearest)
    return Mca::raw(double(::mc::round_to(t, float(x.v))));
  if (t != DType::F32 && mca_store_mode() == McaStore::RandomWhereInexact &&
      double(::mc::round_to(t, float(x.v))) == x.v)
    return x;  // held exactly: round-to-nearest leaves it as it is
  switch (t) {
    case DType::F32: return x;
    case DType::BF16: return Mca::raw(Mca::perturb(x.v, 0x1p-8));
    case DType::F16:
      // Below f16's smallest normal (2^-14) the grid is absolute, spacing 2^-24: a
      // rounding there errs by up to half a spacing, whatever the value's size (a
      // relative ±u would claim ~1e-15 where the store flushes 4e-13 to zero).
      if (std::fabs(x.v) < 0x1p-14) return Mca::raw(x.v + Mca::uniform(0x1p-25));
      return Mca::raw(Mca::perturb(x.v, 0x1p-11));
  }
  throw std::logic_error("round_to(Mca): unknown dtype");
}

}  // namespace mc::ref
