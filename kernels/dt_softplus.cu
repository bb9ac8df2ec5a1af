// dt_softplus.cu — the kernel and launchers of dt_softplus.cuh: the dt_proj GEMM
// on the tensor cores (WMMA 16x16x16, f32 accumulators) with the F4c / B4 softplus
// as its epilogue. Instantiated for __nv_bfloat16 and __half.
//
// Block tile: kTM = 64 rows x kTN = 128 channels, 8 warps as 4 (rows) x 2 (channels),
// each warp 16 rows x 64 channels (four accumulator fragments). K = dt_rank padded with
// zeros to a multiple of 16 (KP), staged whole: A [64, KP] and W [KP, 128] in shared
// memory, then KP/16 MMA steps in ascending k (a fixed order: the bits depend only on
// the shape). The accumulators go to a shared [64, 128] f32 tile, and the epilogue
// walks it with 8 consecutive channels per thread, 16-byte loads and stores where the
// rows allow it.
#include "kernels/dt_softplus.cuh"

#include <mma.h>

#include "kernels/cuda_check.hpp"
#include "kernels/launch_args.hpp"
#include "kernels/typed.cuh"

namespace mc::kern {

namespace {

constexpr int kTM = 64, kTN = 128, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kVec = 8;                  // channels per thread in the epilogue
constexpr int kLdw = kTN + 8;            // W tile row stride (elements; a multiple of 8)
constexpr int kLdc = kTN + 4;            // accumulator tile row stride (floats; a multiple of 4)
constexpr int kGroupsPerRow = kTN / kVec;                // 16
constexpr int kRowsPerPass = kThreads / kGroupsPerRow;   // 16

__host__ __device__ constexpr int padded_rank(int64_t dr) { return int((dr + 15) / 16 * 16); }
__host__ __device__ constexpr int lda_of(int kp) { return kp + 8; }  // A tile row stride (elements)

size_t smem_bytes(int kp, size_t elem) {
  return size_t(kTM) * lda_of(kp) * elem + size_t(kp) * kLdw * elem +
         size_t(kTM) * kLdc * sizeof(float) + size_t(kTN) * sizeof(float);
}

template <class T>
struct DtArgs {
  DtSoftplusParams<T> p;
  int kp;      // dt_rank padded to a multiple of 16
  bool vec;    // 16-byte epilogue accesses (di % 8 == 0, out / d_delta 16-byte aligned)
  bool vec_a;  // dt_in rows staged as 16-byte pieces (dr, ld_in % 8 == 0, dt_in aligned)
  bool vec_w;  // W rows staged as 16-byte pieces (di % 8 == 0, w aligned)
};

template <class T>
struct alignas(16) Pack8 {
  T e[kVec];
};

// The epilogue of one element: acc (the f32 GEMM result) -> Δ or dΔraw.
template <class T, bool kBwd>
__device__ __forceinline__ T epilogue(float acc, float bias, T d_delta) {
  const T raw = dev::delta_raw_of<T>(acc, bias);
  if constexpr (kBwd)
    return dev::softplus_grad<T>(dev::to_f32(raw), dev::to_f32(d_delta));
  else
    return dev::from_f32<T>(dev::softplus(dev::to_f32(raw)));
}

// grid (ceil(di / kTN), ceil(R / kTM)), kThreads threads, smem_bytes(kp) dynamic.
//   dt_in [R, dr] (stride ld_in), w [dr, di], bias [di] -> out [R, di]  (d_delta [R, di])
template <class T, bool kBwd>
__global__ void __launch_bounds__(kThreads) dt_softplus_kernel(DtArgs<T> a) {
  namespace wmma = nvcuda::wmma;
  extern __shared__ __align__(128) unsigned char dts_smem[];
  const DtSoftplusParams<T>& p = a.p;
  const int kp = a.kp, lda = lda_of(kp);
  T* sa = reinterpret_cast<T*>(dts_smem);                   // [kTM][lda]
  T* sw = sa + size_t(kTM) * lda;                            // [kp][kLdw]
  float* sc = reinterpret_cast<float*>(sw + size_t(kp) * kLdw);  // [kTM][kLdc]
  float* sb = sc + size_t(kTM) * kLdc;                       // [kTN] bias
  const int64_t r0 = int64_t(blockIdx.y) * kTM, d0 = int64_t(blockIdx.x) * kTN;
  const T zero = dev::from_f32<T>(0.0f);

  // stage A = dt_in rows [r0, r0 + kTM), W columns [d0, d0 + kTN), zero-padded. The
  // 16-byte pieces go through cp.async (all of a thread's copies in flight at once);
  // the element-wise fallback serves shapes whose rows are not 16-byte pieces.
  constexpr int kPer = 16 / int(sizeof(T));  // elements per 16-byte piece
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  if (a.vec_a) {
    const int pr = kp / kPer;  // pieces per A row
    for (int i = int(threadIdx.x); i < kTM * pr; i += kThreads) {
      const int r = i / pr, k = (i - r * pr) * kPer;
      T* dst = sa + r * lda + k;
      if (r0 + r < p.R && k < p.dr) dev::cp_async16(dst, p.dt_in + (r0 + r) * p.ld_in + k);
      else *reinterpret_cast<uint4*>(dst) = zero4;
    }
  } else {
    for (int i = int(threadIdx.x); i < kTM * kp; i += kThreads) {
      const int r = i / kp, k = i - r * kp;
      sa[r * lda + k] = (r0 + r < p.R && k < p.dr) ? p.dt_in[(r0 + r) * p.ld_in + k] : zero;
    }
  }
  if (a.vec_w) {
    constexpr int pw = kTN / kPer;  // pieces per W row
    for (int i = int(threadIdx.x); i < kp * pw; i += kThreads) {
      const int k = i / pw, c = (i % pw) * kPer;
      T* dst = sw + k * kLdw + c;
      if (k < p.dr && d0 + c < p.di) dev::cp_async16(dst, p.w + int64_t(k) * p.di + d0 + c);
      else *reinterpret_cast<uint4*>(dst) = zero4;
    }
  } else {
    for (int i = int(threadIdx.x); i < kp * kTN; i += kThreads) {
      const int k = i / kTN, c = i % kTN;
      sw[k * kLdw + c] = (k < p.dr && d0 + c < p.di) ? p.w[int64_t(k) * p.di + d0 + c] : zero;
    }
  }
  for (int c = int(threadIdx.x); c < kTN; c += kThreads)
    sb[c] = d0 + c < p.di ? p.bias[d0 + c] : 0.0f;
  dev::cp_async_wait_all();
  __syncthreads();

  // acc tile on the tensor cores: warp (wm, wn) owns rows wm·16.., channels wn·64..
  {
    const int warp = int(threadIdx.x) / 32, wm = warp / 2, wn = warp % 2;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[j], 0.0f);
    for (int k = 0; k < kp; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::load_matrix_sync(fa, sa + (wm * 16) * lda + k, unsigned(lda));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fb, sw + k * kLdw + wn * 64 + j * 16, unsigned(kLdw));
        wmma::mma_sync(acc[j], fa, fb, acc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
      wmma::store_matrix_sync(sc + (wm * 16) * kLdc + wn * 64 + j * 16, acc[j], unsigned(kLdc),
                              wmma::mem_row_major);
  }
  __syncthreads();

  // epilogue: thread -> 8 consecutive channels of rows t/16 + 16·pass
  const int c = (int(threadIdx.x) % kGroupsPerRow) * kVec;
  const int64_t d = d0 + c;
  if (d >= p.di) return;
  for (int rr = int(threadIdx.x) / kGroupsPerRow; rr < kTM; rr += kRowsPerPass) {
    const int64_t r = r0 + rr;
    if (r >= p.R) break;
    const float* accr = sc + rr * kLdc + c;
    const int64_t i = r * p.di + d;
    if (a.vec && d + kVec <= p.di) {
      Pack8<T> g{}, o;
      if constexpr (kBwd) g = *reinterpret_cast<const Pack8<T>*>(p.d_delta + i);
      // two 16-byte shared loads each (the rows and c are 16-byte aligned)
      const float4 a0 = *reinterpret_cast<const float4*>(accr);
      const float4 a1 = *reinterpret_cast<const float4*>(accr + 4);
      const float4 b0 = *reinterpret_cast<const float4*>(sb + c);
      const float4 b1 = *reinterpret_cast<const float4*>(sb + c + 4);
      const float av[kVec] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[kVec] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int j = 0; j < kVec; ++j) o.e[j] = epilogue<T, kBwd>(av[j], bv[j], kBwd ? g.e[j] : zero);
      *reinterpret_cast<Pack8<T>*>(p.out + i) = o;
    } else {
      for (int j = 0; j < kVec && d + j < p.di; ++j)
        p.out[i + j] = epilogue<T, kBwd>(accr[j], sb[c + j], kBwd ? p.d_delta[i + j] : zero);
    }
  }
}

template <class T, bool kBwd>
void launch(const char* k, const DtSoftplusParams<T>& p, cudaStream_t stream) {
  require_positive(k, "rows", p.R);
  require_positive(k, "d_inner", p.di);
  require_range(k, "dt_rank", p.dr, 1, kDtSoftplusMaxRank,
                "the fused kernel stages the whole K tile; larger ranks take the cuBLAS path");
  if (p.ld_in < p.dr) fail_arg(k, "ld_in", p.ld_in, ">=", p.dr, "row stride of dt_in");
  require_ptr(k, "dt_in", p.dt_in);
  require_ptr(k, "w", p.w);
  require_ptr(k, "bias", p.bias);
  require_ptr(k, "out", p.out);
  if (kBwd) require_ptr(k, "d_delta", p.d_delta);
  const int64_t grid_y = (p.R + kTM - 1) / kTM;
  require_range(k, "ceil(rows / 64)", grid_y, 1, 65535, "grid y limit");
  constexpr int kPer = 16 / int(sizeof(T));
  const DtArgs<T> a{p, padded_rank(p.dr), packable(kVec, {p.di}, {p.out, p.d_delta}),
                    packable(kPer, {p.dr, p.ld_in}, {p.dt_in}), packable(kPer, {p.di}, {p.w})};
  const size_t bytes = smem_bytes(a.kp, sizeof(T));
  auto* kern = &dt_softplus_kernel<T, kBwd>;
  gpu::set_smem_limit(reinterpret_cast<const void*>(kern), bytes,
                      smem_bytes(padded_rank(kDtSoftplusMaxRank), sizeof(T)), k);
  const dim3 grid(unsigned((p.di + kTN - 1) / kTN), unsigned(grid_y));
  kern<<<grid, kThreads, bytes, stream>>>(a);
  MC_LAUNCH_CHECK(k);
}

}  // namespace

template <class T>
void dt_softplus_fwd(const DtSoftplusParams<T>& p, cudaStream_t stream) {
  launch<T, false>("dt_softplus_fwd", p, stream);
}

template <class T>
void dt_softplus_bwd(const DtSoftplusParams<T>& p, cudaStream_t stream) {
  launch<T, true>("dt_softplus_bwd", p, stream);
}

template void dt_softplus_fwd<__nv_bfloat16>(const DtSoftplusParams<__nv_bfloat16>&, cudaStream_t);
template void dt_softplus_bwd<__nv_bfloat16>(const DtSoftplusParams<__nv_bfloat16>&, cudaStream_t);
template void dt_softplus_fwd<__half>(const DtSoftplusParams<__half>&, cudaStream_t);
template void dt_softplus_bwd<__half>(const DtSoftplusParams<__half>&, cudaStream_t);

}  // namespace mc::kern
