// precision_harness.hpp — the shared part of the mixed-precision (bf16/f16)
// suites, test_precision.cpp (rapidcheck shapes) and
// test_precision_model.cpp (model-like shapes). One case = one problem in one
// dtype: the inputs are quantised to the dtype (make_model_inputs), the f64
// oracle O, the same-precision float baseline P (Storage rounding at the
// GPU's typed storage points) and an ensemble of check::kStatRuns Monte Carlo
// arithmetic runs of the same oracle (check::mca_ensemble) run ONCE, the GPU
// pipeline K runs once per scan
// mode (with check_finite, so a NaN/Inf is reported with its step, tensor and
// index instead of as a precision failure), and every output, final state
// and gradient tensor is compared with the k-rule of compare.hpp:
//     max|K-O| <= kTypedKLimit (= 2) * max|P-O| + 2 ulp_dtype(max|O|),
// and the statistical checks of check/stats.hpp (bias and magnitude bias in
// units of the ensemble's noise, k_rms against its derived limit;
// docs/precision-statistics.md). k, max abs, max rel (floor 1e-3 max|O|), NMSE and the ULP distance in the
// dtype are reported per tensor; the largest k per tensor FAMILY (out,
// conv_final, ssm_final, grad.input, grad.conv0, grad.ssm0, grad.<param kind>, the
// layer index dropped) is printed as a table and recorded (RecordProperty).
//
// JSON: with MAMBACHECK_PRECISION_JSON=<path> every compared tensor becomes
// one "precision" row (reports/README.md schema, context from
// report_json.hpp) of that one file. ctest runs every test in its own
// process, so each test MERGES its rows at its end (report::
// merge_validation_rows: file lock, rows keyed by "<Suite>.<Test>|dtype|
// shape|scan|seed|tensor"; a rerun of a test replaces that test's rows and
// keeps the others'). Use a fresh path per session.
//
// GEMM tier: the GPU runs on the default tiers (f32 strict; bf16/f16 on tensor
// cores with f32 accumulation, gpu/model.hpp), or on the bf16/f16 tier that
// MAMBACHECK_TYPED_GEMM names (tensor-core | strict). Every row and the
// context name the tier.
//
// Header only: it uses gtest, and each GPU suite is its own executable.
#pragma once

#include <gtest/gtest.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "validation/support/family_table.hpp"
#include "core/config.hpp"
#include "validation/support/gpu_test.hpp"
#include "check/model_check.hpp"
#include "gpu/model.hpp"
#include "check/report_json.hpp"

namespace mc::testing {

// ---- GEMM tier ----------------------------------------------------------------------

// The GEMM tier of this process's GPU runs of `dtype` (bf16/f16: MAMBACHECK_TYPED_GEMM,
// typed_gemm_from_env in gpu_test.hpp).
inline gpu::GemmTier precision_tier(DType dtype) {
  return gpu::gemm_tier(dtype, gpu::GemmMath::F32, typed_gemm_from_env());
}

// ---- JSON rows of this process --------------------------------------------------

class PrecisionJson {
 public:
  static PrecisionJson& instance() {
    static PrecisionJson j;
    return j;
  }
  static const char* env() { return std::getenv("MAMBACHECK_PRECISION_JSON"); }
  static bool enabled() { return env() && *env(); }

  void add(const check::Comparison& c, DType dtype, const std::string& shape, ScanMode scan,
           uint64_t seed) {
    if (!enabled()) return;
    const std::string test = current_test_name();
    const std::string seed_s = std::to_string(seed);  // unsigned 64-bit
    const std::string tier = to_string(precision_tier(dtype));
    for (const check::KRuleResult& r : c.tensors) {
      const std::string id = test + "|" + to_string(dtype) + "|" + shape + "|" +
                             to_string(scan) + "|" + tier + "|" + seed_s + "|" + r.tensor;
      std::vector<std::pair<std::string, std::string>> extra = {
          {"scan", report::json_string(to_string(scan))},
          {"gemm_tier", report::json_string(tier)},
          {"seed", seed_s},
          {"suite", report::json_string(test)},
          {"baseline_from", report::json_string(r.baseline_source)},  // "P" or a conforming run
          {"k_P", report::json_number(r.k_P < 0 ? r.k : r.k_P)}};  // k against P alone (as validate)
      if (r.stats.computed) {  // the statistical checks (check/stats.hpp)
        const check::StatResult& st = r.stats;
        extra.insert(extra.end(), {{"z_bias", report::json_number(st.z_bias)},
                                   {"z_mag", report::json_number(st.z_mag)},
                                   {"z_limit", report::json_number(st.z_limit)},
                                   {"k_rms", report::json_number(st.k_rms)},
                                   {"k_rms_limit", report::json_number(st.k_rms_limit)},
                                   {"stat_runs", std::to_string(st.runs)},
                                   {"stat_pass", report::json_bool(st.pass)},
                                   {"stat_failed", report::json_string(st.failed)}});
      }
      rows_.push_back(report::with_id(
          id, report::precision_row_json(to_string(dtype), shape, r, extra)));
    }
  }

  // Merges this test's rows (if any) into the file and clears them. Called
  // from TearDown.
  void flush() {
    if (!enabled() || rows_.empty()) return;
    const std::string path = env();
    const std::string context = report::context_json(
        "validation/gpu precision suites (test_precision, test_precision_model)",
        gpu::gpu_available(),
        {{"f32_gemm", report::json_string("f32")},
         {"gemm_tier", report::json_string(gpu::describe(precision_tier(DType::BF16)))},
         {"k_limit", report::json_number(check::kTypedKLimit)},
         {"stat_alpha", report::json_number(check::kStatAlpha)},
         {"check_finite", report::json_bool(true)}},
        gpu::default_device());
    report::merge_validation_rows(path, context, "precision", current_test_name() + "|", rows_);
    std::cout << "precision JSON: " << rows_.size() << " rows of " << current_test_name()
              << " merged into " << path << "\n";
    rows_.clear();
  }

 private:
  static std::string current_test_name() {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    return t ? std::string(t->test_suite_name()) + "." + t->name() : "unknown";
  }
  std::vector<std::string> rows_;
};

// GPU fixture of the precision suites: skips without a device (GpuTest) and
// writes the JSON rows of the test when MAMBACHECK_PRECISION_JSON is set.
class PrecisionTest : public GpuTest {
 protected:
  void TearDown() override { PrecisionJson::instance().flush(); }
};

// Keeps the heap's freed memory in the process for reuse (glibc: no mmap'd chunks,
// no trimming). The oracle allocates, value-initialises and frees buffers of up to
// B·(T+1)·d_inner·d_state values per step, and a case runs it six times (O, P, the
// ensemble); with glibc's defaults each such buffer is a fresh mmap whose pages the
// kernel faults in and zeroes one by one, serially, under the value-initialisation's
// memset. Reusing the pages removes most of that: on the 2-core build machine
// (d_model 2048, B 8, T 128, bf16; O, P and four moments-mode Monte Carlo runs, as a
// case of test_precision_model.cpp runs them) 53.9 and 46.3 s with glibc's defaults
// against 37.2 and 39.4 s with the heap kept, at the same peak resident memory
// (3.9 GB). The peak of a case is its largest run's either way.
// Process-wide; for the suites whose CPU oracle runs at model sizes.
inline void retain_freed_heap_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#endif
}

// ---- one case ---------------------------------------------------------------------

// The comparisons of one (problem, dtype): one per scan mode, or an error
// (a NonFiniteError from check_finite) that says where the first NaN/Inf is.
struct PrecisionCase {
  std::string shape;                     // describe(cfg, B, T)
  DType dtype = DType::BF16;
  std::vector<ScanMode> scans;
  std::vector<check::Comparison> comparisons;  // parallel to scans (up to the error)
  std::string error;                     // non-empty: a GPU run hit a NaN/Inf
  double seconds_O = 0, seconds_P = 0, seconds_M = 0, seconds_K = 0;
  // With lazy_baseline_runs (run_precision_case): the conforming runs the typed rule
  // needed (0 where every tensor passed against P alone), their wall time, and the
  // tensors that failed against P alone: their P-only lines and worst elements.
  int lazy_runs = 0;
  double seconds_lazy = 0;
  std::string p_only_failures;

  bool pass() const {
    if (!error.empty() || comparisons.size() != scans.size()) return false;
    for (const auto& c : comparisons)
      if (!c.pass()) return false;
    return !comparisons.empty();
  }
  double max_k() const {
    double k = 0;
    for (const auto& c : comparisons) k = std::max(k, c.max_k());
    return k;
  }
  // The tensor closest to failing, over the scan modes.
  std::string worst() const {
    const check::KRuleResult* w = nullptr;
    std::string scan;
    for (size_t i = 0; i < comparisons.size(); ++i)
      for (const auto& r : comparisons[i].tensors)
        if (!w || !(r.headroom <= w->headroom)) {
          w = &r;
          scan = to_string(scans[i]);
        }
    if (!w) return "(no tensors)";
    std::ostringstream os;
    os << "worst " << w->tensor << " (" << scan << ") k=" << w->k << " headroom=" << w->headroom;
    return os.str();
  }
  std::string failures() const {
    std::string s = error.empty() ? "" : error + "\n";
    for (const auto& c : comparisons) s += c.report(/*failures_only=*/true);
    return s;
  }
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// O and P once, then K and the comparison per scan mode (check_finite on).
// Rows go to the JSON collector; nothing is asserted here.
// stat_runs: the ensemble size of the statistical checks (0: none); baseline_runs:
// the conforming runs of the rule's baseline, computed up front (check::conforming_runs;
// 0: P alone); lazy_baseline_runs (with baseline_runs = 0): the same typed rule, its
// runs computed one at a time and only while some tensor fails against P and the runs
// so far (check::compare_models_lazy_baseline: the verdicts of the eager rule with that
// many runs, at no cost where P alone passes). With it the tensors that failed against P
// alone are kept in pc.p_only_failures, each with its worst element as O, K, P and the
// statistics' ensemble have it (check::element_report).
inline PrecisionCase run_precision_case(const ModelConfig& cfg, int64_t B, int64_t T,
                                        uint64_t seed, DType dtype,
                                        const std::vector<ScanMode>& scans,
                                        int stat_runs = check::kStatRuns,
                                        int baseline_runs = check::kTypedBaselineRuns,
                                        int lazy_baseline_runs = 0) {
  PrecisionCase pc;
  pc.shape = check::describe(cfg, B, T);
  pc.dtype = dtype;
  pc.scans = scans;
  const check::ModelInputs in = check::make_model_inputs(cfg, B, T, seed, dtype);
  auto t0 = std::chrono::steady_clock::now();
  const check::ModelOutputs<double> O = check::oracle_run<double>(in, DType::F32);
  pc.seconds_O = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const check::ModelOutputs<float> P = check::oracle_run<float>(in, dtype);
  pc.seconds_P = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const std::vector<check::ModelOutputs<double>> M =
      check::mca_ensemble(in, dtype, stat_runs, seed);
  const std::vector<check::ModelOutputs<double>> N =
      check::conforming_runs(in, dtype, baseline_runs, seed);
  pc.seconds_M = seconds_since(t0);
  std::vector<check::ModelOutputs<float>> Ks;
  std::vector<std::string> labels;
  for (ScanMode m : scans) {
    t0 = std::chrono::steady_clock::now();
    try {
      Ks.push_back(check::gpu_run(in, m, gpu::GemmMath::F32, /*check_finite=*/true,
                                  ScanExp::Auto, typed_gemm_from_env()));
    } catch (const gpu::NonFiniteError& e) {
      pc.error = std::string(e.overflow ? "f16 OVERFLOW" : "NON-FINITE") + " (" + pc.shape +
                 " dtype=" + to_string(dtype) + " scan=" + to_string(m) +
                 " gemm=" + to_string(precision_tier(dtype)) + ") at step '" + e.step +
                 "', tensor '" + e.tensor + "', index " + std::to_string(e.index) + ": " + e.what();
      break;
    }
    pc.seconds_K += seconds_since(t0);
    labels.push_back(pc.shape + " dtype=" + to_string(dtype) + " scan=" + to_string(m) +
                     " gemm=" + to_string(precision_tier(dtype)));
  }
  const std::vector<check::ModelOutputs<double>>* ens = stat_runs > 0 ? &M : nullptr;
  if (lazy_baseline_runs > 0 && baseline_runs == 0) {
    check::TypedVerdicts v =
        check::compare_models_lazy_baseline(labels, in, Ks, O, P, ens, lazy_baseline_runs, seed);
    std::ostringstream os;  // what exceeded the rule against P alone, with its worst element
    for (size_t i = 0; i < v.p_only.size(); ++i)
      for (const check::KRuleResult& r : v.p_only[i].tensors)
        if (!r.pass) {
          os << "  " << v.p_only[i].label << " | " << r.summary() << "\n";
          if (r.kernel.argmax_abs >= 0)
            os << "    " << check::element_report(r.tensor, r.kernel.argmax_abs, in, Ks[i], O, P, ens)
               << "\n";
        }
    pc.p_only_failures = os.str();
    pc.lazy_runs = v.runs;
    pc.seconds_lazy = v.seconds_runs;
    pc.comparisons = std::move(v.comparisons);
  } else {
    for (size_t i = 0; i < Ks.size(); ++i)
      pc.comparisons.push_back(check::compare_model(labels[i], in, Ks[i], O, P, ens,
                                                    baseline_runs > 0 ? &N : nullptr));
  }
  for (size_t i = 0; i < pc.comparisons.size(); ++i)
    PrecisionJson::instance().add(pc.comparisons[i], dtype, pc.shape, scans[i], seed);
  return pc;
}

}  // namespace mc::testing
