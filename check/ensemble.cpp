// ensemble.cpp — the ensemble-baseline f32 rule (see ensemble.hpp).
#include "check/ensemble.hpp"


#include <algorithm>
#include <cmath>
#include <sstream>

#include "check/stats.hpp"
#include "core/param_layout.hpp"
#include "reference_cpu/mca_scalar.hpp"
#include "reference_cpu/model.hpp"

namespace mc::check {

namespace {

template <class S>
ModelOutputs<double> to_double_outputs(const ModelOutputs<S>& o) {
  ModelOutputs<double> r;
  r.out = to_double_vec(o.out);
  r.conv_final = to_double_vec(o.conv_final);
  r.ssm_final = to_double_vec(o.ssm_final);
  r.grads = to_double_vec(o.grads);
  r.dX = to_double_vec(o.dX);
  r.d_conv0 = to_double_vec(o.d_conv0);
  r.d_ssm0 = to_double_vec(o.d_ssm0);
  return r;
}

template <class S>
std::vector<double> oracle_target(const ModelInputs& in) {
  const Dims d = Dims::from(in.cfg);
  const ParamLayout lay(d);
  const std::vector<S> params = cast_vec<S>(in.params);
  const std::vector<S> X = cast_vec<S>(in.X);
  std::vector<S> target(size_t(in.B * d.dm), S(0));
  ref::target_forward<S>(lay, params.data(), in.B, in.T, X.data(), target.data());
  return to_double_vec(target);
}

bool sizes_ok(const TensorSpec& s, size_t n) { return int64_t(n) >= s.offset + s.count; }

}  // namespace

References references(const ModelInputs& in, bool backward, uint64_t seed) {
  References r;
  r.O = oracle_run<double>(in, DType::F32, backward);
  r.baselines.push_back(to_double_outputs(oracle_run<float>(in, DType::F32, backward)));
  r.names.push_back("P");
  for (int k = 0; k < kMcaRuns; ++k) {
    seed_mca(seed, k);
    r.baselines.push_back(to_double_outputs(oracle_run<ref::Mca>(in, DType::F32, backward)));
    r.names.push_back("mca" + std::to_string(k + 1));
  }
  return r;
}

TargetReferences target_references(const ModelInputs& in, uint64_t seed) {
  TargetReferences r;
  r.O = oracle_target<double>(in);
  r.baselines.push_back(oracle_target<float>(in));
  r.names.push_back("P");
  for (int k = 0; k < kMcaRuns; ++k) {
    seed_mca(seed, k);
    r.baselines.push_back(oracle_target<ref::Mca>(in));
    r.names.push_back("mca" + std::to_string(k + 1));
  }
  return r;
}

TensorCheck ensemble_rule(const std::string& name, const float* K, const double* O,
                          const std::vector<const double*>& bases,
                          const std::vector<std::string>& names, int64_t n, double k_limit) {
  TensorCheck t;
  size_t worst = 0;
  double worst_err = -1;
  for (size_t i = 0; i < bases.size(); ++i) {
    const double e = error_stats(bases[i], O, n, DType::F32).max_abs;
    if (!(e <= worst_err)) {  // also picks a NaN/inf error: the rule then fails
      worst_err = e;
      worst = i;
    }
  }
  t.r = k_rule(name, K, O, bases[worst], n, DType::F32, k_limit);
  if (bases.size() > 2) {  // P, then the MCA runs: the statistical checks (stats.hpp)
    const std::vector<const double*> runs(bases.begin() + 1, bases.end());
    t.r.stats = stat_check(K, O, bases[0], runs, n);
  }
  t.source = names[worst];
  const double eP = error_stats(bases[0], O, n, DType::F32).max_abs;
  t.k_P = eP > 0 ? t.r.kernel.max_abs / eP : (t.r.kernel.max_abs > 0 ? INFINITY : 0.0);
  return t;
}

TensorCheck setup_failure(const std::string& what) {
  TensorCheck t;
  t.r.tensor = what;
  t.r.pass = false;
  t.source = "-";
  return t;
}

bool ModelCheck::pass() const {
  for (const auto& t : tensors)
    if (!t.r.verdict()) return false;  // k-rule and, where computed, statistics
  return !tensors.empty();
}

double ModelCheck::max_k() const {
  double k = 0;
  for (const auto& t : tensors)
    if (std::isfinite(t.r.k)) k = std::max(k, t.r.k);
  return k;
}

const TensorCheck* ModelCheck::worst() const {
  const TensorCheck* w = nullptr;
  for (const auto& t : tensors)
    if (!w || !(t.r.headroom <= w->r.headroom)) w = &t;
  return w;
}

std::string ModelCheck::line(const std::string& label, const TensorCheck& t) {
  std::ostringstream os;
  os << label << " | " << t.r.summary() << " e_P from " << t.source << " k_P=" << t.k_P;
  return os.str();
}

std::string ModelCheck::report(bool failures_only) const {
  std::ostringstream os;
  for (const auto& t : tensors)
    if (!failures_only || !t.r.verdict()) os << line(label, t) << "\n";
  return os.str();
}

ModelCheck compare_ensemble(const std::string& label, const ModelInputs& in,
                            const ModelOutputs<float>& K, const References& ref, bool backward) {
  ModelCheck c;
  c.label = label;
  for (const TensorSpec& s : result_catalogue(in.cfg, in.B, in.T, backward)) {
    const std::vector<float>& k = field(K, s.field);
    const std::vector<double>& o = field(ref.O, s.field);
    bool ok = sizes_ok(s, k.size()) && sizes_ok(s, o.size());
    std::vector<const double*> bases;
    for (const auto& b : ref.baselines) {
      const std::vector<double>& v = field(b, s.field);
      ok = ok && sizes_ok(s, v.size());
      bases.push_back(v.data() + s.offset);
    }
    if (!ok) {
      c.tensors.push_back(setup_failure(s.name + " (SIZE MISMATCH: K " + std::to_string(k.size()) +
                                        ", O " + std::to_string(o.size()) + ", need " +
                                        std::to_string(s.offset + s.count) + ")"));
      continue;
    }
    if (s.count < kMinRuleElements) {
      c.tensors.push_back(setup_failure(s.name + " (TEST SETUP: " + std::to_string(s.count) +
                                        " elements < " + std::to_string(kMinRuleElements) +
                                        "; enlarge the shape)"));
      continue;
    }
    c.tensors.push_back(ensemble_rule(s.name, k.data() + s.offset, o.data() + s.offset, bases,
                                      ref.names, s.count));
  }
  return c;
}

ModelCheck compare_modes(const std::string& label, const ModelInputs& in,
                         const ModelOutputs<float>& Ka, const ModelOutputs<float>& Kb,
                         const References& ref) {
  ModelCheck c;
  c.label = label + " seq-vs-par";
  for (const TensorSpec& s : result_catalogue(in.cfg, in.B, in.T, true)) {
    const std::vector<float>& a = field(Ka, s.field);
    const std::vector<float>& b = field(Kb, s.field);
    const std::vector<double>& o = field(ref.O, s.field);
    if (!sizes_ok(s, a.size()) || !sizes_ok(s, b.size()) || !sizes_ok(s, o.size())) {
      c.tensors.push_back(setup_failure(s.name + " (SIZE MISMATCH)"));
      continue;
    }
    // The baseline scale: the worst ensemble member's error against O.
    std::vector<const double*> bases;
    for (const auto& m : ref.baselines) bases.push_back(field(m, s.field).data() + s.offset);
    const TensorCheck scale =
        ensemble_rule(s.name, a.data() + s.offset, o.data() + s.offset, bases, ref.names, s.count);
    TensorCheck t;
    t.source = scale.source;
    const std::vector<double> bd(b.begin() + s.offset, b.begin() + s.offset + s.count);
    KRuleResult& r = t.r;
    r.tensor = s.name;
    r.kernel = error_stats(a.data() + s.offset, bd.data(), s.count, DType::F32);
    r.baseline = scale.r.baseline;
    r.k_limit = kF32KLimit;
    r.atol = scale.r.atol;
    r.bound = r.k_limit * r.baseline.max_abs + r.atol;
    r.k = r.baseline.max_abs > 0 ? r.kernel.max_abs / r.baseline.max_abs
                                 : (r.kernel.max_abs > 0 ? INFINITY : 0.0);
    r.headroom = r.kernel.max_abs / r.bound;
    r.pass = r.kernel.nonfinite == 0 && r.kernel.ref_nonfinite == 0 &&
             r.baseline.nonfinite == 0 && r.baseline.ref_nonfinite == 0 &&
             r.kernel.max_abs <= r.bound;
    t.k_P = r.k;
    c.tensors.push_back(t);
  }
  return c;
}

ModelCheck check_gpu_f32(const ModelInputs& in, uint64_t seed, ScanMode scan, gpu::GemmMath gemm,
                         bool check_finite) {
  const References refs = references(in, /*backward=*/true, seed);
  const ModelOutputs<float> K = gpu_run(in, scan, gemm, check_finite);
  return compare_ensemble(describe(in.cfg, in.B, in.T) + " dtype=f32 scan=" + to_string(scan),
                          in, K, refs, /*backward=*/true);
}

}  // namespace mc::check
