// scan/device.cuh — device helpers of the checkpointed scan kernels: the two
// exponentials (ExpMath), vector loads of S consecutive states, lane-group
// reductions, and the activation functions of the fused epilogues. All math is
// f32; typed loads upcast, typed stores round to nearest even once.
//
// Emulation: under MC_SCAN_HOST_EMULATION (a host-compiler build that runs the
// kernels on fibers, see validation/emulation) the shuffles and __syncwarp are
// provided by the emulator; they are only ever called by every thread of a
// block in the same order, which is what the emulator requires. ex2.approx has
// no host twin: the emulator computes exp2f, so only ExpMath::Accurate is
// bit-comparable between device and emulation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kernels/scan/scan.hpp"
#include "kernels/scan/seed_common.cuh"
#include "kernels/scan/exp_math.cuh"

namespace mc::kern::scan_detail {

// ---- exponentials ---------------------------------------------------------------
// The kernels compute dA = exp(δ·A) as expm<E>(δ * a) where a = exp_coef<E>(A).
template <scan::ExpMath E>
__host__ __device__ __forceinline__ float exp_coef(float A) {
  if constexpr (E == scan::ExpMath::Hardware)
    return A * 1.44269504088896341f;  // A·log2(e), rounded once
  else
    return A;
}

// 1 / exp_coef(1): scales a sum of exp_coef(A)·x back to a sum of A·x.
template <scan::ExpMath E>
__host__ __device__ __forceinline__ constexpr float exp_coef_inverse() {
  return E == scan::ExpMath::Hardware ? 0.693147180559945309f : 1.0f;
}

__device__ __forceinline__ float ex2_approx(float x) {
#if defined(MC_SCAN_HOST_EMULATION)
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

template <scan::ExpMath E>
__device__ __forceinline__ float expm(float x) {
  if constexpr (E == scan::ExpMath::Hardware)
    return ex2_approx(x);
  else
    return scan_expf(x);
}

// ---- lane groups --------------------------------------------------------------------
// A channel is served by `L` consecutive lanes of one warp (L a power of two <= 32).
__device__ __forceinline__ float shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ float shfl_idx(float v, int src_lane) {
  return __shfl_sync(0xffffffffu, v, src_lane);
}
// Σ over the L lanes of the group; every lane gets the same bits (ctest
// ScanEmulation.ThreadOrderRace: the lanes' copies land in one order or the other; the xor
// butterfly adds the same two operands on both partners, and + commutes).
// Unrolled over the five possible levels, each one predicated on L (uniform).
__device__ __forceinline__ float group_sum(float v, int L) {
#pragma unroll
  for (int m = 1; m < 32; m <<= 1)
    if (m < L) v += shfl_xor(v, m);
  return v;
}

// ---- typed vector loads -------------------------------------------------------------
// S consecutive elements of a typed row starting at `p` (vector loads when `vec`:
// the launcher checked alignment and that no state is masked), else scalar loads
// of the first `valid` of them, zeros after.
template <class T, int S>
__device__ __forceinline__ void load_vec(const T* p, bool vec, int valid, float (&v)[S]);

template <int S>
__device__ __forceinline__ void load_vec(const float* p, bool vec, int valid, float (&v)[S]) {
  if (vec) {
#pragma unroll
    for (int q = 0; q < S / 4; ++q) {
      const float4 x = __ldg(reinterpret_cast<const float4*>(p) + q);
      v[4 * q] = x.x;
      v[4 * q + 1] = x.y;
      v[4 * q + 2] = x.z;
      v[4 * q + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int s = 0; s < S; ++s) v[s] = s < valid ? __ldg(p + s) : 0.f;
  }
}

template <class H>
__device__ __forceinline__ float half_bits_to_f32(unsigned short bits);
template <>
__device__ __forceinline__ float half_bits_to_f32<__nv_bfloat16>(unsigned short bits) {
  const uint32_t w = uint32_t(bits) << 16;  // bf16 -> f32 is exact: the high half
  float f;
  memcpy(&f, &w, sizeof f);
  return f;
}
template <>
__device__ __forceinline__ float half_bits_to_f32<__half>(unsigned short bits) {
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}

template <class H, int S>
__device__ __forceinline__ void load_vec_half(const H* p, bool vec, int valid, float (&v)[S]) {
  if (vec) {  // S halves = S/4 8-byte words
#pragma unroll
    for (int q = 0; q < S / 4; ++q) {
      const uint2 w = __ldg(reinterpret_cast<const uint2*>(p) + q);
      v[4 * q] = half_bits_to_f32<H>((unsigned short)(w.x & 0xffffu));
      v[4 * q + 1] = half_bits_to_f32<H>((unsigned short)(w.x >> 16));
      v[4 * q + 2] = half_bits_to_f32<H>((unsigned short)(w.y & 0xffffu));
      v[4 * q + 3] = half_bits_to_f32<H>((unsigned short)(w.y >> 16));
    }
  } else {
#pragma unroll
    for (int s = 0; s < S; ++s) v[s] = s < valid ? load_f32(p + s) : 0.f;
  }
}
template <int S>
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, bool vec, int valid,
                                         float (&v)[S]) {
  load_vec_half<__nv_bfloat16, S>(p, vec, valid, v);
}
template <int S>
__device__ __forceinline__ void load_vec(const __half* p, bool vec, int valid, float (&v)[S]) {
  load_vec_half<__half, S>(p, vec, valid, v);
}

// The same with the group width a compile-time constant: no predicated levels.
template <int L>
__device__ __forceinline__ float group_sum_c(float v) {
#pragma unroll
  for (int m = 1; m < L; m <<= 1) v += shfl_xor(v, m);
  return v;
}

// NV values of each lane summed over the lanes that differ from it in the mask bits
// MHI, MHI/2, .., MLO (xor levels, highest first) as a reduce-scatter: at each level a
// lane keeps the half of its values that its mask bit selects (the upper half when set)
// and adds the partner's copy of that half (keep + received). After the levels a lane
// holds NV >> levels sums in v[0 ..): those of the entries its mask bits select. A fixed
// butterfly order, so the same inputs give the same bits on every run. (One level per
// template instance, so every index is a compile-time constant and the array stays in
// registers.)
template <int NV, int H, int M, int MLO>
__device__ __forceinline__ void reduce_scatter_level(float (&v)[NV], int lane) {
  if constexpr (M >= MLO) {
    const bool up = (lane & M) != 0;
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const float send = up ? v[i] : v[H + i];
      const float keep = up ? v[H + i] : v[i];
      v[i] = keep + shfl_xor(send, M);
    }
    reduce_scatter_level<NV, H / 2, M / 2, MLO>(v, lane);
  }
}
template <int NV, int MHI, int MLO>
__device__ __forceinline__ void reduce_scatter_masks(float (&v)[NV], int lane) {
  reduce_scatter_level<NV, NV / 2, MHI, MLO>(v, lane);
}

// Sum over the CW = 32/L channel groups of a warp (lane bits log2 L .. 4) as a
// reduce-scatter: lane (wch = lane / L, j) enters with NV values and leaves with
// R = NV / CW sums in v[0 .. R): the sums over the warp's CW channels of the entry
// values wch·R .. wch·R + R - 1 (xor levels from mask 16 down to L).
template <int L, int NV>
__device__ __forceinline__ void reduce_scatter_channels(float (&v)[NV], int lane) {
  static_assert(NV * L >= 32, "a lane's values cover the warp's channel groups");
  reduce_scatter_masks<NV, 16, L>(v, lane);
}

// ---- asynchronous global -> shared copies (cp.async, sm_80+) -------------------------
// 16 bytes per call; both addresses 16-byte aligned. commit closes a group, wait_all
// waits for every group of the calling thread (a __syncthreads then publishes them).
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gsrc) {
#if defined(MC_SCAN_HOST_EMULATION)
  memcpy(smem_dst, gsrc, 16);
#else
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gsrc) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if !defined(MC_SCAN_HOST_EMULATION)
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if !defined(MC_SCAN_HOST_EMULATION)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// ---- shared-memory element access ----------------------------------------------------
__device__ __forceinline__ float smem_f32(const float& x) { return x; }
__device__ __forceinline__ float smem_f32(const __nv_bfloat16& x) { return __bfloat162float(x); }
__device__ __forceinline__ float smem_f32(const __half& x) { return __half2float(x); }
template <class T>
__host__ __device__ __forceinline__ T zero_elem() {
  return T(0.0f);
}

// S consecutive elements of a shared-memory row (S a multiple of 4; the row is
// 4-element aligned), upcast to f32, always as vectors.
template <int S>
__device__ __forceinline__ void smem_vec(const float* p, float (&v)[S]) {
#pragma unroll
  for (int q = 0; q < S / 4; ++q) {
    const float4 x = reinterpret_cast<const float4*>(p)[q];
    v[4 * q] = x.x;
    v[4 * q + 1] = x.y;
    v[4 * q + 2] = x.z;
    v[4 * q + 3] = x.w;
  }
}
template <class H, int S>
__device__ __forceinline__ void smem_vec_half(const H* p, float (&v)[S]) {
#pragma unroll
  for (int q = 0; q < S / 4; ++q) {
    const uint2 w = reinterpret_cast<const uint2*>(p)[q];
    v[4 * q] = half_bits_to_f32<H>((unsigned short)(w.x & 0xffffu));
    v[4 * q + 1] = half_bits_to_f32<H>((unsigned short)(w.x >> 16));
    v[4 * q + 2] = half_bits_to_f32<H>((unsigned short)(w.y & 0xffffu));
    v[4 * q + 3] = half_bits_to_f32<H>((unsigned short)(w.y >> 16));
  }
}
template <int S>
__device__ __forceinline__ void smem_vec(const __nv_bfloat16* p, float (&v)[S]) {
  smem_vec_half<__nv_bfloat16, S>(p, v);
}
template <int S>
__device__ __forceinline__ void smem_vec(const __half* p, float (&v)[S]) {
  smem_vec_half<__half, S>(p, v);
}

// This thread's share of a block-cooperative copy of [rows][cols] tiles in 16-byte
// units, computed once per kernel (the divisions stay out of the chunk loop): upr
// units per row; when upr divides the block size every thread keeps one unit column
// q and walks rows r0, r0 + rstep, ...; upr = 0 means no such map (the copy falls
// back to the general loop).
struct UnitMap {
  int upr = 0, q = 0, r0 = 0, rstep = 0;
};
template <class T>
__device__ __forceinline__ UnitMap unit_map(int cols) {
  constexpr int kPer16 = int(16 / sizeof(T));
  UnitMap m;
  const int nt = int(blockDim.x), tid = int(threadIdx.x);
  if (cols % kPer16 != 0) return m;
  const int upr = cols / kPer16;
  if (upr == 0 || nt % upr != 0) return m;
  m.upr = upr;
  m.q = tid % upr;
  m.r0 = tid / upr;
  m.rstep = nt / upr;
  return m;
}

// A [rows][cols] tile of a row-strided global view into shared memory [rows][dst_ld]:
// rows >= rows_valid and columns >= cols_valid are zero-filled. With `async16` (a
// full tile whose global rows are 16-byte aligned and whose width is a multiple
// of 16 bytes) through cp.async, else with plain loads. Every thread of the block
// calls it (block-cooperative); the copies are complete after cp_async_wait_all()
// and visible after the next __syncthreads(). `um` is unit_map<T>(cols).
template <class T>
__device__ __forceinline__ void stage_tile(T* dst, int dst_ld, const T* src, int64_t ld, int rows,
                                           int cols, int rows_valid, int cols_valid,
                                           bool async16, const UnitMap& um) {
  constexpr int kPer16 = int(16 / sizeof(T));
  const int tid = int(threadIdx.x), nt = int(blockDim.x);
  if (async16 && rows_valid == rows && cols_valid == cols) {
    if (um.upr > 0) {  // each thread keeps one unit column: no division per unit
      const T* s = src + int64_t(um.r0) * ld + um.q * kPer16;
      const int64_t sstep = int64_t(um.rstep) * ld;
      for (int r = um.r0; r < rows; r += um.rstep, s += sstep)
        cp_async16(dst + r * dst_ld + um.q * kPer16, s);
    } else {
      const int upr = cols / kPer16;  // 16-byte units per row
      for (int u = tid; u < rows * upr; u += nt) {
        const int r = u / upr, q = u - r * upr;
        cp_async16(dst + r * dst_ld + q * kPer16, src + r * ld + q * kPer16);
      }
    }
  } else {
    for (int e = tid; e < rows * cols; e += nt) {
      const int r = e / cols, c = e - r * cols;
      dst[r * dst_ld + c] = (r < rows_valid && c < cols_valid) ? src[r * ld + c] : zero_elem<T>();
    }
  }
}

// ---- activations of the fused epilogues (the same forms as kernels/typed.cuh) ---------
__device__ __forceinline__ float act_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float act_silu(float x) { return x * act_sigmoid(x); }
__device__ __forceinline__ float act_silu_grad(float x) {
  const float s = act_sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}
__device__ __forceinline__ float act_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

}  // namespace mc::kern::scan_detail
