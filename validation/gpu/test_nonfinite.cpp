// ctest-labels: gpu
// test_nonfinite.cpp — the non-finite detector of the GPU pipeline
// (RunOptions::check_finite, gpu/finite_check.hpp): every step's outputs are
// scanned and the first NaN/Inf is thrown as gpu::NonFiniteError naming the
// step, the tensor, the first bad (flat) index, and whether a finite value
// overflowed the f16 storage dtype. Asserted here:
//  (i)   a NaN (or Inf) planted in X, in one weight, in an initial state or in
//        the upstream gradient is reported at step "input" with that tensor
//        and the index of the FIRST planted element (a second, later one is
//        planted too), for f32, bf16 and f16, and not as an overflow;
//  (ii)  f16 runs whose activations or gradients leave f16's range are
//        reported with overflow = true at the step that produced them, at the
//        predicted first index — a huge out_proj weight (forward, typed GEMM
//        output), a huge input row (forward, input_proj output H0, which is
//        rounded to f16 but kept in an f32 buffer), a huge upstream-gradient
//        row (backward) — while the very same inputs run clean in bf16 and
//        f32; without check_finite the f16 run silently returns non-finite
//        numbers, i.e. it would surface only as a precision failure;
//  (iii) a clean run with check_finite on is bitwise identical to the same
//        run with it off (every output, state and gradient), per dtype and
//        scan mode.
// The bf16/f16 GEMMs run on the tier MAMBACHECK_TYPED_GEMM names (default tensor-core;
// scripts/sanitize.sh sets strict for initcheck, see there).
// Where a prediction is needed (which element overflows first), it comes from
// the CPU oracle in double on the same inputs, and the scale factors are
// powers of two, so scaled inputs stay exactly representable in every dtype;
// the test refuses (ASSERT) a setup whose first overflowing element is not
// separated from the threshold by a 5% margin.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "validation/support/gpu_test.hpp"
#include "reference_cpu/model.hpp"
#include "check/model_check.hpp"
#include "core/param_layout.hpp"
#include "gpu/model.hpp"
#include "reference_cpu/steps.hpp"
#include "core/storage.hpp"

namespace mc::testing {
namespace {

using check::ModelInputs;
using check::ModelOutputs;

class NonFinite : public GpuTest {};

constexpr double kF16Overflow = 65520.0;  // |v| >= this rounds (RN) to inf in f16
constexpr double kMargin = 1.05;          // separation of the predicted first overflow
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// dm 32, di 64, ds 16, dc 4, mid 64 (wide enough for the input-row case), B 2, T 33.
ModelConfig small_cfg(int layers = 1) {
  ModelConfig c;
  c.d_model = 32;
  c.d_state = 16;
  c.d_conv = 4;
  c.expand = 2;
  c.n_layers = layers;
  c.input_dim = 64;
  return c;
}
constexpr int64_t kB = 2, kT = 33;
constexpr uint64_t kSeed = 77;

const DType kAllDtypes[] = {DType::F32, DType::BF16, DType::F16};

std::string ctx(DType t, ScanMode m = ScanMode::Auto) {
  return std::string("dtype=") + to_string(t) + " scan=" + to_string(m);
}

// gpu_run on the GEMM tier of this process (typed_gemm_from_env).
ModelOutputs<float> run(const ModelInputs& in, ScanMode m, bool check_finite) {
  return check::gpu_run(in, m, gpu::GemmMath::F32, check_finite, ScanExp::Auto,
                        typed_gemm_from_env());
}

// A Model's options for the tests that drive forward and backward themselves: check_finite,
// state gradients, and the GEMM tier of this process, as run() above has it.
gpu::RunOptions checked_options(DType t) {
  gpu::RunOptions opt;
  opt.dtype = t;
  opt.check_finite = true;
  opt.state_grads = true;
  opt.typed_gemm = typed_gemm_from_env();
  return opt;
}

// Runs gpu_run with check_finite and returns the error it threw (or fails).
gpu::NonFiniteError expect_nonfinite(const ModelInputs& in, const std::string& what) {
  try {
    run(in, ScanMode::Auto, /*check_finite=*/true);
  } catch (const gpu::NonFiniteError& e) {
    return e;
  }
  ADD_FAILURE() << what << ": no NonFiniteError was thrown";
  return gpu::NonFiniteError("none", "", "", -1, false);
}

void expect_reported(const gpu::NonFiniteError& e, const std::string& step, const std::string& tensor,
                     int64_t index, bool overflow, const std::string& what) {
  EXPECT_EQ(e.step, step) << what << ": " << e.what();
  EXPECT_EQ(e.tensor, tensor) << what << ": " << e.what();
  EXPECT_EQ(e.index, index) << what << ": " << e.what();
  EXPECT_EQ(e.overflow, overflow) << what << ": " << e.what();
  // The message names them too (it is what a user reads).
  const std::string msg = e.what();
  EXPECT_NE(msg.find(tensor), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(index)), std::string::npos) << msg;
}

int64_t count_nonfinite(const std::vector<float>& v) {
  int64_t n = 0;
  for (float x : v) n += !std::isfinite(x);
  return n;
}
int64_t count_nonfinite(const ModelOutputs<float>& o) {
  return count_nonfinite(o.out) + count_nonfinite(o.conv_final) + count_nonfinite(o.ssm_final) +
         count_nonfinite(o.grads) + count_nonfinite(o.dX) + count_nonfinite(o.d_conv0) +
         count_nonfinite(o.d_ssm0);
}

// -------------------------------------------------------------- (i) planted NaN ---

TEST_F(NonFinite, NaNInXIsReportedAtItsFirstIndex) {
  const ModelConfig cfg = small_cfg(2);
  for (DType t : kAllDtypes) {
    ModelInputs in = check::make_model_inputs(cfg, kB, kT, kSeed, t);
    const int64_t first = 5 * cfg.input_dim + 7, later = 40 * cfg.input_dim + 3;
    in.X[size_t(later)] = kNaN;
    in.X[size_t(first)] = kNaN;
    expect_reported(expect_nonfinite(in, "NaN in X " + ctx(t)), "input", "X", first, false,
                    "NaN in X " + ctx(t));
  }
}

TEST_F(NonFinite, InfInXIsReportedAtItsIndex) {
  const ModelConfig cfg = small_cfg(1);
  for (DType t : kAllDtypes) {
    ModelInputs in = check::make_model_inputs(cfg, kB, kT, kSeed, t);
    const int64_t at = (kB * kT - 1) * cfg.input_dim + 1;  // last row
    in.X[size_t(at)] = -kInf;
    expect_reported(expect_nonfinite(in, "-Inf in X " + ctx(t)), "input", "X", at, false,
                    "-Inf in X " + ctx(t));
  }
}

TEST_F(NonFinite, NaNInAWeightIsReportedAtItsArenaIndex) {
  const ModelConfig cfg = small_cfg(2);
  const ParamLayout lay(Dims::from(cfg));
  const ParamEntry* xw = nullptr;
  for (const ParamEntry& e : lay.entries)
    if (e.name == "layers.1.x_proj_w") xw = &e;
  ASSERT_NE(xw, nullptr);
  for (DType t : kAllDtypes) {
    ModelInputs in = check::make_model_inputs(cfg, kB, kT, kSeed, t);
    const int64_t first = xw->offset + 3 * xw->shape[1] + 2;  // element [3, 2]
    in.params[size_t(first + 17)] = kNaN;
    in.params[size_t(first)] = kNaN;
    const gpu::NonFiniteError e = expect_nonfinite(in, "NaN in x_proj_w " + ctx(t));
    expect_reported(e, "input", "params", first, false, "NaN in layers.1.x_proj_w " + ctx(t));
    // The arena index names the weight through the layout.
    if (e.index >= 0 && e.index < lay.total) {
      EXPECT_EQ(lay.entry_at(e.index).name, "layers.1.x_proj_w");
    }
  }
}

TEST_F(NonFinite, NaNInAnInitialStateIsReported) {
  const ModelConfig cfg = small_cfg(2);
  for (DType t : kAllDtypes) {
    ModelInputs in = check::make_model_inputs(cfg, kB, kT, kSeed, t);
    const int64_t at = int64_t(in.ssm0.size()) / 2 + 5;  // inside layer 1's slice
    in.ssm0[size_t(at)] = kNaN;
    expect_reported(expect_nonfinite(in, "NaN in ssm0 " + ctx(t)), "input", "ssm_state", at, false,
                    "NaN in the initial SSM state " + ctx(t));
  }
}

// The forward runs clean; the backward reports the upstream gradient.
TEST_F(NonFinite, NaNInTheUpstreamGradientIsReportedByTheBackward) {
  const ModelConfig cfg = small_cfg(1);
  for (DType t : kAllDtypes) {
    ModelInputs in = check::make_model_inputs(cfg, kB, kT, kSeed, t);
    const int64_t at = 9 * cfg.d_model + 4;
    in.d_out[size_t(at)] = kNaN;
    gpu::Model m(cfg, kB, kT, checked_options(t));
    m.set_params(in.params);
    m.set_state(in.conv0, in.ssm0);
    std::vector<float> out, grads;
    ASSERT_NO_THROW(m.forward(in.X, out)) << ctx(t);
    try {
      m.backward(in.d_out, grads);
      ADD_FAILURE() << "NaN in d_out " << ctx(t) << ": backward did not throw";
    } catch (const gpu::NonFiniteError& e) {
      expect_reported(e, "input", "d_out", at, false, "NaN in d_out " + ctx(t));
    }
  }
}

// ------------------------------------------------------------- (ii) f16 overflow ---

// The first element of v that scaled by 2^k reaches the f16 overflow
// threshold, for the smallest k >= 0 at which that element is at least 5%
// above the threshold and every earlier element at least 5% below it (so the
// GPU's slightly different rounding cannot move the first index).
struct Overflow {
  int k = -1;
  int64_t first = -1;
};
Overflow predict_first_overflow(const std::vector<double>& v) {
  for (int k = 0; k <= 60; ++k) {
    const double t = std::ldexp(kF16Overflow, -k);  // threshold on |v|
    for (size_t i = 0; i < v.size(); ++i) {
      const double a = std::fabs(v[i]);
      if (a < t / kMargin) continue;
      if (a >= t * kMargin) return {k, int64_t(i)};
      break;  // too close to the threshold at this k: try the next one
    }
  }
  return {};
}

// The float oracle's forward of `in` with f16 storage (the GPU's rounding points).
ref::BackboneActivations<float> f16_forward_activations(const ModelInputs& in) {
  const ParamLayout lay(Dims::from(in.cfg));
  ref::RecurrentState<float> st(lay.dims, in.B);
  st.conv = in.conv0;
  st.ssm = in.ssm0;
  std::vector<float> out(size_t(in.B * in.T * lay.dims.dm));
  ref::BackboneActivations<float> act;
  ref::backbone_forward<float>(lay, in.params.data(), in.B, in.T, in.X.data(), st, out.data(), &act,
                               Storage{DType::F16});
  return act;
}

std::vector<double> to_double(const float* p, int64_t n) { return std::vector<double>(p, p + n); }

// The f16 run throws the overflow; bf16 and f32 runs of the same inputs are
// clean; without check_finite the f16 run returns non-finite numbers.
void expect_f16_only_overflow(const ModelInputs& f16_inputs, const std::string& step,
                              const std::string& tensor, int64_t index, const std::string& what) {
  ASSERT_EQ(f16_inputs.dtype, DType::F16);
  expect_reported(expect_nonfinite(f16_inputs, what + " f16"), step, tensor, index, true,
                  what + " f16");
  for (DType t : {DType::BF16, DType::F32}) {
    ModelInputs same = f16_inputs;
    same.dtype = t;  // the same f32 arrays; the pipeline casts them to its dtype
    EXPECT_NO_THROW(run(same, ScanMode::Parallel, true))
        << what << ": the same inputs must run clean in " << to_string(t);
    EXPECT_NO_THROW(run(same, ScanMode::Sequential, true))
        << what << ": the same inputs must run clean in " << to_string(t);
  }
  const ModelOutputs<float> silent = run(f16_inputs, ScanMode::Auto, false);  // no check
  EXPECT_GT(count_nonfinite(silent), 0)
      << what << ": without check_finite the f16 overflow should leave non-finite results";
}

// Forward: out_proj's typed GEMM output O = G·W_out overflows when W_out is
// scaled by 2^k. First index predicted from G (oracle, f16 storage) · W_out.
TEST_F(NonFinite, F16OverflowOfATypedGemmOutputIsReportedAsOverflow) {
  const ModelConfig cfg = small_cfg(1);
  ModelInputs in = check::make_model_inputs(cfg, kB, kT, kSeed, DType::F16);
  const ParamLayout lay(Dims::from(cfg));
  const Dims& d = lay.dims;
  const int64_t R = kB * kT, wo = lay.layers[0].out_proj_w;
  const ref::BackboneActivations<float> act = f16_forward_activations(in);
  const std::vector<double> G = to_double(act.layers[0].gated.data(), R * d.di);
  const std::vector<double> W = to_double(in.params.data() + wo, d.di * d.dm);
  std::vector<double> O(size_t(R * d.dm));
  ref::linear_fwd<double>(G.data(), W.data(), nullptr, R, d.di, d.dm, O.data());
  const Overflow ov = predict_first_overflow(O);
  ASSERT_GE(ov.k, 1) << "test setup: no unambiguous first overflow";
  for (int64_t i = 0; i < d.di * d.dm; ++i)
    in.params[size_t(wo + i)] = std::ldexp(in.params[size_t(wo + i)], ov.k);  // exact
  expect_f16_only_overflow(in, "layer 0 F5 out_proj", "out_proj_out", ov.first,
                           "out_proj_w x 2^" + std::to_string(ov.k));
}

// Forward: input_proj's output H0 = q_f16(X·W_ip + b) overflows for an input
// row X[r] = 2^14·sign(W_ip[:, 0]) (finite in every dtype: |X| = 16384): its
// column 0 is 2^14·Σ|W_ip[:, 0]| + b ≈ 1.1e5, the earlier rows are O(1). H0 is
// stored in an f32 buffer (it starts the f32 residual stream) after the f16
// rounding, so the overflow is an f16 storage overflow even though the buffer
// is f32: the detector must say overflow = true.
TEST_F(NonFinite, F16OverflowOfTheInputProjectionIsReportedAsOverflow) {
  const ModelConfig cfg = small_cfg(1);
  ModelInputs in = check::make_model_inputs(cfg, kB, kT, kSeed, DType::F16);
  const ParamLayout lay(Dims::from(cfg));
  const Dims& d = lay.dims;
  const int64_t r = 40, mid = d.mid;
  for (int64_t c = 0; c < mid; ++c)
    in.X[size_t(r * mid + c)] = in.params[size_t(lay.input_proj_w + c * d.dm)] < 0 ? -16384.0f : 16384.0f;
  // Row r of H0 in double; column 0 must clear the threshold by the margin.
  const std::vector<double> x = to_double(in.X.data() + r * mid, mid);
  const std::vector<double> W = to_double(in.params.data() + lay.input_proj_w, mid * d.dm);
  const std::vector<double> b = to_double(in.params.data() + lay.input_proj_b, d.dm);
  std::vector<double> h0(size_t(d.dm));
  ref::linear_fwd<double>(x.data(), W.data(), b.data(), 1, mid, d.dm, h0.data());
  ASSERT_GE(std::fabs(h0[0]), kF16Overflow * kMargin) << "test setup: H0[r, 0] = " << h0[0];
  ASSERT_LT(16384.0, 65504.0);  // the planted input itself is finite in f16
  expect_f16_only_overflow(in, "input_proj", "H0", r * d.dm, "input row x 2^14");
}

// Backward: an upstream-gradient row scaled by 2^k makes ∂L/∂Z of that row
// (norm_f backward, f32) exceed f16's range; the layer's typed copy of it (B0)
// and everything computed from it overflow. The forward runs clean.
TEST_F(NonFinite, F16OverflowOfAGradientIsReportedAsOverflowByTheBackward) {
  const ModelConfig cfg = small_cfg(1);
  ModelInputs in = check::make_model_inputs(cfg, kB, kT, kSeed, DType::F16);
  const ParamLayout lay(Dims::from(cfg));
  const Dims& d = lay.dims;
  const int64_t r = 50;
  // ∂L/∂Z of row r (oracle, double): linear in d_out, so it scales by 2^k exactly.
  const ref::BackboneActivations<float> act = f16_forward_activations(in);
  const std::vector<double> dy = to_double(in.d_out.data() + r * d.dm, d.dm);
  const std::vector<double> z = to_double(act.z.data() + r * d.dm, d.dm);
  const std::vector<double> g = to_double(in.params.data() + lay.norm_f_w, d.dm);
  const std::vector<double> rms = {double(act.rms_f[size_t(r)])};
  std::vector<double> dz(size_t(d.dm)), dg(size_t(d.dm), 0.0);
  ref::rmsnorm_bwd<double>(dy.data(), z.data(), g.data(), rms.data(), 1, d.dm, dz.data(), dg.data());
  double mx = 0;
  for (double v : dz) mx = std::max(mx, std::fabs(v));
  ASSERT_GT(mx, 0.0);
  const int k = int(std::ceil(std::log2(4 * kF16Overflow / mx)));  // row max >= 4x the threshold
  ASSERT_GE(k, 1);
  for (int64_t j = 0; j < d.dm; ++j)
    in.d_out[size_t(r * d.dm + j)] = std::ldexp(in.d_out[size_t(r * d.dm + j)], k);
  const std::string what = "d_out row " + std::to_string(r) + " x 2^" + std::to_string(k);

  gpu::Model m(cfg, kB, kT, checked_options(DType::F16));
  m.set_params(in.params);
  m.set_state(in.conv0, in.ssm0);
  std::vector<float> out, grads;
  ASSERT_NO_THROW(m.forward(in.X, out)) << what << ": the forward does not see d_out";
  try {
    m.backward(in.d_out, grads);
    ADD_FAILURE() << what << ": the f16 backward did not throw";
  } catch (const gpu::NonFiniteError& e) {
    EXPECT_TRUE(e.overflow) << what << ": " << e.what();
    EXPECT_EQ(e.step.rfind("layer 0 B", 0), 0u) << what << ": " << e.what();
    // The first tensor that holds it: the B0 typed copy [R, dm] if it is
    // scanned, else B1's d_gated = q(dH)·W_outᵀ [R, di], whose whole row r is
    // non-finite (every product with an infinite entry is inf or NaN).
    if (e.tensor == "d_gated") {
      EXPECT_EQ(e.index, r * d.di) << what << ": " << e.what();
    } else {
      EXPECT_EQ(e.index / d.dm, r) << what << ": " << e.what();
    }
  }
  for (DType t : {DType::BF16, DType::F32}) {
    ModelInputs same = in;
    same.dtype = t;
    EXPECT_NO_THROW(run(same, ScanMode::Auto, true))
        << what << ": the same inputs must run clean in " << to_string(t);
  }
}

// ------------------------------------------------- (iii) the check changes nothing ---

template <class V>
void expect_bitwise(const char* what, const V& a, const V& b, const std::string& c) {
  ASSERT_EQ(a.size(), b.size()) << what << " " << c;
  const bool same = a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  EXPECT_TRUE(same) << what << " differs with check_finite on vs off (" << c << ")";
}

TEST_F(NonFinite, CheckFiniteDoesNotChangeAnyBit) {
  ModelConfig cfg = small_cfg(2);
  const int64_t T = 300;  // > 256: the sequential and the parallel scan both meaningful
  for (DType t : kAllDtypes) {
    const ModelInputs in = check::make_model_inputs(cfg, kB, T, kSeed, t);
    for (ScanMode m : {ScanMode::Sequential, ScanMode::Parallel}) {
      const std::string c = ctx(t, m);
      const ModelOutputs<float> off = run(in, m, false);
      const ModelOutputs<float> on = run(in, m, true);
      EXPECT_EQ(count_nonfinite(off), 0) << c;
      expect_bitwise("out", off.out, on.out, c);
      expect_bitwise("conv_final", off.conv_final, on.conv_final, c);
      expect_bitwise("ssm_final", off.ssm_final, on.ssm_final, c);
      expect_bitwise("grads", off.grads, on.grads, c);
      expect_bitwise("d_input", off.dX, on.dX, c);
      expect_bitwise("d_conv0", off.d_conv0, on.d_conv0, c);
      expect_bitwise("d_ssm0", off.d_ssm0, on.d_ssm0, c);
    }
  }
}

}  // namespace
}  // namespace mc::testing
