// ctest-labels: gpu;determinism
// ctest-timeout: 600
// test_step_graph.cpp — the training step as one CUDA graph (issue 9 item 4,
// gpu::Model::capture_step / replay_step) gives the same bits as the eager
// step, on every route of determinism_cases.hpp (every dtype, scan route and
// GEMM tier, tensor cores included):
//
//   ReplayEqualsEagerBitwise   run 0 eager (forward_device + backward_device),
//                              runs 1..10 graph replays from the same initial
//                              state, run 11 eager again after the replays:
//                              out, final states, every parameter gradient and
//                              the initial-state gradients bitwise identical;
//                              capture_step leaves the recurrent state as it was.
//   ReplayReadsCurrentBuffers  captured on problem A, then problem B's inputs,
//                              d_out, parameters and state uploaded: a replay
//                              equals an eager step of B on a fresh Model.
//   Refusals                   check_finite, phase timing and missing
//                              parameters are refused with CaptureRefused
//                              naming the feature; the model stays usable.
//   PhaseTiming                the phase hooks change no bit, and GEMM, scan
//                              and elementwise times are all positive.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "check/determinism.hpp"
#include "check/problem.hpp"
#include "core/param_layout.hpp"
#include "gpu/model.hpp"
#include "kernels/cuda_check.hpp"
#include "validation/support/determinism_cases.hpp"
#include "validation/support/gpu_test.hpp"

namespace mc::testing {
namespace det {
void PrintTo(const Route& r, std::ostream* os) { *os << route_name(r); }
}  // namespace det

namespace {

using check::RerunChecker;
using check::TensorList;
using det::Route;

constexpr int kReplays = 10;

int device() { return gpu::default_device(); }

std::string param_name(const ::testing::TestParamInfo<Route>& info) {
  std::string n = det::route_name(info.param);
  for (char& c : n)
    if (c == '/' || c == '-') c = '_';
  return n;
}

// Uploads everything a device step reads.
void load(gpu::Model& m, const check::ModelInputs& in) {
  m.set_params(in.params);
  m.set_state(in.conv0, in.ssm0);
  m.upload_input(in.X);
  m.upload_d_out(in.d_out);
}

// What one device step produced: out, final states, every parameter gradient,
// the initial-state gradients (d_input is not part of the device step).
TensorList step_tensors(gpu::Model& m, const check::ModelInputs& in) {
  check::ModelOutputs<float> o;
  m.download_output(o.out);
  m.get_state(o.conv_final, o.ssm_final);
  m.download_grads(o.grads, &o.d_conv0, &o.d_ssm0);
  TensorList t = check::forward_tensors(in, o);
  const ParamLayout lay(Dims::from(in.cfg));
  for (const ParamEntry& e : lay.entries)
    t.push_back({"grad." + e.name,
                 std::vector<float>(o.grads.begin() + e.offset, o.grads.begin() + e.offset + e.size)});
  t.push_back({"d_conv0", o.d_conv0});
  t.push_back({"d_ssm0", o.d_ssm0});
  return t;
}

TensorList eager_step(gpu::Model& m, const check::ModelInputs& in) {
  load(m, in);
  m.forward_device();
  m.backward_device();
  return step_tensors(m, in);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return check::diff_tensor_lists({{"x", a}}, {{"x", b}}).empty();
}

// GPU fixture; MAMBACHECK_SYNC_LAUNCHES makes every capture a refusal (a
// synchronisation per launch), so the graph tests skip under it.
class StepGraphTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (gpu::launch_sync_enabled())
      GTEST_SKIP() << "MAMBACHECK_SYNC_LAUNCHES is set: a step with a synchronisation after "
                      "every launch cannot be captured";
  }
};

// =========================================================================================

class StepGraphRoutes : public StepGraphTest, public ::testing::WithParamInterface<Route> {};

TEST_P(StepGraphRoutes, ReplayEqualsEagerBitwise) {
  const Route r = GetParam();
  const check::ModelInputs in = det::inputs(r);
  gpu::Model m(in.cfg, in.B, in.T, det::options(r, device()));
  EXPECT_EQ(m.gemm_tier(), det::tier(r));
  RerunChecker chk(det::route_name(r) +
                   " step: run 0 eager, runs 1-10 graph replays, run 11 eager after them");
  const TensorList eager = eager_step(m, in);
  for (const auto& x : eager) {  // a real step, not zeros or NaN
    bool finite = true, nonzero = false;
    for (float v : x.values) {
      finite = finite && std::isfinite(v);
      nonzero = nonzero || v != 0.f;
    }
    EXPECT_TRUE(finite && nonzero) << x.name << " is degenerate (non-finite or all zero)";
  }
  chk.add_run(eager);

  m.set_state(in.conv0, in.ssm0);
  m.capture_step();
  ASSERT_TRUE(m.step_captured());
  EXPECT_GT(m.step_graph_nodes(), 0);
  std::vector<float> conv, ssm;
  m.get_state(conv, ssm);
  EXPECT_TRUE(bitwise_equal(conv, in.conv0) && bitwise_equal(ssm, in.ssm0))
      << "capture_step did not leave the recurrent state as it found it";

  for (int i = 0; i < kReplays; ++i) {
    m.set_state(in.conv0, in.ssm0);
    m.replay_step();
    chk.add_run(step_tensors(m, in));
  }
  chk.add_run(eager_step(m, in));  // eager still right after capture and replays
  std::cout << "  " << det::route_name(r) << ": graph of " << m.step_graph_nodes()
            << " nodes; " << chk.report() << "\n";
  RecordProperty("graph_nodes", std::to_string(m.step_graph_nodes()));
  EXPECT_EQ(chk.runs(), kReplays + 2);
  EXPECT_TRUE(chk.identical()) << chk.report();
}

INSTANTIATE_TEST_SUITE_P(Routes, StepGraphRoutes, ::testing::ValuesIn(det::routes()), param_name);

// =========================================================================================

class StepGraph : public StepGraphTest {};

TEST_F(StepGraph, ReplayReadsCurrentBuffers) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    const Route r{t, ScanMode::Checkpointed, 16, gpu::TypedGemm::TensorCore};
    const check::ModelInputs a = det::inputs(r);
    const check::ModelInputs b =
        check::make_model_inputs(det::config(16), det::kB, det::kT, det::kSeed + 1, t);
    gpu::Model m(a.cfg, a.B, a.T, det::options(r, device()));
    load(m, a);
    m.capture_step();
    load(m, b);  // new parameters, state, input and d_out in the same buffers
    m.replay_step();
    const TensorList replayed = step_tensors(m, b);
    gpu::Model fresh(b.cfg, b.B, b.T, det::options(r, device()));
    const TensorList eager = eager_step(fresh, b);
    const auto diffs = check::diff_tensor_lists(eager, replayed);
    EXPECT_TRUE(diffs.empty()) << det::route_name(r) << ": " << diffs.size()
                               << " tensors differ, first " << diffs.front().summary();
  }
}

TEST_F(StepGraph, Refusals) {
  const Route r{DType::BF16, ScanMode::Checkpointed, 16, gpu::TypedGemm::TensorCore};
  const check::ModelInputs in = det::inputs(r);
  auto refused_with = [](gpu::Model& m, const std::string& needle) {
    try {
      m.capture_step();
    } catch (const gpu::CaptureRefused& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_FALSE(m.step_captured());
      return;
    }
    ADD_FAILURE() << "capture_step was not refused (expected a reason naming '" << needle << "')";
  };
  {
    gpu::Model m(in.cfg, in.B, in.T, det::options(r, device()));
    refused_with(m, "set_params");
  }
  {
    gpu::RunOptions o = det::options(r, device());
    o.check_finite = true;
    gpu::Model m(in.cfg, in.B, in.T, o);
    load(m, in);
    refused_with(m, "check_finite");
    EXPECT_NO_THROW(eager_step(m, in));  // still usable eagerly
  }
  {
    gpu::Model m(in.cfg, in.B, in.T, det::options(r, device()));
    load(m, in);
    m.set_phase_timing(true);
    refused_with(m, "phase timing");
    m.set_phase_timing(false);
    EXPECT_NO_THROW(m.capture_step());
    EXPECT_TRUE(m.step_captured());
    m.release_step();
    EXPECT_FALSE(m.step_captured());
    EXPECT_THROW(m.replay_step(), std::logic_error);
  }
}

TEST_F(StepGraph, PhaseTiming) {
  for (DType t : {DType::F32, DType::BF16}) {
    const Route r{t, ScanMode::Checkpointed, 16, gpu::TypedGemm::TensorCore};
    const check::ModelInputs in = det::inputs(r);
    gpu::Model m(in.cfg, in.B, in.T, det::options(r, device()));
    const TensorList plain = eager_step(m, in);
    m.set_phase_timing(true);
    const TensorList timed = eager_step(m, in);
    const gpu::PhaseTimes p = m.take_phase_times();
    m.set_phase_timing(false);
    const auto diffs = check::diff_tensor_lists(plain, timed);
    EXPECT_TRUE(diffs.empty()) << "phase timing changed " << diffs.size() << " tensors, first "
                               << diffs.front().summary();
    EXPECT_EQ(p.steps, 1);
    EXPECT_GT(p.gemm_s, 0);
    EXPECT_GT(p.scan_s, 0);
    EXPECT_GT(p.elementwise_s, 0);
    std::cout << "  " << det::route_name(r) << " phases: gemm " << p.gemm_s * 1e6 << " us, scan "
              << p.scan_s * 1e6 << " us, elementwise " << p.elementwise_s * 1e6 << " us\n";
  }
}

}  // namespace
}  // namespace mc::testing
