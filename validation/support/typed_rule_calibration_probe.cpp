// typed_rule_calibration_probe.cpp — the typed k-rule's baseline at a model-like shape,
// judged with stand-ins that are exactly as accurate as P by construction (conforming
// runs of the oracle with other seeds, check::conforming_runs): for each stand-in, its
// verdict and largest k against P alone and against P and the conforming runs, and its
// line for every tensor with k > 1.5 against P alone or named by --tensor. The same
// computation as validation/cpu/test_typed_rule_calibration.cpp, at sizes too large
// for CI; the model-shape suite's ensemble GEMM (moments) is used, as there.
// CPU only. Written for F16DModel2048's d_param failure (docs/performance-notes.md,
// "2026-12-05, seventh session"), whose tables it reproduces:
//   typed_rule_calibration_probe 2048 8 256 f16 8 6 20260415
//   typed_rule_calibration_probe 2048 8 1024 f16 8 4 20260415
// (d_model, B, T, dtype, conforming runs, stand-ins, seed; d_state 16, d_conv 4,
// expand 2, one layer, input_dim = d_model; OMP_NUM_THREADS sets the threads and, with
// the seed, the Monte Carlo draws).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "check/model_check.hpp"
#include "reference_cpu/mca_scalar.hpp"
#include "validation/support/typed_rule_stand_ins.hpp"

namespace {

using mc::check::ModelOutputs;

long parse_positive(const char* field, const char* text, long limit) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (!end || *end || v < 1 || v > limit)
    throw std::invalid_argument(std::string(field) + " '" + text + "' is not an integer in [1, " +
                                std::to_string(limit) + "]");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr,
                 "usage: %s d_model B T bf16|f16 conforming_runs stand_ins seed [--tensor NAME]\n",
                 argv[0]);
    return 2;
  }
  try {
    mc::ModelConfig c;
    c.d_model = int(parse_positive("d_model", argv[1], 1 << 16));
    c.d_state = 16;
    c.d_conv = 4;
    c.expand = 2;
    c.n_layers = 1;
    c.input_dim = c.d_model;
    const int64_t B = parse_positive("B", argv[2], 1 << 16), T = parse_positive("T", argv[3], 1 << 20);
    const std::string dt = argv[4];
    if (dt != "bf16" && dt != "f16")
      throw std::invalid_argument("dtype '" + dt + "' is not bf16 or f16");
    const mc::DType dtype = dt == "bf16" ? mc::DType::BF16 : mc::DType::F16;
    const int runs = int(parse_positive("conforming_runs", argv[5], 64));
    const int stand_ins = int(parse_positive("stand_ins", argv[6], 64));
    const uint64_t seed = std::strtoull(argv[7], nullptr, 10);
    const std::string named = argc >= 10 && std::string(argv[8]) == "--tensor" ? argv[9] : "grad.layers.0.d_param";

    const mc::ref::ScopedMcaGemm moments(mc::ref::McaGemm::Moments);
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    const mc::check::ModelInputs in = mc::check::make_model_inputs(c, B, T, seed, dtype);
    const auto O = mc::check::oracle_run<double>(in, mc::DType::F32);
    std::printf("O done at %.0f s\n", elapsed());
    const auto P = mc::check::oracle_run<float>(in, dtype);
    std::printf("P done at %.0f s\n", elapsed());
    const auto N = mc::check::conforming_runs(in, dtype, runs, seed);
    std::printf("%d conforming runs done at %.0f s\n", runs, elapsed());
    // stand-ins, as the CPU calibration test draws them
    const auto S = mc::testing::stand_ins(in, dtype, stand_ins, seed);
    std::printf("%d stand-ins done at %.0f s\n", stand_ins, elapsed());
    for (size_t j = 0; j < S.size(); ++j) {
      const ModelOutputs<float> K = mc::testing::as_float(S[j]);
      const auto p_only = mc::check::compare_model("P only", in, K, O, P);
      const auto with_runs = mc::check::compare_model("P + runs", in, K, O, P, nullptr, &N);
      std::printf("stand-in %zu: P alone %s (max k %.3g), P and the runs %s (max k %.3g)\n", j,
                  p_only.pass() ? "PASS" : "FAIL", p_only.max_k(), with_runs.pass() ? "PASS" : "FAIL",
                  with_runs.max_k());
      for (size_t i = 0; i < p_only.tensors.size(); ++i) {
        const auto &a = p_only.tensors[i], &b = with_runs.tensors[i];
        if (a.k > 1.5 || a.tensor == named)
          std::printf("   %-28s P alone: k %.3f (max|K-O| %.4g, max|P-O| %.4g, bound %.4g) | "
                      "P and the runs: k %.3f (e %.4g from %s)\n",
                      a.tensor.c_str(), a.k, a.kernel.max_abs, a.baseline.max_abs, a.bound, b.k,
                      b.baseline.max_abs, b.baseline_source.c_str());
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "typed_rule_calibration_probe: %s\n", e.what());
    return 2;
  }
}
