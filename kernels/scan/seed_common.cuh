// scan_common.cuh — internals shared by the selective-scan kernels (scan.cuh):
// typed load/store (upcast to f32 on load, one round-to-nearest-even on
// store), 64-bit index helpers for every scan tensor, the launch geometry of
// the chunked parallel kernels, the scratch layout of the backward, and the
// fixed-order reduction launchers. Included by kernels/scan_*.cu only.
//
// Geometry of the parallel kernels (one block per (b, d); docs in scan_fwd_kernels.cuh):
//   sw      lanes that share one time segment, one lane per state n (n = j, j+sw, ...);
//           sw = min(32, next_pow2(ds)), so a lane group never straddles a warp
//   groups  time segments per chunk; threads = groups * sw
//   chunk   timesteps per chunk = groups * kItems (each thread owns kItems consecutive t)
//   dt      backward only: consecutive channels one block runs (bwd_par_geom)
// It is a pure function of the shape — fixed launch geometry is part of the
// determinism contract (spec §5.1.7): same shape, same summation order, same bits
// (validation/gpu/test_determinism.cpp, test_scan_parity.cpp's reruns).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda_check.hpp"
#include "kernels/scan/seed.hpp"

// ---- launch seam ---------------------------------------------------------------------
// Every scan kernel launch goes through scan_detail::launch(). Under nvcc it is a
// plain <<<grid, block, smem, stream>>> launch. A host-compiler build that defines
// MC_SCAN_HOST_EMULATION gets the CPU implementation of the test tree's emulator
// instead (validation/emulation/emulation.cuh, with the CUDA built-ins the kernels
// use), which that build force-includes ahead of this file: it runs the unmodified
// kernels on the CPU, one fiber per CUDA thread — to exercise kernel logic,
// geometry and barrier placement on machines without a GPU, and to produce the
// bits the device must match (validation/gpu/test_scan_emulation_bits.cpp).
#if defined(MC_SCAN_HOST_EMULATION)
#if !defined(MC_SCAN_EMULATION_LOADED)
#error "MC_SCAN_HOST_EMULATION builds force-include validation/emulation/emulation.cuh (see validation/emulation/CMakeLists.txt)"
#endif
#else
namespace mc::kern::scan_detail {
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
            const A&... args) {
  kernel<<<grid, block, smem_bytes, stream>>>(args...);
}
}  // namespace mc::kern::scan_detail
#endif

namespace mc::kern::scan_detail {

// ---- constants -----------------------------------------------------------------
constexpr int kItems = 12;         // consecutive timesteps per thread per chunk (parallel)
constexpr int kItemStride = 16;    // smem slots per segment in the per-lane partial arrays
constexpr int kMaxParThreads = 256;
constexpr int kMinParBlocks = 2;   // launch bounds: <= 128 registers, no spills at kItems = 12
constexpr int kSeqThreads = 128;   // block size of the sequential kernels
constexpr int kMinSeqBlocks = 2;   // launch bounds: lets ptxas keep the 64-entry state arrays unspilled
constexpr int kSeqMaxState = 64;   // = Limits::kMaxSeqScanDState (register arrays)
static_assert(kSeqMaxState == int(Limits::kMaxSeqScanDState), "sequential state bound");

// ---- dtype helpers (spec §6: typed loads upcast, all math f32, RN stores) -------
__device__ __forceinline__ float load_f32(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p) {
  return __bfloat162float(__ldg(p));
}
__device__ __forceinline__ float load_f32(const __half* p) { return __half2float(__ldg(p)); }

__device__ __forceinline__ void store_rn(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_rn(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store_rn(__half* p, float x) { *p = __float2half_rn(x); }

template <class T>
constexpr const char* dtype_name();
template <>
constexpr const char* dtype_name<float>() { return "f32"; }
template <>
constexpr const char* dtype_name<__nv_bfloat16>() { return "bf16"; }
template <>
constexpr const char* dtype_name<__half>() { return "f16"; }

// ---- 64-bit indexing of the scan tensors ---------------------------------------
// [B, T, di] activations (delta, u, y, dy, d_delta, du)
__host__ __device__ __forceinline__ int64_t act_idx(const ScanShape& s, int64_t b, int64_t t,
                                                    int64_t d) {
  return (b * s.T + t) * s.di + d;
}
// [B*T rows, ld_bc] Bm / Cm
__host__ __device__ __forceinline__ int64_t bc_idx(const ScanShape& s, int64_t b, int64_t t,
                                                   int64_t n) {
  return (b * s.T + t) * s.ld_bc + n;
}
// [B, T+1, di, ds] h_saved; tp = 0 is the initial state, tp = t+1 the state after step t
__host__ __device__ __forceinline__ int64_t hs_idx(const ScanShape& s, int64_t b, int64_t tp,
                                                   int64_t d, int64_t n) {
  return ((b * (s.T + 1) + tp) * s.di + d) * s.ds + n;
}
// [B, T, ngrp, ds] dB / dC partials of the backward: one per (b, t, channel group,
// n); a group is one channel (ngrp = di) or dt consecutive channels (ngrp = ceil(di/dt))
__host__ __device__ __forceinline__ int64_t part_idx(const ScanShape& s, int64_t ngrp, int64_t b,
                                                     int64_t t, int64_t grp, int64_t n) {
  return ((b * s.T + t) * ngrp + grp) * s.ds + n;
}

// ---- kernel arguments --------------------------------------------------------------
template <class T>
struct FwdArgs {
  ScanShape s;
  const T* delta;      // [B, T, di]
  const T* u;          // [B, T, di]
  const T* Bm;         // [B*T, ld_bc]
  const T* Cm;         // [B*T, ld_bc]
  const float* a_neg;  // [di, ds]
  const float* D;      // [di]
  float* h;            // [B, di, ds] in: initial, out: final
  float* h_saved;      // [B, T+1, di, ds] or nullptr (nosave instantiation)
  T* y;                // [B, T, di]
};

template <class T>
struct BwdArgs {
  ScanShape s;
  const T* delta;           // [B, T, di]
  const T* u;               // [B, T, di]
  const T* Bm;              // [B*T, ld_bc]
  const T* Cm;              // [B*T, ld_bc]
  const float* a_neg;       // [di, ds]
  const float* D;           // [di]
  const float* h_saved;     // [B, T+1, di, ds]
  const T* dy;              // [B, T, di]
  const float* dh_final;    // [B, di, ds] or nullptr (= 0)
  T* d_delta;               // [B, T, di] (=)
  T* du;                    // [B, T, di] (=)
  float* dB_part;           // [B, T, ngrp, ds] (=) scratch
  float* dC_part;           // [B, T, ngrp, ds] (=) scratch
  float* dAlog_part;        // [B, di, ds] (=) scratch
  float* dD_part;           // [B, di] (=) scratch
  float* dh0;               // [B, di, ds] (=) or nullptr
};

// ---- parallel geometry -----------------------------------------------------------
struct ParGeom {
  int sw;           // lanes per time segment (power of two <= 32)
  int groups;       // time segments per chunk
  int threads;      // = groups * sw
  int chunk;        // timesteps per chunk = groups * kItems
  int64_t nchunks;  // ceil(T / chunk)
  int dt = 1;       // backward: channels per block (consecutive d), see bwd_par_geom
};

inline ParGeom par_geom(int64_t T, int64_t ds) {
  int sw = 1;
  while (sw < ds && sw < 32) sw *= 2;
  // 16 segments of kItems steps per chunk where the block stays within 64..256
  // threads; tiny d_state gets more segments per chunk instead of tiny blocks.
  int threads = sw * 16;
  if (threads < 64) threads = 64;
  if (threads > kMaxParThreads) threads = kMaxParThreads;
  ParGeom g;
  g.sw = sw;
  g.threads = threads;
  g.groups = threads / sw;
  g.chunk = g.groups * kItems;
  g.nchunks = (T + g.chunk - 1) / g.chunk;
  return g;
}

// Row length of the per-lane partial arrays [sw][part_ld]: segment g, step k sits
// at g*kItemStride + k; the +1 makes the row stride odd, so a warp writing
// (lane j, segment g) pairs and a warp reading one row are both bank-conflict free.
__host__ __device__ inline int part_ld(const ParGeom& g) { return g.groups * kItemStride + 1; }

// Shared memory (floats) of the parallel kernels; layouts in scan_{fwd,bwd}_kernels.cuh.
inline size_t par_fwd_smem_floats(const ParGeom& g, int64_t ds) {
  return size_t(2 * g.groups * ds)          // segment aggregates (A, B)
         + size_t(2 * ds)                   // double-buffered chunk carry
         + size_t(g.sw) * part_ld(g);       // per-lane y partials
}
inline size_t par_bwd_smem_floats(const ParGeom& g, int64_t ds) {
  return size_t(2 * g.groups * ds)                       // segment aggregates (A, B)
         + size_t(2 * g.dt * ds)                         // double-buffered carry per channel
         + size_t(g.dt * g.groups * ds)                  // dA_log accumulators per channel
         + size_t(2 * g.sw) * part_ld(g)                 // per-lane d_delta / du partials
         + size_t(g.dt * g.threads)                      // dD accumulators per channel
         + (g.dt > 1 ? size_t(2 * kItems * g.groups * ds) : 0);  // dB/dC tile
}

// Shared memory one backward block may use: two blocks per SM (the register
// budget of kMinParBlocks) fit the 228 KiB of an sm_90 SM.
constexpr size_t kBwdSmemBudget = size_t(100) << 10;
// Enough blocks to fill the GPU several times over before channels are grouped.
constexpr int64_t kBwdBlocksPerGroupStep = 1024;

// Backward geometry: par_geom plus dt, the channels one block runs back to back.
// dt in {8, 4, 2} only when d_state <= 64 (the dB/dC tile), the tile fits the
// budget and B·di/dt >= kBwdBlocksPerGroupStep blocks remain; else 1. A pure
// function of the shape (determinism: the d-summation grouping is fixed by it).
inline ParGeom bwd_par_geom(const ScanShape& s) {
  ParGeom g = par_geom(s.T, s.ds);
  g.dt = 1;
  if (s.ds > 64) return g;
  for (int dt = 8; dt > 1; dt /= 2) {
    ParGeom t = g;
    t.dt = dt;
    if (s.B * s.di >= int64_t(dt) * kBwdBlocksPerGroupStep &&
        par_bwd_smem_floats(t, s.ds) * sizeof(float) <= kBwdSmemBudget)
      return t;
  }
  return g;
}
inline int64_t bwd_groups(const ScanShape& s, const ParGeom& g) { return (s.di + g.dt - 1) / g.dt; }

// ---- backward scratch ---------------------------------------------------------------
struct BwdScratch {
  float* dB_part;     // [B, T, ngrp <= di, ds]  (sized for ngrp = di)
  float* dC_part;     // [B, T, ngrp <= di, ds]
  float* dAlog_part;  // [B, di, ds]
  float* dD_part;     // [B, di]
};
// Byte offsets of the four parts (each 256-byte aligned relative to the base);
// offsets[4] is the total size.
void bwd_scratch_offsets(const ScanShape& s, size_t offsets[5]);
BwdScratch carve_bwd_scratch(const ScanShape& s, void* scratch);

// ---- host-side validation ----------------------------------------------------------
// Null-pointer check with the launcher and argument named (mc::ConfigError).
void require_ptr(const char* fn, const char* name, const void* p);
// The inputs both directions take, checked in this order.
inline void require_scan_inputs(const char* fn, const void* delta, const void* u, const void* Bm,
                                const void* Cm, const float* a_neg, const float* D) {
  require_ptr(fn, "delta", delta);
  require_ptr(fn, "u", u);
  require_ptr(fn, "Bm", Bm);
  require_ptr(fn, "Cm", Cm);
  require_ptr(fn, "a_neg", a_neg);
  require_ptr(fn, "D", D);
}
// Raises the kernel's dynamic shared memory limit to `cap` (its worst case) when
// a launch needs `bytes` > 48 KiB (kernels/cuda_check.hpp).
using ::mc::gpu::set_smem_limit;
// Worst-case dynamic shared memory of the parallel kernels (d_state = 256).
inline size_t par_fwd_smem_cap() {
  return par_fwd_smem_floats(par_geom(1, Limits::kMaxDState), Limits::kMaxDState) * sizeof(float);
}
inline size_t par_bwd_smem_cap() {
  const size_t untiled =
      par_bwd_smem_floats(par_geom(1, Limits::kMaxDState), Limits::kMaxDState) * sizeof(float);
  return untiled > kBwdSmemBudget ? untiled : kBwdSmemBudget;
}

}  // namespace mc::kern::scan_detail
