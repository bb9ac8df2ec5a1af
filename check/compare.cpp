// compare.cpp — error metrics (max abs/rel, NMSE, ULP distance in the storage
// dtype, non-finite detection), the k-x acceptance rule of compare.hpp, and the
// bitwise helpers of the determinism tests (FNV-1a hash, first differing bit).
//
// ULP distance: values are rounded to the dtype (storage.hpp round_to, RNE),
// their bit patterns (f32: 32 bits, bf16/f16: 16 bits) are mapped to ordered
// integers (sign-magnitude -> two's complement, +0 and -0 both map to 0) and
// the distance is the absolute difference of those integers. It counts the
// representable values between the two, across the zero/subnormal/normal
// boundaries alike.
#include "check/compare.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <sstream>

#include "core/storage.hpp"

namespace mc::check {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// IEEE format parameters of a storage dtype.
struct Format {
  int mant_bits;  // explicit mantissa bits (p - 1)
  int emin;       // exponent of the smallest normal
  int emax;       // exponent of the largest finite
};

Format format_of(DType t) {
  switch (t) {
    case DType::F32: return {23, -126, 127};
    case DType::BF16: return {7, -126, 127};
    case DType::F16: return {10, -14, 15};
  }
  return {23, -126, 127};
}

// Bits of x rounded to `t` mapped to an ordered integer (monotone in the
// value; +0 and -0 both 0; adjacent representable values differ by 1).
int64_t ordered_bits(DType t, float x) {
  if (t == DType::F32) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    const int64_t mag = int64_t(u & 0x7fffffffu);
    return (u & 0x80000000u) ? -mag : mag;
  }
  const uint16_t h = (t == DType::BF16) ? f32_to_bf16_bits(x) : f32_to_f16_bits(x);
  const int64_t mag = int64_t(h & 0x7fffu);
  return (h & 0x8000u) ? -mag : mag;
}

// Distance in representable values of `t` between a and ref, both rounded to t.
double ulp_distance(DType t, double a, double ref) {
  const float af = round_to(t, float(a));
  const float rf = round_to(t, float(ref));
  return double(std::llabs(ordered_bits(t, af) - ordered_bits(t, rf)));
}

template <class A>
ErrorStats error_stats_impl(const A* a, const double* ref, int64_t n, DType dtype) {
  ErrorStats s;
  s.n = n;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(ref[i])) s.ref_max_abs = std::max(s.ref_max_abs, std::fabs(ref[i]));
  }
  s.rel_floor = 1e-3 * s.ref_max_abs + DBL_MIN;
  double sum_sq_err = 0, sum_sq_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ai = double(a[i]);
    const double ri = ref[i];
    if (!std::isfinite(ai)) {
      if (s.nonfinite++ == 0) s.first_nonfinite = i;
    }
    if (!std::isfinite(ri)) {
      if (s.ref_nonfinite++ == 0) s.first_ref_nonfinite = i;
    }
    double err;
    if (std::isfinite(ai) && std::isfinite(ri)) {
      err = std::fabs(ai - ri);
      sum_sq_err += err * err;
      sum_sq_ref += ri * ri;
      s.max_ulp = std::max(s.max_ulp, ulp_distance(dtype, ai, ri));
    } else {
      // Any non-finite value on either side is an unbounded error: it must
      // never compare as "close" (NaN would silently pass a <= test).
      err = kInf;
      sum_sq_err = kInf;
      s.max_ulp = kInf;
    }
    if (err > s.max_abs || s.argmax_abs < 0) {
      s.max_abs = err;
      s.argmax_abs = i;
    }
    s.max_rel = std::max(s.max_rel, err / std::max(std::fabs(ri), s.rel_floor));
  }
  if (n == 0) s.argmax_abs = -1;
  if (sum_sq_ref > 0) {
    s.nmse = sum_sq_err / sum_sq_ref;
  } else {
    s.nmse = (sum_sq_err > 0) ? kInf : 0.0;
  }
  return s;
}

template <class P>
KRuleResult k_rule_impl(const std::string& tensor, const float* K, const double* O, const P* Pb,
                        int64_t n, DType dtype, double k_limit) {
  KRuleResult r;
  r.tensor = tensor;
  r.kernel = error_stats(K, O, n, dtype);
  r.baseline = error_stats_impl(Pb, O, n, dtype);
  r.k_limit = k_limit;
  r.atol = 2.0 * ulp_at(dtype, r.kernel.ref_max_abs);
  r.bound = k_limit * r.baseline.max_abs + r.atol;
  if (r.baseline.max_abs > 0) {
    r.k = r.kernel.max_abs / r.baseline.max_abs;
  } else {
    r.k = (r.kernel.max_abs > 0) ? kInf : 0.0;
  }
  r.headroom = r.kernel.max_abs / r.bound;  // bound >= atol > 0
  r.pass = r.kernel.nonfinite == 0 && r.kernel.ref_nonfinite == 0 && r.baseline.nonfinite == 0 &&
           std::isfinite(r.bound) && r.kernel.max_abs <= r.bound;
  return r;
}

std::string fmt_g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

}  // namespace

double ulp_at(DType dtype, double x) {
  if (std::isnan(x)) return x;
  const Format f = format_of(dtype);
  const double ax = std::fabs(x);
  if (std::isinf(ax)) return kInf;
  // Exponent e of |x| = m * 2^e, m in [1, 2); below the normal range the
  // spacing is that of the smallest normal binade (the subnormal step); above
  // the largest finite binade it stays at the top binade's spacing.
  int e = f.emin;
  if (ax > 0) {
    int fe = 0;
    std::frexp(ax, &fe);  // ax = m' * 2^fe, m' in [0.5, 1)
    e = std::clamp(fe - 1, f.emin, f.emax);
  }
  return std::ldexp(1.0, e - f.mant_bits);
}

ErrorStats error_stats(const double* a, const double* ref, int64_t n, DType dtype) {
  return error_stats_impl(a, ref, n, dtype);
}

ErrorStats error_stats(const float* a, const double* ref, int64_t n, DType dtype) {
  return error_stats_impl(a, ref, n, dtype);
}

std::string KRuleResult::summary() const {
  std::ostringstream os;
  os << (verdict() ? "[PASS] " : "[FAIL] ") << tensor << ": k=" << fmt_g(k) << " (limit "
     << fmt_g(k_limit) << ") max|K-O|=" << fmt_g(kernel.max_abs) << " @" << kernel.argmax_abs
     << " max|P-O|=" << fmt_g(baseline.max_abs) << " atol=" << fmt_g(atol)
     << " bound=" << fmt_g(bound) << " headroom=" << fmt_g(headroom)
     << (passes_through_atol() ? " (k over its limit: passes through atol)" : "")
     << " rel=" << fmt_g(kernel.max_rel) << " nmse=" << fmt_g(kernel.nmse)
     << " ulp=" << fmt_g(kernel.max_ulp) << " max|O|=" << fmt_g(kernel.ref_max_abs)
     << " n=" << kernel.n;
  if (kernel.nonfinite > 0)
    os << " NONFINITE(K)=" << kernel.nonfinite << " first@" << kernel.first_nonfinite;
  if (baseline.nonfinite > 0)
    os << " NONFINITE(P)=" << baseline.nonfinite << " first@" << baseline.first_nonfinite;
  if (kernel.ref_nonfinite > 0)
    os << " NONFINITE(O)=" << kernel.ref_nonfinite << " first@" << kernel.first_ref_nonfinite;
  if (baseline_source != "P") os << " e_P from " << baseline_source << " (k_P=" << fmt_g(k_P) << ")";
  if (!pass && stats.computed) os << " (k-rule FAIL)";
  os << stats.summary();
  return os.str();
}

KRuleResult k_rule(const std::string& tensor, const float* K, const double* O, const float* P,
                   int64_t n, DType dtype, double k_limit) {
  return k_rule_impl(tensor, K, O, P, n, dtype, k_limit);
}

KRuleResult k_rule(const std::string& tensor, const float* K, const double* O, const double* P,
                   int64_t n, DType dtype, double k_limit) {
  return k_rule_impl(tensor, K, O, P, n, dtype, k_limit);
}

KRuleResult k_rule(const std::string& tensor, const std::vector<float>& K,
                   const std::vector<double>& O, const std::vector<float>& P, DType dtype,
                   double k_limit) {
  if (K.size() != O.size() || P.size() != O.size()) {
    throw std::invalid_argument("k_rule(" + tensor + "): size mismatch: K " +
                                std::to_string(K.size()) + ", O " + std::to_string(O.size()) +
                                ", P " + std::to_string(P.size()));
  }
  return k_rule(tensor, K.data(), O.data(), P.data(), int64_t(O.size()), dtype, k_limit);
}

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= uint64_t(p[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

BitDiff first_bit_difference(const float* a, const float* b, int64_t n) {
  BitDiff d;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    if (ua != ub) {
      d.index = i;
      d.a = a[i];
      d.b = b[i];
      d.ulp = std::llabs(ordered_bits(DType::F32, a[i]) - ordered_bits(DType::F32, b[i]));
      return d;
    }
  }
  return d;
}

}  // namespace mc::check
