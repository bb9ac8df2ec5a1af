// dt_softplus.cuh — the dt_proj GEMM with its softplus as one tensor-core kernel
// (bf16/f16 storage, the tensor-core GEMM tier; docs/math.md F4c and B4).
//
// Why: on the cuBLAS path F4c writes the f32 GEMM result acc [R, d_inner] (4 bytes
// per element) and a second kernel reads it back to add the bias and apply the
// softplus; B4 forms acc again and reads it once more. The GEMM itself is tiny
// (K = dt_rank, 48 at d_model 768), so acc's round trip through HBM is most of the
// cost. Here each block forms a [64, 128] tile of acc on the tensor cores (WMMA,
// exact products, f32 accumulation, a fixed order of k-steps), keeps it in shared
// memory, and applies the same epilogue helpers the unfused kernels use
// (kernels/typed.cuh: delta_raw_of, softplus, softplus_grad), so every rounding
// point is the one the unfused path has. acc never reaches HBM.
//
// The bits of acc are those of this kernel's accumulation, not cuBLAS's: the fused
// path is judged against the f64 oracle by the k-rule (StepParity.DtProjSoftplus*),
// like any tensor-core GEMM, and is reproducible run to run (fixed tiles and order).
//
// Opt-in (RunOptions::fused_dt_softplus), not the default: measured on the H200 it takes
// 76 us per call at the bf16 768/2048 step against 30 + 49 us for cuBLAS + softplus, a
// tie for the step, and 4 % slower at dt_rank 128. Both forms are bound by the precise
// softplus / sigmoid arithmetic (issue-bound, DRAM at 7 %), not by acc's bytes, so the
// saved round trip does not show (docs/performance-notes.md, "dt_proj and its softplus").
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mc::kern {

// Largest dt_rank the kernel takes (its K tile lives in shared memory whole).
constexpr int64_t kDtSoftplusMaxRank = 256;

// Rows are batch-major (r = b·T + t), all row-major.
//   dt_in   [R, dr] T, row stride ld_in >= dr (read in place from xdbl [R, xd])
//   w       [dr, di] T   (the typed dt_proj weight, GEMM layout W [K, N])
//   bias    [di] f32
//   d_delta [R, di] T    backward only (null in the forward)
//   out     [R, di] T    forward: Δ = q(softplus(q(dt_in·w + bias)))
//                        backward: dΔraw = q(d_delta·σ(q(dt_in·w + bias))); out may be
//                        d_delta itself (each element is read, then written, by one thread)
template <class T>
struct DtSoftplusParams {
  const T* dt_in = nullptr;
  int64_t ld_in = 0;
  const T* w = nullptr;
  const float* bias = nullptr;
  int64_t R = 0, dr = 0, di = 0;
  const T* d_delta = nullptr;
  T* out = nullptr;
};

// Whether the fused kernel takes this dt_rank (1 <= dr <= kDtSoftplusMaxRank).
inline bool dt_softplus_supported(int64_t dr) { return dr >= 1 && dr <= kDtSoftplusMaxRank; }

// F4c: out = Δ. T is __nv_bfloat16 or __half; a bad field is a ConfigError.
template <class T>
void dt_softplus_fwd(const DtSoftplusParams<T>& p, cudaStream_t stream);

// B4: out = dΔraw (p.d_delta required).
template <class T>
void dt_softplus_bwd(const DtSoftplusParams<T>& p, cudaStream_t stream);

}  // namespace mc::kern
