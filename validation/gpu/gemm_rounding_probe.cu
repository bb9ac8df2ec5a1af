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
// Each GEMM of the model with a typed output, called as gpu/gemm.cpp calls it (the
// forward and the input gradient, with the model's workspace), at the shapes of the
// f16 precision property's failing case, of d_model 768 and of d_model 2048.
// usage: gemm_rounding_probe            (prints one line per dtype x compute x shape)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
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

// The two calls of gpu/gemm.cpp with a typed output, as it makes them (row-major
// operands through the column-major Cᵀ mapping, the model's 32 MiB workspace):
//   forward     Y [M, N] = X [M, K] · W [K, N]
//   input_grad  dX [M, K] = dY [M, N] · Wᵀ, W [K, N]
// reduction length: K (forward) or N (input_grad). Only the first `rows` rows of
// the output are checked against the exact sum (the host's double loop).
enum class Role { Forward, InputGrad };

template <class D>
void probe(cublasHandle_t h, cublasComputeType_t ct, const char* ct_name, Role role, int M, int K,
           int N, const char* what) {
  using T = typename D::T;
  std::mt19937_64 rng(uint64_t(M) * 131 + uint64_t(N) * 17 + uint64_t(K) + 7 * int(role));
  std::normal_distribution<double> nd(0.0, 1.0);
  const bool fwd = role == Role::Forward;
  const int64_t in_cols = fwd ? K : N, out_cols = fwd ? N : K, red = fwd ? K : N;
  std::vector<T> a(size_t(M) * in_cols), w(size_t(K) * N), c(size_t(M) * out_cols);
  for (auto& x : a) x = D::from_d(nd(rng));
  for (auto& x : w) x = D::from_d(0.25 * nd(rng));
  T *da = nullptr, *dw = nullptr, *dc = nullptr;
  PROBE_CHECK(cudaMalloc(&da, a.size() * sizeof(T)));
  PROBE_CHECK(cudaMalloc(&dw, w.size() * sizeof(T)));
  PROBE_CHECK(cudaMalloc(&dc, c.size() * sizeof(T)));
  PROBE_CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMemcpy(dw, w.data(), w.size() * sizeof(T), cudaMemcpyHostToDevice));
  const float alpha = 1.0f, beta = 0.0f;
  if (fwd)  // Yᵀ [N, M] = Wᵀ [N, K] · Xᵀ [K, M]
    PROBE_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, dw, D::kType, N, da,
                              D::kType, K, &beta, dc, D::kType, N, ct, CUBLAS_GEMM_DEFAULT));
  else  // dXᵀ [K, M] = W [K, N] (col-major Wᵀ, op T) · dYᵀ [N, M]
    PROBE_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, K, M, N, &alpha, dw, D::kType, N, da,
                              D::kType, N, &beta, dc, D::kType, K, ct, CUBLAS_GEMM_DEFAULT));
  PROBE_CHECK(cudaMemcpy(c.data(), dc, c.size() * sizeof(T), cudaMemcpyDeviceToHost));
  long same = 0, toward = 0, away = 0, other = 0;
  double signed_ulps = 0.0, worst = 0.0;
  // at most 1024 rows, fewer where the host's double loop would pass ~2e9 products
  const int64_t by_work = int64_t(2e9) / (out_cols * red);
  const int rows = int(std::min<int64_t>({int64_t(M), 1024, std::max<int64_t>(by_work, 16)}));
  for (int m = 0; m < rows; ++m)
    for (int64_t o = 0; o < out_cols; ++o) {
      double exact = 0.0;
      for (int64_t r = 0; r < red; ++r)
        exact += fwd ? D::to_d(a[size_t(m) * K + r]) * D::to_d(w[size_t(r) * N + o])
                     : D::to_d(a[size_t(m) * N + r]) * D::to_d(w[size_t(o) * N + r]);
      const double rn = D::to_d(D::from_d(exact));
      const double got = D::to_d(c[size_t(m) * out_cols + o]);
      if (got == rn) {
        ++same;
        continue;
      }
      const double u = D::ulp_at(std::fabs(rn));
      const double d = (got - rn) / u;  // in ulps of the correctly rounded value
      signed_ulps += exact >= 0 ? d : -d;  // > 0: away from zero
      worst = std::fmax(worst, std::fabs(d));
      if (std::fabs(got - rn) <= u * (1.0 + 1e-9))  // one step (half a step below a power of 2)
        (std::fabs(got) < std::fabs(rn) ? toward : away)++;
      else
        ++other;
    }
  const double n_all = double(rows) * double(out_cols);
  std::printf("%-4s %-9s %-24s %s M %5d K %5d N %5d (sum of %lld): correctly rounded %.4f, "
              "1 ulp toward zero %.4f, 1 ulp away %.4f, further %.4f (worst %.1f ulp), mean "
              "signed error %+.4f ulp (+ = away from zero)\n",
              D::name(), ct_name, what, fwd ? "fwd" : "dX ", M, K, N, (long long)red, same / n_all,
              toward / n_all, away / n_all, other / n_all, worst, signed_ulps / n_all);
  PROBE_CHECK(cudaFree(da));
  PROBE_CHECK(cudaFree(dw));
  PROBE_CHECK(cudaFree(dc));
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a timeout (under a sanitizer)
  cublasHandle_t h;
  PROBE_CUBLAS(cublasCreate(&h));
  PROBE_CUBLAS(cublasSetMathMode(
      h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  void* ws = nullptr;  // the model's workspace (gpu/device_context.cpp): split-K needs one
  const size_t ws_bytes = size_t(32) << 20;
  PROBE_CHECK(cudaMalloc(&ws, ws_bytes));
  PROBE_CUBLAS(cublasSetWorkspace(h, ws, ws_bytes));
  struct Shape {
    Role role;
    int M, K, N;
    const char* what;
  };
  // the f16 property's failing case (d_model 17, d_inner 34, dt_rank 1, d_state 64,
  // 1023 rows), then d_model 768 (d_inner 1536, dt_rank 48, xd 80, 16384 rows)
  const Shape shapes[] = {
      {Role::Forward, 1023, 17, 68, "in_proj (dm 17)"},
      {Role::Forward, 1023, 34, 129, "x_proj (dm 17)"},
      {Role::Forward, 1023, 34, 17, "out_proj (dm 17)"},
      {Role::InputGrad, 1023, 34, 17, "out_proj dX (dm 17)"},
      {Role::InputGrad, 1023, 1, 34, "dt_proj dX (dm 17)"},
      {Role::InputGrad, 1023, 34, 129, "x_proj dX (dm 17)"},
      {Role::InputGrad, 1023, 17, 68, "in_proj dX (dm 17)"},
      {Role::Forward, 16384, 1536, 80, "x_proj (dm 768)"},
      {Role::InputGrad, 16384, 48, 1536, "dt_proj dX (dm 768)"},
      {Role::InputGrad, 16384, 1536, 80, "x_proj dX (dm 768)"},
      {Role::InputGrad, 16384, 1536, 768, "out_proj dX (dm 768)"},
      // d_model 2048 (d_inner 4096, dt_rank 128, xd 160): F16DModel2048's d_param failure
      // (docs/performance-notes.md, "2026-12-06"); dY of the D-skip gradient comes from
      // out_proj dX (a sum of 2048), u from in_proj's x half (a sum of 2048)
      {Role::Forward, 16384, 2048, 8192, "in_proj (dm 2048)"},
      {Role::InputGrad, 16384, 4096, 2048, "out_proj dX (dm 2048)"},
  };
  for (const Shape& s : shapes) {
    probe<F16>(h, CUBLAS_COMPUTE_32F, "tensor", s.role, s.M, s.K, s.N, s.what);
    probe<F16>(h, CUBLAS_COMPUTE_32F_PEDANTIC, "pedantic", s.role, s.M, s.K, s.N, s.what);
    probe<BF16>(h, CUBLAS_COMPUTE_32F, "tensor", s.role, s.M, s.K, s.N, s.what);
    probe<BF16>(h, CUBLAS_COMPUTE_32F_PEDANTIC, "pedantic", s.role, s.M, s.K, s.N, s.what);
  }
  PROBE_CHECK(cudaFree(ws));
  PROBE_CUBLAS(cublasDestroy(h));
  return 0;
}
