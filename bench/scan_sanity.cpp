// scan_sanity.cpp — one-channel f64 scan with forward error bounds, and the
// comparison that turns it into bench_scan's "verified" counter
// (scan_sanity.hpp has the error model).
#include "bench/scan_sanity.hpp"

#include <cmath>
#include <sstream>

#include "check/compare.hpp"

namespace mc::bench {

namespace {
constexpr double kU = 1.0 / 16777216.0;  // 2^-24, f32 unit roundoff

double rho(double x) { return kU * (6.0 + 2.0 * std::fabs(x)); }
}  // namespace

int64_t parallel_composition_depth(int64_t T) {
  int64_t lg = 0;
  while ((int64_t(1) << lg) < T + 1) ++lg;
  return 2 * lg + (T + 63) / 64 + 16;
}

// Forward over t for all n. When `keep` is set, h/habs/herr of every step are
// kept ([T+1, ds], index 0 = initial state) for the backward.
struct ForwardTrace {
  std::vector<double> h, habs, herr;  // [T+1, ds]
};

static void forward_channel(const ChannelInputs& in, ChannelResult& r, ForwardTrace* keep) {
  const int64_t T = in.T, ds = in.ds;
  const double depth_term = kU * (6.0 + 2.0 * double(in.composition_depth));
  std::vector<double> h(in.h0), habs(ds), S(ds, 0.0);
  for (int64_t n = 0; n < ds; ++n) habs[n] = std::fabs(in.h0[n]);
  if (keep) {
    keep->h.assign(size_t((T + 1) * ds), 0.0);
    keep->habs.assign(size_t((T + 1) * ds), 0.0);
    keep->herr.assign(size_t((T + 1) * ds), 0.0);
    for (int64_t n = 0; n < ds; ++n) {
      keep->h[n] = h[n];
      keep->habs[n] = habs[n];
    }
  }
  r.y.assign(size_t(T), 0.0);
  r.y_bound.assign(size_t(T), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const double dl = in.delta[t], uu = in.u[t];
    const double du_skip = in.D * uu;
    double y = du_skip, y_err = 0, y_mag = std::fabs(du_skip);
    for (int64_t n = 0; n < ds; ++n) {
      const double x = dl * in.a[n];
      const double dA = std::exp(x);
      const double b = dl * uu * in.Bm[t * ds + n];
      S[n] = dA * (S[n] + rho(x) * habs[n]);
      h[n] = dA * h[n] + b;
      habs[n] = dA * habs[n] + std::fabs(b);
      const double herr = S[n] + depth_term * habs[n];
      const double c = in.Cm[t * ds + n];
      y += h[n] * c;
      y_err += std::fabs(c) * herr;
      y_mag += std::fabs(c) * habs[n];
      if (keep) {
        const size_t k = size_t((t + 1) * ds + n);
        keep->h[k] = h[n];
        keep->habs[k] = habs[n];
        keep->herr[k] = herr;
      }
    }
    r.y[t] = y;
    r.y_bound[t] = y_err + double(ds + 2) * kU * y_mag;
  }
}

static void backward_channel(const ChannelInputs& in, const ForwardTrace& f, ChannelResult& r) {
  const int64_t T = in.T, ds = in.ds;
  const double depth_term = kU * (6.0 + 2.0 * double(in.composition_depth));
  std::vector<double> dh(ds, 0.0), dhabs(ds, 0.0), S(ds, 0.0);
  // dA of step t+1 per n (0 beyond the last step: no future gradient).
  std::vector<double> dA_next(ds, 0.0), x_next(ds, 0.0);
  r.du.assign(size_t(T), 0.0);
  r.du_bound.assign(size_t(T), 0.0);
  r.d_delta.assign(size_t(T), 0.0);
  r.d_delta_bound.assign(size_t(T), 0.0);
  for (int64_t t = T - 1; t >= 0; --t) {
    const double dl = in.delta[t], uu = in.u[t], g_dy = in.dy[t];
    const double dy_skip = g_dy * in.D;
    double du = dy_skip, du_err = 0, du_mag = std::fabs(dy_skip);
    double dd = 0, dd_err = 0, dd_mag = 0;
    for (int64_t n = 0; n < ds; ++n) {
      const double g = g_dy * in.Cm[t * ds + n];
      S[n] = dA_next[n] * (S[n] + rho(x_next[n]) * dhabs[n]);
      dh[n] = g + dA_next[n] * dh[n];
      dhabs[n] = std::fabs(g) + dA_next[n] * dhabs[n];
      const double dherr = S[n] + depth_term * dhabs[n];

      const double bn = in.Bm[t * ds + n];
      const double x = dl * in.a[n];
      const double dA = std::exp(x);
      // du term: dh·δ·B
      du += dh[n] * dl * bn;
      du_err += dherr * std::fabs(dl * bn);
      du_mag += dhabs[n] * std::fabs(dl * bn);
      // dδ term: dh·(a·dA·h_{t-1} + u·B)
      const size_t kp = size_t(t * ds + n);  // h_{t-1} = trace index t
      const double q = in.a[n] * dA * f.h[kp] + uu * bn;
      const double q_mag = std::fabs(in.a[n]) * dA * f.habs[kp] + std::fabs(uu * bn);
      const double q_err =
          std::fabs(in.a[n]) * dA * (f.herr[kp] + rho(x) * f.habs[kp]) + 3.0 * kU * q_mag;
      dd += dh[n] * q;
      dd_err += dherr * q_mag + dhabs[n] * q_err;
      dd_mag += dhabs[n] * q_mag;

      dA_next[n] = dA;
      x_next[n] = x;
    }
    r.du[t] = du;
    r.du_bound[t] = du_err + double(ds + 3) * kU * du_mag;
    r.d_delta[t] = dd;
    r.d_delta_bound[t] = dd_err + double(ds + 2) * kU * dd_mag;
  }
}

ChannelResult channel_reference(const ChannelInputs& in, bool backward) {
  ChannelResult r;
  if (!backward) {
    forward_channel(in, r, nullptr);
    return r;
  }
  ForwardTrace trace;
  forward_channel(in, r, &trace);
  backward_channel(in, trace, r);
  return r;
}

void compare_channel(Disposition& d, const std::string& what, const std::vector<float>& got,
                     const std::vector<double>& ref, const std::vector<double>& bound,
                     DType dtype) {
  const size_t n = ref.size();
  for (size_t i = 0; i < n && i < got.size(); ++i) {
    const double allowed = bound[i] + check::ulp_at(dtype, std::fabs(ref[i]) + bound[i]);
    const double err = std::fabs(double(got[i]) - ref[i]);
    const double ratio = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0.0);
    ++d.compared;
    if (!(ratio <= 1.0)) {  // also catches NaN
      if (d.ok) {
        std::ostringstream os;
        os.precision(6);
        os << what << "[t=" << i << "] gpu=" << got[i] << " ref=" << ref[i] << " |err|=" << err
           << " > allowed " << allowed;
        d.detail = os.str();
      }
      d.ok = false;
    }
    if (ratio > d.worst || std::isnan(ratio)) d.worst = std::isnan(ratio) ? INFINITY : ratio;
  }
  if (got.size() != n) {
    d.ok = false;
    if (d.detail.empty()) d.detail = what + ": size mismatch";
  }
}

}  // namespace mc::bench
