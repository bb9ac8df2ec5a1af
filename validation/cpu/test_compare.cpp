// ctest-labels: cpu
// test_compare.cpp — unit tests of the comparison library (compare.hpp) on
// hand-computable cases: ULPs across the zero/subnormal/normal boundaries of
// f32/bf16/f16, the k-x rule on both sides of its bound, NMSE/rel of a known
// vector, RNE ties-to-even of storage.hpp, FNV-1a test vectors and the
// first-bit-difference helper. Every expected value is derived in a comment.
// The precision suites' family table (validation/support/family_table.hpp) is
// checked on hand-made comparisons: its worst k, its headroom and its naming of a
// pass through the rule's atol term.
// Also the per-tensor model comparison used by the GPU suites and the CLI
// (model_check.hpp), driven here with CPU results in place of the GPU: it must
// pass an equally accurate result and name a wrong tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "check/model_check.hpp"
#include "check/problem.hpp"
#include "core/builtin_configs.hpp"
#include "core/param_layout.hpp"
#include "core/storage.hpp"
#include "validation/support/family_table.hpp"

namespace mc::check {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double p2(int e) { return std::ldexp(1.0, e); }

// ULP distance between a and ref in dtype, through the public error_stats.
double ulps(DType t, double a, double ref) { return error_stats(&a, &ref, 1, t).max_ulp; }

// ---------------------------------------------------------------- ulp_at ---

TEST(UlpAt, F32NormalAndSubnormal) {
  EXPECT_EQ(ulp_at(DType::F32, 1.0), p2(-23));        // [1, 2): 2^0 * 2^-23
  EXPECT_EQ(ulp_at(DType::F32, 1.5), p2(-23));
  EXPECT_EQ(ulp_at(DType::F32, 2.0), p2(-22));        // next binade
  EXPECT_EQ(ulp_at(DType::F32, -3.0), p2(-22));       // sign ignored
  EXPECT_EQ(ulp_at(DType::F32, 0.75), p2(-24));
  EXPECT_EQ(ulp_at(DType::F32, p2(-126)), p2(-149));  // smallest normal
  EXPECT_EQ(ulp_at(DType::F32, p2(-130)), p2(-149));  // subnormal: fixed step
  EXPECT_EQ(ulp_at(DType::F32, 0.0), p2(-149));       // smallest subnormal
  EXPECT_EQ(ulp_at(DType::F32, kInf), kInf);
  EXPECT_TRUE(std::isnan(ulp_at(DType::F32, std::nan(""))));
}

TEST(UlpAt, BF16NormalAndSubnormal) {
  EXPECT_EQ(ulp_at(DType::BF16, 1.0), p2(-7));        // 7 explicit mantissa bits
  EXPECT_EQ(ulp_at(DType::BF16, 300.0), p2(8 - 7));   // 300 in [256, 512)
  EXPECT_EQ(ulp_at(DType::BF16, p2(-126)), p2(-133));
  EXPECT_EQ(ulp_at(DType::BF16, p2(-140)), p2(-133));
  EXPECT_EQ(ulp_at(DType::BF16, 0.0), p2(-133));
}

TEST(UlpAt, F16NormalSubnormalAndTop) {
  EXPECT_EQ(ulp_at(DType::F16, 1.0), p2(-10));
  EXPECT_EQ(ulp_at(DType::F16, 1000.0), 0.5);         // [512, 1024): 2^9 * 2^-10
  EXPECT_EQ(ulp_at(DType::F16, 65504.0), 32.0);       // largest finite f16
  EXPECT_EQ(ulp_at(DType::F16, 1e6), 32.0);           // clamped to the top binade
  EXPECT_EQ(ulp_at(DType::F16, p2(-14)), p2(-24));    // smallest normal
  EXPECT_EQ(ulp_at(DType::F16, p2(-20)), p2(-24));    // subnormal
  EXPECT_EQ(ulp_at(DType::F16, 0.0), p2(-24));
}

// ------------------------------------------------------- ULP distances ---

TEST(UlpDistance, F32AcrossBoundaries) {
  const double tiny = p2(-149);                          // smallest subnormal
  EXPECT_EQ(ulps(DType::F32, tiny, -tiny), 2);           // -tiny, 0, +tiny
  EXPECT_EQ(ulps(DType::F32, tiny, 0.0), 1);
  EXPECT_EQ(ulps(DType::F32, 0.0, -0.0), 0);             // both zeros are one point
  EXPECT_EQ(ulps(DType::F32, p2(-126), p2(-126) - tiny), 1);  // min normal vs max subnormal
  EXPECT_EQ(ulps(DType::F32, 1.0, 1.0 + p2(-23)), 1);
  EXPECT_EQ(ulps(DType::F32, 1.0, 1.0 - p2(-24)), 1);    // below 1 the step halves
  EXPECT_EQ(ulps(DType::F32, 1.0, 1.0 + 3 * p2(-23)), 3);
  EXPECT_EQ(ulps(DType::F32, 2.0 - p2(-23), 2.0 + p2(-22)), 2);  // across a binade
  // The reference is rounded to f32 first: 1 + 2^-30 is 1.0f.
  EXPECT_EQ(ulps(DType::F32, 1.0, 1.0 + p2(-30)), 0);
  // Largest finite vs +inf is one step in the ordered bit patterns.
  EXPECT_EQ(ulps(DType::F32, double(std::numeric_limits<float>::max()), 1e39), 1);
}

TEST(UlpDistance, BF16AcrossBoundaries) {
  const double tiny = p2(-133);
  EXPECT_EQ(ulps(DType::BF16, tiny, -tiny), 2);
  EXPECT_EQ(ulps(DType::BF16, p2(-126), p2(-126) - tiny), 1);
  EXPECT_EQ(ulps(DType::BF16, 1.0, 1.0 + p2(-7)), 1);
  EXPECT_EQ(ulps(DType::BF16, 1.0, 1.0 + p2(-8)), 0);        // tie -> even (1.0)
  EXPECT_EQ(ulps(DType::BF16, 1.0, 1.0 + 3 * p2(-8)), 2);    // tie -> even (1 + 2^-6)
  EXPECT_EQ(ulps(DType::BF16, -1.0, 1.0), 2 * 0x3f80);       // 1.0 bf16 = 0x3f80
}

TEST(UlpDistance, F16AcrossBoundaries) {
  const double tiny = p2(-24);
  EXPECT_EQ(ulps(DType::F16, tiny, -tiny), 2);
  EXPECT_EQ(ulps(DType::F16, p2(-14), p2(-14) - tiny), 1);
  EXPECT_EQ(ulps(DType::F16, 65504.0, 65504.0 - 32.0), 1);
  EXPECT_EQ(ulps(DType::F16, 1.0, 1.0 + p2(-11)), 0);        // tie -> even (1.0)
  EXPECT_EQ(ulps(DType::F16, 1.0, 1.0 + 3 * p2(-11)), 2);    // tie -> even (1 + 2^-9)
  EXPECT_EQ(ulps(DType::F16, 0.0, 1.0), 0x3c00);             // 1.0 f16 = 0x3c00
}

// -------------------------------------------------- RNE of storage.hpp ---

TEST(StorageRounding, BF16TiesToEven) {
  EXPECT_EQ(round_to(DType::BF16, float(1.0 + p2(-8))), 1.0f);            // tie, even below
  EXPECT_EQ(round_to(DType::BF16, float(1.0 + 3 * p2(-8))), float(1.0 + p2(-6)));  // tie, even above
  EXPECT_EQ(round_to(DType::BF16, float(1.0 + p2(-8) + p2(-20))), float(1.0 + p2(-7)));
  EXPECT_EQ(round_to(DType::BF16, float(-(1.0 + p2(-8)))), -1.0f);         // symmetric
  EXPECT_EQ(round_to(DType::BF16, float(p2(-134))), 0.0f);                // subnormal tie -> 0
  EXPECT_EQ(round_to(DType::BF16, float(3 * p2(-134))), float(p2(-132)));  // -> 2 units
  EXPECT_EQ(round_to(DType::BF16, std::numeric_limits<float>::max()),
            std::numeric_limits<float>::infinity());                      // overflow -> inf
  EXPECT_TRUE(std::isnan(round_to(DType::BF16, std::nanf(""))));
}

TEST(StorageRounding, F16TiesToEven) {
  EXPECT_EQ(round_to(DType::F16, float(1.0 + p2(-11))), 1.0f);
  EXPECT_EQ(round_to(DType::F16, float(1.0 + 3 * p2(-11))), float(1.0 + p2(-9)));
  EXPECT_EQ(round_to(DType::F16, float(p2(-25))), 0.0f);                  // subnormal tie -> 0
  EXPECT_EQ(round_to(DType::F16, float(3 * p2(-25))), float(p2(-23)));
  EXPECT_EQ(round_to(DType::F16, float(p2(-25) + p2(-30))), float(p2(-24)));
  EXPECT_EQ(round_to(DType::F16, 65519.0f), 65504.0f);                    // below the tie
  EXPECT_EQ(round_to(DType::F16, 65520.0f), std::numeric_limits<float>::infinity());  // tie: 65504 is odd
  EXPECT_EQ(round_to(DType::F16, -65520.0f), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(round_to(DType::F16, std::nanf(""))));
}

// Exhaustive over all 16-bit patterns: every finite value round-trips, and the
// exact midpoint to the next value rounds to whichever has an even mantissa.
template <class ToBits, class FromBits>
void check_exhaustive_rne(ToBits to_bits, FromBits from_bits, uint16_t inf_bits) {
  int checked = 0;
  for (uint32_t h = 0; h < 0x7fff; ++h) {  // positive patterns below the NaN range
    if (h >= inf_bits) break;
    const float x = from_bits(uint16_t(h));
    ASSERT_EQ(to_bits(x), h) << "round trip of 0x" << std::hex << h;
    const float next = from_bits(uint16_t(h + 1));
    const double mid = 0.5 * (double(x) + double(next));  // exact in f32 (one more bit)
    ASSERT_EQ(double(float(mid)), mid);
    const uint16_t even = (h & 1u) ? uint16_t(h + 1) : uint16_t(h);
    ASSERT_EQ(to_bits(float(mid)), even) << "tie above 0x" << std::hex << h;
    ASSERT_EQ(to_bits(-float(mid)), uint16_t(even | 0x8000u)) << "negative tie 0x" << std::hex << h;
    ++checked;
  }
  EXPECT_EQ(checked, int(inf_bits));
}

TEST(StorageRounding, BF16ExhaustiveRoundTripAndTies) {
  check_exhaustive_rne(f32_to_bf16_bits, bf16_bits_to_f32, 0x7f80);
}

TEST(StorageRounding, F16ExhaustiveRoundTripAndTies) {
  check_exhaustive_rne(f32_to_f16_bits, f16_bits_to_f32, 0x7c00);
}

// --------------------------------------------------------- error_stats ---

TEST(ErrorStats, KnownVector) {
  // ref = {3, 4, 0}, a = {3.5, 4, 0}: Σ(a-ref)² = 0.25, Σref² = 25 -> NMSE 0.01;
  // max abs 0.5 at index 0; rel floor 1e-3·4, max rel 0.5/3.
  const std::vector<double> ref = {3.0, 4.0, 0.0};
  const std::vector<double> a = {3.5, 4.0, 0.0};
  const ErrorStats s = error_stats(a.data(), ref.data(), 3, DType::F32);
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.nmse, 0.01);
  EXPECT_EQ(s.max_abs, 0.5);
  EXPECT_EQ(s.argmax_abs, 0);
  EXPECT_DOUBLE_EQ(s.max_rel, 0.5 / 3.0);
  EXPECT_NEAR(s.rel_floor, 4e-3, 1e-15);
  EXPECT_EQ(s.ref_max_abs, 4.0);
  EXPECT_EQ(s.max_ulp, 0.5 / p2(-22));  // 3.5 vs 3 in [2, 4): 2^-22 spacing
  EXPECT_EQ(s.nonfinite, 0);
  EXPECT_EQ(s.first_nonfinite, -1);
}

TEST(ErrorStats, FloatOverloadAndRelFloor) {
  // A tiny reference entry is measured against the floor 1e-3·max|ref|, not
  // against itself: ref {1e-12, 2}, a {1e-6, 2} -> rel = (1e-6 - 1e-12) / 2e-3.
  const std::vector<double> ref = {1e-12, 2.0};
  const std::vector<float> a = {1e-6f, 2.0f};
  const ErrorStats s = error_stats(a.data(), ref.data(), 2, DType::F32);
  EXPECT_NEAR(s.max_rel, (double(1e-6f) - 1e-12) / 2e-3, 1e-12);
  EXPECT_EQ(s.argmax_abs, 0);
}

TEST(ErrorStats, ZeroReferenceNmse) {
  const std::vector<double> zero = {0.0, 0.0};
  const std::vector<double> nz = {0.0, 1e-3};
  EXPECT_EQ(error_stats(zero.data(), zero.data(), 2, DType::F32).nmse, 0.0);
  EXPECT_EQ(error_stats(nz.data(), zero.data(), 2, DType::F32).nmse, kInf);
}

TEST(ErrorStats, NonFiniteIsCountedAndUnbounded) {
  const std::vector<double> ref = {1.0, 2.0, 3.0, 4.0};
  const std::vector<float> a = {1.0f, std::nanf(""), 3.0f, std::numeric_limits<float>::infinity()};
  const ErrorStats s = error_stats(a.data(), ref.data(), 4, DType::F32);
  EXPECT_EQ(s.nonfinite, 2);
  EXPECT_EQ(s.first_nonfinite, 1);
  EXPECT_EQ(s.max_abs, kInf);
  EXPECT_EQ(s.argmax_abs, 1);
  EXPECT_EQ(s.max_ulp, kInf);
  EXPECT_EQ(s.nmse, kInf);
}

TEST(ErrorStats, Empty) {
  const ErrorStats s = error_stats(static_cast<const double*>(nullptr), nullptr, 0, DType::F32);
  EXPECT_EQ(s.n, 0);
  EXPECT_EQ(s.max_abs, 0);
  EXPECT_EQ(s.argmax_abs, -1);
  EXPECT_EQ(s.nmse, 0);
}

// -------------------------------------------------------------- k_rule ---

// O = {1, 2, -3}; P off by 8 ulp(1) = 2^-20 at index 0. atol = 2·ulp_f32(3) =
// 2^-21, bound(k_limit 4) = 4·2^-20 + 2^-21 = 18·2^-22. Near 3 the f32
// spacing is 2^-22, so K[2] = -3 + j·2^-22 has error j·2^-22 exactly.
struct KRuleCase {
  std::vector<double> O = {1.0, 2.0, -3.0};
  std::vector<float> P = {float(1.0 + 8 * p2(-23)), 2.0f, -3.0f};
  KRuleResult run(int j) const {
    std::vector<float> K = {1.0f, 2.0f, float(-3.0 + j * p2(-22))};
    return k_rule("t", K, O, P, DType::F32, 4.0);
  }
};

TEST(KRule, PassBelowBound) {
  const KRuleResult r = KRuleCase{}.run(2);  // error 2^-21 = half of e_P
  EXPECT_TRUE(r.pass) << r.summary();
  EXPECT_EQ(r.baseline.max_abs, p2(-20));
  EXPECT_EQ(r.atol, p2(-21));
  EXPECT_EQ(r.bound, 18 * p2(-22));
  EXPECT_EQ(r.k, 0.5);
  EXPECT_EQ(r.kernel.argmax_abs, 2);
  EXPECT_DOUBLE_EQ(r.headroom, 2.0 / 18.0);
}

TEST(KRule, PassExactlyAtBoundFailOneUlpAbove) {
  const KRuleResult at = KRuleCase{}.run(18);
  EXPECT_TRUE(at.pass) << at.summary();
  EXPECT_EQ(at.headroom, 1.0);
  const KRuleResult above = KRuleCase{}.run(19);
  EXPECT_FALSE(above.pass) << above.summary();
  EXPECT_EQ(above.k, 19.0 / 4.0);  // 19·2^-22 / 2^-20
  EXPECT_NE(above.summary().find("[FAIL] t: k=4.75"), std::string::npos) << above.summary();
}

// At j = 18 the error is 18·2^-22 = the bound, with k = 18/4 = 4.5 over the limit 4: the
// rule passes it only because of atol, and the summary says so; at j = 2 (k 0.5) and at
// j = 19 (a failure) it does not.
TEST(KRule, PassThroughAtolIsNamedInTheSummary) {
  const KRuleResult at = KRuleCase{}.run(18);
  EXPECT_EQ(at.k, 4.5);
  EXPECT_TRUE(at.passes_through_atol());
  EXPECT_NE(at.summary().find("headroom=1 (k over its limit: passes through atol)"),
            std::string::npos)
      << at.summary();
  for (int j : {2, 19}) {
    const KRuleResult r = KRuleCase{}.run(j);
    EXPECT_FALSE(r.passes_through_atol()) << r.summary();
    EXPECT_EQ(r.summary().find("passes through atol"), std::string::npos) << r.summary();
  }
}

TEST(KRule, ExactBaselineGivesInfiniteKButAtolFloor) {
  // P == O: e_P = 0. A 1-ulp kernel error at 1.0 (2^-23 <= atol 2^-21) passes
  // on the floor with k = inf; 3·2^-22 at -3 (> 2^-21) fails.
  const std::vector<double> O = {1.0, 2.0, -3.0};
  const std::vector<float> P = {1.0f, 2.0f, -3.0f};
  const std::vector<float> K1 = {float(1.0 + p2(-23)), 2.0f, -3.0f};
  const KRuleResult r1 = k_rule("exact", K1, O, P, DType::F32, 4.0);
  EXPECT_TRUE(r1.pass) << r1.summary();
  EXPECT_EQ(r1.k, kInf);
  const std::vector<float> K2 = {1.0f, 2.0f, float(-3.0 + 3 * p2(-22))};
  EXPECT_FALSE(k_rule("exact", K2, O, P, DType::F32, 4.0).pass);
  // Both exact: k = 0, pass.
  const KRuleResult r0 = k_rule("both", P, O, P, DType::F32, 4.0);
  EXPECT_TRUE(r0.pass);
  EXPECT_EQ(r0.k, 0.0);
}

TEST(KRule, TypedAtolUsesDtypeUlp) {
  // bf16 at max|O| = 3: atol = 2·2^-6 = 2^-5. P exact; K off by 2^-6 passes.
  const std::vector<double> O = {3.0};
  const std::vector<float> P = {3.0f};
  const std::vector<float> K = {float(3.0 + p2(-6))};
  const KRuleResult r = k_rule("bf16", K, O, P, DType::BF16, kTypedKLimit);
  EXPECT_EQ(r.atol, p2(-5));
  EXPECT_TRUE(r.pass) << r.summary();
  EXPECT_EQ(r.kernel.max_ulp, 1);  // 3 + 2^-6 is the next bf16 above 3
}

TEST(KRule, NonFiniteAlwaysFails) {
  const std::vector<double> O = {1.0, 2.0};
  const std::vector<float> P = {1.5f, 2.5f};  // loose baseline: bound would be huge
  const std::vector<float> K = {1.0f, std::nanf("")};
  const KRuleResult r = k_rule("nan", K, O, P, DType::F32, 4.0);
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.kernel.first_nonfinite, 1);
  EXPECT_NE(r.summary().find("NONFINITE(K)=1 first@1"), std::string::npos) << r.summary();
  // A non-finite oracle is an invalid comparison, never a pass.
  const std::vector<double> Onan = {1.0, std::nan("")};
  const std::vector<float> K2 = {1.0f, 2.0f};
  EXPECT_FALSE(k_rule("nan-oracle", K2, Onan, P, DType::F32, 4.0).pass);
}

TEST(KRule, DoubleBaselineOverloadAndSizeCheck) {
  const double O[2] = {1.0, -1.0};
  const double P[2] = {1.0 + 1e-7, -1.0};
  const float K[2] = {1.0f, -1.0f};
  const KRuleResult r = k_rule("dbl", K, O, P, 2, DType::F32, 4.0);
  EXPECT_TRUE(r.pass);
  EXPECT_EQ(r.k, 0.0);
  EXPECT_THROW(k_rule("size", std::vector<float>{1.0f}, std::vector<double>{1.0, 2.0},
                      std::vector<float>{1.0f, 2.0f}, DType::F32, 4.0),
               std::invalid_argument);
}

// ------------------------------------------------------------- hashing ---

TEST(Fnv1a64, StandardVectors) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
  // Chaining: hashing "foo" then "bar" with the first hash as seed = "foobar".
  EXPECT_EQ(fnv1a64("bar", 3, fnv1a64("foo", 3)), 0x85944171f73967e8ULL);
}

TEST(FirstBitDifference, IndexAndUlp) {
  const float a[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  float b[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  EXPECT_EQ(first_bit_difference(a, b, 4).index, -1);
  b[2] = std::nextafter(3.0f, 4.0f);
  b[3] = 5.0f;
  BitDiff d = first_bit_difference(a, b, 4);
  EXPECT_EQ(d.index, 2);
  EXPECT_EQ(d.a, 3.0f);
  EXPECT_EQ(d.b, b[2]);
  EXPECT_EQ(d.ulp, 1);
  // +0 and -0 differ bitwise but are 0 ulp apart; ±min subnormal are 2 apart.
  const float z[2] = {0.0f, std::numeric_limits<float>::denorm_min()};
  const float nz[2] = {-0.0f, -std::numeric_limits<float>::denorm_min()};
  d = first_bit_difference(z, nz, 2);
  EXPECT_EQ(d.index, 0);
  EXPECT_EQ(d.ulp, 0);
  d = first_bit_difference(z + 1, nz + 1, 1);
  EXPECT_EQ(d.index, 0);
  EXPECT_EQ(d.ulp, 2);
}

// ---------------------------------------- model comparison (harness) ---

ModelInputs make_inputs(const ModelConfig& c, int64_t B, int64_t T, uint64_t seed) {
  return make_model_inputs(c, B, T, seed, DType::F32);
}
// The oracle without storage rounding: double = O, float = P of the f32 pipeline.
template <class S>
ModelOutputs<S> oracle_f32(const ModelInputs& in) {
  return oracle_run<S>(in, DType::F32);
}

ModelConfig harness_cfg() {
  ModelConfig c;
  c.d_model = 16;
  c.d_state = 8;
  c.d_conv = 3;
  c.expand = 2;
  c.n_layers = 2;
  c.input_dim = 6;
  return c;
}

TEST(ModelComparison, FloatOracleAgainstItselfPassesEveryTensorWithKOne) {
  const ModelInputs in = make_inputs(harness_cfg(), 2, 9, 7);
  const auto O = oracle_f32<double>(in);
  const auto P = oracle_f32<float>(in);
  const auto c = compare_model("self", in, P, O, P);
  // out, 2x conv_final, 2x ssm_final, 3 + 2*10 param tensors, d_input, 2x d_conv0, 2x d_ssm0
  EXPECT_EQ(c.tensors.size(), size_t(1 + 2 + 2 + 23 + 1 + 2 + 2));
  for (const auto& r : c.tensors) {
    EXPECT_TRUE(r.pass) << r.summary();
    // k = 1 exactly, or 0 where the float oracle is exact (e.g. d_conv0 slot 0).
    EXPECT_TRUE(r.k == 1.0 || (r.k == 0.0 && r.baseline.max_abs == 0.0)) << r.summary();
  }
  EXPECT_TRUE(c.pass());
}

TEST(ModelComparison, NamesTheWrongGradientTensor) {
  const ModelInputs in = make_inputs(harness_cfg(), 2, 9, 7);
  const auto O = oracle_f32<double>(in);
  const auto P = oracle_f32<float>(in);
  // A bug-sized error in one element of one tensor (1e-3 relative).
  auto K = P;
  const ParamLayout lay(Dims::from(in.cfg));
  const int64_t off = lay.layers[1].d_param + 3;
  K.grads[size_t(off)] *= 1.001f;
  const auto c = compare_model("bug", in, K, O, P);
  EXPECT_FALSE(c.pass());
  int failing = 0;
  for (const auto& r : c.tensors) {
    if (r.pass) continue;
    ++failing;
    EXPECT_EQ(r.tensor, "grad.layers.1.d_param") << r.summary();
    EXPECT_EQ(r.kernel.argmax_abs, 3);
  }
  EXPECT_EQ(failing, 1);
  EXPECT_NE(c.report(true).find("[FAIL] grad.layers.1.d_param"), std::string::npos);
}

TEST(ModelComparison, RefusesTensorsTooSmallForTheRule) {
  ModelConfig c = harness_cfg();
  c.d_model = 4;  // norm weights, biases, D: 4..8 elements
  const ModelInputs in = make_inputs(c, 1, 3, 9);
  EXPECT_FALSE(shape_ok_for_k_rule(c, 1, 3));
  const auto O = oracle_f32<double>(in);
  const auto P = oracle_f32<float>(in);
  const auto cmp = compare_model("tiny", in, P, O, P);
  EXPECT_FALSE(cmp.pass());
  EXPECT_NE(cmp.report(true).find("TEST SETUP"), std::string::npos);
}

TEST(ModelComparison, SizeMismatchFails) {
  const ModelInputs in = make_inputs(harness_cfg(), 1, 5, 3);
  const auto O = oracle_f32<double>(in);
  const auto P = oracle_f32<float>(in);
  auto K = P;
  K.d_ssm0.clear();  // e.g. the GPU did not produce the state gradient
  const auto c = compare_model("missing", in, K, O, P);
  EXPECT_FALSE(c.pass());
  EXPECT_NE(c.report(true).find("SIZE MISMATCH"), std::string::npos);
}

// ------------------------------------------- family table (suites) ---

TEST(FamilyTable, TensorFamilyDropsTheLayerIndexAndTheNote) {
  using mc::testing::tensor_family;
  EXPECT_EQ(tensor_family("grad.layers.12.in_proj_w"), "grad.in_proj_w");
  EXPECT_EQ(tensor_family("layers.0.conv_final"), "conv_final");
  EXPECT_EQ(tensor_family("grad.layers.0.d_param (zero state)"), "grad.d_param");
  EXPECT_EQ(tensor_family("out"), "out");
  EXPECT_EQ(tensor_family("grad.layers.x.w"), "grad.layers.x.w");  // no index: unchanged
}

// Two comparisons built from KRuleCase: family "w" gets k 0.5 (headroom 2/18) and k 4.5
// (headroom 1, through atol); "out" gets the failure of j = 19 (k 4.75, headroom 19/18).
TEST(FamilyTable, WorstKLargestHeadroomAndPassesThroughAtol) {
  auto named = [](int j, const std::string& name) {
    KRuleResult r = KRuleCase{}.run(j);
    r.tensor = name;
    return r;
  };
  Comparison a{"case a", {named(2, "grad.layers.0.w"), named(18, "grad.layers.1.w")}};
  Comparison b{"case b", {named(19, "out")}};
  mc::testing::FamilyTable t;
  t.add(a, "checkpointed");
  EXPECT_TRUE(t.all_pass());
  EXPECT_EQ(t.max_k(), 4.5);
  EXPECT_EQ(t.max_headroom(), 1.0);
  EXPECT_EQ(t.passed_through_atol(), 1);
  std::string s = t.str("title", false);
  EXPECT_NE(s.find("grad.layers.1.w"), std::string::npos) << s;  // the worst k is shown
  EXPECT_NE(s.find("(k over the limit: passes through atol)"), std::string::npos) << s;
  EXPECT_NE(s.find("largest headroom: 1 (<= 1); 1 tensor(s) passed through atol"),
            std::string::npos)
      << s;
  t.add(b, "parallel");
  EXPECT_FALSE(t.all_pass());
  EXPECT_EQ(t.max_k(), 4.75);
  EXPECT_DOUBLE_EQ(t.max_headroom(), 19.0 / 18.0);
  s = t.str("title", true);
  EXPECT_NE(s.find(" FAIL"), std::string::npos) << s;
  EXPECT_NE(s.find("(over 1)"), std::string::npos) << s;
  EXPECT_NE(s.find("case b"), std::string::npos) << s;
}

// problem.hpp's promise: every value of a test problem is exactly representable in
// f32, so the float and double oracles and the GPU see bit-identical inputs.
TEST(Problem, EveryValueIsF32Exact) {
  for (const auto& nc : ref::builtin_configs()) {
    if (nc.B * nc.T * nc.cfg.d_model > (1 << 16)) continue;  // the large ones: same generator
    for (bool zero_state : {false, true}) {
      ProblemOptions opt;
      opt.zero_state = zero_state;
      const Problem p = make_problem(nc.cfg, nc.B, nc.T, 17, opt);
      for (const auto* v : {&p.params, &p.X, &p.conv0, &p.ssm0, &p.d_out})
        for (size_t i = 0; i < v->size(); ++i)
          ASSERT_EQ(double(float((*v)[i])), (*v)[i]) << nc.name << " element " << i;
      EXPECT_GT(p.params.size(), 0u);
    }
  }
}

}  // namespace
}  // namespace mc::check
