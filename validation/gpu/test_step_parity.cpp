// ctest-labels: gpu
// test_step_parity.cpp — every non-scan GPU kernel and GEMM role (f32) against
// the matching ref:: step of the CPU oracle on the same inputs.
//
// Rule (compare.hpp): K = GPU kernel, O = ref step in double on the same f32
// inputs, P = ref step in float (same-precision baseline);
//   pass  <=>  max|K − O| <= kF32KLimit · max|P − O| + atol   (atol = 2 ulp at max|O|).
// The measured k is printed and recorded (RecordProperty "k.<tensor>").
// Beside it every compared tensor gets the statistical checks of check/stats.hpp
// (bias and magnitude bias in units of the ensemble's noise, k_rms against its
// derived limit; docs/precision-statistics.md): the reference side of each step
// is one generic lambda run in double (O), float (P) and check::kStatRuns times
// in Monte Carlo arithmetic (the ensemble), typed outputs stored with round to
// nearest in P and one random rounding of the dtype in the ensemble.
// Shapes include odd sizes, every d_conv in 1..8, T below/at/above the conv
// chunk, non-zero carried states and state gradients; exact steps (copies,
// casts, gathers, the non-finite scanner) are compared bitwise. Also: the
// fixed-order reductions are bitwise reproducible, the bf16/f16 instantiations
// match a rounded float baseline under the typed rule, and d_conv = 9 is
// refused (the refusal tests need no device and run everywhere).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <omp.h>

#include "check/compare.hpp"
#include "check/stats.hpp"
#include "kernels/conv.cuh"
#include "gpu/device_buffer.hpp"
#include "gpu/device_context.hpp"
#include "kernels/elementwise.cuh"
#include "gpu/gemm.hpp"
#include "validation/support/gpu_test.hpp"
#include "kernels/norm.cuh"
#include "gpu/model.hpp"
#include "check/problem.hpp"
#include "kernels/reduce.cuh"
#include "reference_cpu/mca_scalar.hpp"
#include "reference_cpu/steps.hpp"
#include "core/storage.hpp"

namespace {

using mc::DType;
using mc::gpu::DeviceBuffer;

// ---- inputs -----------------------------------------------------------------------

// int64 element count -> size_t (a function call, so `std::vector<float> v(sz(n));`
// is never parsed as a function declaration).
size_t sz(int64_t n) { return static_cast<size_t>(n); }

// n values uniform in [lo, hi), f32-exact (splitmix64 of problem.hpp).
std::vector<float> uniform(int64_t n, uint64_t seed, double lo, double hi) {
  mc::check::SplitMix64 r(seed);
  std::vector<float> v(sz(n));
  for (auto& x : v) x = float(r.uniform(lo, hi));
  return v;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// ---- the reference side: O (double), P (float), the ensemble (Monte Carlo arithmetic) --

using mc::ref::Mca;

template <class S>
std::vector<S> as(const std::vector<float>& v) {
  return std::vector<S>(v.begin(), v.end());
}
// A typed store of a reference value: none in O, round to nearest in P, one random
// rounding of the dtype's unit roundoff in an ensemble run.
double store(DType, double x) { return x; }
float store(DType t, float x) { return mc::round_to(t, x); }
Mca store(DType t, Mca x) { return mc::ref::round_to(t, x); }
template <class S>
std::vector<S> store(DType t, std::vector<S> v) {
  if (t != DType::F32)
    for (auto& x : v) x = store(t, x);
  return v;
}

template <class S>
std::vector<double> as_double(const std::vector<S>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = double(v[i]);
  return r;
}

// Every output tensor of one step's reference, in the three precisions.
struct StepRefs {
  std::vector<std::vector<double>> O;
  std::vector<std::vector<float>> P;
  std::vector<std::vector<std::vector<double>>> M;  // [run][output]
};

// f(tag) computes the step in scalar decltype(tag) and returns its outputs.
template <class F>
StepRefs step_refs(F f, uint64_t seed) {
  StepRefs r;
  for (const auto& o : f(double{})) r.O.push_back(o);
  for (const auto& p : f(float{})) r.P.push_back(p);
  for (int k = 0; k < mc::check::kStatRuns; ++k) {
#pragma omp parallel
    {
      Mca::seed(seed * 0x9e3779b97f4a7c15ULL + uint64_t(k) * 0x100000001b3ULL +
                uint64_t(omp_get_thread_num()) + 1);
    }
    std::vector<std::vector<double>> run;
    for (const auto& m : f(Mca{})) run.push_back(as_double(m));
    r.M.push_back(std::move(run));
  }
  return r;
}

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& h, const char* name, cudaStream_t s) {
  DeviceBuffer<T> d(h.size(), name);
  d.upload(h.data(), h.size(), s);
  return d;
}

template <class T>
std::vector<T> to_host(const DeviceBuffer<T>& d, cudaStream_t s) {
  std::vector<T> h(d.size());
  d.download(h.data(), h.size(), s);
  return h;
}

std::string shape_tag(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::ostringstream os;
  for (const auto& [k, v] : dims) os << k << v;
  return os.str();
}

// ---- fixture -------------------------------------------------------------------------

class StepParity : public mc::testing::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<mc::gpu::DeviceContext>(mc::gpu::default_device(), mc::gpu::GemmMath::F32);
  }
  cudaStream_t s() const { return ctx_->stream(); }

  // The k-rule and the statistical checks for output `i` of a step's references.
  void expect_k(const std::string& tensor, const std::vector<float>& K, const StepRefs& r,
                size_t i, DType dtype = DType::F32) {
    ASSERT_LT(i, r.O.size()) << tensor;
    ASSERT_EQ(K.size(), r.O[i].size()) << tensor;
    ASSERT_EQ(r.P[i].size(), r.O[i].size()) << tensor;
    const double limit = dtype == DType::F32 ? mc::check::kF32KLimit : mc::check::kTypedKLimit;
    auto res = mc::check::k_rule(tensor, K, r.O[i], r.P[i], dtype, limit);
    std::vector<const double*> runs;
    for (const auto& m : r.M) runs.push_back(m[i].data());
    res.stats = mc::check::stat_check(K.data(), r.O[i].data(), r.P[i].data(), runs,
                                      int64_t(K.size()));
    std::cout << "  " << res.summary() << "\n";
    RecordProperty("k." + tensor, std::to_string(res.k));
    RecordProperty("k_rms." + tensor, std::to_string(res.stats.k_rms));
    EXPECT_TRUE(res.verdict()) << res.summary();
  }

  template <class T>
  void check_typed_kernels(DType dt);

  std::unique_ptr<mc::gpu::DeviceContext> ctx_;
};

// ---- RMSNorm ---------------------------------------------------------------------------

struct RowsDim {
  int64_t R, D;
};
// Every reduced tensor has >= 16 elements (rms: R, dg: D), except the 1x1 edge
// case whose results are single roundings: the k-rule compares maxima of
// |error|, which is unreliable over a handful of elements (model_harness.hpp).
const RowsDim kNormShapes[] = {{1, 1}, {19, 17}, {33, 48}, {130, 769}, {17, 1100}, {2500, 16}};

TEST_F(StepParity, RmsNormForward) {
  const double eps = 1e-5;
  for (const auto [R, D] : kNormShapes) {
    const std::string tag = shape_tag({{"R", R}, {"D", D}});
    const auto x = uniform(R * D, 11 + R, -2.0, 2.0);
    const auto g = uniform(D, 12 + D, 0.5, 1.5);
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto xs = as<S>(x), gs = as<S>(g);
          std::vector<S> y(sz(R * D)), rms(sz(R));
          mc::ref::rmsnorm_fwd<S>(xs.data(), gs.data(), R, D, eps, y.data(), rms.data());
          return std::vector<std::vector<S>>{y, rms};
        },
        11 + R);

    auto dx = to_device(x, "x", s());
    auto dg = to_device(g, "g", s());
    DeviceBuffer<float> dy(sz(R * D), "y"), drms(sz(R), "rms");
    mc::kern::rmsnorm_fwd<float>(dx.get(), dg.get(), R, D, eps, dy.get(), drms.get(), s());
    expect_k("rmsnorm_fwd.y." + tag, to_host(dy, s()), ref, 0);
    expect_k("rmsnorm_fwd.rms." + tag, to_host(drms, s()), ref, 1);
  }
}

TEST_F(StepParity, RmsNormBackward) {
  for (const auto [R, D] : kNormShapes) {
    const std::string tag = shape_tag({{"R", R}, {"D", D}});
    const auto x = uniform(R * D, 21 + R, -2.0, 2.0);
    const auto g = uniform(D, 22 + D, 0.5, 1.5);
    const auto dyv = uniform(R * D, 23 + R, -1.0, 1.0);
    const auto dg0 = uniform(D, 24 + D, -0.5, 0.5);  // dg accumulates (+=)
    std::vector<float> rms(sz(R)), tmp(sz(R * D));
    mc::ref::rmsnorm_fwd<float>(x.data(), g.data(), R, D, 1e-5, tmp.data(), rms.data());

    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto xs = as<S>(x), gs = as<S>(g), dys = as<S>(dyv), rs = as<S>(rms);
          std::vector<S> dx(sz(R * D)), dg = as<S>(dg0);
          mc::ref::rmsnorm_bwd<S>(dys.data(), xs.data(), gs.data(), rs.data(), R, D, dx.data(),
                                  dg.data());
          return std::vector<std::vector<S>>{dx, dg};
        },
        21 + R);

    auto d_dy = to_device(dyv, "dy", s());
    auto d_x = to_device(x, "x", s());
    auto d_g = to_device(g, "g", s());
    auto d_rms = to_device(rms, "rms", s());
    auto d_dg = to_device(dg0, "dg", s());
    DeviceBuffer<float> d_dx(sz(R * D), "dx");
    DeviceBuffer<float> scratch(mc::kern::rmsnorm_bwd_scratch_floats(R, D), "scratch");
    mc::kern::rmsnorm_bwd<float>(d_dy.get(), d_x.get(), d_g.get(), d_rms.get(), R, D, d_dx.get(),
                                 d_dg.get(), scratch.get(), s());
    expect_k("rmsnorm_bwd.dx." + tag, to_host(d_dx, s()), ref, 0);
    const auto dg_first = to_host(d_dg, s());
    expect_k("rmsnorm_bwd.dg." + tag, dg_first, ref, 1);

    // Rule B: the same launch again gives the same bits.
    d_dg.upload(dg0.data(), dg0.size(), s());
    mc::kern::rmsnorm_bwd<float>(d_dy.get(), d_x.get(), d_g.get(), d_rms.get(), R, D, d_dx.get(),
                                 d_dg.get(), scratch.get(), s());
    const auto dg_second = to_host(d_dg, s());
    EXPECT_EQ(mc::check::first_bit_difference(dg_first.data(), dg_second.data(), D).index, -1)
        << "rmsnorm_bwd dg not bitwise reproducible at " << tag;
  }
}

// ---- GEMM roles ------------------------------------------------------------------------

struct MKN {
  int64_t M, K, N;
};
const MKN kGemmShapes[] = {{1, 1, 1}, {37, 19, 23}, {64, 128, 96}, {257, 33, 5}};

TEST_F(StepParity, GemmForwardWithF32Bias) {
  const mc::gpu::Gemm gemm(ctx_->cublas(), mc::gpu::GemmMath::F32);
  for (const auto [M, K, N] : kGemmShapes) {
    const std::string tag = shape_tag({{"M", M}, {"K", K}, {"N", N}});
    // X is read with a row stride ldx > K (as dt_in inside the xdbl rows).
    const int64_t ldx = K + 3;
    const auto Xs = uniform(M * ldx, 31 + M, -1.0, 1.0);
    std::vector<float> X(sz(M * K));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) X[size_t(m * K + k)] = Xs[size_t(m * ldx + k)];
    const auto W = uniform(K * N, 32 + K, -1.0, 1.0);
    const auto b = uniform(N, 33 + N, -1.0, 1.0);
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto Xs = as<S>(X), Ws = as<S>(W), bs = as<S>(b);
          std::vector<S> Y(sz(M * N));
          mc::ref::linear_fwd<S>(Xs.data(), Ws.data(), bs.data(), M, K, N, Y.data());
          return std::vector<std::vector<S>>{Y};
        },
        31 + M);

    auto dX = to_device(Xs, "X", s());
    auto dW = to_device(W, "W", s());
    auto db = to_device(b, "b", s());
    DeviceBuffer<float> dY(sz(M * N), "Y");
    gemm.forward<float, float>("test forward", dX.get(), ldx, dW.get(), dY.get(), N, M, K, N);
    mc::kern::bias_add_round<float>(dY.get(), db.get(), M, N, s());
    expect_k("gemm_fwd_bias.Y." + tag, to_host(dY, s()), ref, 0);
  }
}

TEST_F(StepParity, GemmInputGradAndWeightGrad) {
  const mc::gpu::Gemm gemm(ctx_->cublas(), mc::gpu::GemmMath::F32);
  for (const auto [M, K, N] : kGemmShapes) {
    const std::string tag = shape_tag({{"M", M}, {"K", K}, {"N", N}});
    const auto X = uniform(M * K, 41 + M, -1.0, 1.0);
    const auto W = uniform(K * N, 42 + K, -1.0, 1.0);
    const auto dYv = uniform(M * N, 43 + N, -1.0, 1.0);
    const auto dW0 = uniform(K * N, 44 + N, -1.0, 1.0);  // dW accumulates (beta = 1)
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto Xs = as<S>(X), Ws = as<S>(W), dYs = as<S>(dYv);
          std::vector<S> dX(sz(M * K)), dW = as<S>(dW0);
          mc::ref::linear_bwd_dx<S>(dYs.data(), Ws.data(), M, K, N, dX.data());
          mc::ref::linear_bwd_dw<S>(Xs.data(), dYs.data(), M, K, N, dW.data());
          return std::vector<std::vector<S>>{dX, dW};
        },
        41 + M);

    auto d_X = to_device(X, "X", s());
    auto d_W = to_device(W, "W", s());
    auto d_dY = to_device(dYv, "dY", s());
    auto d_dW = to_device(dW0, "dW", s());
    DeviceBuffer<float> d_dX(sz(M * K), "dX");
    gemm.input_grad<float, float>("test dX", d_dY.get(), d_W.get(), d_dX.get(), M, K, N);
    gemm.weight_grad<float>("test dW", d_X.get(), K, d_dY.get(), d_dW.get(), M, K, N);
    expect_k("gemm_dx." + tag, to_host(d_dX, s()), ref, 0);
    expect_k("gemm_dw_accumulate." + tag, to_host(d_dW, s()), ref, 1);
  }
}

// ---- split / concat -------------------------------------------------------------------

TEST_F(StepParity, SplitGateSiluAndConcatHalves) {
  for (const auto [R, di] : {RowsDim{1, 1}, RowsDim{13, 7}, RowsDim{300, 33}}) {
    const std::string tag = shape_tag({{"R", R}, {"di", di}});
    const auto P = uniform(R * 2 * di, 51 + R, -8.0, 8.0);
    std::vector<float> xbP(sz(R * di)), zP(sz(R * di)), gsP(sz(R * di));
    mc::ref::split_gate_silu_fwd<float>(P.data(), R, di, xbP.data(), zP.data(), gsP.data());
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto Ps = as<S>(P);
          std::vector<S> xb(sz(R * di)), z(sz(R * di)), gs(sz(R * di));
          mc::ref::split_gate_silu_fwd<S>(Ps.data(), R, di, xb.data(), z.data(), gs.data());
          return std::vector<std::vector<S>>{gs};
        },
        51 + R);

    auto dP = to_device(P, "P", s());
    DeviceBuffer<float> dxb(sz(R * di), "xb"), dz(sz(R * di), "z"), dgs(sz(R * di), "gs");
    mc::kern::split_gate_silu<float>(dP.get(), R, di, dxb.get(), dz.get(), dgs.get(), s());
    const auto xbK = to_host(dxb, s()), zK = to_host(dz, s());
    EXPECT_EQ(xbK, xbP) << "split x half is a copy: " << tag;
    EXPECT_EQ(zK, zP) << "split gate half is a copy: " << tag;
    expect_k("split_gate_silu.gs." + tag, to_host(dgs, s()), ref, 0);

    // concat_halves is the inverse layout: [xb | z] == P, bitwise.
    DeviceBuffer<float> dP2(sz(R * 2 * di), "P2");
    mc::kern::concat_halves<float>(dxb.get(), dz.get(), R, di, dP2.get(), s());
    std::vector<float> refP(sz(R * 2 * di));
    mc::ref::concat_halves<float>(xbP.data(), zP.data(), R, di, refP.data());
    EXPECT_EQ(to_host(dP2, s()), refP) << "concat_halves " << tag;
  }
}

// ---- conv1d + SiLU ----------------------------------------------------------------------

struct ConvShape {
  int64_t B, T, di, dc;
};

std::vector<ConvShape> conv_shapes() {
  std::vector<ConvShape> v;
  for (int64_t dc = 1; dc <= 8; ++dc)
    for (const int64_t T : {1, 2, 5, 64, 65, 130}) v.push_back({dc % 2 ? 2 : 3, T, dc % 3 ? 17 : 23, dc});
  return v;
}

TEST_F(StepParity, Conv1dSiluForwardWithCarriedState) {
  for (const auto [B, T, di, dc] : conv_shapes()) {
    const std::string tag = shape_tag({{"B", B}, {"T", T}, {"di", di}, {"dc", dc}});
    const int64_t n = B * T * di;
    const auto xb = uniform(n, 61 + T, -2.0, 2.0);
    const auto w = uniform(di * dc, 62 + dc, -1.0, 1.0);
    const auto bias = uniform(di, 63 + di, -0.5, 0.5);
    const auto state0 = uniform(B * di * dc, 64 + B, -1.0, 1.0);  // non-zero carried state

    std::vector<float> stP = state0, winP(sz(n * dc)), pcP(sz(n)), uP(sz(n));
    mc::ref::conv1d_silu_fwd<float>(xb.data(), w.data(), bias.data(), B, T, di, dc, stP.data(),
                                    winP.data(), pcP.data(), uP.data());
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto xs = as<S>(xb), ws = as<S>(w), bs = as<S>(bias);
          std::vector<S> st = as<S>(state0), win(sz(n * dc)), pc(sz(n)), u(sz(n));
          mc::ref::conv1d_silu_fwd<S>(xs.data(), ws.data(), bs.data(), B, T, di, dc, st.data(),
                                      win.data(), pc.data(), u.data());
          return std::vector<std::vector<S>>{pc, u};
        },
        61 + T);

    auto d_xb = to_device(xb, "xb", s());
    auto d_w = to_device(w, "w", s());
    auto d_b = to_device(bias, "bias", s());
    auto d_st = to_device(state0, "state", s());
    DeviceBuffer<float> d_win(sz(n * dc), "windows"), d_pc(sz(n), "pc"), d_u(sz(n), "u");
    mc::kern::conv1d_silu_fwd<float>(d_xb.get(), d_w.get(), d_b.get(), B, T, di, dc, d_st.get(),
                                     d_win.get(), d_pc.get(), d_u.get(), s());
    // Windows and the final state are copies of inputs: bitwise.
    EXPECT_EQ(to_host(d_win, s()), winP) << "conv windows " << tag;
    EXPECT_EQ(to_host(d_st, s()), stP) << "conv final state " << tag;
    expect_k("conv_fwd.pc." + tag, to_host(d_pc, s()), ref, 0);
    expect_k("conv_fwd.u." + tag, to_host(d_u, s()), ref, 1);

    // nosave variant (target forward): same u and final state.
    auto d_st2 = to_device(state0, "state", s());
    DeviceBuffer<float> d_u2(sz(n), "u_nosave");
    mc::kern::conv1d_silu_fwd<float>(d_xb.get(), d_w.get(), d_b.get(), B, T, di, dc, d_st2.get(),
                                     nullptr, nullptr, d_u2.get(), s());
    EXPECT_EQ(to_host(d_u2, s()), to_host(d_u, s())) << "nosave conv u " << tag;
    EXPECT_EQ(to_host(d_st2, s()), stP) << "nosave conv final state " << tag;
  }
}

TEST_F(StepParity, Conv1dSiluBackwardWithStateGradient) {
  for (const auto [B, T, di, dc] : conv_shapes()) {
    const std::string tag = shape_tag({{"B", B}, {"T", T}, {"di", di}, {"dc", dc}});
    const int64_t n = B * T * di;
    // Saved forward tensors (from the float forward on a carried state).
    const auto xb = uniform(n, 71 + T, -2.0, 2.0);
    const auto w = uniform(di * dc, 72 + dc, -1.0, 1.0);
    const auto bias = uniform(di, 73 + di, -0.5, 0.5);
    std::vector<float> st = uniform(B * di * dc, 74 + B, -1.0, 1.0);
    std::vector<float> win(sz(n * dc)), pc(sz(n)), u(sz(n));
    mc::ref::conv1d_silu_fwd<float>(xb.data(), w.data(), bias.data(), B, T, di, dc, st.data(),
                                    win.data(), pc.data(), u.data());
    const auto du = uniform(n, 75 + T, -1.0, 1.0);
    const auto dw0 = uniform(di * dc, 76 + dc, -0.5, 0.5);  // (+=)
    const auto db0 = uniform(di, 77 + di, -0.5, 0.5);       // (+=)

    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto dus = as<S>(du), pcs = as<S>(pc), wins = as<S>(win), ws = as<S>(w);
          std::vector<S> dxb(sz(n)), dw = as<S>(dw0), db = as<S>(db0), ds0(sz(B * di * dc));
          mc::ref::conv1d_silu_bwd<S>(dus.data(), pcs.data(), wins.data(), ws.data(), B, T, di, dc,
                                      dxb.data(), dw.data(), db.data(), ds0.data());
          return std::vector<std::vector<S>>{dxb, dw, db, ds0};
        },
        71 + T);

    auto d_du = to_device(du, "du", s());
    auto d_pc = to_device(pc, "pc", s());
    auto d_win = to_device(win, "windows", s());
    auto d_w = to_device(w, "w", s());
    auto d_dw = to_device(dw0, "dw", s());
    auto d_db = to_device(db0, "db", s());
    DeviceBuffer<float> d_dxb(sz(n), "dxb"), d_ds0(sz(B * di * dc), "d_state0");
    DeviceBuffer<float> scratch(mc::kern::conv1d_silu_bwd_scratch_floats(B, T, di, dc), "scratch");
    mc::kern::conv1d_silu_bwd<float>(d_du.get(), d_pc.get(), d_win.get(), d_w.get(), B, T, di, dc,
                                     d_dxb.get(), d_dw.get(), d_db.get(), d_ds0.get(),
                                     scratch.get(), s());
    expect_k("conv_bwd.dxb." + tag, to_host(d_dxb, s()), ref, 0);
    const auto dw_first = to_host(d_dw, s());
    expect_k("conv_bwd.dw." + tag, dw_first, ref, 1);
    expect_k("conv_bwd.dbias." + tag, to_host(d_db, s()), ref, 2);
    const auto ds0K = to_host(d_ds0, s());
    expect_k("conv_bwd.d_state0." + tag, ds0K, ref, 3);
    for (int64_t i = 0; i < B * di; ++i)
      ASSERT_EQ(ds0K[size_t(i * dc)], 0.0f) << "slot 0 of the incoming state is never read " << tag;

    // Rule B: same bits on a second run.
    d_dw.upload(dw0.data(), dw0.size(), s());
    mc::kern::conv1d_silu_bwd<float>(d_du.get(), d_pc.get(), d_win.get(), d_w.get(), B, T, di, dc,
                                     d_dxb.get(), d_dw.get(), d_db.get(), nullptr, scratch.get(),
                                     s());
    const auto dw_second = to_host(d_dw, s());
    EXPECT_EQ(mc::check::first_bit_difference(dw_first.data(), dw_second.data(), di * dc).index, -1)
        << "conv dw not bitwise reproducible at " << tag;
  }
}

// ---- softplus, gating, residual -------------------------------------------------------

TEST_F(StepParity, SoftplusWithFusedBiasAndBackward) {
  for (const auto [R, di] : {RowsDim{1, 1}, RowsDim{17, 9}, RowsDim{200, 64}}) {
    const std::string tag = shape_tag({{"R", R}, {"di", di}});
    // acc spans the threshold 20 and the far negative tail.
    const auto acc = uniform(R * di, 81 + R, -30.0, 30.0);
    const auto bias = uniform(di, 82 + di, -2.0, 2.0);
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          std::vector<S> x(sz(R * di)), y(sz(R * di));
          for (int64_t i = 0; i < R * di; ++i) x[size_t(i)] = S(acc[size_t(i)]) + S(bias[size_t(i % di)]);
          mc::ref::softplus_fwd<S>(x.data(), R * di, y.data());
          return std::vector<std::vector<S>>{x, y};
        },
        81 + R);

    auto d_acc = to_device(acc, "acc", s());
    auto d_b = to_device(bias, "bias", s());
    DeviceBuffer<float> d_raw(sz(R * di), "delta_raw"), d_delta(sz(R * di), "delta");
    mc::kern::softplus_bias_fwd<float>(d_acc.get(), d_b.get(), R, di, d_raw.get(), d_delta.get(), s());
    const auto rawK = to_host(d_raw, s());
    expect_k("softplus_bias_fwd.delta_raw." + tag, rawK, ref, 0);
    expect_k("softplus_bias_fwd.delta." + tag, to_host(d_delta, s()), ref, 1);

    // Backward on the stored delta_raw.
    const auto dd = uniform(R * di, 83 + R, -1.0, 1.0);
    const StepRefs bref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto raws = as<S>(rawK), dds = as<S>(dd);
          std::vector<S> dx(sz(R * di));
          mc::ref::softplus_bwd<S>(raws.data(), dds.data(), R * di, dx.data());
          return std::vector<std::vector<S>>{dx};
        },
        83 + R);
    auto d_dd = to_device(dd, "d_delta", s());
    DeviceBuffer<float> d_dx(sz(R * di), "d_delta_raw");
    mc::kern::softplus_bwd<float>(d_raw.get(), d_dd.get(), R * di, d_dx.get(), s());
    expect_k("softplus_bwd." + tag, to_host(d_dx, s()), bref, 0);
  }
}

TEST_F(StepParity, GatingForwardBackward) {
  for (const int64_t n : {1, 77, 5000}) {
    const std::string tag = shape_tag({{"n", n}});
    const auto y = uniform(n, 91 + n, -3.0, 3.0);
    const auto z = uniform(n, 92 + n, -8.0, 8.0);
    std::vector<float> gs(sz(n));
    for (int64_t i = 0; i < n; ++i) gs[size_t(i)] = z[size_t(i)] / (1.0f + std::exp(-z[size_t(i)]));
    const auto dG = uniform(n, 93 + n, -1.0, 1.0);
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto ys = as<S>(y), zs = as<S>(z), gss = as<S>(gs), dGs = as<S>(dG);
          std::vector<S> g(sz(n)), dY(sz(n)), dz(sz(n));
          mc::ref::gating_fwd<S>(ys.data(), gss.data(), n, g.data());
          mc::ref::gating_bwd<S>(dGs.data(), ys.data(), zs.data(), gss.data(), n, dY.data(),
                                 dz.data());
          return std::vector<std::vector<S>>{g, dY, dz};
        },
        91 + n);

    auto d_y = to_device(y, "y", s());
    auto d_z = to_device(z, "z", s());
    auto d_gs = to_device(gs, "gs", s());
    auto d_dG = to_device(dG, "dG", s());
    DeviceBuffer<float> d_g(sz(n), "gated"), d_dY(sz(n), "dY"), d_dz(sz(n), "dz");
    mc::kern::gating_fwd<float>(d_y.get(), d_gs.get(), n, d_g.get(), s());
    mc::kern::gating_bwd<float>(d_dG.get(), d_y.get(), d_z.get(), d_gs.get(), n, d_dY.get(),
                                d_dz.get(), s());
    expect_k("gating_fwd." + tag, to_host(d_g, s()), ref, 0);
    expect_k("gating_bwd.dY." + tag, to_host(d_dY, s()), ref, 1);
    expect_k("gating_bwd.dz." + tag, to_host(d_dz, s()), ref, 2);
  }
}

TEST_F(StepParity, ResidualAddAndAddInplace) {
  const int64_t n = 4099;
  const auto a = uniform(n, 101, -10.0, 10.0);
  const auto b = uniform(n, 102, -1.0, 1.0);
  const StepRefs ref = step_refs(
      [&](auto tag) {
        using S = decltype(tag);
        const auto as_ = as<S>(a), bs = as<S>(b);
        std::vector<S> out(sz(n));
        mc::ref::residual_add<S>(as_.data(), bs.data(), n, out.data());
        return std::vector<std::vector<S>>{out};
      },
      101);

  auto d_a = to_device(a, "a", s());
  auto d_b = to_device(b, "b", s());
  DeviceBuffer<float> d_out(sz(n), "out");
  mc::kern::residual_add<float>(d_a.get(), d_b.get(), n, d_out.get(), s());
  expect_k("residual_add", to_host(d_out, s()), ref, 0);
  // aliasing out = a (the backward's dH += dHn)
  mc::kern::residual_add<float>(d_a.get(), d_b.get(), n, d_a.get(), s());
  expect_k("residual_add.in_place", to_host(d_a, s()), ref, 0);
  // add_inplace (dU += dU_x)
  auto d_c = to_device(a, "c", s());
  mc::kern::add_inplace<float>(d_c.get(), d_b.get(), n, s());
  expect_k("add_inplace", to_host(d_c, s()), ref, 0);
}

// ---- columns, assembly, gathers, a_neg ---------------------------------------------------

TEST_F(StepParity, GatherScatterColumnsAndDxdblAssembly) {
  const int64_t R = 37, dr = 3, ds = 5, xd = dr + 2 * ds;
  const auto src = uniform(R * xd, 111, -1.0, 1.0);
  auto d_src = to_device(src, "xdbl", s());
  for (const auto& [off, w] : {std::pair<int64_t, int64_t>{0, dr}, {dr, ds}, {dr + ds, ds}}) {
    std::vector<float> ref(sz(R * w));
    mc::ref::gather_cols<float>(src.data(), R, xd, off, w, ref.data());
    DeviceBuffer<float> d_dst(sz(R * w), "cols");
    mc::kern::gather_cols<float>(d_src.get(), R, xd, off, w, d_dst.get(), s());
    EXPECT_EQ(to_host(d_dst, s()), ref) << "gather_cols off=" << off;
  }
  // scatter_add_cols into a non-zero destination
  const auto add = uniform(R * ds, 112, -1.0, 1.0);
  const StepRefs sref = step_refs(
      [&](auto tag) {
        using S = decltype(tag);
        const auto adds = as<S>(add);
        std::vector<S> dst = as<S>(src);
        mc::ref::scatter_add_cols<S>(adds.data(), R, xd, dr, ds, dst.data());
        return std::vector<std::vector<S>>{dst};
      },
      112);
  auto d_add = to_device(add, "add", s());
  mc::kern::scatter_add_cols<float>(d_add.get(), R, xd, dr, ds, d_src.get(), s());
  expect_k("scatter_add_cols", to_host(d_src, s()), sref, 0);

  // d_xdbl = [d_dt_in | dB | dC] (f32 path: no rounding) == zero + three scatter-adds
  const auto ddt = uniform(R * dr, 113, -1.0, 1.0);
  const auto dB = uniform(R * ds, 114, -1.0, 1.0);
  const auto dC = uniform(R * ds, 115, -1.0, 1.0);
  std::vector<float> ref(sz(R * xd), 0.0f);
  mc::ref::scatter_add_cols<float>(ddt.data(), R, xd, 0, dr, ref.data());
  mc::ref::scatter_add_cols<float>(dB.data(), R, xd, dr, ds, ref.data());
  mc::ref::scatter_add_cols<float>(dC.data(), R, xd, dr + ds, ds, ref.data());
  auto d_ddt = to_device(ddt, "d_dt_in", s());
  auto d_dB = to_device(dB, "dB", s());
  auto d_dC = to_device(dC, "dC", s());
  DeviceBuffer<float> d_x(sz(R * xd), "d_xdbl");
  mc::kern::assemble_dxdbl<float>(d_ddt.get(), d_dB.get(), d_dC.get(), R, dr, ds, d_x.get(), s());
  EXPECT_EQ(to_host(d_x, s()), ref) << "assemble_dxdbl";
}

TEST_F(StepParity, GatherLastTimestepAndExpNegate) {
  const int64_t B = 3, T = 5, D = 11;
  const auto src = uniform(B * T * D, 121, -1.0, 1.0);
  auto d_src = to_device(src, "out", s());
  DeviceBuffer<float> d_dst(sz(B * D), "target");
  mc::kern::gather_last_timestep<float>(d_src.get(), B, T, D, d_dst.get(), s());
  const auto got = to_host(d_dst, s());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < D; ++j)
      ASSERT_EQ(got[size_t(b * D + j)], src[size_t((b * T + T - 1) * D + j)]) << b << "," << j;

  const int64_t n = 1000;
  const auto a_log = uniform(n, 122, -3.0, 5.0);
  const StepRefs ref = step_refs(
      [&](auto tag) {
        using S = decltype(tag);
        const auto al = as<S>(a_log);
        std::vector<S> an(sz(n));
        mc::ref::exp_negate<S>(al.data(), n, an.data());
        return std::vector<std::vector<S>>{an};
      },
      122);
  auto d_al = to_device(a_log, "a_log", s());
  DeviceBuffer<float> d_an(sz(n), "a_neg");
  mc::kern::exp_negate(d_al.get(), n, d_an.get(), s());
  expect_k("exp_negate", to_host(d_an, s()), ref, 0);
}

// ---- casts (exact: RN against storage.hpp) ------------------------------------------------

// Values that exercise ties-to-even, subnormals, overflow and specials.
std::vector<float> cast_probe_values() {
  std::vector<float> v = uniform(4096, 131, -70000.0, 70000.0);
  const auto small = uniform(1024, 132, -1e-6, 1e-6);  // f16 subnormal range
  v.insert(v.end(), small.begin(), small.end());
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                  std::numeric_limits<float>::denorm_min(), 3.0e38f, inf, -inf})
    v.push_back(x);
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0x3f800001u, 0x3f807fffu, 0x7f7fffffu}) {
    float x;
    std::memcpy(&x, &bits, 4);
    v.push_back(x);  // bf16 ties / near-ties, FLT_MAX
  }
  return v;
}

template <class T>
void check_cast_round_trip(DType dtype, const char* name, cudaStream_t s) {
  const auto v = cast_probe_values();
  const int64_t n = int64_t(v.size());
  auto d_src = to_device(v, "src", s);
  DeviceBuffer<T> d_t(v.size(), "typed");
  DeviceBuffer<float> d_back(v.size(), "back");
  mc::kern::cast_from_f32<T>(d_src.get(), n, d_t.get(), s);
  mc::kern::cast_to_f32<T>(d_t.get(), n, d_back.get(), s);
  const auto back = to_host(d_back, s);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = mc::round_to(dtype, v[size_t(i)]);
    if (std::memcmp(&want, &back[size_t(i)], 4) != 0 && bad++ < 5)
      ADD_FAILURE() << name << " RN cast of " << v[size_t(i)] << " gave " << back[size_t(i)]
                    << ", storage.hpp says " << want;
  }
  EXPECT_EQ(bad, 0) << name << ": casts differing from mc::round_to";
}

TEST_F(StepParity, CastsAreRoundToNearestEven) {
  check_cast_round_trip<__nv_bfloat16>(DType::BF16, "bf16", s());
  check_cast_round_trip<__half>(DType::F16, "f16", s());
}

// ---- typed storage (bf16 / f16) ---------------------------------------------------------------
//
// The same kernels instantiated for a typed storage type. Inputs are quantised
// to the dtype once, so K, O and P see identical values. O = the ref step in
// double on those inputs, no output rounding; P = the ref step in float with
// each typed output rounded (mc::round_to) where the kernel stores it typed.
// Typed outputs use the typed rule (kTypedKLimit, ulps of the dtype); f32
// outputs (rms, dx, dw, ...) the f32 rule; copies are compared bitwise.

std::vector<float> quantised(std::vector<float> v, DType dt) {
  for (auto& x : v) x = mc::round_to(dt, x);
  return v;
}

template <class T>
DeviceBuffer<T> to_device_typed(const std::vector<float>& q, const char* name, cudaStream_t s) {
  auto staging = to_device(q, "staging", s);
  DeviceBuffer<T> d(q.size(), name);
  mc::kern::cast_from_f32<T>(staging.get(), int64_t(q.size()), d.get(), s);
  MC_CUDA_CHECK(cudaStreamSynchronize(s), "to_device_typed");
  return d;
}

template <class T>
std::vector<float> to_host_typed(const DeviceBuffer<T>& d, cudaStream_t s) {
  DeviceBuffer<float> f(d.size(), "upcast");
  mc::kern::cast_to_f32<T>(d.get(), int64_t(d.size()), f.get(), s);
  return to_host(f, s);
}

template <class T>
void StepParity::check_typed_kernels(DType dt) {
  const std::string tp = std::string(mc::to_string(dt)) + ".";
  auto q = [dt](std::vector<float> v) { return quantised(std::move(v), dt); };
  {  // RMSNorm forward: f32 x -> typed y, f32 rms
    const int64_t R = 33, D = 48;
    const auto x = uniform(R * D, 201, -2.0, 2.0), g = uniform(D, 202, 0.5, 1.5);
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto xs = as<S>(x), gs = as<S>(g);
          std::vector<S> y(sz(R * D)), rms(sz(R));
          mc::ref::rmsnorm_fwd<S>(xs.data(), gs.data(), R, D, 1e-5, y.data(), rms.data());
          return std::vector<std::vector<S>>{store(dt, y), rms};
        },
        201);
    auto d_x = to_device(x, "x", s());
    auto d_g = to_device(g, "g", s());
    DeviceBuffer<T> d_y(sz(R * D), "y");
    DeviceBuffer<float> d_rms(sz(R), "rms");
    mc::kern::rmsnorm_fwd<T>(d_x.get(), d_g.get(), R, D, 1e-5, d_y.get(), d_rms.get(), s());
    expect_k(tp + "rmsnorm_fwd.y", to_host_typed(d_y, s()), ref, 0, dt);
    expect_k(tp + "rmsnorm_fwd.rms", to_host(d_rms, s()), ref, 1);
  }
  {  // RMSNorm backward: typed dy, f32 x -> f32 dx, dg
    const int64_t R = 40, D = 24;
    const auto x = uniform(R * D, 211, -2.0, 2.0), g = uniform(D, 212, 0.5, 1.5);
    const auto dy = q(uniform(R * D, 213, -1.0, 1.0));
    std::vector<float> rms(sz(R)), tmp(sz(R * D));
    mc::ref::rmsnorm_fwd<float>(x.data(), g.data(), R, D, 1e-5, tmp.data(), rms.data());
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto dys = as<S>(dy), xs = as<S>(x), gs = as<S>(g), rs = as<S>(rms);
          std::vector<S> dx(sz(R * D)), dg(sz(D), S(0));
          mc::ref::rmsnorm_bwd<S>(dys.data(), xs.data(), gs.data(), rs.data(), R, D, dx.data(),
                                  dg.data());
          return std::vector<std::vector<S>>{dx, dg};
        },
        211);
    auto d_dy = to_device_typed<T>(dy, "dy", s());
    auto d_x = to_device(x, "x", s());
    auto d_g = to_device(g, "g", s());
    auto d_r = to_device(rms, "rms", s());
    DeviceBuffer<float> d_dx(sz(R * D), "dx");
    auto d_dg = to_device(std::vector<float>(sz(D), 0.0f), "dg", s());
    DeviceBuffer<float> scratch(mc::kern::rmsnorm_bwd_scratch_floats(R, D), "scratch");
    mc::kern::rmsnorm_bwd<T>(d_dy.get(), d_x.get(), d_g.get(), d_r.get(), R, D, d_dx.get(),
                             d_dg.get(), scratch.get(), s());
    expect_k(tp + "rmsnorm_bwd.dx", to_host(d_dx, s()), ref, 0);
    expect_k(tp + "rmsnorm_bwd.dg", to_host(d_dg, s()), ref, 1);
  }
  {  // split + gate SiLU
    const int64_t R = 20, di = 17;
    const auto P = q(uniform(R * 2 * di, 221, -8.0, 8.0));
    std::vector<float> xbP(sz(R * di)), zP(sz(R * di)), gsP(sz(R * di));
    mc::ref::split_gate_silu_fwd<float>(P.data(), R, di, xbP.data(), zP.data(), gsP.data());
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto Ps = as<S>(P);
          std::vector<S> xb(sz(R * di)), z(sz(R * di)), gs(sz(R * di));
          mc::ref::split_gate_silu_fwd<S>(Ps.data(), R, di, xb.data(), z.data(), gs.data());
          return std::vector<std::vector<S>>{store(dt, gs)};
        },
        221);
    auto d_P = to_device_typed<T>(P, "P", s());
    DeviceBuffer<T> d_xb(sz(R * di), "xb"), d_z(sz(R * di), "z"), d_gs(sz(R * di), "gs");
    mc::kern::split_gate_silu<T>(d_P.get(), R, di, d_xb.get(), d_z.get(), d_gs.get(), s());
    EXPECT_EQ(to_host_typed(d_xb, s()), xbP) << tp << "split x half";
    EXPECT_EQ(to_host_typed(d_z, s()), zP) << tp << "split gate half";
    expect_k(tp + "split_gate_silu.gs", to_host_typed(d_gs, s()), ref, 0, dt);
  }
  {  // conv forward (typed xb -> typed pc, u; f32 windows/state) and backward
    const int64_t B = 2, T_len = 70, di = 17, dc = 4, n = B * T_len * di;
    const auto xb = q(uniform(n, 231, -2.0, 2.0));
    const auto w = uniform(di * dc, 232, -1.0, 1.0), bias = uniform(di, 233, -0.5, 0.5);
    const auto st0 = uniform(B * di * dc, 234, -1.0, 1.0);
    std::vector<float> stP = st0, winP(sz(n * dc)), pcF(sz(n)), uF(sz(n));
    mc::ref::conv1d_silu_fwd<float>(xb.data(), w.data(), bias.data(), B, T_len, di, dc,
                                    stP.data(), winP.data(), pcF.data(), uF.data());
    const auto pcP = q(pcF);  // the backward's input below
    const StepRefs fref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto xs = as<S>(xb), ws = as<S>(w), bs = as<S>(bias);
          std::vector<S> st = as<S>(st0), win(sz(n * dc)), pc(sz(n)), u(sz(n));
          mc::ref::conv1d_silu_fwd<S>(xs.data(), ws.data(), bs.data(), B, T_len, di, dc, st.data(),
                                      win.data(), pc.data(), u.data());
          return std::vector<std::vector<S>>{store(dt, pc), store(dt, u)};  // u = q(SiLU(pc))
        },
        231);
    auto d_xb = to_device_typed<T>(xb, "xb", s());
    auto d_w = to_device(w, "w", s());
    auto d_b = to_device(bias, "bias", s());
    auto d_st = to_device(st0, "state", s());
    DeviceBuffer<float> d_win(sz(n * dc), "windows");
    DeviceBuffer<T> d_pc(sz(n), "pc"), d_u(sz(n), "u");
    mc::kern::conv1d_silu_fwd<T>(d_xb.get(), d_w.get(), d_b.get(), B, T_len, di, dc, d_st.get(),
                                 d_win.get(), d_pc.get(), d_u.get(), s());
    EXPECT_EQ(to_host(d_win, s()), winP) << tp << "conv windows";
    EXPECT_EQ(to_host(d_st, s()), stP) << tp << "conv final state";
    expect_k(tp + "conv_fwd.pc", to_host_typed(d_pc, s()), fref, 0, dt);
    expect_k(tp + "conv_fwd.u", to_host_typed(d_u, s()), fref, 1, dt);

    const auto du = q(uniform(n, 235, -1.0, 1.0));
    const StepRefs bref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto dus = as<S>(du), pcs = as<S>(pcP), wins = as<S>(winP), ws = as<S>(w);
          std::vector<S> dxb(sz(n)), dw(sz(di * dc), S(0)), db(sz(di), S(0)), ds0(sz(B * di * dc));
          mc::ref::conv1d_silu_bwd<S>(dus.data(), pcs.data(), wins.data(), ws.data(), B, T_len, di,
                                      dc, dxb.data(), dw.data(), db.data(), ds0.data());
          return std::vector<std::vector<S>>{store(dt, dxb), dw, db, ds0};
        },
        235);
    // The backward reads P's rounded pc and windows (not the kernel's own forward
    // outputs), so K, O and P start from identical values.
    auto d_du = to_device_typed<T>(du, "du", s());
    auto d_pcq = to_device_typed<T>(pcP, "pc_q", s());
    auto d_winq = to_device(winP, "windows_q", s());
    auto d_dw = to_device(std::vector<float>(sz(di * dc), 0.0f), "dw", s());
    auto d_db = to_device(std::vector<float>(sz(di), 0.0f), "db", s());
    DeviceBuffer<T> d_dxb(sz(n), "dxb");
    DeviceBuffer<float> d_ds0(sz(B * di * dc), "d_state0");
    DeviceBuffer<float> scratch(mc::kern::conv1d_silu_bwd_scratch_floats(B, T_len, di, dc), "scratch");
    mc::kern::conv1d_silu_bwd<T>(d_du.get(), d_pcq.get(), d_winq.get(), d_w.get(), B, T_len, di, dc,
                                 d_dxb.get(), d_dw.get(), d_db.get(), d_ds0.get(), scratch.get(),
                                 s());
    expect_k(tp + "conv_bwd.dxb", to_host_typed(d_dxb, s()), bref, 0, dt);
    expect_k(tp + "conv_bwd.dw", to_host(d_dw, s()), bref, 1);
    expect_k(tp + "conv_bwd.dbias", to_host(d_db, s()), bref, 2);
    expect_k(tp + "conv_bwd.d_state0", to_host(d_ds0, s()), bref, 3);
  }
  {  // softplus with the f32 bias: delta_raw = q(acc + b), delta = q(softplus(delta_raw))
    const int64_t R = 30, di = 16, n = R * di;
    const auto acc = uniform(n, 241, -30.0, 30.0), bias = uniform(di, 242, -2.0, 2.0);
    std::vector<float> rawP(sz(n));
    for (int64_t i = 0; i < n; ++i) rawP[sz(i)] = mc::round_to(dt, acc[sz(i)] + bias[sz(i % di)]);
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          std::vector<S> raw(sz(n)), delta(sz(n));
          for (int64_t i = 0; i < n; ++i) raw[sz(i)] = store(dt, S(acc[sz(i)]) + S(bias[sz(i % di)]));
          mc::ref::softplus_fwd<S>(raw.data(), n, delta.data());
          return std::vector<std::vector<S>>{store(dt, delta)};
        },
        241);
    auto d_acc = to_device(acc, "acc", s());
    auto d_b = to_device(bias, "bias", s());
    DeviceBuffer<T> d_raw(sz(n), "delta_raw"), d_delta(sz(n), "delta");
    mc::kern::softplus_bias_fwd<T>(d_acc.get(), d_b.get(), R, di, d_raw.get(), d_delta.get(), s());
    const auto rawK = to_host_typed(d_raw, s());
    EXPECT_EQ(rawK, rawP) << tp << "delta_raw is one RN rounding of the f32 acc + bias";
    expect_k(tp + "softplus_bias_fwd.delta", to_host_typed(d_delta, s()), ref, 0, dt);
  }
  {  // gating forward / backward
    const int64_t n = 999;
    const auto y = q(uniform(n, 251, -3.0, 3.0)), z = q(uniform(n, 252, -8.0, 8.0));
    const auto dG = q(uniform(n, 253, -1.0, 1.0));
    std::vector<float> gs(sz(n));
    for (int64_t i = 0; i < n; ++i) gs[sz(i)] = z[sz(i)] / (1.0f + std::exp(-z[sz(i)]));
    gs = q(gs);
    const StepRefs ref = step_refs(
        [&](auto tag) {
          using S = decltype(tag);
          const auto ys = as<S>(y), zs = as<S>(z), gss = as<S>(gs), dGs = as<S>(dG);
          std::vector<S> g(sz(n)), dY(sz(n)), dz(sz(n));
          mc::ref::gating_fwd<S>(ys.data(), gss.data(), n, g.data());
          mc::ref::gating_bwd<S>(dGs.data(), ys.data(), zs.data(), gss.data(), n, dY.data(),
                                 dz.data());
          return std::vector<std::vector<S>>{store(dt, g), store(dt, dY), store(dt, dz)};
        },
        251);
    auto d_y = to_device_typed<T>(y, "y", s());
    auto d_z = to_device_typed<T>(z, "z", s());
    auto d_gs = to_device_typed<T>(gs, "gs", s());
    auto d_dG = to_device_typed<T>(dG, "dG", s());
    DeviceBuffer<T> d_g(sz(n), "gated"), d_dY(sz(n), "dY"), d_dz(sz(n), "dz");
    mc::kern::gating_fwd<T>(d_y.get(), d_gs.get(), n, d_g.get(), s());
    mc::kern::gating_bwd<T>(d_dG.get(), d_y.get(), d_z.get(), d_gs.get(), n, d_dY.get(),
                            d_dz.get(), s());
    expect_k(tp + "gating_fwd", to_host_typed(d_g, s()), ref, 0, dt);
    expect_k(tp + "gating_bwd.dY", to_host_typed(d_dY, s()), ref, 1, dt);
    expect_k(tp + "gating_bwd.dz", to_host_typed(d_dz, s()), ref, 2, dt);
  }
}

TEST_F(StepParity, TypedKernelsBf16) { check_typed_kernels<__nv_bfloat16>(DType::BF16); }
TEST_F(StepParity, TypedKernelsF16) { check_typed_kernels<__half>(DType::F16); }

// ---- reductions ----------------------------------------------------------------------------

TEST_F(StepParity, ColumnSumFixedOrder) {
  // rows: one level, exactly one chunk, two levels, three levels (> 1024²).
  // (R = 1: the sum is one value, exact; otherwise >= 16 columns for the k-rule.)
  for (const auto [R, N] : {RowsDim{1, 5}, RowsDim{7, 33}, RowsDim{1024, 16}, RowsDim{1025, 40},
                            RowsDim{5000, 70}, RowsDim{1048577 + 4, 16}}) {
    const std::string tag = shape_tag({{"R", R}, {"N", N}});
    const auto src = uniform(R * N, 141 + R, -1.0, 1.0);
    const auto init = uniform(N, 142 + N, -1.0, 1.0);
    for (const bool accumulate : {false, true}) {
      const StepRefs ref = step_refs(
          [&](auto tag) {
            using S = decltype(tag);
            const auto srcs = as<S>(src);
            std::vector<S> out = accumulate ? as<S>(init) : std::vector<S>(sz(N), S(0));
            mc::ref::linear_bwd_db<S>(srcs.data(), R, N, out.data());
            return std::vector<std::vector<S>>{out};
          },
          141 + R);

      auto d_src = to_device(src, "partials", s());
      auto d_out = to_device(init, "out", s());
      DeviceBuffer<float> scratch(std::max<size_t>(1, mc::kern::column_sum_scratch_floats(R, N)),
                                  "scratch");
      mc::kern::reduce_sum_axis0(d_src.get(), R, N, d_out.get(), accumulate, scratch.get(), s());
      const auto first = to_host(d_out, s());
      expect_k(std::string("reduce_sum_axis0.") + (accumulate ? "acc." : "set.") + tag, first, ref, 0);
      d_out.upload(init.data(), init.size(), s());
      mc::kern::reduce_sum_axis0(d_src.get(), R, N, d_out.get(), accumulate, scratch.get(), s());
      const auto second = to_host(d_out, s());
      EXPECT_EQ(mc::check::first_bit_difference(first.data(), second.data(), N).index, -1)
          << "reduce_sum_axis0 not bitwise reproducible at " << tag;
    }
  }
}

TEST_F(StepParity, FirstNonFiniteReportsSmallestIndex) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t n : {1, 1000, 3000001}) {
    std::vector<float> v = uniform(n, 151 + n, -1.0, 1.0);
    auto d = to_device(v, "buf", s());
    DeviceBuffer<unsigned char> scratch(mc::kern::first_nonfinite_scratch_bytes(n), "scratch");
    EXPECT_EQ(mc::kern::first_nonfinite<float>(d.get(), n, scratch.get(), s()), -1) << n;
    // bad values in several blocks; the smallest index wins
    const int64_t bad[] = {n - 1, n / 2, n / 3 + 1};
    int64_t want = n;
    for (size_t i = 0; i < 3; ++i) {
      if (bad[i] >= n) continue;
      v[size_t(bad[i])] = i % 2 ? inf : nan;
      want = std::min(want, bad[i]);
    }
    d.upload(v.data(), v.size(), s());
    EXPECT_EQ(mc::kern::first_nonfinite<float>(d.get(), n, scratch.get(), s()), want) << n;
    // a run of non-finite values from n/4 on: every thread of the grid-stride loop
    // meets several, and the smallest index must still win (not a thread's last hit)
    for (int64_t i = n / 4; i < n; ++i) v[size_t(i)] = nan;
    d.upload(v.data(), v.size(), s());
    EXPECT_EQ(mc::kern::first_nonfinite<float>(d.get(), n, scratch.get(), s()),
              std::min(want, n / 4))
        << n << " (a run of non-finite values from n/4)";
  }
  // typed: an f16 overflow (70000 -> inf) is found in the typed buffer
  std::vector<float> v = uniform(5000, 152, -1.0, 1.0);
  v[4321] = 70000.0f;
  auto d = to_device(v, "src", s());
  DeviceBuffer<__half> h(v.size(), "typed");
  mc::kern::cast_from_f32<__half>(d.get(), int64_t(v.size()), h.get(), s());
  DeviceBuffer<unsigned char> scratch(mc::kern::first_nonfinite_scratch_bytes(5000), "scratch");
  EXPECT_EQ(mc::kern::first_nonfinite<__half>(h.get(), 5000, scratch.get(), s()), 4321);
}

// ---- refusals (no device needed) ------------------------------------------------------------

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mc::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(StepRefusals, ConvRefusesDConv9NamingTheField) {
  const std::string msg = message_of([] {
    mc::kern::conv1d_silu_fwd<float>(nullptr, nullptr, nullptr, 1, 4, 8, 9, nullptr, nullptr,
                                      nullptr, nullptr, nullptr);
  });
  ASSERT_FALSE(msg.empty()) << "conv1d_silu_fwd with d_conv = 9 did not throw ConfigError";
  EXPECT_NE(msg.find("d_conv"), std::string::npos) << msg;
  EXPECT_NE(msg.find("9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8"), std::string::npos) << msg;
  const std::string msg_bwd = message_of([] {
    mc::kern::conv1d_silu_bwd<float>(nullptr, nullptr, nullptr, nullptr, 1, 4, 8, 9, nullptr,
                                     nullptr, nullptr, nullptr, nullptr, nullptr);
  });
  EXPECT_NE(msg_bwd.find("d_conv = 9"), std::string::npos) << msg_bwd;
}

TEST(StepRefusals, ModelRefusesDConv9NamingTheField) {
  mc::ModelConfig cfg;
  cfg.d_conv = 9;
  const std::string msg =
      message_of([&] { mc::gpu::Model m(cfg, 1, 4, mc::gpu::RunOptions{}); });
  ASSERT_FALSE(msg.empty()) << "Model with d_conv = 9 did not throw ConfigError";
  EXPECT_NE(msg.find("d_conv = 9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8"), std::string::npos) << msg;
}

TEST(StepRefusals, LaunchersRefuseBadShapesAndNullPointers) {
  EXPECT_FALSE(message_of([] {
                 mc::kern::rmsnorm_fwd<float>(nullptr, nullptr, 0, 4, 1e-5, nullptr, nullptr,
                                              nullptr);
               }).empty());
  EXPECT_NE(message_of([] {
              mc::kern::gating_fwd<float>(nullptr, nullptr, 5, nullptr, nullptr);
            }).find("is null"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              mc::kern::gather_cols<float>(nullptr, 3, 4, 2, 3, nullptr, nullptr);
            }).find("offset + width"),
            std::string::npos);
}

}  // namespace
