// gemm.cpp — cuBLAS calls of the three GEMM roles (gemm.hpp). The row-major
// problem C[M,N] = A[M,K]·B[K,N] is issued as the column-major Cᵀ = Bᵀ·Aᵀ
// (spec §2.2): a row-major [r, c] tensor with row stride ld is a column-major
// c×r matrix with leading dimension ld.
#include "gpu/gemm.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <sstream>
#include <type_traits>

#include "gpu/device_context.hpp"
#include "gpu/phase_timer.hpp"

namespace mc::gpu {

namespace {

template <class T>
constexpr cudaDataType_t data_type();
template <>
constexpr cudaDataType_t data_type<float>() {
  return CUDA_R_32F;
}
template <>
constexpr cudaDataType_t data_type<__nv_bfloat16>() {
  return CUDA_R_16BF;
}
template <>
constexpr cudaDataType_t data_type<__half>() {
  return CUDA_R_16F;
}

// The tier's compute type (model.hpp): f32 storage -> strict or TF32; typed
// storage -> tensor cores with f32 accumulation, or strict.
template <class T>
cublasComputeType_t compute_type(GemmMath math, TypedGemm typed) {
  if constexpr (std::is_same<T, float>::value)
    return math == GemmMath::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
  else
    return typed == TypedGemm::TensorCore ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
}

const char* compute_name(cublasComputeType_t c) {
  switch (c) {
    case CUBLAS_COMPUTE_32F_FAST_TF32: return "COMPUTE_32F_FAST_TF32";
    case CUBLAS_COMPUTE_32F: return "COMPUTE_32F (tensor cores, f32 accumulation)";
    default: return "COMPUTE_32F_PEDANTIC";
  }
}

// Phase timing: the GEMM interval opens at construction and closes (back to
// elementwise) at destruction. Nothing without a hook or with timing off.
class GemmPhase {
 public:
  GemmPhase(PhaseTimer* t, cublasHandle_t h) : t_(t && t->enabled() ? t : nullptr) {
    if (!t_) return;
    MC_CUBLAS_CHECK(cublasGetStream(h, &s_), "phase timing: the GEMM stream");
    t_->mark(Phase::Gemm, s_);
  }
  ~GemmPhase() {
    if (!t_) return;
    try {
      t_->mark(Phase::Elementwise, s_);
    } catch (...) {  // a failing event record shows at the next mark or take()
    }
  }
  GemmPhase(const GemmPhase&) = delete;
  GemmPhase& operator=(const GemmPhase&) = delete;

 private:
  PhaseTimer* t_;
  cudaStream_t s_ = nullptr;
};

std::string context(const std::string& what, const char* role, int64_t m, int64_t n, int64_t k,
                    cublasComputeType_t c) {
  std::ostringstream os;
  os << what << " (" << role << ", column-major m=" << m << " n=" << n << " k=" << k << ", "
     << compute_name(c) << ")";
  return os.str();
}

// The error context (an ostringstream) is built only when the call failed.
template <class Context>
void check_gemm(cublasStatus_t st, Context&& ctx) {
  if (st != CUBLAS_STATUS_SUCCESS) check_cublas(st, "cublasGemmEx_64", ctx());
}

void require_shape(const std::string& what, int64_t M, int64_t K, int64_t N) {
  if (M < 1 || K < 1 || N < 1) {
    std::ostringstream os;
    os << what << ": GEMM shape M=" << M << " K=" << K << " N=" << N
       << " violates M, K, N >= 1";
    throw ConfigError(os.str());
  }
}

}  // namespace

template <class T, class TOut>
void Gemm::forward(const std::string& what, const T* X, int64_t ldx, const T* W, TOut* Y,
                   int64_t ldy, int64_t M, int64_t K, int64_t N) const {
  require_shape(what, M, K, N);
  const float alpha = 1.0f, beta = 0.0f;
  const cublasComputeType_t ct = compute_type<T>(math_, typed_);
  const GemmPhase phase(phases_, handle_);
  // Yᵀ [N, M] = Wᵀ [N, K] · Xᵀ [K, M]
  check_gemm(cublasGemmEx_64(handle_, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, W,
                           data_type<T>(), N, X, data_type<T>(), ldx, &beta, Y,
                           data_type<TOut>(), ldy, ct, CUBLAS_GEMM_DEFAULT),
             [&] { return context(what, "forward Y = X·W", N, M, K, ct); });
}

template <class T, class TOut>
void Gemm::input_grad(const std::string& what, const T* dY, const T* W, TOut* dX, int64_t M,
                      int64_t K, int64_t N) const {
  require_shape(what, M, K, N);
  const float alpha = 1.0f, beta = 0.0f;
  const cublasComputeType_t ct = compute_type<T>(math_, typed_);
  const GemmPhase phase(phases_, handle_);
  // dXᵀ [K, M] = W [K, N] (col-major Wᵀ, op T) · dYᵀ [N, M]
  check_gemm(cublasGemmEx_64(handle_, CUBLAS_OP_T, CUBLAS_OP_N, K, M, N, &alpha, W,
                           data_type<T>(), N, dY, data_type<T>(), N, &beta, dX,
                           data_type<TOut>(), K, ct, CUBLAS_GEMM_DEFAULT),
             [&] { return context(what, "input grad dX = dY·W^T", K, M, N, ct); });
}

template <class T>
void Gemm::weight_grad(const std::string& what, const T* X, int64_t ldx, const T* dY, float* dW,
                       int64_t M, int64_t K, int64_t N) const {
  require_shape(what, M, K, N);
  const float alpha = 1.0f, beta = 1.0f;  // accumulate into the f32 gradient arena
  const cublasComputeType_t ct = compute_type<T>(math_, typed_);
  const GemmPhase phase(phases_, handle_);
  // dWᵀ [N, K] += dYᵀ [N, M] · X [M, K] (col-major Xᵀ, op T)
  check_gemm(cublasGemmEx_64(handle_, CUBLAS_OP_N, CUBLAS_OP_T, N, K, M, &alpha, dY,
                           data_type<T>(), N, X, data_type<T>(), ldx, &beta, dW,
                           CUDA_R_32F, N, ct, CUBLAS_GEMM_DEFAULT),
             [&] { return context(what, "weight grad dW += X^T·dY", N, K, M, ct); });
}

#define MC_INSTANTIATE_GEMM(T, TOut)                                                            \
  template void Gemm::forward<T, TOut>(const std::string&, const T*, int64_t, const T*, TOut*, \
                                       int64_t, int64_t, int64_t, int64_t) const;               \
  template void Gemm::input_grad<T, TOut>(const std::string&, const T*, const T*, TOut*,        \
                                          int64_t, int64_t, int64_t) const;
MC_INSTANTIATE_GEMM(float, float)
MC_INSTANTIATE_GEMM(__nv_bfloat16, __nv_bfloat16)
MC_INSTANTIATE_GEMM(__nv_bfloat16, float)
MC_INSTANTIATE_GEMM(__half, __half)
MC_INSTANTIATE_GEMM(__half, float)
#undef MC_INSTANTIATE_GEMM
template void Gemm::weight_grad<float>(const std::string&, const float*, int64_t, const float*,
                                       float*, int64_t, int64_t, int64_t) const;
template void Gemm::weight_grad<__nv_bfloat16>(const std::string&, const __nv_bfloat16*, int64_t,
                                               const __nv_bfloat16*, float*, int64_t, int64_t,
                                               int64_t) const;
template void Gemm::weight_grad<__half>(const std::string&, const __half*, int64_t, const __half*,
                                        float*, int64_t, int64_t, int64_t) const;

}  // namespace mc::gpu
