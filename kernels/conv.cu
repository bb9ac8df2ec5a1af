// conv.cu — causal depthwise conv1d + SiLU kernels and launchers of conv.cuh.
// Register windows are unrolled to kMaxDConv with guards on the runtime dc, so
// one kernel serves every dc in 1..8 without local-memory arrays.
// Explicit instantiations for float, __nv_bfloat16 and __half.
#include "kernels/conv.cuh"

#include "kernels/cuda_check.hpp"
#include "kernels/launch_args.hpp"
#include "kernels/reduce.cuh"
#include "kernels/typed.cuh"

namespace mc::kern {

namespace {

constexpr int kDC = int(Limits::kMaxDConv);

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
template <class T>
__global__ void conv1d_silu_fwd_kernel(const T* __restrict__ xb, const float* __restrict__ w,
                                       const float* __restrict__ bias, int64_t B, int64_t T_len,
                                       int64_t di, int dc, int64_t n_chunks,
                                       const float* __restrict__ state0,
                                       float* __restrict__ windows, T* __restrict__ pc,
                                       T* __restrict__ u) {
  const int64_t n = B * n_chunks * di;
  const int pad = kDC - dc;  // registers [0, pad) are unused
  for (int64_t i = dev::global_index(); i < n; i += dev::grid_stride()) {
    const ChunkCoord c = chunk_coord(i, n_chunks, di);
    const int64_t t0 = c.chunk * kConvChunk;
    const int64_t t1 = t0 + kConvChunk < T_len ? t0 + kConvChunk : T_len;
    const float* s0 = state0 + (c.b * di + c.d) * dc;
    float wr[kDC], s[kDC];
    // s = W_{t0−1}: tap k = xb[t0 − dc + k] if that index >= 0, else S0[t0 + k].
#pragma unroll
    for (int r = 0; r < kDC; ++r) {
      const int k = r - pad;
      wr[r] = 0.0f;
      s[r] = 0.0f;
      if (k >= 0) {
        wr[r] = w[c.d * dc + k];
        const int64_t src = t0 - dc + k;
        s[r] = src >= 0 ? dev::to_f32(xb[(c.b * T_len + src) * di + c.d]) : s0[t0 + k];
      }
    }
    const float bd = bias[c.d];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t row = c.b * T_len + t;
      // shift + insert, then save (spec pitfall 6: the window is saved after the insert)
#pragma unroll
      for (int r = 0; r < kDC - 1; ++r) s[r] = s[r + 1];
      s[kDC - 1] = dev::to_f32(xb[row * di + c.d]);
      float acc = bd;  // pc = bias + Σ_k W_t[k]·w[k], k ascending
#pragma unroll
      for (int r = 0; r < kDC; ++r)
        if (r >= pad) acc += s[r] * wr[r];
      if (windows) {
        float* wt = windows + (row * di + c.d) * dc;
#pragma unroll
        for (int r = 0; r < kDC; ++r)
          if (r >= pad) wt[r - pad] = s[r];
      }
      if (pc) pc[row * di + c.d] = dev::from_f32<T>(acc);
      u[row * di + c.d] = dev::from_f32<T>(dev::silu(acc));
    }
  }
}

// One thread per (b, d): state[b, d, :] = W_{T−1} (read fully before writing).
//   xb [B, T, di] T, state [B, di, dc] f32 (in S0, out final window)
template <class T>
__global__ void conv1d_final_state_kernel(const T* __restrict__ xb, int64_t B, int64_t T_len,
                                          int64_t di, int dc, float* __restrict__ state) {
  const int64_t n = B * di;
  for (int64_t i = dev::global_index(); i < n; i += dev::grid_stride()) {
    const int64_t b = i / di, d = i % di;
    float* st = state + i * dc;
    float s[kDC];
#pragma unroll
    for (int k = 0; k < kDC; ++k) {
      const int64_t src = T_len - dc + k;  // = (T−1) − (dc−1) + k
      s[k] = k >= dc ? 0.0f
             : src >= 0 ? dev::to_f32(xb[(b * T_len + src) * di + d])
                        : st[T_len + k];
    }
#pragma unroll
    for (int k = 0; k < kDC; ++k)
      if (k < dc) st[k] = s[k];
  }
}

// g_t = du_t·SiLU'(pc_t); 0 outside [0, T).
template <class T>
__device__ __forceinline__ float conv_grad_at(const T* du, const T* pc, int64_t b, int64_t t,
                                              int64_t T_len, int64_t di, int64_t d) {
  if (t >= T_len) return 0.0f;
  const int64_t idx = (b * T_len + t) * di + d;
  return dev::to_f32(du[idx]) * dev::silu_grad(dev::to_f32(pc[idx]));
}

// One thread per (b, chunk, d), t descending inside the chunk.
//   du, pc [B, T, di] T, windows [B, T, di, dc] f32, w [di, dc]
//   -> dxb [B, T, di] T, pw [B, n_chunks, di, dc] f32, pb [B, n_chunks, di] f32,
//      d_state0 [B, di, dc] f32 (opt; written by the chunk-0 threads)
// Right-aligned registers as in the forward: tap k of w at register k + pad.
template <class T>
__global__ void conv1d_silu_bwd_kernel(const T* __restrict__ du, const T* __restrict__ pc,
                                       const float* __restrict__ windows,
                                       const float* __restrict__ w, int64_t B, int64_t T_len,
                                       int64_t di, int dc, int64_t n_chunks, T* __restrict__ dxb,
                                       float* __restrict__ pw, float* __restrict__ pb,
                                       float* __restrict__ d_state0,
                                       const float* __restrict__ d_state_T) {
  const int64_t n = B * n_chunks * di;
  const int pad = kDC - dc;
  for (int64_t i = dev::global_index(); i < n; i += dev::grid_stride()) {
    const ChunkCoord c = chunk_coord(i, n_chunks, di);
    const int64_t t0 = c.chunk * kConvChunk;
    const int64_t t1 = t0 + kConvChunk < T_len ? t0 + kConvChunk : T_len;
    const float* wd = w + c.d * dc;
    const float* dsT = d_state_T ? d_state_T + (c.b * di + c.d) * dc : nullptr;
    float wr[kDC], dw[kDC], gn[kDC];  // gn[j] = g_{t+1+j} for j = 0..dc−2 (0 beyond T)
#pragma unroll
    for (int r = 0; r < kDC; ++r) {
      wr[r] = r >= pad ? wd[r - pad] : 0.0f;
      dw[r] = 0.0f;
      gn[r] = r < dc - 1 ? conv_grad_at(du, pc, c.b, t1 + r, T_len, di, c.d) : 0.0f;
    }
    float db = 0.0f;
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const int64_t row = c.b * T_len + t;
      const float g = conv_grad_at(du, pc, c.b, t, T_len, di, c.d);
      // dxb_t = g_t·w[dc−1] + ((g_{t+dc−1}·w[0] + g_{t+dc−2}·w[1]) + ... + g_{t+1}·w[dc−2])
      // (w[dc−1−j] sits at register kDC−1−j)
      float carry = 0.0f;
#pragma unroll
      for (int j = kDC - 1; j >= 1; --j)
        if (j < dc) carry += gn[j - 1] * wr[kDC - 1 - j];
      float v = g * wr[kDC - 1] + carry;
      // the final window holds xb[T-dc .. T-1]: its upstream gradient (f32, one rounding)
      if (d_state_T && t >= T_len - dc) v += dsT[t - T_len + dc];
      dxb[row * di + c.d] = dev::from_f32<T>(v);
      const float* wt = windows + (row * di + c.d) * dc;
#pragma unroll
      for (int r = 0; r < kDC; ++r)
        if (r >= pad) dw[r] += g * wt[r - pad];
      db += g;
#pragma unroll
      for (int j = kDC - 1; j >= 1; --j) gn[j] = gn[j - 1];
      gn[0] = g;
    }
    const int64_t prow = (c.b * n_chunks + c.chunk) * di + c.d;
    float* pwr = pw + prow * dc;
#pragma unroll
    for (int r = 0; r < kDC; ++r)
      if (r >= pad) pwr[r - pad] = dw[r];
    pb[prow] = db;
    if (d_state0 && c.chunk == 0) {
      // gn[t] = g_t now (0 for t >= T): d_state0[j] = Σ_{t=0}^{j−1} g_t·w[j−1−t], slot 0 = 0.
      float* ds = d_state0 + (c.b * di + c.d) * dc;
      for (int j = 0; j < dc; ++j) {
        float acc = 0.0f;
#pragma unroll
        for (int t = 0; t < kDC - 1; ++t)
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
void conv1d_silu_fwd(const T* xb, const float* w, const float* bias, int64_t B, int64_t seq_len,
                     int64_t di, int64_t dc, float* state, float* windows, T* pc, T* u,
                     cudaStream_t stream) {
  const char* k = "conv1d_silu_fwd";
  check_conv_shape(k, B, seq_len, di, dc);
  require_ptr(k, "xb", xb);
  require_ptr(k, "w", w);
  require_ptr(k, "bias", bias);
  require_ptr(k, "state", state);
  require_ptr(k, "u", u);
  const int64_t n_chunks = conv_chunks(seq_len);
  conv1d_silu_fwd_kernel<T><<<grid_1d(B * n_chunks * di), kBlock1D, 0, stream>>>(
      xb, w, bias, B, seq_len, di, int(dc), n_chunks, state, windows, pc, u);
  MC_LAUNCH_CHECK("conv1d_silu_fwd_kernel");
  // After every window was built from S0: overwrite the state with W_{T−1}.
  conv1d_final_state_kernel<T><<<grid_1d(B * di), kBlock1D, 0, stream>>>(xb, B, seq_len, di,
                                                                         int(dc), state);
  MC_LAUNCH_CHECK("conv1d_final_state_kernel");
}

size_t conv1d_silu_bwd_scratch_floats(int64_t B, int64_t seq_len, int64_t di, int64_t dc) {
  const int64_t rows = B * conv_chunks(seq_len);
  const size_t reduce = std::max(column_sum_scratch_floats(rows, di * dc),
                                 column_sum_scratch_floats(rows, di));
  return size_t(rows) * size_t(di) * size_t(dc + 1) + reduce;
}

template <class T>
void conv1d_silu_bwd(const T* du, const T* pc, const float* windows, const float* w, int64_t B,
                     int64_t seq_len, int64_t di, int64_t dc, T* dxb, float* dw, float* dbias,
                     float* d_state0, float* scratch, cudaStream_t stream,
                     const float* d_state_T) {
  const char* k = "conv1d_silu_bwd";
  check_conv_shape(k, B, seq_len, di, dc);
  require_ptr(k, "du", du);
  require_ptr(k, "pc", pc);
  require_ptr(k, "windows", windows);
  require_ptr(k, "w", w);
  require_ptr(k, "dxb", dxb);
  require_ptr(k, "dw", dw);
  require_ptr(k, "dbias", dbias);
  require_ptr(k, "scratch", scratch);
  const int64_t n_chunks = conv_chunks(seq_len);
  const int64_t rows = B * n_chunks;
  float* pw = scratch;               // [rows, di*dc]
  float* pb = pw + rows * di * dc;   // [rows, di]
  float* reduce_scratch = pb + rows * di;
  conv1d_silu_bwd_kernel<T><<<grid_1d(rows * di), kBlock1D, 0, stream>>>(
      du, pc, windows, w, B, seq_len, di, int(dc), n_chunks, dxb, pw, pb, d_state0, d_state_T);
  MC_LAUNCH_CHECK("conv1d_silu_bwd_kernel");
  reduce_sum_axis0(pw, rows, di * dc, dw, /*accumulate=*/true, reduce_scratch, stream);
  reduce_sum_axis0(pb, rows, di, dbias, /*accumulate=*/true, reduce_scratch, stream);
}

#define MC_INSTANTIATE_CONV(T)                                                                 \
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
