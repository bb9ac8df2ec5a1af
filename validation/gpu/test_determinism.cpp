// ctest-labels: gpu;determinism
// ctest-timeout: 600
// test_determinism.cpp — bitwise determinism of the GPU pipeline (issue 5
// part 1) and the cross-GPU check (part 3). Every check hashes (FNV-1a 64 over
// the raw bytes) every output, final state and gradient of a forward +
// backward (determinism.hpp) on the problems of determinism_cases.hpp
// (dm 64, L 2, B 2, T 300, ds 16 sequential + parallel, ds 128 parallel;
// f32, bf16, f16) and, on a mismatch, names the tensor, the first differing
// index and the ULP distance there.
//
//   Rerun            10 runs in one process (5 on one reused Model, 5 on fresh
//                    Models) are bitwise identical, forward and backward.
//   CrossProcess     two child processes (determinism_probe, output redirected
//                    to files so no child line can reach ctest) write identical
//                    hash manifests.
//   UnderLoad        10 runs while another host thread keeps the GPU busy with
//                    a memory-bound kernel on its own stream equal an idle run.
//   BatchComposition sample b alone (B=1) vs inside batches of 2, 3, 5:
//                    measured and REPORTED (identical or max ULP), not
//                    required — cuBLAS may pick another GEMM kernel per M=B*T.
//   NegativeControl  a test-only atomicAdd reduction IS detected as
//                    nondeterministic by the same checker within 10 runs (and
//                    its fixed-order twin is not).
//   CrossGpu         the same inputs on two GPUs give the same bits (skipped
//                    with fewer than 2 visible GPUs or unlike GPUs).
//   DeterminismChecker / ChildProcess: device-free checks of the checker,
//                    the manifest files, the JSON writer and the child runner.
//
// With MAMBACHECK_DETERMINISM_JSON=<path> every result is merged into <path>
// (reports/README.md "determinism" schema) with a context naming what a
// bitwise claim depends on (GPU, SMs, driver, runtime, cuBLAS, git sha, flags).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
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
#include "check/determinism.hpp"
#include "validation/support/determinism_cases.hpp"
#include "check/gpu_allocation.hpp"
#include "validation/support/gpu_test.hpp"
#include "gpu/model.hpp"
#include "check/problem.hpp"
#include "check/report_json.hpp"
#include "validation/gpu/testing_atomic_reduce.cuh"
#include "validation/gpu/testing_busy_load.cuh"

extern char** environ;

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
  return std::string(to_string(info.param.dtype)) + "_" + to_string(info.param.scan) + "_ds" +
         std::to_string(info.param.d_state);
}

std::string scan_text(const Route& r) {
  return std::string(to_string(r.scan)) + " ds" + std::to_string(r.d_state);
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
       {"ctest_resource_allocation", json_string(ctest_gpu_allocation().active ? "on" : "off")},
       {"bitwise_claim",
        json_string("identical bits are claimed only for this GPU model and SM count, driver, "
                    "CUDA runtime and cuBLAS versions, git sha and build flags, per route (dtype, "
                    "scan, d_state, f32 GEMM math) and problem shape")}},
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

// ---- child processes --------------------------------------------------------------------

// A child's log as it may appear in this process's output: a line that could
// read as a gtest verdict ("[  SKIPPED ]", "[  FAILED  ]", ...) would make
// ctest misjudge the parent (its SKIP_REGULAR_EXPRESSION), so brackets are
// neutralised and every line is prefixed.
std::string quote_child_log(const std::string& log) {
  std::istringstream is(log);
  std::string out, line;
  while (std::getline(is, line)) {
    for (char& c : line)
      if (c == '[' || c == ']') c = '|';
    out += "    child> " + line + "\n";
  }
  return out;
}

struct ChildResult {
  int exit_code = -1;  // valid when exited
  bool exited = false;
  int signal = 0;
  bool timed_out = false;
  std::string spawn_error;
  std::string log;  // the child's stdout + stderr (from its log file)
  std::string describe() const {
    std::ostringstream os;
    if (!spawn_error.empty()) os << "could not start: " << spawn_error;
    else if (timed_out) os << "timed out and was killed";
    else if (exited) os << "exit status " << exit_code;
    else os << "killed by signal " << signal;
    return os.str();
  }
};

// Runs exe with args, stdin from /dev/null, stdout and stderr into log_path
// (never into this process's output), and waits at most timeout_s.
ChildResult run_child(const std::string& exe, const std::vector<std::string>& args,
                      const std::string& log_path, int timeout_s) {
  ChildResult r;
  std::vector<std::string> store{exe};
  store.insert(store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : store) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    r.spawn_error = exe + ": " + std::strerror(rc);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      r.spawn_error = std::string("waitpid: ") + std::strerror(errno);
      return r;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);  // our own child, by its pid
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!r.timed_out) {
    r.exited = WIFEXITED(status);
    r.exit_code = r.exited ? WEXITSTATUS(status) : -1;
    r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  std::ifstream f(log_path);
  std::ostringstream os;
  os << f.rdbuf();
  r.log = os.str();
  return r;
}

// The probe sits next to this test binary (same build folder, also after
// scripts/stage_build.sh); MAMBACHECK_DETERMINISM_PROBE overrides.
std::string probe_path() {
  if (const char* p = std::getenv("MAMBACHECK_DETERMINISM_PROBE")) return p;
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "determinism_probe";
  std::string self(buf, size_t(n));
  return self.substr(0, self.rfind('/') + 1) + "determinism_probe";
}

// A fresh directory under $TMPDIR (or /tmp), removed by the destructor unless keep().
class TempDir {
 public:
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/mc-determinism-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("mkdtemp(" + tmpl + "): " + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    if (keep_) return;
    for (const auto& f : files_) std::remove((path_ + "/" + f).c_str());
    rmdir(path_.c_str());
  }
  std::string file(const std::string& name) {
    files_.push_back(name);
    return path_ + "/" + name;
  }
  void keep() { keep_ = true; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> files_;
  bool keep_ = false;
};

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
// cross-GPU (issue 5 part 3)
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
// device-free checks of the machinery (run on any machine)
// =========================================================================================

TensorList sample_list() {
  TensorList t;
  t.push_back({"a", {1.f, -2.f, 3.5f}});
  t.push_back({"b", std::vector<float>(100, 0.25f)});
  for (int i = 0; i < 100; ++i) t[1].values[size_t(i)] = float(i) * 0.125f - 3.f;
  return t;
}

float next_up(float x) { return std::nextafter(x, INFINITY); }

TEST(DeterminismChecker, IdenticalRunsAreIdentical) {
  RerunChecker c("synthetic");
  for (int i = 0; i < 5; ++i) c.add_run(sample_list());
  EXPECT_TRUE(c.identical()) << c.report();
  EXPECT_EQ(c.runs(), 5);
  EXPECT_EQ(c.distinct_hashes(), 1);
  EXPECT_EQ(c.first_mismatch_run(), -1);
}

TEST(DeterminismChecker, NamesRunTensorIndexAndUlpOfAOneUlpChange) {
  RerunChecker c("synthetic");
  c.add_run(sample_list());
  c.add_run(sample_list());
  TensorList bad = sample_list();
  bad[1].values[37] = next_up(bad[1].values[37]);  // one ulp, one element
  bad[1].values[90] = -bad[1].values[90];          // and a sign flip further on
  c.add_run(bad);
  c.add_run(sample_list());
  ASSERT_FALSE(c.identical());
  EXPECT_EQ(c.first_mismatch_run(), 2);
  EXPECT_EQ(c.distinct_hashes(), 2);
  ASSERT_EQ(c.first_mismatch().size(), 1u);
  const TensorDiff& d = c.first_mismatch()[0];
  EXPECT_EQ(d.tensor, "b");
  EXPECT_EQ(d.index, 37);
  EXPECT_EQ(d.ulp, 1);
  EXPECT_EQ(d.n_diff, 2);
  const float v90 = sample_list()[1].values[90];
  EXPECT_EQ(d.max_ulp, check::ulp_distance(v90, -v90));
  EXPECT_NE(c.report().find("run 2"), std::string::npos) << c.report();
  EXPECT_NE(c.report().find("index 37"), std::string::npos) << c.report();

  const DeterminismRow row = check::row_from(c, "x", "t", "f32", "parallel", "");
  EXPECT_FALSE(row.identical);
  EXPECT_EQ(row.first_diff_index, 37);
  EXPECT_EQ(row.ulp, 1);
  EXPECT_EQ(row.tensor, "b");
}

TEST(DeterminismChecker, SignedZeroIsABitDifferenceAtZeroUlp) {
  TensorList a{{"z", {0.f, 1.f}}}, b{{"z", {-0.f, 1.f}}};
  const auto d = check::diff_tensor_lists(a, b);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].index, 0);
  EXPECT_EQ(d[0].ulp, 0);
}

TEST(DeterminismChecker, MissingAndResizedTensorsAreReported) {
  TensorList a = sample_list(), b = sample_list();
  b[0].values.push_back(7.f);
  b.push_back({"extra", {1.f}});
  const auto d = check::diff_tensor_lists(a, b);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NE(d[0].problem.find("sizes differ"), std::string::npos) << d[0].summary();
  EXPECT_EQ(d[1].tensor, "extra");
  EXPECT_NE(d[1].problem.find("only in the second"), std::string::npos) << d[1].summary();
}

TEST(DeterminismChecker, UlpDistanceAgreesWithFirstBitDifference) {
  check::SplitMix64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const float a = float(rng.normal() * std::ldexp(1.0, int(rng.next() % 40) - 20));
    float b = a;
    const int steps = int(rng.next() % 5);
    for (int s = 0; s < steps; ++s) b = next_up(b);
    if (rng.next() % 7 == 0) b = -b;
    const check::BitDiff bd = check::first_bit_difference(&a, &b, 1);
    EXPECT_EQ(check::ulp_distance(a, b), bd.index < 0 ? 0 : bd.ulp) << a << " vs " << b;
  }
  EXPECT_EQ(check::ulp_distance(1.f, next_up(1.f)), 1);
  EXPECT_EQ(check::ulp_distance(-std::ldexp(1.f, -149), std::ldexp(1.f, -149)), 2);
}

TEST(DeterminismChecker, ManifestTextRoundTripsAndRejectsMalformedLines) {
  const check::Manifest m = check::make_manifest(sample_list());
  const std::string text = check::manifest_to_text(m, "header line 1\nheader line 2");
  EXPECT_EQ(text.rfind("# header line 1\n# header line 2\n", 0), 0u) << text;
  const check::Manifest back = check::manifest_from_text(text, "mem");
  ASSERT_EQ(back.size(), m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(back[i].name, m[i].name);
    EXPECT_EQ(back[i].count, m[i].count);
    EXPECT_EQ(back[i].hash, m[i].hash);
  }
  EXPECT_TRUE(check::diff_manifests(m, back).empty());
  try {
    check::manifest_from_text("# h\na 3 0x0123\n", "bad.manifest");
    FAIL() << "a short hash was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.manifest:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check::manifest_from_text("a 3 0x0123456789abcdef extra\n", "x"), std::runtime_error);
  check::Manifest changed = m;
  changed[0].hash ^= 1;
  const auto names = check::diff_manifests(m, changed);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0], "a");
}

TEST(DeterminismChecker, CombinedHashIsTheHashOfTheConcatenation) {
  const TensorList t = sample_list();
  std::vector<float> all;
  for (const auto& x : t) all.insert(all.end(), x.values.begin(), x.values.end());
  EXPECT_EQ(check::combined_hash(t), check::fnv1a64(all.data(), all.size() * sizeof(float)));
}

TEST(DeterminismChecker, TensorDataFilesRoundTrip) {
  TempDir dir;
  const TensorList t = sample_list();
  const std::string mf = dir.file("t.manifest"), df = dir.file("t.data");
  check::write_manifest(mf, check::make_manifest(t), "test");
  check::write_tensor_data(df, t);
  const check::Manifest m = check::read_manifest(mf);
  const TensorList back = check::read_tensor_data(df, m);
  EXPECT_TRUE(check::diff_tensor_lists(t, back).empty());
  check::Manifest longer = m;
  longer[0].count += 1;
  EXPECT_THROW(check::read_tensor_data(df, longer), std::runtime_error);
}

TEST(DeterminismChecker, JsonRowsAreMergedByIdAndNothingElseIsOverwritten) {
  TempDir dir;
  const std::string path = dir.file("det.json");
  dir.file("det.json.lock");
  DeterminismRow a, b, a2, c;
  a.id = "t/a";
  a.test = "in_process_rerun_forward";
  a.dtype = "f32";
  a.scan = "parallel ds16";
  a.runs = 10;
  a.hash = 0x1234;
  b = a;
  b.id = "t/b";
  b.note = "quote \" and backslash \\ and newline \n";
  a2 = a;
  a2.identical = false;
  a2.first_diff_index = 5;
  a2.ulp = 3;
  c = a;
  c.id = "t/c";
  check::merge_determinism_json(path, "{\"gpu_name\": \"first\"}", {a, b});
  check::merge_determinism_json(path, "{\"gpu_name\": \"second\"}", {a2, c});
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  EXPECT_NE(text.find("\"schema\": \"mambacheck-validation/1\""), std::string::npos);
  EXPECT_NE(text.find("\"second\""), std::string::npos);
  EXPECT_EQ(text.find("\"first\""), std::string::npos);
  // a replaced in place (identical false now), b kept, c appended: 3 rows in order a, b, c
  const size_t pa = text.find("{\"id\": \"t/a\""), pb = text.find("{\"id\": \"t/b\""),
               pc = text.find("{\"id\": \"t/c\"");
  ASSERT_NE(pa, std::string::npos);
  ASSERT_NE(pb, std::string::npos);
  ASSERT_NE(pc, std::string::npos);
  EXPECT_LT(pa, pb);
  EXPECT_LT(pb, pc);
  EXPECT_EQ(text.find("{\"id\": \"t/a\"", pa + 1), std::string::npos) << text;
  EXPECT_NE(text.find("\"first_diff_index\": 5", pa), std::string::npos) << text;
  EXPECT_NE(text.find("quote \\\" and backslash \\\\ and newline \\n"), std::string::npos) << text;
  // a foreign file is never overwritten
  const std::string foreign = dir.file("foreign.json");
  dir.file("foreign.json.lock");
  { std::ofstream(foreign) << "{\"precision\": []}\n"; }
  EXPECT_THROW(check::merge_determinism_json(foreign, "{}", {a}), std::runtime_error);
}

TEST(DeterminismChecker, SamplesAreSelectedAndSlicedConsistently) {
  ModelConfig cfg = det::config(16);
  const check::ModelInputs pool = check::make_model_inputs(cfg, 3, 5, 11);
  const check::ModelInputs same = check::select_samples(pool, {0, 1, 2});
  EXPECT_EQ(same.X, pool.X);
  EXPECT_EQ(same.conv0, pool.conv0);
  EXPECT_EQ(same.ssm0, pool.ssm0);
  EXPECT_EQ(same.d_out, pool.d_out);
  // fake outputs whose every element encodes (tensor, position): slicing sample
  // 2 of the pool must give what sample 0 of the 1-sample selection gives
  const Dims d = Dims::from(cfg);
  auto fake = [&](const check::ModelInputs& in) {
    check::ModelOutputs<float> o;
    o.out = in.d_out;  // rows follow the samples like out's
    o.dX = in.X;
    o.conv_final = in.conv0;
    o.ssm_final = in.ssm0;
    o.d_conv0 = in.conv0;
    o.d_ssm0 = in.ssm0;
    o.grads = in.params;
    return o;
  };
  const check::ModelInputs one = check::select_samples(pool, {2});
  EXPECT_EQ(one.B, 1);
  EXPECT_EQ(int64_t(one.X.size()), 5 * d.mid);
  const auto a = check::sample_tensors(pool, fake(pool), 2);
  const auto b = check::sample_tensors(one, fake(one), 0);
  EXPECT_TRUE(check::diff_tensor_lists(a, b).empty());
  EXPECT_FALSE(check::diff_tensor_lists(a, check::sample_tensors(pool, fake(pool), 1)).empty());
  EXPECT_THROW(check::select_samples(pool, {3}), std::out_of_range);
}

TEST(GpuAllocation, ParsesCtestResourceVariables) {
  const GpuAllocation off = parse_gpu_allocation(nullptr, nullptr);
  EXPECT_FALSE(off.active);
  EXPECT_EQ(off.device, 0);
  const GpuAllocation one = parse_gpu_allocation("1", "id:1,slots:1");
  EXPECT_TRUE(one.active);
  EXPECT_TRUE(one.error.empty()) << one.error;
  EXPECT_EQ(one.device, 1);
  EXPECT_EQ(parse_gpu_allocation("1", "id:3,slots:2;id:0,slots:1").device, 3);
  const GpuAllocation bad = parse_gpu_allocation("1", "id:gpu0,slots:1");
  EXPECT_NE(bad.error.find("CTEST_RESOURCE_GROUP_0_GPUS"), std::string::npos) << bad.error;
  EXPECT_NE(bad.error.find("id:gpu0,slots:1"), std::string::npos) << bad.error;
  EXPECT_NE(parse_gpu_allocation("1", nullptr).error.find("RESOURCE_GROUPS"), std::string::npos);
  EXPECT_NE(parse_gpu_allocation("x", "id:0,slots:1").error.find("CTEST_RESOURCE_GROUP_COUNT"),
            std::string::npos);
  // what CTest sets for a test without RESOURCE_GROUPS under a spec file
  EXPECT_NE(parse_gpu_allocation("0", nullptr).error.find("RESOURCE_GROUPS"), std::string::npos);
  // spread mode (no RESOURCE_LOCK) without a spec file is refused, with one it is fine
  EXPECT_NE(parse_gpu_allocation(nullptr, nullptr, "1").error.find("--resource-spec-file"),
            std::string::npos);
  EXPECT_TRUE(parse_gpu_allocation(nullptr, nullptr, "0").error.empty());
  EXPECT_TRUE(parse_gpu_allocation("1", "id:1,slots:1", "1").error.empty());
}

// Under `ctest --resource-spec-file` this checks the variables CTest really
// sets for this process; without a spec file, that none are set.
TEST(GpuAllocation, ThisProcessAllocationIsWellFormed) {
  const GpuAllocation& a = ctest_gpu_allocation();
  EXPECT_TRUE(a.error.empty()) << a.error;
  std::cout << "  CTest resource allocation: "
            << (a.active ? "on, device " + std::to_string(a.device) : std::string("off")) << "\n";
}

TEST(ChildProcess, OutputGoesToTheLogAndVerdictLinesAreNeutralised) {
  const std::string probe = probe_path();
  ASSERT_EQ(access(probe.c_str(), X_OK), 0) << probe << " missing (target determinism_probe)";
  TempDir dir;
  const std::string log = dir.file("usage.log");
  const ChildResult c = run_child(probe, {"--no-such-flag", "x"}, log, 60);
  ASSERT_TRUE(c.exited) << c.describe();
  EXPECT_EQ(c.exit_code, 2) << c.log;
  EXPECT_NE(c.log.find("usage: determinism_probe"), std::string::npos) << c.log;
  const std::string q = quote_child_log("[  SKIPPED ] X.Y\n[       OK ] A.B\n");
  EXPECT_EQ(q.find("[  SKIPPED ]"), std::string::npos) << q;
  EXPECT_EQ(q.find("[       OK ]"), std::string::npos) << q;
  EXPECT_NE(q.find("child> |  SKIPPED | X.Y"), std::string::npos) << q;
}

}  // namespace
}  // namespace mc::testing
