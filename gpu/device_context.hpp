// device_context.hpp — one device, one stream, one cuBLAS handle with its own
// workspace and explicitly set math/atomics modes, for a Model. Also the
// cuBLAS error check used by every GEMM (status name + context).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "gpu/device_buffer.hpp"
#include "gpu/model.hpp"
#include "gpu/phase_timer.hpp"

namespace mc::gpu {

class CublasError : public std::runtime_error {
 public:
  CublasError(const std::string& msg, cublasStatus_t s) : std::runtime_error(msg), status(s) {}
  cublasStatus_t status;
};

// Throws CublasError "cuBLAS <STATUS_NAME> in <call> [<ctx>]" unless s is SUCCESS.
void check_cublas(cublasStatus_t s, const char* call, const std::string& ctx);

#define MC_CUBLAS_CHECK(call, ctx) ::mc::gpu::check_cublas((call), #call, (ctx))

// The workspace given to cuBLAS (cublasSetWorkspace) is fixed per model
// (RunOptions::cublas_workspace_bytes, by default the GEMM tier's size: gpu/model.hpp),
// so the algorithm choice (and the bits) do not depend on what else is allocated.

class DeviceContext {
 public:
  // Selects `device` (ConfigError if it does not exist), creates a non-blocking
  // stream and a cuBLAS handle bound to it with: own workspace, pointer mode
  // host, atomics NOT allowed (determinism), math mode CUBLAS_DEFAULT_MATH for
  // GemmMath::F32 or CUBLAS_TF32_TENSOR_OP_MATH for GemmMath::TF32, always with
  // CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (split-K partial sums of a
  // bf16/f16-output GEMM are reduced in f32, never in the output type; no
  // effect on f32-output GEMMs). The compute type of each GEMM (its tier) is
  // chosen per call by Gemm (gemm.hpp).
  DeviceContext(int device, GemmMath math, size_t cublas_workspace = kCublasWorkspaceBytes);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Makes this context's device current (every public Model entry calls it).
  void activate() const;

  int device() const { return device_; }
  GemmMath math() const { return math_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  size_t workspace_bytes() const { return workspace_.bytes(); }
  // The optional per-phase timing of this model's eager steps (off by default).
  PhaseTimer& phases() const { return *phases_; }

 private:
  int device_ = 0;
  GemmMath math_ = GemmMath::F32;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer<unsigned char> workspace_;
  std::unique_ptr<PhaseTimer> phases_ = std::make_unique<PhaseTimer>();
};

}  // namespace mc::gpu
