// ctest-labels: cpu;property
// test_oracle_structure.cpp — structural properties of the oracle that need
// no finite differences:
//  * split-sequence invariance: [0, t) then [t, T) with the state carried
//    equals [0, T) — outputs and final states bitwise; the backward chained
//    through the initial-/final-state gradients gives bitwise the same dX,
//    d_conv0, d_ssm0, and parameter gradients equal up to re-association of
//    the same per-row terms (bound below);
//  * every row as its own one-step segment, summed, gives the parameter
//    gradients within the same bound (and the per-row magnitudes it needs);
//  * sample b alone equals sample b inside a batch, bitwise;
//  * exact cases of the scan: Δ = 0 (state frozen) and A = 0 (a prefix sum)
//    with dyadic data, bitwise in float and double against exact arithmetic;
//  * D contributes exactly fl(D·u) to y; T = 1 closed forms of the scan
//    (forward and backward) and of one layer's forward;
//  * the target forward is the last-timestep gather of the forward from zero
//    state and honours the configured eps.
//
// Re-association bound: a parameter gradient G = Σ_r c_r over the n = B·T
// rows r = (b, t). When the per-row terms c_r are bitwise the same (they are:
// the chained backward reproduces every row's intermediate gradients
// bitwise), two summation trees of them differ by at most
//     |G_1 − G_2| <= 2·(n − 1)·u64·Σ_r |c_r|        (Higham 2002, eq. 4.4)
// with Σ_r |c_r| computed exactly from the one-row segments.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/builtin_configs.hpp"
#include "validation/support/oracle_test_support.hpp"
#include "reference_cpu/steps.hpp"

namespace mc::testing {
namespace {

const bool kThreads = single_thread_unless_asked();

constexpr double kU64 = 0x1p-53;

// ------------------------------------------------------------ segments ---

// Rows [t0, t1) of every sample of a [B*T, w] tensor -> [B*(t1-t0), w].
std::vector<double> time_slice(const std::vector<double>& x, int64_t B, int64_t T, int64_t w,
                               int64_t t0, int64_t t1) {
  std::vector<double> r;
  for (int64_t b = 0; b < B; ++b)
    r.insert(r.end(), x.begin() + (b * T + t0) * w, x.begin() + (b * T + t1) * w);
  return r;
}

// One segment's forward activations and backward results.
struct Segment {
  int64_t t0, t1;
  ref::BackboneActivations<double> act;
  std::vector<double> out, grads, dX, d_conv0, d_ssm0;
};

// Runs the problem as consecutive time segments with the state carried, then
// the backward from the last segment to the first, each chained to the next
// through its initial-state gradients. Returns the segments and (via state)
// the final state.
std::vector<Segment> run_segments(const check::Problem& p, const std::vector<int64_t>& cuts,
                                  ref::RecurrentState<double>& state) {
  const Dims& d = p.dims;
  std::vector<Segment> segs;
  std::vector<int64_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(p.T);
  state = p.state<double>();
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    Segment s;
    s.t0 = bounds[i];
    s.t1 = bounds[i + 1];
    const int64_t Ts = s.t1 - s.t0;
    const std::vector<double> X = time_slice(p.X, p.B, p.T, d.mid, s.t0, s.t1);
    s.out.resize(size_t(p.B * Ts * d.dm));
    ref::backbone_forward(p.layout, p.params.data(), p.B, Ts, X.data(), state, s.out.data(), &s.act);
    segs.push_back(std::move(s));
  }
  for (size_t i = segs.size(); i-- > 0;) {
    Segment& s = segs[i];
    const int64_t Ts = s.t1 - s.t0;
    const std::vector<double> dout = time_slice(p.d_out, p.B, p.T, d.dm, s.t0, s.t1);
    s.grads.assign(size_t(p.layout.total), 0.0);
    s.dX.resize(size_t(p.B * Ts * d.mid));
    s.d_conv0.resize(state.conv.size());
    s.d_ssm0.resize(state.ssm.size());
    ref::FinalStateGrads<double> fin;
    if (i + 1 < segs.size()) {
      fin.conv = segs[i + 1].d_conv0.data();
      fin.ssm = segs[i + 1].d_ssm0.data();
    } else {  // the last segment's final state is the problem's: its upstream gradients
      fin.conv = p.d_conv_final.data();
      fin.ssm = p.d_ssm_final.data();
    }
    ref::BackboneGradOutputs<double> g;
    g.params = s.grads.data();
    g.dX = s.dX.data();
    g.d_conv0 = s.d_conv0.data();
    g.d_ssm0 = s.d_ssm0.data();
    ref::backbone_backward(p.layout, p.params.data(), s.act, dout.data(), fin, g);
  }
  return segs;
}

// Concatenates the segments' [B*Ts, w] tensors back to [B*T, w].
std::vector<double> join_rows(const std::vector<Segment>& segs,
                              std::vector<double> Segment::*field, int64_t B, int64_t T, int64_t w) {
  std::vector<double> r(size_t(B * T * w));
  for (const Segment& s : segs)
    for (int64_t b = 0; b < B; ++b)
      std::copy_n((s.*field).begin() + b * (s.t1 - s.t0) * w, (s.t1 - s.t0) * w,
                  r.begin() + (b * T + s.t0) * w);
  return r;
}

// Sample b of p as a batch of one: its X and d_out rows and each layer's
// initial conv/SSM state and final-state gradient slices; parameters unchanged.
check::Problem sample_alone(const check::Problem& p, int64_t b) {
  const Dims& d = p.dims;
  const int64_t nc = d.di * d.dc, ns = d.di * d.ds;
  check::Problem one = p;
  one.B = 1;
  one.X.assign(p.X.begin() + b * p.T * d.mid, p.X.begin() + (b + 1) * p.T * d.mid);
  one.d_out.assign(p.d_out.begin() + b * p.T * d.dm, p.d_out.begin() + (b + 1) * p.T * d.dm);
  one.conv0.clear();
  one.ssm0.clear();
  one.d_conv_final.clear();
  one.d_ssm_final.clear();
  for (int64_t l = 0; l < d.L; ++l) {
    one.conv0.insert(one.conv0.end(), p.conv0.begin() + (l * p.B + b) * nc,
                     p.conv0.begin() + (l * p.B + b + 1) * nc);
    one.ssm0.insert(one.ssm0.end(), p.ssm0.begin() + (l * p.B + b) * ns,
                    p.ssm0.begin() + (l * p.B + b + 1) * ns);
    one.d_conv_final.insert(one.d_conv_final.end(), p.d_conv_final.begin() + (l * p.B + b) * nc,
                            p.d_conv_final.begin() + (l * p.B + b + 1) * nc);
    one.d_ssm_final.insert(one.d_ssm_final.end(), p.d_ssm_final.begin() + (l * p.B + b) * ns,
                           p.d_ssm_final.begin() + (l * p.B + b + 1) * ns);
  }
  return one;
}

// Per-element Σ_r |c_r| of the parameter gradients, each row (b, t) run as its
// own one-sample, one-step segment.
std::vector<double> abs_row_terms(const check::Problem& p) {
  std::vector<double> absum(size_t(p.layout.total), 0.0);
  for (int64_t b = 0; b < p.B; ++b) {
    const check::Problem one = sample_alone(p, b);
    std::vector<int64_t> cuts;
    for (int64_t t = 1; t < p.T; ++t) cuts.push_back(t);
    ref::RecurrentState<double> st;
    for (const Segment& s : run_segments(one, cuts, st))
      for (size_t i = 0; i < absum.size(); ++i) absum[i] += std::fabs(s.grads[i]);
  }
  return absum;
}

void rc_assert_bitwise(const char* what, const std::vector<double>& a, const std::vector<double>& b) {
  RC_ASSERT(a.size() == b.size());
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) != 0) {
    size_t i = 0;
    while (i + 1 < a.size() && std::memcmp(&a[i], &b[i], sizeof(double)) == 0) ++i;
    RC_FAIL(std::string(what) + " differs bitwise at " + std::to_string(i) + ": " +
            std::to_string(a[i]) + " vs " + std::to_string(b[i]));
  }
}

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6e", x);
  return buf;
}

// |full − other| <= 2(n−1)·u64·Σ|c_r| for every parameter-gradient element.
void rc_assert_reassociation(const char* what, const check::Problem& p,
                             const std::vector<double>& full, const std::vector<double>& other,
                             const std::vector<double>& absum) {
  const double n = double(p.B * p.T);
  for (size_t i = 0; i < full.size(); ++i) {
    const double bound = 2 * (n - 1) * kU64 * absum[i];
    if (!(std::fabs(full[i] - other[i]) <= bound))
      RC_FAIL(std::string(what) + ": " + p.layout.entry_at(int64_t(i)).name + " element " +
              std::to_string(i) + " differs by " + sci(std::fabs(full[i] - other[i])) +
              " > bound " + sci(bound) + " (full " + sci(full[i]) + ", split " + sci(other[i]) +
              ", sum of |row terms| " + sci(absum[i]) + ")");
  }
}

RC_GTEST_PROP(OracleStructureProperty, SplitSequenceInvariance, ()) {
  const OracleShape s = *gen_oracle_shape(64, 2);
  const int64_t t1 = *rc::gen::inRange<int64_t>(1, s.T);
  const check::Problem p = s.problem();
  const Dims& d = p.dims;
  const OracleRun<double> full = run_oracle<double>(p);
  ref::RecurrentState<double> st;
  const std::vector<Segment> segs = run_segments(p, {t1}, st);
  // Forward: bitwise.
  rc_assert_bitwise("out", join_rows(segs, &Segment::out, p.B, p.T, d.dm), full.out);
  rc_assert_bitwise("final conv state", st.conv, full.conv_T);
  rc_assert_bitwise("final ssm state", st.ssm, full.ssm_T);
  // Backward, chained: the per-row gradients bitwise.
  rc_assert_bitwise("dX", join_rows(segs, &Segment::dX, p.B, p.T, d.mid), full.dX);
  rc_assert_bitwise("d_conv0", segs[0].d_conv0, full.d_conv0);
  rc_assert_bitwise("d_ssm0", segs[0].d_ssm0, full.d_ssm0);
  // Parameter gradients: the same per-row terms, re-associated.
  std::vector<double> split(full.grads.size());
  for (size_t i = 0; i < split.size(); ++i) split[i] = segs[0].grads[i] + segs[1].grads[i];
  const std::vector<double> absum = abs_row_terms(p);
  rc_assert_reassociation("two segments", p, full.grads, split, absum);
}

// The sharpest split: every row (b, t) its own segment. Σ_r c_r must give
// the full gradient within the re-association bound.
RC_GTEST_PROP(OracleStructureProperty, EveryRowAsItsOwnSegment, ()) {
  const OracleShape s = *gen_oracle_shape(24);
  const check::Problem p = s.problem();
  const OracleRun<double> full = run_oracle<double>(p);
  std::vector<double> sum(full.grads.size(), 0.0), absum(full.grads.size(), 0.0);
  // abs_row_terms runs exactly these segments; rerun them to get signed sums.
  const Dims& d = p.dims;
  const int64_t ns = d.di * d.ds;
  for (int64_t b = 0; b < p.B; ++b) {
    const check::Problem one = sample_alone(p, b);
    std::vector<int64_t> cuts;
    for (int64_t t = 1; t < p.T; ++t) cuts.push_back(t);
    ref::RecurrentState<double> st;
    const std::vector<Segment> segs = run_segments(one, cuts, st);
    for (const Segment& sg : segs)
      for (size_t i = 0; i < sum.size(); ++i) {
        sum[i] += sg.grads[i];
        absum[i] += std::fabs(sg.grads[i]);
      }
    // The per-sample final state and dX rows are bitwise those of the batch.
    for (int64_t l = 0; l < d.L; ++l)
      for (int64_t j = 0; j < ns; ++j)
        RC_ASSERT(st.ssm[size_t(l * ns + j)] == full.ssm_T[size_t((l * p.B + b) * ns + j)]);
  }
  rc_assert_reassociation("one-row segments", p, full.grads, sum, absum);
}

// Sample b alone equals sample b inside the batch, bitwise, for everything
// that belongs to one sample; the batch's parameter gradients are the samples'
// sums up to re-association.
RC_GTEST_PROP(OracleStructureProperty, SampleAloneEqualsSampleInBatch, ()) {
  const OracleShape s = *gen_oracle_shape(64, 1, 2);
  const check::Problem p = s.problem();
  const Dims& d = p.dims;
  const OracleRun<double> batch = run_oracle<double>(p);
  const int64_t nc = d.di * d.dc, ns = d.di * d.ds;
  std::vector<double> sum(batch.grads.size(), 0.0);
  for (int64_t b = 0; b < p.B; ++b) {
    const check::Problem one = sample_alone(p, b);
    const OracleRun<double> alone = run_oracle<double>(one);
    auto rows = [&](const std::vector<double>& v, int64_t w) {
      return std::vector<double>(v.begin() + b * p.T * w, v.begin() + (b + 1) * p.T * w);
    };
    auto states = [&](const std::vector<double>& v, int64_t per) {
      std::vector<double> r;
      for (int64_t l = 0; l < d.L; ++l)
        r.insert(r.end(), v.begin() + (l * p.B + b) * per, v.begin() + (l * p.B + b + 1) * per);
      return r;
    };
    rc_assert_bitwise("out", alone.out, rows(batch.out, d.dm));
    rc_assert_bitwise("final conv state", alone.conv_T, states(batch.conv_T, nc));
    rc_assert_bitwise("final ssm state", alone.ssm_T, states(batch.ssm_T, ns));
    rc_assert_bitwise("dX", alone.dX, rows(batch.dX, d.mid));
    rc_assert_bitwise("d_conv0", alone.d_conv0, states(batch.d_conv0, nc));
    rc_assert_bitwise("d_ssm0", alone.d_ssm0, states(batch.d_ssm0, ns));
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += alone.grads[i];
  }
  rc_assert_reassociation("sum of samples", p, batch.grads, sum, abs_row_terms(p));
}

// ------------------------------------------------------------- the scan ---

// Dyadic values k/4, |k| <= 4: every product and sum below stays on a grid of
// 2^-8 with magnitudes < 2^15, so float and double compute them exactly.
template <class S>
std::vector<S> dyadic(check::SplitMix64& rng, int64_t n) {
  std::vector<S> v(static_cast<size_t>(n));
  for (S& x : v) x = S(double(int64_t(rng.next() % 9) - 4) / 4);
  return v;
}

struct ScanShape {
  int64_t B, T, di, ds;
  uint64_t seed;
};

rc::Gen<ScanShape> gen_scan_shape() {
  return rc::gen::exec([] {
    ScanShape s;
    s.B = *rc::gen::inRange<int64_t>(1, 4);
    s.T = *rc::gen::inRange<int64_t>(1, 33);
    s.di = *rc::gen::inRange<int64_t>(1, 17);
    s.ds = *rc::gen::inRange<int64_t>(1, 17);
    s.seed = *rc::gen::noShrink(rc::gen::arbitrary<uint64_t>());
    return s;
  });
}

// A = 0 (A_log -> -inf): exp(δ·0) = 1, so h_t = h0 + Σ_{s<=t} δ_s·u_s·B_s, a
// prefix sum, and the backward is a suffix sum; with dyadic data all of it is
// exact, so the oracle must match exact arithmetic bitwise, in S.
template <class S>
void check_scan_a_zero(const ScanShape& sh) {
  const int64_t B = sh.B, T = sh.T, di = sh.di, ds = sh.ds;
  check::SplitMix64 rng(sh.seed);
  const auto delta = dyadic<S>(rng, B * T * di), u = dyadic<S>(rng, B * T * di);
  const auto Bm = dyadic<S>(rng, B * T * ds), Cm = dyadic<S>(rng, B * T * ds);
  const auto D = dyadic<S>(rng, di), h0 = dyadic<S>(rng, B * di * ds), dy = dyadic<S>(rng, B * T * di);
  const std::vector<S> a_neg(static_cast<size_t>(di * ds), S(0));
  std::vector<S> h = h0, hs(size_t(B * (T + 1) * di * ds)), y(size_t(B * T * di));
  ref::selective_scan_fwd(delta.data(), u.data(), Bm.data(), Cm.data(), a_neg.data(), D.data(), B,
                          T, di, ds, h.data(), hs.data(), y.data());
  std::vector<S> gd(size_t(B * T * di)), gu(gd.size()), gB(size_t(B * T * ds)), gC(gB.size());
  std::vector<S> gD(size_t(di), S(0)), gA(size_t(di * ds), S(0)), gh0(h0.size());
  ref::selective_scan_bwd(delta.data(), u.data(), Bm.data(), Cm.data(), a_neg.data(), D.data(),
                          hs.data(), dy.data(), B, T, di, ds, gd.data(), gu.data(), gB.data(),
                          gC.data(), gD.data(), gA.data(), gh0.data());
  // Exact reference in double (all values are small dyadics: exact in any order).
  auto at = [&](int64_t b, int64_t t, int64_t w, int64_t j) { return size_t((b * T + t) * w + j); };
  std::vector<double> eB(gB.size(), 0), eC(gC.size(), 0), eD(size_t(di), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t d = 0; d < di; ++d) {
      std::vector<double> hh(static_cast<size_t>(ds)), hist(size_t((T + 1) * ds));
      for (int64_t n = 0; n < ds; ++n) hh[size_t(n)] = double(h0[size_t((b * di + d) * ds + n)]);
      for (int64_t t = 0; t < T; ++t) {
        double yy = 0;
        for (int64_t n = 0; n < ds; ++n) {
          hh[size_t(n)] += double(delta[at(b, t, di, d)]) * double(u[at(b, t, di, d)]) * double(Bm[at(b, t, ds, n)]);
          yy += hh[size_t(n)] * double(Cm[at(b, t, ds, n)]);
          hist[size_t(t * ds + n)] = hh[size_t(n)];
        }
        yy += double(D[size_t(d)]) * double(u[at(b, t, di, d)]);
        RC_ASSERT(double(y[at(b, t, di, d)]) == yy);
      }
      for (int64_t n = 0; n < ds; ++n) RC_ASSERT(double(h[size_t((b * di + d) * ds + n)]) == hh[size_t(n)]);
      // Backward: dh_t = Σ_{s>=t} dy_s·C_s (A = 0).
      std::vector<double> dh(size_t(ds), 0);
      for (int64_t t = T - 1; t >= 0; --t) {
        const double dyv = double(dy[at(b, t, di, d)]), dl = double(delta[at(b, t, di, d)]);
        const double uv = double(u[at(b, t, di, d)]);
        double ddl = 0, duu = dyv * double(D[size_t(d)]);
        for (int64_t n = 0; n < ds; ++n) {
          dh[size_t(n)] += dyv * double(Cm[at(b, t, ds, n)]);
          ddl += dh[size_t(n)] * uv * double(Bm[at(b, t, ds, n)]);
          duu += dh[size_t(n)] * dl * double(Bm[at(b, t, ds, n)]);
          eB[at(b, t, ds, n)] += dh[size_t(n)] * dl * uv;
          eC[at(b, t, ds, n)] += dyv * hist[size_t(t * ds + n)];
        }
        eD[size_t(d)] += dyv * uv;
        RC_ASSERT(double(gd[at(b, t, di, d)]) == ddl);
        RC_ASSERT(double(gu[at(b, t, di, d)]) == duu);
      }
      for (int64_t n = 0; n < ds; ++n) RC_ASSERT(double(gh0[size_t((b * di + d) * ds + n)]) == dh[size_t(n)]);
    }
  for (size_t i = 0; i < eB.size(); ++i) RC_ASSERT(double(gB[i]) == eB[i]);
  for (size_t i = 0; i < eC.size(); ++i) RC_ASSERT(double(gC[i]) == eC[i]);
  for (size_t i = 0; i < eD.size(); ++i) RC_ASSERT(double(gD[i]) == eD[i]);
  for (const S& g : gA) RC_ASSERT(double(g) == 0.0);  // ∂A/∂A_log = A = 0
}

RC_GTEST_PROP(OracleScanProperty, AZeroIsAnExactPrefixSum, ()) {
  const ScanShape sh = *gen_scan_shape();
  check_scan_a_zero<float>(sh);
  check_scan_a_zero<double>(sh);
}

// Δ = 0: exp(0) = 1 and δ·u·B = 0, so the state never moves: every h_saved
// entry and the final state are h0 bitwise, and y_t = Σ_n h0·C_t + D·u_t in
// the oracle's own order (exact here for any data, since it is the same
// sequence of operations on the same numbers).
template <class S>
void check_scan_delta_zero(const ScanShape& sh) {
  const int64_t B = sh.B, T = sh.T, di = sh.di, ds = sh.ds;
  check::SplitMix64 rng(sh.seed);
  auto normal = [&](int64_t n) {
    std::vector<S> v(static_cast<size_t>(n));
    for (S& x : v) x = S(check::f32_exact(rng.normal()));
    return v;
  };
  const std::vector<S> delta(size_t(B * T * di), S(0));
  const auto u = normal(B * T * di), Bm = normal(B * T * ds), Cm = normal(B * T * ds);
  const auto a_neg = normal(di * ds), D = normal(di), h0 = normal(B * di * ds);
  std::vector<S> h = h0, hs(size_t(B * (T + 1) * di * ds)), y(size_t(B * T * di));
  ref::selective_scan_fwd(delta.data(), u.data(), Bm.data(), Cm.data(), a_neg.data(), D.data(), B,
                          T, di, ds, h.data(), hs.data(), y.data());
  RC_ASSERT(h == h0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t <= T; ++t)
      for (int64_t d = 0; d < di; ++d)
        for (int64_t n = 0; n < ds; ++n)
          RC_ASSERT(hs[size_t(((b * (T + 1) + t) * di + d) * ds + n)] == h0[size_t((b * di + d) * ds + n)]);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < di; ++d) {
        S acc = S(0);
        for (int64_t n = 0; n < ds; ++n)
          acc += h0[size_t((b * di + d) * ds + n)] * Cm[size_t((b * T + t) * ds + n)];
        RC_ASSERT(y[size_t((b * T + t) * di + d)] == acc + D[size_t(d)] * u[size_t((b * T + t) * di + d)]);
      }
}

RC_GTEST_PROP(OracleScanProperty, DeltaZeroFreezesTheState, ()) {
  const ScanShape sh = *gen_scan_shape();
  check_scan_delta_zero<float>(sh);
  check_scan_delta_zero<double>(sh);
}

// D enters y only as the final "+ D·u": y(D) = fl(y(D = 0) + fl(D·u)) bitwise,
// and nothing else (states) depends on D.
template <class S>
void check_scan_d_contribution(const ScanShape& sh) {
  const int64_t B = sh.B, T = sh.T, di = sh.di, ds = sh.ds;
  check::SplitMix64 rng(sh.seed);
  auto normal = [&](int64_t n, double mean, double scale) {
    std::vector<S> v(static_cast<size_t>(n));
    for (S& x : v) x = S(check::f32_exact(mean + scale * rng.normal()));
    return v;
  };
  std::vector<S> delta = normal(B * T * di, 0, 1);
  for (S& x : delta) x = log1p(exp(x));
  const auto u = normal(B * T * di, 0, 1), Bm = normal(B * T * ds, 0, 1), Cm = normal(B * T * ds, 0, 1);
  const auto a_neg = normal(di * ds, -2, 0.5), D = normal(di, 1, 0.5), h0 = normal(B * di * ds, 0, 0.5);
  const std::vector<S> D0(size_t(di), S(0));
  std::vector<S> h1 = h0, h2 = h0, hs1(size_t(B * (T + 1) * di * ds)), hs2(hs1.size());
  std::vector<S> y1(size_t(B * T * di)), y2(y1.size());
  ref::selective_scan_fwd(delta.data(), u.data(), Bm.data(), Cm.data(), a_neg.data(), D.data(), B,
                          T, di, ds, h1.data(), hs1.data(), y1.data());
  ref::selective_scan_fwd(delta.data(), u.data(), Bm.data(), Cm.data(), a_neg.data(), D0.data(), B,
                          T, di, ds, h2.data(), hs2.data(), y2.data());
  RC_ASSERT(h1 == h2);
  RC_ASSERT(hs1 == hs2);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t d = 0; d < di; ++d) {
      const size_t i = size_t(r * di + d);
      RC_ASSERT(y1[i] == y2[i] + D[size_t(d)] * u[i]);
    }
}

RC_GTEST_PROP(OracleScanProperty, DContributesExactlyDTimesU, ()) {
  const ScanShape sh = *gen_scan_shape();
  check_scan_d_contribution<float>(sh);
  check_scan_d_contribution<double>(sh);
}

// T = 1: closed forms of the scan forward and backward, written from the
// math of docs/math.md F4d / B3 in their stated (left-to-right) order, hence
// bitwise:  h1 = exp(δA)·h0 + (δ·u)·B,  y = Σ_n h1·C + D·u,
//   dh0 = dA·(dy·C),  dδ = Σ_n (dy·C)·(A·dA·h0 + u·B),  du = dy·D + Σ_n (dy·C)·δ·B,
//   dB_n = Σ_d (dy·C_n)·δ·u,  dC_n = Σ_d dy·h1_n,  dD = Σ_b dy·u,
//   dA_log = Σ_b (dy·C)·dA·δ·A·h0.
RC_GTEST_PROP(OracleScanProperty, SingleStepClosedForm, ()) {
  ScanShape sh = *gen_scan_shape();
  sh.T = 1;
  const int64_t B = sh.B, di = sh.di, ds = sh.ds;
  check::SplitMix64 rng(sh.seed);
  auto normal = [&](int64_t n, double mean, double scale) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = check::f32_exact(mean + scale * rng.normal());
    return v;
  };
  std::vector<double> delta = normal(B * di, 0, 1);
  for (double& x : delta) x = std::log1p(std::exp(x));
  const auto u = normal(B * di, 0, 1), Bm = normal(B * ds, 0, 1), Cm = normal(B * ds, 0, 1);
  const auto a_log = normal(di * ds, 0.5, 0.5), D = normal(di, 1, 0.5), h0 = normal(B * di * ds, 0, 0.5);
  const auto dy = normal(B * di, 0, 1);
  std::vector<double> A(size_t(di * ds));
  ref::exp_negate(a_log.data(), di * ds, A.data());
  std::vector<double> h = h0, hs(size_t(B * 2 * di * ds)), y(size_t(B * di));
  ref::selective_scan_fwd(delta.data(), u.data(), Bm.data(), Cm.data(), A.data(), D.data(), B, 1,
                          di, ds, h.data(), hs.data(), y.data());
  std::vector<double> gd(size_t(B * di)), gu(gd.size()), gB(size_t(B * ds)), gC(gB.size());
  std::vector<double> gD(size_t(di), 0.0), gA(size_t(di * ds), 0.0), gh0(h0.size());
  ref::selective_scan_bwd(delta.data(), u.data(), Bm.data(), Cm.data(), A.data(), D.data(),
                          hs.data(), dy.data(), B, 1, di, ds, gd.data(), gu.data(), gB.data(),
                          gC.data(), gD.data(), gA.data(), gh0.data());
  std::vector<double> eB(gB.size(), 0.0), eC(gC.size(), 0.0), eD(size_t(di), 0.0), eA(size_t(di * ds), 0.0);
  for (int64_t d = 0; d < di; ++d) {
    for (int64_t b = 0; b < B; ++b) {
      const size_t i = size_t(b * di + d);
      double yy = 0, dd = 0, du = dy[i] * D[size_t(d)];
      for (int64_t n = 0; n < ds; ++n) {
        const size_t hn = size_t((b * di + d) * ds + n), an = size_t(d * ds + n), bn = size_t(b * ds + n);
        const double dA = std::exp(delta[i] * A[an]);
        const double h1 = dA * h0[hn] + (delta[i] * u[i]) * Bm[bn];
        yy += h1 * Cm[bn];
        RC_ASSERT(h[hn] == h1);
        const double g = 0.0 + dy[i] * Cm[bn];
        dd += g * (A[an] * dA * h0[hn] + u[i] * Bm[bn]);
        du += g * delta[i] * Bm[bn];
        RC_ASSERT(gh0[hn] == dA * g);
      }
      RC_ASSERT(y[i] == yy + D[size_t(d)] * u[i]);
      RC_ASSERT(gd[i] == dd);
      RC_ASSERT(gu[i] == du);
    }
    double dD = 0;
    std::vector<double> dAl(size_t(ds), 0.0);
    for (int64_t b = 0; b < B; ++b) {
      const size_t i = size_t(b * di + d);
      dD += 0.0 + dy[i] * u[i];
      for (int64_t n = 0; n < ds; ++n) {
        const size_t hn = size_t((b * di + d) * ds + n), an = size_t(d * ds + n), bn = size_t(b * ds + n);
        const double dA = std::exp(delta[i] * A[an]);
        dAl[size_t(n)] += 0.0 + (0.0 + dy[i] * Cm[bn]) * dA * delta[i] * A[an] * h0[hn];
      }
    }
    RC_ASSERT(gD[size_t(d)] == 0.0 + dD);
    for (int64_t n = 0; n < ds; ++n) RC_ASSERT(gA[size_t(d * ds + n)] == 0.0 + dAl[size_t(n)]);
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < ds; ++n) {
      double sB = 0, sC = 0;
      for (int64_t d = 0; d < di; ++d) {
        const size_t i = size_t(b * di + d), bn = size_t(b * ds + n);
        sB += (0.0 + dy[i] * Cm[bn]) * delta[i] * u[i];
        sC += dy[i] * h[size_t((b * di + d) * ds + n)];
      }
      RC_ASSERT(gB[size_t(b * ds + n)] == sB);
      RC_ASSERT(gC[size_t(b * ds + n)] == sC);
    }
}

// T = 1: one layer's forward in closed form, straight from docs/math.md F1–F6 with the
// window [S0[1], .., S0[dc-1], xb] (S0[0] never read), in that order.
RC_GTEST_PROP(OracleLayerProperty, SingleStepClosedForm, ()) {
  OracleShape s = *gen_oracle_shape(1);
  s.T = 1;
  const check::Problem p = s.problem();
  const Dims& d = p.dims;
  const LayerParamOffsets& o = p.layout.layers[0];
  const double* P = p.params.data();
  const int64_t B = p.B;
  std::vector<double> H(size_t(B * d.dm));
  for (size_t i = 0; i < H.size(); ++i) H[i] = p.X[i % p.X.size()] * 0.5 + 0.25;
  std::vector<double> conv(p.conv0.begin(), p.conv0.begin() + B * d.di * d.dc);
  std::vector<double> ssm(p.ssm0.begin(), p.ssm0.begin() + B * d.di * d.ds);
  const std::vector<double> conv0 = conv, ssm0 = ssm;
  std::vector<double> Hout(H.size());
  ref::layer_forward(d, P, o, B, 1, H.data(), conv.data(), ssm.data(), Hout.data(),
                     static_cast<ref::LayerActivations<double>*>(nullptr));
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  for (int64_t b = 0; b < B; ++b) {
    const double* h = H.data() + b * d.dm;
    double ss = 0;
    for (int64_t i = 0; i < d.dm; ++i) ss += h[i] * h[i];
    const double inv = 1 / std::sqrt(ss / double(d.dm) + d.eps);
    std::vector<double> N(size_t(d.dm)), xz(size_t(2 * d.di), 0.0);
    for (int64_t i = 0; i < d.dm; ++i) N[size_t(i)] = (h[i] * inv) * P[o.norm_w + i];
    for (int64_t i = 0; i < d.dm; ++i)
      for (int64_t j = 0; j < 2 * d.di; ++j) xz[size_t(j)] += N[size_t(i)] * P[o.in_proj_w + i * 2 * d.di + j];
    std::vector<double> uu(size_t(d.di)), xd(size_t(d.xd), 0.0);
    for (int64_t c = 0; c < d.di; ++c) {
      double pc = P[o.conv_b + c];
      for (int64_t k = 0; k < d.dc; ++k) {
        const double win = k < d.dc - 1 ? conv0[size_t((b * d.di + c) * d.dc + k + 1)] : xz[size_t(c)];
        pc += win * P[o.conv_w + c * d.dc + k];
        RC_ASSERT(conv[size_t((b * d.di + c) * d.dc + k)] == win);  // final state = the window
      }
      uu[size_t(c)] = silu(pc);
    }
    for (int64_t c = 0; c < d.di; ++c)
      for (int64_t j = 0; j < d.xd; ++j) xd[size_t(j)] += uu[size_t(c)] * P[o.x_proj_w + c * d.xd + j];
    std::vector<double> g(size_t(d.di));
    for (int64_t c = 0; c < d.di; ++c) {
      double raw = P[o.dt_proj_b + c];
      for (int64_t r = 0; r < d.dr; ++r) raw += xd[size_t(r)] * P[o.dt_proj_w + r * d.di + c];
      const double delta = raw > 20 ? raw : std::log1p(std::exp(raw));
      double y = 0;
      for (int64_t n = 0; n < d.ds; ++n) {
        const double A = -std::exp(P[o.a_log + c * d.ds + n]);
        const size_t hn = size_t((b * d.di + c) * d.ds + n);
        const double h1 = std::exp(delta * A) * ssm0[hn] + (delta * uu[size_t(c)]) * xd[size_t(d.dr + n)];
        RC_ASSERT(ssm[hn] == h1);
        y += h1 * xd[size_t(d.dr + d.ds + n)];
      }
      y += P[o.d_param + c] * uu[size_t(c)];
      g[size_t(c)] = y * silu(xz[size_t(d.di + c)]);
    }
    for (int64_t j = 0; j < d.dm; ++j) {
      double out = 0;
      for (int64_t c = 0; c < d.di; ++c) out += g[size_t(c)] * P[o.out_proj_w + c * d.dm + j];
      RC_ASSERT(Hout[size_t(b * d.dm + j)] == h[j] + out);
    }
  }
}

// ---------------------------------------------------------- target ---

TEST(OracleTarget, IsTheLastTimestepOfTheForwardFromZeroState) {
  for (const char* name : {"tiny", "odd", "small"}) {
    const ref::NamedConfig& c = ref::builtin_config(name);
    const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 51);
    const Dims& d = p.dims;
    std::vector<double> target(size_t(p.B * d.dm)), out(size_t(p.B * p.T * d.dm));
    ref::target_forward(p.layout, p.params.data(), p.B, p.T, p.X.data(), target.data());
    ref::RecurrentState<double> zero(d, p.B);
    ref::backbone_forward(p.layout, p.params.data(), p.B, p.T, p.X.data(), zero, out.data(),
                          static_cast<ref::BackboneActivations<double>*>(nullptr));
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t j = 0; j < d.dm; ++j)
        EXPECT_EQ(target[size_t(b * d.dm + j)], out[size_t((b * p.T + p.T - 1) * d.dm + j)]) << name;
  }
}

// The target honours the configured eps (mamba-rs's CPU target hard-codes 1e-5).
TEST(OracleTarget, HonoursTheConfiguredEps) {
  ref::NamedConfig c = ref::builtin_config("odd");
  std::vector<std::vector<double>> targets;
  for (double eps : {1e-5, 1e-2}) {
    c.cfg.eps = eps;
    const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 52);
    std::vector<double> target(size_t(p.B * p.dims.dm)), out(size_t(p.B * p.T * p.dims.dm));
    ref::target_forward(p.layout, p.params.data(), p.B, p.T, p.X.data(), target.data());
    ref::RecurrentState<double> zero(p.dims, p.B);
    ref::backbone_forward(p.layout, p.params.data(), p.B, p.T, p.X.data(), zero, out.data(),
                          static_cast<ref::BackboneActivations<double>*>(nullptr));
    EXPECT_EQ(target[0], out[size_t((p.T - 1) * p.dims.dm)]);
    targets.push_back(target);
  }
  EXPECT_NE(targets[0], targets[1]);
}

}  // namespace
}  // namespace mc::testing
