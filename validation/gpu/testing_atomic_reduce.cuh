// testing_atomic_reduce.cuh — TEST-ONLY column sums for the determinism
// suite's negative control (the checker must catch a nondeterministic
// reduction). atomic_column_sum lets every
// element add itself into its column's output with atomicAdd, so the order of
// the float additions, and with it the rounded sum, follows the hardware's
// scheduling: deliberately NOT reproducible. fixed_order_column_sum is its
// deterministic twin (one thread per column, rows in ascending order), used to
// show that the same data, copies and checker give identical bits when the
// order is fixed. Built into mc_testing_kernels, which only test_determinism
// links — never into mc_kernels (the product has no atomics).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mc::testing {

// x [rows, cols] f32 (device) -> out [cols] f32 (device), out[c] = Σ_r x[r, c].
// out is zeroed on `stream` first; enqueued on `stream`, not synchronised.
void atomic_column_sum(const float* x, float* out, int64_t rows, int64_t cols,
                       cudaStream_t stream);
void fixed_order_column_sum(const float* x, float* out, int64_t rows, int64_t cols,
                            cudaStream_t stream);

}  // namespace mc::testing
