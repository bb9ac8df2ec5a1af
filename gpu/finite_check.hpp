// finite_check.hpp — the check_finite option (RunOptions::check_finite): after
// each pipeline step its outputs are scanned on the device for NaN/Inf
// (kern::first_nonfinite, smallest index, deterministic) and the first hit is
// thrown as a NonFiniteError naming the step, the tensor and the index.
//
// Steps are checked in execution order and the external inputs (parameters,
// X, states, d_out) are checked first, so when a step's output is the first
// non-finite tensor, that step's inputs were finite. If the tensor is stored
// as f16, the value overflowed the storage dtype: NonFiniteError::overflow.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "gpu/device_buffer.hpp"
#include "gpu/model.hpp"

namespace mc::gpu {

class FiniteChecker {
 public:
  FiniteChecker(bool enabled, cudaStream_t stream) : enabled_(enabled), stream_(stream) {}

  bool enabled() const { return enabled_; }
  // Reserve scratch for tensors of up to max_elements (call before plan allocation).
  void plan(BufferPlan& plan, int64_t max_elements);

  // No-op unless enabled. layer = -1 for backbone steps (input_proj, norm_f).
  // Throws NonFiniteError on the first NaN/Inf of p [n].
  template <class T>
  void check(const char* step, int layer, const char* tensor, const T* p, int64_t n);
  // Same for an f32 buffer whose values were rounded to R (e.g. H0 = f32(q(...))):
  // a non-finite value there is an overflow when R is f16.
  template <class R>
  void check_rounded(const char* step, int layer, const char* tensor, const float* p, int64_t n);

 private:
  template <class T>
  void scan(const char* step, int layer, const char* tensor, const T* p, int64_t n,
            const char* storage, bool overflow);

  bool enabled_;
  cudaStream_t stream_;
  int64_t max_elements_ = 0;
  DeviceBuffer<unsigned char> scratch_;
};

}  // namespace mc::gpu
