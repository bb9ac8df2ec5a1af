// ctest-labels: cpu
// test_oracle_configs.cpp — the oracle's inputs and contracts that are not
// numerical properties: the built-in named configs, deterministic and
// non-degenerate test problems, the mixed-precision rounding points of the
// Storage policy (model.cpp), and clear errors (field, value, limit) for bad
// shapes, arguments and run-option names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "core/builtin_configs.hpp"
#include "core/config.hpp"
#include "check/gradcheck.hpp"
#include "validation/support/oracle_test_support.hpp"
#include "reference_cpu/steps.hpp"

namespace mc::testing {
namespace {

const bool kThreads = single_thread_unless_asked();

// ---------------------------------------------------------- built-in configs ---

void expect_shape(const char* name, int dm, int ds, int dc, int expand, int L, int mid, int64_t B,
                  int64_t T) {
  const ref::NamedConfig& c = ref::builtin_config(name);
  EXPECT_EQ(c.cfg.d_model, dm) << name;
  EXPECT_EQ(c.cfg.d_state, ds) << name;
  EXPECT_EQ(c.cfg.d_conv, dc) << name;
  EXPECT_EQ(c.cfg.expand, expand) << name;
  EXPECT_EQ(c.cfg.n_layers, L) << name;
  EXPECT_EQ(c.cfg.input_dim, mid) << name;
  EXPECT_EQ(c.B, B) << name;
  EXPECT_EQ(c.T, T) << name;
}

TEST(OracleConfigs, RequiredBuiltinConfigsHaveTheirShapes) {
  expect_shape("tiny", 8, 4, 3, 2, 2, 5, 2, 7);
  expect_shape("small", 32, 16, 4, 2, 2, 20, 2, 33);
  expect_shape("mamba-130m-layer", 768, 16, 4, 2, 1, 768, 1, 16);
  EXPECT_EQ(Dims::from(ref::builtin_config("mamba-130m-layer").cfg).dr, 48);
  EXPECT_EQ(ref::builtin_config("dstate-128").cfg.d_state, 128);
  EXPECT_EQ(ref::builtin_config("dconv1-t1").cfg.d_conv, 1);
  EXPECT_EQ(ref::builtin_config("dconv1-t1").T, 1);
}

TEST(OracleConfigs, BuiltinNamesAreUniqueValidAndDescribed) {
  std::set<std::string> names;
  for (const ref::NamedConfig& c : ref::builtin_configs()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate " << c.name;
    EXPECT_FALSE(c.description.empty()) << c.name;
    EXPECT_NO_THROW(validate_runtime(Dims::from(c.cfg), c.B, c.T)) << c.name;
  }
  EXPECT_GE(names.size(), 5u);
}

TEST(OracleConfigs, UnknownNameListsTheValidOnes) {
  try {
    ref::builtin_config("mamba-9000");
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mamba-9000"), std::string::npos) << msg;
    for (const ref::NamedConfig& c : ref::builtin_configs())
      EXPECT_NE(msg.find(c.name), std::string::npos) << msg;
  }
}

// ------------------------------------------------------------------ problems ---

bool f32_exact(const std::vector<double>& v) {
  for (double x : v)
    if (double(float(x)) != x) return false;
  return true;
}

TEST(OracleProblems, AreDeterministicPerSeed) {
  const ref::NamedConfig& c = ref::builtin_config("odd");
  const check::Problem a = check::make_problem(c.cfg, c.B, c.T, 7);
  const check::Problem b = check::make_problem(c.cfg, c.B, c.T, 7);
  const check::Problem other = check::make_problem(c.cfg, c.B, c.T, 8);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.X, b.X);
  EXPECT_EQ(a.conv0, b.conv0);
  EXPECT_EQ(a.ssm0, b.ssm0);
  EXPECT_EQ(a.d_out, b.d_out);
  EXPECT_EQ(a.d_conv_final, b.d_conv_final);
  EXPECT_EQ(a.d_ssm_final, b.d_ssm_final);
  EXPECT_NE(a.params, other.params);
  EXPECT_NE(a.d_ssm_final, other.d_ssm_final);
  EXPECT_NE(a.X, other.X);
  EXPECT_NE(a.ssm0, other.ssm0);
}

TEST(OracleProblems, AreF32ExactAndNotDegenerate) {
  const ref::NamedConfig& c = ref::builtin_config("small");
  const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 9);
  for (const auto* v : {&p.params, &p.X, &p.conv0, &p.ssm0, &p.d_out, &p.d_conv_final,
                        &p.d_ssm_final})
    EXPECT_TRUE(f32_exact(*v));
  const ParamLayout& lay = p.layout;
  const Dims& d = p.dims;
  auto all = [&](int64_t off, int64_t n, auto pred) {
    for (int64_t i = 0; i < n; ++i)
      if (!pred(p.params[size_t(off + i)])) return false;
    return true;
  };
  // The GEMM and conv weights keep mamba-rs's initialisation (init_params).
  const std::vector<float> init = init_params(lay, p.seed);
  for (const ParamEntry& e : lay.entries) {
    if (!e.gemm_weight && e.name.find("conv1d_weight") == std::string::npos) continue;
    for (int64_t i = 0; i < e.size; ++i)
      ASSERT_EQ(p.params[size_t(e.offset + i)], init[size_t(e.offset + i)]) << e.name;
  }
  EXPECT_FALSE(all(lay.input_proj_b, d.dm, [](double x) { return x == 0; }));
  for (const LayerParamOffsets& o : lay.layers) {
    EXPECT_FALSE(all(o.conv_b, d.di, [](double x) { return x == 0; }));
    EXPECT_FALSE(all(o.d_param, d.di, [](double x) { return x == 1; }));
    EXPECT_FALSE(all(o.norm_w, d.dm, [](double x) { return x == 1; }));
    // A_log differs between channels (mamba-rs's init makes every channel equal).
    bool varies = false;
    for (int64_t n = 0; n < d.ds; ++n)
      varies |= p.params[size_t(o.a_log + n)] != p.params[size_t(o.a_log + d.ds + n)];
    EXPECT_TRUE(varies);
  }
  auto nonzero = [](const std::vector<double>& v) {
    int64_t n = 0;
    for (double x : v) n += x != 0;
    return n;
  };
  EXPECT_EQ(nonzero(p.conv0), int64_t(p.conv0.size()));
  EXPECT_EQ(nonzero(p.ssm0), int64_t(p.ssm0.size()));
  // upstream gradients on the final states (issue 10)
  EXPECT_EQ(p.d_conv_final.size(), p.conv0.size());
  EXPECT_EQ(p.d_ssm_final.size(), p.ssm0.size());
  EXPECT_EQ(nonzero(p.d_conv_final), int64_t(p.d_conv_final.size()));
  EXPECT_EQ(nonzero(p.d_ssm_final), int64_t(p.d_ssm_final.size()));
  check::ProblemOptions no_final;
  no_final.final_state_grads = false;
  const check::Problem nf = check::make_problem(c.cfg, c.B, c.T, 9, no_final);
  EXPECT_EQ(nonzero(nf.d_conv_final) + nonzero(nf.d_ssm_final), 0);
  EXPECT_EQ(nf.params, p.params);
  EXPECT_EQ(nf.d_out, p.d_out);
  check::ProblemOptions zero;
  zero.zero_state = true;
  const check::Problem z = check::make_problem(c.cfg, c.B, c.T, 9, zero);
  EXPECT_EQ(nonzero(z.conv0) + nonzero(z.ssm0), 0);
  EXPECT_EQ(z.params, p.params);
}

// The softplus identity branch (Δraw > 20, spec §3.2 F4c) is reached by every
// generated problem: the chosen channels stay above 20 by a wide margin at
// every (b, t), every other channel far below, and no Δraw comes near the
// branch point (where finite differences would straddle it). Measured over
// every built-in config and six seeds (48 problems), as in issue 10.
TEST(OracleProblems, ReachTheSoftplusIdentityBranchWithAMargin) {
  double lo_identity = 1e300, hi_other = -1e300;
  int64_t above = 0;
  for (const ref::NamedConfig& c : ref::builtin_configs())
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      const check::Problem p = check::make_problem(c.cfg, c.B, c.T, seed);
      ref::RecurrentState<double> st = p.state<double>();
      ref::BackboneActivations<double> act;
      std::vector<double> out(size_t(p.B * p.T * p.dims.dm));
      ref::backbone_forward(p.layout, p.params.data(), p.B, p.T, p.X.data(), st, out.data(), &act);
      const int64_t di = p.dims.di, R = p.B * p.T;
      for (int64_t l = 0; l < p.dims.L; ++l) {
        const std::vector<int64_t> id = check::softplus_identity_channels(p.dims, seed, l);
        ASSERT_EQ(int64_t(id.size()), std::max<int64_t>(1, di / 8)) << c.name;
        std::vector<bool> is_id(size_t(di), false);
        for (int64_t ch : id) is_id[size_t(ch)] = true;
        const std::vector<double>& raw = act.layers[size_t(l)].delta_raw;
        for (int64_t r = 0; r < R; ++r)
          for (int64_t ch = 0; ch < di; ++ch) {
            const double x = raw[size_t(r * di + ch)];
            if (is_id[size_t(ch)]) {
              lo_identity = std::min(lo_identity, x);
              above += x > 20;
            } else {
              hi_other = std::max(hi_other, x);
            }
          }
      }
    }
  std::cout << "identity channels: min Δraw " << lo_identity << "; other channels: max Δraw "
            << hi_other << "; " << above << " elements on the identity branch\n";
  EXPECT_GT(lo_identity, 21.0);
  EXPECT_LT(hi_other, 19.0);
  EXPECT_GT(above, 0);
  // Without the option the generator stays below the branch, as before.
  const ref::NamedConfig& c = ref::builtin_config("small");
  check::ProblemOptions off;
  off.softplus_identity = false;
  const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 3, off);
  for (const LayerParamOffsets& o : p.layout.layers)
    for (int64_t ch = 0; ch < p.dims.di; ++ch) EXPECT_LT(p.params[size_t(o.dt_proj_b + ch)], 5.0);
}

// -------------------------------------------------------- storage policy ---

bool representable(DType t, float x) { return round_to(t, x) == x; }

int64_t count_unrepresentable(DType t, const std::vector<float>& v) {
  int64_t n = 0;
  for (float x : v) n += !representable(t, x);
  return n;
}

// With Storage{BF16|F16}, every tensor the mixed GPU path stores typed is
// representable in that type; the f32 ones (residual stream, states, h_saved,
// rms, parameter gradients) are not rounded.
void check_rounding_points(DType t) {
  const ref::NamedConfig& c = ref::builtin_config("odd");
  const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 10);
  const std::vector<float> params = check::to_float(p.params), X = check::to_float(p.X);
  ref::RecurrentState<float> st = p.state<float>();
  ref::BackboneActivations<float> act;
  std::vector<float> out(size_t(p.B * p.T * p.dims.dm));
  const Storage storage{t};
  ref::backbone_forward(p.layout, params.data(), p.B, p.T, X.data(), st, out.data(), &act, storage);
  const std::string ctx = to_string(t);
  EXPECT_EQ(count_unrepresentable(t, out), 0) << ctx << " out (norm_f output)";
  // Layer 0's residual is the typed input_proj output H0, upcast (reference_cpu/model.cpp).
  EXPECT_EQ(count_unrepresentable(t, act.layers[0].residual), 0) << ctx << " H0";
  for (size_t l = 0; l < act.layers.size(); ++l) {
    const ref::LayerActivations<float>& a = act.layers[l];
    EXPECT_EQ(count_unrepresentable(t, a.post_norm), 0) << ctx << " post_norm";
    EXPECT_EQ(count_unrepresentable(t, a.xb), 0) << ctx << " xb";
    EXPECT_EQ(count_unrepresentable(t, a.z), 0) << ctx << " z";
    EXPECT_EQ(count_unrepresentable(t, a.gs), 0) << ctx << " gs";
    EXPECT_EQ(count_unrepresentable(t, a.pc), 0) << ctx << " pc";
    EXPECT_EQ(count_unrepresentable(t, a.u), 0) << ctx << " u";
    EXPECT_EQ(count_unrepresentable(t, a.xdbl), 0) << ctx << " xdbl";
    EXPECT_EQ(count_unrepresentable(t, a.delta_raw), 0) << ctx << " delta_raw";
    EXPECT_EQ(count_unrepresentable(t, a.delta), 0) << ctx << " delta";
    EXPECT_EQ(count_unrepresentable(t, a.y), 0) << ctx << " y";
    EXPECT_EQ(count_unrepresentable(t, a.gated), 0) << ctx << " gated";
    if (l > 0) {
      EXPECT_GT(count_unrepresentable(t, a.residual), 0) << ctx << " residual must stay f32";
    }
    EXPECT_GT(count_unrepresentable(t, a.h_saved), 0) << ctx << " h_saved must stay f32";
    EXPECT_GT(count_unrepresentable(t, a.rms), 0) << ctx << " rms must stay f32";
  }
  EXPECT_GT(count_unrepresentable(t, act.z), 0) << ctx << " norm_f input must stay f32";
  EXPECT_GT(count_unrepresentable(t, st.ssm), 0) << ctx << " SSM state must stay f32";
  // Δraw = q(dt_in·W_dt + b_dt): the bias joins the f32 accumulator, one rounding.
  const Dims& d = p.dims;
  const LayerParamOffsets& o = p.layout.layers[0];
  const ref::LayerActivations<float>& a0 = act.layers[0];
  const int64_t R = p.B * p.T;
  std::vector<float> dt_in(size_t(R * d.dr)), raw(size_t(R * d.di));
  ref::gather_cols(a0.xdbl.data(), R, d.xd, 0, d.dr, dt_in.data());
  ref::linear_fwd(dt_in.data(), params.data() + o.dt_proj_w, params.data() + o.dt_proj_b, R, d.dr,
                  d.di, raw.data());
  for (size_t i = 0; i < raw.size(); ++i) ASSERT_EQ(a0.delta_raw[i], round_to(t, raw[i])) << ctx << " " << i;
  // Backward: parameter gradients and the initial-state gradients stay f32.
  std::vector<float> grads(size_t(p.layout.total), 0.0f), dc0(st.conv.size()), ds0(st.ssm.size());
  const std::vector<float> d_out = check::to_float(p.d_out);
  ref::BackboneGradOutputs<float> g;
  g.params = grads.data();
  g.d_conv0 = dc0.data();
  g.d_ssm0 = ds0.data();
  ref::backbone_backward(p.layout, params.data(), act, d_out.data(), g, storage);
  EXPECT_GT(count_unrepresentable(t, grads), 0) << ctx << " parameter gradients must stay f32";
  EXPECT_GT(count_unrepresentable(t, ds0), 0) << ctx << " d_ssm0 must stay f32";
}

TEST(OracleStorage, Bf16RoundingPoints) { check_rounding_points(DType::BF16); }
TEST(OracleStorage, F16RoundingPoints) { check_rounding_points(DType::F16); }

// Storage{F32} rounds nothing: bitwise the default call, and different from BF16.
TEST(OracleStorage, F32StorageIsTheUnroundedOracle) {
  const ref::NamedConfig& c = ref::builtin_config("tiny");
  const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 11);
  const OracleRun<float> plain = run_oracle<float>(p);
  const OracleRun<float> f32 = run_oracle<float>(p, Storage{DType::F32});
  const OracleRun<float> bf16 = run_oracle<float>(p, Storage{DType::BF16});
  EXPECT_EQ(std::memcmp(plain.out.data(), f32.out.data(), plain.out.size() * 4), 0);
  EXPECT_EQ(std::memcmp(plain.grads.data(), f32.grads.data(), plain.grads.size() * 4), 0);
  EXPECT_NE(plain.out, bf16.out);
  EXPECT_NE(plain.grads, bf16.grads);
}

// ------------------------------------------------------------------ errors ---

template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(OracleErrors, BadShapesNameFieldValueAndLimit) {
  const ref::NamedConfig& c = ref::builtin_config("tiny");
  const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 12);
  const Dims& d = p.dims;
  std::vector<double> H(size_t(d.dm)), out(size_t(d.dm)), conv(size_t(d.di * d.dc)), ssm(size_t(d.di * d.ds));
  const std::string b0 = error_of<ConfigError>([&] {
    ref::layer_forward(d, p.params.data(), p.layout.layers[0], 0, 1, H.data(), conv.data(),
                       ssm.data(), out.data(), static_cast<ref::LayerActivations<double>*>(nullptr));
  });
  EXPECT_NE(b0.find("batch = 0"), std::string::npos) << b0;
  EXPECT_NE(b0.find(">= 1"), std::string::npos) << b0;
  const std::string t0 = error_of<ConfigError>([&] {
    std::vector<double> target(size_t(d.dm));
    ref::target_forward(p.layout, p.params.data(), 1, 0, p.X.data(), target.data());
  });
  EXPECT_NE(t0.find("seq_len = 0"), std::string::npos) << t0;
  const std::string dc = error_of<ConfigError>([&] {
    std::vector<double> x(9), w(9), b(1), s(9), win(9), pc(1), u(1);
    ref::conv1d_silu_fwd(x.data(), w.data(), b.data(), 1, 1, 1, 9, s.data(), win.data(), pc.data(), u.data());
  });
  EXPECT_NE(dc.find("d_conv = 9"), std::string::npos) << dc;
  EXPECT_NE(dc.find("<= 8"), std::string::npos) << dc;
  const std::string cfg = error_of<ConfigError>([&] {
    ModelConfig bad = c.cfg;
    bad.d_state = 257;
    check::make_problem(bad, 1, 1, 1);
  });
  EXPECT_NE(cfg.find("d_state = 257"), std::string::npos) << cfg;
}

// The run options' names as the command lines give them (bench_train_step --scan-exp,
// --scan-layout, --scan-checkpoints; mambacheck --scan): each parses to its value, and
// an unknown name is refused naming the field, the value and the valid names.
TEST(OracleErrors, RunOptionNamesParseOrNameFieldValueAndChoices) {
  EXPECT_EQ(parse_scan_exp("auto"), ScanExp::Auto);
  EXPECT_EQ(parse_scan_exp("hardware"), ScanExp::Hardware);
  EXPECT_EQ(parse_scan_exp("accurate"), ScanExp::Accurate);
  EXPECT_EQ(parse_scan_layout("whole-state"), ScanLayout::WholeState);
  EXPECT_EQ(parse_scan_checkpoints("grouped"), ScanCheckpoints::Grouped);
  EXPECT_EQ(parse_scan_mode("checkpointed"), ScanMode::Checkpointed);
  const std::string e = error_of<ConfigError>([] { parse_scan_exp("fast"); });
  EXPECT_NE(e.find("scan_exp = 'fast' is not one of auto|hardware|accurate"), std::string::npos)
      << e;
  const std::string l = error_of<ConfigError>([] { parse_scan_layout("tiles"); });
  EXPECT_NE(l.find("scan_layout = 'tiles'"), std::string::npos) << l;
  const std::string m = error_of<ConfigError>([] { parse_scan_mode("fft"); });
  EXPECT_NE(m.find("scan_mode = 'fft'"), std::string::npos) << m;
  for (H0Mode h : {H0Mode::Auto, H0Mode::Recompute, H0Mode::Save})
    EXPECT_EQ(parse_h0_mode(to_string(h)), h);
  const std::string h = error_of<ConfigError>([] { parse_h0_mode("keep"); });
  EXPECT_NE(h.find("h0 = 'keep' is not one of auto|recompute|save"), std::string::npos) << h;
  // Auto: recomputed on the typed path, saved in f32; a forced mode holds for every dtype
  EXPECT_EQ(h0_mode(H0Mode::Auto, DType::F32), H0Mode::Save);
  EXPECT_EQ(h0_mode(H0Mode::Auto, DType::BF16), H0Mode::Recompute);
  EXPECT_EQ(h0_mode(H0Mode::Auto, DType::F16), H0Mode::Recompute);
  EXPECT_EQ(h0_mode(H0Mode::Recompute, DType::F32), H0Mode::Recompute);
  EXPECT_EQ(h0_mode(H0Mode::Save, DType::BF16), H0Mode::Save);
}

TEST(OracleErrors, BadArgumentsAreRefused) {
  const ref::NamedConfig& c = ref::builtin_config("tiny");
  const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 13);
  const Dims& d = p.dims;
  // A state of the wrong size.
  ref::RecurrentState<double> small(d, 1);
  std::vector<double> out(size_t(p.B * p.T * d.dm));
  const std::string st = error_of<std::invalid_argument>([&] {
    ref::backbone_forward(p.layout, p.params.data(), p.B, p.T, p.X.data(), small, out.data(),
                          static_cast<ref::BackboneActivations<double>*>(nullptr));
  });
  EXPECT_NE(st.find("state.conv"), std::string::npos) << st;
  // Aliased layer input/output.
  std::vector<double> H(size_t(p.B * p.T * d.dm)), conv(size_t(p.B * d.di * d.dc)), ssm(size_t(p.B * d.di * d.ds));
  const std::string al = error_of<std::invalid_argument>([&] {
    ref::layer_forward(d, p.params.data(), p.layout.layers[0], p.B, p.T, H.data(), conv.data(),
                       ssm.data(), H.data(), static_cast<ref::LayerActivations<double>*>(nullptr));
  });
  EXPECT_NE(al.find("alias"), std::string::npos) << al;
  // Activations saved for another shape.
  ref::BackboneActivations<double> act;
  ref::RecurrentState<double> s = p.state<double>();
  ref::backbone_forward(p.layout, p.params.data(), p.B, p.T, p.X.data(), s, out.data(), &act);
  std::vector<double> dH(size_t(d.dm)), grads(size_t(p.layout.total));
  const std::string sh = error_of<std::invalid_argument>([&] {
    ref::layer_backward(d, p.params.data(), p.layout.layers[0], 1, 1, act.layers[0], dH.data(),
                        grads.data(), static_cast<double*>(nullptr), static_cast<double*>(nullptr));
  });
  EXPECT_NE(sh.find("act."), std::string::npos) << sh;
  // Unknown step / layer of the gradient check.
  EXPECT_NE(error_of<std::invalid_argument>([&] { check::step_function("attention", p); }).find("selective_scan"),
            std::string::npos);
  EXPECT_NE(error_of<std::invalid_argument>([&] { check::layer_function(p, 7); }).find("layer = 7"),
            std::string::npos);
}

TEST(OracleHelpers, ExpNegateIsMinusExp) {
  const std::vector<double> a_log = {-3.0, 0.0, 0.5, std::log(16.0)};
  std::vector<double> a(a_log.size());
  ref::exp_negate(a_log.data(), int64_t(a.size()), a.data());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], -std::exp(a_log[i]));
  EXPECT_EQ(a[1], -1.0);
}

}  // namespace
}  // namespace mc::testing
