// storage.hpp — round-to-nearest-even quantisation to bf16/f16, used at the
// points where the mixed-precision GPU path stores a "typed" tensor (listed in
// reference_cpu/model.cpp). The CPU oracle applies Storage::q at exactly those points, so the
// same code is the f64 oracle O (dtype F32: q is the identity) and the
// same-precision baseline P (float math, dtype BF16/F16).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/config.hpp"

namespace mc {

// f32 -> bf16 bits, IEEE round-to-nearest-even; NaN stays NaN.
inline uint16_t f32_to_bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return uint16_t(u >> 16);
}

inline float bf16_bits_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// f32 -> IEEE binary16 bits, round-to-nearest-even, with subnormals and
// overflow to +-inf (as __float2half_rn does).
uint16_t f32_to_f16_bits(float x);
float f16_bits_to_f32(uint16_t h);

inline float round_to(DType t, float x) {
  switch (t) {
    case DType::F32: return x;
    case DType::BF16: return bf16_bits_to_f32(f32_to_bf16_bits(x));
    case DType::F16: return f16_bits_to_f32(f32_to_f16_bits(x));
  }
  return x;
}

// Round a double through f32 to the storage type (a double in the oracle is
// never quantised below f32 unless a typed dtype is asked for).
inline double round_to(DType t, double x) {
  return t == DType::F32 ? x : double(round_to(t, float(x)));
}

// Storage policy passed through the oracle. dtype == F32: no rounding.
struct Storage {
  DType dtype = DType::F32;
  template <class S>
  S q(S x) const {
    return dtype == DType::F32 ? x : round_to(dtype, x);
  }
  template <class S>
  void q_inplace(S* p, int64_t n) const {
    if (dtype == DType::F32) return;
    for (int64_t i = 0; i < n; ++i) p[i] = round_to(dtype, p[i]);
  }
  bool typed() const { return dtype != DType::F32; }
};

}  // namespace mc
