// initcheck_cublas_probe.cu — a stand-alone probe for compute-sanitizer's initcheck:
// does a kernel reading the output of a cuBLAS GEMM count as reading uninitialized
// memory? It uses cuBLAS and one kernel of its own, nothing of mambacheck, so a
// report under initcheck says something about the tool and the library, not about
// our kernels. The model path reads GEMM outputs the same way (the f32 input_proj
// result, then its bias epilogue).
//
// For each compute type (CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_COMPUTE_32F) and each
// shape: A [M, K] bf16 and B [K, N] bf16 filled by cudaMemset (initialized), C
// [M, N] f32 freshly allocated and never written but by cublasGemmEx; then
// sum_rows_kernel reads every element of C. The probe checks the values itself
// (every A, B element is 1.0 in bf16 -> every C element is K) and exits 1 on a
// wrong value. Run it under `compute-sanitizer --tool initcheck`: zero errors
// means the tool sees cuBLAS's writes for that compute type.
//
// usage: initcheck_cublas_probe [pedantic|tensor-core|both]   (default both)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "validation/gpu/probe_check.hpp"

namespace {


// C [M, N] f32 row-major -> out [M] = Σ_n C[m, n] (n ascending)
__global__ void sum_rows_kernel(const float* c, int M, int N, float* out) {
  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M) return;
  float s = 0.0f;
  for (int n = 0; n < N; ++n) s += c[size_t(m) * N + n];
  out[m] = s;
}

// One GEMM C = A·B (row-major, as the model calls it: column-major C^T = B^T·A^T)
// and one read of C. Returns 0 when every row sum equals N·K.
int probe(cublasHandle_t h, cublasComputeType_t ct, const char* name, int M, int N, int K) {
  __nv_bfloat16 *a = nullptr, *b = nullptr;
  float *c = nullptr, *out = nullptr;
  PROBE_CHECK(cudaMalloc(&a, size_t(M) * K * sizeof(__nv_bfloat16)));
  PROBE_CHECK(cudaMalloc(&b, size_t(K) * N * sizeof(__nv_bfloat16)));
  PROBE_CHECK(cudaMalloc(&c, size_t(M) * N * sizeof(float)));
  PROBE_CHECK(cudaMalloc(&out, size_t(M) * sizeof(float)));
  // 0x3F80 is 1.0 in bf16: memset the two bytes of every element
  std::vector<unsigned short> ones(size_t(M > K ? M : K) * (N > K ? N : K), 0x3F80);
  PROBE_CHECK(cudaMemcpy(a, ones.data(), size_t(M) * K * 2, cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMemcpy(b, ones.data(), size_t(K) * N * 2, cudaMemcpyHostToDevice));
  const float alpha = 1.0f, beta = 0.0f;
  PROBE_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, b, CUDA_R_16BF, N, a,
                            CUDA_R_16BF, K, &beta, c, CUDA_R_32F, N, ct, CUBLAS_GEMM_DEFAULT));
  sum_rows_kernel<<<(M + 127) / 128, 128>>>(c, M, N, out);
  PROBE_CHECK(cudaGetLastError());
  std::vector<float> host(static_cast<size_t>(M));
  PROBE_CHECK(cudaMemcpy(host.data(), out, size_t(M) * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int m = 0; m < M; ++m)
    if (host[size_t(m)] != float(N) * float(K)) ++bad;
  std::printf("probe %-12s M %5d N %5d K %5d: %s\n", name, M, N, K,
              bad ? "WRONG VALUES" : "values right");
  PROBE_CHECK(cudaFree(a));
  PROBE_CHECK(cudaFree(b));
  PROBE_CHECK(cudaFree(c));
  PROBE_CHECK(cudaFree(out));
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a timeout (under a sanitizer)
  const char* which = argc > 1 ? argv[1] : "both";
  const bool ped = !std::strcmp(which, "pedantic") || !std::strcmp(which, "both");
  const bool tc = !std::strcmp(which, "tensor-core") || !std::strcmp(which, "both");
  if (!ped && !tc) {
    std::fprintf(stderr, "usage: %s [pedantic|tensor-core|both] (got '%s')\n", argv[0], which);
    return 2;
  }
  cublasHandle_t h;
  PROBE_CUBLAS(cublasCreate(&h));
  // the CLI's tiny shape (B·T 80 rows, d_model 32) and a model-sized one
  const int shapes[][3] = {{80, 32, 32}, {16384, 768, 768}};
  int fails = 0;
  for (const auto& s : shapes) {
    if (ped) fails += probe(h, CUBLAS_COMPUTE_32F_PEDANTIC, "pedantic", s[0], s[1], s[2]);
    if (tc) fails += probe(h, CUBLAS_COMPUTE_32F, "tensor-core", s[0], s[1], s[2]);
  }
  PROBE_CUBLAS(cublasDestroy(h));
  return fails ? 1 : 0;
}
