// gemm.hpp — the three GEMM roles of spec §2.2 on cuBLAS, for row-major
// tensors and weights stored W[in, out]:
//   forward      Y [M, N]  = X [M, K] · W [K, N]          (overwrite; bias added by the caller in f32)
//   input_grad   dX [M, K] = dY [M, N] · Wᵀ               (overwrite)
//   weight_grad  dW [K, N] += Xᵀ · dY                     (accumulate, beta = 1, f32 master grad)
// Storage type T of A/B in {float, __nv_bfloat16, __half}; the output type is
// T or float (typed GEMMs may write f32: biased forwards into an f32 temp,
// dW into the f32 gradient arena). cublasGemmEx_64 (64-bit sizes,
// CUBLAS_GEMM_DEFAULT) on the tier of model.hpp:
//   f32 inputs:   CUBLAS_COMPUTE_32F_PEDANTIC (tier strict, true f32), or
//                 CUBLAS_COMPUTE_32F_FAST_TF32 only when GemmMath::TF32 was chosen;
//   typed inputs: CUBLAS_COMPUTE_32F (tier tensor-core, the default: tensor cores,
//                 exact bf16/f16 products, f32 accumulation, spec §6.5), or
//                 CUBLAS_COMPUTE_32F_PEDANTIC (TypedGemm::Strict: no tensor cores).
// The handle's math mode (device_context.hpp) forbids reduced-precision split-K
// reductions, so a typed output is rounded once from the f32 accumulator.
// Row-major mapping via Cᵀ = Bᵀ·Aᵀ (spec §2.2 table). Every call is checked:
// a failure names the cuBLAS status, the GEMM (e.g. "layer 2 x_proj dW"), its
// role, m, n, k and the compute type. With phase timing on (phase_timer.hpp)
// every call is marked as a GEMM interval on the handle's stream.
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <string>

#include "gpu/model.hpp"

namespace mc::gpu {

class PhaseTimer;

class Gemm {
 public:
  // math: the f32 GEMMs' tier; typed: the bf16/f16 GEMMs' tier; phases:
  // optional phase-timing hook (nullptr: none).
  Gemm(cublasHandle_t handle, GemmMath math, TypedGemm typed = TypedGemm::TensorCore,
       PhaseTimer* phases = nullptr)
      : handle_(handle), math_(math), typed_(typed), phases_(phases) {}

  // Y [M, N] (row stride ldy) = X [M, K] (row stride ldx) · W [K, N]
  template <class T, class TOut>
  void forward(const std::string& what, const T* X, int64_t ldx, const T* W, TOut* Y,
               int64_t ldy, int64_t M, int64_t K, int64_t N) const;
  // dX [M, K] = dY [M, N] · Wᵀ, W [K, N]
  template <class T, class TOut>
  void input_grad(const std::string& what, const T* dY, const T* W, TOut* dX, int64_t M,
                  int64_t K, int64_t N) const;
  // dW [K, N] += Xᵀ · dY, X [M, K] (row stride ldx), dY [M, N]
  template <class T>
  void weight_grad(const std::string& what, const T* X, int64_t ldx, const T* dY, float* dW,
                   int64_t M, int64_t K, int64_t N) const;

  GemmMath math() const { return math_; }
  TypedGemm typed() const { return typed_; }

 private:
  cublasHandle_t handle_;
  GemmMath math_;
  TypedGemm typed_;
  PhaseTimer* phases_;
};

}  // namespace mc::gpu
