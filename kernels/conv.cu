// conv.cu — causal depthwise conv1d + SiLU kernels and launchers of conv.cuh.
// Register windows are unrolled to kMaxDConv with guards on the runtime dc, so
// one kernel serves every dc in 1..8 without local-memory arrays.
// Explicit instantiations for float, __nv_bfloat16 and __half.
#include "kernels/conv.cuh"

#include "kernels/cuda_check.hpp"
#include "kernels/launch_args.hpp"
#include "kernels/reduce.cuh"
#include "kernels/typed.cuh"

#include <string>

namespace mc::kern {

namespace {

constexpr int kDC = int(Limits::kMaxDConv);
// The forward and backward kernels hold KDC registers per window (KDC = 4 for
// d_conv <= 4, Mamba's usual width, else kDC): the same sums in the same order
// either way (taps >= dc are skipped), in fewer registers for the narrow case.
constexpr int kNarrowDC = 4;

// Thread index -> (b, chunk, d) with d fastest (coalesced [.., di] accesses).
struct ChunkCoord {
  int64_t b, chunk, d;
};
__device__ __forceinline__ ChunkCoord chunk_coord(int64_t i, int64_t n_chunks, int64_t di) {
  const int64_t d = i % di;
  const int64_t rest = i / di;
  return {rest / n_chunks, rest % n_chunks, d};
}

// One thread per (b, chunk, d).
//   xb [B, T, di] T, w [di, dc], bias [di], state [B, di, dc] (S0, read only here)
//   -> windows [B, T, di, dc] f32 (opt), pc [B, T, di] T (opt), u [B, T, di] T
// Registers are right-aligned: slot kDC−1 holds the current input and tap
// k of a width-dc window sits at register k + (kDC − dc), so every register
// index is a compile-time constant for any runtime dc.
template <class T, int KDC>
__global__ void conv1d_silu_fwd_kernel(const T* __restrict__ xb, int64_t ld_x,
                                       const float* __restrict__ w,
                                       const float* __restrict__ bias, int64_t B, int64_t T_len,
                                       int64_t di, int dc, int64_t n_chunks,
                                       const float* __restrict__ state0,
                                       float* __restrict__ windows, T* __restrict__ pc,
                                       T* __restrict__ u) {
  const int64_t n = B * n_chunks * di;
  const int pad = KDC - dc;  // registers [0, pad) are unused
  for (int64_t i = dev::global_index(); i < n; i += dev::grid_stride()) {
    const ChunkCoord c = chunk_coord(i, n_chunks, di);
    const int64_t t0 = c.chunk * kConvChunk;
    const int64_t t1 = t0 + kConvChunk < T_len ? t0 + kConvChunk : T_len;
    const float* s0 = state0 + (c.b * di + c.d) * dc;
    float wr[KDC], s[KDC];
    // s = W_{t0−1}: tap k = xb[t0 − dc + k] if that index >= 0, else S0[t0 + k].
#pragma unroll
    for (int r = 0; r < KDC; ++r) {
      const int k = r - pad;
      wr[r] = 0.0f;
      s[r] = 0.0f;
      if (k >= 0) {
        wr[r] = w[c.d * dc + k];
        const int64_t src = t0 - dc + k;
        s[r] = src >= 0 ? dev::to_f32(xb[(c.b * T_len + src) * ld_x + c.d]) : s0[t0 + k];
      }
    }
    const float bd = bias[c.d];
    // the next step's input is loaded one step ahead, so that a load is in flight
    // while a step computes (one dependent load per step left the loop latency-bound)
    T next = xb[(c.b * T_len + t0) * ld_x + c.d];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t row = c.b * T_len + t;
      const T cur = next;
      if (t + 1 < t1) next = xb[(row + 1) * ld_x + c.d];
      // shift + insert, then save: saved before the insert, the window would be off
      // by one step and flip the sign of the conv weight gradient
#pragma unroll
      for (int r = 0; r < KDC - 1; ++r) s[r] = s[r + 1];
      s[KDC - 1] = dev::to_f32(cur);
      float acc = bd;  // pc = bias + Σ_k W_t[k]·w[k], k ascending
#pragma unroll
      for (int r = 0; r < KDC; ++r)
        if (r >= pad) acc += s[r] * wr[r];
      if (windows) {
        float* wt = windows + (row * di + c.d) * dc;
#pragma unroll
        for (int r = 0; r < KDC; ++r)
          if (r >= pad) wt[r - pad] = s[r];
      }
      if (pc) pc[row * di + c.d] = dev::from_f32<T>(acc);
      u[row * di + c.d] = dev::from_f32<T>(dev::silu(acc));
    }
  }
}

// One thread per (b, d): final[b, d, :] = W_{T−1} (S0 read fully before writing; the
// two may alias).
//   xb [B, T, di] T (row stride ld_x), s0 [B, di, dc] f32 -> final [B, di, dc] f32
template <class T>
__global__ void conv1d_final_state_kernel(const T* __restrict__ xb, int64_t ld_x, int64_t B,
                                          int64_t T_len, int64_t di, int dc, const float* s0,
                                          float* final_state) {
  const int64_t n = B * di;
  for (int64_t i = dev::global_index(); i < n; i += dev::grid_stride()) {
    const int64_t b = i / di, d = i % di;
    const float* st = s0 + i * dc;
    float s[kDC];
#pragma unroll
    for (int k = 0; k < kDC; ++k) {
      const int64_t src = T_len - dc + k;  // = (T−1) − (dc−1) + k
      s[k] = k >= dc ? 0.0f
             : src >= 0 ? dev::to_f32(xb[(b * T_len + src) * ld_x + d])
                        : st[T_len + k];
    }
    float* out = final_state + i * dc;
#pragma unroll
    for (int k = 0; k < kDC; ++k)
      if (k < dc) out[k] = s[k];
  }
}

// What the backward reads: the saved windows and pc, or (windows == pc == null) the
// input rows xb and the incoming state S0 to rebuild them, exactly as the forward
// built them (the same f32 sum in the same order), pc rounded to T as a typed
// store of it would have been.
template <class T>
struct ConvSaved {
  const T* pc;
  const float* windows;
  const T* xb;
  int64_t ld_x;
  const float* s0;
  const float* w;
  const float* bias;
};

// Tap k of the window W_t of (b, d): xb[t − (dc−1) + k] if that index >= 0, else S0[t + k + 1].
template <class T>
__device__ __forceinline__ float window_tap(const ConvSaved<T>& sv, int64_t b, int64_t t,
                                            int64_t T_len, int64_t di, int dc, int64_t d, int k) {
  const int64_t src = t - (dc - 1) + k;
  return src >= 0 ? dev::to_f32(sv.xb[(b * T_len + src) * sv.ld_x + d])
                  : sv.s0[(b * di + d) * dc + (t + k + 1)];
}

// pc_t of (b, d): saved, or rebuilt (bias + Σ_k W_t[k]·w[k], k ascending — the
// forward's sum) and rounded like a typed store.
template <class T>
__device__ __forceinline__ float pc_at(const ConvSaved<T>& sv, int64_t b, int64_t t,
                                       int64_t T_len, int64_t di, int dc, int64_t d) {
  if (sv.pc) return dev::to_f32(sv.pc[(b * T_len + t) * di + d]);
  float acc = sv.bias[d];
  for (int k = 0; k < dc; ++k) acc += window_tap(sv, b, t, T_len, di, dc, d, k) * sv.w[d * dc + k];
  return dev::round_f32<T>(acc);
}

// g_t = du_t·SiLU'(pc_t); 0 outside [0, T).
template <class T>
__device__ __forceinline__ float conv_grad_at(const T* du, const ConvSaved<T>& sv, int64_t b,
                                              int64_t t, int64_t T_len, int64_t di, int dc,
                                              int64_t d) {
  if (t >= T_len) return 0.0f;
  const int64_t idx = (b * T_len + t) * di + d;
  return dev::to_f32(du[idx]) * dev::silu_grad(pc_at(sv, b, t, T_len, di, dc, d));
}

// One thread per (b, chunk, d), t descending inside the chunk.
//   du, pc [B, T, di] T, windows [B, T, di, dc] f32, w [di, dc]
//   -> dxb [B, T, di] T, pw [B, n_chunks, di, dc] f32, pb [B, n_chunks, di] f32,
//      d_state0 [B, di, dc] f32 (opt; written by the chunk-0 threads)
// Right-aligned registers as in the forward: tap k of w at register k + pad.
template <class T, int KDC>
__global__ void __launch_bounds__(kBlock1D, KDC == kNarrowDC ? 3 : 1)
    conv1d_silu_bwd_kernel(const T* __restrict__ du, ConvSaved<T> sv,
                                       const float* __restrict__ w, int64_t B, int64_t T_len,
                                       int64_t di, int dc, int64_t n_chunks, T* __restrict__ dxb,
                                       int64_t ld_dx, float* __restrict__ pw,
                                       float* __restrict__ pb, float* __restrict__ d_state0,
                                       const float* __restrict__ d_state_T) {
  const int64_t n = B * n_chunks * di;
  const int pad = KDC - dc;
  for (int64_t i = dev::global_index(); i < n; i += dev::grid_stride()) {
    const ChunkCoord c = chunk_coord(i, n_chunks, di);
    const int64_t t0 = c.chunk * kConvChunk;
    const int64_t t1 = t0 + kConvChunk < T_len ? t0 + kConvChunk : T_len;
    const float* wd = w + c.d * dc;
    const float* dsT = d_state_T ? d_state_T + (c.b * di + c.d) * dc : nullptr;
    float wr[KDC], dw[KDC], gn[KDC];  // gn[j] = g_{t+1+j} for j = 0..dc−2 (0 beyond T)
#pragma unroll
    for (int r = 0; r < KDC; ++r) {
      wr[r] = r >= pad ? wd[r - pad] : 0.0f;
      dw[r] = 0.0f;
      gn[r] = r < dc - 1 ? conv_grad_at(du, sv, c.b, t1 + r, T_len, di, dc, c.d) : 0.0f;
    }
    // Without saved windows the window W_t of the current step is kept in registers
    // (win[k + pad] = tap k) and slid one step left per step: one new tap (xb or S0)
    // per step instead of dc taps for pc_t and dc more for the weight gradient.
    const bool rebuild = sv.windows == nullptr;
    float win[KDC];
#pragma unroll
    for (int r = 0; r < KDC; ++r)
      win[r] = rebuild && r >= pad ? window_tap(sv, c.b, t1 - 1, T_len, di, dc, c.d, r - pad) : 0.0f;
    const float bd = rebuild ? sv.bias[c.d] : 0.0f;
    float db = 0.0f;
#pragma unroll 4
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const int64_t row = c.b * T_len + t;
      const int64_t idx = row * di + c.d;
      float pct;
      if (sv.pc) {
        pct = dev::to_f32(sv.pc[idx]);
      } else {  // the forward's sum: bias + Σ_k W_t[k]·w[k], k ascending, rounded like pc
        float acc = bd;
#pragma unroll
        for (int r = 0; r < KDC; ++r)
          if (r >= pad) acc += win[r] * wr[r];
        pct = dev::round_f32<T>(acc);
      }
      const float g = dev::to_f32(du[idx]) * dev::silu_grad(pct);
      // dxb_t = g_t·w[dc−1] + ((g_{t+dc−1}·w[0] + g_{t+dc−2}·w[1]) + ... + g_{t+1}·w[dc−2])
      // (w[dc−1−j] sits at register KDC−1−j)
      float carry = 0.0f;
#pragma unroll
      for (int j = KDC - 1; j >= 1; --j)
        if (j < dc) carry += gn[j - 1] * wr[KDC - 1 - j];
      float v = g * wr[KDC - 1] + carry;
      // the final window holds xb[T-dc .. T-1]: its upstream gradient (f32, one rounding)
      if (d_state_T && t >= T_len - dc) v += dsT[t - T_len + dc];
      dxb[row * ld_dx + c.d] = dev::from_f32<T>(v);
      if (!rebuild) {
        const float* wt = sv.windows + idx * dc;
#pragma unroll
        for (int r = 0; r < KDC; ++r)
          if (r >= pad) dw[r] += g * wt[r - pad];
      } else {
#pragma unroll
        for (int r = 0; r < KDC; ++r)
          if (r >= pad) dw[r] += g * win[r];
        // W_{t−1}: taps 1.. are W_t's taps 0..; tap 0 is xb[t − dc] (or S0 before the start)
        const float tap0 = t > t0 ? window_tap(sv, c.b, t - 1, T_len, di, dc, c.d, 0) : 0.0f;
#pragma unroll
        for (int r = KDC - 1; r >= 1; --r)  // constant register indices: no local memory
          win[r] = r > pad ? win[r - 1] : (r == pad ? tap0 : 0.0f);
        win[0] = pad == 0 ? tap0 : 0.0f;
      }
      db += g;
#pragma unroll
      for (int j = KDC - 1; j >= 1; --j) gn[j] = gn[j - 1];
      gn[0] = g;
    }
    const int64_t prow = (c.b * n_chunks + c.chunk) * di + c.d;
    float* pwr = pw + prow * dc;
#pragma unroll
    for (int r = 0; r < KDC; ++r)
      if (r >= pad) pwr[r - pad] = dw[r];
    pb[prow] = db;
    if (d_state0 && c.chunk == 0) {
      // gn[t] = g_t now (0 for t >= T): d_state0[j] = Σ_{t=0}^{j−1} g_t·w[j−1−t], slot 0 = 0.
      float* ds = d_state0 + (c.b * di + c.d) * dc;
      for (int j = 0; j < dc; ++j) {
        float acc = 0.0f;
#pragma unroll
        for (int t = 0; t < KDC - 1; ++t)
          if (t < j) acc += gn[t] * wd[j - 1 - t];
        // slots j >= T of S0 are still in the final window, at position j - T
        if (dsT && j >= T_len) acc += dsT[j - T_len];
        ds[j] = acc;
      }
    }
  }
}

void check_conv_shape(const char* k, int64_t B, int64_t T_len, int64_t di, int64_t dc) {
  require_positive(k, "batch", B);
  require_positive(k, "seq_len", T_len);
  require_positive(k, "d_inner", di);
  require_range(k, "d_conv", dc, 1, Limits::kMaxDConv, "conv windows are held in registers");
}

int64_t conv_chunks(int64_t T_len) { return (T_len + kConvChunk - 1) / kConvChunk; }

}  // namespace

template <class T>
void conv1d_silu_fwd(const ConvFwdParams<T>& p, cudaStream_t stream) {
  const char* k = "conv1d_silu_fwd";
  check_conv_shape(k, p.B, p.seq_len, p.di, p.dc);
  require_ptr(k, "xb", p.xb);
  require_ptr(k, "w", p.w);
  require_ptr(k, "bias", p.bias);
  require_ptr(k, "s0", p.s0);
  require_ptr(k, "u", p.u);
  const int64_t ld_x = p.ld_x ? p.ld_x : p.di;
  if (ld_x < p.di) fail_arg(k, "ld_x", ld_x, ">=", p.di, "row stride of xb");
  const int64_t n_chunks = conv_chunks(p.seq_len);
  auto* kern = p.dc <= kNarrowDC ? &conv1d_silu_fwd_kernel<T, kNarrowDC>
                                 : &conv1d_silu_fwd_kernel<T, kDC>;
  kern<<<grid_1d(p.B * n_chunks * p.di), kBlock1D, 0, stream>>>(
      p.xb, ld_x, p.w, p.bias, p.B, p.seq_len, p.di, int(p.dc), n_chunks, p.s0, p.windows, p.pc, p.u);
  MC_LAUNCH_CHECK("conv1d_silu_fwd_kernel");
  if (p.final_state) {  // after every window was built from S0 (final_state may alias s0)
    conv1d_final_state_kernel<T><<<grid_1d(p.B * p.di), kBlock1D, 0, stream>>>(
        p.xb, ld_x, p.B, p.seq_len, p.di, int(p.dc), p.s0, p.final_state);
    MC_LAUNCH_CHECK("conv1d_final_state_kernel");
  }
}

template <class T>
void conv1d_silu_fwd(const T* xb, const float* w, const float* bias, int64_t B, int64_t seq_len,
                     int64_t di, int64_t dc, float* state, float* windows, T* pc, T* u,
                     cudaStream_t stream) {
  ConvFwdParams<T> p;
  p.xb = xb;
  p.w = w;
  p.bias = bias;
  p.B = B;
  p.seq_len = seq_len;
  p.di = di;
  p.dc = dc;
  p.s0 = state;
  p.final_state = state;
  p.windows = windows;
  p.pc = pc;
  p.u = u;
  conv1d_silu_fwd<T>(p, stream);
}

size_t conv1d_silu_bwd_scratch_floats(int64_t B, int64_t seq_len, int64_t di, int64_t dc) {
  const int64_t rows = B * conv_chunks(seq_len);
  const size_t reduce = std::max(column_sum_scratch_floats(rows, di * dc),
                                 column_sum_scratch_floats(rows, di));
  return size_t(rows) * size_t(di) * size_t(dc + 1) + reduce;
}

template <class T>
void conv1d_silu_bwd(const ConvBwdParams<T>& p, cudaStream_t stream) {
  const char* k = "conv1d_silu_bwd";
  check_conv_shape(k, p.B, p.seq_len, p.di, p.dc);
  require_ptr(k, "du", p.du);
  require_ptr(k, "w", p.w);
  require_ptr(k, "dxb", p.dxb);
  require_ptr(k, "dw", p.dw);
  require_ptr(k, "dbias", p.dbias);
  require_ptr(k, "scratch", p.scratch);
  ConvSaved<T> sv{p.pc, p.windows, p.xb, p.ld_x ? p.ld_x : p.di, p.s0, p.w, p.bias};
  if (!p.windows || !p.pc) {  // rebuilt from the input rows and S0
    if (p.windows || p.pc)
      throw ConfigError(std::string(k) + ": give both windows and pc, or neither (xb and s0)");
    require_ptr(k, "xb (windows and pc not saved)", p.xb);
    require_ptr(k, "s0 (windows and pc not saved)", p.s0);
    require_ptr(k, "bias (windows and pc not saved)", p.bias);
    if (sv.ld_x < p.di) fail_arg(k, "ld_x", sv.ld_x, ">=", p.di, "row stride of xb");
  }
  const int64_t ld_dx = p.ld_dx ? p.ld_dx : p.di;
  if (ld_dx < p.di) fail_arg(k, "ld_dx", ld_dx, ">=", p.di, "row stride of dxb");
  const int64_t n_chunks = conv_chunks(p.seq_len);
  const int64_t rows = p.B * n_chunks, di = p.di, dc = p.dc;
  float* pw = p.scratch;             // [rows, di*dc]
  float* pb = pw + rows * di * dc;   // [rows, di]
  float* reduce_scratch = pb + rows * di;
  auto* kern = dc <= kNarrowDC ? &conv1d_silu_bwd_kernel<T, kNarrowDC>
                               : &conv1d_silu_bwd_kernel<T, kDC>;
  kern<<<grid_1d(rows * di), kBlock1D, 0, stream>>>(
      p.du, sv, p.w, p.B, p.seq_len, di, int(dc), n_chunks, p.dxb, ld_dx, pw, pb, p.d_state0,
      p.d_state_T);
  MC_LAUNCH_CHECK("conv1d_silu_bwd_kernel");
  reduce_sum_axis0(pw, rows, di * dc, p.dw, /*accumulate=*/true, reduce_scratch, stream);
  reduce_sum_axis0(pb, rows, di, p.dbias, /*accumulate=*/true, reduce_scratch, stream);
}

template <class T>
void conv1d_silu_bwd(const T* du, const T* pc, const float* windows, const float* w, int64_t B,
                     int64_t seq_len, int64_t di, int64_t dc, T* dxb, float* dw, float* dbias,
                     float* d_state0, float* scratch, cudaStream_t stream,
                     const float* d_state_T) {
  const char* k = "conv1d_silu_bwd";
  check_conv_shape(k, B, seq_len, di, dc);  // shape before pointers: the bad field is named first
  require_ptr(k, "pc", pc);
  require_ptr(k, "windows", windows);
  ConvBwdParams<T> p;
  p.du = du;
  p.pc = pc;
  p.windows = windows;
  p.w = w;
  p.B = B;
  p.seq_len = seq_len;
  p.di = di;
  p.dc = dc;
  p.dxb = dxb;
  p.dw = dw;
  p.dbias = dbias;
  p.d_state0 = d_state0;
  p.d_state_T = d_state_T;
  p.scratch = scratch;
  conv1d_silu_bwd<T>(p, stream);
}

#define MC_INSTANTIATE_CONV(T)                                                                 \
  template void conv1d_silu_fwd<T>(const ConvFwdParams<T>&, cudaStream_t);                     \
  template void conv1d_silu_bwd<T>(const ConvBwdParams<T>&, cudaStream_t);                     \
  template void conv1d_silu_fwd<T>(const T*, const float*, const float*, int64_t, int64_t,     \
                                   int64_t, int64_t, float*, float*, T*, T*, cudaStream_t);    \
  template void conv1d_silu_bwd<T>(const T*, const T*, const float*, const float*, int64_t,    \
                                   int64_t, int64_t, int64_t, T*, float*, float*, float*,      \
                                   float*, cudaStream_t, const float*);
MC_INSTANTIATE_CONV(float)
MC_INSTANTIATE_CONV(__nv_bfloat16)
MC_INSTANTIATE_CONV(__half)
#undef MC_INSTANTIATE_CONV

}  // namespace mc::kern
