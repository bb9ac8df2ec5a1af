// model_check.cpp — O/P/K runs of one backbone problem and their per-tensor
// k-rule comparison (see model_check.hpp).
#include "check/model_check.hpp"


#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <memory>
#include <sstream>

#include "reference_cpu/mca_scalar.hpp"
#include "reference_cpu/model.hpp"
#include "core/param_layout.hpp"
#include "check/problem.hpp"
#include "core/storage.hpp"

namespace mc::check {

namespace {


void quantise(std::vector<float>& v, int64_t off, int64_t n, DType t) {
  for (int64_t i = off; i < off + n; ++i) v[size_t(i)] = round_to(t, v[size_t(i)]);
}

using Ensemble = std::vector<const std::vector<double>*>;  // one field of every ensemble run

void add_rule(Comparison& c, const std::string& name, const std::vector<float>& K,
              const std::vector<double>& O, const std::vector<float>& P, int64_t off, int64_t n,
              DType dtype, const Ensemble* ens, const Ensemble* bases) {
  KRuleResult r;
  r.tensor = name;
  if (int64_t(K.size()) < off + n || int64_t(O.size()) < off + n || int64_t(P.size()) < off + n) {
    r.tensor += " (SIZE MISMATCH: K " + std::to_string(K.size()) + ", O " +
                std::to_string(O.size()) + ", P " + std::to_string(P.size()) + ", need " +
                std::to_string(off + n) + ")";
    c.tensors.push_back(r);
    return;
  }
  if (n < kMinRuleElements) {
    r.tensor += " (TEST SETUP: " + std::to_string(n) + " elements < " +
                std::to_string(kMinRuleElements) + "; the k-rule is not reliable, enlarge the shape)";
    c.tensors.push_back(r);
    return;
  }
  c.tensors.push_back(
      k_rule(name, K.data() + off, O.data() + off, P.data() + off, n, dtype, k_limit_for(dtype)));
  if (bases && !bases->empty()) {  // e_P: the largest baseline error over P and the runs
    double worst_err = c.tensors.back().baseline.max_abs;
    int worst = -1;  // P
    for (size_t j = 0; j < bases->size(); ++j) {
      const std::vector<double>& b = *(*bases)[j];
      if (int64_t(b.size()) < off + n) break;  // a size mismatch already failed above
      const double e = error_stats(b.data() + off, O.data() + off, n, dtype).max_abs;
      if (!(e <= worst_err)) {  // also picks a NaN/inf error: the rule then fails
        worst_err = e;
        worst = int(j);
      }
    }
    if (worst >= 0) {
      const double k_P = c.tensors.back().k;
      c.tensors.back() = k_rule(name, K.data() + off, O.data() + off,
                                (*bases)[size_t(worst)]->data() + off, n, dtype, k_limit_for(dtype));
      c.tensors.back().baseline_source = "rtn" + std::to_string(worst + 1);
      c.tensors.back().k_P = k_P;
    }
  }
  if (ens && !ens->empty()) {
    std::vector<const double*> runs;
    for (const std::vector<double>* e : *ens) {
      if (int64_t(e->size()) < off + n) return;  // a size mismatch already failed above
      runs.push_back(e->data() + off);
    }
    c.tensors.back().stats = stat_check(K.data() + off, O.data() + off, P.data() + off, runs, n);
  }
}

}  // namespace

ModelInputs make_model_inputs(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                              DType dtype) {
  const Problem p = make_problem(cfg, B, T, seed);
  ModelInputs in;
  in.cfg = cfg;
  in.B = B;
  in.T = T;
  in.dtype = dtype;
  in.params = to_float(p.params);
  in.X = to_float(p.X);
  in.conv0 = to_float(p.conv0);
  in.ssm0 = to_float(p.ssm0);
  in.d_out = to_float(p.d_out);
  in.d_conv_final = to_float(p.d_conv_final);
  in.d_ssm_final = to_float(p.d_ssm_final);
  if (dtype != DType::F32) {
    for (const ParamEntry& e : p.layout.entries)
      if (e.gemm_weight) quantise(in.params, e.offset, e.size, dtype);
    quantise(in.X, 0, int64_t(in.X.size()), dtype);
  }
  return in;
}


const std::vector<float>& field(const ModelInputs& in, Field f) {
  switch (f) {
    case Field::Conv0: return in.conv0;
    case Field::Ssm0: return in.ssm0;
    case Field::Params: return in.params;
    case Field::DOut: return in.d_out;
    case Field::DConvFinal: return in.d_conv_final;
    case Field::DSsmFinal: return in.d_ssm_final;
    default: return in.X;
  }
}

bool has_final_state_grads(const ModelInputs& in) {
  for (const auto* v : {&in.d_conv_final, &in.d_ssm_final})
    for (float x : *v)
      if (x != 0.0f) return true;
  return false;
}

ModelOutputs<float> gpu_run(const ModelInputs& in, ScanMode scan, gpu::GemmMath gemm,
                            bool check_finite, ScanExp exp, gpu::TypedGemm typed) {
  gpu::RunOptions opt;
  opt.dtype = in.dtype;
  opt.scan = scan;
  opt.scan_exp = exp;
  opt.gemm = gemm;
  opt.typed_gemm = typed;
  opt.state_grads = true;
  opt.check_finite = check_finite;
  gpu::Model m(in.cfg, in.B, in.T, opt);
  m.set_params(in.params);
  m.set_state(in.conv0, in.ssm0);
  if (has_final_state_grads(in)) m.set_final_state_grads(in.d_conv_final, in.d_ssm_final);
  ModelOutputs<float> o;
  m.forward(in.X, o.out);
  m.get_state(o.conv_final, o.ssm_final);
  m.backward(in.d_out, o.grads, &o.d_conv0, &o.d_ssm0, &o.dX);
  return o;
}

std::string describe(const ModelConfig& c, int64_t B, int64_t T) {
  std::ostringstream os;
  os << "dm=" << c.d_model << " ds=" << c.d_state << " dc=" << c.d_conv << " expand=" << c.expand
     << " L=" << c.n_layers << " mid=" << c.input_dim << " B=" << B << " T=" << T;
  return os.str();
}

bool shape_ok_for_k_rule(const ModelConfig& c, int64_t B, int64_t T) {
  for (const TensorSpec& t : result_catalogue(c, B, T))
    if (t.count < kMinRuleElements) return false;
  return true;
}

double k_limit_for(DType dtype) { return dtype == DType::F32 ? kF32KLimit : kTypedKLimit; }

bool Comparison::pass() const {
  if (tensors.empty()) return false;
  for (const auto& r : tensors)
    if (!r.verdict()) return false;
  return true;
}

double Comparison::max_k() const {
  double k = 0;
  for (const auto& r : tensors)
    if (std::isfinite(r.k)) k = std::max(k, r.k);
  return k;
}

double Comparison::max_headroom() const {
  double h = 0;
  for (const auto& r : tensors) h = std::max(h, r.headroom);
  return h;
}

std::string Comparison::report(bool failures_only) const {
  std::ostringstream os;
  for (const auto& r : tensors)
    if (!failures_only || !r.verdict()) os << label << " | " << r.summary() << "\n";
  return os.str();
}

Comparison compare_model(const std::string& label, const ModelInputs& in,
                         const ModelOutputs<float>& K, const ModelOutputs<double>& O,
                         const ModelOutputs<float>& P,
                         const std::vector<ModelOutputs<double>>* ens,
                         const std::vector<ModelOutputs<double>>* baselines) {
  Comparison c;
  c.label = label;
  for (const TensorSpec& t : result_catalogue(in.cfg, in.B, in.T)) {
    Ensemble runs, bases;
    if (ens)
      for (const ModelOutputs<double>& m : *ens) runs.push_back(&field(m, t.field));
    if (baselines)
      for (const ModelOutputs<double>& m : *baselines) bases.push_back(&field(m, t.field));
    add_rule(c, t.name, field(K, t.field), field(O, t.field), field(P, t.field), t.offset,
             t.count, in.dtype, ens ? &runs : nullptr, baselines ? &bases : nullptr);
  }
  return c;
}

namespace {

// Run r of the Monte Carlo ensemble seeded by `seed` (mca_ensemble's r-th run).
ModelOutputs<double> mca_run(const ModelInputs& in, DType storage, uint64_t seed, int r,
                             bool backward) {
  seed_mca(seed, r);
  const ModelOutputs<ref::Mca> m = oracle_run<ref::Mca>(in, storage, backward);
  return {to_double_vec(m.out), to_double_vec(m.conv_final), to_double_vec(m.ssm_final),
          to_double_vec(m.grads), to_double_vec(m.dX), to_double_vec(m.d_conv0),
          to_double_vec(m.d_ssm0)};
}

// seeds of their own: not the statistics' ensemble runs (mca_ensemble, same seed)
constexpr uint64_t kConformingSeedMix = 0x6a09e667f3bcc909ULL;

}  // namespace

ModelOutputs<double> conforming_run(const ModelInputs& in, DType storage, int r, uint64_t seed,
                                    bool backward) {
  const ref::ScopedMcaStore nearest(ref::McaStore::Nearest);
  return mca_run(in, storage, seed ^ kConformingSeedMix, r, backward);
}

std::vector<ModelOutputs<double>> conforming_runs(const ModelInputs& in, DType storage, int runs,
                                                  uint64_t seed, bool backward) {
  std::vector<ModelOutputs<double>> out;
  for (int r = 0; r < runs; ++r) out.push_back(conforming_run(in, storage, r, seed, backward));
  return out;
}

std::vector<ModelOutputs<double>> mca_ensemble(const ModelInputs& in, DType storage, int runs,
                                               uint64_t seed, bool backward) {
  std::vector<ModelOutputs<double>> out;
  for (int r = 0; r < runs; ++r) out.push_back(mca_run(in, storage, seed, r, backward));
  return out;
}

TypedVerdicts compare_models_lazy_baseline(const std::vector<std::string>& labels,
                                           const ModelInputs& in,
                                           const std::vector<ModelOutputs<float>>& Ks,
                                           const ModelOutputs<double>& O,
                                           const ModelOutputs<float>& P,
                                           const std::vector<ModelOutputs<double>>* ensemble,
                                           int baseline_runs, uint64_t seed) {
  if (labels.size() != Ks.size())
    throw std::invalid_argument("compare_models_lazy_baseline: labels " +
                                std::to_string(labels.size()) + " != kernel results " +
                                std::to_string(Ks.size()));
  if (baseline_runs < 0)
    throw std::invalid_argument("compare_models_lazy_baseline: baseline_runs " +
                                std::to_string(baseline_runs) + " < 0");
  TypedVerdicts v;
  auto judge = [&](const std::vector<ModelOutputs<double>>* N) {
    bool all_pass = true;  // the k-rule of every tensor (the statistics do not use the runs)
    v.comparisons.clear();
    for (size_t i = 0; i < Ks.size(); ++i) {
      v.comparisons.push_back(compare_model(labels[i], in, Ks[i], O, P, ensemble, N));
      for (const KRuleResult& r : v.comparisons.back().tensors) all_pass &= r.pass;
    }
    return all_pass;
  };
  const bool p_alone_passes = judge(nullptr);
  v.p_only = v.comparisons;
  if (p_alone_passes) return v;
  std::vector<ModelOutputs<double>> N;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < baseline_runs; ++r) {
    N.push_back(conforming_run(in, in.dtype, r, seed));
    v.runs = r + 1;
    v.seconds_runs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (judge(&N)) break;
  }
  return v;
}

std::string element_report(const std::string& tensor, int64_t index, const ModelInputs& in,
                           const ModelOutputs<float>& K, const ModelOutputs<double>& O,
                           const ModelOutputs<float>& P,
                           const std::vector<ModelOutputs<double>>* ensemble) {
  for (const TensorSpec& t : result_catalogue(in.cfg, in.B, in.T)) {
    if (t.name != tensor) continue;
    if (index < 0 || index >= t.count)
      throw std::invalid_argument("element_report: index " + std::to_string(index) + " of " +
                                  tensor + " is outside [0, " + std::to_string(t.count) + ")");
    const size_t i = size_t(t.offset + index);
    const double o = field(O, t.field).at(i), k = field(K, t.field).at(i),
                 p = field(P, t.field).at(i);
    std::ostringstream os;
    os.precision(7);
    os << tensor << "[" << index << "]: O " << o << ", K " << k << " (K-O " << k - o << "), P "
       << p << " (P-O " << p - o << ")";
    if (ensemble && !ensemble->empty()) {
      double ss = 0;
      os << "; ensemble runs' errors";
      for (const ModelOutputs<double>& m : *ensemble) {
        const double e = field(m, t.field).at(i) - o;
        ss += e * e;
        os << " " << e;
      }
      const double sigma = std::sqrt(ss / double(ensemble->size()));
      os << ", their RMS " << sigma;
      if (sigma > 0) os << " (K-O " << (k - o) / sigma << " of it, P-O " << (p - o) / sigma << ")";
    }
    return os.str();
  }
  throw std::invalid_argument("element_report: no result tensor named '" + tensor + "'");
}

Comparison check_gpu_against_oracle(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                                    DType dtype, ScanMode scan, gpu::GemmMath gemm,
                                    bool check_finite, gpu::TypedGemm typed, int stat_runs,
                                    int baseline_runs) {
  const ModelInputs in = make_model_inputs(cfg, B, T, seed, dtype);
  const auto O = oracle_run<double>(in, DType::F32);
  const auto P = oracle_run<float>(in, dtype);
  const auto K = gpu_run(in, scan, gemm, check_finite, ScanExp::Auto, typed);
  const auto E = mca_ensemble(in, dtype, stat_runs, seed);
  const auto N = dtype == DType::F32 ? std::vector<ModelOutputs<double>>{}
                                     : conforming_runs(in, dtype, baseline_runs, seed);
  return compare_model(describe(cfg, B, T) + " dtype=" + to_string(dtype) +
                           " scan=" + to_string(scan) +
                           " gemm=" + to_string(gpu::gemm_tier(dtype, gemm, typed)),
                       in, K, O, P, stat_runs > 0 ? &E : nullptr, N.empty() ? nullptr : &N);
}

}  // namespace mc::check
