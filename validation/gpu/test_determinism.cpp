// ctest-labels: gpu;determinism
// ctest-timeout: 900
// test_determinism.cpp — bitwise determinism of the GPU pipeline (reruns in one
// process, across processes, under load, with a negative control) and the
// cross-GPU check. Every check hashes (FNV-1a 64 over
// the raw bytes) every output, final state and gradient of a forward +
// backward (determinism.hpp) on the problems of determinism_cases.hpp
// (dm 64, L 2, B 2, T 300, ds 16 sequential + parallel + checkpointed, ds 128
// parallel + checkpointed; f32 on the strict GEMM tier, bf16 and f16 on the
// tensor-core tier and on the strict tier) and, on a mismatch, names the tensor,
// the first differing index and the ULP distance there. Graph replay vs eager:
// test_step_graph.cpp.
//
//   Rerun            10 runs in one process (5 on one reused Model, 5 on fresh
//                    Models) are bitwise identical, forward and backward.
//   CrossProcess     two child processes (determinism_probe, output redirected
//                    to files so no child line can reach ctest) write identical
//                    hash manifests.
//   UnderLoad        10 runs while another host thread keeps the GPU busy with
//                    a memory-bound kernel on its own stream equal an idle run.
//   ScanSegments     the checkpointed routes' backward in one segment and in one
//                    chunk per segment (RunOptions::scan_partial_budget) give the same bits.
//   BatchComposition sample b alone (B=1) vs inside batches of 2, 3, 5:
//                    measured and REPORTED (identical or max ULP), not
//                    required — cuBLAS may pick another GEMM kernel per M=B*T.
//   NegativeControl  a test-only atomicAdd reduction IS detected as
//                    nondeterministic by the same checker within 10 runs (and
//                    its fixed-order twin is not).
//   CrossGpu         the same inputs on two GPUs give the same bits (skipped
//                    with fewer than 2 visible GPUs or unlike GPUs).
//   GpuAllocation    the CTest GPU allocation this test process got is well formed.
// The device-free checks of the checker, the manifest files, the JSON writer
// and the child runner are in validation/cpu/test_determinism_tools.cpp.
//
// With MAMBACHECK_DETERMINISM_JSON=<path> every result is merged into <path>
// (reports/README.md "determinism" schema) with a context naming what a
// bitwise claim depends on (GPU, SMs, driver, runtime, cuBLAS, git sha, flags).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda_check.hpp"
#include "kernels/scan/scan.hpp"
#include "check/determinism.hpp"
#include "validation/support/determinism_cases.hpp"
#include "check/gpu_allocation.hpp"
#include "validation/support/child_process.hpp"
#include "validation/support/gpu_test.hpp"
#include "gpu/model.hpp"
#include "check/problem.hpp"
#include "check/report_json.hpp"
#include "validation/gpu/testing_atomic_reduce.cuh"
#include "validation/gpu/testing_busy_load.cuh"

namespace mc::testing {
namespace det {
void PrintTo(const Route& r, std::ostream* os) { *os << route_name(r); }
}  // namespace det

namespace {

using check::DeterminismRow;
using check::RerunChecker;
using check::TensorDiff;
using check::TensorList;
using det::Route;

constexpr int kRuns = 10;

int device() { return gpu::default_device(); }

std::string param_name(const ::testing::TestParamInfo<Route>& info) {
  std::string n = det::route_name(info.param);
  for (char& c : n)
    if (c == '/' || c == '-') c = '_';  // gtest names: [A-Za-z0-9_]
  return n;
}

// The "scan" column of the JSON rows also names the route's GEMM tier, so
// determinism.md shows it without a column of its own.
std::string scan_text(const Route& r) {
  return std::string(to_string(r.scan)) + " ds" + std::to_string(r.d_state) + ", GEMM " +
         to_string(det::tier(r));
}

// ---- JSON output --------------------------------------------------------------------------

// What a bitwise claim depends on (report_json.hpp context keys: GPU, SMs,
// driver, runtime, cuBLAS, git sha/tree, build flags), plus this suite's own.
std::string context_json() {
  using report::json_string;
  return report::context_json(
      "test_determinism", /*with_gpu=*/true,
      {{"gpu_count", report::json_int(gpu::device_count())},
       {"gemm_math", json_string("f32")},
       {"gemm_tiers",
        json_string("per route (row id and scan column): f32 " +
                    gpu::describe(gpu::GemmTier::Strict) + " | bf16/f16 " +
                    gpu::describe(gpu::GemmTier::TensorCore) + " (default) and bf16/f16 " +
                    gpu::describe(gpu::GemmTier::Strict))},
       {"cublas_workspace_bytes",
        json_string("the tier's default: " + gpu::describe_default_cublas_workspaces())},
       {"ctest_resource_allocation", json_string(ctest_gpu_allocation().active ? "on" : "off")},
       {"bitwise_claim",
        json_string("identical bits are claimed only for this GPU model and SM count, driver, "
                    "CUDA runtime and cuBLAS versions, git sha and build flags, per route (dtype, "
                    "scan, d_state, GEMM tier and its cuBLAS workspace size) and problem shape")}},
      device());
}

// Prints the rows, records them as test properties and, when
// MAMBACHECK_DETERMINISM_JSON is set, merges them into that file.
void publish(std::vector<DeterminismRow> rows) {
  for (auto& r : rows) {
    r.device = device();
    std::cout << "  [determinism] " << check::to_json_line(r) << "\n";
    ::testing::Test::RecordProperty("hash." + r.id, check::hash_hex(r.hash));
  }
  const char* path = std::getenv(check::kDeterminismJsonEnv);
  if (path == nullptr || *path == '\0') return;
  try {
    check::merge_determinism_json(path, context_json(), rows);
  } catch (const std::exception& e) {
    ADD_FAILURE() << check::kDeterminismJsonEnv << "=" << path << " was requested but: " << e.what();
  }
}

// ---- helpers ----------------------------------------------------------------------------

// A run whose tensors are all zero or non-finite would be "reproducible" for
// no good reason: every tensor must be finite and not identically zero.
void expect_nondegenerate(const TensorList& t) {
  for (const auto& x : t) {
    int64_t nonfinite = 0, nonzero = 0;
    for (float v : x.values) {
      nonfinite += !std::isfinite(v);
      nonzero += v != 0.f;
    }
    EXPECT_EQ(nonfinite, 0) << x.name << " has non-finite values";
    EXPECT_GT(nonzero, 0) << x.name << " is identically zero (degenerate test problem)";
  }
}

std::string first_lines(const std::string& s, size_t max_lines) {
  std::istringstream is(s);
  std::string out, line;
  for (size_t n = 0; n < max_lines && std::getline(is, line); ++n) out += line + "\n";
  return out;
}

// ---- device memory for the negative control ----------------------------------------------

struct CudaFree {
  void operator()(float* p) const { cudaFree(p); }
};
using DeviceFloats = std::unique_ptr<float, CudaFree>;

DeviceFloats device_floats(size_t n, const char* what) {
  float* p = nullptr;
  MC_CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)), what);
  return DeviceFloats(p);
}

class Stream {
 public:
  Stream() { MC_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "test stream"); }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// =========================================================================================
// (a) in-process reruns
// =========================================================================================

class Rerun : public GpuTest, public ::testing::WithParamInterface<Route> {};

TEST_P(Rerun, TenRunsBitwiseIdentical) {
  const Route r = GetParam();
  const check::ModelInputs in = det::inputs(r);
  RerunChecker fwd(det::route_name(r) + " forward (out, final states)");
  RerunChecker bwd(det::route_name(r) + " backward (all gradients)");
  auto add = [&](const check::ModelOutputs<float>& o) {
    fwd.add_run(check::forward_tensors(in, o));
    bwd.add_run(check::backward_tensors(in, o));
  };
  {
    // runs 0..4: one Model reused (stale buffers, carried state and
    // accumulated gradients must not leak into the next run)
    gpu::Model m(in.cfg, in.B, in.T, det::options(r, device()));
    for (int i = 0; i < kRuns / 2; ++i) {
      const auto o = check::run_forward_backward(m, in);
      if (i == 0) {
        expect_nondegenerate(check::forward_tensors(in, o));
        expect_nondegenerate(check::backward_tensors(in, o));
      }
      add(o);
    }
  }
  for (int i = kRuns / 2; i < kRuns; ++i) {  // runs 5..9: a fresh Model each (new allocations)
    gpu::Model m(in.cfg, in.B, in.T, det::options(r, device()));
    add(check::run_forward_backward(m, in));
  }
  const std::string note = det::shape_text(r.d_state) + "; runs 0-4 on one reused Model, 5-9 on fresh Models";
  publish({check::row_from(fwd, "in_process_rerun/" + det::route_name(r) + "/forward",
                           "in_process_rerun_forward", to_string(r.dtype), scan_text(r), note),
           check::row_from(bwd, "in_process_rerun/" + det::route_name(r) + "/backward",
                           "in_process_rerun_backward", to_string(r.dtype), scan_text(r), note)});
  std::cout << "  " << fwd.report() << "\n  " << bwd.report() << "\n";
  EXPECT_EQ(fwd.runs(), kRuns);
  EXPECT_TRUE(fwd.identical()) << fwd.report();
  EXPECT_TRUE(bwd.identical()) << bwd.report();
}

INSTANTIATE_TEST_SUITE_P(Routes, Rerun, ::testing::ValuesIn(det::routes()), param_name);

// =========================================================================================
// (b) across processes
// =========================================================================================

class CrossProcess : public GpuTest {};

TEST_F(CrossProcess, TwoProbeProcessesWriteIdenticalManifests) {
  const std::string probe = probe_path();
  ASSERT_EQ(access(probe.c_str(), X_OK), 0)
      << "the probe binary " << probe << " is missing or not executable (build target "
      << "determinism_probe; it must sit next to test_determinism)";
  TempDir dir;
  std::vector<check::Manifest> manifests;
  std::vector<TensorList> data;
  for (int k = 0; k < 2; ++k) {
    const std::string tag = "probe" + std::to_string(k);
    const std::string mf = dir.file(tag + ".manifest"), df = dir.file(tag + ".data"),
                      lf = dir.file(tag + ".log");
    const ChildResult c = run_child(
        probe, {"--manifest", mf, "--data", df, "--device", std::to_string(device())}, lf, 300);
    if (!(c.exited && c.exit_code == 0)) dir.keep();
    ASSERT_TRUE(c.exited && c.exit_code == 0)
        << "child " << k << " (" << probe << ") " << c.describe() << "; its output (" << lf
        << "):\n"
        << quote_child_log(c.log);
    manifests.push_back(check::read_manifest(mf));
    data.push_back(check::read_tensor_data(df, manifests.back()));
    // the raw values a child wrote must be what it hashed (file I/O sanity)
    ASSERT_TRUE(check::diff_manifests(check::make_manifest(data.back()), manifests.back()).empty())
        << "child " << k << ": " << df << " does not match its manifest " << mf;
  }
  ASSERT_FALSE(manifests[0].empty());
  for (const Route& r : det::routes()) {
    const std::string prefix = det::route_name(r) + "/";
    bool found = false;
    for (const auto& e : manifests[0]) found = found || e.name.rfind(prefix, 0) == 0;
    EXPECT_TRUE(found) << "the probe's manifest has no tensor of route " << det::route_name(r);
  }

  const std::vector<std::string> differing = check::diff_manifests(manifests[0], manifests[1]);
  const std::vector<TensorDiff> diffs = check::diff_tensor_lists(data[0], data[1]);
  std::vector<DeterminismRow> rows;
  for (const Route& r : det::routes()) {
    const std::string prefix = det::route_name(r) + "/";
    TensorList mine;
    for (const auto& x : data[0])
      if (x.name.rfind(prefix, 0) == 0) mine.push_back(x);
    DeterminismRow row;
    row.id = "cross_process/" + det::route_name(r);
    row.test = "cross_process";
    row.dtype = to_string(r.dtype);
    row.scan = scan_text(r);
    row.runs = 2;
    row.hash = check::combined_hash(mine);
    row.tensor = std::to_string(mine.size()) + " tensors";
    row.note = det::shape_text(r.d_state) + "; two determinism_probe processes, fresh Model each";
    for (const auto& d : diffs) {
      if (d.tensor.rfind(prefix, 0) != 0) continue;
      if (row.identical) {
        row.identical = false;
        row.first_diff_index = d.index;
        row.ulp = d.ulp;
        row.tensor = d.tensor;
      }
      row.max_ulp = std::max(row.max_ulp, d.max_ulp);
    }
    rows.push_back(row);
  }
  publish(rows);
  std::ostringstream why;
  for (const auto& d : diffs) why << "\n    " << d.summary();
  if (!differing.empty()) dir.keep();
  EXPECT_TRUE(differing.empty()) << differing.size() << " of " << manifests[0].size()
                                 << " tensors differ between the two processes (files kept in "
                                 << dir.path() << "):" << why.str();
  std::cout << "  cross-process: " << manifests[0].size() << " tensors, "
            << (differing.empty() ? "identical manifests" : "DIFFERENT manifests") << "\n";
}

// =========================================================================================
// (c) under load
// =========================================================================================

class UnderLoad : public GpuTest, public ::testing::WithParamInterface<Route> {};

TEST_P(UnderLoad, RerunsWhileAnotherStreamIsBusyMatchAnIdleRun) {
  const Route r = GetParam();
  const check::ModelInputs in = det::inputs(r);
  RerunChecker fwd(det::route_name(r) + " forward under load");
  RerunChecker bwd(det::route_name(r) + " backward under load");
  gpu::Model m(in.cfg, in.B, in.T, det::options(r, device()));
  {  // run 0: the idle reference
    const auto o = check::run_forward_backward(m, in);
    fwd.add_run(check::forward_tensors(in, o));
    bwd.add_run(check::backward_tensors(in, o));
  }
  GpuBusyLoad load(device());
  ASSERT_TRUE(load.error().empty()) << load.error();
  const int64_t before = load.kernels_completed();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= kRuns; ++i) {  // odd runs on a fresh Model (allocation under load too)
    check::ModelOutputs<float> o;
    if (i % 2 == 1) {
      gpu::Model fresh(in.cfg, in.B, in.T, det::options(r, device()));
      o = check::run_forward_backward(fresh, in);
    } else {
      o = check::run_forward_backward(m, in);
    }
    fwd.add_run(check::forward_tensors(in, o));
    bwd.add_run(check::backward_tensors(in, o));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int64_t during = load.kernels_completed() - before;
  load.stop();
  ASSERT_TRUE(load.error().empty()) << load.error();
  std::ostringstream note;
  note << det::shape_text(r.d_state) << "; run 0 idle, runs 1-" << kRuns
       << " with a memory-bound kernel (" << std::lround(load.kernel_us())
       << " us each) looping on another thread's stream: " << during << " load kernels completed in "
       << std::lround(ms) << " ms of runs";
  publish({check::row_from(fwd, "under_load/" + det::route_name(r) + "/forward",
                           "under_load_rerun_forward", to_string(r.dtype), scan_text(r), note.str()),
           check::row_from(bwd, "under_load/" + det::route_name(r) + "/backward",
                           "under_load_rerun_backward", to_string(r.dtype), scan_text(r),
                           note.str())});
  std::cout << "  " << note.str() << "\n  " << fwd.report() << "\n  " << bwd.report() << "\n";
  RecordProperty("load_kernels_during_runs", std::to_string(during));
  // The load must really have run while the checked runs did.
  EXPECT_GT(during, 0) << "the background load completed no kernel during " << ms
                       << " ms of runs: the check did not run under load";
  EXPECT_TRUE(fwd.identical()) << fwd.report();
  EXPECT_TRUE(bwd.identical()) << bwd.report();
}

INSTANTIATE_TEST_SUITE_P(Routes, UnderLoad, ::testing::ValuesIn(det::routes()), param_name);

// =========================================================================================
// (c2) the scan backward in segments
// =========================================================================================

// The checkpointed routes with every chunk's state saved and a dB/dC partial budget of one
// byte (one chunk per segment: 19 backward launches at T 300), and with the budget fitted to
// the scratch the workspace shares (kScanPartialsFitScratch), give the bits of the default
// budget (one launch), forward and backward: RunOptions::scan_partial_budget trades memory
// for launches, never bits. So do grouped checkpoints (RunOptions::scan_checkpoints), whose
// backward refills each group's states and runs one segment per group, in less memory.
class ScanSegments : public GpuTest, public ::testing::WithParamInterface<Route> {};

TEST_P(ScanSegments, PartialBudgetDoesNotChangeBits) {
  const Route r = GetParam();
  const check::ModelInputs in = det::inputs(r);
  const Dims dims = Dims::from(in.cfg);
  const kern::scan::Shape shape{in.B, in.T, dims.di, dims.ds};
  const auto segments = [&](size_t budget) {
    return kern::scan::geometry(shape, ScanRoute::Checkpointed, /*backward=*/true, budget).segments;
  };
  ASSERT_EQ(segments(0), 1) << "the default budget should run one segment here";
  ASSERT_GT(segments(1), 2);
  RerunChecker both(det::route_name(r) +
                    " default budget vs one chunk per segment vs the budget that fits the shared scratch");
  int64_t bytes_default = 0, bytes_fit = 0, bytes_grouped = 0;
  for (size_t budget : {size_t(0), size_t(1), gpu::kScanPartialsFitScratch}) {
    gpu::RunOptions o = det::options(r, device());
    o.scan_checkpoints = ScanCheckpoints::Every;
    o.scan_partial_budget = budget;
    gpu::Model m(in.cfg, in.B, in.T, o);
    EXPECT_EQ(m.scan_checkpoint_group(), 1);
    (budget == 0 ? bytes_default : bytes_fit) = m.device_bytes_allocated();
    both.add_run(det::route_tensors(r, in, check::run_forward_backward(m, in)));
  }
  {
    gpu::RunOptions o = det::options(r, device());
    o.scan_checkpoints = ScanCheckpoints::Grouped;
    gpu::Model m(in.cfg, in.B, in.T, o);
    const int64_t G = m.scan_checkpoint_group();
    std::cout << "  grouped checkpoints: " << G << " chunks per saved state\n";
    EXPECT_GE(G, 2);
    bytes_grouped = m.device_bytes_allocated();
    both.add_run(det::route_tensors(r, in, check::run_forward_backward(m, in)));
  }
  std::cout << "  " << both.report() << "\n";
  EXPECT_TRUE(both.identical()) << both.report();
  // the fitted budget never costs memory: its workspace lives inside o_dn | dH_typed; the
  // grouped checkpoints' workspace lives there too, and they save fewer states
  EXPECT_LE(bytes_fit, bytes_default);
  EXPECT_LT(bytes_grouped, bytes_fit);
}

std::vector<Route> checkpointed_routes() {
  std::vector<Route> v;
  for (const Route& r : det::routes())
    if (r.scan == ScanMode::Checkpointed &&
        (r.dtype == DType::F32 || r.typed == gpu::TypedGemm::TensorCore))
      v.push_back(r);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Routes, ScanSegments, ::testing::ValuesIn(checkpointed_routes()),
                         param_name);

// =========================================================================================
// (d) batch composition (reported, not required)
// =========================================================================================

class BatchComposition : public GpuTest, public ::testing::WithParamInterface<Route> {};

// One forward + backward of `in` on a fresh Model.
check::ModelOutputs<float> run_once(const Route& r, const check::ModelInputs& in) {
  gpu::Model m(in.cfg, in.B, in.T, det::options(r, device()));
  return check::run_forward_backward(m, in);
}

TEST_P(BatchComposition, SampleAloneVsInsideBatchesOf2_3_5) {
  const Route r = GetParam();
  constexpr int64_t kPool = 5;
  const check::ModelInputs pool = det::inputs(r, kPool);

  // sample b alone (B = 1), and the precondition: alone runs reproduce
  std::vector<TensorList> alone(kPool);
  for (int64_t b = 0; b < kPool; ++b) {
    const check::ModelInputs one = check::select_samples(pool, {b});
    alone[size_t(b)] = check::sample_tensors(one, run_once(r, one), 0);
    expect_nondegenerate(alone[size_t(b)]);
    if (b == 0) {
      const auto again =
          check::diff_tensor_lists(alone[0], check::sample_tensors(one, run_once(r, one), 0));
      ASSERT_TRUE(again.empty()) << "B=1 is not even reproducible: " << again.front().summary();
    }
  }

  std::vector<DeterminismRow> rows;
  for (int64_t B : {int64_t(2), int64_t(3), int64_t(5)}) {
    std::vector<int64_t> idx;
    for (int64_t b = 0; b < B; ++b) idx.push_back(b);
    const check::ModelInputs batch = check::select_samples(pool, idx);
    const check::ModelOutputs<float> o = run_once(r, batch);
    DeterminismRow row;
    row.id = "batch_invariance/" + det::route_name(r) + "/B" + std::to_string(B);
    row.test = "batch_invariance";
    row.dtype = to_string(r.dtype);
    row.scan = scan_text(r);
    row.runs = int(B) + 1;
    row.hash = check::combined_hash(alone[0]);
    row.required = false;
    row.tensor = "per-sample: out rows, final states, d_input rows, initial-state grads";
    int64_t differing_tensors = 0, compared = 0;
    std::ostringstream detail;
    for (int64_t b = 0; b < B; ++b) {
      const TensorList in_batch = check::sample_tensors(batch, o, b);
      expect_nondegenerate(in_batch);
      const auto diffs = check::diff_tensor_lists(alone[size_t(b)], in_batch);
      compared += int64_t(in_batch.size());
      differing_tensors += int64_t(diffs.size());
      for (const auto& d : diffs) {
        EXPECT_TRUE(d.problem.empty()) << d.summary();  // shapes must match
        if (row.identical) {
          row.identical = false;
          row.first_diff_index = d.index;
          row.ulp = d.ulp;
          row.tensor = "sample " + std::to_string(b) + " " + d.tensor;
        }
        row.max_ulp = std::max(row.max_ulp, d.max_ulp);
        detail << "\n      sample " << b << " " << d.summary();
      }
    }
    std::ostringstream note;
    note << det::shape_text(r.d_state, B) << " vs B1 per sample; "
         << (row.identical ? "identical"
                           : std::to_string(differing_tensors) + " of " + std::to_string(compared) +
                                 " per-sample tensors differ, max " + std::to_string(row.max_ulp) +
                                 " ulp")
         << "; reported, not required: cuBLAS may choose another GEMM kernel (and summation "
            "order) for another M = B*T";
    row.note = note.str();
    std::cout << "  B=" << B << " vs B=1 (" << det::route_name(r) << "): "
              << (row.identical ? "bitwise identical" : "differs") << first_lines(detail.str(), 12)
              << "\n";
    RecordProperty("B" + std::to_string(B) + "_max_ulp", std::to_string(row.max_ulp));
    rows.push_back(row);
  }
  publish(rows);
}

std::vector<Route> ds16_routes() {
  std::vector<Route> v;
  for (const Route& r : det::routes())
    if (r.d_state == 16) v.push_back(r);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Routes, BatchComposition, ::testing::ValuesIn(ds16_routes()), param_name);

// =========================================================================================
// (e) negative control: an atomicAdd reduction must be detected
// =========================================================================================

class NegativeControl : public GpuTest {};

TEST_F(NegativeControl, AtomicAddReductionIsDetectedWithinTenRuns) {
  // 65536 x 32 f32 values of mixed magnitude (N(0,1) * 2^k, k in [-10, 10]):
  // each of the 32 sums receives 65536 atomicAdds from ~8000 blocks, and with
  // partial sums up to ~2^18 nearly every addition rounds, so any change of
  // order changes the bits.
  constexpr int64_t kRows = 65536, kCols = 32;
  check::SplitMix64 rng(0x0a70'11c5ULL);
  std::vector<float> x(size_t(kRows * kCols));
  for (auto& v : x) {
    const int k = int(rng.next() % 21) - 10;
    v = float(std::ldexp(rng.normal(), k));
  }
  // exact column sums and Σ|x| in double, for the accuracy bound below
  std::vector<double> exact(kCols, 0.0), abs_sum(kCols, 0.0);
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    exact[size_t(i % kCols)] += double(x[size_t(i)]);
    abs_sum[size_t(i % kCols)] += std::fabs(double(x[size_t(i)]));
  }
  const double u = std::ldexp(1.0, -24);
  const double gamma = double(kRows - 1) * u / (1.0 - double(kRows - 1) * u);  // recursive summation

  Stream s;
  DeviceFloats dx = device_floats(x.size(), "negative control input");
  DeviceFloats dout = device_floats(kCols, "negative control output");
  MC_CUDA_CHECK(cudaMemcpyAsync(dx.get(), x.data(), x.size() * sizeof(float),
                                cudaMemcpyHostToDevice, s.get()),
                "negative control upload");
  RerunChecker atomic("atomicAdd column sum (testing_atomic_reduce.cu)");
  RerunChecker fixed("fixed-order column sum (same data)");
  std::vector<float> host(kCols);
  auto fetch = [&](const char* what) {
    MC_CUDA_CHECK(cudaMemcpyAsync(host.data(), dout.get(), kCols * sizeof(float),
                                  cudaMemcpyDeviceToHost, s.get()),
                  what);
    MC_CUDA_CHECK(cudaStreamSynchronize(s.get()), what);
    for (int64_t c = 0; c < kCols; ++c)  // a real sum, not garbage that merely differs
      EXPECT_LE(std::fabs(double(host[size_t(c)]) - exact[size_t(c)]), gamma * abs_sum[size_t(c)])
          << what << " column " << c << ": " << host[size_t(c)] << " vs exact " << exact[size_t(c)];
    return TensorList{{"column_sums", host}};
  };
  for (int i = 0; i < kRuns; ++i) {
    atomic_column_sum(dx.get(), dout.get(), kRows, kCols, s.get());
    atomic.add_run(fetch("atomic_column_sum"));
    fixed_order_column_sum(dx.get(), dout.get(), kRows, kCols, s.get());
    fixed.add_run(fetch("fixed_order_column_sum"));
  }
  DeterminismRow neg = check::row_from(atomic, "negative_control_atomic", "negative_control_atomic",
                                       "f32", "n/a", "");
  neg.expected_identical = false;
  neg.note = std::to_string(kRows) + "x" + std::to_string(kCols) +
             " atomicAdd column sums: " + std::to_string(atomic.distinct_hashes()) +
             " distinct hashes in " + std::to_string(kRuns) +
             " runs (passes when a difference IS detected)";
  DeterminismRow pos = check::row_from(fixed, "control_fixed_order_sum", "control_fixed_order_sum",
                                       "f32", "n/a", "same data, one thread per column in row order");
  publish({neg, pos});
  std::cout << "  measured: " << atomic.report() << "\n  " << fixed.report() << "\n";
  RecordProperty("atomic_distinct_hashes", std::to_string(atomic.distinct_hashes()));
  EXPECT_FALSE(atomic.identical())
      << "NOT DETECTED: " << kRuns << " runs of an atomicAdd reduction (" << kRows
      << " atomics into each of " << kCols << " floats) gave bitwise identical sums (hash "
      << check::hash_hex(atomic.reference_hash())
      << "); on this GPU the rerun checker could not show that it sees nondeterminism";
  EXPECT_TRUE(fixed.identical()) << fixed.report();
}

// =========================================================================================
// cross-GPU: the same inputs give the same bits on GPU 0 and GPU 1
// =========================================================================================

class CrossGpu : public GpuTest {};

TEST_F(CrossGpu, SameInputsGiveSameBitsOnTwoDevices) {
  const int n = gpu::device_count();
  if (n < 2)
    GTEST_SKIP() << "cross-GPU check needs 2 visible CUDA devices, found " << n
                 << " (CUDA_VISIBLE_DEVICES="
                 << (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES")
                                                         : "unset")
                 << ")";
  const int a = device(), b = (a + 1) % n;
  const gpu::DeviceInfo ia = gpu::device_info(a), ib = gpu::device_info(b);
  if (ia.name != ib.name || ia.sm_count != ib.sm_count || ia.cc_major != ib.cc_major ||
      ia.cc_minor != ib.cc_minor)
    GTEST_SKIP() << "GPU " << a << " (" << ia.name << ", " << ia.sm_count << " SMs) and GPU " << b
                 << " (" << ib.name << ", " << ib.sm_count
                 << " SMs) differ: bitwise equality is only claimed for the same model and SM count";
  std::cout << "  " << ia.to_string() << "\n  " << ib.to_string() << "\n";
  std::vector<DeterminismRow> rows;
  for (const Route& r : det::routes()) {
    const TensorList ta = det::run_route_once(r, a);
    const TensorList tb = det::run_route_once(r, b);
    const auto diffs = check::diff_tensor_lists(ta, tb);
    DeterminismRow row;
    row.id = "cross_gpu/" + det::route_name(r);
    row.test = "cross_gpu";
    row.dtype = to_string(r.dtype);
    row.scan = scan_text(r);
    row.runs = 2;
    row.hash = check::combined_hash(ta);
    row.identical = diffs.empty();
    row.tensor = std::to_string(ta.size()) + " tensors";
    row.note = det::shape_text(r.d_state) + "; GPU " + std::to_string(a) + " vs GPU " +
               std::to_string(b) + " (" + ia.name + ")";
    std::ostringstream why;
    for (const auto& d : diffs) {
      if (row.first_diff_index < 0) {
        row.first_diff_index = d.index;
        row.ulp = d.ulp;
        row.tensor = d.tensor;
      }
      row.max_ulp = std::max(row.max_ulp, d.max_ulp);
      why << "\n    " << d.summary();
    }
    rows.push_back(row);
    EXPECT_TRUE(diffs.empty()) << det::route_name(r) << ": GPU " << a << " and GPU " << b
                               << " differ in " << diffs.size() << " tensors:" << why.str();
  }
  gpu::select_device(a);  // leave this thread on the test's own device
  publish(rows);
}

// =========================================================================================
// the allocation this GPU test process got (the parser's own checks and the
// other device-free checks are in validation/cpu/test_determinism_tools.cpp)
// =========================================================================================

// Under `ctest --resource-spec-file` this checks the variables CTest really
// sets for this process; without a spec file, that none are set.
TEST(GpuAllocation, ThisProcessAllocationIsWellFormed) {
  const GpuAllocation& a = ctest_gpu_allocation();
  EXPECT_TRUE(a.error.empty()) << a.error;
  std::cout << "  CTest resource allocation: "
            << (a.active ? "on, device " + std::to_string(a.device) : std::string("off")) << "\n";
}

}  // namespace
}  // namespace mc::testing
