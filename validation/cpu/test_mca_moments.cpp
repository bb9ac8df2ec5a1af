// ctest-labels: cpu
// test_mca_moments.cpp — the Monte Carlo ensemble with its GEMMs drawn by their
// moments (ref::McaGemm::Moments, reference_cpu/mca_scalar.hpp) belongs to the class
// of the per-operation ensemble, through the whole oracle: every output, final state
// and gradient of a one-layer model, forward and backward, in f32 and bf16 storage.
//
// The statistics of check/stats.hpp are derived under the hypothesis that a kernel's
// error field has the law of one more ensemble run (docs/precision-statistics.md).
// Here the "kernel" is a moments-mode run and the ensemble the per-operation runs, so
// every statistic of every tensor must pass: a moments run that were noisier or
// quieter than the per-operation model (a missing variance term, a wrong scale), or
// biased, fails the RMS or bias statistic. The GEMM-level law, output by output with
// limits at 6 standard deviations and a control that a missing term is seen, is
// OracleGemm.McaMomentsHaveThePerOperationLaw (test_oracle_gemm.cpp); this suite checks
// that the mode is wired through the oracle's Linear steps as that test assumes.
//
// Shape: d_model 64 and B·T = 128 rows, so that every GEMM of the step but dt_proj
// (K = dt_rank = 4, below kMcaMomentsMinTerms: the per-operation tile in both modes)
// sums at least 64 terms and takes the moments tile.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "check/catalogue.hpp"
#include "check/model_check.hpp"
#include "check/stats.hpp"
#include "core/config.hpp"
#include "reference_cpu/mca_scalar.hpp"
#include "validation/support/oracle_test_support.hpp"

namespace mc::testing {
namespace {

const bool kThreads = single_thread_unless_asked();

ModelConfig small_model() {
  ModelConfig c;
  c.d_model = 64;
  c.d_state = 16;
  c.d_conv = 4;
  c.expand = 2;
  c.n_layers = 1;
  c.input_dim = 64;
  return c;
}

constexpr int64_t kB = 2, kT = 64;
constexpr int kMomentsRuns = 3;

void check_moments_runs_in_class(DType dtype, uint64_t seed) {
  const ModelConfig cfg = small_model();
  const check::ModelInputs in = check::make_model_inputs(cfg, kB, kT, seed, dtype);
  const auto O = check::oracle_run<double>(in, DType::F32);
  const auto P = check::oracle_run<float>(in, dtype);
  const auto per_op = check::mca_ensemble(in, dtype, check::kStatRuns, seed);
  const auto moments = [&] {
    const ref::ScopedMcaGemm mode(ref::McaGemm::Moments);
    return check::mca_ensemble(in, dtype, kMomentsRuns, seed + 0x51ed27);
  }();
  int checked = 0;
  for (const check::TensorSpec& t : check::result_catalogue(cfg, kB, kT)) {
    std::vector<const double*> ens;
    for (const auto& m : per_op) ens.push_back(check::field(m, t.field).data() + t.offset);
    const double* o = check::field(O, t.field).data() + t.offset;
    const float* p = check::field(P, t.field).data() + t.offset;
    for (int r = 0; r < kMomentsRuns; ++r) {
      const double* k = check::field(moments[size_t(r)], t.field).data() + t.offset;
      const check::StatResult s = check::stat_check(k, o, p, ens, t.count);
      if (!s.computed) continue;
      ++checked;
      EXPECT_TRUE(s.pass) << to_string(dtype) << " " << t.name << ", moments run " << r << ":"
                          << s.summary();
      if (r == 0)
        std::cout << "  " << to_string(dtype) << " " << t.name << " (n " << t.count
                  << "): rms of a moments run / the per-operation runs' = " << s.rho
                  << " (limit " << s.rho_limit << "), z_bias " << s.z_bias << "\n";
    }
  }
  // Every tensor of the catalogue was judged (none too small for the statistics).
  EXPECT_EQ(checked, int(check::result_catalogue(cfg, kB, kT).size()) * kMomentsRuns);
}

TEST(McaMoments, ModelRunsAreInThePerOperationClassF32) {
  check_moments_runs_in_class(DType::F32, 11);
}
TEST(McaMoments, ModelRunsAreInThePerOperationClassBf16) {
  check_moments_runs_in_class(DType::BF16, 12);
}

}  // namespace
}  // namespace mc::testing
