// ctest-labels: gpu
// ctest-timeout: 1800
// test_scan_parity.cpp — the selective scan (kernels/scan/scan.hpp) on every
// route (checkpointed with both exponentials, chunked, sequential), forward and
// backward, f32/bf16/f16, with and without the fused epilogues (softplus of
// Δraw + bias, D·u skip, SiLU gate), against the CPU oracle.
//
// Rule (compare.hpp): K = GPU kernel, O = oracle in double on the same inputs,
// P = oracle in float on the same inputs (the same-precision baseline; for
// bf16/f16 the typed inputs δ/Δraw, u, z, B, C, dy are quantised once and P's
// typed outputs y, d_delta, du, dz are rounded to the dtype, like the kernel's
// RN stores; values the kernel keeps in registers — δ from the fused softplus,
// y before the gate — are not rounded in P either):
//   pass  <=>  max|K − O| <= k_limit · max|P − O| + atol   (atol = 2 ulp at max|O|)
// k_limit = kF32KLimit for f32 tensors, kTypedKLimit for typed outputs. Every
// measured k is printed and recorded (RecordProperty "k.<case>.<run>.<tensor>").
// Beside it, the statistical checks of check/stats.hpp (bias, magnitude bias,
// k_rms; docs/precision-statistics.md) against an ensemble of check::kStatRuns
// Monte Carlo arithmetic runs of the same oracle composition (cases up to
// kStatMaxWork state updates; larger ones print "not computed"). On the
// checkpointed route with ExpMath::Hardware they are reported but not enforced
// for the tensors compared at f32 precision: ex2.approx of a rounded δ·(A·log2 e)
// is by contract less accurate than the oracle's libm exp at f32 level (scan.hpp;
// the k-rule's factor 4 covers it), which puts those tensors outside the
// ensemble's accuracy class; its typed outputs are enforced.
// Each pair of runs of one case must also agree within the sum of their bounds.
// The oracle composes the unfused steps: softplus_fwd, selective_scan_fwd,
// gating_fwd and their backward steps (reference_cpu/steps.hpp).
//
// What each run saves is compared too: h_saved [B, T+1, di, ds] on the
// cross-check routes, the checkpoints [B, n_ckpt, di, ds] (the states before
// steps 0, K, 2K, ...) on the checkpointed route.
//
// Per run, without the oracle: the nosave forward is bitwise the save forward
// (y, final state); the backward is bitwise reproducible and dh0 = null changes
// nothing else; every output (and the saved states and workspace) is pre-filled
// with NaN, so an unwritten element fails.
//
// Cases: T in {1, 2, 7, 255, 256, 257, 1021 (prime), 1023, 1024, 1025, 3072}
// plus chunk−1/chunk/chunk+1/2·chunk+1 of every route's geometry; d_state in
// {1, 5, 16, 63, 64, 65, 128, 129, 256}; odd d_inner (17..21, and 1031..4111);
// B 1..4; non-zero initial states (and zero: h0 = null); B/C either contiguous
// or strided views into an xdbl-like buffer; z a strided view into an in_proj-like
// [B*T, 2·di] buffer; dD and dA_log accumulated onto non-zero values. A T = 65536
// case with B·(T+1)·di·ds > 2^31 checks 64-bit indexing on sampled channels.
// Refusals (bad fields, unsupported route features, short workspace) need no
// device and run everywhere.
//
// The same source runs the kernels on the CPU (validation/emulation, label cpu):
// there the case list is the small one (MC_SCAN_HOST_EMULATION).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "check/problem.hpp"
#include "check/stats.hpp"
#include "core/config.hpp"
#include "core/storage.hpp"
#include "gpu/device_buffer.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/scan/scan.hpp"
#include "kernels/scan/exp_math.cuh"
#include "reference_cpu/mca_scalar.hpp"
#include "reference_cpu/steps.hpp"
#include "validation/support/gpu_test.hpp"

namespace {

using mc::ConfigError;
using mc::DType;
using mc::check::KRuleResult;
using mc::gpu::DeviceBuffer;
namespace scan = mc::kern::scan;
using scan::ExpMath;
using scan::Route;

// ---- typed host representation -----------------------------------------------------
// Host values are floats already quantised to the dtype; these convert them to
// and from the device element type bit-exactly.
template <class T>
T to_elem(float x);
template <>
float to_elem<float>(float x) {
  return x;
}
template <>
__nv_bfloat16 to_elem<__nv_bfloat16>(float x) {
  __nv_bfloat16_raw r;
  r.x = mc::f32_to_bf16_bits(x);
  return __nv_bfloat16(r);
}
template <>
__half to_elem<__half>(float x) {
  __half_raw r;
  r.x = mc::f32_to_f16_bits(x);
  return __half(r);
}
float from_elem(float x) { return x; }
float from_elem(__nv_bfloat16 x) { return mc::bf16_bits_to_f32(__nv_bfloat16_raw(x).x); }
float from_elem(__half x) { return mc::f16_bits_to_f32(__half_raw(x).x); }

cudaStream_t kStream = nullptr;  // the legacy default stream: every call below is ordered

template <class T>
DeviceBuffer<T> upload(const std::vector<float>& host, const std::string& name) {
  std::vector<T> tmp(host.size());
  for (size_t i = 0; i < host.size(); ++i) tmp[i] = to_elem<T>(host[i]);
  DeviceBuffer<T> d(std::max<size_t>(1, host.size()), name);
  if (!host.empty()) d.upload(tmp.data(), tmp.size(), kStream);
  return d;
}

template <class T>
std::vector<float> download(const DeviceBuffer<T>& d, size_t n) {
  std::vector<T> tmp(n);
  d.download(tmp.data(), n, kStream);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = from_elem(tmp[i]);
  return out;
}

// All-ones bytes: NaN for f32, bf16 and f16 alike.
template <class T>
void fill_nan(DeviceBuffer<T>& d) {
  MC_CUDA_CHECK(cudaMemset(d.get(), 0xff, d.bytes()), "fill_nan " + d.name());
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- the problem ----------------------------------------------------------------------
struct ScanCase {
  DType dtype = DType::F32;
  int64_t B = 1, T = 1, di = 17, ds = 16;
  bool xdbl = false;      // Bm/Cm strided views into one [B*T, dr + 2ds] buffer
  bool chained = false;   // upstream gradient w.r.t. the final state
  bool softplus = false;  // Δraw + bias in, softplus fused (checkpointed only)
  bool gate = false;      // z in, output y·silu(z) (checkpointed only)
  bool no_skip = false;   // D = null
  bool zero_h0 = false;   // h0 = null
  uint64_t seed = 1;
  bool fused() const { return softplus || gate || no_skip || zero_h0; }
  std::string name() const {
    std::ostringstream os;
    os << mc::to_string(dtype) << "_T" << T << "_ds" << ds << "_B" << B << "_di" << di
       << (xdbl ? "_xdbl" : "") << (chained ? "_chained" : "") << (softplus ? "_softplus" : "")
       << (gate ? "_gate" : "") << (no_skip ? "_noskip" : "") << (zero_h0 ? "_h0zero" : "");
    return os.str();
  }
};

void PrintTo(const ScanCase& c, std::ostream* os) { *os << c.name(); }

constexpr int64_t kXdblDr = 3;  // dt_rank columns in front of B|C in the xdbl layout

// Inputs as the GPU sees them (floats quantised to the dtype where the GPU stores typed).
struct ScanInputs {
  ScanCase c;
  std::vector<float> delta, u, dy;  // [B*T, di] typed; delta = Δ, or Δraw with softplus
  std::vector<float> z2;            // gate: [B*T, 2·di] typed, z in columns [di, 2di)
  std::vector<float> bc;            // xdbl: [B*T, ld] holding B at kXdblDr, C at kXdblDr+ds
  std::vector<float> Bm, Cm;        // contiguous [B*T, ds] typed (the oracle's layout)
  std::vector<float> a_neg;         // [di, ds]
  std::vector<float> D;             // [di] (zeros with no_skip: the oracle's view)
  std::vector<float> bias;          // [di] (softplus)
  std::vector<float> h0;            // [B, di, ds] (zeros with zero_h0)
  std::vector<float> dh_final;      // [B, di, ds] (chained cases) or empty
  std::vector<float> dD0, dA_log0;  // accumulator start values
  int64_t ld_bc() const { return c.xdbl ? kXdblDr + 2 * c.ds : c.ds; }
  int64_t rows() const { return c.B * c.T; }
};

float quantise(DType t, double x) { return mc::round_to(t, float(x)); }

ScanInputs make_inputs(const ScanCase& c) {
  ScanInputs in;
  in.c = c;
  const int64_t nact = c.B * c.T * c.di, nrow = c.B * c.T;
  mc::check::SplitMix64 rng(c.seed * 0x9e3779b97f4a7c15ULL + 12345);
  // δ = softplus(r), r ~ U(-7, 0): δ in (1e-3, 0.69) — long memory for small |A|,
  // fast decay for large |A| (A[d, n] ≈ -(n+1)). With the fused softplus the
  // kernel gets r − bias and the bias; one row in 16 has r in (20, 24] (the
  // identity branch of softplus).
  in.delta.resize(size_t(nact));
  in.u.resize(size_t(nact));
  in.dy.resize(size_t(nact));
  in.bias.resize(size_t(c.di));
  for (auto& x : in.bias) x = float(rng.uniform(-1.0, 1.0));
  for (int64_t i = 0; i < nact; ++i) {
    const int64_t d = i % c.di;
    const bool big = c.softplus && ((i / c.di) % 16 == 5);
    const double r = big ? rng.uniform(20.0, 24.0) : rng.uniform(-7.0, 0.0);
    in.delta[size_t(i)] =
        c.softplus ? quantise(c.dtype, r - in.bias[size_t(d)]) : quantise(c.dtype, std::log1p(std::exp(r)));
    in.u[size_t(i)] = quantise(c.dtype, rng.uniform(-2.0, 2.0));
    in.dy[size_t(i)] = quantise(c.dtype, rng.uniform(-1.0, 1.0));
  }
  if (c.gate) {
    in.z2.assign(size_t(2 * nact), quantise(c.dtype, 9.0));  // the x half: never read
    for (int64_t r = 0; r < nrow; ++r)
      for (int64_t d = 0; d < c.di; ++d)
        in.z2[size_t(r * 2 * c.di + c.di + d)] = quantise(c.dtype, rng.uniform(-4.0, 4.0));
  }
  in.Bm.resize(size_t(nrow * c.ds));
  in.Cm.resize(size_t(nrow * c.ds));
  for (auto& x : in.Bm) x = quantise(c.dtype, rng.uniform(-1.0, 1.0));
  for (auto& x : in.Cm) x = quantise(c.dtype, rng.uniform(-1.0, 1.0));
  if (c.xdbl) {
    const int64_t ld = in.ld_bc();
    in.bc.assign(size_t(nrow * ld), 0.f);
    for (int64_t r = 0; r < nrow; ++r) {
      for (int64_t j = 0; j < kXdblDr; ++j) in.bc[size_t(r * ld + j)] = quantise(c.dtype, 7.0);
      for (int64_t n = 0; n < c.ds; ++n) {
        in.bc[size_t(r * ld + kXdblDr + n)] = in.Bm[size_t(r * c.ds + n)];
        in.bc[size_t(r * ld + kXdblDr + c.ds + n)] = in.Cm[size_t(r * c.ds + n)];
      }
    }
  }
  in.a_neg.resize(size_t(c.di * c.ds));
  for (int64_t d = 0; d < c.di; ++d)
    for (int64_t n = 0; n < c.ds; ++n)
      in.a_neg[size_t(d * c.ds + n)] =
          -std::exp(float(std::log(double(n + 1)) + rng.uniform(-0.3, 0.3)));
  in.D.resize(size_t(c.di));
  for (auto& x : in.D) x = c.no_skip ? 0.f : float(rng.uniform(0.5, 1.5));
  in.h0.resize(size_t(c.B * c.di * c.ds));
  for (auto& x : in.h0) x = c.zero_h0 ? 0.f : float(rng.uniform(-1.0, 1.0));
  if (c.chained) {
    in.dh_final.resize(in.h0.size());
    for (auto& x : in.dh_final) x = float(rng.uniform(-1.0, 1.0));
  }
  in.dD0.resize(size_t(c.di));
  for (auto& x : in.dD0) x = float(rng.uniform(-0.5, 0.5));
  in.dA_log0.resize(size_t(c.di * c.ds));
  for (auto& x : in.dA_log0) x = float(rng.uniform(-0.5, 0.5));
  return in;
}

// Every output of one forward + backward, in precision S (float for the GPU).
// `saved` is h_saved [B, T+1, di, ds] for the oracle; for a run, what it saved.
template <class S>
struct ScanOutputs {
  std::vector<S> y, saved, h_final, d_delta, du, dz, dB, dC, dD, dA_log, dh0;
};

template <class S>
std::vector<S> as(const std::vector<float>& v) {
  return std::vector<S>(v.begin(), v.end());
}

// A typed store of the oracle's result: round to nearest in float (P), one random
// rounding of the dtype's unit roundoff in Monte Carlo arithmetic (the ensemble).
template <class S>
S store_rounded(DType t, S x) {
  return S(mc::round_to(t, float(x)));
}
mc::ref::Mca store_rounded(DType t, mc::ref::Mca x) { return mc::ref::round_to(t, x); }

// The unfused composition in precision S (typed outputs rounded when S = float
// and `round` names the dtype: the same-precision baseline).
template <class S>
ScanOutputs<S> run_oracle(const ScanInputs& in, DType round = DType::F32) {
  const ScanCase& c = in.c;
  const int64_t R = in.rows(), n = R * c.di;
  ScanOutputs<S> o;
  std::vector<S> delta = as<S>(in.delta), x;
  if (c.softplus) {  // x = Δraw + bias, δ = softplus(x)
    x.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = delta[size_t(i)] + S(in.bias[size_t(i % c.di)]);
    mc::ref::softplus_fwd<S>(x.data(), n, delta.data());
  }
  const auto u = as<S>(in.u), Bm = as<S>(in.Bm), Cm = as<S>(in.Cm), a = as<S>(in.a_neg),
             D = as<S>(in.D);
  o.h_final = as<S>(in.h0);
  o.saved.resize(size_t(c.B * (c.T + 1) * c.di * c.ds));
  std::vector<S> y(static_cast<size_t>(n));
  mc::ref::selective_scan_fwd<S>(delta.data(), u.data(), Bm.data(), Cm.data(), a.data(), D.data(),
                                 c.B, c.T, c.di, c.ds, o.h_final.data(), o.saved.data(), y.data());
  std::vector<S> dY = as<S>(in.dy), z, gs;
  if (c.gate) {  // z, gs = silu(z) through the oracle's own split step
    std::vector<S> P2 = as<S>(in.z2), xb(static_cast<size_t>(n));
    z.resize(size_t(n));
    gs.resize(size_t(n));
    mc::ref::split_gate_silu_fwd<S>(P2.data(), R, c.di, xb.data(), z.data(), gs.data());
    o.y.resize(size_t(n));
    mc::ref::gating_fwd<S>(y.data(), gs.data(), n, o.y.data());
    const std::vector<S> dG = dY;
    o.dz.resize(size_t(n));
    mc::ref::gating_bwd<S>(dG.data(), y.data(), z.data(), gs.data(), n, dY.data(), o.dz.data());
  } else {
    o.y = y;
  }
  std::vector<S> ddelta(static_cast<size_t>(n));
  o.du.resize(size_t(n));
  o.dB.resize(size_t(R * c.ds));
  o.dC.resize(o.dB.size());
  o.dD = as<S>(in.dD0);
  o.dA_log = as<S>(in.dA_log0);
  o.dh0.resize(o.h_final.size());
  const auto dhT = as<S>(in.dh_final);
  mc::ref::selective_scan_bwd_chained<S>(
      delta.data(), u.data(), Bm.data(), Cm.data(), a.data(), D.data(), o.saved.data(), dY.data(),
      dhT.empty() ? nullptr : dhT.data(), c.B, c.T, c.di, c.ds, ddelta.data(), o.du.data(),
      o.dB.data(), o.dC.data(), o.dD.data(), o.dA_log.data(), o.dh0.data());
  if (c.softplus) {
    o.d_delta.resize(size_t(n));
    mc::ref::softplus_bwd<S>(x.data(), ddelta.data(), n, o.d_delta.data());
  } else {
    o.d_delta = ddelta;
  }
  if (round != DType::F32)
    for (auto* v : {&o.y, &o.d_delta, &o.du, &o.dz})
      for (auto& e : *v) e = store_rounded(round, e);
  return o;
}

// ---- the ensemble of the statistical checks -----------------------------------------------
// Cases up to this many state updates (B·T·di·ds) get one (about a second each).
constexpr int64_t kStatMaxWork = int64_t(1) << 21;

// check::kStatRuns Monte Carlo arithmetic runs of run_oracle (run r seeded from
// the case seed, r and the OpenMP thread): empty when the case is too large.
std::vector<ScanOutputs<double>> mca_ensemble(const ScanInputs& in) {
  std::vector<ScanOutputs<double>> e;
  const ScanCase& c = in.c;
  if (c.B * c.T * c.di * c.ds > kStatMaxWork) return e;
  for (int r = 0; r < mc::check::kStatRuns; ++r) {
    mc::check::seed_mca(c.seed, r);
    const ScanOutputs<mc::ref::Mca> m = run_oracle<mc::ref::Mca>(in, c.dtype);
    ScanOutputs<double> d;
    d.y = mc::check::to_double_vec(m.y);
    d.saved = mc::check::to_double_vec(m.saved);
    d.h_final = mc::check::to_double_vec(m.h_final);
    d.d_delta = mc::check::to_double_vec(m.d_delta);
    d.du = mc::check::to_double_vec(m.du);
    d.dz = mc::check::to_double_vec(m.dz);
    d.dB = mc::check::to_double_vec(m.dB);
    d.dC = mc::check::to_double_vec(m.dC);
    d.dD = mc::check::to_double_vec(m.dD);
    d.dA_log = mc::check::to_double_vec(m.dA_log);
    d.dh0 = mc::check::to_double_vec(m.dh0);
    e.push_back(std::move(d));
  }
  return e;
}

// One way of running the scan: a route and an exponential.
struct RouteRun {
  Route route;
  ExpMath exp;
  int cpt = 0;  // checkpointed, d_state <= 16: forced channels per thread (0 = the plan's)
  int64_t pieces = 0;  // checkpointed backward: forced pieces (0 = the plan's)
  std::string name() const {
    return std::string(scan::to_string(route)) +
           (route == Route::Checkpointed ? std::string("-") + scan::to_string(exp) : "") +
           (cpt ? "-cpt" + std::to_string(cpt) : "") +
           (pieces ? "-pieces" + std::to_string(pieces) : "");
  }
};

// The runs a case supports: the checkpointed route with both exponentials (the plan's
// own choice of channels per thread), and the cross-check routes where the case is plain
// (and d_state <= 64 for sequential). At d_state <= 16 the tile plan runs too, with both
// exponentials, at 2, 3 or 4 channels a thread (by the case's seed, a different count
// for each exponential), so that every tile geometry runs.
std::vector<RouteRun> runs_for(const ScanCase& c) {
  std::vector<RouteRun> r = {{Route::Checkpointed, ExpMath::Hardware},
                             {Route::Checkpointed, ExpMath::Accurate}};
  if (c.ds <= 16) {
    r.push_back({Route::Checkpointed, ExpMath::Hardware, int(2 + c.seed % 3)});
    r.push_back({Route::Checkpointed, ExpMath::Accurate, int(2 + (c.seed + 1) % 3)});
    // two pieces of several chunks each (the plan's own pieces on these small grids are
    // one chunk each): the accurate exponential, whose other outputs must keep the bits
    // of the plan's run (run_case)
    if (c.T > 2 * 16) r.push_back({Route::Checkpointed, ExpMath::Accurate, 0, 2});
    // one walk over every chunk (pieces = 1), with each exponential: the kernel instances
    // without pieces, which the plan gives grids of 198 blocks and more (B 8, d_inner 1536;
    // the accurate one is the strict-f32 step's) and these small grids never get
    if (c.T > 16)
      for (ExpMath e : {ExpMath::Hardware, ExpMath::Accurate})
        r.push_back({Route::Checkpointed, e, 0, 1});
  }
  if (!c.fused()) {
    r.push_back({Route::Chunked, ExpMath::Accurate});
    if (c.ds <= mc::Limits::kMaxSeqScanDState) r.push_back({Route::Sequential, ExpMath::Accurate});
  }
  return r;
}

// The checkpoint stride of the checkpointed route for this shape.
int64_t ckpt_chunk(const ScanCase& c) {
  return scan::geometry(scan::Shape{c.B, c.T, c.di, c.ds}, Route::Checkpointed, false).chunk;
}

// A later forward's own outputs, NaN-filled (an unwritten element differs from any result):
// saved states, final state and y, pointed at by `into`'s outputs.
template <class T>
struct FwdOutputs {
  DeviceBuffer<float> saved, h_final;
  DeviceBuffer<T> y;
  FwdOutputs(size_t n_saved, size_t n_state, size_t n_y, const std::string& what)
      : saved(n_saved, "saved (" + what + ")"),
        h_final(n_state, "h_final (" + what + ")"),
        y(n_y, "y (" + what + ")") {
    fill_nan(saved);
    fill_nan(h_final);
    fill_nan(y);
  }
  void point(scan::FwdParams<T>& into) {
    into.saved = saved.get();
    into.h_final = h_final.get();
    into.y = {y.get(), 0};
  }
};

// The checkpointed forward's other thread layout (scan::FwdLayout) than the one the plan
// takes for this run, where there are two (d_state <= 16, one channel a thread); Auto
// where there is none.
scan::FwdLayout other_fwd_layout(const ScanCase& c, const RouteRun& run) {
  if (run.route != Route::Checkpointed || c.ds > 16 || run.cpt > 1) return scan::FwdLayout::Auto;
  const scan::Shape sh{c.B, c.T, c.di, c.ds};
  return scan::geometry(sh, run.route, false, 0, run.cpt).lanes == 1
             ? scan::FwdLayout::LaneGroups
             : scan::FwdLayout::WholeState;
}

// The kernel under test, plus the checks that need no oracle (recorded as failures).
template <class T>
ScanOutputs<float> run_gpu(const ScanInputs& in, const RouteRun& run) {
  const ScanCase& c = in.c;
  const scan::Shape sh{c.B, c.T, c.di, c.ds};
  const std::string label = c.name() + "." + run.name();
  const int64_t R = in.rows(), n = R * c.di, ns = c.B * c.di * c.ds;
  DeviceBuffer<T> delta = upload<T>(in.delta, "delta"), u = upload<T>(in.u, "u"),
                  dy = upload<T>(in.dy, "dy"), z2 = upload<T>(in.z2, "z2");
  DeviceBuffer<T> bc, Bm, Cm;
  scan::Rows<const T> Bv, Cv;
  if (c.xdbl) {
    bc = upload<T>(in.bc, "xdbl");
    Bv = {bc.get() + kXdblDr, in.ld_bc()};
    Cv = {bc.get() + kXdblDr + c.ds, in.ld_bc()};
  } else {
    Bm = upload<T>(in.Bm, "Bm");
    Cm = upload<T>(in.Cm, "Cm");
    Bv = {Bm.get(), 0};
    Cv = {Cm.get(), 0};
  }
  DeviceBuffer<float> a = upload<float>(in.a_neg, "a_neg"), D = upload<float>(in.D, "D"),
                      bias = upload<float>(in.bias, "bias"), h0 = upload<float>(in.h0, "h0");
  const size_t nsaved = scan::saved_floats(sh, run.route);
  DeviceBuffer<float> saved(nsaved, "saved"), hf(size_t(ns), "h_final");
  DeviceBuffer<T> y(size_t(n), "y");
  fill_nan(saved);
  fill_nan(hf);
  fill_nan(y);

  scan::FwdParams<T> f;
  f.shape = sh;
  f.route = run.route;
  f.exp = run.exp;
  f.channels_per_thread = run.cpt;
  f.pieces = run.pieces;
  f.delta = {delta.get(), 0};
  f.delta_bias = c.softplus ? bias.get() : nullptr;
  f.u = {u.get(), 0};
  f.Bm = Bv;
  f.Cm = Cv;
  f.a_neg = a.get();
  f.D = c.no_skip ? nullptr : D.get();
  if (c.gate) f.z = {z2.get() + c.di, 2 * c.di};
  f.h0 = c.zero_h0 ? nullptr : h0.get();
  f.h_final = hf.get();
  f.saved = saved.get();
  f.y = {y.get(), 0};
  scan::forward<T>(f, kStream);

  ScanOutputs<float> o;
  o.y = download(y, size_t(n));
  o.saved = download(saved, nsaved);
  o.h_final = download(hf, size_t(ns));
  if (run.route != Route::Checkpointed) {
    // seed_fwd_kernels.cuh: the final state and h_saved[:, T] are the same value bit for bit
    const size_t row = size_t(c.di * c.ds);
    for (int64_t b = 0; b < c.B; ++b)
      EXPECT_EQ(std::memcmp(o.saved.data() + size_t(b * (c.T + 1) + c.T) * row,
                            o.h_final.data() + size_t(b) * row, row * sizeof(float)),
                0)
          << label << ": h_final differs from h_saved[" << b << ", T]";
  }

  {  // nosave twin: bitwise the same y and final state (one walk: without saved states the
     // forward has no pieces, scan.hpp "Pieces of the forward"; in the runs with pieces, the
     // bf16/f16 plan's on these small grids and the forced ones, this compares them with one
     // walk)
    DeviceBuffer<float> hf2(size_t(ns), "h_final (nosave)");
    DeviceBuffer<T> y2(size_t(n), "y (nosave)");
    fill_nan(y2);
    fill_nan(hf2);
    scan::FwdParams<T> f2 = f;
    f2.saved = nullptr;
    f2.pieces = 0;
    f2.h_final = hf2.get();
    f2.y = {y2.get(), 0};
    scan::forward<T>(f2, kStream);
    EXPECT_TRUE(bitwise_equal(download(y2, size_t(n)), o.y)) << label << ": nosave y differs";
    EXPECT_TRUE(bitwise_equal(download(hf2, size_t(ns)), o.h_final))
        << label << ": nosave final state differs";
  }

  // Layout twin (d_state <= 16, one channel a thread): the forward with the other thread
  // layout (scan::FwdLayout) must give the same bits: y, every saved state, the final state.
  const scan::FwdLayout twin_layout = other_fwd_layout(c, run);
  if (twin_layout != scan::FwdLayout::Auto) {
    const bool whole = twin_layout == scan::FwdLayout::LaneGroups;
    FwdOutputs<T> out3(nsaved, size_t(ns), size_t(n), "layout twin");
    scan::FwdParams<T> f3 = f;
    f3.layout = twin_layout;
    f3.pieces = 0;  // whole-state has no forward pieces; lane groups: the plan's
    out3.point(f3);
    scan::forward<T>(f3, kStream);
    const std::string twin = label + ": layout " + scan::to_string(f3.layout) + " against " +
                             (whole ? "whole-state" : "lane-groups");
    EXPECT_TRUE(bitwise_equal(download(out3.y, size_t(n)), o.y)) << twin << ": y differs";
    EXPECT_TRUE(bitwise_equal(download(out3.saved, nsaved), o.saved)) << twin << ": saved differs";
    EXPECT_TRUE(bitwise_equal(download(out3.h_final, size_t(ns)), o.h_final))
        << twin << ": final state differs";
  }

  DeviceBuffer<float> dhT = upload<float>(in.dh_final, "dh_final");
  DeviceBuffer<T> d_delta(size_t(n), "d_delta"), du(size_t(n), "du"), dz(size_t(n), "dz");
  DeviceBuffer<float> dB(size_t(R * c.ds), "dB"), dC(size_t(R * c.ds), "dC");
  DeviceBuffer<float> dD = upload<float>(in.dD0, "dD"), dA = upload<float>(in.dA_log0, "dA_log");
  DeviceBuffer<float> dh0(size_t(ns), "dh0");
  const size_t ws_bytes = scan::bwd_workspace_bytes(sh, run.route, 0, run.cpt, 1, run.pieces);
  DeviceBuffer<char> ws(std::max<size_t>(1, ws_bytes), "scan workspace");
  scan::BwdParams<T> b = scan::backward_of(f);
  b.pieces = run.pieces;
  b.dy = {dy.get(), 0};
  b.dh_final = c.chained ? dhT.get() : nullptr;
  b.d_delta = {d_delta.get(), 0};
  b.du = {du.get(), 0};
  if (c.gate) b.dz = {dz.get(), 0};
  b.dB = {dB.get(), 0};
  b.dC = {dC.get(), 0};
  b.dD = c.no_skip ? nullptr : dD.get();
  b.dA_log = dA.get();
  b.workspace = ws.get();
  b.workspace_bytes = ws_bytes;
  auto run_bwd = [&](float* dh0_ptr) {
    for (auto* t : {&d_delta, &du, &dz}) fill_nan(*t);
    fill_nan(dB);
    fill_nan(dC);
    fill_nan(dh0);
    fill_nan(ws);
    b.dh0 = dh0_ptr;
    scan::backward<T>(b, kStream);
  };
  run_bwd(dh0.get());
  o.d_delta = download(d_delta, size_t(n));
  o.du = download(du, size_t(n));
  if (c.gate) o.dz = download(dz, size_t(n));
  o.dB = download(dB, size_t(R * c.ds));
  o.dC = download(dC, size_t(R * c.ds));
  o.dD = download(dD, size_t(c.di));
  o.dA_log = download(dA, size_t(c.di * c.ds));
  o.dh0 = download(dh0, size_t(ns));

  // A later backward's outputs against the first run's, byte for byte (dh0 when it was set).
  auto expect_same_backward = [&](const std::string& what, bool with_dh0) {
    EXPECT_TRUE(bitwise_equal(download(d_delta, size_t(n)), o.d_delta)) << what << ": d_delta";
    EXPECT_TRUE(bitwise_equal(download(du, size_t(n)), o.du)) << what << ": du";
    if (c.gate) {
      EXPECT_TRUE(bitwise_equal(download(dz, size_t(n)), o.dz)) << what << ": dz";
    }
    EXPECT_TRUE(bitwise_equal(download(dB, size_t(R * c.ds)), o.dB)) << what << ": dB";
    EXPECT_TRUE(bitwise_equal(download(dC, size_t(R * c.ds)), o.dC)) << what << ": dC";
    EXPECT_TRUE(bitwise_equal(download(dD, size_t(c.di)), o.dD)) << what << ": dD";
    EXPECT_TRUE(bitwise_equal(download(dA, size_t(c.di * c.ds)), o.dA_log)) << what << ": dA_log";
    if (with_dh0) {
      EXPECT_TRUE(bitwise_equal(download(dh0, size_t(ns)), o.dh0)) << what << ": dh0";
    }
  };

  // Before a later backward: its outputs NaN-filled, its accumulators back at their start.
  auto reset_backward = [&]() {
    for (auto* t : {&d_delta, &du, &dz}) fill_nan(*t);
    fill_nan(dB);
    fill_nan(dC);
    fill_nan(dh0);
    dD.upload(in.dD0.data(), in.dD0.size(), kStream);
    dA.upload(in.dA_log0.data(), in.dA_log0.size(), kStream);
  };
  // A later backward `bx` with partial budget `budget` (its workspace sized for it and
  // NaN-filled, the outputs reset, then `prepare`, e.g. copies for an in-place run),
  // against the first run's bytes, dh0 included.
  auto expect_same_rerun = [&](const std::string& what, scan::BwdParams<T> bx, size_t budget,
                               const std::function<void()>& prepare) {
    const size_t ws_n = scan::bwd_workspace_bytes(sh, run.route, budget, run.cpt,
                                                  bx.checkpoint_group, bx.pieces);
    DeviceBuffer<char> wsx(ws_n, "scan workspace (" + what + ")");
    fill_nan(wsx);
    reset_backward();
    if (prepare) prepare();
    bx.workspace = wsx.get();
    bx.workspace_bytes = ws_n;
    bx.partial_budget = budget;
    bx.dh0 = dh0.get();
    scan::backward<T>(bx, kStream);
    expect_same_backward(what, true);
  };

  // Second run without dh0 (accumulators reset): bitwise the same everything else.
  dD.upload(in.dD0.data(), in.dD0.size(), kStream);
  dA.upload(in.dA_log0.data(), in.dA_log0.size(), kStream);
  run_bwd(nullptr);
  expect_same_backward(label + " (rerun without dh0)", false);

  // Checkpointed: the backward in segments of 1 and of 2 chunks (partial budgets of that
  // many chunks' dB/dC partials) carries the walk's state and the dA_log and dD sums from
  // launch to launch: bitwise the same outputs as one launch. Where the shape has pieces
  // (scan.hpp, "Pieces of the backward"; every test shape at d_state <= 16 with more than
  // one chunk, one channel a thread: their grids are small), the one launch walks the pieces in parallel from the carry pass's
  // states and the segments walk them one after the other: the same bytes too.
  if (run.route == Route::Checkpointed) {
    const scan::Geometry g1 =
        scan::geometry(sh, run.route, true, 0, run.cpt, 1, scan::FwdLayout::Auto, run.pieces);
    const size_t chunk_bytes =
        2 * size_t(c.B) * size_t(g1.chunk) * size_t(g1.reduce_groups) * size_t(c.ds) * 4;
    EXPECT_EQ(g1.segments, 1) << label << ": the default budget splits a test shape";
    EXPECT_EQ(g1.parallel_pieces, g1.pieces > 1) << label;
    for (int64_t chunks : {int64_t(1), int64_t(2)}) {
      if (chunks >= g1.n_ckpt) continue;
      const std::string sl = label + " in segments of " + std::to_string(chunks) + " chunks";
      const size_t budget = size_t(chunks) * chunk_bytes;
      const scan::Geometry gs = scan::geometry(sh, run.route, true, budget, run.cpt, 1,
                                               scan::FwdLayout::Auto, run.pieces);
      // segments never cross a piece's edge: ceil(piece / per) for each piece
      const int64_t per = std::min(chunks, gs.piece_chunks);
      const int64_t last = gs.n_ckpt - (gs.pieces - 1) * gs.piece_chunks;
      EXPECT_EQ(gs.pieces, g1.pieces) << sl;
      EXPECT_FALSE(gs.parallel_pieces) << sl;
      EXPECT_EQ(gs.segment_chunks, per) << sl;
      EXPECT_EQ(gs.segments, (gs.pieces - 1) * ((gs.piece_chunks + per - 1) / per) +
                                 (last + per - 1) / per)
          << sl;
      expect_same_rerun(sl, b, budget, nullptr);
    }
    // Layout twin of the backward (d_state <= 16, one channel a thread): the other thread
    // layout gives the same bytes, in one launch and in segments of one chunk.
    if (twin_layout != scan::FwdLayout::Auto)
      for (size_t budget : {size_t(0), size_t(1)}) {
        scan::BwdParams<T> bt = b;
        bt.layout = twin_layout;
        expect_same_rerun(label + ": backward in layout " + scan::to_string(twin_layout) +
                              (budget ? " in segments of one chunk" : ""),
                          bt, budget, nullptr);
      }
    // d_delta written over delta, and du also written over dy (scan.hpp: the checkpointed
    // route allows both; the training step's backward does both), in one launch and in
    // segments of one chunk: the same bytes.
    for (size_t budget : {size_t(0), size_t(1)}) {
      for (bool du_over_dy : {false, true}) {
        const std::string il = label + " with d_delta over delta" +
                               (du_over_dy ? " and du over dy" : "") +
                               (budget ? " in segments" : "");
        scan::BwdParams<T> b3 = b;
        if (du_over_dy && budget) b3.layout = twin_layout;  // in place in the other layout too
        b3.delta = {d_delta.get(), 0};
        if (du_over_dy) b3.dy = {du.get(), 0};
        expect_same_rerun(il, b3, budget, [&] {
          MC_CUDA_CHECK(cudaMemcpyAsync(d_delta.get(), delta.get(), size_t(n) * sizeof(T),
                                        cudaMemcpyDeviceToDevice, kStream), il + ": copy delta");
          if (du_over_dy)
            MC_CUDA_CHECK(cudaMemcpyAsync(du.get(), dy.get(), size_t(n) * sizeof(T),
                                          cudaMemcpyDeviceToDevice, kStream), il + ": copy dy");
        });
      }
    }

    // Grouped checkpoints (scan.hpp): a forward that saves every G-th chunk's state gives
    // the same y and final state, and its saved states are the dense ones of chunks 0, G,
    // 2G, ...; its backward (a refill per group, in one launch per group and in segments
    // of one chunk) gives the same bytes as the dense backward. G = 2, 3 and one group.
    const scan::Geometry gf = scan::geometry(sh, run.route, false, 0, run.cpt);
    const size_t row = size_t(c.di * c.ds);
    for (int64_t G : {int64_t(2), int64_t(3), gf.n_ckpt}) {
      if (gf.n_ckpt < 2 || G > gf.n_ckpt || (G == gf.n_ckpt && G <= 3)) continue;
      const std::string gl = label + " with checkpoint groups of " + std::to_string(G);
      const scan::Geometry gg = scan::geometry(sh, run.route, false, 0, run.cpt, G);
      EXPECT_EQ(gg.n_saved, (gf.n_ckpt + G - 1) / G) << gl;
      const size_t nsg = scan::saved_floats(sh, run.route, G);
      EXPECT_EQ(nsg, size_t(c.B * gg.n_saved) * row) << gl;
      FwdOutputs<T> out_g(nsg, size_t(ns), size_t(n), "grouped");
      scan::FwdParams<T> fg = f;
      fg.checkpoint_group = G;
      fg.pieces = 0;  // grouped saves: one walk (no forward pieces)
      if (G == 3) fg.layout = twin_layout;  // grouped saves in the other layout too
      out_g.point(fg);
      scan::forward<T>(fg, kStream);
      EXPECT_TRUE(bitwise_equal(download(out_g.y, size_t(n)), o.y)) << gl << ": y";
      EXPECT_TRUE(bitwise_equal(download(out_g.h_final, size_t(ns)), o.h_final)) << gl << ": h_final";
      const std::vector<float> sg_host = download(out_g.saved, nsg);
      for (int64_t bb = 0; bb < c.B; ++bb)
        for (int64_t i = 0; i < gg.n_saved; ++i)
          EXPECT_EQ(std::memcmp(sg_host.data() + size_t(bb * gg.n_saved + i) * row,
                                o.saved.data() + size_t(bb * gf.n_ckpt + i * G) * row,
                                row * sizeof(float)),
                    0)
              << gl << ": saved state " << i << " of sample " << bb << " is not chunk "
              << i * G << "'s";
      for (size_t budget : {size_t(0), size_t(1)}) {
        const std::string bl = gl + (budget ? " in segments of one chunk" : "");
        const scan::Geometry gb = scan::geometry(sh, run.route, true, budget, run.cpt, G,
                                                 scan::FwdLayout::Auto, run.pieces);
        EXPECT_EQ(gb.refills, (gf.n_ckpt + G - 1) / G) << bl;
        scan::BwdParams<T> bg = b;
        bg.saved = out_g.saved.get();
        bg.checkpoint_group = G;
        if (G == 3) bg.layout = twin_layout;
        expect_same_rerun(bl, bg, budget, nullptr);
      }
    }
  }
  MC_CUDA_CHECK(cudaDeviceSynchronize(), "scan parity " + label);
  return o;
}

// ---- comparison -------------------------------------------------------------------------
// The oracle's h_saved rows at the checkpoints: [B, n_ckpt, di, ds] = h_saved[b, c·K, d, :].
template <class S>
std::vector<S> at_checkpoints(const std::vector<S>& hs, const ScanCase& c, int64_t K) {
  const int64_t nck = (c.T + K - 1) / K, row = c.di * c.ds;
  std::vector<S> out;
  out.reserve(size_t(c.B * nck * row));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t k = 0; k < nck; ++k) {
      const auto first = hs.begin() + (b * (c.T + 1) + k * K) * row;
      out.insert(out.end(), first, first + row);
    }
  return out;
}

struct Compared {
  std::vector<KRuleResult> rules;
  std::vector<const std::vector<float>*> kernel;  // K per rule (for run agreement)
};

Compared compare(const std::string& label, const ScanCase& c, const RouteRun& run,
                 const ScanOutputs<float>& K, const ScanOutputs<double>& O,
                 const ScanOutputs<float>& P, const std::vector<ScanOutputs<double>>& E) {
  using mc::check::k_rule;
  using mc::check::kF32KLimit;
  using mc::check::kTypedKLimit;
  const DType dt = c.dtype;
  const double typed_limit = dt == DType::F32 ? kF32KLimit : kTypedKLimit;
  Compared out;
  using Field = std::vector<double> ScanOutputs<double>::*;
  const bool hw = run.exp == ExpMath::Hardware;
  auto add_stats = [&](KRuleResult& r, const std::vector<float>& k, const std::vector<double>& o,
                       const std::vector<float>& p, const std::vector<std::vector<double>>& ens,
                       DType t) {
    if (ens.empty()) return;
    std::vector<const double*> runs;
    for (const auto& e : ens) {
      if (e.size() != o.size()) return;
      runs.push_back(e.data());
    }
    r.stats = mc::check::stat_check(k.data(), o.data(), p.data(), runs, int64_t(o.size()));
    if (hw && t == DType::F32) {
      r.stats.enforced = false;
      r.stats.note = "hw exp at f32 level: outside the ensemble's class";
    }
  };
  auto ens_of = [&](Field f) {
    std::vector<std::vector<double>> v;
    for (const auto& e : E) v.push_back(e.*f);
    return v;
  };
  auto add = [&](const char* name, const std::vector<float>& k, const std::vector<double>& o,
                 const std::vector<float>& p, DType t, double lim, Field f) {
    out.rules.push_back(k_rule(name, k, o, p, t, lim));
    out.kernel.push_back(&k);
    if (f && k.size() == o.size() && p.size() == o.size())
      add_stats(out.rules.back(), k, o, p, ens_of(f), t);
  };
  add("y", K.y, O.y, P.y, dt, typed_limit, &ScanOutputs<double>::y);
  std::vector<double> O_saved;
  std::vector<float> P_saved;
  if (run.route == Route::Checkpointed) {
    const int64_t Kc = ckpt_chunk(c);
    O_saved = at_checkpoints(O.saved, c, Kc);
    P_saved = at_checkpoints(P.saved, c, Kc);
  } else {
    O_saved = O.saved;
    P_saved = P.saved;
  }
  if (O_saved.size() >= 16) {
    add("saved", K.saved, O_saved, P_saved, DType::F32, kF32KLimit, nullptr);
    std::vector<std::vector<double>> E_saved;
    for (const auto& e : E)
      E_saved.push_back(run.route == Route::Checkpointed ? at_checkpoints(e.saved, c, ckpt_chunk(c))
                                                         : e.saved);
    if (K.saved.size() == O_saved.size())
      add_stats(out.rules.back(), K.saved, O_saved, P_saved, E_saved, DType::F32);
  }
  using SO = ScanOutputs<double>;
  add("h_final", K.h_final, O.h_final, P.h_final, DType::F32, kF32KLimit, &SO::h_final);
  add("d_delta", K.d_delta, O.d_delta, P.d_delta, dt, typed_limit, &SO::d_delta);
  add("du", K.du, O.du, P.du, dt, typed_limit, &SO::du);
  if (c.gate) add("dz", K.dz, O.dz, P.dz, dt, typed_limit, &SO::dz);
  add("dB", K.dB, O.dB, P.dB, DType::F32, kF32KLimit, &SO::dB);
  add("dC", K.dC, O.dC, P.dC, DType::F32, kF32KLimit, &SO::dC);
  if (!c.no_skip) add("dD", K.dD, O.dD, P.dD, DType::F32, kF32KLimit, &SO::dD);
  add("dA_log", K.dA_log, O.dA_log, P.dA_log, DType::F32, kF32KLimit, &SO::dA_log);
  add("dh0", K.dh0, O.dh0, P.dh0, DType::F32, kF32KLimit, &SO::dh0);
  for (const auto& r : out.rules) {
    std::cout << "[scan " << label << "] " << r.summary()
              << (E.empty() ? " | stats: not computed (case above kStatMaxWork)" : "") << "\n";
    ::testing::Test::RecordProperty("k." + label + "." + r.tensor, std::to_string(r.k));
    EXPECT_EQ(r.kernel.nonfinite, 0) << label << " " << r.tensor << ": first non-finite at "
                                     << r.kernel.first_nonfinite;
    EXPECT_TRUE(r.verdict()) << label << " | " << r.summary();
  }
  return out;
}

// Both runs are within their bounds of O, so within the sum of the bounds of each other
// (for the tensors both produce; "saved" differs in meaning between routes).
void expect_runs_agree(const std::string& label, const Compared& a, const Compared& b) {
  for (size_t i = 0; i < a.rules.size(); ++i)
    for (size_t j = 0; j < b.rules.size(); ++j) {
      if (a.rules[i].tensor != b.rules[j].tensor || a.rules[i].tensor == "saved") continue;
      const std::vector<float>& x = *a.kernel[i];
      const std::vector<float>& y = *b.kernel[j];
      ASSERT_EQ(x.size(), y.size());
      double diff = 0;
      for (size_t e = 0; e < x.size(); ++e) diff = std::max(diff, std::fabs(double(x[e]) - y[e]));
      const double bound = a.rules[i].bound + b.rules[j].bound;
      EXPECT_LE(diff, bound) << label << " runs disagree on " << a.rules[i].tensor;
    }
}

// ---- the case list ------------------------------------------------------------------------
// B from the cycle, raised until every compared tensor has >= 16 elements
// (B·T·ds for dB/dC is the smallest), and lowered when the case would be huge.
ScanCase make_case(DType dt, int64_t T, int64_t ds, size_t i) {
  static const int64_t kDi[] = {17, 19, 21};
  ScanCase c;
  c.dtype = dt;
  c.T = T;
  c.ds = ds;
  c.di = kDi[i % 3];
  c.B = 1 + int64_t(i % 4);
  while (c.B * T * ds < 16) ++c.B;
  while (c.B > 1 && c.B * (T + 1) * c.di * ds > (int64_t(1) << 24)) --c.B;
  c.xdbl = (i % 2) == 1;
  c.seed = 1000 + i;
  return c;
}

std::vector<ScanCase> all_cases() {
  std::vector<ScanCase> cases;
  auto with = [&](ScanCase c, bool ScanCase::*flag) {
    c.*flag = true;
    c.seed = 1000 + cases.size();
    return c;
  };
#if defined(MC_SCAN_HOST_EMULATION)
  // the CPU emulation runs every thread as a fiber: small shapes only
  const int64_t Ts[] = {1, 2, 7, 17, 33, 70};
  const int64_t dss[] = {1, 5, 16, 64, 129};
  for (int64_t T : Ts)
    for (int64_t ds : dss) cases.push_back(make_case(DType::F32, T, ds, cases.size()));
  for (DType dt : {DType::BF16, DType::F16})
    for (int64_t ds : {16, 65}) cases.push_back(make_case(dt, 37, ds, cases.size()));
  for (DType dt : {DType::F32, DType::BF16}) {
    const ScanCase base = make_case(dt, 41, 16, cases.size());
    cases.push_back(with(base, &ScanCase::chained));
    cases.push_back(with(base, &ScanCase::softplus));
    cases.push_back(with(base, &ScanCase::gate));
    ScanCase all = with(with(with(with(base, &ScanCase::softplus), &ScanCase::gate),
                             &ScanCase::no_skip), &ScanCase::zero_h0);
    cases.push_back(all);
  }
  {  // several channel blocks, the last one partial
    ScanCase c = make_case(DType::F32, 23, 16, cases.size());
    c.di = 75;
    cases.push_back(c);
  }
#else
  const int64_t Ts[] = {1, 2, 7, 255, 256, 257, 1021, 1023, 1024, 1025, 3072};
  const int64_t dss[] = {1, 16, 63, 64, 65, 128, 256};
  for (int64_t T : Ts)
    for (int64_t ds : dss) cases.push_back(make_case(DType::F32, T, ds, cases.size()));
  // chunk boundaries: the checkpointed stride (16 or 8) and the chunked route's chunk
  for (int64_t ds : {4, 16, 129, 256}) {
    const int64_t ck = ckpt_chunk(make_case(DType::F32, 100, ds, 0));
    const int64_t ch =
        scan::geometry(scan::Shape{1, 1, 1, ds}, Route::Chunked, false).chunk;
    for (int64_t T : {ck - 1, ck, ck + 1, 2 * ck + 1, ch - 1, ch, ch + 1, 2 * ch + 1})
      cases.push_back(make_case(DType::F32, T, ds, cases.size()));
  }
  for (DType dt : {DType::BF16, DType::F16})
    for (int64_t T : {1, 257, 1025, 3072})
      for (int64_t ds : {16, 65, 256}) cases.push_back(make_case(dt, T, ds, cases.size()));
  // Wide channel counts: many channel blocks, odd di (the last block partial)
  struct Wide {
    DType dt;
    int64_t B, T, di, ds;
  };
  for (const Wide& w : {Wide{DType::F32, 2, 203, 1031, 16}, Wide{DType::F32, 1, 97, 4099, 64},
                        Wide{DType::F32, 2, 131, 4111, 5}, Wide{DType::BF16, 2, 61, 4111, 33}}) {
    ScanCase c;
    c.dtype = w.dt;
    c.B = w.B;
    c.T = w.T;
    c.di = w.di;
    c.ds = w.ds;
    c.xdbl = cases.size() % 2 == 1;
    c.seed = 1000 + cases.size();
    cases.push_back(c);
  }
  for (DType dt : {DType::F32, DType::BF16}) {
    cases.push_back(with(make_case(dt, 517, 16, cases.size()), &ScanCase::chained));
    cases.push_back(with(make_case(dt, 300, 96, cases.size()), &ScanCase::chained));
  }
  // fused epilogues (checkpointed route only), each alone and all together
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int64_t ds : {16, 256}) {
      const ScanCase base = make_case(dt, 1025, ds, cases.size());
      cases.push_back(with(base, &ScanCase::softplus));
      cases.push_back(with(base, &ScanCase::gate));
      cases.push_back(with(base, &ScanCase::no_skip));
      cases.push_back(with(base, &ScanCase::zero_h0));
      cases.push_back(with(with(with(with(with(base, &ScanCase::softplus), &ScanCase::gate),
                                     &ScanCase::no_skip), &ScanCase::zero_h0),
                           &ScanCase::chained));
    }
  // bf16/f16 on the (4, 16) plan (d_state 17-64), whose accurate-exp backward keeps each
  // step's dA in shared memory (ckpt_keeps_da); appended, so that the cases above keep their
  // names and seeds (scripts/sanitize.sh names some)
  for (DType dt : {DType::BF16, DType::F16})
    for (int64_t T : {257, 1025}) cases.push_back(make_case(dt, T, 48, cases.size()));
#endif
  return cases;
}

class ScanParity : public mc::testing::GpuTest, public ::testing::WithParamInterface<ScanCase> {};

template <class T>
void run_case(const ScanCase& c) {
  const ScanInputs in = make_inputs(c);
  const ScanOutputs<double> O = run_oracle<double>(in);
  const ScanOutputs<float> P = run_oracle<float>(in, c.dtype);
  const std::vector<ScanOutputs<double>> E = mca_ensemble(in);
  const std::vector<RouteRun> runs = runs_for(c);
  std::vector<ScanOutputs<float>> K;
  K.reserve(runs.size());
  std::vector<Compared> cmp;
  for (const RouteRun& r : runs) {
    K.push_back(run_gpu<T>(in, r));
    cmp.push_back(compare(c.name() + "." + r.name(), c, r, K.back(), O, P, E));
  }
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t j = i + 1; j < runs.size(); ++j)
      expect_runs_agree(c.name() + " " + runs[i].name() + " vs " + runs[j].name(), cmp[i], cmp[j]);
  // Forced pieces change the dA_log and dD sums only (scan.hpp, "Pieces of the backward"):
  // every other output has the bytes of the plan's run with the same exponential.
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].pieces == 0) continue;
    for (size_t j = 0; j < runs.size(); ++j) {
      if (runs[j].pieces != 0 || runs[j].cpt != runs[i].cpt || runs[j].exp != runs[i].exp ||
          runs[j].route != runs[i].route)
        continue;
      const std::string what = c.name() + " " + runs[i].name() + " vs " + runs[j].name();
      EXPECT_TRUE(bitwise_equal(K[i].d_delta, K[j].d_delta)) << what << ": d_delta";
      EXPECT_TRUE(bitwise_equal(K[i].du, K[j].du)) << what << ": du";
      EXPECT_TRUE(bitwise_equal(K[i].dz, K[j].dz)) << what << ": dz";
      EXPECT_TRUE(bitwise_equal(K[i].dB, K[j].dB)) << what << ": dB";
      EXPECT_TRUE(bitwise_equal(K[i].dC, K[j].dC)) << what << ": dC";
      EXPECT_TRUE(bitwise_equal(K[i].dh0, K[j].dh0)) << what << ": dh0";
      EXPECT_TRUE(bitwise_equal(K[i].y, K[j].y)) << what << ": y";
      // the forward's pieces (scan.hpp, "Pieces of the forward") change no bit
      EXPECT_TRUE(bitwise_equal(K[i].saved, K[j].saved)) << what << ": saved";
      EXPECT_TRUE(bitwise_equal(K[i].h_final, K[j].h_final)) << what << ": h_final";
    }
  }
}

TEST_P(ScanParity, MatchesOracle) {
  const ScanCase& c = GetParam();
  switch (c.dtype) {
    case DType::F32: run_case<float>(c); break;
    case DType::BF16: run_case<__nv_bfloat16>(c); break;
    case DType::F16: run_case<__half>(c); break;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ScanParity, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<ScanCase>& i) { return i.param.name(); });

#if !defined(MC_SCAN_HOST_EMULATION)
// ---- long sequence: 64-bit indexing ---------------------------------------------------------
// B·(T+1)·di·ds = 65537·640·64 ≈ 2.68e9 > 2^31: h_saved (cross-check routes), the
// element loop of every route and the dB/dC reduction index past 2^31 for late t
// (the checkpointed route's largest tensor is far smaller, but its per-element
// work spans the same range). Checked on sampled channels (b, d) against the
// oracle run on that channel alone (y, final state, d_delta, du, dh0, dD, dA_log
// are per channel when B = 1), and dC at sampled rows against Σ_d dy·h_t computed
// in double from the oracle's own f64 states of every channel... which would
// need the whole oracle: instead the cross-check routes' h_saved is used, within
// the rigorous f32 summation bound γ_{di+1}·Σ_d|dy·h| (γ_n = n·u/(1 − n·u)); the
// checkpointed route's dC must agree with the chunked route's within the sum of
// their summation bounds.
class ScanLongSequence : public mc::testing::GpuTest {};

template <class T>
std::vector<float> download_strided(const DeviceBuffer<T>& d, int64_t rows, int64_t pitch_elems,
                                    int64_t offset, int64_t width) {
  std::vector<T> tmp(size_t(rows * width));
  MC_CUDA_CHECK(cudaMemcpy2D(tmp.data(), size_t(width) * sizeof(T), d.get() + offset,
                             size_t(pitch_elems) * sizeof(T), size_t(width) * sizeof(T),
                             size_t(rows), cudaMemcpyDeviceToHost),
                "download_strided " + d.name());
  std::vector<float> out(tmp.size());
  for (size_t i = 0; i < tmp.size(); ++i) out[i] = from_elem(tmp[i]);
  return out;
}

template <class S>
void append_channel(ScanOutputs<S>& all, const ScanOutputs<S>& ch) {
  auto cat = [](std::vector<S>& dst, const std::vector<S>& src) {
    dst.insert(dst.end(), src.begin(), src.end());
  };
  cat(all.y, ch.y);
  cat(all.h_final, ch.h_final);
  cat(all.d_delta, ch.d_delta);
  cat(all.du, ch.du);
  cat(all.dD, ch.dD);
  cat(all.dA_log, ch.dA_log);
  cat(all.dh0, ch.dh0);
}

TEST_F(ScanLongSequence, T65536Beyond2Pow31) {
  const int64_t B = 1, T = 65536, di = 640, ds = 64;
  const scan::Shape sh{B, T, di, ds};
  const size_t hs_elems = size_t(B * (T + 1) * di * ds);
  ASSERT_GT(hs_elems, size_t(1) << 31);
  const size_t need = hs_elems * 4 + scan::bwd_workspace_bytes(sh, Route::Chunked) +
                      scan::bwd_workspace_bytes(sh, Route::Checkpointed) + (size_t(512) << 20);
  size_t free_b = 0, total_b = 0;
  MC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  if (free_b < need)
    GTEST_SKIP() << "needs " << need << " bytes of device memory, " << free_b << " free";

  ScanCase c;
  c.B = B;
  c.T = T;
  c.di = di;
  c.ds = ds;
  c.seed = 424242;
  const ScanInputs in = make_inputs(c);
  const std::vector<int64_t> sample_d = {0, 1, 333, di - 2, di - 1};
  const std::vector<int64_t> sample_t = {0, 1, T / 2 + 1, T - 1};

  ScanOutputs<double> O;
  ScanOutputs<float> P;
  for (int64_t d : sample_d) {
    ScanInputs sub;
    sub.c = c;
    sub.c.di = 1;
    for (int64_t t = 0; t < T; ++t) {
      sub.delta.push_back(in.delta[size_t(t * di + d)]);
      sub.u.push_back(in.u[size_t(t * di + d)]);
      sub.dy.push_back(in.dy[size_t(t * di + d)]);
    }
    sub.Bm = in.Bm;
    sub.Cm = in.Cm;
    sub.a_neg.assign(in.a_neg.begin() + d * ds, in.a_neg.begin() + (d + 1) * ds);
    sub.D = {in.D[size_t(d)]};
    sub.h0.assign(in.h0.begin() + d * ds, in.h0.begin() + (d + 1) * ds);
    sub.dD0 = {0.f};
    sub.dA_log0.assign(size_t(ds), 0.f);
    append_channel(O, run_oracle<double>(sub));
    append_channel(P, run_oracle<float>(sub));
  }

  DeviceBuffer<float> delta = upload<float>(in.delta, "delta"), u = upload<float>(in.u, "u"),
                      dy = upload<float>(in.dy, "dy"), Bm = upload<float>(in.Bm, "Bm"),
                      Cm = upload<float>(in.Cm, "Cm"), a = upload<float>(in.a_neg, "a_neg"),
                      D = upload<float>(in.D, "D"), h0 = upload<float>(in.h0, "h0");
  std::vector<float> dC_chunked;
  double dC_bound_chunked = 0;
  for (const RouteRun run : {RouteRun{Route::Chunked, ExpMath::Accurate}, RouteRun{Route::Sequential, ExpMath::Accurate},
                        RouteRun{Route::Checkpointed, ExpMath::Hardware}}) {
    const std::string mode = "T65536." + run.name();
    DeviceBuffer<float> saved(scan::saved_floats(sh, run.route), "saved");
    DeviceBuffer<char> ws(scan::bwd_workspace_bytes(sh, run.route), "workspace");
    DeviceBuffer<float> hf(in.h0.size(), "h_final"), y(in.delta.size(), "y"),
        d_delta(in.delta.size(), "d_delta"), du(in.delta.size(), "du"), dB(size_t(T * ds), "dB"),
        dC(size_t(T * ds), "dC"), dh0(in.h0.size(), "dh0");
    DeviceBuffer<float> dD(size_t(di), "dD"), dA(size_t(di * ds), "dA_log");
    dD.zero(kStream);
    dA.zero(kStream);
    fill_nan(y);
    fill_nan(saved);
    scan::FwdParams<float> f;
    f.shape = sh;
    f.route = run.route;
    f.exp = run.exp;
    f.delta = {delta.get(), 0};
    f.u = {u.get(), 0};
    f.Bm = {Bm.get(), 0};
    f.Cm = {Cm.get(), 0};
    f.a_neg = a.get();
    f.D = D.get();
    f.h0 = h0.get();
    f.h_final = hf.get();
    f.saved = saved.get();
    f.y = {y.get(), 0};
    scan::forward<float>(f, kStream);
    scan::BwdParams<float> b = scan::backward_of(f);
    b.dy = {dy.get(), 0};
    b.d_delta = {d_delta.get(), 0};
    b.du = {du.get(), 0};
    b.dB = {dB.get(), 0};
    b.dC = {dC.get(), 0};
    b.dD = dD.get();
    b.dA_log = dA.get();
    b.dh0 = dh0.get();
    b.workspace = ws.get();
    b.workspace_bytes = ws.bytes();
    scan::backward<float>(b, kStream);
    MC_CUDA_CHECK(cudaDeviceSynchronize(), mode);

    ScanOutputs<float> K;
    for (int64_t d : sample_d) {
      ScanOutputs<float> ch;
      ch.y = download_strided(y, T, di, d, 1);
      ch.h_final = download_strided(hf, 1, ds, d * ds, ds);
      ch.d_delta = download_strided(d_delta, T, di, d, 1);
      ch.du = download_strided(du, T, di, d, 1);
      ch.dD = download_strided(dD, 1, 1, d, 1);
      ch.dA_log = download_strided(dA, 1, ds, d * ds, ds);
      ch.dh0 = download_strided(dh0, 1, ds, d * ds, ds);
      append_channel(K, ch);
    }
    using mc::check::k_rule;
    const double lim = mc::check::kF32KLimit;
    const std::vector<KRuleResult> rules = {
        k_rule("y", K.y, O.y, P.y, DType::F32, lim),
        k_rule("h_final", K.h_final, O.h_final, P.h_final, DType::F32, lim),
        k_rule("d_delta", K.d_delta, O.d_delta, P.d_delta, DType::F32, lim),
        k_rule("du", K.du, O.du, P.du, DType::F32, lim),
        k_rule("dA_log", K.dA_log, O.dA_log, P.dA_log, DType::F32, lim),
        k_rule("dh0", K.dh0, O.dh0, P.dh0, DType::F32, lim)};
    for (const auto& r : rules) {
      std::cout << "[scan " << mode << "] " << r.summary() << "\n";
      RecordProperty("k." + mode + "." + r.tensor, std::to_string(r.k));
      EXPECT_EQ(r.kernel.nonfinite, 0) << mode << " " << r.tensor;
      EXPECT_TRUE(r.pass) << mode << " | " << r.summary();
    }
    // dD has one element per sampled channel: too few for the k-rule; plain bound instead.
    for (size_t i = 0; i < sample_d.size(); ++i) {
      const double err = std::fabs(double(K.dD[i]) - O.dD[i]);
      const double perr = std::fabs(double(P.dD[i]) - O.dD[i]);
      EXPECT_LE(err, lim * perr + 2 * mc::check::ulp_at(DType::F32, O.dD[i]) +
                         1e-6 * std::fabs(O.dD[i]))
          << mode << " dD[" << sample_d[i] << "]";
    }
    // dC rows through the reduction (index past 2^31 for late t on the cross-check routes)
    const std::vector<float> gdC = download(dC, size_t(T * ds));
    const double u32 = std::ldexp(1.0, -24);
    const double gamma = double(di + 1) * u32 / (1.0 - double(di + 1) * u32);
    if (run.route != Route::Checkpointed) {
      double bound_max = 0;
      for (int64_t t : sample_t) {
        const std::vector<float> hrow =
            download_strided(saved, 1, di * ds, (t + 1) * di * ds, di * ds);
        for (int64_t n = 0; n < ds; ++n) {
          double ref = 0, mag = 0;
          for (int64_t d = 0; d < di; ++d) {
            const double term = double(in.dy[size_t(t * di + d)]) * hrow[size_t(d * ds + n)];
            ref += term;
            mag += std::fabs(term);
          }
          EXPECT_LE(std::fabs(gdC[size_t(t * ds + n)] - ref), gamma * mag + 1e-30)
              << mode << " dC[t=" << t << ", n=" << n << "]";
          bound_max = std::max(bound_max, gamma * mag);
        }
      }
      if (run.route == Route::Chunked) {
        dC_chunked = gdC;
        dC_bound_chunked = bound_max;
      }
    } else {
      // against the chunked route's dC: both sum f32 terms of states that agree
      // with the oracle (checked above through y and dh0), so within the k-rule's
      // f32 bounds of dC on the rows the chunked check saw.
      ASSERT_EQ(dC_chunked.size(), gdC.size());
      for (int64_t t : sample_t)
        for (int64_t n = 0; n < ds; ++n) {
          const double diff = std::fabs(double(gdC[size_t(t * ds + n)]) -
                                        dC_chunked[size_t(t * ds + n)]);
          EXPECT_LE(diff, 2 * lim * dC_bound_chunked + 1e-6)
              << mode << " dC[t=" << t << ", n=" << n << "] vs chunked";
        }
    }
  }
}
#endif  // !MC_SCAN_HOST_EMULATION

// ---- refusals and contracts (no device needed) ------------------------------------------------
std::string refusal_message(const scan::Shape& s, Route r) {
  try {
    scan::check_shape(s, r);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// A well-formed f32 forward on dummy pointers, for refusal tests that must fail
// before anything is launched.
scan::FwdParams<float> dummy_fwd(float* x, scan::Shape sh, Route r) {
  scan::FwdParams<float> f;
  f.shape = sh;
  f.route = r;
  f.delta = {x, 0};
  f.u = {x, 0};
  f.Bm = {x, 0};
  f.Cm = {x, 0};
  f.a_neg = x;
  f.D = x;
  f.h0 = x;
  f.h_final = x;
  f.y = {x, 0};
  return f;
}

// A well-formed f32 backward on dummy pointers (inputs at `x`, dδ and du at out[0], out[1]:
// apart from their inputs, which the cross-check routes require; D and dD set), for refusal
// tests that must fail before anything is launched. No workspace.
scan::BwdParams<float> dummy_bwd(float* x, float (&out)[2], scan::Shape sh, Route r) {
  scan::BwdParams<float> b;
  b.shape = sh;
  b.route = r;
  b.delta = b.u = b.Bm = b.Cm = b.dy = {x, 0};
  b.a_neg = b.saved = b.D = x;
  b.d_delta = {&out[0], 0};
  b.du = {&out[1], 0};
  b.dA_log = b.dD = x;
  b.dB = b.dC = {x, 0};
  return b;
}

TEST(ScanRefusal, DStateLimitsPerRoute) {
  const std::string m = refusal_message(scan::Shape{1, 8, 4, 257}, Route::Checkpointed);
  EXPECT_TRUE(contains(m, "d_state = 257") && contains(m, "256")) << m;
  EXPECT_TRUE(contains(refusal_message(scan::Shape{1, 8, 4, 257}, Route::Chunked), "d_state = 257"));
  const std::string s = refusal_message(scan::Shape{2, 8, 4, 65}, Route::Sequential);
  EXPECT_TRUE(contains(s, "d_state = 65") && contains(s, "64") && contains(s, "sequential")) << s;
  EXPECT_EQ(refusal_message(scan::Shape{2, 8, 4, 65}, Route::Checkpointed), "");
  EXPECT_EQ(refusal_message(scan::Shape{2, 8, 4, 256}, Route::Checkpointed), "");
  float x = 0;
  EXPECT_THROW(scan::forward<float>(dummy_fwd(&x, {1, 8, 4, 257}, Route::Checkpointed), nullptr),
               ConfigError);
}

TEST(ScanRefusal, EveryFieldNamed) {
  struct Bad {
    scan::Shape s;
    const char* field;
    const char* value;
  };
  const Bad bad[] = {{{0, 8, 4, 16}, "batch", "0"},
                     {{1, 0, 4, 16}, "seq_len", "0"},
                     {{1, 8, 0, 16}, "d_inner", "0"},
                     {{1, 8, 65536, 16}, "d_inner", "65536"},
                     {{1, 8, 4, 0}, "d_state", "0"},
                     {{1, (int64_t(1) << 24) + 1, 4, 16}, "seq_len", "16777217"}};
  for (const Bad& b : bad)
    for (Route r : {Route::Checkpointed, Route::Chunked, Route::Sequential}) {
      const std::string m = refusal_message(b.s, r);
      EXPECT_TRUE(contains(m, std::string(b.field) + " = " + b.value))
          << scan::to_string(r) << " " << b.field << ": " << m;
    }
  float x = 0;
  scan::FwdParams<float> f = dummy_fwd(&x, {1, 8, 4, 16}, Route::Checkpointed);
  f.Bm.ld = 15;  // shorter than a row of d_state values
  try {
    scan::forward<float>(f, nullptr);
    ADD_FAILURE() << "Bm.ld 15 accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "Bm.ld = 15") && contains(e.what(), "16")) << e.what();
  }
  // channels per thread: 1..4, and above 1 (the tile plan) only at d_state <= 16
  struct BadTile {
    int64_t ds;
    int cpt;
    const char* want;
  };
  for (const BadTile& t : {BadTile{16, -1, "channels_per_thread = -1 violates channels_per_thread >= 1"},
                           BadTile{16, 5, "channels_per_thread = 5 violates channels_per_thread <= 4"},
                           BadTile{17, 3, "channels_per_thread = 3 violates channels_per_thread <= 1"}}) {
    scan::FwdParams<float> ft = dummy_fwd(&x, {1, 8, 4, t.ds}, Route::Checkpointed);
    ft.channels_per_thread = t.cpt;
    try {
      scan::forward<float>(ft, nullptr);
      ADD_FAILURE() << "channels_per_thread " << t.cpt << " accepted at d_state " << t.ds;
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), t.want)) << e.what();
    }
  }
}

TEST(ScanRefusal, NullPointerNamed) {
  float x = 0;
  scan::FwdParams<float> f = dummy_fwd(&x, {1, 8, 4, 16}, Route::Checkpointed);
  f.y = {nullptr, 0};
  try {
    scan::forward<float>(f, nullptr);
    ADD_FAILURE() << "null y accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "y is null")) << e.what();
  }
  float o[2] = {0, 0};
  scan::BwdParams<float> b = dummy_bwd(&x, o, {1, 8, 4, 16}, Route::Checkpointed);
  b.dD = nullptr;  // D set, dD missing
  try {
    scan::backward<float>(b, nullptr);
    ADD_FAILURE() << "D without dD accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "dD")) << e.what();
  }
}

TEST(ScanRefusal, CrossCheckRoutesNameWhatTheyLack) {
  float x = 0;
  for (Route r : {Route::Chunked, Route::Sequential}) {
    scan::FwdParams<float> f = dummy_fwd(&x, {1, 8, 4, 16}, r);
    f.z = {&x, 8};
    try {
      scan::forward<float>(f, nullptr);
      ADD_FAILURE() << "z accepted on " << scan::to_string(r);
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), scan::to_string(r)) && contains(e.what(), "gate"))
          << e.what();
    }
    f = dummy_fwd(&x, {1, 8, 4, 16}, r);
    f.delta.ld = 9;
    EXPECT_THROW(scan::forward<float>(f, nullptr), ConfigError) << scan::to_string(r);
  }
}

TEST(ScanRefusal, ShortWorkspaceNamed) {
  float x = 0, o[2] = {0, 0};
  scan::BwdParams<float> b = dummy_bwd(&x, o, {2, 100, 40, 16}, Route::Checkpointed);
  b.workspace = &x;
  b.workspace_bytes = 64;
  try {
    scan::backward<float>(b, nullptr);
    ADD_FAILURE() << "short workspace accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "workspace_bytes = 64")) << e.what();
  }
}

// BwdParams::pieces: negative, above 1 where the plan has no pieces (d_state above 16, the
// tile plan), and any value off the checkpointed route are refused, naming the field.
TEST(ScanRefusal, PiecesNamed) {
  float x = 0, o[2] = {0, 0};
  struct Bad {
    Route r;
    int64_t ds;
    int cpt;
    int64_t pieces;
    const char* want;
  };
  for (const Bad& t : {Bad{Route::Checkpointed, 16, 0, -1, "pieces = -1 violates pieces >= 0"},
                       Bad{Route::Checkpointed, 64, 0, 2, "pieces = 2 violates pieces <= 1"},
                       Bad{Route::Checkpointed, 16, 2, 3, "pieces = 3 violates pieces <= 1"},
                       Bad{Route::Chunked, 16, 0, 1, "pieces = 1 violates pieces == 0"}}) {
    scan::BwdParams<float> b = dummy_bwd(&x, o, {2, 100, 40, t.ds}, t.r);
    b.channels_per_thread = t.cpt;
    b.pieces = t.pieces;
    b.workspace = &x;
    b.workspace_bytes = size_t(1) << 40;
    try {
      scan::backward<float>(b, nullptr);
      ADD_FAILURE() << "pieces " << t.pieces << " accepted (" << t.want << ")";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), t.want)) << e.what();
    }
  }
  // FwdParams::pieces: the same two limits, and above 1 where the forward has no pieces
  // (saved null, grouped saves, the whole-state layout); refused before any launch
  struct BadFwd {
    Route r;
    int64_t ds;
    int cpt;
    int64_t pieces, group;
    bool saves;
    scan::FwdLayout layout;
    const char* want;
  };
  const scan::FwdLayout lanes = scan::FwdLayout::Auto, whole = scan::FwdLayout::WholeState;
  for (const BadFwd& t :
       {BadFwd{Route::Checkpointed, 16, 0, -1, 1, true, lanes, "pieces = -1 violates pieces >= 0"},
        BadFwd{Route::Checkpointed, 64, 0, 2, 1, true, lanes, "pieces = 2 violates pieces <= 1"},
        BadFwd{Route::Checkpointed, 16, 2, 3, 1, true, lanes, "pieces = 3 violates pieces <= 1"},
        BadFwd{Route::Checkpointed, 16, 0, 2, 1, false, lanes, "saved is null"},
        BadFwd{Route::Checkpointed, 16, 0, 2, 2, true, lanes, "checkpoint_group 1"},
        BadFwd{Route::Checkpointed, 16, 0, 2, 1, true, whole, "pieces = 2 violates pieces <= 1"},
        BadFwd{Route::Chunked, 16, 0, 1, 1, true, lanes, "pieces = 1 violates pieces == 0"}}) {
    scan::FwdParams<float> f = dummy_fwd(&x, {2, 100, 40, t.ds}, t.r);
    f.channels_per_thread = t.cpt;
    f.pieces = t.pieces;
    f.checkpoint_group = t.group;
    f.layout = t.layout;
    f.saved = t.saves ? &x : nullptr;
    try {
      scan::forward<float>(f, nullptr);
      ADD_FAILURE() << "forward pieces " << t.pieces << " accepted (" << t.want << ")";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), t.want) && contains(e.what(), "pieces")) << e.what();
    }
  }
  // a count above the chunks acts as the chunks: one chunk a piece
  const scan::Geometry g = scan::geometry(scan::Shape{1, 100, 17, 16}, Route::Checkpointed, true,
                                          0, 0, 1, scan::FwdLayout::Auto, 1000);
  EXPECT_EQ(g.pieces, g.n_ckpt);
  EXPECT_EQ(g.piece_chunks, 1);
}

// An output written over an input (`pair`: "<out> aliases <in>") is refused on the
// cross-check routes, naming the pair and the route, and on the checkpointed route when
// `other_stride` gives the output another row stride than its input.
void expect_in_place_refused(scan::BwdParams<float> b, const std::string& pair,
                             const std::function<void(scan::BwdParams<float>&)>& other_stride) {
  for (Route r : {Route::Chunked, Route::Sequential}) {
    b.route = r;
    try {
      scan::backward<float>(b, nullptr);
      ADD_FAILURE() << pair << " accepted on " << scan::to_string(r);
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), pair) && contains(e.what(), scan::to_string(r))) << e.what();
    }
  }
  b.route = Route::Checkpointed;
  other_stride(b);
  try {
    scan::backward<float>(b, nullptr);
    ADD_FAILURE() << pair << " with another row stride accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), pair + " with a different row stride")) << e.what();
  }
}

// d_delta may be delta itself, and du may be dy itself, on the checkpointed route only,
// and only over the same rows.
TEST(ScanRefusal, GradientsOverTheirInputsNamed) {
  float x = 0, y = 0, w = 0;
  scan::BwdParams<float> b;
  b.shape = {1, 8, 4, 16};
  b.delta = b.u = b.Bm = b.Cm = b.dy = {&x, 0};
  b.a_neg = b.saved = b.D = b.dD = &x;
  b.d_delta = {&x, 0};
  b.du = {&w, 0};
  b.dA_log = &x;
  b.dB = b.dC = {&x, 0};
  expect_in_place_refused(b, "d_delta aliases delta",
                          [](scan::BwdParams<float>& p) { p.d_delta.ld = 5; });
  b.d_delta = {&w, 0};  // not over delta this time
  b.dy = {&y, 0};
  b.du = {&y, 0};
  expect_in_place_refused(b, "du aliases dy", [](scan::BwdParams<float>& p) { p.du.ld = 5; });
}

TEST(ScanContract, CheckpointedGeometryCoversEveryDState) {
  for (int64_t ds = 1; ds <= mc::Limits::kMaxDState; ++ds)
    for (bool bwd : {false, true}) {
      const scan::Shape sh{3, 1000, 77, ds};
      const scan::Geometry g = scan::geometry(sh, Route::Checkpointed, bwd);
      EXPECT_EQ(g.threads % 32, 0) << ds << ": whole warps";
      EXPECT_EQ(g.lanes & (g.lanes - 1), 0) << ds << ": lanes a power of two";
      EXPECT_LE(g.lanes, 32) << ds << ": a channel within one warp";
      EXPECT_GE(int64_t(g.lanes) * g.states, ds) << ds << ": every state held";
      // the compiled (lanes, states) configurations, the smallest that holds ds
      const int want_lanes = ds <= 16 ? 4 : (ds <= 64 ? 16 : 32);
      EXPECT_EQ(g.lanes, want_lanes) << ds;
      EXPECT_EQ(g.states, ds <= 128 ? 4 : 8) << ds;
      EXPECT_GE(g.channels_per_thread, 1) << ds;
      EXPECT_LE(g.channels_per_thread, ds <= 16 ? 4 : 1) << ds;
      EXPECT_EQ(g.channels_per_block * g.lanes, g.threads * g.channels_per_thread) << ds;
      EXPECT_EQ(g.blocks, 3 * ((77 + g.channels_per_block - 1) / g.channels_per_block)) << ds;
      EXPECT_EQ(g.n_ckpt, (1000 + g.chunk - 1) / g.chunk) << ds;
      // launchable on sm_90 (227 KiB per block); three one-channel blocks per SM fit up
      // to d_state 16 (Mamba's), two up to d_state 128
      EXPECT_LE(g.smem_bytes, size_t(227) << 10) << ds;
      if (ds <= 16 && g.channels_per_thread == 1) {
        EXPECT_LE(g.smem_bytes, size_t(75) << 10) << ds << ": three blocks per SM";
      }
      if (ds <= 128) {
        EXPECT_LE(g.smem_bytes, size_t(113) << 10) << ds << ": two blocks per SM";
      }
      if (bwd && ds > 16 && ds <= 64) {  // the accurate exp's backward keeps every step's dA
        const size_t keep_da = size_t(g.chunk) * size_t(g.threads) * size_t(g.states) * 4;
        EXPECT_LE(g.smem_bytes + keep_da, size_t(113) << 10)
            << ds << ": two blocks per SM, its launch bounds, with dA kept";
      }
      EXPECT_EQ(scan::saved_floats(sh, Route::Checkpointed), size_t(3 * g.n_ckpt * 77 * ds)) << ds;
    }
}

// The tile plan's choice of channels per thread (d_state <= 16): the one that fills 132
// SMs with the fewest issue slots on the busiest (host.cu), and a forced value wins; the
// checkpoint stride, and so the saved layout, does not depend on it.
TEST(ScanContract, TilePlanChannelsPerThread) {
  auto cpt = [](int64_t B, int64_t di, int64_t ds, int force = 0) {
    return scan::geometry(scan::Shape{B, 2048, di, ds}, Route::Checkpointed, true, 0, force)
        .channels_per_thread;
  };
  // the plan's own choice (host.cu): the forward one channel a thread; the backward the
  // plan with fewer waves of 132 SMs, a tile wave (128-channel blocks, 1 an SM) counted as
  // 1.27 one-channel waves (32-channel blocks, 3 an SM)
  auto fwd_cpt = [](int64_t B, int64_t di) {
    return scan::geometry(scan::Shape{B, 2048, di, 16}, Route::Checkpointed, false)
        .channels_per_thread;
  };
  // one-channel blocks (waves) against tile blocks (waves)
  EXPECT_EQ(cpt(8, 1536, 16), 1);   // 384 (1) against 96 (1)
  EXPECT_EQ(cpt(8, 1600, 16), 4);   // 400 (2) against 104 (1)
  EXPECT_EQ(cpt(8, 2048, 16), 4);   // 512 (2) against 128 (1)
  EXPECT_EQ(cpt(12, 1536, 16), 1);  // 576 (2) against 144 (2)
  EXPECT_EQ(cpt(16, 1536, 16), 1);  // 768 (2) against 192 (2)
  EXPECT_EQ(cpt(8, 3072, 16), 1);   // 768 (2) against 192 (2)
  EXPECT_EQ(cpt(8, 4096, 16), 4);   // 1024 (3) against 256 (2)
  EXPECT_EQ(cpt(32, 1536, 16), 4);  // 1536 (4) against 384 (3)
  EXPECT_EQ(cpt(8, 4352, 16), 1);   // 1088 (3) against 272 (3)
  EXPECT_EQ(cpt(1, 4096, 16), 1);   // 128 (1) against 32 (1)
  EXPECT_EQ(cpt(8, 4096, 17), 1);   // the tile plan serves d_state <= 16 only
  EXPECT_EQ(fwd_cpt(8, 4096), 1);
  EXPECT_EQ(cpt(8, 1536, 256), 1);
  EXPECT_EQ(cpt(8, 1536, 256, 1), 1);  // forcing one channel is allowed at any d_state
  for (int f : {2, 3, 4}) {
    const scan::Geometry g =
        scan::geometry(scan::Shape{8, 2048, 1536, 16}, Route::Checkpointed, false, 0, f);
    EXPECT_EQ(g.channels_per_thread, f);
    EXPECT_EQ(g.channels_per_block, 32 * f);
    EXPECT_EQ(g.chunk, 16);
    EXPECT_EQ(g.blocks, 8 * ((1536 + 32 * f - 1) / (32 * f)));
  }
}

TEST(ScanContract, TrafficModel) {
  const scan::Shape s{3, 100, 24, 16};
  const size_t BT = 300, di = 24, ds = 16;
  const scan::Traffic f2 = scan::forward_traffic(s, Route::Checkpointed, 2, false);
  EXPECT_EQ(f2.min_bytes, 3 * BT * di * 2 + 2 * BT * ds * 2 + 4 * (2 * 3 * di * ds + di * ds + di));
  EXPECT_EQ(f2.route_bytes, 0u);
  EXPECT_EQ(scan::forward_traffic(s, Route::Chunked, 4, true).route_bytes, 4 * 3 * 101 * di * ds);
  // the saved checkpoints; the plan's forward has one piece (scan.hpp, "Pieces of the
  // forward"), so no state pass: the one recurrence
  const scan::Geometry g = scan::geometry(s, Route::Checkpointed, false);
  ASSERT_EQ(g.pieces, 1);
  const scan::Traffic f4 = scan::forward_traffic(s, Route::Checkpointed, 4, true);
  EXPECT_EQ(f4.route_bytes, 4 * 3 * size_t(g.n_ckpt) * di * ds);
  EXPECT_DOUBLE_EQ(f4.exps, double(BT * di * ds));
  EXPECT_DOUBLE_EQ(f2.exps, double(BT * di * ds));
  const scan::Traffic b4 = scan::backward_traffic(s, Route::Checkpointed, 4);
  EXPECT_EQ(b4.min_bytes, 5 * BT * di * 4 + 2 * BT * ds * 4 + 8 * BT * ds + 4 * (3 * di * ds + 3 * di));
  // two recurrences (the chunk's states, then dA walking back), and the carry pass of the
  // parallel pieces (3 blocks: 7 pieces of one chunk) over all chunks but the first piece's
  const scan::Geometry gb = scan::geometry(s, Route::Checkpointed, true);
  ASSERT_TRUE(gb.parallel_pieces);
  EXPECT_DOUBLE_EQ(b4.exps, (2.0 + double(gb.n_ckpt - gb.piece_chunks) / double(gb.n_ckpt)) *
                                double(BT * di * ds));
  EXPECT_GT(b4.route_bytes, 4 * 3 * size_t(g.n_ckpt) * di * ds);
  EXPECT_GE(scan::bwd_workspace_bytes(s, Route::Checkpointed),
            2 * BT * size_t(scan::geometry(s, Route::Checkpointed, true).reduce_groups) * ds * 4);
}

// The backward's segments: one launch while the partials fit the budget, whole chunks
// per segment otherwise (at least one), and the workspace holds one segment's partials.
// The bits do not depend on the segments: run_gpu runs every checkpointed case in
// segments of 1 and 2 chunks as well.
TEST(ScanContract, BackwardSegments) {
  const scan::Shape head{8, 2048, 1536, 16}, wide{8, 2048, 1536, 256};
  const scan::Geometry h = scan::geometry(head, Route::Checkpointed, true);
  EXPECT_EQ(h.segments, 1);
  EXPECT_EQ(h.segment_chunks, h.n_ckpt);
  const scan::Geometry w = scan::geometry(wide, Route::Checkpointed, true);
  const size_t chunk_bytes = 2 * 8 * size_t(w.chunk) * size_t(w.reduce_groups) * 256 * 4;
  EXPECT_EQ(w.segment_chunks, int64_t(scan::kDefaultPartialBudget / chunk_bytes));
  EXPECT_EQ(w.segments, (w.n_ckpt + w.segment_chunks - 1) / w.segment_chunks);
  EXPECT_GT(w.segments, 1);
  // checkpoints plus workspace: the d_state 256 case's scan memory stays under 4 GiB
  const size_t wide_bytes = 4 * scan::saved_floats(wide, Route::Checkpointed) +
                            scan::bwd_workspace_bytes(wide, Route::Checkpointed);
  EXPECT_LE(wide_bytes, size_t(4) << 30) << wide_bytes;
  EXPECT_LE(scan::bwd_workspace_bytes(wide, Route::Checkpointed),
            scan::kDefaultPartialBudget + (size_t(64) << 20));
  // a budget below one chunk still runs: one chunk per segment
  const scan::Geometry one = scan::geometry(head, Route::Checkpointed, true, 1);
  EXPECT_EQ(one.segment_chunks, 1);
  EXPECT_EQ(one.segments, one.n_ckpt);
  EXPECT_LT(scan::bwd_workspace_bytes(head, Route::Checkpointed, 1),
            scan::bwd_workspace_bytes(head, Route::Checkpointed));
}

// Pieces of the backward (scan.hpp): a pure function of the shape. Where the one-channel
// backward at d_state <= 16 has blocks for less than half of the 3 x 132 slots, its chunks are cut into
// about 396 / blocks pieces, walked in parallel in one launch after the carry pass when
// all their partials fit the budget, one after the other otherwise; the workspace holds a
// dA_log / dD partial per piece and, in parallel, the carry pass's states. The bits do not
// depend on how the pieces run: run_gpu compares one launch with segments of 1 and 2
// chunks, the grouped backward and the other layout on every test shape, all with pieces.
// Pieces of the forward (scan.hpp): in whole stages of 32 steps (2 chunks), for a forward
// that saves every chunk's state with the lane-group plan; the plan takes them with 2-byte
// storage only (host.cu, fwd_pieces_by_default), and forced counts (FwdParams::pieces) run
// them with either. The bits do not depend on them: run_gpu holds a forward with two forced
// pieces to the plan's y, checkpoints and final state, byte for byte, and to the forward
// that saves nothing.
TEST(ScanContract, ForwardPieces) {
  const auto fwd = [](scan::Shape s, int64_t pieces, int elem_bytes = 4) {
    return scan::geometry(s, Route::Checkpointed, false, 0, 0, 1, scan::FwdLayout::Auto, pieces,
                          elem_bytes);
  };
  const scan::Shape b2{2, 2048, 1536, 16}, b1{1, 2048, 1536, 16}, b4{4, 2048, 1536, 16};
  {  // f32 storage: one piece at every B; no state pass in the traffic model
    EXPECT_EQ(fwd(scan::Shape{8, 2048, 1536, 16}, 0).pieces, 1);
    const scan::Geometry g = fwd(b2, 0);
    EXPECT_EQ(g.blocks, 96);
    EXPECT_EQ(g.pieces, 1);
    EXPECT_FALSE(g.parallel_pieces);
    EXPECT_EQ(fwd(b1, 0).pieces, 1);
    EXPECT_DOUBLE_EQ(scan::forward_traffic(b2, Route::Checkpointed, 4, true).exps,
                     1.0 * 2 * 2048 * 1536 * 16);
  }
  {  // 2-byte storage: about 396 / blocks pieces where the grid is under 198 blocks (B 1: 8,
     // B 2: 4, B 4: 2 of 192 blocks), none at B 8 (384 blocks)
    EXPECT_EQ(fwd(scan::Shape{8, 2048, 1536, 16}, 0, 2).pieces, 1);
    EXPECT_EQ(fwd(b1, 0, 2).pieces, 8);
    EXPECT_EQ(fwd(b4, 0, 2).pieces, 2);
    const scan::Geometry g = fwd(b2, 0, 2);
    EXPECT_EQ(g.pieces, 4);
    EXPECT_EQ(g.piece_chunks, 32);
    EXPECT_TRUE(g.parallel_pieces);
    // the state pass in the traffic model: the recurrence once more over 3 of the 4 pieces,
    // reading their δ, u (d_inner columns) and B (d_state columns) in 2-byte storage
    const scan::Traffic t = scan::forward_traffic(b2, Route::Checkpointed, 2, true);
    const scan::Traffic t1 = scan::forward_traffic(b2, Route::Checkpointed, 4, true);
    EXPECT_DOUBLE_EQ(t.exps, 1.75 * 2 * 2048 * 1536 * 16);
    EXPECT_EQ(t.route_bytes - t1.route_bytes,
              size_t(0.75 * 2 * 2048 * (2 * 1536 + 16) * 2));
    // without saved states (the inference forward) nothing to start the pieces from
    EXPECT_DOUBLE_EQ(scan::forward_traffic(b2, Route::Checkpointed, 2, false).exps,
                     1.0 * 2 * 2048 * 1536 * 16);
    // an element size that is no storage's is refused, naming it, in either direction
    EXPECT_THROW(fwd(b2, 0, 3), ConfigError);
    EXPECT_THROW(
        scan::geometry(b2, Route::Checkpointed, true, 0, 0, 1, scan::FwdLayout::Auto, 0, 3),
        ConfigError);
  }
  {  // B 2 forced 4: pieces of 16 stages (32 chunks), one launch of 4 x 96 blocks
    const scan::Geometry g = fwd(b2, 4);
    EXPECT_EQ(g.pieces, 4);
    EXPECT_EQ(g.piece_chunks, 32);
    EXPECT_TRUE(g.parallel_pieces);
  }
  {  // B 1 forced 8: pieces of 8 stages
    const scan::Geometry g = fwd(b1, 8);
    EXPECT_EQ(g.pieces, 8);
    EXPECT_EQ(g.piece_chunks, 16);
  }
  {  // forced 3: 3 pieces of ceil(64 / 3) = 22 stages; 1 = one walk
    const scan::Geometry g = fwd(b2, 3);
    EXPECT_EQ(g.pieces, 3);
    EXPECT_EQ(g.piece_chunks, 44);
    EXPECT_EQ(fwd(b2, 1).pieces, 1);
  }
  {  // a one-stage sequence has one piece whatever the count; a count above the stages acts
     // as the stages, one a piece; the other plans refuse a count above 1
     // (ScanRefusal.PiecesNamed)
    EXPECT_EQ(fwd(scan::Shape{1, 32, 17, 16}, 4).pieces, 1);
    const scan::Geometry g = fwd(scan::Shape{1, 100, 17, 16}, 1000);
    EXPECT_EQ(g.pieces, 4);
    EXPECT_EQ(g.piece_chunks, 2);
  }
}

TEST(ScanContract, BackwardPieces) {
  const size_t plane = size_t(1536) * 16 * 4;  // one sample's states, bytes
  {  // B 8, d_inner 1536: 384 blocks, one wave: one piece, as before
    const scan::Geometry g = scan::geometry(scan::Shape{8, 2048, 1536, 16}, Route::Checkpointed, true);
    EXPECT_EQ(g.pieces, 1);
    EXPECT_EQ(g.piece_chunks, g.n_ckpt);
    EXPECT_FALSE(g.parallel_pieces);
  }
  const scan::Shape b2{2, 2048, 1536, 16}, b1{1, 2048, 1536, 16};
  {  // B 2: 96 blocks -> 4 pieces of 32 chunks, one launch of 384 blocks
    const scan::Geometry g = scan::geometry(b2, Route::Checkpointed, true);
    EXPECT_EQ(g.blocks, 96);
    EXPECT_EQ(g.pieces, 4);
    EXPECT_EQ(g.piece_chunks, 32);
    EXPECT_TRUE(g.parallel_pieces);
    EXPECT_EQ(g.segments, 1);
    // the partials of every piece's rows, a dA_log / dD partial per piece, 3 pieces' carries
    const size_t ws = scan::bwd_workspace_bytes(b2, Route::Checkpointed);
    const size_t rows = 2 * size_t(2) * 2048 * size_t(g.reduce_groups) * 16 * 4;
    EXPECT_GE(ws, rows + 2 * 4 * plane + 2 * 3 * 2 * plane);
    EXPECT_LE(ws, rows + 2 * 4 * plane + 2 * 3 * 2 * plane + 2 * 4 * 1536 * 4 + 6 * 256);
    // the carry pass in the traffic model: one more recurrence over 3 of the 4 pieces
    EXPECT_DOUBLE_EQ(scan::backward_traffic(b2, Route::Checkpointed, 4).exps,
                     (2.0 + 0.75) * 2 * 2048 * 1536 * 16);
  }
  {  // B 1: 48 blocks -> 8 pieces of 16 chunks
    const scan::Geometry g = scan::geometry(b1, Route::Checkpointed, true);
    EXPECT_EQ(g.pieces, 8);
    EXPECT_EQ(g.piece_chunks, 16);
  }
  {  // a budget of one chunk: the same pieces, one after the other, one chunk a launch
    const scan::Geometry g = scan::geometry(b2, Route::Checkpointed, true, 1);
    EXPECT_EQ(g.pieces, 4);
    EXPECT_FALSE(g.parallel_pieces);
    EXPECT_EQ(g.segments, g.n_ckpt);
  }
  {  // grouped checkpoints: the same pieces, walked group by group; segments cut at both edges
    const scan::Geometry g = scan::geometry(b2, Route::Checkpointed, true, 0, 0, 24);
    EXPECT_EQ(g.pieces, 4);
    EXPECT_FALSE(g.parallel_pieces);
    // group edges 24, 48, 72, 96, 120 and piece edges 32, 64, 96 cut the 128 chunks into
    // [0,24) [24,32) [32,48) [48,64) [64,72) [72,96) [96,120) [120,128)
    EXPECT_EQ(g.segments, 8);
  }
  {  // the tile plan keeps one piece; so does a one-chunk sequence
    const scan::Geometry t = scan::geometry(b2, Route::Checkpointed, true, 0, 4);
    EXPECT_EQ(t.pieces, 1);
    const scan::Geometry one = scan::geometry(scan::Shape{1, 16, 17, 16}, Route::Checkpointed, true);
    EXPECT_EQ(one.n_ckpt, 1);
    EXPECT_EQ(one.pieces, 1);
  }
  {  // the layouts have the same pieces (their bits are compared)
    const scan::Geometry w = scan::geometry(b2, Route::Checkpointed, true, 0, 0, 1,
                                            scan::FwdLayout::WholeState);
    EXPECT_EQ(w.pieces, 4);
    EXPECT_EQ(w.piece_chunks, 32);
  }
  {  // the plans above d_state 16 keep one piece (compiled without them): d_state 256 at
     // B 1, d_inner 64 has 16 blocks
    const scan::Geometry g = scan::geometry(scan::Shape{1, 1024, 64, 256}, Route::Checkpointed, true);
    EXPECT_EQ(g.blocks, 16);
    EXPECT_EQ(g.pieces, 1);
  }
}

// Grouped checkpoints (scan.hpp): the saved states shrink G-fold, the backward walks one
// group per refill in segments that never cross a group's edge, its workspace holds one
// group's chunk states, and max_checkpoint_group is the largest group that fits. The
// bits do not depend on the group: run_gpu runs every checkpointed case with G = 2, 3
// and one group as well.
TEST(ScanContract, GroupedCheckpoints) {
  const scan::Shape head{8, 2048, 1536, 16};
  const scan::Geometry dense = scan::geometry(head, Route::Checkpointed, true);
  const size_t plane = size_t(8) * 1536 * 16;  // one state of every (b, d, n)
  EXPECT_EQ(dense.n_saved, dense.n_ckpt);
  EXPECT_EQ(dense.refills, 0);
  EXPECT_EQ(scan::saved_floats(head, Route::Checkpointed), plane * size_t(dense.n_ckpt));
  for (int64_t G : {int64_t(2), int64_t(5), int64_t(64), dense.n_ckpt, dense.n_ckpt + 7}) {
    const int64_t Gc = std::min(G, dense.n_ckpt), groups = (dense.n_ckpt + Gc - 1) / Gc;
    const scan::Geometry g = scan::geometry(head, Route::Checkpointed, true, 0, 0, G);
    EXPECT_EQ(g.checkpoint_group, Gc) << G;
    EXPECT_EQ(g.n_saved, groups) << G;
    EXPECT_EQ(g.refills, groups) << G;
    EXPECT_EQ(g.segments, groups) << G;  // the default budget holds a whole group's partials
    EXPECT_EQ(scan::saved_floats(head, Route::Checkpointed, G), plane * size_t(groups)) << G;
    // one group's chunk states on top of the dense workspace (no carries at G = n_ckpt)
    const size_t ws = scan::bwd_workspace_bytes(head, Route::Checkpointed, 0, 0, G);
    EXPECT_GE(ws, plane * 4 * size_t(Gc)) << G;
    // in segments of one chunk: a group of Gc chunks is Gc segments
    const scan::Geometry one = scan::geometry(head, Route::Checkpointed, true, 1, 0, G);
    EXPECT_EQ(one.segments, dense.n_ckpt) << G;
  }
  {  // segments never cross a group's edge: groups of 5 chunks in segments of 2 -> 3 each
    const size_t two_chunks = 2 * 8 * size_t(dense.chunk) * size_t(dense.reduce_groups) * 16 * 4 * 2;
    const scan::Geometry g = scan::geometry(head, Route::Checkpointed, true, two_chunks, 0, 5);
    EXPECT_EQ(g.segment_chunks, 2);
    const int64_t full = dense.n_ckpt / 5, tail = dense.n_ckpt % 5;
    EXPECT_EQ(g.segments, full * 3 + (tail + 1) / 2);
  }
  // the largest group whose workspace (a group's partials as its segment) fits
  for (size_t bytes : {size_t(8) << 20, size_t(100) << 20, size_t(1) << 30}) {
    const int64_t G = scan::max_checkpoint_group(head, Route::Checkpointed, bytes);
    auto ws = [&](int64_t g) {
      return scan::bwd_workspace_bytes(head, Route::Checkpointed,
                                       scan::group_partial_budget(head, Route::Checkpointed, g),
                                       0, g);
    };
    ASSERT_GE(G, 2) << bytes;
    EXPECT_LE(ws(G), bytes) << bytes;
    if (G < dense.n_ckpt) {
      EXPECT_GT(ws(G + 1), bytes) << bytes;
    }
    EXPECT_EQ(scan::geometry(head, Route::Checkpointed, true,
                             scan::group_partial_budget(head, Route::Checkpointed, G), 0, G)
                  .segments,
              (dense.n_ckpt + G - 1) / G)
        << bytes;
  }
  EXPECT_EQ(scan::max_checkpoint_group(head, Route::Checkpointed, 1024), 1);
  EXPECT_EQ(scan::max_checkpoint_group(head, Route::Chunked, size_t(1) << 30), 1);
  // the refill's extra pass in the traffic model: one more recurrence of exponentials
  EXPECT_EQ(scan::backward_traffic(head, Route::Checkpointed, 4, 8).exps,
            scan::backward_traffic(head, Route::Checkpointed, 4).exps + 8.0 * 2048 * 1536 * 16);
  EXPECT_LT(scan::forward_traffic(head, Route::Checkpointed, 4, true, 8).route_bytes,
            scan::forward_traffic(head, Route::Checkpointed, 4, true).route_bytes / 7);
}

// The thread layout at d_state <= 16 (scan::FwdLayout): the plan keeps the lane groups
// (the whole-state layout measured slower, host.cu), a forced layout wins, and neither the
// checkpoint stride nor the saved layout nor the partials depend on it.
TEST(ScanContract, WholeStateLayout) {
  using scan::FwdLayout;
  const scan::Shape head{8, 2048, 1536, 16};
  EXPECT_EQ(scan::geometry(head, Route::Checkpointed, false).lanes, 4);
  EXPECT_EQ(scan::geometry(head, Route::Checkpointed, true).lanes, 4);
  const scan::Geometry w =
      scan::geometry(head, Route::Checkpointed, false, 0, 0, 1, FwdLayout::WholeState);
  EXPECT_EQ(w.lanes, 1);
  EXPECT_EQ(w.states, 16);
  EXPECT_EQ(w.threads, 32);
  EXPECT_EQ(w.channels_per_thread, 1);
  EXPECT_EQ(w.channels_per_block, 32);
  EXPECT_EQ(w.blocks, 8 * 1536 / 32);
  const scan::Geometry l =
      scan::geometry(head, Route::Checkpointed, false, 0, 0, 1, FwdLayout::LaneGroups);
  EXPECT_EQ(l.lanes, 4);
  EXPECT_EQ(l.states, 4);
  EXPECT_EQ(w.chunk, l.chunk);
  EXPECT_EQ(w.n_ckpt, l.n_ckpt);
  EXPECT_LE(w.smem_bytes, size_t(75) << 10) << "three blocks per SM";
  // the backward has both layouts too, with the same chunk and channel blocks (so the same
  // partials and workspace); where its plan takes the tile plan, Auto keeps it
  const scan::Geometry bw =
      scan::geometry(head, Route::Checkpointed, true, 0, 0, 1, FwdLayout::WholeState);
  const scan::Geometry bl = scan::geometry(head, Route::Checkpointed, true);
  EXPECT_EQ(bw.lanes, 1);
  EXPECT_EQ(bw.states, 16);
  EXPECT_EQ(bl.lanes, 4);
  EXPECT_EQ(bw.reduce_groups, bl.reduce_groups);
  EXPECT_EQ(bw.chunk, bl.chunk);
  EXPECT_EQ(scan::bwd_workspace_bytes(head, Route::Checkpointed),
            size_t(scan::bwd_workspace_bytes(head, Route::Checkpointed, 0, 1)));
  EXPECT_LE(bw.smem_bytes, size_t(75) << 10) << "three backward blocks per SM";
  EXPECT_EQ(scan::geometry({8, 2048, 2048, 16}, Route::Checkpointed, true).channels_per_thread, 4);
  // forced whole-state anywhere at d_state <= 16, one channel a thread
  for (int64_t ds : {1, 7, 12, 16}) {
    const scan::Shape sh{2, 100, 45, ds};
    const scan::Geometry g = scan::geometry(sh, Route::Checkpointed, false, 0, 1, 1, FwdLayout::WholeState);
    EXPECT_EQ(g.lanes, 1) << ds;
    EXPECT_EQ(g.blocks, 2 * 2) << ds;
    EXPECT_EQ(g.n_ckpt, scan::geometry(sh, Route::Checkpointed, false).n_ckpt) << ds;
  }
  // the tile plan, when forced, is not affected by the layout's default
  EXPECT_EQ(scan::geometry(head, Route::Checkpointed, false, 0, 3).channels_per_thread, 3);
}

TEST(ScanRefusal, WholeStateLayoutNamed) {
  float x = 0;
  struct Bad {
    int64_t ds;
    int cpt;
    const char* want;
  };
  for (const Bad& t : {Bad{17, 0, "d_state = 17 violates d_state <= 16"},
                       Bad{16, 2, "channels_per_thread = 2 violates channels_per_thread <= 1"}}) {
    scan::FwdParams<float> f = dummy_fwd(&x, {1, 64, 4, t.ds}, Route::Checkpointed);
    f.layout = scan::FwdLayout::WholeState;
    f.channels_per_thread = t.cpt;
    try {
      scan::forward<float>(f, nullptr);
      ADD_FAILURE() << "whole-state accepted at d_state " << t.ds << ", cpt " << t.cpt;
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), t.want)) << e.what();
      EXPECT_TRUE(contains(e.what(), "whole-state")) << e.what();
    }
  }
}

TEST(ScanRefusal, CheckpointGroupNamed) {
  float x = 0;
  const std::pair<Route, int64_t> bad[] = {{Route::Checkpointed, 0}, {Route::Checkpointed, -3},
                                           {Route::Chunked, 2}, {Route::Sequential, 4}};
  for (const auto& [r, G] : bad) {
    scan::FwdParams<float> f = dummy_fwd(&x, {1, 64, 4, 16}, r);
    f.checkpoint_group = G;
    const std::string want = "checkpoint_group = " + std::to_string(G) + " violates";
    try {
      scan::forward<float>(f, nullptr);
      ADD_FAILURE() << "checkpoint_group " << G << " accepted on " << scan::to_string(r);
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), want)) << e.what();
    }
    EXPECT_THROW(scan::saved_floats(f.shape, r, G), ConfigError) << scan::to_string(r) << " " << G;
    EXPECT_THROW(scan::bwd_workspace_bytes(f.shape, r, 0, 0, G), ConfigError)
        << scan::to_string(r) << " " << G;
  }
}

// The kernels' accurate exp (exp_math.cuh) is host/device code: checked here on
// the CPU against double-precision exp on every 61st float of [-104, 89]
// (MC_SCAN_EXP_STRIDE=1 checks every float of the range: ~1 min on 2 cores).
// Bounds from its construction: one final round-to-nearest (0.5 ulp) plus
// < 0.15 ulp from the polynomial, the r² and tail roundings -> 0.65 ulp for
// normal results; subnormal results round twice (the scaling), -> 1 ulp.
// Unbiased: over [-87, 0] (the scan's range, δ·A <= 0) its mean signed error
// equals that of the correctly rounded exp to within 0.005 ulp (a biased exp —
// e.g. 1 ulp too large on 1% of inputs — would shift it by 0.01).
TEST(ScanExp, AccurateAndUnbiased) {
  using mc::kern::scan_detail::scan_expf;
  auto ulp_of = [](double v) {
    int e;
    std::frexp(v, &e);
    return std::max(std::ldexp(1.0, e - 24), std::ldexp(1.0, -149));
  };
  double max_normal = 0, max_sub = 0, sum_signed = 0, sum_signed_rn = 0;
  int64_t n_signed = 0;
  float worst = 0;
  const char* stride_env = std::getenv("MC_SCAN_EXP_STRIDE");
  const int stride_asked = stride_env ? std::atoi(stride_env) : 0;
  const uint32_t stride = stride_asked > 0 ? uint32_t(stride_asked) : 61u;
  for (uint32_t sign : {0u, 0x80000000u}) {
    const float lim = sign ? -104.0f : 89.0f;
    uint32_t last;
    std::memcpy(&last, &lim, 4);
    for (uint32_t bits = sign; bits <= last; bits += stride) {
      float x;
      std::memcpy(&x, &bits, 4);
      const double ref = std::exp(double(x));
      if (!std::isfinite(float(ref))) continue;  // overflows: checked below
      const double err = (double(scan_expf(x)) - ref) / ulp_of(ref);
      if (ref >= double(std::numeric_limits<float>::min())) {
        if (std::fabs(err) > max_normal) max_normal = std::fabs(err), worst = x;
        if (x <= 0 && x >= -87.0f) {
          sum_signed += err;
          sum_signed_rn += (double(float(ref)) - ref) / ulp_of(ref);
          ++n_signed;
        }
      } else {
        max_sub = std::max(max_sub, std::fabs(err));
      }
    }
  }
  std::cout << "[scan_expf] max " << max_normal << " ulp (normal, at x = " << worst << "), "
            << max_sub << " ulp (subnormal), mean signed " << sum_signed / n_signed
            << " ulp (correctly rounded: " << sum_signed_rn / n_signed << ") over " << n_signed
            << " x in [-87, 0] (float stride " << stride << ")\n";
  RecordProperty("scan_expf.max_ulp", std::to_string(max_normal));
  EXPECT_LE(max_normal, 0.65);
  EXPECT_LE(max_sub, 1.0);
  EXPECT_LT(std::fabs(sum_signed - sum_signed_rn) / double(n_signed), 0.005);
  EXPECT_EQ(scan_expf(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(scan_expf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(scan_expf(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(scan_expf(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(scan_expf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(scan_expf(-104.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(scan_expf(88.72f)));  // just below the overflow threshold
}

}  // namespace
