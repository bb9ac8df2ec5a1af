// reduce.cu — fixed-order column sums (reduce_sum_axis0, bias gradients) and
// the first-non-finite scanner of reduce.cuh. Explicit instantiations for
// float, __nv_bfloat16 and __half.
#include "kernels/reduce.cuh"

#include <climits>

#include "kernels/cuda_check.hpp"
#include "kernels/launch_args.hpp"
#include "kernels/typed.cuh"

namespace mc::kern {

namespace {

constexpr int kColTile = 32;   // columns per block (one warp across, coalesced)
constexpr int kRowLanes = 8;   // row lanes per block
constexpr int64_t kMaxColTiles = 65535;  // gridDim.y limit

// One level of column_sum. Block (kColTile, kRowLanes); blockIdx.x = row chunk,
// blockIdx.y = column tile.
//   src [rows, ld] T -> final: out [cols] (= or +=); else partial [n_chunks, cols].
template <class T>
__global__ void column_sum_kernel(const T* __restrict__ src, int64_t rows, int64_t cols,
                                  int64_t ld, int64_t chunk, bool final_level, bool accumulate,
                                  float* __restrict__ dst) {
  __shared__ float sm[kRowLanes][kColTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = int64_t(blockIdx.y) * kColTile + tx;
  const int64_t r0 = int64_t(blockIdx.x) * chunk;
  const int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t r = r0 + ty; r < r1; r += kRowLanes) acc += dev::to_f32(src[r * ld + c]);
  sm[ty][tx] = acc;
  __syncthreads();
#pragma unroll
  for (int s = kRowLanes / 2; s >= 1; s >>= 1) {
    if (ty < s) sm[ty][tx] += sm[ty + s][tx];
    __syncthreads();
  }
  if (ty == 0 && c < cols) {
    const float total = sm[0][tx];
    if (!final_level)
      dst[int64_t(blockIdx.x) * cols + c] = total;
    else
      dst[c] = accumulate ? dst[c] + total : total;
  }
}

template <class T>
void launch_column_sum_level(const T* src, int64_t rows, int64_t cols, int64_t ld,
                             bool final_level, bool accumulate, float* dst,
                             cudaStream_t stream) {
  const int64_t chunks = (rows + kColumnSumChunk - 1) / kColumnSumChunk;
  const dim3 grid(unsigned(chunks), unsigned((cols + kColTile - 1) / kColTile));
  column_sum_kernel<T><<<grid, dim3(kColTile, kRowLanes), 0, stream>>>(
      src, rows, cols, ld, kColumnSumChunk, final_level, accumulate, dst);
  MC_LAUNCH_CHECK("column_sum_kernel");
}

// ---- first non-finite -----------------------------------------------------------
constexpr int kScanBlock = 256;
constexpr int64_t kScanMaxBlocks = 1024;
constexpr int64_t kNone = LLONG_MAX;

int64_t scan_blocks(int64_t n) {
  const int64_t per_block = int64_t(kScanBlock) * 4;
  return std::max<int64_t>(1, std::min((n + per_block - 1) / per_block, kScanMaxBlocks));
}

// Smallest value of sm[0..kScanBlock) into sm[0] (fixed halving tree).
__device__ void block_min(int64_t* sm) {
  for (int s = kScanBlock / 2; s >= 1; s >>= 1) {
    if (int(threadIdx.x) < s && sm[threadIdx.x + s] < sm[threadIdx.x]) sm[threadIdx.x] = sm[threadIdx.x + s];
    __syncthreads();
  }
}

// p [n] -> block_min_index [gridDim.x]: smallest non-finite index seen by each block.
template <class T>
__global__ void nonfinite_pass1(const T* __restrict__ p, int64_t n, int64_t* __restrict__ block_min_index) {
  __shared__ int64_t sm[kScanBlock];
  int64_t first = kNone;
  for (int64_t i = dev::global_index(); i < n; i += dev::grid_stride()) {
    if (!isfinite(dev::to_f32(p[i]))) {
      first = i;  // indices grow along the loop: the first hit is this thread's minimum
      break;
    }
  }
  sm[threadIdx.x] = first;
  __syncthreads();
  block_min(sm);
  if (threadIdx.x == 0) block_min_index[blockIdx.x] = sm[0];
}

// block_min_index [m] -> result[0] = min (one block).
__global__ void nonfinite_pass2(const int64_t* __restrict__ block_min_index, int64_t m,
                                int64_t* __restrict__ result) {
  __shared__ int64_t sm[kScanBlock];
  int64_t v = kNone;
  for (int64_t i = threadIdx.x; i < m; i += kScanBlock)
    if (block_min_index[i] < v) v = block_min_index[i];
  sm[threadIdx.x] = v;
  __syncthreads();
  block_min(sm);
  if (threadIdx.x == 0) result[0] = sm[0];
}

}  // namespace

size_t column_sum_scratch_floats(int64_t rows, int64_t cols) {
  size_t total = 0;
  int64_t r = rows;
  while (r > kColumnSumChunk) {
    r = (r + kColumnSumChunk - 1) / kColumnSumChunk;
    total += size_t(r) * size_t(cols);
  }
  return total;
}

template <class T>
void column_sum(const T* src, int64_t rows, int64_t cols, int64_t ld, float* out,
                bool accumulate, float* scratch, cudaStream_t stream) {
  const char* k = "column_sum";
  require_positive(k, "rows", rows);
  require_range(k, "cols", cols, 1, kMaxColTiles * kColTile, "column tiles are gridDim.y");
  require_range(k, "ld", ld, cols, INT64_MAX, "row stride must cover the summed columns");
  require_ptr(k, "src", src);
  require_ptr(k, "out", out);
  if (rows <= kColumnSumChunk) {
    launch_column_sum_level<T>(src, rows, cols, ld, true, accumulate, out, stream);
    return;
  }
  require_ptr(k, "scratch", scratch);
  // Level 0 reads the typed input; every later level reads the f32 chunk totals.
  int64_t r = (rows + kColumnSumChunk - 1) / kColumnSumChunk;
  float* level = scratch;
  launch_column_sum_level<T>(src, rows, cols, ld, false, false, level, stream);
  while (r > kColumnSumChunk) {
    const int64_t next_r = (r + kColumnSumChunk - 1) / kColumnSumChunk;
    float* next = level + r * cols;
    launch_column_sum_level<float>(level, r, cols, cols, false, false, next, stream);
    level = next;
    r = next_r;
  }
  launch_column_sum_level<float>(level, r, cols, cols, true, accumulate, out, stream);
}

size_t first_nonfinite_scratch_bytes(int64_t n) {
  return size_t(scan_blocks(n) + 1) * sizeof(int64_t);
}

template <class T>
int64_t first_nonfinite(const T* p, int64_t n, void* scratch, cudaStream_t stream) {
  const char* k = "first_nonfinite";
  require_range(k, "n", n, 0, INT64_MAX);
  if (n == 0) return -1;
  require_ptr(k, "p", p);
  require_ptr(k, "scratch", scratch);
  const int64_t blocks = scan_blocks(n);
  int64_t* partial = static_cast<int64_t*>(scratch);
  int64_t* result = partial + blocks;
  nonfinite_pass1<T><<<unsigned(blocks), kScanBlock, 0, stream>>>(p, n, partial);
  MC_LAUNCH_CHECK("nonfinite_pass1");
  nonfinite_pass2<<<1, kScanBlock, 0, stream>>>(partial, blocks, result);
  MC_LAUNCH_CHECK("nonfinite_pass2");
  int64_t host = kNone;
  MC_CUDA_CHECK(cudaMemcpyAsync(&host, result, sizeof(host), cudaMemcpyDeviceToHost, stream),
                "first_nonfinite: result to host");
  MC_CUDA_CHECK(cudaStreamSynchronize(stream), "first_nonfinite");
  return host == kNone ? -1 : host;
}

#define MC_INSTANTIATE_REDUCE(T)                                                            \
  template void column_sum<T>(const T*, int64_t, int64_t, int64_t, float*, bool, float*,    \
                              cudaStream_t);                                                \
  template int64_t first_nonfinite<T>(const T*, int64_t, void*, cudaStream_t);
MC_INSTANTIATE_REDUCE(float)
MC_INSTANTIATE_REDUCE(__nv_bfloat16)
MC_INSTANTIATE_REDUCE(__half)
#undef MC_INSTANTIATE_REDUCE

}  // namespace mc::kern
