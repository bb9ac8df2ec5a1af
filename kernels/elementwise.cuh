// elementwise.cuh — the element-wise and data-movement kernels of one Mamba-1
// layer and the backbone (docs/math.md F3/F4c/F4e/F6, B2/B4/B5/B7):
// split + gate SiLU, softplus with the fused f32 dt bias, gating, residual add,
// casts, column gather/scatter, last-timestep gather, a_neg = −exp(A_log).
//
// Templated on the storage type T (float, __nv_bfloat16, __half): typed loads
// upcast to f32, all math f32, one round-to-nearest-even store.
// Every launcher validates its arguments (ConfigError) and checks the launch.
// Rows are batch-major (r = b·T + t); all indices are 64-bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mc::kern {

// F3. P [R, 2·di] T -> xb [R, di] = P[:, 0:di], z [R, di] = P[:, di:2di], gs [R, di] = SiLU(z)
template <class T>
void split_gate_silu(const T* P, int64_t R, int64_t di, T* xb, T* z, T* gs, cudaStream_t stream);

// B7. dxb [R, di] T, dz [R, di] T -> dP [R, 2·di] T = [dxb | dz] (x half first)
template <class T>
void concat_halves(const T* dxb, const T* dz, int64_t R, int64_t di, T* dP, cudaStream_t stream);

// F4c. acc [R, di] f32 (the dt_proj GEMM result), bias [di] f32 ->
//   delta_raw [R, di] T = q(acc + bias)   (bias added in f32, one rounding; null = not
//                                          stored, the value is still formed and rounded)
//   delta     [R, di] T = q(softplus(delta_raw as stored))   (x > 20 ? x : log1p(exp(x)))
template <class T>
void softplus_bias_fwd(const float* acc, const float* bias, int64_t R, int64_t di, T* delta_raw,
                       T* delta, cudaStream_t stream);

// B4. delta_raw [n] T, d_delta [n] T -> d_delta_raw [n] T = d_delta·σ(delta_raw)
// (= d_delta when delta_raw > 20, as the oracle writes it).
template <class T>
void softplus_bwd(const T* delta_raw, const T* d_delta, int64_t n, T* d_delta_raw,
                  cudaStream_t stream);

// B4 without a stored Δraw. acc [R, di] f32 (the dt_proj GEMM result, formed again),
// bias [di] f32, d_delta [R, di] T -> d_delta_raw [R, di] T = d_delta·σ(q(acc + bias)):
// Δraw re-formed with softplus_bias_fwd's one rounding and used as softplus_bwd uses the
// stored one, so the result has the same bits as those two kernels in turn.
// d_delta_raw may be d_delta (in place: the training step's B4 writes dΔraw over dΔ).
template <class T>
void softplus_bias_bwd(const float* acc, const float* bias, int64_t R, int64_t di,
                       const T* d_delta, T* d_delta_raw, cudaStream_t stream);

// F4e. y [n] T, gs [n] T -> g [n] T = y·gs
template <class T>
void gating_fwd(const T* y, const T* gs, int64_t n, T* g, cudaStream_t stream);

// B2. dG, y, z (pre-SiLU gate), gs [n] T -> dY [n] T = dG·gs, dz [n] T = dG·y·SiLU'(z)
template <class T>
void gating_bwd(const T* dG, const T* y, const T* z, const T* gs, int64_t n, T* dY, T* dz,
                cudaStream_t stream);

// F3 + F4e fused. y [R, di] T, z [R rows, ld_z] T (the z half of the in_proj
// output: ld_z = 2·di) -> g [R rows, ld_g] T = q(y·q(SiLU(z))), rounded exactly as
// split_gate_silu followed by gating_fwd (so neither gs nor a copy of z is stored).
template <class T>
void gate_fwd(const T* y, const T* z, int64_t ld_z, int64_t R, int64_t di, T* g, int64_t ld_g,
              cudaStream_t stream);

// B2 fused. dG, y [R, di] T, z [R rows, ld_z] T -> dY [R, di] T = q(dG·gs),
// dz [R rows, ld_dz] T = q(dG·y·SiLU'(z)) with gs = q(SiLU(z)) recomputed — the
// values of gating_bwd, with dz written straight into the in_proj gradient. dY may
// alias y (written over it element by element).
template <class T>
void gate_bwd(const T* dG, const T* y, const T* z, int64_t ld_z, int64_t R, int64_t di, T* dY,
              T* dz, int64_t ld_dz, cudaStream_t stream);

// F6 (and B8's residual path). a [n] f32, b [n] T -> out [n] f32 = a + f32(b); out may alias a.
template <class T>
void residual_add(const float* a, const T* b, int64_t n, float* out, cudaStream_t stream);

// B5. a [n] T, b [n] T -> a = q(a + b)
template <class T>
void add_inplace(T* a, const T* b, int64_t n, cudaStream_t stream);

// Biased GEMM epilogue (input_proj): y [M, N] f32 (GEMM result, in place),
// bias [N] f32 -> y = f32(q(y + bias)): the bias is added in f32 before the
// one rounding to T (identity rounding for float).
template <class T>
void bias_add_round(float* y, const float* bias, int64_t M, int64_t N, cudaStream_t stream);

// Casts with round-to-nearest-even. src [n] -> dst [n].
template <class T>
void cast_from_f32(const float* src, int64_t n, T* dst, cudaStream_t stream);
template <class T>
void cast_to_f32(const T* src, int64_t n, float* dst, cudaStream_t stream);

// src [R, ld] columns [off, off+w) -> dst [R, w]
template <class T>
void gather_cols(const T* src, int64_t R, int64_t ld, int64_t off, int64_t w, T* dst,
                 cudaStream_t stream);
// dst [R, ld] columns [off, off+w) = q(dst + src), src [R, w]
template <class T>
void scatter_add_cols(const T* src, int64_t R, int64_t ld, int64_t off, int64_t w, T* dst,
                      cudaStream_t stream);

// B3/B4 assembly of the x_proj output gradient in one pass (equal to zeroing
// d_xdbl and scatter-adding the three blocks):
//   d_dt_in [R, dr] T, dB [R, ds] f32, dC [R, ds] f32 -> d_xdbl [R, dr+2·ds] T = [d_dt_in | q(dB) | q(dC)]
template <class T>
void assemble_dxdbl(const T* d_dt_in, const float* dB, const float* dC, int64_t R, int64_t dr,
                    int64_t ds, T* d_xdbl, cudaStream_t stream);

// Target forward. src [B·T, D] T -> dst [B, D] f32 = src[b·T + T−1, :]
template <class T>
void gather_last_timestep(const T* src, int64_t B, int64_t seq_len, int64_t D, float* dst,
                          cudaStream_t stream);

// a_log [n] f32 -> a_neg [n] f32 = −exp(a_log), with expf (within 2 ulp), not mamba-rs's
// exp2f(x·log2e), whose rounded argument adds up to |x|·2^-24 relative error.
void exp_negate(const float* a_log, int64_t n, float* a_neg, cudaStream_t stream);

}  // namespace mc::kern
