// determinism_cases.hpp — the problems the determinism suite
// (test_determinism.cpp) and its cross-process probe (determinism_probe.cpp)
// run. Both must build bit-identical inputs, so both take them from here.
//
// Shape: d_model 64, 2 layers, d_conv 4, expand 2 (d_inner 128), input 48,
// B 2, T 300, non-zero initial states (problem.hpp, seed kSeed). Routes: every
// storage dtype with the sequential scan (d_state 16), the parallel scan
// (d_state 16, and 128 which only the parallel kernel supports) and the
// checkpointed scan (d_state 16 and 128); GEMM tiers (gpu/model.hpp): f32
// strict, and bf16/f16 on both the tensor-core tier (the default) and the
// strict tier, every scan route each; bf16/f16 checkpointed ds16 on the
// tensor-core tier with the opt-in fused dt_proj + softplus kernel
// (RunOptions::fused_dt_softplus = true) instead of cuBLAS + softplus; and the
// checkpointed scan's tile plan forced (f32 at 4, bf16 at 2 channels a thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "check/determinism.hpp"
#include "check/model_check.hpp"
#include "gpu/model.hpp"

namespace mc::testing::det {

constexpr int64_t kB = 2;
constexpr int64_t kT = 300;
constexpr uint64_t kSeed = 0x5eed0005;

struct Route {
  DType dtype;
  ScanMode scan;
  int d_state;
  gpu::TypedGemm typed = gpu::TypedGemm::TensorCore;  // bf16/f16 GEMM tier (f32: strict)
  // tensor-core tier: dt_proj on cuBLAS then the softplus kernels (the default), or both
  // as one kernel (RunOptions::fused_dt_softplus, opt-in)
  bool fused_dt = false;
  int scan_cpt = 0;  // checkpointed: forced channels per thread (RunOptions; 0 = the plan's)
};

inline gpu::GemmTier tier(const Route& r) {
  return gpu::gemm_tier(r.dtype, gpu::GemmMath::F32, r.typed);
}

// "f32/sequential/ds16/strict", "bf16/checkpointed/ds128/tensor-core",
// "bf16/checkpointed/ds16/tensor-core-dt-fused" (the fused dt_proj + softplus kernel)
inline std::string route_name(const Route& r) {
  const bool fused = r.fused_dt && tier(r) == gpu::GemmTier::TensorCore;
  return std::string(to_string(r.dtype)) + "/" + to_string(r.scan) + "/ds" +
         std::to_string(r.d_state) + "/" + to_string(tier(r)) + (fused ? "-dt-fused" : "") +
         (r.scan_cpt ? "-cpt" + std::to_string(r.scan_cpt) : "");
}

inline ModelConfig config(int d_state) {
  ModelConfig c;
  c.d_model = 64;
  c.d_state = d_state;
  c.d_conv = 4;
  c.expand = 2;
  c.n_layers = 2;
  c.input_dim = 48;
  return c;
}

inline std::string shape_text(int d_state, int64_t B = kB) {
  return "B" + std::to_string(B) + " T" + std::to_string(kT) + " dm64 L2 ds" +
         std::to_string(d_state) + " dc4 expand2 mid48";
}

inline std::vector<Route> routes() {
  std::vector<Route> r;
  auto scans = [&r](DType t, gpu::TypedGemm g) {
    r.push_back({t, ScanMode::Sequential, 16, g});
    r.push_back({t, ScanMode::Parallel, 16, g});
    r.push_back({t, ScanMode::Parallel, 128, g});
    r.push_back({t, ScanMode::Checkpointed, 16, g});
    r.push_back({t, ScanMode::Checkpointed, 128, g});
  };
  scans(DType::F32, gpu::TypedGemm::TensorCore);  // f32: the strict tier (typed is unused)
  for (DType t : {DType::BF16, DType::F16}) {
    scans(t, gpu::TypedGemm::TensorCore);
    scans(t, gpu::TypedGemm::Strict);
    // the default scan route with the opt-in fused dt_proj + softplus kernel
    r.push_back({t, ScanMode::Checkpointed, 16, gpu::TypedGemm::TensorCore, true});
  }
  // the scan's tile plan (kernels/scan/tile_kernels.cuh), which the plan picks for the
  // backward only at large channel counts, forced at 4 and 2 channels a thread
  r.push_back({DType::F32, ScanMode::Checkpointed, 16, gpu::TypedGemm::TensorCore, false, 4});
  r.push_back({DType::BF16, ScanMode::Checkpointed, 16, gpu::TypedGemm::TensorCore, false, 2});
  return r;
}

inline check::ModelInputs inputs(const Route& r, int64_t B = kB) {
  return check::make_model_inputs(config(r.d_state), B, kT, kSeed, r.dtype);
}

inline gpu::RunOptions options(const Route& r, int device) {
  gpu::RunOptions o;
  o.dtype = r.dtype;
  o.scan = r.scan;
  o.gemm = gpu::GemmMath::F32;
  o.typed_gemm = r.typed;
  o.fused_dt_softplus = r.fused_dt;
  o.scan_channels_per_thread = r.scan_cpt;
  o.state_grads = true;
  o.device = device;
  return o;
}

// Forward tensors followed by backward tensors of one run, names prefixed
// with the route ("f32/parallel/ds16/grad.layers.0.in_proj_w").
inline check::TensorList route_tensors(const Route& r, const check::ModelInputs& in,
                                       const check::ModelOutputs<float>& o) {
  check::TensorList t = check::forward_tensors(in, o);
  for (auto& x : check::backward_tensors(in, o)) t.push_back(std::move(x));
  for (auto& x : t) x.name = route_name(r) + "/" + x.name;
  return t;
}

// One fresh Model on `device`, one forward + backward: the route's tensors.
inline check::TensorList run_route_once(const Route& r, int device) {
  const check::ModelInputs in = inputs(r);
  gpu::Model m(in.cfg, in.B, in.T, options(r, device));
  return route_tensors(r, in, check::run_forward_backward(m, in));
}

}  // namespace mc::testing::det
