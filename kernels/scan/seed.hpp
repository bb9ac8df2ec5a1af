// seed.hpp — launchers of the seed selective-scan kernels (docs/math.md F4d, B3):
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

#include "core/config.hpp"

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

// Bytes of scratch the backward needs (dB/dC partials sized for one per
// (b,t,d,n), which covers both modes; per-b dD/dA_log partials).
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

// Backward of a segment that is followed by more of the same sequence: as
// scan_bwd, plus dh_final [B, di, ds] f32 (or nullptr = 0), the upstream
// gradient w.r.t. the FINAL state h_T the forward wrote back. The reverse
// recurrence then starts from dh_T instead of 0 (matches
// ref::selective_scan_bwd_chained; used to chain segments / truncated BPTT).
template <class T>
void scan_bwd_chained(bool parallel, const ScanShape& s, const T* delta, const T* u, const T* Bm,
                      const T* Cm, const float* a_neg, const float* D, const float* h_saved,
                      const T* dy, const float* dh_final, T* d_delta, T* du, float* dB, float* dC,
                      float* dD, float* dA_log, float* dh0, void* scratch, cudaStream_t stream);

// ---- Launch geometry (for tests at chunk boundaries and for benchmark reports) ----
// Parallel kernels: one block of `threads` per (b, d); `lanes` lanes per time
// segment (one per state n), `segments` segments of `items` timesteps per chunk
// of `chunk` timesteps; `smem_bytes` dynamic shared memory per block.
// Sequential kernels: one thread per (b, d) in blocks of `threads`; chunk = T.
// Backward only: `channels_per_block` consecutive channels d share one block
// (their dB/dC terms summed in shared memory before the partials are written).
struct ScanGeometry {
  int threads = 0, lanes = 0, segments = 0, items = 0;
  int64_t chunk = 0, blocks = 0;
  size_t smem_bytes = 0;
  int channels_per_block = 1;
};
ScanGeometry scan_geometry(const ScanShape& s, bool parallel, bool backward);

// ---- Traffic model (for benchmarks: GB/s = min_bytes / time) -----------------
// The least DRAM traffic any implementation of the op must move, with e =
// elem_bytes (4 f32, 2 bf16/f16), BT = B*T, S = B*di*ds (one state per (b,d,n)):
//   forward:  read  delta, u           2*BT*di*e
//             read  Bm, Cm             2*BT*ds*e   (ds columns each, once — shared by all d)
//             read  a_neg, D           4*(di*ds + di)
//             read  h (initial)        4*S
//             write y                  BT*di*e
//             write h (final)          4*S
//             write h_saved (if save)  4*B*(T+1)*di*ds      <- dominant term
//   backward: read  delta, u, dy       3*BT*di*e
//             read  Bm, Cm             2*BT*ds*e
//             read  a_neg, D           4*(di*ds + di)
//             read  h_saved            4*B*(T+1)*di*ds      <- dominant term
//             write d_delta, du        2*BT*di*e
//             write dB, dC             2*4*BT*ds
//             r+w   dD, dA_log         2*4*(di + di*ds)     (+= accumulation)
//             write dh0 (if wanted)    4*S
// This implementation moves more in the backward: the dB/dC partials, one per
// (b, t, channel group, n) in f32, are written and read back once
// (16*B*T*ngrp*ds bytes, ngrp = di/channels_per_block: di for the sequential
// kernel, di/dt for the parallel one, see ScanGeometry), and the per-b
// dD/dA_log partials (negligible): scan_bwd_extra_bytes.
size_t scan_fwd_min_bytes(const ScanShape& s, int elem_bytes, bool save);
size_t scan_bwd_min_bytes(const ScanShape& s, int elem_bytes, bool with_dh0 = false);
// Bytes the backward of the given mode moves beyond scan_bwd_min_bytes.
size_t scan_bwd_extra_bytes(const ScanShape& s, bool parallel = true);

}  // namespace mc::kern
