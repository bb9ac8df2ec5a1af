// ctest-labels: gpu
// test_step_parity.cpp — every non-scan GPU kernel and GEMM role (f32) against
// the matching ref:: step of the CPU oracle on the same inputs.
//
// Rule (compare.hpp): K = GPU kernel, O = ref step in double on the same f32
// inputs, P = ref step in float (same-precision baseline);
//   pass  <=>  max|K − O| <= kF32KLimit · max|P − O| + atol   (atol = 2 ulp at max|O|).
// The measured k is printed and recorded (RecordProperty "k.<tensor>").
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

#include "check/compare.hpp"
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

  // The k-rule of compare.hpp for one tensor stored as `dtype` (F32: the f32
  // rule with kF32KLimit; BF16/F16: kTypedKLimit); prints and records k.
  void expect_k(const std::string& tensor, const std::vector<float>& K,
                const std::vector<double>& O, const std::vector<float>& P,
                DType dtype = DType::F32) {
    ASSERT_EQ(K.size(), O.size()) << tensor;
    ASSERT_EQ(P.size(), O.size()) << tensor;
    const double limit = dtype == DType::F32 ? mc::check::kF32KLimit : mc::check::kTypedKLimit;
    const auto r = mc::check::k_rule(tensor, K, O, P, dtype, limit);
    std::cout << "  " << r.summary() << "\n";
    RecordProperty("k." + tensor, std::to_string(r.k));
    EXPECT_TRUE(r.pass) << r.summary();
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
    std::vector<float> yP(sz(R * D)), rmsP(sz(R));
    std::vector<double> yO(sz(R * D)), rmsO(sz(R));
    mc::ref::rmsnorm_fwd<float>(x.data(), g.data(), R, D, eps, yP.data(), rmsP.data());
    const auto xd = to_double(x), gd = to_double(g);
    mc::ref::rmsnorm_fwd<double>(xd.data(), gd.data(), R, D, eps, yO.data(), rmsO.data());

    auto dx = to_device(x, "x", s());
    auto dg = to_device(g, "g", s());
    DeviceBuffer<float> dy(sz(R * D), "y"), drms(sz(R), "rms");
    mc::kern::rmsnorm_fwd<float>(dx.get(), dg.get(), R, D, eps, dy.get(), drms.get(), s());
    expect_k("rmsnorm_fwd.y." + tag, to_host(dy, s()), yO, yP);
    expect_k("rmsnorm_fwd.rms." + tag, to_host(drms, s()), rmsO, rmsP);
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

    std::vector<float> dxP(sz(R * D)), dgP = dg0;
    mc::ref::rmsnorm_bwd<float>(dyv.data(), x.data(), g.data(), rms.data(), R, D, dxP.data(),
                                dgP.data());
    const auto xd = to_double(x), gd = to_double(g), dyd = to_double(dyv), rmsd = to_double(rms);
    std::vector<double> dxO(sz(R * D)), dgO = to_double(dg0);
    mc::ref::rmsnorm_bwd<double>(dyd.data(), xd.data(), gd.data(), rmsd.data(), R, D, dxO.data(),
                                 dgO.data());

    auto d_dy = to_device(dyv, "dy", s());
    auto d_x = to_device(x, "x", s());
    auto d_g = to_device(g, "g", s());
    auto d_rms = to_device(rms, "rms", s());
    auto d_dg = to_device(dg0, "dg", s());
    DeviceBuffer<float> d_dx(sz(R * D), "dx");
    DeviceBuffer<float> scratch(mc::kern::rmsnorm_bwd_scratch_floats(R, D), "scratch");
    mc::kern::rmsnorm_bwd<float>(d_dy.get(), d_x.get(), d_g.get(), d_rms.get(), R, D, d_dx.get(),
                                 d_dg.get(), scratch.get(), s());
    expect_k("rmsnorm_bwd.dx." + tag, to_host(d_dx, s()), dxO, dxP);
    const auto dg_first = to_host(d_dg, s());
    expect_k("rmsnorm_bwd.dg." + tag, dg_first, dgO, dgP);

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
    std::vector<float> YP(sz(M * N));
    mc::ref::linear_fwd<float>(X.data(), W.data(), b.data(), M, K, N, YP.data());
    const auto Xd = to_double(X), Wd = to_double(W), bd = to_double(b);
    std::vector<double> YO(sz(M * N));
    mc::ref::linear_fwd<double>(Xd.data(), Wd.data(), bd.data(), M, K, N, YO.data());

    auto dX = to_device(Xs, "X", s());
    auto dW = to_device(W, "W", s());
    auto db = to_device(b, "b", s());
    DeviceBuffer<float> dY(sz(M * N), "Y");
    gemm.forward<float, float>("test forward", dX.get(), ldx, dW.get(), dY.get(), N, M, K, N);
    mc::kern::bias_add_round<float>(dY.get(), db.get(), M, N, s());
    expect_k("gemm_fwd_bias.Y." + tag, to_host(dY, s()), YO, YP);
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
    std::vector<float> dXP(sz(M * K)), dWP = dW0;
    mc::ref::linear_bwd_dx<float>(dYv.data(), W.data(), M, K, N, dXP.data());
    mc::ref::linear_bwd_dw<float>(X.data(), dYv.data(), M, K, N, dWP.data());
    const auto Xd = to_double(X), Wd = to_double(W), dYd = to_double(dYv);
    std::vector<double> dXO(sz(M * K)), dWO = to_double(dW0);
    mc::ref::linear_bwd_dx<double>(dYd.data(), Wd.data(), M, K, N, dXO.data());
    mc::ref::linear_bwd_dw<double>(Xd.data(), dYd.data(), M, K, N, dWO.data());

    auto d_X = to_device(X, "X", s());
    auto d_W = to_device(W, "W", s());
    auto d_dY = to_device(dYv, "dY", s());
    auto d_dW = to_device(dW0, "dW", s());
    DeviceBuffer<float> d_dX(sz(M * K), "dX");
    gemm.input_grad<float, float>("test dX", d_dY.get(), d_W.get(), d_dX.get(), M, K, N);
    gemm.weight_grad<float>("test dW", d_X.get(), K, d_dY.get(), d_dW.get(), M, K, N);
    expect_k("gemm_dx." + tag, to_host(d_dX, s()), dXO, dXP);
    expect_k("gemm_dw_accumulate." + tag, to_host(d_dW, s()), dWO, dWP);
  }
}

// ---- split / concat -------------------------------------------------------------------

TEST_F(StepParity, SplitGateSiluAndConcatHalves) {
  for (const auto [R, di] : {RowsDim{1, 1}, RowsDim{13, 7}, RowsDim{300, 33}}) {
    const std::string tag = shape_tag({{"R", R}, {"di", di}});
    const auto P = uniform(R * 2 * di, 51 + R, -8.0, 8.0);
    std::vector<float> xbP(sz(R * di)), zP(sz(R * di)), gsP(sz(R * di));
    mc::ref::split_gate_silu_fwd<float>(P.data(), R, di, xbP.data(), zP.data(), gsP.data());
    const auto Pd = to_double(P);
    std::vector<double> xbO(sz(R * di)), zO(sz(R * di)), gsO(sz(R * di));
    mc::ref::split_gate_silu_fwd<double>(Pd.data(), R, di, xbO.data(), zO.data(), gsO.data());

    auto dP = to_device(P, "P", s());
    DeviceBuffer<float> dxb(sz(R * di), "xb"), dz(sz(R * di), "z"), dgs(sz(R * di), "gs");
    mc::kern::split_gate_silu<float>(dP.get(), R, di, dxb.get(), dz.get(), dgs.get(), s());
    const auto xbK = to_host(dxb, s()), zK = to_host(dz, s());
    EXPECT_EQ(xbK, xbP) << "split x half is a copy: " << tag;
    EXPECT_EQ(zK, zP) << "split gate half is a copy: " << tag;
    expect_k("split_gate_silu.gs." + tag, to_host(dgs, s()), gsO, gsP);

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
    const auto xbd = to_double(xb), wd = to_double(w), bd = to_double(bias);
    std::vector<double> stO = to_double(state0), winO(sz(n * dc)), pcO(sz(n)), uO(sz(n));
    mc::ref::conv1d_silu_fwd<double>(xbd.data(), wd.data(), bd.data(), B, T, di, dc, stO.data(),
                                     winO.data(), pcO.data(), uO.data());

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
    expect_k("conv_fwd.pc." + tag, to_host(d_pc, s()), pcO, pcP);
    expect_k("conv_fwd.u." + tag, to_host(d_u, s()), uO, uP);

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

    std::vector<float> dxbP(sz(n)), dwP = dw0, dbP = db0, ds0P(sz(B * di * dc));
    mc::ref::conv1d_silu_bwd<float>(du.data(), pc.data(), win.data(), w.data(), B, T, di, dc,
                                    dxbP.data(), dwP.data(), dbP.data(), ds0P.data());
    const auto dud = to_double(du), pcd = to_double(pc), wind = to_double(win), wd = to_double(w);
    std::vector<double> dxbO(sz(n)), dwO = to_double(dw0), dbO = to_double(db0),
                        ds0O(sz(B * di * dc));
    mc::ref::conv1d_silu_bwd<double>(dud.data(), pcd.data(), wind.data(), wd.data(), B, T, di, dc,
                                     dxbO.data(), dwO.data(), dbO.data(), ds0O.data());

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
    expect_k("conv_bwd.dxb." + tag, to_host(d_dxb, s()), dxbO, dxbP);
    const auto dw_first = to_host(d_dw, s());
    expect_k("conv_bwd.dw." + tag, dw_first, dwO, dwP);
    expect_k("conv_bwd.dbias." + tag, to_host(d_db, s()), dbO, dbP);
    const auto ds0K = to_host(d_ds0, s());
    expect_k("conv_bwd.d_state0." + tag, ds0K, ds0O, ds0P);
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
    std::vector<float> xP(sz(R * di));
    std::vector<double> xO(sz(R * di));
    for (int64_t i = 0; i < R * di; ++i) {
      xP[size_t(i)] = acc[size_t(i)] + bias[size_t(i % di)];
      xO[size_t(i)] = double(acc[size_t(i)]) + double(bias[size_t(i % di)]);
    }
    std::vector<float> yP(sz(R * di));
    std::vector<double> yO(sz(R * di));
    mc::ref::softplus_fwd<float>(xP.data(), R * di, yP.data());
    mc::ref::softplus_fwd<double>(xO.data(), R * di, yO.data());

    auto d_acc = to_device(acc, "acc", s());
    auto d_b = to_device(bias, "bias", s());
    DeviceBuffer<float> d_raw(sz(R * di), "delta_raw"), d_delta(sz(R * di), "delta");
    mc::kern::softplus_bias_fwd<float>(d_acc.get(), d_b.get(), R, di, d_raw.get(), d_delta.get(), s());
    const auto rawK = to_host(d_raw, s());
    expect_k("softplus_bias_fwd.delta_raw." + tag, rawK, xO, xP);
    expect_k("softplus_bias_fwd.delta." + tag, to_host(d_delta, s()), yO, yP);

    // Backward on the stored delta_raw.
    const auto dd = uniform(R * di, 83 + R, -1.0, 1.0);
    std::vector<float> dxP(sz(R * di));
    mc::ref::softplus_bwd<float>(rawK.data(), dd.data(), R * di, dxP.data());
    const auto rawd = to_double(rawK), ddd = to_double(dd);
    std::vector<double> dxO(sz(R * di));
    mc::ref::softplus_bwd<double>(rawd.data(), ddd.data(), R * di, dxO.data());
    auto d_dd = to_device(dd, "d_delta", s());
    DeviceBuffer<float> d_dx(sz(R * di), "d_delta_raw");
    mc::kern::softplus_bwd<float>(d_raw.get(), d_dd.get(), R * di, d_dx.get(), s());
    expect_k("softplus_bwd." + tag, to_host(d_dx, s()), dxO, dxP);
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
    std::vector<float> gP(sz(n)), dYP(sz(n)), dzP(sz(n));
    mc::ref::gating_fwd<float>(y.data(), gs.data(), n, gP.data());
    mc::ref::gating_bwd<float>(dG.data(), y.data(), z.data(), gs.data(), n, dYP.data(), dzP.data());
    const auto yd = to_double(y), zd = to_double(z), gsd = to_double(gs), dGd = to_double(dG);
    std::vector<double> gO(sz(n)), dYO(sz(n)), dzO(sz(n));
    mc::ref::gating_fwd<double>(yd.data(), gsd.data(), n, gO.data());
    mc::ref::gating_bwd<double>(dGd.data(), yd.data(), zd.data(), gsd.data(), n, dYO.data(),
                                dzO.data());

    auto d_y = to_device(y, "y", s());
    auto d_z = to_device(z, "z", s());
    auto d_gs = to_device(gs, "gs", s());
    auto d_dG = to_device(dG, "dG", s());
    DeviceBuffer<float> d_g(sz(n), "gated"), d_dY(sz(n), "dY"), d_dz(sz(n), "dz");
    mc::kern::gating_fwd<float>(d_y.get(), d_gs.get(), n, d_g.get(), s());
    mc::kern::gating_bwd<float>(d_dG.get(), d_y.get(), d_z.get(), d_gs.get(), n, d_dY.get(),
                                d_dz.get(), s());
    expect_k("gating_fwd." + tag, to_host(d_g, s()), gO, gP);
    expect_k("gating_bwd.dY." + tag, to_host(d_dY, s()), dYO, dYP);
    expect_k("gating_bwd.dz." + tag, to_host(d_dz, s()), dzO, dzP);
  }
}

TEST_F(StepParity, ResidualAddAndAddInplace) {
  const int64_t n = 4099;
  const auto a = uniform(n, 101, -10.0, 10.0);
  const auto b = uniform(n, 102, -1.0, 1.0);
  std::vector<float> P(sz(n));
  mc::ref::residual_add<float>(a.data(), b.data(), n, P.data());
  const auto ad = to_double(a), bd = to_double(b);
  std::vector<double> O(sz(n));
  mc::ref::residual_add<double>(ad.data(), bd.data(), n, O.data());

  auto d_a = to_device(a, "a", s());
  auto d_b = to_device(b, "b", s());
  DeviceBuffer<float> d_out(sz(n), "out");
  mc::kern::residual_add<float>(d_a.get(), d_b.get(), n, d_out.get(), s());
  expect_k("residual_add", to_host(d_out, s()), O, P);
  // aliasing out = a (the backward's dH += dHn)
  mc::kern::residual_add<float>(d_a.get(), d_b.get(), n, d_a.get(), s());
  expect_k("residual_add.in_place", to_host(d_a, s()), O, P);
  // add_inplace (dU += dU_x)
  auto d_c = to_device(a, "c", s());
  mc::kern::add_inplace<float>(d_c.get(), d_b.get(), n, s());
  expect_k("add_inplace", to_host(d_c, s()), O, P);
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
  std::vector<float> P = src;
  mc::ref::scatter_add_cols<float>(add.data(), R, xd, dr, ds, P.data());
  std::vector<double> O = to_double(src);
  const auto addd = to_double(add);
  mc::ref::scatter_add_cols<double>(addd.data(), R, xd, dr, ds, O.data());
  auto d_add = to_device(add, "add", s());
  mc::kern::scatter_add_cols<float>(d_add.get(), R, xd, dr, ds, d_src.get(), s());
  expect_k("scatter_add_cols", to_host(d_src, s()), O, P);

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
  std::vector<float> P(sz(n));
  mc::ref::exp_negate<float>(a_log.data(), n, P.data());
  const auto ad = to_double(a_log);
  std::vector<double> O(sz(n));
  mc::ref::exp_negate<double>(ad.data(), n, O.data());
  auto d_al = to_device(a_log, "a_log", s());
  DeviceBuffer<float> d_an(sz(n), "a_neg");
  mc::kern::exp_negate(d_al.get(), n, d_an.get(), s());
  expect_k("exp_negate", to_host(d_an, s()), O, P);
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
    std::vector<float> yP(sz(R * D)), rmsP(sz(R));
    mc::ref::rmsnorm_fwd<float>(x.data(), g.data(), R, D, 1e-5, yP.data(), rmsP.data());
    yP = q(yP);
    const auto xd = to_double(x), gd = to_double(g);
    std::vector<double> yO(sz(R * D)), rmsO(sz(R));
    mc::ref::rmsnorm_fwd<double>(xd.data(), gd.data(), R, D, 1e-5, yO.data(), rmsO.data());
    auto d_x = to_device(x, "x", s());
    auto d_g = to_device(g, "g", s());
    DeviceBuffer<T> d_y(sz(R * D), "y");
    DeviceBuffer<float> d_rms(sz(R), "rms");
    mc::kern::rmsnorm_fwd<T>(d_x.get(), d_g.get(), R, D, 1e-5, d_y.get(), d_rms.get(), s());
    expect_k(tp + "rmsnorm_fwd.y", to_host_typed(d_y, s()), yO, yP, dt);
    expect_k(tp + "rmsnorm_fwd.rms", to_host(d_rms, s()), rmsO, rmsP);
  }
  {  // RMSNorm backward: typed dy, f32 x -> f32 dx, dg
    const int64_t R = 40, D = 24;
    const auto x = uniform(R * D, 211, -2.0, 2.0), g = uniform(D, 212, 0.5, 1.5);
    const auto dy = q(uniform(R * D, 213, -1.0, 1.0));
    std::vector<float> rms(sz(R)), tmp(sz(R * D));
    mc::ref::rmsnorm_fwd<float>(x.data(), g.data(), R, D, 1e-5, tmp.data(), rms.data());
    std::vector<float> dxP(sz(R * D)), dgP(sz(D), 0.0f);
    mc::ref::rmsnorm_bwd<float>(dy.data(), x.data(), g.data(), rms.data(), R, D, dxP.data(),
                                dgP.data());
    const auto dyd = to_double(dy), xd = to_double(x), gd = to_double(g), rd = to_double(rms);
    std::vector<double> dxO(sz(R * D)), dgO(sz(D), 0.0);
    mc::ref::rmsnorm_bwd<double>(dyd.data(), xd.data(), gd.data(), rd.data(), R, D, dxO.data(),
                                 dgO.data());
    auto d_dy = to_device_typed<T>(dy, "dy", s());
    auto d_x = to_device(x, "x", s());
    auto d_g = to_device(g, "g", s());
    auto d_r = to_device(rms, "rms", s());
    DeviceBuffer<float> d_dx(sz(R * D), "dx");
    auto d_dg = to_device(std::vector<float>(sz(D), 0.0f), "dg", s());
    DeviceBuffer<float> scratch(mc::kern::rmsnorm_bwd_scratch_floats(R, D), "scratch");
    mc::kern::rmsnorm_bwd<T>(d_dy.get(), d_x.get(), d_g.get(), d_r.get(), R, D, d_dx.get(),
                             d_dg.get(), scratch.get(), s());
    expect_k(tp + "rmsnorm_bwd.dx", to_host(d_dx, s()), dxO, dxP);
    expect_k(tp + "rmsnorm_bwd.dg", to_host(d_dg, s()), dgO, dgP);
  }
  {  // split + gate SiLU
    const int64_t R = 20, di = 17;
    const auto P = q(uniform(R * 2 * di, 221, -8.0, 8.0));
    std::vector<float> xbP(sz(R * di)), zP(sz(R * di)), gsP(sz(R * di));
    mc::ref::split_gate_silu_fwd<float>(P.data(), R, di, xbP.data(), zP.data(), gsP.data());
    gsP = q(gsP);
    const auto Pd = to_double(P);
    std::vector<double> xbO(sz(R * di)), zO(sz(R * di)), gsO(sz(R * di));
    mc::ref::split_gate_silu_fwd<double>(Pd.data(), R, di, xbO.data(), zO.data(), gsO.data());
    auto d_P = to_device_typed<T>(P, "P", s());
    DeviceBuffer<T> d_xb(sz(R * di), "xb"), d_z(sz(R * di), "z"), d_gs(sz(R * di), "gs");
    mc::kern::split_gate_silu<T>(d_P.get(), R, di, d_xb.get(), d_z.get(), d_gs.get(), s());
    EXPECT_EQ(to_host_typed(d_xb, s()), xbP) << tp << "split x half";
    EXPECT_EQ(to_host_typed(d_z, s()), zP) << tp << "split gate half";
    expect_k(tp + "split_gate_silu.gs", to_host_typed(d_gs, s()), gsO, gsP, dt);
  }
  {  // conv forward (typed xb -> typed pc, u; f32 windows/state) and backward
    const int64_t B = 2, T_len = 70, di = 17, dc = 4, n = B * T_len * di;
    const auto xb = q(uniform(n, 231, -2.0, 2.0));
    const auto w = uniform(di * dc, 232, -1.0, 1.0), bias = uniform(di, 233, -0.5, 0.5);
    const auto st0 = uniform(B * di * dc, 234, -1.0, 1.0);
    std::vector<float> stP = st0, winP(sz(n * dc)), pcF(sz(n)), uF(sz(n));
    mc::ref::conv1d_silu_fwd<float>(xb.data(), w.data(), bias.data(), B, T_len, di, dc,
                                    stP.data(), winP.data(), pcF.data(), uF.data());
    const auto pcP = q(pcF), uP = q(uF);  // u = q(SiLU(unrounded pc))
    const auto xbd = to_double(xb), wd = to_double(w), bd = to_double(bias);
    std::vector<double> stO = to_double(st0), winO(sz(n * dc)), pcO(sz(n)), uO(sz(n));
    mc::ref::conv1d_silu_fwd<double>(xbd.data(), wd.data(), bd.data(), B, T_len, di, dc,
                                     stO.data(), winO.data(), pcO.data(), uO.data());
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
    expect_k(tp + "conv_fwd.pc", to_host_typed(d_pc, s()), pcO, pcP, dt);
    expect_k(tp + "conv_fwd.u", to_host_typed(d_u, s()), uO, uP, dt);

    const auto du = q(uniform(n, 235, -1.0, 1.0));
    std::vector<float> dxbP(sz(n)), dwP(sz(di * dc), 0.0f), dbP(sz(di), 0.0f), ds0P(sz(B * di * dc));
    mc::ref::conv1d_silu_bwd<float>(du.data(), pcP.data(), winP.data(), w.data(), B, T_len, di, dc,
                                    dxbP.data(), dwP.data(), dbP.data(), ds0P.data());
    dxbP = q(dxbP);
    const auto dud = to_double(du), pcd = to_double(pcP), wind = to_double(winP);
    std::vector<double> dxbO(sz(n)), dwO(sz(di * dc), 0.0), dbO(sz(di), 0.0), ds0O(sz(B * di * dc));
    mc::ref::conv1d_silu_bwd<double>(dud.data(), pcd.data(), wind.data(), wd.data(), B, T_len, di,
                                     dc, dxbO.data(), dwO.data(), dbO.data(), ds0O.data());
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
    expect_k(tp + "conv_bwd.dxb", to_host_typed(d_dxb, s()), dxbO, dxbP, dt);
    expect_k(tp + "conv_bwd.dw", to_host(d_dw, s()), dwO, dwP);
    expect_k(tp + "conv_bwd.dbias", to_host(d_db, s()), dbO, dbP);
    expect_k(tp + "conv_bwd.d_state0", to_host(d_ds0, s()), ds0O, ds0P);
  }
  {  // softplus with the f32 bias: delta_raw = q(acc + b), delta = q(softplus(delta_raw))
    const int64_t R = 30, di = 16, n = R * di;
    const auto acc = uniform(n, 241, -30.0, 30.0), bias = uniform(di, 242, -2.0, 2.0);
    std::vector<float> rawP(sz(n)), deltaP(sz(n));
    std::vector<double> rawO(sz(n)), deltaO(sz(n));
    for (int64_t i = 0; i < n; ++i) {
      rawP[sz(i)] = mc::round_to(dt, acc[sz(i)] + bias[sz(i % di)]);
      rawO[sz(i)] = double(acc[sz(i)]) + double(bias[sz(i % di)]);
    }
    mc::ref::softplus_fwd<float>(rawP.data(), n, deltaP.data());
    deltaP = q(deltaP);
    mc::ref::softplus_fwd<double>(rawO.data(), n, deltaO.data());
    auto d_acc = to_device(acc, "acc", s());
    auto d_b = to_device(bias, "bias", s());
    DeviceBuffer<T> d_raw(sz(n), "delta_raw"), d_delta(sz(n), "delta");
    mc::kern::softplus_bias_fwd<T>(d_acc.get(), d_b.get(), R, di, d_raw.get(), d_delta.get(), s());
    const auto rawK = to_host_typed(d_raw, s());
    EXPECT_EQ(rawK, rawP) << tp << "delta_raw is one RN rounding of the f32 acc + bias";
    expect_k(tp + "softplus_bias_fwd.delta", to_host_typed(d_delta, s()), deltaO, deltaP, dt);
  }
  {  // gating forward / backward
    const int64_t n = 999;
    const auto y = q(uniform(n, 251, -3.0, 3.0)), z = q(uniform(n, 252, -8.0, 8.0));
    const auto dG = q(uniform(n, 253, -1.0, 1.0));
    std::vector<float> gs(sz(n));
    for (int64_t i = 0; i < n; ++i) gs[sz(i)] = z[sz(i)] / (1.0f + std::exp(-z[sz(i)]));
    gs = q(gs);
    std::vector<float> gP(sz(n)), dYP(sz(n)), dzP(sz(n));
    mc::ref::gating_fwd<float>(y.data(), gs.data(), n, gP.data());
    mc::ref::gating_bwd<float>(dG.data(), y.data(), z.data(), gs.data(), n, dYP.data(), dzP.data());
    gP = q(gP);
    dYP = q(dYP);
    dzP = q(dzP);
    const auto yd = to_double(y), zd = to_double(z), gsd = to_double(gs), dGd = to_double(dG);
    std::vector<double> gO(sz(n)), dYO(sz(n)), dzO(sz(n));
    mc::ref::gating_fwd<double>(yd.data(), gsd.data(), n, gO.data());
    mc::ref::gating_bwd<double>(dGd.data(), yd.data(), zd.data(), gsd.data(), n, dYO.data(),
                                dzO.data());
    auto d_y = to_device_typed<T>(y, "y", s());
    auto d_z = to_device_typed<T>(z, "z", s());
    auto d_gs = to_device_typed<T>(gs, "gs", s());
    auto d_dG = to_device_typed<T>(dG, "dG", s());
    DeviceBuffer<T> d_g(sz(n), "gated"), d_dY(sz(n), "dY"), d_dz(sz(n), "dz");
    mc::kern::gating_fwd<T>(d_y.get(), d_gs.get(), n, d_g.get(), s());
    mc::kern::gating_bwd<T>(d_dG.get(), d_y.get(), d_z.get(), d_gs.get(), n, d_dY.get(),
                            d_dz.get(), s());
    expect_k(tp + "gating_fwd", to_host_typed(d_g, s()), gO, gP, dt);
    expect_k(tp + "gating_bwd.dY", to_host_typed(d_dY, s()), dYO, dYP, dt);
    expect_k(tp + "gating_bwd.dz", to_host_typed(d_dz, s()), dzO, dzP, dt);
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
      std::vector<float> P = accumulate ? init : std::vector<float>(sz(N), 0.0f);
      mc::ref::linear_bwd_db<float>(src.data(), R, N, P.data());
      std::vector<double> O = accumulate ? to_double(init) : std::vector<double>(sz(N), 0.0);
      const auto srcd = to_double(src);
      mc::ref::linear_bwd_db<double>(srcd.data(), R, N, O.data());

      auto d_src = to_device(src, "partials", s());
      auto d_out = to_device(init, "out", s());
      DeviceBuffer<float> scratch(std::max<size_t>(1, mc::kern::column_sum_scratch_floats(R, N)),
                                  "scratch");
      mc::kern::reduce_sum_axis0(d_src.get(), R, N, d_out.get(), accumulate, scratch.get(), s());
      const auto first = to_host(d_out, s());
      expect_k(std::string("reduce_sum_axis0.") + (accumulate ? "acc." : "set.") + tag, first, O, P);
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
