// gradcheck.cpp — the directional finite-difference check and the
// differentiable functions (backbone, layer, steps) it is applied to. The
// tolerance model is documented in gradcheck.hpp.
#include "check/gradcheck.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "reference_cpu/model.hpp"
#include "reference_cpu/steps.hpp"

namespace mc::check {

namespace {

constexpr double kU64 = 0x1p-53;  // unit roundoff of double
constexpr double kU32 = 0x1p-24;  // unit roundoff of float

// ⟨v, out⟩ with i ascending.
double dot(const std::vector<double>& v, const std::vector<double>& out) {
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * out[i];
  return s;
}

template <class S>
Tensors<S> zeros_like(const Tensors<double>& x) {
  Tensors<S> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) g[i].assign(x[i].size(), S(0));
  return g;
}

Tensors<float> to_float(const Tensors<double>& x) {
  Tensors<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = mc::check::to_float(x[i]);
  return r;
}

// Base-point evaluations shared by every directional comparison.
struct BasePoint {
  std::vector<double> v;      // output weighting
  std::vector<double> out64;  // f64 output at x0
  std::vector<float> out32;   // f32 output at x0 (same inputs: they are f32-exact)
  Tensors<double> g64;        // Jᵀv in double
  Tensors<float> g32;         // Jᵀv in float
  Tensors<double> u;          // the random direction over every segment
};

BasePoint evaluate_base(const DiffFunction& f, const GradcheckOptions& opt) {
  BasePoint b;
  SplitMix64 rng(opt.seed ^ 0x6a09e667f3bcc908ULL);
  b.v.resize(size_t(f.out_size));
  for (double& x : b.v) x = f32_exact(rng.normal());
  b.u = zeros_like<double>(f.inputs);
  for (const Segment& s : f.segments)
    for (int64_t j = 0; j < s.size; ++j)
      b.u[size_t(s.input)][size_t(s.offset + j)] =
          opt.direction == Direction::Rademacher ? rng.rademacher() : rng.normal();
  const Tensors<float> x32 = to_float(f.inputs);
  f.f64(f.inputs, b.out64);
  f.f32(x32, b.out32);
  if (int64_t(b.out64.size()) != f.out_size || int64_t(b.out32.size()) != f.out_size)
    throw std::logic_error("gradcheck " + f.name + ": forward output size differs from out_size");
  b.g64 = zeros_like<double>(f.inputs);
  b.g32 = zeros_like<float>(f.inputs);
  f.g64(f.inputs, b.v, b.g64);
  f.g32(x32, mc::check::to_float(b.v), b.g32);
  return b;
}

// The direction p restricted to the given segments: p_i = u_i·max(1, |x_i|).
Tensors<double> direction(const DiffFunction& f, const BasePoint& b,
                          const std::vector<const Segment*>& segs, int64_t* n) {
  Tensors<double> p = zeros_like<double>(f.inputs);
  *n = 0;
  for (const Segment* s : segs) {
    for (int64_t j = s->offset; j < s->offset + s->size; ++j) {
      const size_t i = size_t(s->input), jj = size_t(j);
      p[i][jj] = b.u[i][jj] * std::max(1.0, std::fabs(f.inputs[i][jj]));
    }
    *n += s->size;
  }
  return p;
}

DirectionalCheck directional(const DiffFunction& f, const BasePoint& b, const Tensors<double>& p,
                             const std::string& scope, int64_t n, const GradcheckOptions& opt) {
  DirectionalCheck c;
  c.scope = scope;
  c.n = n;
  c.h = opt.h;
  const double h = opt.h;
  std::vector<double> out;
  auto phi = [&](double s) {
    Tensors<double> x = f.inputs;
    for (size_t i = 0; i < x.size(); ++i)
      for (size_t j = 0; j < x[i].size(); ++j)
        if (p[i][j] != 0.0) x[i][j] += s * p[i][j];
    f.f64(x, out);
    return dot(b.v, out);
  };
  const double p1 = phi(h), m1 = phi(-h), p2 = phi(2 * h), m2 = phi(-2 * h);
  c.fd2 = (p1 - m1) / (2 * h);
  c.fd4 = (8 * (p1 - m1) - (p2 - m2)) / (12 * h);
  const double phi3 = (p2 - 2 * p1 + 2 * m1 - m2) / (2 * h * h * h);

  // δ: rounding error of one evaluation of φ (see gradcheck.hpp), plus the
  // rounding of the perturbed inputs x_i + s·p_i themselves.
  double mag = 0, float_err = 0;
  for (size_t i = 0; i < b.v.size(); ++i) {
    mag += std::fabs(b.v[i] * b.out64[i]);
    float_err += std::fabs(b.v[i]) * std::fabs(double(b.out32[i]) - b.out64[i]);
  }
  double input_rounding = 0, a = 0, a_abs = 0, a_float_err = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    for (size_t j = 0; j < p[i].size(); ++j) {
      if (p[i][j] == 0.0) continue;
      const double g = b.g64[i][j];
      input_rounding += std::fabs(g) * (std::fabs(f.inputs[i][j]) + 2 * h * std::fabs(p[i][j]));
      a += g * p[i][j];
      a_abs += std::fabs(g * p[i][j]);
      a_float_err += std::fabs(p[i][j]) * std::fabs(double(b.g32[i][j]) - g);
    }
  }
  const double delta = std::max(kU64 * mag, (kU64 / kU32) * float_err) + kU64 * input_rounding;
  c.analytic = a;
  c.analytic_round_est = std::max(double(n) * kU64 * a_abs, (kU64 / kU32) * a_float_err);
  c.trunc_est = h * h * std::fabs(phi3) / 6;
  c.round_est = 1.5 * delta / h;
  c.tol = opt.safety * (c.trunc_est + c.round_est + c.analytic_round_est);
  c.error = std::fabs(c.fd4 - c.analytic);
  c.finite = std::isfinite(p1) && std::isfinite(m1) && std::isfinite(p2) && std::isfinite(m2) &&
             std::isfinite(a) && std::isfinite(c.tol);
  c.pass = c.finite && c.error <= c.tol;
  return c;
}

}  // namespace

double DirectionalCheck::rel_error() const {
  const double s = std::max(std::fabs(analytic), std::fabs(fd4));
  return s > 0 ? error / s : (error > 0 ? INFINITY : 0.0);
}

double DirectionalCheck::rel_tol() const {
  const double s = std::max(std::fabs(analytic), std::fabs(fd4));
  return s > 0 ? tol / s : INFINITY;
}

std::string DirectionalCheck::line() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "  %-28s %8lld  %+.12e  %+.12e  %9.2e  %9.2e  (trunc %8.1e round %8.1e dA %8.1e)  "
                "rel %8.1e / %8.1e  %s",
                scope.c_str(), (long long)n, analytic, fd4, error, tol, trunc_est, round_est,
                analytic_round_est, rel_error(), rel_tol(),
                !finite ? "NON-FINITE" : (pass ? "ok" : "FAIL"));
  return buf;
}

std::string GradcheckResult::report() const {
  std::ostringstream os;
  os << "gradcheck " << function << ": " << (pass ? "PASS" : "FAIL") << "  (h = " << all.h
     << ", tol = 10·(h²|φ'''|/6 + 1.5·δ/h + δA), δ from f64 roundoff and the f32-vs-f64 gap)\n";
  os << "  scope                               n  analytic <J^T v, p>  FD 4-point <v, J p>     "
        "|diff|        tol\n";
  os << all.line() << "\n";
  for (const DirectionalCheck& c : per_segment) os << c.line() << "\n";
  if (!pass) {
    if (!guilty.empty()) {
      os << "  gradient wrong for:";
      for (const std::string& g : guilty) os << " " << g;
      os << "\n";
    } else if (!per_segment.empty()) {
      os << "  no single segment fails alone (the error is spread over several tensors)\n";
    }
  }
  return os.str();
}

GradcheckResult gradcheck(const DiffFunction& f, const GradcheckOptions& opt) {
  GradcheckResult r;
  r.function = f.name;
  const BasePoint b = evaluate_base(f, opt);
  std::vector<const Segment*> every;
  for (const Segment& s : f.segments) every.push_back(&s);
  int64_t n = 0;
  const Tensors<double> p_all = direction(f, b, every, &n);
  r.all = directional(f, b, p_all, "all", n, opt);
  r.pass = r.all.pass;
  const bool localise = opt.localise == Localise::Always ||
                        (opt.localise == Localise::OnFailure && !r.pass);
  if (localise) {
    for (const Segment& s : f.segments) {
      int64_t ns = 0;
      const Tensors<double> p_seg = direction(f, b, {&s}, &ns);
      r.per_segment.push_back(directional(f, b, p_seg, s.name, ns, opt));
      if (!r.per_segment.back().pass) r.guilty.push_back(s.name);
    }
    // A failing segment fails the check even if the "all" comparison was lucky.
    if (!r.guilty.empty()) r.pass = false;
  }
  return r;
}

// ================================================================ functions ===

namespace {

// Wraps a functor with template members forward<S>(in, out) and
// backward<S>(in, v, grads) into a DiffFunction. Inputs are rounded to
// f32-exact values so the float run sees the same point.
template <class Fn>
DiffFunction make_function(std::string name, std::vector<std::string> input_names,
                           Tensors<double> inputs, std::vector<Segment> segments, int64_t out_size,
                           Fn fn) {
  DiffFunction f;
  f.name = std::move(name);
  f.input_names = std::move(input_names);
  for (auto& t : inputs)
    for (double& x : t) x = f32_exact(x);
  f.inputs = std::move(inputs);
  f.segments = std::move(segments);
  f.out_size = out_size;
  f.f64 = [fn](const Tensors<double>& in, std::vector<double>& out) { fn.template forward<double>(in, out); };
  f.f32 = [fn](const Tensors<float>& in, std::vector<float>& out) { fn.template forward<float>(in, out); };
  f.g64 = [fn](const Tensors<double>& in, const std::vector<double>& v, Tensors<double>& g) {
    fn.template backward<double>(in, v, g);
  };
  f.g32 = [fn](const Tensors<float>& in, const std::vector<float>& v, Tensors<float>& g) {
    fn.template backward<float>(in, v, g);
  };
  return f;
}

// One segment per input, named like the input.
std::vector<Segment> whole_inputs(const std::vector<std::string>& names, const Tensors<double>& in) {
  std::vector<Segment> s;
  for (size_t i = 0; i < in.size(); ++i) s.push_back({names[i], int(i), 0, int64_t(in[i].size())});
  return s;
}

std::string shape_tag(const Problem& p) {
  std::ostringstream os;
  os << "[dm " << p.dims.dm << " di " << p.dims.di << " ds " << p.dims.ds << " dc " << p.dims.dc
     << " L " << p.dims.L << " mid " << p.dims.mid << " B " << p.B << " T " << p.T << " seed "
     << p.seed << "]";
  return os.str();
}

// ---- backbone ----

// Output: [out | conv_final | ssm_final], so that the random output weighting
// also puts upstream gradients on the final states (FinalStateGrads).
struct BackboneFn {
  ParamLayout lay;
  int64_t B, T;
  int64_t n_out() const { return B * T * lay.dims.dm; }
  int64_t n_conv() const { return lay.dims.L * B * lay.dims.di * lay.dims.dc; }
  template <class S>
  ref::RecurrentState<S> state(const Tensors<S>& in) const {
    ref::RecurrentState<S> s;
    s.conv = in[2];
    s.ssm = in[3];
    return s;
  }
  template <class S>
  void forward(const Tensors<S>& in, std::vector<S>& out) const {
    ref::RecurrentState<S> s = state(in);
    std::vector<S> y(size_t(n_out()), S(0));
    ref::backbone_forward(lay, in[0].data(), B, T, in[1].data(), s, y.data(),
                          static_cast<ref::BackboneActivations<S>*>(nullptr));
    out = std::move(y);
    out.insert(out.end(), s.conv.begin(), s.conv.end());
    out.insert(out.end(), s.ssm.begin(), s.ssm.end());
  }
  template <class S>
  void backward(const Tensors<S>& in, const std::vector<S>& v, Tensors<S>& g) const {
    ref::RecurrentState<S> s = state(in);
    std::vector<S> out(static_cast<size_t>(n_out()));
    ref::BackboneActivations<S> act;
    ref::backbone_forward(lay, in[0].data(), B, T, in[1].data(), s, out.data(), &act);
    ref::BackboneGradOutputs<S> go;
    go.params = g[0].data();
    go.dX = g[1].data();
    go.d_conv0 = g[2].data();
    go.d_ssm0 = g[3].data();
    ref::FinalStateGrads<S> fin;
    fin.conv = v.data() + n_out();
    fin.ssm = v.data() + n_out() + n_conv();
    ref::backbone_backward(lay, in[0].data(), act, v.data(), fin, go);
  }
};

// ---- layer ----

// Output: [H_out | conv_final | ssm_final] (see BackboneFn).
struct LayerFn {
  Dims d;
  LayerParamOffsets off;
  int64_t B, T;
  int64_t n_out() const { return B * T * d.dm; }
  int64_t n_conv() const { return B * d.di * d.dc; }
  template <class S>
  void forward(const Tensors<S>& in, std::vector<S>& out) const {
    std::vector<S> conv = in[2], ssm = in[3];
    out.assign(size_t(n_out()), S(0));
    ref::layer_forward(d, in[0].data(), off, B, T, in[1].data(), conv.data(), ssm.data(),
                       out.data(), static_cast<ref::LayerActivations<S>*>(nullptr));
    out.insert(out.end(), conv.begin(), conv.end());
    out.insert(out.end(), ssm.begin(), ssm.end());
  }
  template <class S>
  void backward(const Tensors<S>& in, const std::vector<S>& v, Tensors<S>& g) const {
    std::vector<S> conv = in[2], ssm = in[3], out(static_cast<size_t>(n_out()));
    ref::LayerActivations<S> act;
    ref::layer_forward(d, in[0].data(), off, B, T, in[1].data(), conv.data(), ssm.data(),
                       out.data(), &act);
    std::vector<S> dH(v.begin(), v.begin() + n_out());
    ref::layer_backward_chained(d, in[0].data(), off, B, T, act, dH.data(), g[0].data(),
                                v.data() + n_out(), v.data() + n_out() + n_conv(), g[2].data(),
                                g[3].data());
    g[1] = dH;
  }
};

// ---- steps ----

struct RmsnormFn {
  int64_t R, D;
  double eps;
  template <class S>
  void forward(const Tensors<S>& in, std::vector<S>& out) const {
    std::vector<S> rms(static_cast<size_t>(R));
    out.resize(size_t(R * D));
    ref::rmsnorm_fwd(in[0].data(), in[1].data(), R, D, eps, out.data(), rms.data());
  }
  template <class S>
  void backward(const Tensors<S>& in, const std::vector<S>& v, Tensors<S>& g) const {
    std::vector<S> rms(static_cast<size_t>(R)), y(size_t(R * D));
    ref::rmsnorm_fwd(in[0].data(), in[1].data(), R, D, eps, y.data(), rms.data());
    ref::rmsnorm_bwd(v.data(), in[0].data(), in[1].data(), rms.data(), R, D, g[0].data(),
                     g[1].data());
  }
};

struct LinearFn {
  int64_t M, K, N;
  template <class S>
  void forward(const Tensors<S>& in, std::vector<S>& out) const {
    out.resize(size_t(M * N));
    ref::linear_fwd(in[0].data(), in[1].data(), in[2].data(), M, K, N, out.data());
  }
  template <class S>
  void backward(const Tensors<S>& in, const std::vector<S>& v, Tensors<S>& g) const {
    ref::linear_bwd_dx(v.data(), in[1].data(), M, K, N, g[0].data());
    ref::linear_bwd_dw(in[0].data(), v.data(), M, K, N, g[1].data());
    ref::linear_bwd_db(v.data(), M, N, g[2].data());
  }
};

struct ConvFn {
  int64_t B, T, di, dc;
  template <class S>
  void run(const Tensors<S>& in, std::vector<S>& windows, std::vector<S>& pc,
           std::vector<S>& u) const {
    std::vector<S> state = in[3];
    windows.resize(size_t(B * T * di * dc));
    pc.resize(size_t(B * T * di));
    u.resize(size_t(B * T * di));
    ref::conv1d_silu_fwd(in[0].data(), in[1].data(), in[2].data(), B, T, di, dc, state.data(),
                         windows.data(), pc.data(), u.data());
  }
  template <class S>
  void forward(const Tensors<S>& in, std::vector<S>& out) const {
    std::vector<S> windows, pc;
    run(in, windows, pc, out);
  }
  template <class S>
  void backward(const Tensors<S>& in, const std::vector<S>& v, Tensors<S>& g) const {
    std::vector<S> windows, pc, u;
    run(in, windows, pc, u);
    ref::conv1d_silu_bwd(v.data(), pc.data(), windows.data(), in[1].data(), B, T, di, dc,
                         g[0].data(), g[1].data(), g[2].data(), g[3].data());
  }
};

struct SoftplusFn {
  int64_t n;
  template <class S>
  void forward(const Tensors<S>& in, std::vector<S>& out) const {
    out.resize(static_cast<size_t>(n));
    ref::softplus_fwd(in[0].data(), n, out.data());
  }
  template <class S>
  void backward(const Tensors<S>& in, const std::vector<S>& v, Tensors<S>& g) const {
    ref::softplus_bwd(in[0].data(), v.data(), n, g[0].data());
  }
};

struct ScanFn {
  int64_t B, T, di, ds;
  template <class S>
  void run(const Tensors<S>& in, std::vector<S>& a_neg, std::vector<S>& h_saved,
           std::vector<S>& y) const {
    a_neg.resize(size_t(di * ds));
    ref::exp_negate(in[4].data(), di * ds, a_neg.data());
    std::vector<S> h = in[6];
    h_saved.resize(size_t(B * (T + 1) * di * ds));
    y.resize(size_t(B * T * di));
    ref::selective_scan_fwd(in[0].data(), in[1].data(), in[2].data(), in[3].data(), a_neg.data(),
                            in[5].data(), B, T, di, ds, h.data(), h_saved.data(), y.data());
  }
  template <class S>
  void forward(const Tensors<S>& in, std::vector<S>& out) const {
    std::vector<S> a_neg, h_saved;
    run(in, a_neg, h_saved, out);
  }
  template <class S>
  void backward(const Tensors<S>& in, const std::vector<S>& v, Tensors<S>& g) const {
    std::vector<S> a_neg, h_saved, y;
    run(in, a_neg, h_saved, y);
    ref::selective_scan_bwd(in[0].data(), in[1].data(), in[2].data(), in[3].data(), a_neg.data(),
                            in[5].data(), h_saved.data(), v.data(), B, T, di, ds, g[0].data(),
                            g[1].data(), g[2].data(), g[3].data(), g[5].data(), g[4].data(),
                            g[6].data());
  }
};

struct GatingFn {
  int64_t n;
  template <class S>
  std::vector<S> gate(const std::vector<S>& z) const {
    // SiLU through the F3 step itself: P = [0 | z] with di = 1.
    std::vector<S> P(size_t(2 * n), S(0)), xb(static_cast<size_t>(n)), zz(static_cast<size_t>(n)), gs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) P[size_t(2 * i + 1)] = z[size_t(i)];
    ref::split_gate_silu_fwd(P.data(), n, 1, xb.data(), zz.data(), gs.data());
    return gs;
  }
  template <class S>
  void forward(const Tensors<S>& in, std::vector<S>& out) const {
    const std::vector<S> gs = gate(in[1]);
    out.resize(static_cast<size_t>(n));
    ref::gating_fwd(in[0].data(), gs.data(), n, out.data());
  }
  template <class S>
  void backward(const Tensors<S>& in, const std::vector<S>& v, Tensors<S>& g) const {
    const std::vector<S> gs = gate(in[1]);
    ref::gating_bwd(v.data(), in[0].data(), in[1].data(), gs.data(), n, g[0].data(), g[1].data());
  }
};

std::vector<double> normal_vec(SplitMix64& rng, int64_t n, double mean, double scale) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = f32_exact(mean + scale * rng.normal());
  return v;
}

std::vector<double> uniform_vec(SplitMix64& rng, int64_t n, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = f32_exact(rng.uniform(lo, hi));
  return v;
}

uint64_t name_salt(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

DiffFunction backbone_function(const Problem& p) {
  const ParamLayout& lay = p.layout;
  std::vector<Segment> segs;
  for (const ParamEntry& e : lay.entries) segs.push_back({e.name, 0, e.offset, e.size});
  segs.push_back({"input", 1, 0, int64_t(p.X.size())});
  const Dims& d = p.dims;
  const int64_t nc = p.B * d.di * d.dc, ns = p.B * d.di * d.ds;
  for (int64_t l = 0; l < d.L; ++l)
    segs.push_back({"layers." + std::to_string(l) + ".conv0", 2, l * nc, nc});
  for (int64_t l = 0; l < d.L; ++l)
    segs.push_back({"layers." + std::to_string(l) + ".ssm0", 3, l * ns, ns});
  return make_function("backbone " + shape_tag(p), {"params", "input", "conv0", "ssm0"},
                       {p.params, p.X, p.conv0, p.ssm0}, std::move(segs),
                       p.B * p.T * d.dm + d.L * (nc + ns), BackboneFn{lay, p.B, p.T});
}

DiffFunction layer_function(const Problem& p, int layer) {
  const Dims& d = p.dims;
  if (layer < 0 || layer >= d.L)
    throw std::invalid_argument("layer_function: layer = " + std::to_string(layer) +
                                " violates 0 <= layer < n_layers = " + std::to_string(d.L));
  // The layer's actual input: run the problem's forward in double.
  ref::RecurrentState<double> st = p.state<double>();
  ref::BackboneActivations<double> act;
  std::vector<double> out(size_t(p.B * p.T * d.dm));
  ref::backbone_forward(p.layout, p.params.data(), p.B, p.T, p.X.data(), st, out.data(), &act);
  const std::vector<double>& H = act.layers[size_t(layer)].residual;
  const int64_t nc = p.B * d.di * d.dc, ns = p.B * d.di * d.ds;
  std::vector<double> conv0(p.conv0.begin() + layer * nc, p.conv0.begin() + (layer + 1) * nc);
  std::vector<double> ssm0(p.ssm0.begin() + layer * ns, p.ssm0.begin() + (layer + 1) * ns);
  std::vector<Segment> segs;
  for (const ParamEntry& e : p.layout.entries)
    if (e.layer == layer) segs.push_back({e.name, 0, e.offset, e.size});
  const std::string pre = "layers." + std::to_string(layer) + ".";
  segs.push_back({pre + "H", 1, 0, int64_t(H.size())});
  segs.push_back({pre + "conv0", 2, 0, nc});
  segs.push_back({pre + "ssm0", 3, 0, ns});
  return make_function("layer " + std::to_string(layer) + " " + shape_tag(p),
                       {"params", "H", "conv0", "ssm0"}, {p.params, H, conv0, ssm0},
                       std::move(segs), p.B * p.T * d.dm + nc + ns,
                       LayerFn{d, p.layout.layers[size_t(layer)], p.B, p.T});
}

const std::vector<std::string>& step_names() {
  static const std::vector<std::string> names = {"rmsnorm", "linear", "conv1d_silu",
                                                 "softplus", "selective_scan", "gating"};
  return names;
}

DiffFunction step_function(const std::string& name, const Problem& p) {
  const Dims& d = p.dims;
  const int64_t B = p.B, T = p.T, R = B * T;
  SplitMix64 rng = stream(p.seed, Stream::Extra, name_salt(name));
  const std::string tag = name + " " + shape_tag(p);
  auto build = [&](std::vector<std::string> names, Tensors<double> in, int64_t out, auto fn) {
    std::vector<Segment> segs = whole_inputs(names, in);
    return make_function(tag, std::move(names), std::move(in), std::move(segs), out, fn);
  };
  if (name == "rmsnorm") {
    return build({"x", "g"}, {normal_vec(rng, R * d.dm, 0, 1), uniform_vec(rng, d.dm, 0.7, 1.3)},
                 R * d.dm, RmsnormFn{R, d.dm, d.eps});
  }
  if (name == "linear") {
    const int64_t K = d.di, N = d.xd;
    return build({"X", "W", "b"},
                 {normal_vec(rng, R * K, 0, 1), normal_vec(rng, K * N, 0, 1 / std::sqrt(double(K))),
                  normal_vec(rng, N, 0, 0.5)},
                 R * N, LinearFn{R, K, N});
  }
  if (name == "conv1d_silu") {
    return build({"xb", "w", "bias", "state0"},
                 {normal_vec(rng, R * d.di, 0, 1), normal_vec(rng, d.di * d.dc, 0, 0.7),
                  uniform_vec(rng, d.di, -0.5, 0.5), normal_vec(rng, B * d.di * d.dc, 0, 0.7)},
                 R * d.di, ConvFn{B, T, d.di, d.dc});
  }
  if (name == "softplus") {
    // N(0, 3²) plus every fifth value in (21, 25), the pass-through branch;
    // nothing within 0.5 of the switch at 20 (FD across it would see the jump).
    std::vector<double> x = normal_vec(rng, R * d.di, 0, 3);
    for (size_t i = 0; i < x.size(); ++i) {
      if (i % 5 == 4) x[i] = f32_exact(rng.uniform(21, 25));
      if (std::fabs(x[i] - 20) < 0.5) x[i] = 19.0;
    }
    return build({"x"}, {x}, R * d.di, SoftplusFn{R * d.di});
  }
  if (name == "selective_scan") {
    std::vector<double> delta = normal_vec(rng, R * d.di, -1, 1);
    for (double& x : delta) x = std::log1p(std::exp(x));  // Δ = softplus(N(-1, 1)) > 0
    std::vector<double> a_log(size_t(d.di * d.ds));
    for (int64_t c = 0; c < d.di; ++c)
      for (int64_t n = 0; n < d.ds; ++n)
        a_log[size_t(c * d.ds + n)] = std::log(double(n + 1)) + rng.uniform(-0.3, 0.3);
    return build({"delta", "u", "Bm", "Cm", "a_log", "D", "h0"},
                 {delta, normal_vec(rng, R * d.di, 0, 1), normal_vec(rng, R * d.ds, 0, 1),
                  normal_vec(rng, R * d.ds, 0, 1), a_log, uniform_vec(rng, d.di, 0.5, 1.5),
                  normal_vec(rng, B * d.di * d.ds, 0, 0.5)},
                 R * d.di, ScanFn{B, T, d.di, d.ds});
  }
  if (name == "gating") {
    return build({"y", "z"}, {normal_vec(rng, R * d.di, 0, 1), normal_vec(rng, R * d.di, 0, 2)},
                 R * d.di, GatingFn{R * d.di});
  }
  std::string names;
  for (const std::string& s : step_names()) names += " " + s;
  throw std::invalid_argument("step_function: step = '" + name + "' is not one of:" + names);
}

}  // namespace mc::check
