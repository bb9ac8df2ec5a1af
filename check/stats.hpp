// stats.hpp — statistical precision checks per tensor, beside the max-error k-rule
// of compare.hpp. The k-rule compares two maxima and has an absolute floor of
// 2 ulp at max|O|, so a fault confined to rounding (a biased rounding at one
// storage point, a less accurate elementary function) can stay inside its
// bound. These statistics look at the whole error field instead. The derivation
// of both limits is docs/precision-statistics.md; in short:
//
// Inputs per tensor: K (kernel), O (f64 oracle), P (same-precision baseline) and an
// ensemble M_1..M_m of Monte Carlo arithmetic runs of the oracle's own code in
// that precision (reference_cpu/mca_scalar.hpp: every operation's result, and every
// typed storage rounding, perturbed by a random relative error uniform in ±u;
// elementary functions ±4u): m samples of an UNBIASED implementation whose every
// operation is at least as inaccurate as a correctly rounded one (libm within
// 2 ulp). Errors e_X = X − O.
//
//  * Bias: b = mean(e_K) and b_mag = mean(e_K·sign(O)) (the latter sees rounding
//    toward or away from zero, which cancels in b when the values have both signs).
//    Noise unit σ̂² = (1/m) Σ_j b(M_j)² (the runs are unbiased, so m degrees of
//    freedom); z = b / σ̂. For an implementation in the ensemble's accuracy class
//    z ~ Student t_m; a round-to-nearest one is quieter (z smaller). Limit:
//    |z| <= t_m quantile at 1 − α/2.
//  * RMS: k_rms = rms(e_K) / rms(e_P) (reported); the verdict uses
//    ρ = rms(e_K) / rms_M with rms_M² = (1/m) Σ_j mean(e_Mj²): under the same
//    hypothesis ρ² ~ F(ν, m·ν), ν the effective number of independent error terms
//    of the tensor, estimated from the ensemble's own spread (ν = 2 / CV² of the
//    runs' mean squared errors, taken at its 95% lower confidence bound, in [1, n]).
//    Limit: ρ <= A · sqrt(F quantile at 1 − α), with A = kStatOrderAllowance for
//    the summation order: the ensemble samples the ORACLE's order, and a kernel
//    may sum the same terms in another, equally valid order whose partial sums
//    are larger (the seed scan starts y from D·u: its RMS error is ~2x the
//    float oracle's, 0.96 of the limit without A on the emulated kernels, which
//    are bitwise the device's: test_scan_emulation_bits). Reported also in k_rms units
//    (k_rms_limit = ρ_limit · rms_M / rms_P).
// α = kStatAlpha per statistic and tensor.
//
//  * Storage agreement (typed outputs of a step only): the number c of elements
//    where K differs from P. P rounds at the kernel's storage points, so a kernel
//    that follows them differs from P only where its f32 arithmetic puts the
//    pre-store value on the other side of a rounding boundary: rare (about
//    |discrepancy| / spacing, ~2^-16 per f32-ulp of discrepancy in bf16). One
//    storage rounding more or less, or another rounding direction, moves a large
//    fraction of the elements. The null is measured, not assumed: r runs of the
//    oracle in Monte Carlo arithmetic with round-to-nearest stores
//    (ref::McaStore::Nearest: conforming implementations that differ from P in
//    their f32 arithmetic only) give S = Σ_j c_j; their mean count per run has the
//    exact (Garwood) upper bound λ⁺ = χ²_{2(S+1)}(1 − α) / (2r). Limit: c <= the
//    Poisson quantile at 1 − α of kAgreeAllowance · λ⁺ (the allowance: a kernel's
//    f32 discrepancy may be a few times the ensemble's, e.g. libm within 2 ulp).
//
// MAMBACHECK_STATS=report in the environment computes and prints everything but
// enforces nothing (StatResult::enforced = false): a diagnostic switch for a run
// that must not fail on the statistics; the default enforces them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mc::check {

// False-alarm probability per statistic and tensor of an implementation in the
// ensemble's accuracy class (the suites compare ~10^4 tensors per session).
constexpr double kStatAlpha = 1e-6;

// Allowance of the RMS limit for a kernel's own (equally valid) summation order.
constexpr double kStatOrderAllowance = 1.5;

// Allowance of the storage agreement limit: a conforming kernel's mean count of
// elements on the other side of a rounding boundary, as a multiple of the
// round-to-nearest ensemble's.
constexpr double kAgreeAllowance = 4.0;

// Round-to-nearest-store Monte Carlo runs of the storage agreement check.
constexpr int kAgreeRuns = 4;

// Monte Carlo arithmetic runs per ensemble where a suite builds one itself (the
// f32 model harness uses its existing kMcaRuns = 8).
constexpr int kStatRuns = 12;

// ---- distributions ------------------------------------------------------------------
double incomplete_beta(double a, double b, double x);  // regularized I_x(a, b)
double incomplete_gamma_p(double a, double x);         // regularized lower P(a, x)
double student_t_cdf(double t, double nu);
double student_t_quantile(double p, double nu);  // p in (0, 1)
double f_cdf(double x, double d1, double d2);
double f_quantile(double p, double d1, double d2);
double chi2_quantile(double p, double k);
// Smallest c with P(X > c) <= alpha for X ~ Poisson(lambda).
int64_t poisson_upper_quantile(double lambda, double alpha);

struct StatResult {
  bool computed = false;   // an ensemble was given
  bool enforced = true;    // false: reported only (the caller says why in `note`)
  std::string note;
  int runs = 0;            // m
  int64_t n = 0;
  double bias = 0, noise_bias = 0, z_bias = 0;    // mean(e_K), σ̂, z
  double bias_mag = 0, noise_mag = 0, z_mag = 0;  // mean(e_K·sign O), its σ̂, z
  double z_limit = 0;                             // t_m at 1 − α/2
  double rms_K = 0, rms_P = 0, rms_M = 0;
  double k_rms = 0;        // rms_K / rms_P
  double rho = 0;          // rms_K / rms_M
  double nu = 0;           // effective degrees of freedom used
  double rho_limit = 0;    // kStatOrderAllowance · sqrt(F(ν, mν) quantile at 1 − α)
  double k_rms_limit = 0;  // rho_limit · rms_M / rms_P
  bool pass = true;        // all three statistics within their limits (true when !computed)
  std::string failed;      // "bias", "bias_mag", "rms", "non-finite" (comma-separated)
  // Pass, or reported only: what a suite's verdict uses.
  bool ok() const { return pass || !enforced || !computed; }
  std::string summary() const;  // " z_bias=.. z_mag=.. (lim ..) k_rms=.. (lim ..)"
};

// The three statistics of one tensor of n elements. ensemble: m >= 2 arrays of n
// values (each one Monte Carlo arithmetic run). Any non-finite value fails.
StatResult stat_check(const float* K, const double* O, const float* P,
                      const std::vector<const double*>& ensemble, int64_t n);
StatResult stat_check(const float* K, const double* O, const double* P,
                      const std::vector<const double*>& ensemble, int64_t n);
// The same, with the kernel given in double (e.g. a CPU stand-in for a kernel).
StatResult stat_check(const double* K, const double* O, const float* P,
                      const std::vector<const double*>& ensemble, int64_t n);
StatResult stat_check(const double* K, const double* O, const double* P,
                      const std::vector<const double*>& ensemble, int64_t n);

// Storage agreement of one typed output (see the header): K and P as stored
// (dtype values held in float), runs: kAgreeRuns round-to-nearest-store Monte
// Carlo runs (dtype values held in double).
struct AgreeResult {
  bool computed = false;  // runs were given
  bool enforced = true;   // false: reported only (the caller says why in `note`)
  std::string note;
  int runs = 0;             // r
  int64_t n = 0;
  int64_t mismatches = 0;   // c: elements with K != P
  int64_t run_mismatches = 0;  // S: the runs' elements != P, all runs together
  double lambda_up = 0;     // λ⁺, per run
  int64_t limit = 0;        // Poisson quantile at 1 − α of kAgreeAllowance · λ⁺
  bool pass = true;
  bool ok() const { return pass || !enforced || !computed; }
  std::string summary() const;  // " | agree: K!=P 3 of 4096 (lim 41; runs 0.75 each)"
};
AgreeResult storage_agreement(const float* K, const float* P,
                              const std::vector<const double*>& runs, int64_t n);

// The ensemble's runs: seeds every OpenMP thread's MCA stream
// (reference_cpu/mca_scalar.hpp) from (problem seed, run, thread), so a run is
// reproducible for a fixed OMP_NUM_THREADS. Every ensemble seeds through it (the
// model and scan suites, the step testbed, check::references). No GPU code: the
// emulated scan suite links it too.
void seed_mca(uint64_t seed, int run);

}  // namespace mc::check
