// exp_math.cuh — the exponential of the selective scan, dA = exp(δ·A), as a
// __host__ __device__ function with every operation spelled out (explicit fmaf,
// no library call, no MUFU), so the GPU and a host build compute the same bits
// (tests: validation/gpu/test_scan_exp.cpp, validation/gpu/test_scan_emulation_bits.cpp).
//
// Why not CUDA's expf: it is accurate to 2 ulp through the ex2.approx unit,
// whose error is undocumented beyond that bound and may be biased; a biased dA
// drifts a long-memory state coherently (error ~ memory·bias instead of
// ~sqrt(memory)·ulp), which the k-rule against the f32 oracle (glibc expf,
// ~0.5 ulp) would rightly flag. This version is within ~0.6 ulp and its error
// is essentially the final round-to-nearest (unbiased); measured on every 61st f32
// of [-104, 89] by the ScanExp test of validation/gpu/test_scan_parity.cpp; with
// MC_SCAN_EXP_STRIDE=1 it checks every f32 of that range: at most 0.615 ulp.
//
// Method: n = rint(x·log2e) (by the 1.5·2^23 shift: no rounding or float-to-int
// instruction, which run on the slow conversion pipe); r1 = x − n·ln2_hi exactly
// (one fma: the exact difference is representable, see below); r_lo = −n·ln2_lo
// (≤ 3e-7);
// exp(r1 + r_lo) ≈ (1 + r1) + t1 + r_lo·e^r1, t1 = r1²·P(r1) + e1, with P the degree-6
// Taylor polynomial of (e^r − 1 − r)/r² (truncation < 2e-10 relative on
// |r| ≤ 0.35) and e1 the exact rounding error of 1 + r1 (Fast2Sum); one final
// rounding, then an exact two-step scaling by 2^n (handles subnormal results),
// its factors built from n's bits in the shifted t. About 27 instructions on sm_90,
// all on the FMA and integer pipes.
// Exactness of r1: n·ln2_hi is a multiple of 2^-24 (|n| ≤ 150), and for n ≠ 0
// |x| ≥ 0.34 so x is a multiple of 2^-25; the difference, |·| < 0.5, is a
// multiple of 2^-25 below 2^-1: at most 24 significant bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MC_SCAN_HD __host__ __device__ __forceinline__
#else
#define MC_SCAN_HD inline
#endif

namespace mc::kern::scan_detail {

MC_SCAN_HD float float_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
MC_SCAN_HD uint32_t bits_of_float(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

MC_SCAN_HD float scan_expf(float x) {
  // Clamp (NaN passes through: both comparisons are false). exp(89) overflows to
  // +inf and exp(-104) rounds to 0 through the scaling below, like the true values.
  if (x < -104.0f) x = -104.0f;
  if (x > 89.0f) x = 89.0f;
  // n = rint(x·log2e) without a rounding or conversion instruction: the fma rounds
  // x·RN(log2e) + 1.5·2^23 to an integer, so t holds n in its low mantissa bits.
  constexpr float kShift = 0x1.8p23f;  // 1.5·2^23
  const float t = fmaf(x, 1.44269504088896341f, kShift);
  const float n = t - kShift;  // exact, |n| <= 150
  const float r1 = fmaf(-n, 0.693147182464599609375f, x);  // ln2_hi = RN(ln2): exact result
  const float r_lo = -n * -1.90465429995776788e-09f;         // −n·ln2_lo, ln2_lo = ln2 − ln2_hi
  // P(r) = Σ_k r^k / (k+2)!, k = 0..6
  float p = 1.0f / 40320.0f;
  p = fmaf(p, r1, 1.0f / 5040.0f);
  p = fmaf(p, r1, 1.0f / 720.0f);
  p = fmaf(p, r1, 1.0f / 120.0f);
  p = fmaf(p, r1, 1.0f / 24.0f);
  p = fmaf(p, r1, 1.0f / 6.0f);
  p = fmaf(p, r1, 0.5f);
  const float hi = 1.0f + r1;
  const float e1 = (1.0f - hi) + r1;  // exact (|1| >= |r1|)
  const float t1 = fmaf(r1 * r1, p, e1);           // e^r1 = hi + t1 (+ rounding)
  const float tail = fmaf(r_lo, hi + t1, t1);      // e^(r1 + r_lo) = e^r1·(1 + r_lo) + O(r_lo²)
  const float m = hi + tail;                       // e^(x − n·ln2), in [0.70, 1.42]
  // 2^n in two exact factors 2^(n>>1)·2^(n − (n>>1)), both normal for every n the
  // clamp allows; the second multiply is the only rounding (also for subnormal
  // results). t's bits are nb = 0x4B400000 + n (n two's complement in the
  // mantissa, |n| < 2^22); the offset is even, so nb >> 1 = (n >> 1) + 0x25A00000.
  // A NaN x leaves garbage in nb, but then m is NaN and so is the product.
  const int32_t nb = int32_t(bits_of_float(t));
  const int32_t nb1 = nb >> 1;
  constexpr uint32_t kBias = uint32_t(127 - 0x25A00000) << 23;  // removes the offset, adds 127
  const float s1 = float_from_bits((uint32_t(nb1) << 23) + kBias);       // 2^(n >> 1)
  const float s2 = float_from_bits((uint32_t(nb - nb1) << 23) + kBias);  // 2^(n − (n >> 1))
  return (m * s1) * s2;
}

}  // namespace mc::kern::scan_detail
