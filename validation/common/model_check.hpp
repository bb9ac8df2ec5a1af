// model_check.hpp — run one backbone problem three ways and compare them
// tensor by tensor under the k-x rule (compare.hpp):
//   O  the f64 CPU oracle (no rounding),
//   P  the float CPU oracle with the same storage rounding as the GPU dtype
//      (the same-precision baseline; for f32 simply the float oracle),
//   K  the GPU pipeline (gpu::Model).
// For bf16/f16 the GEMM weights and the input X are quantised to the dtype
// once, before any of the three runs, so all see identical inputs (input
// quantisation is not kernel error). Compared: out, final conv/SSM states,
// every parameter-gradient tensor (each ParamEntry), the input gradient and
// the initial-state gradients. Used by the GPU suites, the precision suite and
// `mambacheck validate`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compare.hpp"
#include "config.hpp"
#include "pipeline.hpp"

namespace mc::check {

// Everything a backbone forward+backward needs, as the GPU sees it (f32).
struct ModelInputs {
  ModelConfig cfg;
  int64_t B = 1, T = 1;
  DType dtype = DType::F32;   // quantisation applied to params' GEMM weights and X
  std::vector<float> params;  // [lay.total]
  std::vector<float> X;       // [B*T, mid]
  std::vector<float> conv0;   // [L, B, di, dc]  initial conv state
  std::vector<float> ssm0;    // [L, B, di, ds]  initial SSM state
  std::vector<float> d_out;   // [B*T, dm]       upstream gradient
};

// The seeded problem of problem.hpp, quantised for `dtype` (see above).
ModelInputs make_model_inputs(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                              DType dtype = DType::F32);

// Results of one forward + backward in precision S.
template <class S>
struct ModelOutputs {
  std::vector<S> out;         // [B*T, dm]
  std::vector<S> conv_final;  // [L, B, di, dc]
  std::vector<S> ssm_final;   // [L, B, di, ds]
  std::vector<S> grads;       // [lay.total]
  std::vector<S> dX;          // [B*T, mid]
  std::vector<S> d_conv0;     // [L, B, di, dc]
  std::vector<S> d_ssm0;      // [L, B, di, ds]
};

// The CPU oracle in scalar S with storage rounding `st` (O: double + F32;
// P: float + the GPU dtype).
template <class S>
ModelOutputs<S> oracle_run(const ModelInputs& in, DType storage);

// The GPU pipeline (dtype = in.dtype) with state gradients. With check_finite
// every step's outputs are scanned and gpu::NonFiniteError names the first
// NaN/Inf (step, tensor, index, overflow).
ModelOutputs<float> gpu_run(const ModelInputs& in, ScanMode scan,
                            gpu::GemmMath gemm = gpu::GemmMath::F32, bool check_finite = false);

std::string describe(const ModelConfig& c, int64_t B, int64_t T);

// Smallest tensor the k-rule is applied to: for a handful of elements the
// ratio of two maxima of independent rounding errors is Cauchy-like and
// exceeds any small k often (1e-3 false-failure rate at n = 8, 4e-5 at 16 for
// k = 4, simulated), so cases must give every compared tensor >= 16 elements.
constexpr int64_t kMinRuleElements = 16;
bool shape_ok_for_k_rule(const ModelConfig& c, int64_t B, int64_t T);

double k_limit_for(DType dtype);  // kF32KLimit or kTypedKLimit

struct Comparison {
  std::string label;
  std::vector<KRuleResult> tensors;
  bool pass() const;
  double max_k() const;         // over finite k
  double max_headroom() const;
  std::string report(bool failures_only = false) const;  // one line per tensor
};

// K vs O with baseline P, every tensor (names: out, layers.l.conv_final, ...,
// grad.<ParamEntry name>, d_input, layers.l.d_conv0, layers.l.d_ssm0).
Comparison compare_model(const std::string& label, const ModelInputs& in,
                         const ModelOutputs<float>& K, const ModelOutputs<double>& O,
                         const ModelOutputs<float>& P);

// Convenience: O, P and K for one case.
Comparison check_gpu_against_oracle(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed,
                                    DType dtype, ScanMode scan,
                                    gpu::GemmMath gemm = gpu::GemmMath::F32,
                                    bool check_finite = false);

}  // namespace mc::check
