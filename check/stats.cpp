// stats.cpp — the statistical precision checks of stats.hpp and the distribution
// functions their limits come from (regularized incomplete beta and gamma by their
// continued fractions / series, Numerical Recipes §6.2, §6.4; quantiles by bisection).
#include "check/stats.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "reference_cpu/mca_scalar.hpp"

namespace mc::check {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Continued fraction of I_x(a, b) (modified Lentz).
double beta_cf(double a, double b, double x) {
  const double tiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m < 200000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a - 1 + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1 + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-15) break;
  }
  return h;
}

// Bisection for the x in [lo, hi] with cdf(x) = p (cdf increasing).
template <class F>
double invert(F cdf, double p, double lo, double hi) {
  while (cdf(hi) < p && hi < 1e300) hi *= 2;
  for (int i = 0; i < 400 && hi - lo > 1e-13 * std::max(1.0, std::fabs(hi)); ++i) {
    const double mid = 0.5 * (lo + hi);
    (cdf(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

bool finite(double x) { return std::isfinite(x); }

// Σ e, Σ e·sign(O) and Σ e² of e = X − O over n elements, i ascending; nonfinite when
// an O or an e is not finite.
struct ErrorSums {
  double sum = 0, sum_signed = 0, sum_sq = 0;
  bool nonfinite = false;
};
template <class TX>
ErrorSums error_sums(const TX* X, const double* O, int64_t n) {
  ErrorSums r;
  for (int64_t i = 0; i < n; ++i) {
    const double o = O[i], e = double(X[i]) - o;
    if (!finite(o) || !finite(e)) {
      r.nonfinite = true;
      continue;
    }
    const double sg = o > 0 ? 1.0 : (o < 0 ? -1.0 : 0.0);
    r.sum += e;
    r.sum_signed += e * sg;
    r.sum_sq += e * e;
  }
  return r;
}

// MAMBACHECK_STATS=report: every statistic printed, none enforced.
bool stats_report_only() {
  static const bool report_only = [] {
    const char* e = std::getenv("MAMBACHECK_STATS");
    return e && std::strcmp(e, "report") == 0;
  }();
  return report_only;
}

template <class TK, class TP>
StatResult stat_impl(const TK* K, const double* O, const TP* P,
                     const std::vector<const double*>& ens, int64_t n) {
  StatResult s;
  if (stats_report_only()) {
    s.enforced = false;
    s.note = "MAMBACHECK_STATS=report";
  }
  s.computed = !ens.empty();
  s.runs = int(ens.size());
  s.n = n;
  if (!s.computed || n <= 0) return s;
  const int m = s.runs;
  const ErrorSums ek = error_sums(K, O, n), ep = error_sums(P, O, n);
  bool nonfinite = ek.nonfinite || ep.nonfinite;
  const size_t um = static_cast<size_t>(m);
  std::vector<double> bj(um), mj(um), qj(um);
  for (int j = 0; j < m; ++j) {
    const ErrorSums e = error_sums(ens[size_t(j)], O, n);
    nonfinite = nonfinite || e.nonfinite;
    bj[size_t(j)] = e.sum / double(n);
    mj[size_t(j)] = e.sum_signed / double(n);
    qj[size_t(j)] = e.sum_sq / double(n);
  }
  if (nonfinite) {
    s.pass = false;
    s.failed = "non-finite";
    return s;
  }
  const double sb = ek.sum, sm = ek.sum_signed, sk2 = ek.sum_sq, sp2 = ep.sum_sq;
  // ---- bias, in units of the ensemble's spread of the same statistic
  s.bias = sb / double(n);
  s.bias_mag = sm / double(n);
  double vb = 0, vm = 0;
  for (int j = 0; j < m; ++j) {
    vb += bj[size_t(j)] * bj[size_t(j)];
    vm += mj[size_t(j)] * mj[size_t(j)];
  }
  s.noise_bias = std::sqrt(vb / m);
  s.noise_mag = std::sqrt(vm / m);
  auto ratio = [](double x, double unit) {
    if (unit > 0) return x / unit;
    return x == 0 ? 0.0 : (x > 0 ? kInf : -kInf);
  };
  s.z_bias = ratio(s.bias, s.noise_bias);
  s.z_mag = ratio(s.bias_mag, s.noise_mag);
  s.z_limit = student_t_quantile(1 - kStatAlpha / 2, m);
  // ---- RMS against the ensemble's
  s.rms_K = std::sqrt(sk2 / double(n));
  s.rms_P = std::sqrt(sp2 / double(n));
  double qbar = 0;
  for (double q : qj) qbar += q;
  qbar /= m;
  s.rms_M = std::sqrt(qbar);
  double vq = 0;
  for (double q : qj) vq += (q - qbar) * (q - qbar);
  vq /= (m - 1);
  // ν = 2 / CV², at the 95% lower confidence bound (the sample variance of m values
  // is σ²·χ²_{m-1}/(m-1)), clamped to [1, n].
  const double cv2 = qbar > 0 ? vq / (qbar * qbar) : 0.0;
  const double nu_hat = cv2 > 0 ? 2.0 / cv2 : double(n);
  s.nu = std::clamp(nu_hat * chi2_quantile(0.05, m - 1) / (m - 1), 1.0, double(n));
  s.rho = ratio(s.rms_K, s.rms_M);
  s.rho_limit = kStatOrderAllowance * std::sqrt(f_quantile(1 - kStatAlpha, s.nu, s.nu * m));
  s.k_rms = ratio(s.rms_K, s.rms_P);
  s.k_rms_limit = s.rms_P > 0 ? s.rho_limit * s.rms_M / s.rms_P : kInf;
  // ---- verdict
  auto fail = [&](const char* what) {
    s.pass = false;
    s.failed += (s.failed.empty() ? "" : ",") + std::string(what);
  };
  if (!(std::fabs(s.z_bias) <= s.z_limit)) fail("bias");
  if (!(std::fabs(s.z_mag) <= s.z_limit)) fail("bias_mag");
  if (!(s.rho <= s.rho_limit)) fail("rms");
  return s;
}

std::string fmt(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

}  // namespace

double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double lbt = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                     b * std::log1p(-x);
  const double bt = std::exp(lbt);
  if (x < (a + 1) / (a + b + 2)) return bt * beta_cf(a, b, x) / a;
  return 1 - bt * beta_cf(b, a, 1 - x) / b;
}

double incomplete_gamma_p(double a, double x) {
  if (x <= 0) return 0;
  const double gln = std::lgamma(a);
  if (x < a + 1) {  // series
    double ap = a, sum = 1 / a, del = sum;
    for (int i = 0; i < 100000; ++i) {
      ap += 1;
      del *= x / ap;
      sum += del;
      if (std::fabs(del) < std::fabs(sum) * 1e-16) break;
    }
    return sum * std::exp(-x + a * std::log(x) - gln);
  }
  // continued fraction of Q(a, x)
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-16) break;
  }
  return 1 - std::exp(-x + a * std::log(x) - gln) * h;
}

double student_t_cdf(double t, double nu) {
  const double tail = 0.5 * incomplete_beta(nu / 2, 0.5, nu / (nu + t * t));
  return t >= 0 ? 1 - tail : tail;
}

double student_t_quantile(double p, double nu) {
  if (p == 0.5) return 0;
  if (p < 0.5) return -student_t_quantile(1 - p, nu);
  return invert([nu](double t) { return student_t_cdf(t, nu); }, p, 0.0, 16.0);
}

double f_cdf(double x, double d1, double d2) {
  if (x <= 0) return 0;
  return incomplete_beta(d1 / 2, d2 / 2, d1 * x / (d1 * x + d2));
}

double f_quantile(double p, double d1, double d2) {
  return invert([d1, d2](double x) { return f_cdf(x, d1, d2); }, p, 0.0, 4.0);
}

double chi2_quantile(double p, double k) {
  return invert([k](double x) { return incomplete_gamma_p(k / 2, x / 2); }, p, 0.0,
                std::max(4.0, 2 * k));
}

int64_t poisson_upper_quantile(double lambda, double alpha) {
  if (!(lambda > 0)) return 0;
  // P(X > c) = P(X >= c + 1) = incomplete_gamma_p(c + 1, lambda), decreasing in c.
  auto tail = [lambda](int64_t c) { return incomplete_gamma_p(double(c + 1), lambda); };
  int64_t lo = -1, hi = int64_t(lambda) + 1;
  while (tail(hi) > alpha) hi = 2 * hi + 1;
  while (hi - lo > 1) {  // invariant: tail(lo) > alpha (or lo = -1), tail(hi) <= alpha
    const int64_t mid = lo + (hi - lo) / 2;
    (tail(mid) > alpha ? lo : hi) = mid;
  }
  return hi;
}

namespace {
bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }
}  // namespace

AgreeResult storage_agreement(const float* K, const float* P,
                              const std::vector<const double*>& runs, int64_t n) {
  AgreeResult a;
  if (stats_report_only()) {
    a.enforced = false;
    a.note = "MAMBACHECK_STATS=report";
  }
  a.n = n;
  a.runs = int(runs.size());
  if (runs.empty()) return a;
  a.computed = true;
  for (int64_t i = 0; i < n; ++i) a.mismatches += !same_value(K[i], P[i]);
  for (const double* r : runs)
    for (int64_t i = 0; i < n; ++i) a.run_mismatches += !same_value(r[i], P[i]);
  a.lambda_up = chi2_quantile(1 - kStatAlpha, 2.0 * double(a.run_mismatches + 1)) / (2.0 * a.runs);
  a.limit = poisson_upper_quantile(kAgreeAllowance * a.lambda_up, kStatAlpha);
  a.pass = a.mismatches <= a.limit;
  return a;
}

std::string AgreeResult::summary() const {
  if (!computed) return "";
  std::ostringstream os;
  os << " | agree" << (pass ? "" : " FAIL") << (enforced ? "" : " (reported only)")
     << ": K!=P " << mismatches << " of " << n << " (lim " << limit << "; runs "
     << fmt(double(run_mismatches) / runs) << " each, r=" << runs << ")";
  if (!note.empty()) os << " [" << note << "]";
  return os.str();
}

std::string StatResult::summary() const {
  if (!computed) return "";
  std::ostringstream os;
  os << " | stats" << (pass ? "" : " FAIL(" + failed + ")") << (enforced ? "" : " (reported only)")
     << ": z_bias=" << fmt(z_bias) << " z_mag=" << fmt(z_mag) << " (lim " << fmt(z_limit)
     << ") k_rms=" << fmt(k_rms) << " (lim " << fmt(k_rms_limit) << ", rho=" << fmt(rho) << "/"
     << fmt(rho_limit) << " nu=" << fmt(nu) << " m=" << runs << ")";
  if (!note.empty()) os << " [" << note << "]";
  return os.str();
}

StatResult stat_check(const float* K, const double* O, const float* P,
                      const std::vector<const double*>& ensemble, int64_t n) {
  return stat_impl(K, O, P, ensemble, n);
}
StatResult stat_check(const float* K, const double* O, const double* P,
                      const std::vector<const double*>& ensemble, int64_t n) {
  return stat_impl(K, O, P, ensemble, n);
}
StatResult stat_check(const double* K, const double* O, const float* P,
                      const std::vector<const double*>& ensemble, int64_t n) {
  return stat_impl(K, O, P, ensemble, n);
}
StatResult stat_check(const double* K, const double* O, const double* P,
                      const std::vector<const double*>& ensemble, int64_t n) {
  return stat_impl(K, O, P, ensemble, n);
}

void seed_mca(uint64_t seed, int run) {
#pragma omp parallel
  {
    ref::Mca::seed(seed * 0x9e3779b97f4a7c15ULL + uint64_t(run) * 0x100000001b3ULL +
                   uint64_t(omp_get_thread_num()) + 1);
  }
}

}  // namespace mc::check
