// precision_element_probe.cpp — one tensor of the bf16/f16 model-shape problem, judged
// element by element on both typed GEMM tiers in one process: O (f64 oracle), P (the f32
// same-precision baseline), conforming runs (pipelines exactly as accurate as P that make
// other f32 rounding choices, check::conforming_runs), a Monte Carlo ensemble (the
// statistics' runs, which also perturb every typed store; moments GEMM as in the
// model-shape suite), and the GPU pipeline K on the tensor-core and the strict (PEDANTIC)
// tier, checkpointed scan route. For each tier: the tensor's k-rule line (P alone, then P
// and the conforming runs), and its `top` worst elements as O, K, P and the conforming
// runs have them, the Monte Carlo runs there (check::element_report), and the other
// tier's K there.
//
// Why the conforming runs matter here: where a sum's error is dominated by the f16
// roundings of its terms, an equally accurate pipeline rounds almost every term as P does
// (it differs from P by f32-level noise, which flips few roundings), so its error sits
// close to P's, not at an independent draw; the Monte Carlo runs, which perturb every
// store, spread much wider. A K far from P and from every conforming run there computes
// something P does not model. Written for F16DModel2048's d_param failure
// (docs/performance-notes.md, "2026-12-06"): O, P and the ensemble are shared by the two
// tiers, so the question "is the tensor-core GEMM the source" costs one GPU run more
// instead of a second suite run (~270 s at d_model 2048 on a 16-thread host).
//   precision_element_probe 2048 8 2048 f16 2 2 20260415 grad.layers.0.d_param 8
// (d_model, B, T, dtype, conforming runs, Monte Carlo runs, seed, tensor, top; d_state 16, d_conv 4, expand 2,
// one layer, input_dim = d_model: the suite's problem). Needs a GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "check/catalogue.hpp"
#include "check/model_check.hpp"
#include "reference_cpu/mca_scalar.hpp"

namespace {

using mc::check::ModelOutputs;

long parse_in_range(const char* field, const char* text, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (!end || *end || v < lo || v > hi)
    throw std::invalid_argument(std::string(field) + " '" + text + "' is not an integer in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

mc::check::TensorSpec find_tensor(const mc::check::ModelInputs& in, const std::string& name) {
  for (const mc::check::TensorSpec& t : mc::check::result_catalogue(in.cfg, in.B, in.T))
    if (t.name == name) return t;
  throw std::invalid_argument("tensor '" + name + "' is not a result tensor of this problem");
}

// Indices of the `top` largest |K - O| of tensor t, largest first.
std::vector<int64_t> worst_elements(const mc::check::TensorSpec& t, const ModelOutputs<float>& K,
                                    const ModelOutputs<double>& O, int top) {
  const auto& k = mc::check::field(K, t.field);
  const auto& o = mc::check::field(O, t.field);
  std::vector<int64_t> idx(size_t(t.count));
  std::iota(idx.begin(), idx.end(), int64_t(0));
  auto err = [&](int64_t i) { return std::fabs(double(k[size_t(t.offset + i)]) - o[size_t(t.offset + i)]); };
  const size_t n = std::min(idx.size(), size_t(top));
  std::partial_sort(idx.begin(), idx.begin() + long(n), idx.end(),
                    [&](int64_t a, int64_t b) { return err(a) > err(b); });
  idx.resize(n);
  return idx;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 10) {
    std::fprintf(stderr, "usage: %s d_model B T bf16|f16 conforming_runs mc_runs seed tensor top\n",
                 argv[0]);
    return 2;
  }
  try {
    mc::ModelConfig c;
    c.d_model = int(parse_in_range("d_model", argv[1], 1, 1 << 16));
    c.d_state = 16;
    c.d_conv = 4;
    c.expand = 2;
    c.n_layers = 1;
    c.input_dim = c.d_model;
    const int64_t B = parse_in_range("B", argv[2], 1, 1 << 16);
    const int64_t T = parse_in_range("T", argv[3], 1, 1 << 20);
    const std::string dt = argv[4];
    if (dt != "bf16" && dt != "f16") throw std::invalid_argument("dtype '" + dt + "' is not bf16 or f16");
    const mc::DType dtype = dt == "bf16" ? mc::DType::BF16 : mc::DType::F16;
    const int conforming = int(parse_in_range("conforming_runs", argv[5], 0, 64));
    const int runs = int(parse_in_range("mc_runs", argv[6], 0, 64));
    const uint64_t seed = std::strtoull(argv[7], nullptr, 10);
    const std::string tensor = argv[8];
    const int top = int(parse_in_range("top", argv[9], 1, 1000));

    const mc::ref::ScopedMcaGemm moments(mc::ref::McaGemm::Moments);
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    const mc::check::ModelInputs in = mc::check::make_model_inputs(c, B, T, seed, dtype);
    const mc::check::TensorSpec spec = find_tensor(in, tensor);
    const std::string shape = mc::check::describe(c, B, T) + " dtype=" + dt;
    const std::vector<mc::gpu::TypedGemm> tiers = {mc::gpu::TypedGemm::TensorCore,
                                                   mc::gpu::TypedGemm::Strict};
    std::vector<ModelOutputs<float>> Ks;
    for (mc::gpu::TypedGemm tier : tiers)  // first: a GPU problem shows before the CPU minutes
      Ks.push_back(mc::check::gpu_run(in, mc::ScanMode::Checkpointed, mc::gpu::GemmMath::F32,
                                      /*check_finite=*/true, mc::ScanExp::Auto, tier));
    std::printf("%s: GPU runs done at %.0f s\n", shape.c_str(), elapsed());
    const auto O = mc::check::oracle_run<double>(in, mc::DType::F32);
    std::printf("O done at %.0f s\n", elapsed());
    const auto P = mc::check::oracle_run<float>(in, dtype);
    std::printf("P done at %.0f s\n", elapsed());
    const auto N = mc::check::conforming_runs(in, dtype, conforming, seed);
    std::printf("%d conforming runs done at %.0f s\n", conforming, elapsed());
    const auto M = mc::check::mca_ensemble(in, dtype, runs, seed);
    std::printf("%d Monte Carlo runs done at %.0f s\n", runs, elapsed());

    for (size_t j = 0; j < tiers.size(); ++j) {
      const std::string tier = to_string(mc::gpu::gemm_tier(dtype, mc::gpu::GemmMath::F32, tiers[j]));
      const std::string label = shape + " scan=checkpointed gemm=" + tier;
      const auto cmp = mc::check::compare_model(label, in, Ks[j], O, P, runs > 0 ? &M : nullptr);
      const auto typed = mc::check::compare_model(label, in, Ks[j], O, P, nullptr,
                                                  conforming > 0 ? &N : nullptr);
      std::printf("\n== tier %s: every tensor with k > 1.5 against P alone, and %s; each "
                  "against P alone, then against P and the conforming runs\n",
                  tier.c_str(), tensor.c_str());
      for (size_t i = 0; i < cmp.tensors.size(); ++i)
        if (cmp.tensors[i].k > 1.5 || cmp.tensors[i].tensor == tensor)
          std::printf("  %s\n    %s\n", cmp.tensors[i].summary().c_str(),
                      typed.tensors[i].summary().c_str());
      const ModelOutputs<float>& other = Ks[1 - j];
      for (int64_t i : worst_elements(spec, Ks[j], O, top)) {
        const size_t at = size_t(spec.offset + i);
        const double o = mc::check::field(O, spec.field)[at];
        std::printf("  conforming runs: %s\n  Monte Carlo runs: %s\n  other tier's K-O there %.7g\n",
                    mc::check::element_report(tensor, i, in, Ks[j], O, P, conforming > 0 ? &N : nullptr).c_str(),
                    mc::check::element_report(tensor, i, in, Ks[j], O, P, runs > 0 ? &M : nullptr).c_str(),
                    double(mc::check::field(other, spec.field)[at]) - o);
      }
    }
    std::printf("\ndone at %.0f s\n", elapsed());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precision_element_probe: %s\n", e.what());
    return 2;
  }
}
