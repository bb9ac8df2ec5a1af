// step_testbed.hpp — the testbed of the step parity suite
// (validation/gpu/test_step_parity.cpp), in the manner of CUTLASS's Testbed
// and ggml's test_case. A case declares its tensors (inputs, outputs,
// in/out accumulators and states), each with its storage, then one oracle
// call and one kernel call; the testbed runs
//   O  the oracle (reference_cpu/steps.hpp) in double on the stored inputs,
//      nothing rounded;
//   P  the same oracle call in float on the same inputs, each typed output
//      rounded to the dtype where the kernel stores it (the same-precision
//      baseline);
//   M  check::kStatRuns Monte Carlo arithmetic runs of the same oracle call
//      (reference_cpu/mca_scalar.hpp: every operation and every typed store
//      randomly rounded), the ensemble of the statistical checks;
//   A  check::kAgreeRuns more such runs with round-to-nearest stores (typed only),
//   K  the kernel on the GPU,
// and checks every output against the rule of check/compare.hpp
//   max|K − O| <= k_limit · max|P − O| + 2 ulp(max|O|)
// (k_limit = kF32KLimit with f32 ulps for f32-stored outputs, kTypedKLimit
// with dtype ulps for typed ones; k printed and recorded as
// RecordProperty("k.<tensor>")), or bitwise K == P for exact steps (copies,
// casts, single roundings), or both. Every k-rule output also gets the
// statistical checks of check/stats.hpp against M (bias and magnitude bias in
// units of the ensemble's noise, RMS against its derived limit); it passes when
// both do (KRuleResult::verdict()). Every typed k-rule output also gets the
// storage agreement check (check::storage_agreement): K may differ from P, which
// rounds at the same storage points, at no more elements than check::kAgreeRuns
// Monte Carlo runs with round-to-nearest stores (A: conforming implementations
// that differ from P only in their f32 arithmetic) make plausible. It sees one
// typed rounding more or less, which the statistics above allow.
//
// Storage, the tag of a tensor's handle (so a launcher's pointer types check):
//   F32      float on the device, never rounded;
//   Typed    T on the device; an input is quantised to the dtype when it is
//            declared (K, O and P see identical values), an output is rounded
//            in P after the oracle call;
//   Rounded  float on the device holding dtype-rounded values (a GEMM result
//            with its bias added in f32 and rounded once): as Typed for P and
//            for the rule.
// With T = float all three are f32 and nothing is rounded.
//
// An output starts as NaN on the device (an element the kernel does not write
// fails) and as 0 in O and P; an in/out tensor (accumulated gradient, carried
// state) starts from its init values everywhere.
//
// MC_STEP_DRY_RUN=1: O, P and M run, K does not, and every check K would get is
// printed instead (the suite's full check list, on a machine without a GPU).
// The tests then report SKIPPED; ctest StepTestbed.HostSideDryRun (label cpu,
// in CI) runs the whole suite that way, so the host half is tested everywhere.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "check/compare.hpp"
#include "check/problem.hpp"
#include "check/stats.hpp"
#include "core/config.hpp"
#include "core/storage.hpp"
#include "gpu/device_buffer.hpp"
#include "gpu/device_context.hpp"
#include "gpu/gemm.hpp"
#include "gpu/model.hpp"
#include "reference_cpu/mca_scalar.hpp"
#include "validation/support/gpu_test.hpp"

namespace mc::testing {

// ---- storage types ----------------------------------------------------------------

template <class T>
struct StorageType;
template <>
struct StorageType<float> {
  static constexpr DType dtype = DType::F32;
};
template <>
struct StorageType<__nv_bfloat16> {
  static constexpr DType dtype = DType::BF16;
};
template <>
struct StorageType<__half> {
  static constexpr DType dtype = DType::F16;
};

// Host value -> device element, round-to-nearest-even (bit-exact for values
// already quantised to the dtype), and back.
template <class T>
T to_elem(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat16_raw r;
    r.x = f32_to_bf16_bits(x);
    return __nv_bfloat16(r);
  } else {
    __half_raw r;
    r.x = f32_to_f16_bits(x);
    return __half(r);
  }
}
inline float from_elem(float x) { return x; }
inline float from_elem(__nv_bfloat16 x) { return bf16_bits_to_f32(__nv_bfloat16_raw(x).x); }
inline float from_elem(__half x) { return f16_bits_to_f32(__half_raw(x).x); }

template <class T>
gpu::DeviceBuffer<T> upload_as(const std::vector<float>& host, const std::string& name,
                               cudaStream_t s) {
  std::vector<T> tmp(host.size());
  for (size_t i = 0; i < host.size(); ++i) tmp[i] = to_elem<T>(host[i]);
  gpu::DeviceBuffer<T> d(host.size(), name);
  d.upload(tmp.data(), tmp.size(), s);
  return d;
}

template <class T>
std::vector<float> download_as_f32(const gpu::DeviceBuffer<T>& d, cudaStream_t s) {
  std::vector<T> tmp(d.size());
  d.download(tmp.data(), tmp.size(), s);
  std::vector<float> out(tmp.size());
  for (size_t i = 0; i < tmp.size(); ++i) out[i] = from_elem(tmp[i]);
  return out;
}

// ---- inputs ---------------------------------------------------------------------------

// n values uniform in [lo, hi), f32-exact (SplitMix64 of check/problem.hpp).
inline std::vector<float> uniform(int64_t n, uint64_t seed, double lo, double hi) {
  check::SplitMix64 r(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = float(r.uniform(lo, hi));
  return v;
}

// "R19D17" from {{"R", 19}, {"D", 17}}: the shape part of a tensor's name.
inline std::string shape_tag(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::ostringstream os;
  for (const auto& [k, v] : dims) os << k << v;
  return os.str();
}

inline bool step_dry_run() {
  const char* e = std::getenv("MC_STEP_DRY_RUN");
  return e && *e && std::string(e) != "0";
}

// ---- the testbed --------------------------------------------------------------------------

struct F32 {};
struct Typed {};
struct Rounded {};

enum class Check { KRule, Bitwise, KRuleAndBitwise };

struct TensorId {
  size_t id = 0;
};
template <class Tag>
struct Tensor : TensorId {};

// The oracle's view (S = double for O, float for P): h[t] is the tensor's
// buffer; h.round(t) rounds it now in P (a typed value a later step of the
// same call reads back rounded); O and the f32 P never round.
template <class S>
class HostSide {
 public:
  HostSide(std::vector<std::vector<S>>& bufs, DType q) : bufs_(bufs), q_(q) {}
  S* operator[](TensorId t) { return bufs_[t.id].data(); }
  S* null() const { return nullptr; }  // an absent optional argument (S deduced as for h[t])
  // A typed store of an intermediate value: none in O and the f32 P, round to
  // nearest in a typed P, one random rounding in an ensemble run.
  S q(S x) const { return q_ == DType::F32 ? x : round_to(q_, x); }
  template <class Tag>
  void round(Tensor<Tag> t) {
    if (std::is_same_v<Tag, F32> || q_ == DType::F32) return;
    for (S& x : bufs_[t.id]) x = round_to(q_, x);
  }

 private:
  std::vector<std::vector<S>>& bufs_;
  DType q_;
};

template <class T>
class StepTestbed {
 public:
  static constexpr DType kDType = StorageType<T>::dtype;

  // The kernel's view: d[t] is the device pointer (float* or T*), d.s the stream.
  struct DeviceSide {
    StepTestbed* tb;
    cudaStream_t s;
    float* operator[](Tensor<F32> t) const { return tb->rec(t).f.get(); }
    float* operator[](Tensor<Rounded> t) const { return tb->rec(t).f.get(); }
    T* operator[](Tensor<Typed> t) const { return tb->rec(t).t.get(); }
  };

  // label: the shape part of every tensor name ("" for none).
  StepTestbed(cudaStream_t stream, std::string label) : s_(stream), label_(std::move(label)) {}

  // Inputs (the values as stored: quantised for Typed).
  Tensor<F32> in(const std::string& name, std::vector<float> v) {
    return add<F32>(name, std::move(v), false, Check::KRule);
  }
  Tensor<Typed> in_typed(const std::string& name, std::vector<float> v) {
    return add<Typed>(name, std::move(v), false, Check::KRule);
  }
  // Outputs (written with =) and in/out tensors (+= or updated in place).
  Tensor<F32> out(const std::string& name, int64_t n, Check c = Check::KRule) {
    return add<F32>(name, std::vector<float>(size_t(n)), true, c, /*nan=*/true);
  }
  Tensor<Typed> out_typed(const std::string& name, int64_t n, Check c = Check::KRule) {
    return add<Typed>(name, std::vector<float>(size_t(n)), true, c, true);
  }
  Tensor<Rounded> out_rounded(const std::string& name, int64_t n, Check c = Check::KRule) {
    return add<Rounded>(name, std::vector<float>(size_t(n)), true, c, true);
  }
  Tensor<F32> inout(const std::string& name, std::vector<float> init, Check c = Check::KRule) {
    return add<F32>(name, std::move(init), true, c);
  }
  Tensor<Typed> inout_typed(const std::string& name, std::vector<float> init,
                            Check c = Check::KRule) {
    return add<Typed>(name, std::move(init), true, c);
  }

  // v rounded to the dtype (for host-side precomputation of inputs).
  std::vector<float> quantised(std::vector<float> v) const {
    for (float& x : v) x = round_to(kDType, x);
    return v;
  }
  // Device scratch of n floats, owned by the testbed (nullptr in a dry run).
  float* scratch(size_t n) {
    if (step_dry_run()) return nullptr;
    scratch_.emplace_back(n, "scratch");
    return scratch_.back().get();
  }

  const std::string& label() const { return label_; }
  const std::vector<float>& host(TensorId t) const { return recs_[t.id].init; }
  const std::vector<float>& P(TensorId t) const { return recs_[t.id].P; }
  const std::vector<float>& K(TensorId t) const { return recs_[t.id].K; }
  std::string name(TensorId t) const {
    const Rec& r = recs_[t.id];
    return (kDType == DType::F32 ? "" : std::string(to_string(kDType)) + ".") + r.name +
           (label_.empty() ? "" : "." + label_);
  }

  // O, P, K and every output's check. oracle(h) and kernel(d) are generic lambdas.
  template <class Oracle, class Kernel>
  void run(Oracle&& oracle, Kernel&& kernel) {
    std::vector<std::vector<double>> o(recs_.size());
    std::vector<std::vector<float>> p(recs_.size());
    for (size_t i = 0; i < recs_.size(); ++i) {
      const Rec& r = recs_[i];
      p[i] = r.nan ? std::vector<float>(r.init.size(), 0.0f) : r.init;
      o[i].assign(p[i].begin(), p[i].end());
    }
    HostSide<double> ho(o, DType::F32);
    oracle(ho);
    HostSide<float> hp(p, kDType);
    oracle(hp);
    std::vector<std::vector<std::vector<double>>> m = mca_runs(oracle, 0, check::kStatRuns);
    std::vector<std::vector<std::vector<double>>> a;  // the agreement runs (typed outputs only)
    if (std::any_of(recs_.begin(), recs_.end(), agreement_checked)) {
      const ref::ScopedMcaStore nearest(ref::McaStore::Nearest);
      a = mca_runs(oracle, check::kStatRuns, check::kAgreeRuns);
    }
    for (size_t i = 0; i < recs_.size(); ++i) {
      Rec& r = recs_[i];
      if (!r.output) continue;
      r.A.clear();
      if (agreement_checked(r))
        for (auto& run : a) r.A.push_back(std::move(run[i]));
      r.O = std::move(o[i]);
      r.P = std::move(p[i]);
      if (r.rounded) r.P = quantised(std::move(r.P));
      r.M.clear();
      for (auto& run : m) r.M.push_back(std::move(run[i]));
    }
    if (step_dry_run()) {
      for (size_t i = 0; i < recs_.size(); ++i)
        if (recs_[i].output) std::cout << "  [dry run] " << describe(i) << "\n";
      return;
    }
    launch(kernel);
    for (size_t i = 0; i < recs_.size(); ++i) {
      Rec& r = recs_[i];
      if (!r.output) continue;
      r.K = download(r);
      const std::string n = name(TensorId{i});
      if (r.check != Check::Bitwise) {
        const bool typed = r.rounded && kDType != DType::F32;
        auto res = check::k_rule(n, r.K, r.O, r.P, typed ? kDType : DType::F32,
                                 typed ? check::kTypedKLimit : check::kF32KLimit);
        std::vector<const double*> runs;
        for (const auto& mr : r.M) runs.push_back(mr.data());
        res.stats = check::stat_check(r.K.data(), r.O.data(), r.P.data(), runs,
                                      int64_t(r.K.size()));
        if (!r.stats_note.empty()) {
          res.stats.enforced = false;
          res.stats.note = r.stats_note;
        }
        std::cout << "  " << res.summary() << "\n";
        ::testing::Test::RecordProperty("k." + n, std::to_string(res.k));
        ::testing::Test::RecordProperty("k_rms." + n, std::to_string(res.stats.k_rms));
        EXPECT_TRUE(res.verdict()) << res.summary();
      }
      if (agreement_checked(r)) {
        const check::AgreeResult ag = agreement_of(r, r.K);
        std::cout << "  " << n << ag.summary() << "\n";
        ::testing::Test::RecordProperty("agree." + n, std::to_string(ag.mismatches));
        EXPECT_TRUE(ag.ok()) << n << ": the kernel's typed stores differ from P's (the same "
                             << "storage points) at more elements than a conforming f32 "
                             << "implementation would" << ag.summary();
      }
      if (r.check != Check::KRule) expect_same(n + " (bitwise P, the same roundings)", r.K, r.P);
    }
  }

  // The kernel call `kernel` (another variant, or the same launch again) from
  // the same inputs and output start values gives the same bits in `outputs`
  // as the first run.
  template <class Kernel>
  void rerun(const std::string& what, Kernel&& kernel, std::initializer_list<TensorId> outputs) {
    if (step_dry_run()) {
      for (TensorId t : outputs)
        std::cout << "  [dry run] " << name(t) << ": " << what << ": bitwise the first run\n";
      return;
    }
    launch(kernel);
    for (TensorId t : outputs)
      expect_same(name(t) + " (" + what + ", bitwise the first run)", download(recs_[t.id]),
                  recs_[t.id].K);
  }

  // Output `t`'s statistics are printed and recorded but not enforced, for a
  // kernel outside the ensemble's accuracy class by design (`why` is printed with
  // them); its k-rule still holds.
  void stats_outside_class(TensorId t, const std::string& why) { recs_[t.id].stats_note = why; }

  // A property of K's `t` (after run) that the rule does not cover.
  void expect_K(TensorId t, const std::string& what,
                const std::function<bool(const std::vector<float>&)>& holds) {
    if (step_dry_run()) {
      std::cout << "  [dry run] " << name(t) << ": " << what << "\n";
      return;
    }
    EXPECT_TRUE(holds(recs_[t.id].K)) << name(t) << ": " << what;
  }

 private:
  struct Rec {
    std::string name;
    bool typed_buffer = false, rounded = false, output = false, nan = false;
    Check check = Check::KRule;
    std::string stats_note;  // non-empty: statistics reported, not enforced (why)
    std::vector<float> init, P, K;
    std::vector<double> O;
    std::vector<std::vector<double>> M;  // the ensemble runs (outputs)
    std::vector<std::vector<double>> A;  // the storage agreement runs (typed k-rule outputs)
    gpu::DeviceBuffer<float> f;
    gpu::DeviceBuffer<T> t;
  };

  template <class Tag>
  Tensor<Tag> add(const std::string& name, std::vector<float> v, bool output, Check c,
                  bool nan = false) {
    Rec r;
    r.name = name;
    r.typed_buffer = std::is_same_v<Tag, Typed>;
    r.rounded = !std::is_same_v<Tag, F32>;
    r.output = output;
    r.nan = nan;
    r.check = c;
    r.init = r.rounded ? quantised(std::move(v)) : std::move(v);
    recs_.push_back(std::move(r));
    Tensor<Tag> h;
    h.id = recs_.size() - 1;
    return h;
  }
  Rec& rec(TensorId t) { return recs_[t.id]; }

  std::string describe(size_t i) const {
    const Rec& r = recs_[i];
    const bool typed = r.rounded && kDType != DType::F32;
    std::ostringstream os;
    os << name(TensorId{i}) << ": " << r.init.size() << " elements, "
       << (r.typed_buffer ? to_string(kDType) : "f32") << " storage"
       << (r.nan ? "" : ", from init values");
    if (r.check != Check::Bitwise) {
      double ep = 0, om = 0;
      for (size_t j = 0; j < r.O.size(); ++j) {
        ep = std::max(ep, std::fabs(double(r.P[j]) - r.O[j]));
        om = std::max(om, std::fabs(r.O[j]));
      }
      os << "; k-rule k <= " << (typed ? check::kTypedKLimit : check::kF32KLimit) << " in "
         << (typed ? to_string(kDType) : "f32") << " ulps (max|P-O| " << ep << ", max|O| " << om
         << ")";
    }
    if (agreement_checked(r)) {
      const check::AgreeResult ag = agreement_of(r, r.P);  // K = P: only the limit is read
      os << "; storage agreement K != P at <= " << ag.limit << " elements (runs "
         << double(ag.run_mismatches) / ag.runs << " each)";
    }
    if (r.check != Check::KRule) os << "; bitwise K == P";
    return os.str();
  }

  // A typed output judged by a k-rule gets the storage agreement check (a bitwise
  // one is already held to K == P).
  static bool agreement_checked(const Rec& r) {
    return r.output && r.rounded && kDType != DType::F32 && r.check == Check::KRule;
  }
  // The storage agreement of output r's stored values K against its P and its runs A.
  static check::AgreeResult agreement_of(const Rec& r, const std::vector<float>& K) {
    std::vector<const double*> runs;
    for (const auto& ar : r.A) runs.push_back(ar.data());
    return check::storage_agreement(K.data(), r.P.data(), runs, int64_t(K.size()));
  }
  // Runs first .. first+count-1 of the oracle call in Monte Carlo arithmetic (stores
  // as ref::mca_store_mode() says), every tensor as double, typed ones through the
  // dtype's store: [run][tensor].
  template <class Oracle>
  std::vector<std::vector<std::vector<double>>> mca_runs(Oracle& oracle, int first,
                                                         int count) const {
    std::vector<std::vector<std::vector<double>>> runs(static_cast<size_t>(count));
    for (int k = 0; k < count; ++k) {
      std::vector<std::vector<ref::Mca>> mk(recs_.size());
      for (size_t i = 0; i < recs_.size(); ++i) {
        const std::vector<float> start = o_start(i);  // one copy: both iterators must be its
        mk[i].assign(start.begin(), start.end());
      }
      seed_mca(first + k);
      HostSide<ref::Mca> hm(mk, kDType);
      oracle(hm);
      runs[size_t(k)].resize(recs_.size());
      for (size_t i = 0; i < recs_.size(); ++i) {
        const bool typed_store = recs_[i].rounded && kDType != DType::F32;
        auto& out = runs[size_t(k)][i];
        out.reserve(mk[i].size());
        for (const ref::Mca& x : mk[i]) out.push_back(double(typed_store ? round_to(kDType, x) : x));
      }
    }
    return runs;
  }

  // A tensor's start values on the host side: its init values, 0 for an output.
  std::vector<float> o_start(size_t i) const {
    const Rec& r = recs_[i];
    return r.nan ? std::vector<float>(r.init.size(), 0.0f) : r.init;
  }
  // Ensemble run k: every OpenMP thread's stream seeded from (label, run, thread),
  // so a run is reproducible for a fixed OMP_NUM_THREADS.
  void seed_mca(int k) const {
    const uint64_t base = std::hash<std::string>{}(label_) ^ 0x5851f42d4c957f2dULL;
    check::seed_mca(base, k);
  }

  // Inputs and in/out tensors from their values, outputs NaN; then the kernel.
  template <class Kernel>
  void launch(Kernel& kernel) {
    for (Rec& r : recs_) {
      const std::vector<float> start =
          r.nan ? std::vector<float>(r.init.size(), std::numeric_limits<float>::quiet_NaN())
                : r.init;
      if (r.typed_buffer)
        r.t = upload_as<T>(start, r.name, s_);
      else
        r.f = upload_as<float>(start, r.name, s_);
    }
    DeviceSide d{this, s_};
    kernel(d);
  }
  std::vector<float> download(const Rec& r) const {
    return r.typed_buffer ? download_as_f32(r.t, s_) : download_as_f32(r.f, s_);
  }
  static void expect_same(const std::string& what, const std::vector<float>& a,
                          const std::vector<float>& b) {
    ASSERT_EQ(a.size(), b.size()) << what;
    const auto d = check::first_bit_difference(a.data(), b.data(), int64_t(a.size()));
    EXPECT_EQ(d.index, -1) << what << ": first difference at " << d.index << ": " << d.a << " vs "
                           << d.b << " (" << d.ulp << " ulp)";
  }

  cudaStream_t s_;
  std::string label_;
  std::vector<Rec> recs_;
  std::vector<gpu::DeviceBuffer<float>> scratch_;
};

// The message of the ConfigError f throws ("" if it throws none): refusal tests.
inline std::string config_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// ---- the fixture ----------------------------------------------------------------------------

// GPU fixture of the typed step suites: skips without a device (GpuTest),
// except in a dry run, which never touches the GPU and reports SKIPPED at the end.
template <class T>
class StepTest : public GpuTest {
 protected:
  void SetUp() override {
    if (step_dry_run()) return;
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(gpu::default_device(), gpu::GemmMath::F32,
                                                fixture_cublas_workspace_bytes());
  }
  // The workspace a default Model of this storage type holds (gpu::cublas_workspace_bytes,
  // its one resolution: 4 MiB for bf16/f16, 32 MiB for f32), so that the step suites' GEMMs
  // pick the kernels a default Model's GEMMs pick.
  static size_t fixture_cublas_workspace_bytes() {
    gpu::RunOptions opt;
    opt.dtype = StorageType<T>::dtype;
    return gpu::cublas_workspace_bytes(opt);
  }
  void TearDown() override {
    if (step_dry_run()) GTEST_SKIP() << "MC_STEP_DRY_RUN: O and P ran, the kernels did not";
  }
  // In a dry run: prints what a hand-written check would test and returns true.
  bool dry_run(const std::string& what) const {
    if (step_dry_run()) std::cout << "  [dry run] " << what << "\n";
    return step_dry_run();
  }
  cudaStream_t stream() const { return ctx_ ? ctx_->stream() : nullptr; }
  StepTestbed<T> bed(std::string label) const { return StepTestbed<T>(stream(), std::move(label)); }
  // True GEMMs (GemmMath::F32) on the fixture's cuBLAS handle. Its workspace is a default
  // Model's of this storage type (fixture_cublas_workspace_bytes: the tensor-core tier's for
  // bf16/f16, the strict tier's for f32); a GEMM of the other tier runs with it too.
  gpu::Gemm gemm(gpu::TypedGemm typed = gpu::TypedGemm::TensorCore) const {
    return gpu::Gemm(ctx_ ? ctx_->cublas() : nullptr, gpu::GemmMath::F32, typed);
  }

  std::unique_ptr<gpu::DeviceContext> ctx_;
};

// The storage types of a typed step suite: gtest names StepParity/0 (f32), /1 (bf16), /2 (f16);
// CTest names StepParity.<test><float>, <__nv_bfloat16>, <__half> (a custom gtest name
// generator would defeat CMake's type-name parsing).
using StorageTypes = ::testing::Types<float, __nv_bfloat16, __half>;

}  // namespace mc::testing
