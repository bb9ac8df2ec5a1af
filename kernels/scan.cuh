// scan.cuh — launchers of the selective scan (spec §3.2 F4d, §4.3 B3, §7):
// a sequential kernel (one thread per (b, d), d_state <= 64) and a chunked
// parallel kernel (one block per (b, d), d_state <= 256), forward and
// backward, templated on the storage type T of the activations
// (float, __nv_bfloat16, __half). All math and all state are f32.
//
// Determinism: no atomics. Cross-channel (dB, dC over d) and cross-sample
// (dD, dA_log over b) reductions go through per-(b,...) partials in the
// caller-provided scratch and fixed-order reduction kernels.
// Indexing is 64-bit throughout (B*(T+1)*di*ds may exceed 2^31).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "config.hpp"

namespace mc::kern {

struct ScanShape {
  int64_t B, T, di, ds;
  int64_t ld_bc;  // row stride (elements) of Bm / Cm; = ds when contiguous, = xd when they
                  // point into the xdbl rows
};

// Throws mc::ConfigError (field, value, limit) when the shape is unsupported by
// the chosen implementation; never launches a kernel that would do nothing.
void check_scan_shape(const ScanShape& s, bool parallel);

// Forward.
//   delta [B, T, di] T, u [B, T, di] T, Bm/Cm [B*T rows, ld_bc] T (first ds columns used),
//   a_neg [di, ds] f32, D [di] f32, h [B, di, ds] f32 (in: initial state, out: final state)
//   -> h_saved [B, T+1, di, ds] f32 (nullptr = nosave), y [B, T, di] T (= D·u + Σ_n h·C)
template <class T>
void scan_fwd(bool parallel, const ScanShape& s, const T* delta, const T* u, const T* Bm,
              const T* Cm, const float* a_neg, const float* D, float* h, float* h_saved, T* y,
              cudaStream_t stream);

// Bytes of scratch the backward needs (per-(b,t,d,n) dB/dC partials, per-b dD/dA_log partials).
size_t scan_bwd_scratch_bytes(const ScanShape& s);

// Backward. Same inputs as the forward plus h_saved and dy [B, T, di] T ->
//   d_delta [B, T, di] T (=), du [B, T, di] T (=),
//   dB [B*T, ds] f32 (=), dC [B*T, ds] f32 (=)  (summed over d in ascending order),
//   dD [di] f32 (+=), dA_log [di, ds] f32 (+=)   (summed over b in ascending order),
//   dh0 [B, di, ds] f32 (=) or nullptr: gradient w.r.t. the initial state.
template <class T>
void scan_bwd(bool parallel, const ScanShape& s, const T* delta, const T* u, const T* Bm,
              const T* Cm, const float* a_neg, const float* D, const float* h_saved, const T* dy,
              T* d_delta, T* du, float* dB, float* dC, float* dD, float* dA_log, float* dh0,
              void* scratch, cudaStream_t stream);

}  // namespace mc::kern
