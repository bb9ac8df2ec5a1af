// ctest-labels: cpu
// test_scan_sanity.cpp — the error bound behind bench_scan's "verified"
// counter (scan_sanity.hpp) must (a) accept honest f32 implementations of the
// scan — a sequential recurrence and a chunked pair-composition scan, both run
// here on the host in float — and bf16/f16-rounded outputs, (b) reject the
// classic bugs (B/C read one step off, D·u dropped, the decay missing from the
// backward recurrence, a NaN), and (c) be tight enough to mean something (the
// bound stays far below the output magnitude).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <vector>

#include "bench/scan_sanity.hpp"
#include "core/storage.hpp"

namespace mc::bench {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// The bench's input distributions (bench_scan.cpp fill_inputs), from the spec LCG.
ChannelInputs make_inputs(int64_t T, int64_t ds, uint64_t seed, DType quant = DType::F32) {
  uint64_t s = seed;
  auto unit = [&s] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return double(s >> 40) / 16777216.0;
  };
  auto q = [quant](double x) { return double(round_to(quant, float(x))); };
  ChannelInputs in;
  in.T = T;
  in.ds = ds;
  for (int64_t t = 0; t < T; ++t) {
    in.delta.push_back(q(std::exp(std::log(1e-3) + (std::log(0.1) - std::log(1e-3)) * unit())));
    in.u.push_back(q(2 * unit() - 1));
    in.dy.push_back(q(2 * unit() - 1));
  }
  for (int64_t i = 0; i < T * ds; ++i) {
    in.Bm.push_back(q(2 * unit() - 1));
    in.Cm.push_back(q(2 * unit() - 1));
  }
  for (int64_t n = 0; n < ds; ++n) {
    in.a.push_back(-double(n + 1));
    in.h0.push_back(unit() - 0.5);
  }
  in.D = 1.0;
  return in;
}

struct F32Out {
  std::vector<float> y, du, d_delta;
};

// Host f32 sequential scan, GPU-style (y = D·u first, exp2f(δ·a·log2e)).
// bug: 0 none, 1 reads B/C of step t-1, 2 drops D·u, 3 backward forgets the decay.
F32Out f32_sequential(const ChannelInputs& in, int bug = 0) {
  const int64_t T = in.T, ds = in.ds;
  std::vector<float> h(ds), hs(size_t((T + 1) * ds));
  for (int64_t n = 0; n < ds; ++n) hs[n] = h[n] = float(in.h0[n]);
  F32Out o;
  for (int64_t t = 0; t < T; ++t) {
    const float dl = float(in.delta[t]), u = float(in.u[t]);
    const int64_t tb = (bug == 1 && t > 0) ? t - 1 : t;
    float y = bug == 2 ? 0.f : float(in.D) * u;
    for (int64_t n = 0; n < ds; ++n) {
      const float dA = exp2f((dl * float(in.a[n])) * kLog2e);
      h[n] = dA * h[n] + (dl * u) * float(in.Bm[tb * ds + n]);
      y += h[n] * float(in.Cm[tb * ds + n]);
      hs[(t + 1) * ds + n] = h[n];
    }
    o.y.push_back(y);
  }
  o.du.assign(size_t(T), 0.f);
  o.d_delta.assign(size_t(T), 0.f);
  std::vector<float> dh(ds, 0.f), dA_next(ds, 0.f);
  for (int64_t t = T - 1; t >= 0; --t) {
    const float dl = float(in.delta[t]), u = float(in.u[t]), dy = float(in.dy[t]);
    float du = dy * float(in.D), dd = 0.f;
    for (int64_t n = 0; n < ds; ++n) {
      const float dA = exp2f((dl * float(in.a[n])) * kLog2e);
      dh[n] = dy * float(in.Cm[t * ds + n]) + (bug == 3 ? 1.f : dA_next[n]) * dh[n];
      const float bn = float(in.Bm[t * ds + n]);
      du += dh[n] * dl * bn;
      dd += dh[n] * (float(in.a[n]) * dA * hs[t * ds + n] + u * bn);
      dA_next[n] = dA;
    }
    o.du[size_t(t)] = du;
    o.d_delta[size_t(t)] = dd;
  }
  return o;
}

// Host f32 chunked scan of the pairs (a_t, b_t): in-chunk chains of `chunk`
// steps, then a Hillis-Steele scan of the chunk totals, h_t = A·h0 + Bc.
std::vector<float> f32_chunked_y(const ChannelInputs& in, int64_t chunk) {
  const int64_t T = in.T, ds = in.ds, nc = (T + chunk - 1) / chunk;
  std::vector<float> y(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) y[t] = float(in.D) * float(in.u[t]);
  for (int64_t n = 0; n < ds; ++n) {
    std::vector<float> pa(static_cast<size_t>(T)), pb(static_cast<size_t>(T));
    const float a2 = float(in.a[n]) * kLog2e;
    for (int64_t t = 0; t < T; ++t) {
      const float dl = float(in.delta[t]);
      pa[t] = exp2f(dl * a2);
      pb[t] = (dl * float(in.u[t])) * float(in.Bm[t * ds + n]);
      if (t % chunk != 0) {  // compose with the previous element of the chunk
        pb[t] = pa[t] * pb[t - 1] + pb[t];
        pa[t] = pa[t] * pa[t - 1];
      }
    }
    std::vector<float> ca(static_cast<size_t>(nc)), cb(static_cast<size_t>(nc));  // inclusive over chunks
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t last = std::min(T, (c + 1) * chunk) - 1;
      ca[c] = pa[last];
      cb[c] = pb[last];
    }
    for (int64_t off = 1; off < nc; off *= 2) {
      std::vector<float> na(ca), nb(cb);
      for (int64_t c = off; c < nc; ++c) {
        nb[c] = ca[c] * cb[c - off] + cb[c];
        na[c] = ca[c] * ca[c - off];
      }
      ca.swap(na);
      cb.swap(nb);
    }
    const float h0 = float(in.h0[n]);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t c = t / chunk;
      float A = pa[t], Bc = pb[t];
      if (c > 0) {
        Bc = pa[t] * cb[c - 1] + pb[t];
        A = pa[t] * ca[c - 1];
      }
      y[t] += (A * h0 + Bc) * float(in.Cm[t * ds + n]);
    }
  }
  return y;
}

std::vector<float> rounded(std::vector<float> v, DType t) {
  for (auto& x : v) x = round_to(t, x);
  return v;
}

Disposition check_y(const ChannelInputs& in, const std::vector<float>& y, DType dt) {
  const ChannelResult r = channel_reference(in, false);
  Disposition d;
  compare_channel(d, "y", y, r.y, r.y_bound, dt);
  return d;
}

struct Shape {
  int64_t T, ds;
};
const Shape kShapes[] = {{1, 1}, {7, 16}, {1000, 16}, {3000, 64}, {700, 256}};

TEST(ScanSanity, AcceptsSequentialF32) {
  for (const auto& s : kShapes) {
    ChannelInputs in = make_inputs(s.T, s.ds, 1 + s.T * 7 + s.ds);
    const F32Out o = f32_sequential(in);
    const ChannelResult r = channel_reference(in, true);
    Disposition d;
    compare_channel(d, "y", o.y, r.y, r.y_bound, DType::F32);
    compare_channel(d, "du", o.du, r.du, r.du_bound, DType::F32);
    compare_channel(d, "d_delta", o.d_delta, r.d_delta, r.d_delta_bound, DType::F32);
    EXPECT_TRUE(d.ok) << "T=" << s.T << " ds=" << s.ds << ": " << d.detail;
    EXPECT_EQ(d.compared, 3 * s.T);
    std::printf("sequential f32 T=%lld ds=%lld: worst |err|/allowed = %.3g\n", (long long)s.T,
                (long long)s.ds, d.worst);
  }
}

TEST(ScanSanity, AcceptsChunkedF32WithTreeDepth) {
  for (const auto& s : kShapes)
    for (int64_t chunk : {1, 8, 64, 1024}) {
      ChannelInputs in = make_inputs(s.T, s.ds, 99 + s.T + s.ds);
      in.composition_depth = parallel_composition_depth(s.T);
      const Disposition d = check_y(in, f32_chunked_y(in, chunk), DType::F32);
      EXPECT_TRUE(d.ok) << "T=" << s.T << " ds=" << s.ds << " chunk=" << chunk << ": " << d.detail;
    }
}

TEST(ScanSanity, AcceptsTypedOutputsOnQuantisedInputs) {
  for (DType dt : {DType::BF16, DType::F16}) {
    ChannelInputs in = make_inputs(2000, 16, 5, dt);
    const F32Out o = f32_sequential(in);
    const ChannelResult r = channel_reference(in, true);
    Disposition d;
    compare_channel(d, "y", rounded(o.y, dt), r.y, r.y_bound, dt);
    compare_channel(d, "du", rounded(o.du, dt), r.du, r.du_bound, dt);
    compare_channel(d, "d_delta", rounded(o.d_delta, dt), r.d_delta, r.d_delta_bound, dt);
    EXPECT_TRUE(d.ok) << to_string(dt) << ": " << d.detail;
  }
}

TEST(ScanSanity, RejectsClassicBugs) {
  const ChannelInputs in = make_inputs(1000, 16, 42);
  const ChannelResult r = channel_reference(in, true);
  {
    Disposition d = check_y(in, f32_sequential(in, 1).y, DType::F32);
    EXPECT_FALSE(d.ok) << "B/C one step off was accepted";
  }
  {
    Disposition d = check_y(in, f32_sequential(in, 2).y, DType::F32);
    EXPECT_FALSE(d.ok) << "missing D*u was accepted";
  }
  {
    Disposition d;
    compare_channel(d, "du", f32_sequential(in, 3).du, r.du, r.du_bound, DType::F32);
    EXPECT_FALSE(d.ok) << "backward without the decay was accepted";
  }
  {
    std::vector<float> y = f32_sequential(in).y;
    y[500] = NAN;
    Disposition d = check_y(in, y, DType::F32);
    EXPECT_FALSE(d.ok);
    EXPECT_NE(d.detail.find("t=500"), std::string::npos) << d.detail;
  }
  {  // bf16 outputs judged as f32 must fail: the ulp slack follows the dtype
    ChannelInputs qin = make_inputs(1000, 16, 43, DType::BF16);
    Disposition d = check_y(qin, rounded(f32_sequential(qin).y, DType::BF16), DType::F32);
    EXPECT_FALSE(d.ok);
  }
}

TEST(ScanSanity, BoundIsTight) {
  // The screen has teeth only if its bound is far below the signal.
  for (const auto& s : kShapes) {
    ChannelInputs in = make_inputs(s.T, s.ds, 7);
    in.composition_depth = parallel_composition_depth(s.T);
    const ChannelResult r = channel_reference(in, true);
    double ymax = 0, bmax = 0, dmax = 0, dbmax = 0;
    for (int64_t t = 0; t < s.T; ++t) {
      ymax = std::max(ymax, std::fabs(r.y[t]));
      bmax = std::max(bmax, r.y_bound[t]);
      dmax = std::max(dmax, std::fabs(r.d_delta[t]));
      dbmax = std::max(dbmax, r.d_delta_bound[t]);
    }
    EXPECT_LT(bmax, 1e-3 * ymax) << "T=" << s.T << " ds=" << s.ds;
    EXPECT_LT(dbmax, 1e-3 * dmax) << "T=" << s.T << " ds=" << s.ds;
  }
}

}  // namespace
}  // namespace mc::bench
