// typed.cuh — device-side helpers shared by the non-scan kernels: the storage
// type promotion rule (typed loads upcast to f32, all math in f32, one
// round-to-nearest-even downcast on store), the activation functions written
// as the oracle writes them (reference_cpu/steps.cpp), and 64-bit grid-stride
// indexing.
//
// Included only by kernels/*.cu (device code). No fast-math anywhere, so the
// maths functions have the accuracy the CUDA C++ Programming Guide documents
// for the precise versions: expf within 2 ulp, log1pf within 1 ulp, sqrtf and
// division correctly rounded (-prec-sqrt / -prec-div, the defaults). expf and
// log1pf are not correctly rounded and not the host libm's, so the kernels
// agree with the float oracle to rounding error, not bitwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mc::kern::dev {

// ---- promotion rule ---------------------------------------------------------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);  // RN (a truncating cast biases every stored value)
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// The value a T store of x reads back as (identity for float).
template <class T>
__device__ __forceinline__ float round_f32(float x) {
  return to_f32(from_f32<T>(x));
}

// ---- activations (docs/math.md#notation) ------------------------------------
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
// SiLU'(x) = σ(x)·(1 + x·(1 − σ(x)))
__device__ __forceinline__ float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}
// softplus with mamba's strict threshold: x > 20 ? x : log1p(exp(x))
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// ---- F4c / B4: Δraw and the softplus gradient -----------------------------------
// Shared by every kernel that forms Δ or dΔraw (elementwise.cu, dt_softplus.cu), so the
// fused forms cannot drift from the unfused ones.
// Δraw = q(acc + bias): the bias added in f32, one rounding (F4c, and B4 re-forming it)
template <class T>
__device__ __forceinline__ T delta_raw_of(float acc, float bias) {
  return from_f32<T>(acc + bias);
}

// dΔraw = q(dΔ·σ(Δraw)), dΔ itself where Δraw > 20 (softplus's identity branch)
template <class T>
__device__ __forceinline__ T softplus_grad(float delta_raw, float d_delta) {
  return from_f32<T>(delta_raw > 20.0f ? d_delta : d_delta * sigmoid(delta_raw));
}

// ---- asynchronous global -> shared copies (cp.async, sm_80+) ---------------------
// 16 bytes per call, both addresses 16-byte aligned; wait_all waits for the calling
// thread's copies (a __syncthreads then publishes them to the block).
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gsrc) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gsrc) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// ---- indexing ------------------------------------------------------------------
// Global thread index and grid stride, 64-bit (n may exceed 2^31).
__device__ __forceinline__ int64_t global_index() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

}  // namespace mc::kern::dev
