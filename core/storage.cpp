// storage.cpp — f16 conversion with round-to-nearest-even (bf16 is inline).
#include "core/storage.hpp"

namespace mc {

uint16_t f32_to_f16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absu < 0x38800000u) {                                   // below 2^-14: subnormal or zero
    // value = absf; subnormal f16 unit = 2^-24. Round absf / 2^-24 to nearest even.
    float absf;
    std::memcpy(&absf, &absu, 4);
    const float scaled = absf * 16777216.0f;  // exact (power-of-two scale)
    float r = std::nearbyint(scaled);         // default rounding mode: nearest-even
    return uint16_t(sign | uint32_t(r));
  }
  // normal: rebias exponent 127 -> 15, keep 10 mantissa bits with RNE.
  uint32_t m = absu - (uint32_t(127 - 15) << 23);
  const uint32_t lsb = (m >> 13) & 1u;
  m += 0xfffu + lsb;
  return uint16_t(sign | (m >> 13));
}

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float mag;
  if (exp == 0) {
    mag = float(man) * (1.0f / 16777216.0f);
  } else if (exp == 31) {
    uint32_t u = 0x7f800000u | (man << 13);
    std::memcpy(&mag, &u, 4);
  } else {
    uint32_t u = ((exp + 127 - 15) << 23) | (man << 13);
    std::memcpy(&mag, &u, 4);
  }
  uint32_t u;
  std::memcpy(&u, &mag, 4);
  u |= sign;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace mc
