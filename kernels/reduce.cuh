// reduce.cuh — deterministic reductions (no atomics, docs/DESIGN.md): column sums of a
// row-major matrix in a fixed order (reduce_sum_axis0 for the per-row / per-
// sample gradient partials, bias gradients of typed dY), and the non-finite
// scanner that reports the first (smallest) NaN/Inf index of a buffer.
//
// No atomics: every output element is produced by one thread in an order that
// depends only on the shape. Templated on the storage type T of the input
// (float, __nv_bfloat16, __half); sums are f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mc::kern {

// Rows one block of column_sum reduces before a next level takes over.
constexpr int64_t kColumnSumChunk = 1024;

// Floats of scratch column_sum needs for (rows, cols): the per-chunk partial
// sums of every level above the first (0 when rows <= kColumnSumChunk).
size_t column_sum_scratch_floats(int64_t rows, int64_t cols);

// src [rows, ld] (T; columns [0, cols) used) -> out [cols] f32:
//   out[c] = Σ_r src[r, c]            (accumulate = false)
//   out[c] = out[c] + Σ_r src[r, c]   (accumulate = true)
// Order: rows split into chunks of kColumnSumChunk; inside a chunk 8 lanes sum
// rows lane, lane+8, ... sequentially, then a fixed 8 -> 1 tree; the chunk
// totals are reduced again the same way (level by level) until one is left.
// scratch: column_sum_scratch_floats(rows, cols) floats (nullptr allowed when 0).
template <class T>
void column_sum(const T* src, int64_t rows, int64_t cols, int64_t ld, float* out,
                bool accumulate, float* scratch, cudaStream_t stream);

// partials [rows, dim] f32 -> out [dim] (= or +=): the fixed-order reduction
// behind every Rule-B gradient (norm weights, conv weights/bias, biases).
inline void reduce_sum_axis0(const float* partials, int64_t rows, int64_t dim, float* out,
                             bool accumulate, float* scratch, cudaStream_t stream) {
  column_sum<float>(partials, rows, dim, dim, out, accumulate, scratch, stream);
}

// Bytes of device scratch first_nonfinite needs for n elements.
size_t first_nonfinite_scratch_bytes(int64_t n);

// p [n] -> the smallest index i with p[i] NaN or ±Inf, or -1 when all are
// finite. Two fixed-geometry passes (per-block minimum, then one block), no
// atomics; enqueued on `stream`, then the stream is synchronised to return
// the index to the host.
template <class T>
int64_t first_nonfinite(const T* p, int64_t n, void* scratch, cudaStream_t stream);

}  // namespace mc::kern
