// ctest-labels: gpu
// ctest-timeout: 1500
// test_scan_parity.cpp — the selective-scan kernels (kernels/scan.cuh),
// sequential and chunked-parallel, forward and backward, f32/bf16/f16, against
// the CPU oracle ref::selective_scan_fwd/bwd.
//
// Rule (compare.hpp): K = GPU kernel, O = oracle in double on the same inputs,
// P = oracle in float on the same inputs (the same-precision baseline; for
// bf16/f16 the inputs δ, u, B, C, dy are quantised once and P's typed outputs
// y, d_delta, du are rounded to the dtype, like the kernel's RN stores):
//   pass  <=>  max|K − O| <= k_limit · max|P − O| + atol   (atol = 2 ulp at max|O|)
// k_limit = kF32KLimit for f32 tensors, kTypedKLimit for typed outputs. Every
// measured k is printed and recorded (RecordProperty "k.<mode>.<tensor>").
// Sequential and parallel results must also agree with each other within the
// sum of their two bounds (triangle inequality).
//
// Cases: T in {1, 2, 7, 255, 256, 257, 1021 (prime), 1023, 1024, 1025, 3072}
// plus chunk-1/chunk/chunk+1/2·chunk+1 of the parallel geometry; d_state in
// {1, 16, 63, 64, 65, 128, 256}; odd d_inner (17..21, and 1031..4111 so the
// parallel backward groups 2/4/8 channels per block); B 1..4 (more when a tensor would
// have < 16 elements — the k-rule needs >= 16, model_check.hpp); non-zero
// initial states; Bm/Cm either contiguous or strided views into an xdbl-like
// buffer (ld_bc = dr + 2·ds); dD and dA_log accumulated onto non-zero values.
// Also per case: the nosave forward is bitwise equal to the save forward, the
// backward is bitwise reproducible and dh0 = nullptr changes nothing else,
// outputs are pre-filled with NaN so an unwritten element fails. A T = 65536
// case with B·(T+1)·di·ds > 2^31 checks 64-bit indexing on sampled channels.
// Refusals (d_state 257 parallel, 65 sequential, other bad fields) need no
// device and run everywhere.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "core/config.hpp"
#include "kernels/cuda_check.hpp"
#include "gpu/device_buffer.hpp"
#include "validation/support/gpu_test.hpp"
#include "check/problem.hpp"
#include "kernels/scan.cuh"
#include "kernels/scan_math.cuh"
#include "reference_cpu/steps.hpp"
#include "core/storage.hpp"

namespace {

using mc::ConfigError;
using mc::DType;
using mc::check::KRuleResult;
using mc::gpu::DeviceBuffer;
using mc::kern::ScanShape;

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

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<__nv_bfloat16>() {
  return DType::BF16;
}
template <>
constexpr DType dtype_of<__half>() {
  return DType::F16;
}

cudaStream_t kStream = nullptr;  // the legacy default stream: every call below is ordered

template <class T>
DeviceBuffer<T> upload(const std::vector<float>& host, const std::string& name) {
  std::vector<T> tmp(host.size());
  for (size_t i = 0; i < host.size(); ++i) tmp[i] = to_elem<T>(host[i]);
  DeviceBuffer<T> d(host.size(), name);
  d.upload(tmp.data(), tmp.size(), kStream);
  return d;
}

template <class T>
std::vector<float> download(const DeviceBuffer<T>& d) {
  std::vector<T> tmp(d.size());
  d.download(tmp.data(), tmp.size(), kStream);
  std::vector<float> out(tmp.size());
  for (size_t i = 0; i < tmp.size(); ++i) out[i] = from_elem(tmp[i]);
  return out;
}

// All-ones bytes: NaN for f32, bf16 and f16 alike — an element a kernel fails to
// write is caught by the non-finite count of the comparison.
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
  bool xdbl = false;     // Bm/Cm strided views into one [B*T, dr + 2ds] buffer
  bool chained = false;  // upstream gradient w.r.t. the final state (scan_bwd_chained)
  uint64_t seed = 1;
  std::string name() const {
    std::ostringstream os;
    os << mc::to_string(dtype) << "_T" << T << "_ds" << ds << "_B" << B << "_di" << di
       << (xdbl ? "_xdbl" : "") << (chained ? "_chained" : "");
    return os.str();
  }
};

void PrintTo(const ScanCase& c, std::ostream* os) { *os << c.name(); }

constexpr int64_t kXdblDr = 3;  // dt_rank columns in front of B|C in the xdbl layout

// Inputs as the GPU sees them (floats quantised to the dtype where the GPU stores typed).
struct ScanInputs {
  ScanShape s;
  DType dtype;
  std::vector<float> delta, u, dy;  // [B, T, di] typed
  std::vector<float> bc;            // xdbl: [B*T, ld_bc] holding B at kXdblDr, C at kXdblDr+ds
  std::vector<float> Bm, Cm;        // contiguous [B*T, ds] typed (the oracle's layout)
  std::vector<float> a_neg;         // [di, ds]
  std::vector<float> D;             // [di]
  std::vector<float> h0;            // [B, di, ds]
  std::vector<float> dh_final;      // [B, di, ds] (chained cases) or empty
  std::vector<float> dD0, dA_log0;  // accumulator start values
  bool xdbl = false;
};

float quantise(DType t, double x) { return mc::round_to(t, float(x)); }

ScanInputs make_inputs(const ScanCase& c) {
  ScanInputs in;
  in.dtype = c.dtype;
  in.xdbl = c.xdbl;
  const int64_t ld = c.xdbl ? kXdblDr + 2 * c.ds : c.ds;
  in.s = ScanShape{c.B, c.T, c.di, c.ds, ld};
  const int64_t nact = c.B * c.T * c.di, nrow = c.B * c.T;
  mc::check::SplitMix64 rng(c.seed * 0x9e3779b97f4a7c15ULL + 12345);
  // δ = softplus(r), r ~ U(-7, 0): δ in (1e-3, 0.69) — long memory for small |A|,
  // fast decay for large |A| (A[d, n] ≈ -(n+1)).
  in.delta.resize(size_t(nact));
  in.u.resize(size_t(nact));
  in.dy.resize(size_t(nact));
  for (int64_t i = 0; i < nact; ++i) {
    const double r = rng.uniform(-7.0, 0.0);
    in.delta[size_t(i)] = quantise(c.dtype, std::log1p(std::exp(r)));
    in.u[size_t(i)] = quantise(c.dtype, rng.uniform(-2.0, 2.0));
    in.dy[size_t(i)] = quantise(c.dtype, rng.uniform(-1.0, 1.0));
  }
  in.Bm.resize(size_t(nrow * c.ds));
  in.Cm.resize(size_t(nrow * c.ds));
  for (auto& x : in.Bm) x = quantise(c.dtype, rng.uniform(-1.0, 1.0));
  for (auto& x : in.Cm) x = quantise(c.dtype, rng.uniform(-1.0, 1.0));
  if (c.xdbl) {
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
  for (auto& x : in.D) x = float(rng.uniform(0.5, 1.5));
  in.h0.resize(size_t(c.B * c.di * c.ds));
  for (auto& x : in.h0) x = float(rng.uniform(-1.0, 1.0));
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
template <class S>
struct ScanOutputs {
  std::vector<S> y, h_saved, h_final, d_delta, du, dB, dC, dD, dA_log, dh0;
};

template <class S>
std::vector<S> as(const std::vector<float>& v) {
  return std::vector<S>(v.begin(), v.end());
}

template <class S>
ScanOutputs<S> run_oracle(const ScanInputs& in) {
  const ScanShape& s = in.s;
  ScanOutputs<S> o;
  const auto delta = as<S>(in.delta), u = as<S>(in.u), dy = as<S>(in.dy);
  const auto Bm = as<S>(in.Bm), Cm = as<S>(in.Cm), a = as<S>(in.a_neg), D = as<S>(in.D);
  o.h_final = as<S>(in.h0);
  o.h_saved.resize(size_t(s.B * (s.T + 1) * s.di * s.ds));
  o.y.resize(size_t(s.B * s.T * s.di));
  mc::ref::selective_scan_fwd<S>(delta.data(), u.data(), Bm.data(), Cm.data(), a.data(), D.data(),
                                 s.B, s.T, s.di, s.ds, o.h_final.data(), o.h_saved.data(),
                                 o.y.data());
  o.d_delta.resize(o.y.size());
  o.du.resize(o.y.size());
  o.dB.resize(size_t(s.B * s.T * s.ds));
  o.dC.resize(o.dB.size());
  o.dD = as<S>(in.dD0);
  o.dA_log = as<S>(in.dA_log0);
  o.dh0.resize(o.h_final.size());
  const auto dhT = as<S>(in.dh_final);
  mc::ref::selective_scan_bwd_chained<S>(
      delta.data(), u.data(), Bm.data(), Cm.data(), a.data(), D.data(), o.h_saved.data(),
      dy.data(), dhT.empty() ? nullptr : dhT.data(), s.B, s.T, s.di, s.ds, o.d_delta.data(),
      o.du.data(), o.dB.data(), o.dC.data(), o.dD.data(), o.dA_log.data(), o.dh0.data());
  return o;
}

// The kernel under test, plus the checks that need no oracle (recorded as failures).
template <class T>
ScanOutputs<float> run_gpu(const ScanInputs& in, bool parallel) {
  const ScanShape& s = in.s;
  const std::string mode = parallel ? "parallel" : "sequential";
  DeviceBuffer<T> delta = upload<T>(in.delta, "delta"), u = upload<T>(in.u, "u"),
                  dy = upload<T>(in.dy, "dy");
  DeviceBuffer<T> bc, Bm, Cm;
  const T *Bp, *Cp;
  if (in.xdbl) {
    bc = upload<T>(in.bc, "xdbl");
    Bp = bc.get() + kXdblDr;
    Cp = bc.get() + kXdblDr + s.ds;
  } else {
    Bm = upload<T>(in.Bm, "Bm");
    Cm = upload<T>(in.Cm, "Cm");
    Bp = Bm.get();
    Cp = Cm.get();
  }
  DeviceBuffer<float> a = upload<float>(in.a_neg, "a_neg"), D = upload<float>(in.D, "D");
  DeviceBuffer<float> h = upload<float>(in.h0, "h");
  DeviceBuffer<float> hs(size_t(s.B * (s.T + 1) * s.di * s.ds), "h_saved");
  DeviceBuffer<T> y(in.delta.size(), "y");
  fill_nan(hs);
  fill_nan(y);

  ScanOutputs<float> o;
  mc::kern::scan_fwd<T>(parallel, s, delta.get(), u.get(), Bp, Cp, a.get(), D.get(), h.get(),
                        hs.get(), y.get(), kStream);
  o.y = download(y);
  o.h_saved = download(hs);
  o.h_final = download(h);

  {  // nosave twin: same arithmetic, so bitwise the same y and final state
    DeviceBuffer<float> h2 = upload<float>(in.h0, "h (nosave)");
    DeviceBuffer<T> y2(in.delta.size(), "y (nosave)");
    fill_nan(y2);
    mc::kern::scan_fwd<T>(parallel, s, delta.get(), u.get(), Bp, Cp, a.get(), D.get(), h2.get(),
                          nullptr, y2.get(), kStream);
    EXPECT_TRUE(bitwise_equal(download(y2), o.y)) << mode << ": nosave y differs from save y";
    EXPECT_TRUE(bitwise_equal(download(h2), o.h_final))
        << mode << ": nosave final state differs from save final state";
  }

  DeviceBuffer<float> dhT;
  if (!in.dh_final.empty()) dhT = upload<float>(in.dh_final, "dh_final");
  DeviceBuffer<T> d_delta(in.delta.size(), "d_delta"), du(in.delta.size(), "du");
  DeviceBuffer<float> dB(size_t(s.B * s.T * s.ds), "dB"), dC(size_t(s.B * s.T * s.ds), "dC");
  DeviceBuffer<float> dD = upload<float>(in.dD0, "dD"), dA = upload<float>(in.dA_log0, "dA_log");
  DeviceBuffer<float> dh0(in.h0.size(), "dh0");
  DeviceBuffer<char> scratch(mc::kern::scan_bwd_scratch_bytes(s), "scan scratch");
  auto run_bwd = [&](float* dh0_ptr) {
    fill_nan(d_delta);
    fill_nan(du);
    fill_nan(dB);
    fill_nan(dC);
    fill_nan(dh0);
    fill_nan(scratch);
    mc::kern::scan_bwd_chained<T>(parallel, s, delta.get(), u.get(), Bp, Cp, a.get(), D.get(),
                                  hs.get(), dy.get(), dhT.get(), d_delta.get(), du.get(),
                                  dB.get(), dC.get(), dD.get(), dA.get(), dh0_ptr, scratch.get(),
                                  kStream);
  };
  run_bwd(dh0.get());
  o.d_delta = download(d_delta);
  o.du = download(du);
  o.dB = download(dB);
  o.dC = download(dC);
  o.dD = download(dD);
  o.dA_log = download(dA);
  o.dh0 = download(dh0);

  // Second run without dh0 (accumulators reset): bitwise the same everything else.
  dD.upload(in.dD0.data(), in.dD0.size(), kStream);
  dA.upload(in.dA_log0.data(), in.dA_log0.size(), kStream);
  run_bwd(nullptr);
  EXPECT_TRUE(bitwise_equal(download(d_delta), o.d_delta)) << mode << ": d_delta not reproducible";
  EXPECT_TRUE(bitwise_equal(download(du), o.du)) << mode << ": du not reproducible";
  EXPECT_TRUE(bitwise_equal(download(dB), o.dB)) << mode << ": dB not reproducible";
  EXPECT_TRUE(bitwise_equal(download(dC), o.dC)) << mode << ": dC not reproducible";
  EXPECT_TRUE(bitwise_equal(download(dD), o.dD)) << mode << ": dD not reproducible";
  EXPECT_TRUE(bitwise_equal(download(dA), o.dA_log)) << mode << ": dA_log not reproducible";
  MC_CUDA_CHECK(cudaDeviceSynchronize(), "scan parity " + mode);
  return o;
}

// ---- comparison -------------------------------------------------------------------------
std::vector<float> rounded(const std::vector<float>& v, DType t) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = mc::round_to(t, v[i]);
  return r;
}

struct Compared {
  std::vector<KRuleResult> rules;
  std::vector<const std::vector<float>*> kernel;  // K per rule (for seq/par agreement)
};

Compared compare(const std::string& label, const ScanOutputs<float>& K,
                 const ScanOutputs<double>& O, const ScanOutputs<float>& P, DType dtype) {
  using mc::check::k_rule;
  using mc::check::kF32KLimit;
  using mc::check::kTypedKLimit;
  const double typed_limit = dtype == DType::F32 ? kF32KLimit : kTypedKLimit;
  Compared c;
  auto add = [&](const char* name, const std::vector<float>& k, const std::vector<double>& o,
                 const std::vector<float>& p, DType t, double lim) {
    c.rules.push_back(k_rule(name, k, o, p, t, lim));
    c.kernel.push_back(&k);
  };
  // typed outputs: P rounded like the kernel's RN store; f32 outputs: P as is
  add("y", K.y, O.y, rounded(P.y, dtype), dtype, typed_limit);
  add("h_saved", K.h_saved, O.h_saved, P.h_saved, DType::F32, kF32KLimit);
  add("h_final", K.h_final, O.h_final, P.h_final, DType::F32, kF32KLimit);
  add("d_delta", K.d_delta, O.d_delta, rounded(P.d_delta, dtype), dtype, typed_limit);
  add("du", K.du, O.du, rounded(P.du, dtype), dtype, typed_limit);
  add("dB", K.dB, O.dB, P.dB, DType::F32, kF32KLimit);
  add("dC", K.dC, O.dC, P.dC, DType::F32, kF32KLimit);
  add("dD", K.dD, O.dD, P.dD, DType::F32, kF32KLimit);
  add("dA_log", K.dA_log, O.dA_log, P.dA_log, DType::F32, kF32KLimit);
  add("dh0", K.dh0, O.dh0, P.dh0, DType::F32, kF32KLimit);
  for (const auto& r : c.rules) {
    std::cout << "[scan " << label << "] " << r.summary() << "\n";
    ::testing::Test::RecordProperty("k." + label + "." + r.tensor, std::to_string(r.k));
    EXPECT_EQ(r.kernel.nonfinite, 0) << label << " " << r.tensor << ": first non-finite at "
                                     << r.kernel.first_nonfinite;
    EXPECT_TRUE(r.pass) << label << " | " << r.summary();
  }
  return c;
}

// Both kernels are within their bounds of O, so within the sum of the bounds of each other.
void expect_modes_agree(const std::string& label, const Compared& seq, const Compared& par) {
  ASSERT_EQ(seq.rules.size(), par.rules.size());
  for (size_t i = 0; i < seq.rules.size(); ++i) {
    const std::vector<float>& a = *seq.kernel[i];
    const std::vector<float>& b = *par.kernel[i];
    ASSERT_EQ(a.size(), b.size());
    double diff = 0;
    for (size_t j = 0; j < a.size(); ++j) diff = std::max(diff, std::fabs(double(a[j]) - b[j]));
    const double bound = seq.rules[i].bound + par.rules[i].bound;
    std::cout << "[scan " << label << "] seq-vs-par " << seq.rules[i].tensor
              << ": max|seq-par| = " << diff << " <= " << bound << "\n";
    EXPECT_LE(diff, bound) << label << " seq vs par " << seq.rules[i].tensor;
  }
}

// ---- the case list ------------------------------------------------------------------------
int64_t parallel_chunk(int64_t ds) {
  return mc::kern::scan_geometry(ScanShape{1, 1, 1, ds, ds}, true, false).chunk;
}

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
  const int64_t Ts[] = {1, 2, 7, 255, 256, 257, 1021, 1023, 1024, 1025, 3072};
  const int64_t dss[] = {1, 16, 63, 64, 65, 128, 256};
  for (int64_t T : Ts)
    for (int64_t ds : dss) cases.push_back(make_case(DType::F32, T, ds, cases.size()));
  // chunk boundaries of the parallel geometry (several lane widths)
  for (int64_t ds : {4, 16, 64, 256}) {
    const int64_t ch = parallel_chunk(ds);
    for (int64_t T : {ch - 1, ch, ch + 1, 2 * ch + 1})
      cases.push_back(make_case(DType::F32, T, ds, cases.size()));
  }
  for (DType dt : {DType::BF16, DType::F16})
    for (int64_t T : {1, 257, 1025, 3072})
      for (int64_t ds : {16, 65, 256}) cases.push_back(make_case(dt, T, ds, cases.size()));
  // Wide channel counts: the parallel backward then runs 2, 4 or 8 consecutive
  // channels per block and sums their dB/dC terms in shared memory (odd di:
  // the last group is partial).
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
    ScanCase c = make_case(dt, 517, 16, cases.size());
    c.chained = true;
    cases.push_back(c);
    c = make_case(dt, 300, 96, cases.size());
    c.chained = true;
    cases.push_back(c);
  }
  return cases;
}

class ScanParity : public mc::testing::GpuTest, public ::testing::WithParamInterface<ScanCase> {};

template <class T>
void run_case(const ScanCase& c) {
  const ScanInputs in = make_inputs(c);
  const ScanOutputs<double> O = run_oracle<double>(in);
  const ScanOutputs<float> P = run_oracle<float>(in);
  const ScanOutputs<float> Kpar = run_gpu<T>(in, true);
  const Compared par = compare(c.name() + ".parallel", Kpar, O, P, c.dtype);
  if (c.ds <= mc::Limits::kMaxSeqScanDState) {
    const ScanOutputs<float> Kseq = run_gpu<T>(in, false);
    const Compared seq = compare(c.name() + ".sequential", Kseq, O, P, c.dtype);
    expect_modes_agree(c.name(), seq, par);
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

// ---- long sequence: 64-bit indexing ---------------------------------------------------------
// B·(T+1)·di·ds = 65537·640·64 ≈ 2.68e9 > 2^31: h_saved, the dB/dC partials and
// their reduction index past 2^31. Checked on sampled channels (b, d) against
// the oracle run on that channel alone (y, h_saved, final state, d_delta, du,
// dh0, dD, dA_log are per channel when B = 1), and dC at sampled rows against
// Σ_d dy·h_saved computed in double from the kernel's own h_saved, within the
// rigorous f32 summation bound γ_{di+1}·Σ_d|dy·h| (γ_n = n·u/(1 − n·u)).
class ScanLongSequence : public mc::testing::GpuTest {};

// rows x width elements starting at `offset`, rows `pitch` elements apart.
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

// Appends one channel's per-channel outputs (dB/dC are sums over all channels: not per channel).
template <class S>
void append_channel(ScanOutputs<S>& all, const ScanOutputs<S>& ch) {
  auto cat = [](std::vector<S>& dst, const std::vector<S>& src) {
    dst.insert(dst.end(), src.begin(), src.end());
  };
  cat(all.y, ch.y);
  cat(all.h_saved, ch.h_saved);
  cat(all.h_final, ch.h_final);
  cat(all.d_delta, ch.d_delta);
  cat(all.du, ch.du);
  cat(all.dD, ch.dD);
  cat(all.dA_log, ch.dA_log);
  cat(all.dh0, ch.dh0);
}

TEST_F(ScanLongSequence, T65536Beyond2Pow31) {
  const int64_t B = 1, T = 65536, di = 640, ds = 64;
  const ScanShape s{B, T, di, ds, ds};
  const size_t hs_elems = size_t(B * (T + 1) * di * ds);
  ASSERT_GT(hs_elems, size_t(1) << 31);
  const size_t need = hs_elems * 4 + mc::kern::scan_bwd_scratch_bytes(s) + (size_t(64) << 20);
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

  // Oracle per sampled channel (di = 1 sub-problem with the same B/C rows).
  ScanOutputs<double> O;
  ScanOutputs<float> P;
  for (int64_t d : sample_d) {
    ScanInputs sub;
    sub.s = ScanShape{B, T, 1, ds, ds};
    sub.dtype = DType::F32;
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
                      D = upload<float>(in.D, "D");
  DeviceBuffer<float> hs(hs_elems, "h_saved");
  DeviceBuffer<char> scratch(mc::kern::scan_bwd_scratch_bytes(s), "scan scratch");
  for (bool parallel : {true, false}) {
    const std::string mode = std::string("T65536.") + (parallel ? "parallel" : "sequential");
    DeviceBuffer<float> h = upload<float>(in.h0, "h");
    DeviceBuffer<float> y(in.delta.size(), "y"), d_delta(in.delta.size(), "d_delta"),
        du(in.delta.size(), "du"), dB(size_t(T * ds), "dB"), dC(size_t(T * ds), "dC"),
        dh0(in.h0.size(), "dh0");
    DeviceBuffer<float> dD(size_t(di), "dD"), dA(size_t(di * ds), "dA_log");
    dD.zero(kStream);
    dA.zero(kStream);
    fill_nan(y);
    fill_nan(hs);
    mc::kern::scan_fwd<float>(parallel, s, delta.get(), u.get(), Bm.get(), Cm.get(), a.get(),
                              D.get(), h.get(), hs.get(), y.get(), kStream);
    mc::kern::scan_bwd<float>(parallel, s, delta.get(), u.get(), Bm.get(), Cm.get(), a.get(),
                              D.get(), hs.get(), dy.get(), d_delta.get(), du.get(), dB.get(),
                              dC.get(), dD.get(), dA.get(), dh0.get(), scratch.get(), kStream);
    MC_CUDA_CHECK(cudaDeviceSynchronize(), mode);

    ScanOutputs<float> K;
    for (int64_t d : sample_d) {
      ScanOutputs<float> ch;
      ch.y = download_strided(y, T, di, d, 1);
      ch.h_saved = download_strided(hs, T + 1, di * ds, d * ds, ds);
      ch.h_final = download_strided(h, 1, ds, d * ds, ds);
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
        k_rule("h_saved", K.h_saved, O.h_saved, P.h_saved, DType::F32, lim),
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
    // dC rows through the reduction kernel (index past 2^31 for late t).
    const std::vector<float> gdC = download(dC);
    const double u32 = std::ldexp(1.0, -24);
    const double gamma = double(di + 1) * u32 / (1.0 - double(di + 1) * u32);
    for (int64_t t : sample_t) {
      const std::vector<float> hrow = download_strided(hs, 1, di * ds, (t + 1) * di * ds, di * ds);
      for (int64_t n = 0; n < ds; ++n) {
        double ref = 0, mag = 0;
        for (int64_t d = 0; d < di; ++d) {
          const double term = double(in.dy[size_t(t * di + d)]) * hrow[size_t(d * ds + n)];
          ref += term;
          mag += std::fabs(term);
        }
        EXPECT_LE(std::fabs(gdC[size_t(t * ds + n)] - ref), gamma * mag + 1e-30)
            << mode << " dC[t=" << t << ", n=" << n << "]";
      }
    }
  }
}

// ---- refusals and contracts (no device needed) ------------------------------------------------
std::string refusal_message(const ScanShape& s, bool parallel) {
  try {
    mc::kern::check_scan_shape(s, parallel);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

TEST(ScanRefusal, ParallelDState257) {
  const ScanShape s{1, 8, 4, 257, 257};
  const std::string m = refusal_message(s, true);
  EXPECT_TRUE(contains(m, "d_state = 257") && contains(m, "256")) << m;
  float dummy = 0;
  EXPECT_THROW(mc::kern::scan_fwd<float>(true, s, &dummy, &dummy, &dummy, &dummy, &dummy, &dummy,
                                         &dummy, &dummy, &dummy, nullptr),
               ConfigError);
  EXPECT_THROW(mc::kern::scan_bwd<float>(true, s, &dummy, &dummy, &dummy, &dummy, &dummy, &dummy,
                                         &dummy, &dummy, &dummy, &dummy, &dummy, &dummy, &dummy,
                                         &dummy, &dummy, &dummy, nullptr),
               ConfigError);
}

TEST(ScanRefusal, SequentialDState65) {
  const ScanShape s{2, 8, 4, 65, 65};
  const std::string m = refusal_message(s, false);
  EXPECT_TRUE(contains(m, "d_state = 65") && contains(m, "64") && contains(m, "sequential")) << m;
  EXPECT_EQ(refusal_message(s, true), "") << "the parallel scan must accept d_state 65";
  float dummy = 0;
  EXPECT_THROW(mc::kern::scan_fwd<float>(false, s, &dummy, &dummy, &dummy, &dummy, &dummy, &dummy,
                                         &dummy, &dummy, &dummy, nullptr),
               ConfigError);
  EXPECT_THROW(mc::kern::scan_bwd<__nv_bfloat16>(
                   false, s, nullptr, nullptr, nullptr, nullptr, &dummy, &dummy, &dummy, nullptr,
                   nullptr, nullptr, &dummy, &dummy, &dummy, &dummy, &dummy, &dummy, nullptr),
               ConfigError);
}

TEST(ScanRefusal, EveryFieldNamed) {
  struct Bad {
    ScanShape s;
    const char* field;
    const char* value;
  };
  const Bad bad[] = {{{0, 8, 4, 16, 16}, "batch", "0"},
                     {{1, 0, 4, 16, 16}, "seq_len", "0"},
                     {{1, 8, 0, 16, 16}, "d_inner", "0"},
                     {{1, 8, 65536, 16, 16}, "d_inner", "65536"},
                     {{1, 8, 4, 0, 16}, "d_state", "0"},
                     {{1, 8, 4, 16, 15}, "ld_bc", "15"},
                     {{1, (int64_t(1) << 24) + 1, 4, 16, 16}, "seq_len", "16777217"}};
  for (const Bad& b : bad)
    for (bool parallel : {false, true}) {
      const std::string m = refusal_message(b.s, parallel);
      EXPECT_TRUE(contains(m, std::string(b.field) + " = " + b.value)) << b.field << ": " << m;
    }
  // B·(T+1)·di·ds beyond the index budget
  const std::string m = refusal_message(ScanShape{1 << 20, 1 << 24, 65535, 256, 256}, true);
  EXPECT_TRUE(contains(m, "batch*(seq_len+1)*d_inner*d_state")) << m;
}

TEST(ScanRefusal, NullPointerNamed) {
  const ScanShape s{1, 8, 4, 16, 16};
  float x = 0;
  try {
    mc::kern::scan_fwd<float>(true, s, &x, &x, &x, &x, &x, &x, &x, &x, nullptr, nullptr);
    ADD_FAILURE() << "null y accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "y is null")) << e.what();
  }
}

TEST(ScanContract, TrafficModelAndScratch) {
  const ScanShape s{3, 100, 24, 16, 40};
  const size_t BT = 300, di = 24, ds = 16, S = 3 * di * ds;
  EXPECT_EQ(mc::kern::scan_fwd_min_bytes(s, 4, true) - mc::kern::scan_fwd_min_bytes(s, 4, false),
            4 * 3 * 101 * di * ds);
  EXPECT_EQ(mc::kern::scan_fwd_min_bytes(s, 2, false),
            2 * BT * di * 2 + 2 * BT * ds * 2 + 4 * (di * ds + di) + 4 * S + BT * di * 2 + 4 * S);
  EXPECT_EQ(mc::kern::scan_bwd_min_bytes(s, 4, true) - mc::kern::scan_bwd_min_bytes(s, 4, false),
            4 * S);
  EXPECT_GE(mc::kern::scan_bwd_scratch_bytes(s), 2 * BT * di * ds * 4 + S * 4 + 3 * di * 4);
  EXPECT_EQ(mc::kern::scan_bwd_extra_bytes(s), 16 * BT * di * ds + 2 * 3 * di * (ds + 1) * 4);
  // grouped channels: partial traffic divided by the group size
  const ScanShape w{8, 100, 1536, 16, 16};
  const auto g = mc::kern::scan_geometry(w, true, true);
  EXPECT_EQ(g.channels_per_block, 8);
  const size_t part = 8 * 100 * size_t(1536 / 8) * 16 * 4, per_b = 8 * 1536 * 17 * 4;
  EXPECT_EQ(mc::kern::scan_bwd_extra_bytes(w, true), 4 * part + 2 * per_b);
  EXPECT_EQ(mc::kern::scan_bwd_extra_bytes(w, false), 4 * part * 8 + 2 * per_b);
}

TEST(ScanContract, ParallelGeometryCoversEveryDState) {
  for (int64_t ds = 1; ds <= mc::Limits::kMaxDState; ++ds) {
    const auto g = mc::kern::scan_geometry(ScanShape{2, 1000, 5, ds, ds}, true, true);
    EXPECT_EQ(g.threads, g.lanes * g.segments) << ds;
    EXPECT_LE(g.threads, 256) << ds;
    EXPECT_EQ(g.threads % 32, 0) << ds << ": whole warps";
    EXPECT_EQ(g.lanes & (g.lanes - 1), 0) << ds << ": lanes a power of two";
    EXPECT_GE(g.lanes, std::min<int64_t>(ds, 32)) << ds;
    EXPECT_EQ(g.chunk, int64_t(g.segments) * g.items) << ds;
    EXPECT_EQ(g.blocks, 10) << ds;
    EXPECT_EQ(g.channels_per_block, 1) << ds << ": too few blocks to group channels";
    EXPECT_LE(g.smem_bytes, size_t(100) << 10) << ds << ": two blocks per SM fit";
    // many channels: grouped where d_state <= 64, never over the shared-memory budget
    for (int64_t di : {1031, 4099, 8191, 65535}) {
      const ScanShape w{4, 1000, di, ds, ds};
      const auto gw = mc::kern::scan_geometry(w, true, true);
      const int dt = gw.channels_per_block;
      EXPECT_TRUE(dt == 1 || dt == 2 || dt == 4 || dt == 8) << ds << " " << di;
      if (ds > 64) {
        EXPECT_EQ(dt, 1) << ds;
      }
      EXPECT_GE(4 * di, int64_t(dt) * 1024) << ds << " " << di << ": enough blocks left";
      EXPECT_EQ(gw.blocks, 4 * ((di + dt - 1) / dt)) << ds << " " << di;
      EXPECT_LE(gw.smem_bytes, size_t(100) << 10) << ds << " " << di;
    }
  }
  EXPECT_EQ(mc::kern::scan_geometry(ScanShape{4, 1000, 65535, 16, 16}, true, true)
                .channels_per_block, 8);
}

// The kernels' exp (scan_math.cuh) is host/device code: checked here on the
// CPU against double-precision exp on every 61st float of [-104, 89].
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
  for (uint32_t sign : {0u, 0x80000000u}) {
    const float lim = sign ? -104.0f : 89.0f;
    uint32_t last;
    std::memcpy(&last, &lim, 4);
    for (uint32_t bits = sign; bits <= last; bits += 61) {
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
            << " x in [-87, 0]\n";
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
