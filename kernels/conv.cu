// conv.cu — causal depthwise conv1d + SiLU kernels and launchers of conv.cuh.
// One block per tile of (b, 64-step chunk, 128 channels): the tile's input rows
// are staged through shared memory (cp.async, 16-byte pieces where the rows are
// aligned), then one thread per channel walks the chunk. Register windows are
// unrolled at compile time: an exact instance for d_conv 4 (no tap guards) and a
// wide one (kMaxDConv registers, guards on the runtime dc) for every other dc in
// 1..8, so no window lives in local memory. The backward is also compiled per
// source of its windows (saved, or rebuilt from xb and the incoming state) and
// per optional second upstream gradient, and walks its chunk in three runs (the
// steps that see the final state's gradient, the main run, the steps whose next
// tap comes from the incoming state), so its main run tests nothing at run time.
// Explicit instantiations for float, __nv_bfloat16 and __half.
#include "kernels/conv.cuh"

#include "kernels/cuda_check.hpp"
#include "kernels/launch_args.hpp"
#include "kernels/reduce.cuh"
#include "kernels/typed.cuh"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

namespace mc::kern {

namespace {

constexpr int kDC = int(Limits::kMaxDConv);
// The forward and backward kernels hold KDC registers per window (KDC = 4 for
// d_conv == 4, Mamba's usual width, compiled for exactly that width; else kDC with
// the width a run-time value): the same sums in the same order either way (taps
// >= dc are skipped), in fewer registers and without tap guards for the usual width.
constexpr int kNarrowDC = 4;

// ---- tiles ------------------------------------------------------------------------
// A block owns one tile: kConvTileChannels consecutive channels of one (b, chunk).
// Its threads first stage the rows of the typed inputs the chunk reads into shared
// memory (all of a tile's loads in flight at once, 16 bytes each where the rows
// allow it), then each thread walks its channel through the chunk reading the
// staged rows. One thread per (b, chunk, d) as before, the same sums in the same
// order: only where the operands come from changed.
constexpr int kConvTileChannels = 128;

struct ConvTile {
  int64_t b, t0, t1, d0;  // sample, chunk [t0, t1), first channel
  int channels;           // valid channels of the tile (<= kConvTileChannels)
};

// Tile index -> (b, chunk, channel tile), channel tiles fastest.
__device__ __forceinline__ ConvTile conv_tile(int64_t tile, int64_t n_chunks, int64_t n_ctiles,
                                              int64_t T_len, int64_t di) {
  const int64_t ct = tile % n_ctiles, rest = tile / n_ctiles;
  ConvTile c;
  c.b = rest / n_chunks;
  c.t0 = (rest % n_chunks) * kConvChunk;
  c.t1 = c.t0 + kConvChunk < T_len ? c.t0 + kConvChunk : T_len;
  c.d0 = ct * kConvTileChannels;
  c.channels = int(di - c.d0 < kConvTileChannels ? di - c.d0 : kConvTileChannels);
  return c;
}

// Rows [r_lo, r_hi) of one sample's typed [T, ld] tensor, channels [d0, d0 + channels),
// into smem [r_hi − r_lo, kConvTileChannels] (channels past `channels` are zero).
// vec16: base and row stride are 16-byte aligned and the tile is full, so each row
// moves as whole 16-byte pieces (cp.async on sm_80+, no register staging).
template <class T>
__device__ __forceinline__ void stage_rows(T* smem, const T* __restrict__ g, int64_t ld,
                                           int64_t row0, int64_t r_lo, int64_t r_hi,
                                           int64_t d0, int channels, bool vec16) {
  const int rows = int(r_hi - r_lo);
  if (rows <= 0) return;
  if (vec16 && channels == kConvTileChannels) {
    constexpr int kPer = 16 / int(sizeof(T));               // elements per piece
    constexpr int kPieces = kConvTileChannels / kPer;       // pieces per row
    for (int i = threadIdx.x; i < rows * kPieces; i += blockDim.x) {
      const int r = i / kPieces, c = (i % kPieces) * kPer;
      const T* src = g + (row0 + r_lo + r) * ld + d0 + c;
      T* dst = smem + r * kConvTileChannels + c;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
      const unsigned dst_s = unsigned(__cvta_generic_to_shared(dst));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst_s), "l"(src));
#else
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
    }
  } else {
    const int c = threadIdx.x;
    for (int r = 0; r < rows; ++r)
      smem[r * kConvTileChannels + c] =
          c < channels ? g[(row0 + r_lo + r) * ld + d0 + c] : dev::from_f32<T>(0.0f);
  }
}

// Waits for this thread's cp.async pieces, then for the whole block.
__device__ __forceinline__ void staged_rows_ready() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::);
#endif
  __syncthreads();
}

// Shared-memory elements of one tile's staged rows: the forward stages xb rows
// [t0 − (dc−1), t1); the backward du rows [t0, t1 + dc − 1) (and as many du_add rows
// when given) and (rebuilding the windows) xb rows [t0 − (dc−1), t1 + dc − 1).
constexpr int64_t conv_fwd_tile_rows(int64_t dc) { return kConvChunk + dc - 1; }
constexpr int64_t conv_bwd_du_rows(int64_t dc) { return kConvChunk + dc - 1; }
constexpr int64_t conv_bwd_x_rows(int64_t dc) { return kConvChunk + 2 * (dc - 1); }

// One block per tile of (b, chunk, kConvTileChannels channels), one thread per channel.
//   xb [B, T, di] T (row stride ld_x), w [di, dc], bias [di], state0 [B, di, dc] (S0, read
//   only here) -> windows [B, T, di, dc] f32 (opt), pc [B, T, di] T (opt), u [B, T, di] T
// Registers are right-aligned: slot KDC−1 holds the current input and tap
// k of a width-dc window sits at register k + (KDC − dc), so every register
// index is a compile-time constant for any runtime dc. At KDC = kNarrowDC the
// launcher passes dc = KDC only, so the pad is 0 at compile time and the tap guards
// vanish; the outputs advance by pointer, one row per step (no 64-bit multiply).
template <class T, int KDC>
__global__ void __launch_bounds__(kConvTileChannels)
    conv1d_silu_fwd_kernel(const T* __restrict__ xb, int64_t ld_x, bool vec16,
                           const float* __restrict__ w, const float* __restrict__ bias,
                           int64_t B, int64_t T_len, int64_t di, int dc_arg, int64_t n_chunks,
                           int64_t n_ctiles, const float* __restrict__ state0,
                           float* __restrict__ windows, T* __restrict__ pc,
                           T* __restrict__ u, int64_t ld_u) {
  extern __shared__ __align__(16) unsigned char conv_smem[];
  T* xs = reinterpret_cast<T*>(conv_smem);  // xb rows [x_lo, t1) of the tile
  const int dc = KDC == kNarrowDC ? KDC : dc_arg;
  const int64_t n_tiles = B * n_chunks * n_ctiles;
  const int pad = KDC - dc;  // registers [0, pad) are unused
  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const ConvTile c = conv_tile(tile, n_chunks, n_ctiles, T_len, di);
    const int64_t x_lo = c.t0 - (dc - 1) > 0 ? c.t0 - (dc - 1) : 0;
    __syncthreads();  // the previous tile's rows are no longer read
    stage_rows(xs, xb, ld_x, c.b * T_len, x_lo, c.t1, c.d0, c.channels, vec16);
    staged_rows_ready();
    const int lane = threadIdx.x;
    if (lane >= c.channels) continue;
    const int64_t d = c.d0 + lane;
    const float* s0 = state0 + (c.b * di + d) * dc;
    // tap `src` of xb (src >= 0, staged) or of S0 (src < 0: S0[src + dc])
    auto x_at = [&](int64_t src) {
      return src >= 0 ? dev::to_f32(xs[(src - x_lo) * kConvTileChannels + lane]) : s0[src + dc];
    };
    float wr[KDC], s[KDC];
    // s = W_{t0−1} without its tap 0, which the first shift drops unread
#pragma unroll
    for (int r = 0; r < KDC; ++r) {
      const int k = r - pad;
      wr[r] = k >= 0 ? w[d * dc + k] : 0.0f;
      s[r] = k >= 1 ? x_at(c.t0 - dc + k) : 0.0f;
    }
    const float bd = bias[d];
    const int steps = int(c.t1 - c.t0);
    const T* xrow = xs + (c.t0 - x_lo) * kConvTileChannels + lane;
    const int64_t row0 = c.b * T_len + c.t0;
    T* urow = u + row0 * ld_u + d;
    for (int i = 0; i < steps; ++i, xrow += kConvTileChannels, urow += ld_u) {
      // shift + insert, then save: saved before the insert, the window would be off
      // by one step and flip the sign of the conv weight gradient
#pragma unroll
      for (int r = 0; r < KDC - 1; ++r) s[r] = s[r + 1];
      s[KDC - 1] = dev::to_f32(*xrow);
      float acc = bd;  // pc = bias + Σ_k W_t[k]·w[k], k ascending
#pragma unroll
      for (int r = 0; r < KDC; ++r)
        if (r >= pad) acc += s[r] * wr[r];
      if (windows) {
        float* wt = windows + ((row0 + i) * di + d) * dc;
#pragma unroll
        for (int r = 0; r < KDC; ++r)
          if (r >= pad) wt[r - pad] = s[r];
      }
      if (pc) pc[(row0 + i) * di + d] = dev::from_f32<T>(acc);
      *urow = dev::from_f32<T>(dev::silu(acc));
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

// What the backward reads besides du: the saved windows and pc, or (windows == pc ==
// null) the input rows xb and the incoming state S0 to rebuild them, exactly as the
// forward built them (the same f32 sum in the same order), pc rounded to T as a typed
// store of it would have been. Which of the two is a template parameter of the kernel
// (kRebuild), so its step loop carries no run-time test of these pointers.
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

// One channel's view of a staged backward tile: du rows (and with kAdd the du_add rows)
// from t0 and (rebuilding) xb rows from x_lo, all [rows, kConvTileChannels] in shared
// memory.
template <class T, bool kAdd>
struct ConvBwdLane {
  const T* us;
  const T* ua;  // du_add rows (kAdd)
  const T* xs;
  int64_t t0, x_lo;
  int lane;
  const float* s0;  // S0 of (b, d): [dc]

  // Tap k of the window W_t: xb[t − (dc−1) + k] if that index >= 0, else S0[t + k + 1].
  __device__ __forceinline__ float window_tap(int64_t t, int dc, int k) const {
    const int64_t src = t - (dc - 1) + k;
    return src >= 0 ? dev::to_f32(xs[(src - x_lo) * kConvTileChannels + lane]) : s0[t + k + 1];
  }
  // Staged xb row r (r = src − x_lo, known to be staged): no test for S0.
  __device__ __forceinline__ float staged_x(int r) const {
    return dev::to_f32(xs[r * kConvTileChannels + lane]);
  }
  // The upstream gradient of step i = t − t0 of the chunk: du, or with kAdd the sum
  // q(du + du_add) rounded to T, the value add_inplace stores (the backward then reads
  // exactly what it would have read from the summed tensor).
  __device__ __forceinline__ float du_row(int i) const {
    const int o = i * kConvTileChannels + lane;
    if constexpr (kAdd)
      return dev::round_f32<T>(dev::to_f32(us[o]) + dev::to_f32(ua[o]));
    else
      return dev::to_f32(us[o]);
  }
  __device__ __forceinline__ float du_at(int64_t t) const { return du_row(int(t - t0)); }
};

// pc_t of (b, d): saved, or rebuilt (bias + Σ_k W_t[k]·w[k], k ascending — the
// forward's sum) and rounded like a typed store.
template <bool kRebuild, class T, bool kAdd>
__device__ __forceinline__ float pc_at(const ConvSaved<T>& sv, const ConvBwdLane<T, kAdd>& ln,
                                       int64_t b, int64_t t, int64_t T_len, int64_t di, int dc,
                                       int64_t d) {
  if constexpr (!kRebuild) return dev::to_f32(sv.pc[(b * T_len + t) * di + d]);
  float acc = sv.bias[d];
  for (int k = 0; k < dc; ++k) acc += ln.window_tap(t, dc, k) * sv.w[d * dc + k];
  return dev::round_f32<T>(acc);
}

// g_t = du_t·SiLU'(pc_t); 0 outside [0, T).
template <bool kRebuild, class T, bool kAdd>
__device__ __forceinline__ float conv_grad_at(const ConvSaved<T>& sv,
                                              const ConvBwdLane<T, kAdd>& ln,
                                              int64_t b, int64_t t, int64_t T_len, int64_t di,
                                              int dc, int64_t d) {
  if (t >= T_len) return 0.0f;
  return ln.du_at(t) * dev::silu_grad(pc_at<kRebuild>(sv, ln, b, t, T_len, di, dc, d));
}

// The staging flags of a backward tile: whether each typed input moves in 16-byte pieces.
struct ConvBwdVec16 {
  bool du, du_add, x;
};

// One block per tile of (b, chunk, kConvTileChannels channels), one thread per channel,
// t descending inside the chunk.
//   du, pc [B, T, di] T, windows [B, T, di, dc] f32 (kRebuild: rebuilt from xb [B*T, ld_x]
//   T and S0 [B, di, dc] instead), w [di, dc], du_add [B, T, di] T (kAdd: the upstream
//   gradient is q(du + du_add))
//   -> dxb [B*T, ld_dx] T, pw [B, n_chunks, di, dc] f32, pb [B, n_chunks, di] f32,
//      d_state0 [B, di, dc] f32 (opt; written by the chunk-0 threads)
// Right-aligned registers as in the forward: tap k of w at register k + pad.
// The chunk's steps are walked in three runs, each step the same arithmetic: the
// steps that may add the final window's gradient (the last dc of the sequence), the
// main run, and the steps whose next window reaches into S0 or past the chunk (step 0,
// and steps t < dc of chunk 0). Only the two outer runs (at most dc steps each) test
// for those cases; the main run reads tap 0 of the next window from the staged rows
// without a test.
template <class T, int KDC, bool kRebuild, bool kAdd>
__global__ void __launch_bounds__(kConvTileChannels)
    conv1d_silu_bwd_kernel(const T* __restrict__ du, const T* __restrict__ du_add,
                           ConvSaved<T> sv, ConvBwdVec16 vec16,
                           const float* __restrict__ w, int64_t B, int64_t T_len,
                           int64_t di, int dc_arg, int64_t n_chunks, int64_t n_ctiles,
                           T* __restrict__ dxb, int64_t ld_dx, float* __restrict__ pw,
                           float* __restrict__ pb, float* __restrict__ d_state0,
                           const float* __restrict__ d_state_T) {
  extern __shared__ __align__(16) unsigned char conv_smem[];
  const int dc = KDC == kNarrowDC ? KDC : dc_arg;  // as in the forward
  const int64_t du_elems = conv_bwd_du_rows(dc) * kConvTileChannels;
  T* us = reinterpret_cast<T*>(conv_smem);
  T* ua = us + du_elems;                  // kAdd
  T* xs = kAdd ? ua + du_elems : ua;      // kRebuild
  const int64_t n_tiles = B * n_chunks * n_ctiles;
  const int pad = KDC - dc;
  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const ConvTile c = conv_tile(tile, n_chunks, n_ctiles, T_len, di);
    const int64_t t0 = c.t0, t1 = c.t1;
    const int64_t u_hi = t1 + dc - 1 < T_len ? t1 + dc - 1 : T_len;
    const int64_t x_lo = t0 - (dc - 1) > 0 ? t0 - (dc - 1) : 0;
    __syncthreads();  // the previous tile's rows are no longer read
    stage_rows(us, du, di, c.b * T_len, t0, u_hi, c.d0, c.channels, vec16.du);
    if constexpr (kAdd)
      stage_rows(ua, du_add, di, c.b * T_len, t0, u_hi, c.d0, c.channels, vec16.du_add);
    if constexpr (kRebuild)
      stage_rows(xs, sv.xb, sv.ld_x, c.b * T_len, x_lo, u_hi, c.d0, c.channels, vec16.x);
    staged_rows_ready();
    const int lane = threadIdx.x;
    if (lane >= c.channels) continue;
    const int64_t d = c.d0 + lane;
    const ConvBwdLane<T, kAdd> ln{us, ua, xs, t0, x_lo, lane,
                                  kRebuild ? sv.s0 + (c.b * di + d) * dc : nullptr};
    const float* wd = w + d * dc;
    const float* dsT = d_state_T ? d_state_T + (c.b * di + d) * dc : nullptr;
    float wr[KDC], dw[KDC], gn[KDC];  // gn[j] = g_{t+1+j} for j = 0..dc−2 (0 beyond T)
#pragma unroll
    for (int r = 0; r < KDC; ++r) {
      wr[r] = r >= pad ? wd[r - pad] : 0.0f;
      dw[r] = 0.0f;
      gn[r] = r < dc - 1 ? conv_grad_at<kRebuild>(sv, ln, c.b, t1 + r, T_len, di, dc, d) : 0.0f;
    }
    // Without saved windows the window W_t of the current step is kept in registers
    // (win[k + pad] = tap k) and slid one step left per step: one new tap (xb or S0)
    // per step instead of dc taps for pc_t and dc more for the weight gradient.
    float win[KDC];
#pragma unroll
    for (int r = 0; r < KDC; ++r)
      win[r] = kRebuild && r >= pad ? ln.window_tap(t1 - 1, dc, r - pad) : 0.0f;
    const float bd = kRebuild ? sv.bias[d] : 0.0f;
    float db = 0.0f;
    // step i = t − t0 of the chunk, walked down; dxb's row advances by pointer
    const int steps = int(t1 - t0);
    const int64_t row_t0 = c.b * T_len + t0;
    T* dx_row = dxb + (row_t0 + steps - 1) * ld_dx + d;
    // the final window's upstream gradient enters at steps i >= ds_lo (none without it)
    const int64_t ds_from = T_len - dc - t0;
    const int ds_lo = !dsT ? steps : ds_from < 0 ? 0 : ds_from > steps ? steps : int(ds_from);
    // tap 0 of W_{t−1} is staged row i + tap0_row of xs wherever t − dc >= 0 (so for
    // steps i >= 1 of a chunk after the first, i >= dc of chunk 0): main_lo is the
    // lowest step of the main run, which also stays below ds_lo
    const int tap0_row = int(t0 - dc - x_lo);
    const int64_t tap0_lo = t0 >= dc ? 1 : dc - t0;
    const int main_lo = tap0_lo < ds_lo ? int(tap0_lo) : ds_lo;

    // One step (i = t − t0). kEdge: the step may add d_state_T or fetch the next tap from
    // S0 (or have none, at i = 0); the main run's steps do neither.
    auto step = [&](int i, auto edge) {
      constexpr bool kEdge = decltype(edge)::value;
      const int64_t t = t0 + i;
      float pct;
      if constexpr (!kRebuild) {
        pct = dev::to_f32(sv.pc[(row_t0 + i) * di + d]);
      } else {  // the forward's sum: bias + Σ_k W_t[k]·w[k], k ascending, rounded like pc
        float acc = bd;
#pragma unroll
        for (int r = 0; r < KDC; ++r)
          if (r >= pad) acc += win[r] * wr[r];
        pct = dev::round_f32<T>(acc);
      }
      const float g = ln.du_row(i) * dev::silu_grad(pct);
      // dxb_t = g_t·w[dc−1] + ((g_{t+dc−1}·w[0] + g_{t+dc−2}·w[1]) + ... + g_{t+1}·w[dc−2])
      // (w[dc−1−j] sits at register KDC−1−j)
      float carry = 0.0f;
#pragma unroll
      for (int j = KDC - 1; j >= 1; --j)
        if (j < dc) carry += gn[j - 1] * wr[KDC - 1 - j];
      float v = g * wr[KDC - 1] + carry;
      // the final window holds xb[T-dc .. T-1]: its upstream gradient (f32, one rounding)
      if constexpr (kEdge)
        if (i >= ds_lo) v += dsT[t - T_len + dc];
      *dx_row = dev::from_f32<T>(v);
      dx_row -= ld_dx;
      if constexpr (!kRebuild) {
        const float* wt = sv.windows + ((row_t0 + i) * di + d) * dc;
#pragma unroll
        for (int r = 0; r < KDC; ++r)
          if (r >= pad) dw[r] += g * wt[r - pad];
      } else {
#pragma unroll
        for (int r = 0; r < KDC; ++r)
          if (r >= pad) dw[r] += g * win[r];
        // W_{t−1}: taps 1.. are W_t's taps 0..; tap 0 is xb[t − dc] (or S0 before the start)
        float tap0;
        if constexpr (kEdge)
          tap0 = i > 0 ? ln.window_tap(t - 1, dc, 0) : 0.0f;
        else
          tap0 = ln.staged_x(i + tap0_row);
#pragma unroll
        for (int r = KDC - 1; r >= 1; --r)  // constant register indices: no local memory
          win[r] = r > pad ? win[r - 1] : (r == pad ? tap0 : 0.0f);
        win[0] = pad == 0 ? tap0 : 0.0f;
      }
      db += g;
#pragma unroll
      for (int j = KDC - 1; j >= 1; --j) gn[j] = gn[j - 1];
      gn[0] = g;
    };
    int i = steps - 1;
#pragma unroll 1
    for (; i >= ds_lo; --i) step(i, std::true_type{});
#pragma unroll 4
    for (; i >= main_lo; --i) step(i, std::false_type{});
#pragma unroll 1
    for (; i >= 0; --i) step(i, std::true_type{});

    const int64_t prow = (c.b * n_chunks + t0 / kConvChunk) * di + d;
    float* pwr = pw + prow * dc;
#pragma unroll
    for (int r = 0; r < KDC; ++r)
      if (r >= pad) pwr[r - pad] = dw[r];
    pb[prow] = db;
    if (d_state0 && t0 == 0) {
      // gn[t] = g_t now (0 for t >= T): d_state0[j] = Σ_{t=0}^{j−1} g_t·w[j−1−t], slot 0 = 0.
      float* ds = d_state0 + (c.b * di + d) * dc;
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
int64_t conv_channel_tiles(int64_t di) { return (di + kConvTileChannels - 1) / kConvTileChannels; }

// One block per tile while that fits the grid cap; the kernels loop over the rest.
unsigned conv_tile_grid(int64_t n_tiles) {
  return unsigned(std::max<int64_t>(1, std::min(n_tiles, kMaxGrid1D)));
}

// Whether rows of a typed tensor at p with row stride ld can be staged in 16-byte pieces.
template <class T>
bool rows_16b_aligned(const T* p, int64_t ld) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (size_t(ld) * sizeof(T)) % 16 == 0;
}

template <class T>
size_t conv_bwd_smem_bytes(int64_t dc, bool rebuild, bool add) {
  const int64_t rows = conv_bwd_du_rows(dc) * (add ? 2 : 1) + (rebuild ? conv_bwd_x_rows(dc) : 0);
  return size_t(rows) * kConvTileChannels * sizeof(T);
}

// The backward instance of a call: saved windows and pc, or rebuilt from xb and S0;
// with or without a second upstream gradient du_add.
template <class T, int KDC, bool kRebuild>
auto conv_bwd_kernel_for(bool add) {
  return add ? &conv1d_silu_bwd_kernel<T, KDC, kRebuild, true>
             : &conv1d_silu_bwd_kernel<T, KDC, kRebuild, false>;
}
template <class T, int KDC>
auto conv_bwd_kernel_for(bool rebuild, bool add) {
  return rebuild ? conv_bwd_kernel_for<T, KDC, true>(add) : conv_bwd_kernel_for<T, KDC, false>(add);
}

// Whether the bytes [a, a + na) and [b, b + nb) share any.
bool bytes_overlap(const void* a, size_t na, const void* b, size_t nb) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + nb && pb < pa + na;
}

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
  const int64_t ld_u = p.ld_u ? p.ld_u : p.di;
  if (ld_u < p.di) fail_arg(k, "ld_u", ld_u, ">=", p.di, "row stride of u");
  const int64_t n_chunks = conv_chunks(p.seq_len), n_ctiles = conv_channel_tiles(p.di);
  // exactly kNarrowDC taps (Mamba's usual width): the compile-time window; else the wide one
  auto* kern = p.dc == kNarrowDC ? &conv1d_silu_fwd_kernel<T, kNarrowDC>
                                 : &conv1d_silu_fwd_kernel<T, kDC>;
  const size_t smem = size_t(conv_fwd_tile_rows(p.dc)) * kConvTileChannels * sizeof(T);
  kern<<<conv_tile_grid(p.B * n_chunks * n_ctiles), kConvTileChannels, smem, stream>>>(
      p.xb, ld_x, rows_16b_aligned(p.xb, ld_x), p.w, p.bias, p.B, p.seq_len, p.di, int(p.dc),
      n_chunks, n_ctiles, p.s0, p.windows, p.pc, p.u, ld_u);
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
  if (p.du_add) {  // optional; read by neighbouring tiles while dxb rows are being written
    const int64_t R = p.B * p.seq_len;
    const size_t add_bytes = size_t(R * p.di) * sizeof(T);
    const size_t dx_bytes = size_t((R - 1) * ld_dx + p.di) * sizeof(T);
    if (bytes_overlap(p.du_add, add_bytes, p.dxb, dx_bytes)) {
      std::ostringstream os;
      os << k << ": du_add = " << static_cast<const void*>(p.du_add) << " (" << add_bytes
         << " B) overlaps dxb = " << static_cast<const void*>(p.dxb) << " (" << dx_bytes
         << " B): du_add is an input, dxb is written while other tiles still read it";
      throw ConfigError(os.str());
    }
  }
  const int64_t n_chunks = conv_chunks(p.seq_len);
  const int64_t rows = p.B * n_chunks, di = p.di, dc = p.dc;
  float* pw = p.scratch;             // [rows, di*dc]
  float* pb = pw + rows * di * dc;   // [rows, di]
  float* reduce_scratch = pb + rows * di;
  const bool narrow = dc == kNarrowDC;  // as in the forward
  const bool rebuild = p.windows == nullptr, add = p.du_add != nullptr;
  auto* kern = narrow ? conv_bwd_kernel_for<T, kNarrowDC>(rebuild, add)
                      : conv_bwd_kernel_for<T, kDC>(rebuild, add);
  const size_t smem = conv_bwd_smem_bytes<T>(dc, rebuild, add);
  // the attribute is the kernel's worst case (its widest window), never this call's need
  gpu::set_smem_limit(reinterpret_cast<const void*>(kern), smem,
                      conv_bwd_smem_bytes<T>(narrow ? kNarrowDC : kDC, rebuild, add), k);
  const int64_t n_ctiles = conv_channel_tiles(di);
  const ConvBwdVec16 vec16{rows_16b_aligned(p.du, di), add && rows_16b_aligned(p.du_add, di),
                           rebuild && rows_16b_aligned(sv.xb, sv.ld_x)};
  kern<<<conv_tile_grid(rows * n_ctiles), kConvTileChannels, smem, stream>>>(
      p.du, p.du_add, sv, vec16, p.w, p.B, p.seq_len, di, int(dc), n_chunks, n_ctiles, p.dxb,
      ld_dx, pw, pb, p.d_state0, p.d_state_T);
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
