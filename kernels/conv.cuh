// conv.cuh — causal depthwise conv1d + SiLU with a carried dc-wide state
// (docs/math.md F4a, B6), forward and backward, templated on the storage
// type T of the activations (float, __nv_bfloat16, __half). Weights, bias,
// state, the saved windows and all gradients of parameters/state are f32.
//
// The conv is not a recurrence: the window at t is
//   W_t[k] = xb[t − (dc−1) + k]   if that index >= 0, else S0[t + k + 1]
// (S0 = incoming state; S0[0] is never read), so the kernels split T into
// fixed chunks of kConvChunk steps and run one thread per (b, chunk, d), a
// block per 128 channels of one (b, chunk) with its input rows staged in shared memory.
// d_conv is limited to Limits::kMaxDConv = 8 (register windows); a larger
// value is refused with a ConfigError naming d_conv — never a silent return.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mc::kern {

// Time steps handled sequentially by one thread.
constexpr int64_t kConvChunk = 64;

// Forward (T = seq_len):
//   xb [B, T, di] T, w [di, dc] f32, bias [di] f32,
//   state [B, di, dc] f32 (in: S0, out: the window of t = T−1)
//   -> windows [B, T, di, dc] f32 (after shift+insert; nullptr = not saved),
//      pc [B, T, di] T (pre-SiLU; nullptr = not saved), u [B, T, di] T = SiLU(pc)
// pc = bias + Σ_k W_t[k]·w[d, k] (k ascending, f32); u is SiLU of the f32 pc.
template <class T>
void conv1d_silu_fwd(const T* xb, const float* w, const float* bias, int64_t B, int64_t seq_len,
                     int64_t di, int64_t dc, float* state, float* windows, T* pc, T* u,
                     cudaStream_t stream);

// The same with every option (params struct): xb read through a row stride
// (e.g. the x half of the in_proj output, ld_x = 2·di), the incoming state S0
// read-only and the final window written to final_state (null = not written;
// it may alias s0).
template <class T>
struct ConvFwdParams {
  const T* xb = nullptr;       // [B*T rows, ld_x]
  int64_t ld_x = 0;            // 0 = di
  const float* w = nullptr;    // [di, dc]
  const float* bias = nullptr; // [di]
  int64_t B = 0, seq_len = 0, di = 0, dc = 0;
  const float* s0 = nullptr;   // [B, di, dc]
  float* final_state = nullptr;
  float* windows = nullptr;    // [B, T, di, dc] or null
  T* pc = nullptr;             // [B, T, di] or null
  T* u = nullptr;              // [B*T rows, ld_u]
  int64_t ld_u = 0;            // 0 = di
};
template <class T>
void conv1d_silu_fwd(const ConvFwdParams<T>& p, cudaStream_t stream);

// Floats of scratch conv1d_silu_bwd needs (per-(b, chunk, d) partials of dw and
// dbias plus the column-sum scratch).
size_t conv1d_silu_bwd_scratch_floats(int64_t B, int64_t seq_len, int64_t di, int64_t dc);

// Backward (T = seq_len), with g_t = du_t·SiLU'(pc_t):
//   du [B, T, di] T, pc [B, T, di] T, windows [B, T, di, dc] f32, w [di, dc] f32
//   -> dxb [B, T, di] T (=)      dxb_t = Σ_{j=0..dc−1, t+j<T} g_{t+j}·w[d, dc−1−j]
//      dw [di, dc] f32 (+=)      Σ_{b,t} g_t·W_t[k]       (per-(b,chunk,d) partials + fixed reduce)
//      dbias [di] f32 (+=)       Σ_{b,t} g_t
//      d_state0 [B, di, dc] f32 (=, nullptr = skipped): gradient w.r.t. S0;
//        slot 0 is never read by the forward, so d_state0[..., 0] = 0 and
//        d_state0[..., j] = Σ_{t=0}^{j−1} g_t·w[d, j−1−t] (the carry left after t = 0).
// d_state_T [B, di, dc] f32 (nullptr = 0): upstream gradient w.r.t. the FINAL
//   state (the window of t = T−1, S_T[k] = xb[T−dc+k], or S0[T+k] where that
//   index is < 0): it adds d_state_T[t−T+dc] to dxb_t for t >= T−dc (in f32,
//   before the one rounding to T), and d_state_T[j−T] to d_state0[j] for j >= T.
// scratch: conv1d_silu_bwd_scratch_floats(B, T, di, dc) floats.
template <class T>
void conv1d_silu_bwd(const T* du, const T* pc, const float* windows, const float* w, int64_t B,
                     int64_t seq_len, int64_t di, int64_t dc, T* dxb, float* dw, float* dbias,
                     float* d_state0, float* scratch, cudaStream_t stream,
                     const float* d_state_T = nullptr);

// The same with every option: without the saved windows and pc (both null) the
// backward rebuilds them from the forward's input rows xb (row stride ld_x) and
// its incoming state s0 — the same f32 sums in the same order as the forward, pc
// rounded to T like a typed store — so the forward need save neither; dxb is
// written through a row stride (e.g. into the x half of the in_proj gradient).
// With du_add the upstream gradient is the sum of two: du_t = q(du + du_add) per
// element (f32 sum, one rounding to T), the value add_inplace(du, du_add) would
// store, so the results are the bits of add_inplace followed by this call without
// du_add; du is not written. du_add may not overlap dxb (refused, ConfigError).
template <class T>
struct ConvBwdParams {
  const T* du = nullptr;            // [B, T, di]
  const T* du_add = nullptr;        // [B, T, di] or null (du alone)
  const T* pc = nullptr;            // [B, T, di] or null (rebuilt)
  const float* windows = nullptr;   // [B, T, di, dc] or null (rebuilt)
  const T* xb = nullptr;            // [B*T rows, ld_x]   (when rebuilding)
  int64_t ld_x = 0;
  const float* s0 = nullptr;        // [B, di, dc]        (when rebuilding)
  const float* bias = nullptr;      // [di]               (when rebuilding)
  const float* w = nullptr;         // [di, dc]
  int64_t B = 0, seq_len = 0, di = 0, dc = 0;
  T* dxb = nullptr;                 // [B*T rows, ld_dx] (=)
  int64_t ld_dx = 0;
  float* dw = nullptr;              // [di, dc] (+=)
  float* dbias = nullptr;           // [di] (+=)
  float* d_state0 = nullptr;        // [B, di, dc] (=) or null
  const float* d_state_T = nullptr; // [B, di, dc] upstream gradient of the final state, or null (0)
  float* scratch = nullptr;         // conv1d_silu_bwd_scratch_floats(B, T, di, dc)
};
template <class T>
void conv1d_silu_bwd(const ConvBwdParams<T>& p, cudaStream_t stream);

}  // namespace mc::kern
