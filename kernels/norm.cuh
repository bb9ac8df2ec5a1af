// norm.cuh — RMSNorm forward and backward (docs/math.md F1, norm_f, B8).
// The residual stream x and the saved rms are always f32; the normalised
// output (forward) and the incoming gradient (backward) have the storage type
// T (float, __nv_bfloat16, __half). The norm-weight gradient goes through
// per-row partials and the fixed-order reduce_sum_axis0 (no atomics).
//
// No finite guard: a non-finite or tiny rms is NOT replaced by 1.0 (mamba-rs
// does on the GPU); the oracle has no guard, so the math is
// identical and the non-finite detector reports the step instead.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mc::kern {

// x [R, D] f32, g [D] f32 -> y [R, D] T = (x·inv)·g, rms [R] f32 = sqrt(mean(x²) + eps)
// (inv = 1/rms). One warp per row; the sum of squares in a fixed order (lane-strided
// partials, then an xor butterfly over the 32 lanes).
template <class T>
void rmsnorm_fwd(const float* x, const float* g, int64_t R, int64_t D, double eps, T* y,
                 float* rms, cudaStream_t stream);

// Floats of scratch rmsnorm_bwd needs: the [R, D] per-row partials dy·x̂ plus
// the column-sum scratch.
size_t rmsnorm_bwd_scratch_floats(int64_t R, int64_t D);

// dy [R, D] T, x [R, D] f32, g [D] f32, rms [R] f32 ->
//   dx [R, D] f32 (=)  dx_i = (g_i·dy_i − x̂_i·m)·inv,  m = (1/D)·Σ_i dy_i·x̂_i·g_i,  x̂ = x·inv
//   dg [D] f32 (+=)    Σ_r dy·x̂, through partials [R, D] and reduce_sum_axis0
// scratch: rmsnorm_bwd_scratch_floats(R, D) floats.
template <class T>
void rmsnorm_bwd(const T* dy, const float* x, const float* g, const float* rms, int64_t R,
                 int64_t D, float* dx, float* dg, float* scratch, cudaStream_t stream);

// B8 with its residual in one pass: dH [R, D] f32 (+=) the dx of rmsnorm_bwd —
// dH_i ← dH_i + dx_i as one f32 add of the rounded dx_i, the same values as
// rmsnorm_bwd into a temporary followed by residual_add, without the [R, D]
// temporary. dg and scratch as for rmsnorm_bwd.
template <class T>
void rmsnorm_bwd_residual(const T* dy, const float* x, const float* g, const float* rms,
                          int64_t R, int64_t D, float* dH, float* dg, float* scratch,
                          cudaStream_t stream);

}  // namespace mc::kern
