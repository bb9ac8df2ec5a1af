// gemm_rounding_probe.cu — a stand-alone probe of how cuBLAS rounds a GEMM's typed
// output: for f16 and bf16 inputs and outputs, CUBLAS_COMPUTE_32F (tensor cores) and
// CUBLAS_COMPUTE_32F_PEDANTIC, it compares every output element with the correctly
// rounded (round-to-nearest-even) value of the exact sum of products, computed on
// the host in double (the products of two 11-bit significands are exact, and so is
// a sum of at most a few hundred of them at the magnitudes used here), and counts
// the elements equal to it, one ulp toward zero, one ulp away from zero, and
// further off. A rounding that is right on average shows as many "toward" as
// "away"; a truncating epilogue or accumulation shows only "toward". It uses cuBLAS
// alone (nothing of mambacheck), with the math mode the model sets
// (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION).
//
// Shapes (M, N, K), C [M, N] = A [M, K] · B [K, N], row-major, called like the
// model's dX = dY·W (column-major C^T = B^T·A^T): the out_proj input gradient of the
// f16 precision property's failing case (1023 x 34 x 17) and model-like ones.
// usage: gemm_rounding_probe            (prints one line per dtype x compute x shape)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "validation/gpu/probe_check.hpp"

namespace {


// Host conversions of one storage type: to double and correctly rounded from double.
struct F16 {
  using T = __half;
  static constexpr cudaDataType_t kType = CUDA_R_16F;
  static const char* name() { return "f16"; }
  static double to_d(T x) { return double(__half2float(x)); }
  static T from_d(double x) { return __double2half(x); }  // round to nearest even
  static double ulp_at(double x) {
    const int e = std::ilogb(x == 0 ? 6.1e-5 : x);
    return std::ldexp(1.0, (e < -14 ? -14 : e) - 10);
  }
};
struct BF16 {
  using T = __nv_bfloat16;
  static constexpr cudaDataType_t kType = CUDA_R_16BF;
  static const char* name() { return "bf16"; }
  static double to_d(T x) { return double(__bfloat162float(x)); }
  static T from_d(double x) { return __double2bfloat16(x); }  // round to nearest even
  static double ulp_at(double x) {
    const int e = std::ilogb(x == 0 ? 1e-38 : x);
    return std::ldexp(1.0, e - 7);
  }
};

template <class D>
void probe(cublasHandle_t h, cublasComputeType_t ct, const char* ct_name, int M, int N, int K) {
  using T = typename D::T;
  std::mt19937_64 rng(uint64_t(M) * 131 + uint64_t(N) * 17 + uint64_t(K));
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<T> a(size_t(M) * K), b(size_t(K) * N), c(size_t(M) * N);
  for (auto& x : a) x = D::from_d(nd(rng));
  for (auto& x : b) x = D::from_d(0.25 * nd(rng));
  T *da = nullptr, *db = nullptr, *dc = nullptr;
  PROBE_CHECK(cudaMalloc(&da, a.size() * sizeof(T)));
  PROBE_CHECK(cudaMalloc(&db, b.size() * sizeof(T)));
  PROBE_CHECK(cudaMalloc(&dc, c.size() * sizeof(T)));
  PROBE_CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice));
  const float alpha = 1.0f, beta = 0.0f;
  PROBE_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, db, D::kType, N, da,
                            D::kType, K, &beta, dc, D::kType, N, ct, CUBLAS_GEMM_DEFAULT));
  PROBE_CHECK(cudaMemcpy(c.data(), dc, c.size() * sizeof(T), cudaMemcpyDeviceToHost));
  long same = 0, toward = 0, away = 0, other = 0;
  double signed_ulps = 0.0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double exact = 0.0;
      for (int k = 0; k < K; ++k) exact += D::to_d(a[size_t(m) * K + k]) * D::to_d(b[size_t(k) * N + n]);
      const double rn = D::to_d(D::from_d(exact));
      const double got = D::to_d(c[size_t(m) * N + n]);
      if (got == rn) {
        ++same;
        continue;
      }
      const double u = D::ulp_at(std::fabs(rn));
      const double d = (got - rn) / u;  // in ulps of the correctly rounded value
      signed_ulps += exact >= 0 ? d : -d;  // > 0: away from zero
      if (std::fabs(got - rn) <= u * (1.0 + 1e-9))  // one step (half a step below a power of 2)
        (std::fabs(got) < std::fabs(rn) ? toward : away)++;
      else
        ++other;
    }
  const double n_all = double(M) * N;
  std::printf("%-4s %-9s M %5d N %5d K %5d: correctly rounded %.4f, 1 ulp toward zero %.4f, "
              "1 ulp away %.4f, further %.4f, mean signed error %+.4f ulp (+ = away from zero)\n",
              D::name(), ct_name, M, N, K, same / n_all, toward / n_all, away / n_all,
              other / n_all, signed_ulps / n_all);
  PROBE_CHECK(cudaFree(da));
  PROBE_CHECK(cudaFree(db));
  PROBE_CHECK(cudaFree(dc));
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a timeout (under a sanitizer)
  cublasHandle_t h;
  PROBE_CUBLAS(cublasCreate(&h));
  PROBE_CUBLAS(cublasSetMathMode(
      h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  const int shapes[][3] = {{1023, 34, 17}, {1023, 17, 34}, {4096, 256, 128}, {2048, 1536, 768}};
  for (const auto& s : shapes) {
    probe<F16>(h, CUBLAS_COMPUTE_32F, "tensor", s[0], s[1], s[2]);
    probe<F16>(h, CUBLAS_COMPUTE_32F_PEDANTIC, "pedantic", s[0], s[1], s[2]);
    probe<BF16>(h, CUBLAS_COMPUTE_32F, "tensor", s[0], s[1], s[2]);
    probe<BF16>(h, CUBLAS_COMPUTE_32F_PEDANTIC, "pedantic", s[0], s[1], s[2]);
  }
  PROBE_CUBLAS(cublasDestroy(h));
  return 0;
}
