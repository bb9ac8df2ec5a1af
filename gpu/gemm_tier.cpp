// gemm_tier.cpp — names and resolution of the GEMM tiers and of each tier's cuBLAS
// workspace size (model.hpp). Host
// code without CUDA types: built with and without a CUDA toolkit, so reports
// name the tier on every machine.
#include <string>

#include "gpu/model.hpp"

namespace mc::gpu {

const char* to_string(GemmMath g) { return g == GemmMath::TF32 ? "tf32" : "f32"; }

const char* to_string(TypedGemm t) { return t == TypedGemm::Strict ? "strict" : "tensor-core"; }

TypedGemm parse_typed_gemm(const std::string& s) {
  if (s == "tensor-core") return TypedGemm::TensorCore;
  if (s == "strict") return TypedGemm::Strict;
  throw ConfigError("typed GEMM tier '" + s + "' violates tier in {tensor-core, strict}");
}

GemmTier gemm_tier(DType dtype, GemmMath f32_math, TypedGemm typed) {
  if (dtype == DType::F32) return f32_math == GemmMath::TF32 ? GemmTier::TF32 : GemmTier::Strict;
  return typed == TypedGemm::Strict ? GemmTier::Strict : GemmTier::TensorCore;
}

size_t default_cublas_workspace_bytes(GemmTier tier) {
  return tier == GemmTier::TensorCore ? kCublasWorkspaceTensorCoreBytes : kCublasWorkspaceBytes;
}

std::string describe_default_cublas_workspaces() {
  return std::to_string(default_cublas_workspace_bytes(GemmTier::TensorCore)) +
         " bytes on tensor-core, " + std::to_string(default_cublas_workspace_bytes(GemmTier::Strict)) +
         " on strict and " + std::to_string(default_cublas_workspace_bytes(GemmTier::TF32)) +
         " on tf32";
}

size_t cublas_workspace_bytes(const RunOptions& opt) {
  if (opt.cublas_workspace_bytes != kCublasWorkspaceByTier) return opt.cublas_workspace_bytes;
  return default_cublas_workspace_bytes(gemm_tier(opt.dtype, opt.gemm, opt.typed_gemm));
}

const char* to_string(GemmTier t) {
  switch (t) {
    case GemmTier::Strict: return "strict";
    case GemmTier::TF32: return "tf32";
    case GemmTier::TensorCore: return "tensor-core";
  }
  return "unknown";
}

const char* cublas_compute_name(GemmTier t) {
  switch (t) {
    case GemmTier::Strict: return "CUBLAS_COMPUTE_32F_PEDANTIC";
    case GemmTier::TF32: return "CUBLAS_COMPUTE_32F_FAST_TF32";
    case GemmTier::TensorCore: return "CUBLAS_COMPUTE_32F";
  }
  return "unknown";
}

std::string describe(GemmTier t) {
  const std::string common =
      "; cublasGemmEx_64, CUBLAS_GEMM_DEFAULT heuristic, a fixed workspace (by default " +
      std::to_string(default_cublas_workspace_bytes(t)) +
      " bytes on this tier; RunOptions::cublas_workspace_bytes sets another), atomics not "
      "allowed, reduced-precision split-K reductions disallowed (one rounding to the output type)";
  switch (t) {
    case GemmTier::Strict:
      return std::string("strict: ") + cublas_compute_name(t) +
             " (true f32 arithmetic and accumulation, no tensor cores)" + common;
    case GemmTier::TF32:
      return std::string("tf32: ") + cublas_compute_name(t) +
             " (f32 inputs rounded to TF32 on tensor cores, f32 accumulation; opt-in)" + common;
    case GemmTier::TensorCore:
      return std::string("tensor-core: ") + cublas_compute_name(t) +
             " (bf16/f16 inputs on tensor cores, exact products, f32 accumulation)" + common +
             "; with RunOptions::fused_dt_softplus (opt-in) the dt_proj GEMM runs with its "
             "softplus as one mambacheck kernel instead (kernels/dt_softplus.cu: WMMA 16x16x16, "
             "f32 accumulation, k ascending)";
  }
  return "unknown";
}

}  // namespace mc::gpu
