// bench_train_step.cpp — Google Benchmark of one training step (forward +
// backward, no optimizer) of the Mamba-1 backbone through gpu::Model, against
// state-spaces/mamba's figures measured on an H200 (the table in bench/README.md).
//
// Rows (default): the table — d_model / T / layers = 768/512/1,
// 768/2048/1, 1024/2048/1, 2048/2048/1, 768/2048/4 — at B = 8, d_state 16,
// expand 2, d_conv 4, input_dim = d_model, each in f32 on the strict GEMM tier
// and in bf16 on the tensor-core tier (gpu/model.hpp; --gemm=tf32 and
// --typed-gemm=strict select the other tiers, recorded in the names and the
// context). --sweep: every width (768/1024/2048) × layers {1, 4} × T {512, 2048};
// --quick: 768/512/1 only.
//
// Per row, all on the model's stream with CUDA events, the recurrent state
// reset (and the device synchronised) before every step, outside the events:
//   eager_us   median of --reps eager steps (forward_device + backward_device);
//   graph_us   median of --reps replays of the step captured as one CUDA graph
//              (Model::capture_step / replay_step); Google Benchmark's own loop
//              times replays too (real_time);
//   phases     GEMM / scan / elementwise stream time of eager steps from the
//              Model's phase-timing hooks (gpu/phase_timer.hpp): mean per step
//              over --reps steps timed separately (the events add a little);
//   memory     peak_bytes = Model::device_bytes_allocated() (every buffer of the
//              step and the cuBLAS workspace; the step allocates nothing), and
//              the cudaMemGetInfo drops across construction + one step
//              (mem_used_bytes) and across the graph capture (graph_mem_bytes);
//   peer       the state-spaces/mamba graph figure of the issue for this row
//              (peer_graph_us; 0 = none) and its peak memory (peer_peak_gib: the
//              smaller of the figure and the fresh-process measurement,
//              check::peer_peak_bytes), speedup_vs_peer =
//              peer_graph_us / graph_us, the target (bf16 tensor-core >= 2,
//              f32 strict >= 1.5; 0 = no target for this tier), meets_target,
//              peak_vs_peer = peak GiB / peer GiB;
//   checks     verified = 1 when a host-visible eager step from zero state is
//              finite everywhere, graph_bitwise_equal = 1 when a replay's output
//              and gradients equal that eager step's bit for bit.
// A summary table (the peer figure and the ratio beside each row) is printed
// on stderr at the end.
//
// FLOP model (written into the JSON context; elementwise kernels ignored):
//   per layer, forward GEMMs  G = 2*BT*(dm*2di + di*xd + dr*di + di*dm)
//   backbone:  forward  L*G + 2*BT*mid*dm            (input_proj)
//              backward 2*L*G + 2*BT*mid*dm          (dX and dW per GEMM; input_proj dW only)
//              scan     L*(9 + 20)*BT*di*ds          (forward ~9, backward ~20 flops per state update)
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_context.hpp"
#include "bench/bench_flags.hpp"
#include "bench/cuda_util.hpp"
#include "bench/shard_launcher.hpp"
#include "bench/timed_loop.hpp"
#include "check/peer_step.hpp"
#include "core/config.hpp"
#include "core/param_layout.hpp"
#include "gpu/model.hpp"
#include "kernels/cuda_check.hpp"

namespace mc::bench {
namespace {

constexpr const char* kProgram = "bench_train_step";

// ---- the peer (bench/README.md) -------------------------------------------------------------------------

// The peer's figures: check/peer_step.hpp.
using PeerRow = check::PeerStepRow;
constexpr double kTargetBf16 = 2.0;  // x the peer's bf16 graph figure (tensor-core tier)
constexpr double kTargetF32 = 1.5;   // x the peer's f32 graph figure (strict tier)

const PeerRow* peer_of(int dm, int64_t T, int L) { return check::peer_step_row(dm, T, L); }

// ---- cases ----------------------------------------------------------------------------------

struct StepCase {
  const char* width_name;  // the model whose layer width this is
  int d_model, n_layers;
  int64_t B, T;
  DType dtype;
  gpu::GemmMath gemm;
  gpu::TypedGemm typed;
  int group;
  std::string name;
  gpu::GemmTier tier() const { return gpu::gemm_tier(dtype, gemm, typed); }
  // The target applies to the default tiers only.
  double target() const {
    if (dtype == DType::F32) return tier() == gpu::GemmTier::Strict ? kTargetF32 : 0.0;
    return tier() == gpu::GemmTier::TensorCore && dtype == DType::BF16 ? kTargetBf16 : 0.0;
  }
};

const char* width_name(int dm) {
  return dm == 768 ? "mamba-130m" : dm == 1024 ? "mamba-370m" : dm == 2048 ? "mamba-1.4b" : "custom";
}

std::vector<StepCase> make_cases(const BenchFlags& f, gpu::GemmMath gemm, gpu::TypedGemm typed) {
  struct Shape {
    int dm;
    int64_t T;
    int L;
  };
  std::vector<Shape> shapes;
  if (f.sweep) {
    for (int dm : {768, 1024, 2048})
      for (int L : {1, 4})
        for (int64_t T : {int64_t(512), int64_t(2048)}) shapes.push_back({dm, T, L});
  } else if (f.quick) {
    shapes = {{768, 512, 1}};
  } else {
    for (const PeerRow& p : check::kPeerStep) shapes.push_back({p.dm, p.T, p.L});
  }
  std::vector<StepCase> out;
  int group = 0;
  for (const Shape& s : shapes) {
    for (DType dt : {DType::F32, DType::BF16}) {
      StepCase c{width_name(s.dm), s.dm, s.L, 8, s.T, dt, gemm, typed, group, ""};
      std::ostringstream os;
      os << "train_step/" << c.width_name << "/dm:" << s.dm << "/L:" << s.L << "/B:8/T:" << s.T
         << "/" << to_string(dt) << "/gemm:" << gpu::to_string(c.tier());
      c.name = os.str();
      out.push_back(c);
    }
    ++group;
  }
  return out;
}

ModelConfig config_of(const StepCase& c) { return check::step_config(c.d_model, c.n_layers); }

struct FlopModel {
  double gemm_fwd = 0, gemm_bwd = 0, scan = 0;
  double total() const { return gemm_fwd + gemm_bwd + scan; }
};

FlopModel step_flops(const Dims& d, int64_t B, int64_t T) {
  const double BT = double(B * T);
  const double per_layer =
      2.0 * BT * double(d.dm * 2 * d.di + d.di * d.xd + d.dr * d.di + d.di * d.dm);
  const double input_proj = 2.0 * BT * double(d.mid * d.dm);
  FlopModel f;
  f.gemm_fwd = double(d.L) * per_layer + input_proj;
  f.gemm_bwd = 2.0 * double(d.L) * per_layer + input_proj;
  f.scan = double(d.L) * (9.0 + 20.0) * BT * double(d.di * d.ds);
  return f;
}

// Deterministic host data in [-1, 1) (spec LCG).
std::vector<float> uniform_host(size_t n, uint64_t seed) {
  Lcg rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = 2.0f * rng.next_unit() - 1.0f;
  return v;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- one case -------------------------------------------------------------------------------

// What one case measured before Google Benchmark's loop (which times replays).
struct StepRun {
  std::unique_ptr<gpu::Model> model;
  EventTimer timer;
  size_t mem_used = 0;   // cudaMemGetInfo drop: construction + one step
  size_t graph_mem = 0;  // cudaMemGetInfo drop across capture_step
  bool verified = false;
  bool graph_equal = false;
  std::string verify_detail;
  FlopModel flops;
  double eager_s = 0, graph_s = 0;  // medians
  gpu::PhaseTimes phases;           // per step (means)
  int64_t graph_nodes = 0;
};

struct Summary {
  std::string name;
  double eager_us = 0, graph_us = 0, peer_us = 0, speedup = 0, target = 0;
  double gemm_us = 0, scan_us = 0, elem_us = 0, peak_gib = 0, peer_gib = 0;
  bool graph_equal = false, verified = false;
  std::string error;
};

struct StepBench {
  BenchFlags flags;
  BenchDevice dev;
  int reps = 10;
  size_t scan_partial_budget = 0;  // --scan-partial-budget (0 = the scan's default)
  bool fused_dt = false;           // --dt-proj=cublas|fused
  int scan_cpt = 0;                // --scan-cpt=N (0 = the scan's plan)
  ScanLayout scan_layout = ScanLayout::Auto;  // --scan-layout
  size_t cublas_workspace = gpu::kCublasWorkspaceByTier;  // --cublas-workspace=BYTES|tier
  ScanCheckpoints scan_checkpoints = ScanCheckpoints::Auto;  // --scan-checkpoints
  ScanExp scan_exp = ScanExp::Auto;                          // --scan-exp
  H0Mode h0 = H0Mode::Auto;                                  // --h0=auto|recompute|save
  int n_cases = 0;
  int active = -1;
  std::unique_ptr<StepRun> run;
  std::string run_error;
  std::vector<Summary> summary;
};

StepBench* g_bench = nullptr;

// The model options of a case under the bench's flags.
gpu::RunOptions run_options(const StepCase& c, const StepBench& g) {
  gpu::RunOptions opt;
  opt.dtype = c.dtype;
  opt.scan = ScanMode::Auto;
  opt.gemm = c.gemm;
  opt.typed_gemm = c.typed;
  opt.device = g.flags.device;
  opt.scan_partial_budget = g.scan_partial_budget;
  opt.fused_dt_softplus = g.fused_dt;
  opt.scan_channels_per_thread = g.scan_cpt;
  opt.scan_layout = g.scan_layout;
  opt.cublas_workspace_bytes = g.cublas_workspace;
  opt.scan_checkpoints = g.scan_checkpoints;
  opt.scan_exp = g.scan_exp;
  opt.h0 = g.h0;
  return opt;
}

// --plan: each case's planned device memory (gpu::plan_memory: what the Model allocates,
// computed without a device) beside the peer's peak; with MAMBACHECK_MEMORY_PLAN=1 every
// buffer of each case too.
void print_memory_plan(const std::vector<StepCase>& cases, const StepBench& g,
                       double device_bytes) {
  const char* v = std::getenv("MAMBACHECK_MEMORY_PLAN");
  const bool buffers = v && *v && *v != '0';
  std::printf("%-68s %12s %6s %10s %8s %5s\n", "case", "planned MB", "G", "peer MB", "÷ peer",
              "fits");
  for (const StepCase& c : cases) {
    const gpu::MemoryPlan p = gpu::plan_memory(config_of(c), c.B, c.T, run_options(c, g));
    const PeerRow* peer = c.B == check::kPeerStepBatch ? peer_of(c.d_model, c.T, c.n_layers)
                                                       : nullptr;
    const double peer_b = peer ? check::peer_peak_bytes(*peer, c.dtype == DType::F32) : 0.0;
    const bool has_peer = peer && c.dtype != DType::F16;
    char peer_mb[32] = "-", ratio[32] = "-";
    if (has_peer) {
      std::snprintf(peer_mb, sizeof peer_mb, "%.1f", peer_b / 1e6);
      std::snprintf(ratio, sizeof ratio, "%.3f", double(p.total_bytes) / peer_b);
    }
    std::printf("%-68s %12.1f %6lld %10s %8s %5s\n", c.name.c_str(), double(p.total_bytes) / 1e6,
                (long long)p.scan_checkpoint_group, peer_mb, ratio,
                double(p.total_bytes) <= device_bytes ? "yes" : "no");
    if (buffers)
      for (const auto& [name, bytes] : p.buffers)
        std::printf("    %-70s %12.1f MB\n", name.c_str(), double(bytes) / 1e6);
  }
}

void settle(gpu::Model& m) {
  m.reset_state();
  // Whatever stream reset_state used, nothing of it may overlap a timed step.
  MC_CUDA_CHECK(cudaDeviceSynchronize(), "bench_train_step: settle before timing");
}

// Median stream time of `reps` steps, each from the reset state.
template <class Launch>
double median_seconds(gpu::Model& m, EventTimer& timer, int reps, Launch&& launch) {
  auto stream = static_cast<cudaStream_t>(m.stream_handle());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    settle(m);
    timer.start(stream);
    launch();
    timer.stop(stream);
    t.push_back(timer.seconds());
  }
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

void activate(StepBench& g, const StepCase& c, int i) {
  g.run.reset();
  g.run_error.clear();
  g.active = i;
  progress(g.flags, i + 1, g.n_cases, c.name);
  try {
    auto run = std::make_unique<StepRun>();
    const ModelConfig cfg = config_of(c);
    const Dims dims = Dims::from(cfg);
    const gpu::RunOptions opt = run_options(c, g);
    size_t free0 = 0, total = 0, free1 = 0, free2 = 0;
    MC_CUDA_CHECK(cudaDeviceSynchronize(), "bench_train_step: settle before measuring memory");
    device_memory(&free0, &total);
    try {
      run->model = std::make_unique<gpu::Model>(cfg, c.B, c.T, opt);
    } catch (const std::exception& e) {
      g.run_error = std::string("skipped: does not fit or is refused: ") + e.what();
      std::fprintf(stderr, "%s: %s: %s\n", kProgram, c.name.c_str(), g.run_error.c_str());
      return;
    }
    gpu::Model& m = *run->model;
    const ParamLayout layout(dims);
    m.set_params(init_params(layout, 0x6d616d62ULL));
    const size_t rows = size_t(c.B * c.T);
    const auto X = uniform_host(rows * size_t(dims.mid), 11);
    const auto d_out = uniform_host(rows * size_t(dims.dm), 12);

    // Verification: one host-visible step from zero state, everything finite.
    std::vector<float> out, grads;
    m.reset_state();
    m.forward(X, out);
    m.backward(d_out, grads);
    run->verified = all_finite(out) && all_finite(grads);
    if (!run->verified) {
      run->verify_detail = !all_finite(out) ? "non-finite forward output" : "non-finite gradient";
      std::fprintf(stderr, "%s: WARNING %s: verification failed: %s\n", kProgram, c.name.c_str(),
                   run->verify_detail.c_str());
    }

    // Device-resident inputs, warm-up step, memory after it.
    m.upload_input(X);
    m.upload_d_out(d_out);
    settle(m);
    m.forward_device();
    m.backward_device();
    m.synchronize();
    device_memory(&free1, &total);
    run->mem_used = free0 > free1 ? free0 - free1 : 0;
    run->flops = step_flops(dims, c.B, c.T);

    // Eager steps.
    run->eager_s = median_seconds(m, run->timer, g.reps, [&] {
      m.forward_device();
      m.backward_device();
    });
    // Phases of eager steps (hooks on; timed separately).
    m.set_phase_timing(true);
    for (int r = 0; r < g.reps; ++r) {
      settle(m);
      m.forward_device();
      m.backward_device();
    }
    const gpu::PhaseTimes p = m.take_phase_times();
    m.set_phase_timing(false);
    const double steps = double(std::max<int64_t>(1, p.steps));
    run->phases.gemm_s = p.gemm_s / steps;
    run->phases.scan_s = p.scan_s / steps;
    run->phases.elementwise_s = p.elementwise_s / steps;
    run->phases.steps = p.steps;

    // The step as one CUDA graph: captured, checked against the eager step, timed.
    MC_CUDA_CHECK(cudaDeviceSynchronize(), "bench_train_step: before capture");
    device_memory(&free1, &total);
    m.capture_step();
    MC_CUDA_CHECK(cudaDeviceSynchronize(), "bench_train_step: after capture");
    device_memory(&free2, &total);
    run->graph_mem = free1 > free2 ? free1 - free2 : 0;
    run->graph_nodes = m.step_graph_nodes();
    {
      std::vector<float> eo, eg, go, gg;
      settle(m);
      m.forward_device();
      m.backward_device();
      m.download_output(eo);
      m.download_grads(eg);
      settle(m);
      m.replay_step();
      m.download_output(go);
      m.download_grads(gg);
      run->graph_equal = same_bits(eo, go) && same_bits(eg, gg);
      if (!run->graph_equal)
        std::fprintf(stderr, "%s: WARNING %s: the graph replay's %s differ from the eager step's\n",
                     kProgram, c.name.c_str(), same_bits(eo, go) ? "gradients" : "outputs");
    }
    run->graph_s = median_seconds(m, run->timer, g.reps, [&] { m.replay_step(); });
    g.run = std::move(run);
  } catch (const std::exception& e) {
    g.run.reset();
    g.run_error = std::string("error: ") + e.what();
    std::fprintf(stderr, "%s: %s: %s\n", kProgram, c.name.c_str(), g.run_error.c_str());
  }
}

// Google Benchmark may call a case several times (iteration estimate, then the
// run): one summary row per case, the last call's.
void add_summary(std::vector<Summary>& rows, const Summary& s) {
  if (!rows.empty() && rows.back().name == s.name)
    rows.back() = s;
  else
    rows.push_back(s);
}

void run_case(benchmark::State& st, const StepCase& c, int index) {
  StepBench& g = *g_bench;
  if (g.active != index) activate(g, c, index);
  if (!g.run) {
    st.SkipWithError(g.run_error.c_str());
    Summary s;
    s.name = c.name;
    s.error = g.run_error;
    add_summary(g.summary, s);
    return;
  }
  StepRun& run = *g.run;
  gpu::Model& m = *run.model;
  auto stream = static_cast<cudaStream_t>(m.stream_handle());
  const double t = run_timed_loop(
      st, run.timer, stream, [&] { settle(m); }, [&] { m.replay_step(); }, &g.run_error);
  if (t < 0) g.run.reset();
  if (t <= 0) return;

  const PeerRow* peer = peer_of(c.d_model, c.T, c.n_layers);
  const bool f32 = c.dtype == DType::F32;
  const double peer_us = peer ? (f32 ? peer->f32_graph_us : peer->bf16_graph_us) : 0.0;
  const double peer_gib = peer ? check::peer_peak_bytes(*peer, f32) / double(1ull << 30) : 0.0;
  const double graph_us = run.graph_s * 1e6, eager_us = run.eager_s * 1e6;
  const double peak_gib = double(m.device_bytes_allocated()) / double(1ull << 30);
  const double speedup = peer_us > 0 && graph_us > 0 ? peer_us / graph_us : 0.0;
  const double target = peer ? c.target() : 0.0;

  using benchmark::Counter;
  st.counters["tokens_per_s"] = Counter(double(c.B * c.T) / run.graph_s);
  st.counters["TFLOPs"] = Counter(run.flops.total() / run.graph_s / 1e12);
  st.counters["flops_per_step"] = Counter(run.flops.total());
  st.counters["flops_gemm"] = Counter(run.flops.gemm_fwd + run.flops.gemm_bwd);
  st.counters["flops_scan"] = Counter(run.flops.scan);
  st.counters["eager_us"] = Counter(eager_us);
  st.counters["graph_us"] = Counter(graph_us);
  st.counters["graph_speedup_vs_eager"] = Counter(graph_us > 0 ? eager_us / graph_us : 0.0);
  st.counters["graph_nodes"] = Counter(double(run.graph_nodes));
  st.counters["phase_gemm_us"] = Counter(run.phases.gemm_s * 1e6);
  st.counters["phase_scan_us"] = Counter(run.phases.scan_s * 1e6);
  st.counters["phase_elementwise_us"] = Counter(run.phases.elementwise_s * 1e6);
  st.counters["phase_total_us"] = Counter(run.phases.total_s() * 1e6);
  st.counters["gemm_TFLOPs"] =
      Counter(run.phases.gemm_s > 0 ? (run.flops.gemm_fwd + run.flops.gemm_bwd) /
                                          run.phases.gemm_s / 1e12
                                    : 0.0);
  st.counters["model_bytes"] = Counter(double(m.device_bytes_allocated()));
  st.counters["peak_bytes"] = Counter(double(m.device_bytes_allocated()));
  st.counters["mem_used_bytes"] = Counter(double(run.mem_used));
  st.counters["graph_mem_bytes"] = Counter(double(run.graph_mem));
  st.counters["peer_graph_us"] = Counter(peer_us);
  st.counters["peer_peak_gib"] = Counter(peer_gib);
  st.counters["speedup_vs_peer"] = Counter(speedup);
  st.counters["target_speedup"] = Counter(target);
  st.counters["meets_target"] = Counter(target > 0 && speedup >= target ? 1.0 : 0.0);
  st.counters["peak_vs_peer"] = Counter(peer_gib > 0 ? peak_gib / peer_gib : 0.0);
  st.counters["checkpointed_scan"] =
      Counter(m.scan_route() == ScanRoute::Checkpointed ? 1.0 : 0.0);
  st.counters["scan_checkpoint_group"] = Counter(double(m.scan_checkpoint_group()));
  // the exponential the row's scan ran (1: the ex2.approx unit, 0: the accurate one)
  st.counters["scan_exp_hw"] = Counter(m.scan_exp() == ScanExp::Hardware ? 1.0 : 0.0);
  st.counters["verified"] = Counter(run.verified ? 1.0 : 0.0);
  st.counters["graph_bitwise_equal"] = Counter(run.graph_equal ? 1.0 : 0.0);
  std::string label = run.verified ? "ok" : "INCORRECT: " + run.verify_detail;
  if (!run.graph_equal) label += "; INCORRECT: graph replay differs from the eager step";
  st.SetLabel(label);

  Summary s;
  s.name = c.name;
  s.eager_us = eager_us;
  s.graph_us = graph_us;
  s.peer_us = peer_us;
  s.speedup = speedup;
  s.target = target;
  s.gemm_us = run.phases.gemm_s * 1e6;
  s.scan_us = run.phases.scan_s * 1e6;
  s.elem_us = run.phases.elementwise_s * 1e6;
  s.peak_gib = peak_gib;
  s.peer_gib = peer_gib;
  s.graph_equal = run.graph_equal;
  s.verified = run.verified;
  add_summary(g.summary, s);
}

// The peer's figures were measured on one GPU model (check::kPeerStepGpu): on another the
// "x peer" column compares two machines, and the summary says so.
bool peer_measured_on(const std::string& device_name) {
  return device_name.find(check::kPeerStepGpu) != std::string::npos;
}

// The peer figure and the ratio beside each row, on stderr (the JSON has the same).
void print_summary(const std::vector<Summary>& rows, const std::string& device_name) {
  std::fprintf(stderr,
               "\n%s: graph figures vs state-spaces/mamba (target bf16 >= %.1fx, "
               "f32 strict >= %.1fx)\n",
               kProgram, kTargetBf16, kTargetF32);
  if (!peer_measured_on(device_name))
    std::fprintf(stderr,
                 "note: the peer figures were measured on an %s and this device is %s, so "
                 "\"x peer\" compares two machines. bench/peer_train_step.py times the peer on "
                 "this one; reports/generate.py --peer-step sets the two side by side.\n",
                 check::kPeerStepGpu, device_name.c_str());
  std::fprintf(stderr, "%-58s %9s %9s %9s %7s %7s %6s %9s %9s %9s %7s %7s %s\n", "case", "eager us",
               "graph us", "peer us", "x peer", "target", "met", "gemm us", "scan us", "elem us",
               "GiB", "peerGiB", "checks");
  for (const Summary& s : rows) {
    if (!s.error.empty()) {
      std::fprintf(stderr, "%-58s %s\n", s.name.c_str(), s.error.c_str());
      continue;
    }
    char peer[32] = "-", ratio[32] = "-", target[32] = "-", met[8] = "-", pg[32] = "-";
    if (s.peer_us > 0) {
      std::snprintf(peer, sizeof peer, "%.0f", s.peer_us);
      std::snprintf(ratio, sizeof ratio, "%.2f", s.speedup);
      std::snprintf(pg, sizeof pg, "%.2f", s.peer_gib);
    }
    if (s.target > 0) {
      std::snprintf(target, sizeof target, "%.1f", s.target);
      std::snprintf(met, sizeof met, "%s", s.speedup >= s.target ? "yes" : "NO");
    }
    std::fprintf(stderr, "%-58s %9.0f %9.0f %9s %7s %7s %6s %9.0f %9.0f %9.0f %7.2f %7s %s\n",
                 s.name.c_str(), s.eager_us, s.graph_us, peer, ratio, target, met, s.gemm_us,
                 s.scan_us, s.elem_us, s.peak_gib, pg,
                 s.verified && s.graph_equal ? "ok" : "INCORRECT (see the label)");
  }
}

std::string help_text;
void print_help() {
  benchmark::PrintDefaultHelp();
  std::fputs(help_text.c_str(), stdout);
}

int main_impl(int argc, char** argv) {
  ArgvRewrite rw(argc, argv);
  help_text = common_flags_help() +
              "  (default: the peer table's rows; --sweep: every width x layers {1,4} x T "
              "{512,2048})\n"
              "  --gemm=f32|tf32    f32 GEMM tier (default f32 = strict; tf32 opt-in)\n"
              "  --typed-gemm=tensor-core|strict\n"
              "                     bf16 GEMM tier (default tensor-core)\n"
              "  --reps=N           eager, graph and phase-timed steps per row (default 10, "
              "--quick 3)\n"
              "  --scan-partial-budget=BYTES|fit\n"
              "                     most bytes of the scan backward's dB/dC partials (more\n"
              "                     segments, the same bits; default 0 = the scan's 512 MiB;\n"
              "                     fit = as many as fit in the scratch the workspace shares)\n"
              "  --dt-proj=cublas|fused\n"
              "                     bf16 tensor-core tier: the dt_proj GEMM on cuBLAS, then the\n"
              "                     softplus kernels (default), or both as one kernel (opt-in)\n"
              "  --scan-cpt=N       the checkpointed scan's channels per thread (0 = its plan's\n"
              "                     choice, 1 = one channel a thread, 2..4 = the tile plan)\n"
              "  --scan-layout=auto|lane-groups|whole-state\n"
              "                     the checkpointed scan's thread layout at d_state <= 16: a\n"
              "                     channel's states over 4 lanes, or all in one thread (the same\n"
              "                     bits); default auto = the scan's plan\n"
              "  --cublas-workspace=BYTES|tier\n"
              "                     the cuBLAS workspace of each model (default tier: 4194304 = 4 MiB\n"
              "                     on the tensor-core tier, 33554432 = 32 MiB on strict and tf32;\n"
              "                     65536..1073741824, a multiple of 256; cuBLAS picks its kernels\n"
              "                     by it, so GEMM times and bits may change)\n"
              "  --scan-checkpoints=auto|every|grouped\n"
              "                     the scan states the forward saves: every chunk's, or one\n"
              "                     per group of chunks refilled by the backward (the same\n"
              "                     bits, less memory, one more pass of the recurrence);\n"
              "                     default auto = grouped for bf16/f16, every for f32\n"
              "  --scan-exp=auto|hardware|accurate\n"
              "                     the checkpointed scan's exp(delta*A): the ex2.approx unit or\n"
              "                     the accurate FMA-pipe version (kernels/scan/exp_math.cuh);\n"
              "                     default auto = accurate for f32, hardware for bf16/f16\n"
              "  --h0=auto|recompute|save\n"
              "                     layer 0's input H0: formed again by the backward (one\n"
              "                     input_proj GEMM more, B*T*d_model*4 bytes less) or saved by\n"
              "                     the forward; the same bits either way; default auto =\n"
              "                     recompute for bf16/f16, save for f32\n"
              "  --plan=GIB         no GPU needed: each row's device memory as the model would\n"
              "                     allocate it (gpu::plan_memory; every buffer with\n"
              "                     MAMBACHECK_MEMORY_PLAN=1) beside the peer's peak, and\n"
              "                     whether it fits a device of GIB GiB\n" +
              exit_codes_help();
  benchmark::Initialize(rw.argc(), rw.argv(), print_help);
  StepBench g;
  g.flags = parse_project_flags(*rw.argc(), rw.argv(), rw, {"gemm", "typed-gemm", "reps",
                                                                  "scan-partial-budget", "dt-proj",
                                                                  "scan-cpt", "scan-layout",
                                                                  "cublas-workspace", "scan-exp",
                                                                  "scan-checkpoints", "h0",
                                                                  "plan"});
  const gpu::GemmMath gemm =
      g.flags.get_string("gemm", "f32", {"f32", "tf32"}) == "tf32" ? gpu::GemmMath::TF32
                                                                   : gpu::GemmMath::F32;
  const gpu::TypedGemm typed = gpu::parse_typed_gemm(
      g.flags.get_string("typed-gemm", "tensor-core", {"tensor-core", "strict"}));
  g.reps = int(g.flags.get_int("reps", g.flags.quick ? 3 : 10, 1, 1000));
  {  // BYTES, or "fit": the partials sized to the scratch they share (gpu::kScanPartialsFitScratch)
    const auto it = g.flags.values.find("scan-partial-budget");
    g.scan_partial_budget =
        it != g.flags.values.end() && it->second == "fit"
            ? gpu::kScanPartialsFitScratch
            : size_t(g.flags.get_int("scan-partial-budget", 0, 0, (long long)(1) << 40));
  }

  g.fused_dt = g.flags.get_string("dt-proj", "cublas", {"cublas", "fused"}) == "fused";
  g.scan_cpt = int(g.flags.get_int("scan-cpt", 0, 0, 4));
  g.scan_layout = parse_scan_layout(
      g.flags.get_string("scan-layout", "auto", {"auto", "lane-groups", "whole-state"}));
  {  // BYTES, or "tier" (the default): the GEMM tier's size (gpu::kCublasWorkspaceByTier)
    const auto it = g.flags.values.find("cublas-workspace");
    if (it != g.flags.values.end() && it->second != "tier") {
      g.cublas_workspace =
          size_t(g.flags.get_int("cublas-workspace", 0, 0, (long long)(1) << 40));
      gpu::require_cublas_workspace_bytes("--cublas-workspace", g.cublas_workspace);
    }
  }
  g.scan_checkpoints = parse_scan_checkpoints(
      g.flags.get_string("scan-checkpoints", "auto", {"auto", "every", "grouped"}));
  g.scan_exp = parse_scan_exp(
      g.flags.get_string("scan-exp", "auto", {"auto", "hardware", "accurate"}));
  g.h0 = parse_h0_mode(g.flags.get_string("h0", "auto", {"auto", "recompute", "save"}));
  if (g.scan_checkpoints == ScanCheckpoints::Grouped && g.scan_partial_budget != 0)
    throw ConfigError("--scan-partial-budget applies to --scan-checkpoints=every or auto "
                      "(a grouped backward runs one segment per group)");

  if (g.flags.values.count("plan")) {  // no device needed
    print_memory_plan(make_cases(g.flags, gemm, typed), g,
                      g.flags.get_double("plan", 0, 0.001, 1e6) * double(size_t(1) << 30));
    return 0;
  }
  if (const int rc = check_gpu_or_explain(kProgram)) return rc;
  if (g.flags.devices.size() > 1 && !g.flags.is_shard_child)
    return run_device_shards(g.flags, kProgram);

  MC_CUDA_CHECK(cudaSetDevice(g.flags.device), "bench_train_step: select device");
  cudaStream_t probe_stream = nullptr;
  MC_CUDA_CHECK(cudaStreamCreateWithFlags(&probe_stream, cudaStreamNonBlocking),
                "bench_train_step: create stream");
  g.dev = open_bench_device(g.flags, probe_stream);
  MC_CUDA_CHECK(cudaStreamDestroy(probe_stream), "bench_train_step: destroy stream");
  g_bench = &g;

  add_common_context(g.dev, g.flags, kProgram,
                     "cudaEventRecord on the model's stream around each step; recurrent state "
                     "reset and device synchronised before every step, untimed; 1 warm-up step "
                     "per case; real_time = Google Benchmark's loop over graph replays "
                     "(UseManualTime); eager_us / graph_us = median of " +
                         std::to_string(g.reps) +
                         " steps; no L2 scrub (working set >> L2)");
  using benchmark::AddCustomContext;
  AddCustomContext("step_shapes", "the peer table's rows (d_model/T/layers 768/512/1, "
                                  "768/2048/1, 1024/2048/1, 2048/2048/1, 768/2048/4; --sweep: "
                                  "768/1024/2048 x 1,4 layers x T 512,2048), B 8, d_state 16, "
                                  "expand 2, d_conv 4, input_dim = d_model, scan mode Auto");
  AddCustomContext("step_gemm_math", gpu::to_string(gemm));
  AddCustomContext("gemm_tier_f32", gpu::describe(gpu::gemm_tier(DType::F32, gemm, typed)));
  AddCustomContext("gemm_tier_bf16", gpu::describe(gpu::gemm_tier(DType::BF16, gemm, typed)));
  AddCustomContext("typed_gemm_compute",
                   gpu::cublas_compute_name(gpu::gemm_tier(DType::BF16, gemm, typed)));
  AddCustomContext("graph", "Model::capture_step: one eager warm-up step, then forward_device + "
                            "backward_device captured (cudaStreamCaptureModeThreadLocal) into "
                            "one CUDA graph, instantiated and uploaded; replay_step = "
                            "cudaGraphLaunch; graph_bitwise_equal compares one replay's output "
                            "and gradients with an eager step's, bit for bit");
  AddCustomContext("phases", "Model::set_phase_timing: CUDA events before and after every cuBLAS "
                             "GEMM and every scan kernel call, and at the start and end of the "
                             "step; phase_*_us = stream time between marks per step (mean of "
                             "--reps eager steps; launch gaps included; elementwise = everything "
                             "that is neither GEMM nor scan)");
  AddCustomContext("flop_model",
                   "G = 2*BT*(dm*2di + di*xd + dr*di + di*dm) per layer; fwd = L*G + "
                   "2*BT*mid*dm (input_proj); bwd = 2*L*G + 2*BT*mid*dm (input_proj dW only); "
                   "scan = L*(9+20)*BT*di*ds (fwd ~9, bwd ~20 flops per state update); "
                   "elementwise kernels ignored; TFLOPs = total/graph time; gemm_TFLOPs = GEMM "
                   "flops / phase_gemm_us");
  AddCustomContext("memory", "peak_bytes = model_bytes = Model::device_bytes_allocated() (every "
                             "buffer of the step + the cuBLAS workspace; the step allocates "
                             "nothing); mem_used_bytes = cudaMemGetInfo free-memory drop across "
                             "construction + one step; graph_mem_bytes = the drop across "
                             "capture_step; peak_vs_peer = peak GiB / peer peak GiB");
  AddCustomContext("scan_partial_budget",
                   g.scan_partial_budget == gpu::kScanPartialsFitScratch
                       ? std::string("fit (the largest budget whose workspace fits in the "
                                     "o_dn|dH_typed scratch it shares)")
                   : g.scan_partial_budget ? std::to_string(g.scan_partial_budget) + " bytes"
                                           : std::string("0 (the scan's default, 512 MiB)"));
  AddCustomContext("cublas_workspace_bytes",
                   g.cublas_workspace == gpu::kCublasWorkspaceByTier
                       ? "the tier's (the default): " + gpu::describe_default_cublas_workspaces()
                       : std::to_string(g.cublas_workspace) + " (--cublas-workspace)");
  AddCustomContext("scan_checkpoints",
                   std::string(to_string(g.scan_checkpoints)) +
                       " (auto = grouped for bf16/f16, every chunk's state for f32; "
                       "scan_checkpoint_group per row: chunks per saved state)");
  AddCustomContext("h0", std::string(to_string(g.h0)) +
                             (g.h0 == H0Mode::Auto
                                  ? " (recompute for bf16/f16: the backward forms layer 0's input "
                                    "again with the forward's GEMM and norm; save for f32)"
                                  : " (forced)"));
  AddCustomContext("scan_exp", std::string(to_string(g.scan_exp)) +
                                    (g.scan_exp == ScanExp::Auto
                                         ? " (accurate for f32, hardware for bf16/f16)"
                                         : " (forced)"));
  AddCustomContext("scan_layout",
                   std::string(to_string(g.scan_layout)) +
                       (g.scan_layout == ScanLayout::Auto
                            ? " (the scan's plan: the lane groups; whole-state is opt-in, the "
                              "same bits either way)"
                            : " (forced)"));
  AddCustomContext("scan_channels_per_thread",
                   g.scan_cpt ? std::to_string(g.scan_cpt) + " (forced)"
                              : std::string("0 (the scan's plan, scan::geometry)"));
  AddCustomContext("dt_proj", g.fused_dt
                                  ? "fused (opt-in): on the tensor-core tier the dt_proj GEMM and "
                                    "its softplus run as one kernel (kernels/dt_softplus.cu), F4c "
                                    "and B4; timed in the GEMM phase"
                                  : "cublas (default): the dt_proj GEMM on cuBLAS, then "
                                    "softplus_bias_fwd / softplus_bias_bwd");
  AddCustomContext("peer", "state-spaces/mamba fast path on an H200 (Mamba block, mamba_inner_fn, "
                           "causal_conv1d, RMSNorm + residual around the mixer, PyTorch 2.11, "
                           "TF32 off), B 8, the step replayed as one CUDA graph (the peer's "
                           "table): peer_graph_us; peer_peak_gib: the smaller of the issue's "
                           "peak and the peer's fresh-process peak (H100, bench/"
                           "peer_train_step.py); speedup_vs_peer = peer_graph_us / graph_us");
  AddCustomContext("peer_same_gpu_model",
                   peer_measured_on(g.dev.info.name)
                       ? std::string("yes (an ") + check::kPeerStepGpu + ", as the peer's figures)"
                       : std::string("no: the peer's figures are an ") + check::kPeerStepGpu +
                             "'s; time the peer here with bench/peer_train_step.py");
  AddCustomContext("targets", "graph figures, bf16 (tensor-core tier) >= 2x the peer's "
                              "bf16, f32 (strict tier) >= 1.5x the peer's f32; target_speedup "
                              "0 = no target for this row's tier");
  AddCustomContext("verify_method", "one host-visible forward + backward from zero state: output "
                                    "and all gradients finite -> verified = 1; one graph replay "
                                    "vs one eager step bitwise -> graph_bitwise_equal = 1");

  const std::vector<StepCase> all = make_cases(g.flags, gemm, typed);
  std::vector<StepCase> mine;
  for (const auto& c : all)
    if (c.group % g.flags.shard_count == g.flags.shard_index) mine.push_back(c);
  g.n_cases = int(mine.size());
  const double min_time = g.flags.quick ? 0.02 : 0.2;
  for (int i = 0; i < int(mine.size()); ++i) {
    const StepCase c = mine[size_t(i)];
    auto* b = benchmark::RegisterBenchmark(c.name.c_str(), [c, i](benchmark::State& st) {
      run_case(st, c, i);
    });
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    if (!g.flags.user_min_time) b->MinTime(min_time);
  }
  std::fprintf(stderr, "%s: %d cases on device %d (%s)\n", kProgram, g.n_cases, g.flags.device,
               g.dev.info.name.c_str());
  benchmark::RunSpecifiedBenchmarks();
  g.run.reset();
  print_summary(g.summary, g.dev.info.name);
  benchmark::Shutdown();
  g_bench = nullptr;
  return 0;
}

}  // namespace
}  // namespace mc::bench

int main(int argc, char** argv) {
  try {
    return mc::bench::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: error: %s\n", e.what());
    return 1;
  }
}
