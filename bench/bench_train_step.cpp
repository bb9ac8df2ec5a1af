// bench_train_step.cpp — Google Benchmark of one training step (forward +
// backward, no optimizer) of the Mamba-1 backbone through gpu::Model
// (forward_device / backward_device, inputs uploaded once), at the layer widths
// of mamba-130m / -370m / -1.4b (d_model 768 / 1024 / 2048), 1 and 4 layers,
// B = 8, T in {512, 2048}, f32 and bf16 storage, d_state 16, expand 2, d_conv 4,
// input_dim = d_model.
//
// Timing: cudaEvents on the model's stream around forward_device() +
// backward_device() (UseManualTime); one warm-up step per case; the recurrent
// state is reset before every step, outside the events. No L2 scrub: the
// working set of every case is far larger than the L2.
//
// Reported per case: tokens_per_s = B*T/t, TFLOPs = flop model / t (below),
// device memory of the Model (device_bytes_allocated) and the cudaMemGetInfo
// drop across construction + one step (includes cuBLAS workspaces), the GEMM
// math mode, and verified = 1/0 (a host-visible step whose output and
// gradients are all finite).
//
// FLOP model (written into the JSON context; elementwise kernels ignored):
//   per layer, forward GEMMs  G = 2*BT*(dm*2di + di*xd + dr*di + di*dm)
//   backbone:  forward  L*G + 2*BT*mid*dm            (input_proj)
//              backward 2*L*G + 2*BT*mid*dm          (dX and dW per GEMM; input_proj dW only)
//              scan     L*(9 + 20)*BT*di*ds          (forward ~9, backward ~20 flops per state update)
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_context.hpp"
#include "bench/timed_loop.hpp"
#include "bench/bench_flags.hpp"
#include "core/config.hpp"
#include "kernels/cuda_check.hpp"
#include "bench/cuda_util.hpp"
#include "core/param_layout.hpp"
#include "gpu/model.hpp"
#include "bench/shard_launcher.hpp"

namespace mc::bench {
namespace {

constexpr const char* kProgram = "bench_train_step";

struct StepCase {
  const char* width_name;  // the model whose layer width this is
  int d_model, n_layers;
  int64_t B, T;
  DType dtype;
  gpu::GemmMath gemm;
  int group;
  std::string name;
};

std::vector<StepCase> make_cases(const BenchFlags& f, gpu::GemmMath gemm) {
  struct Width {
    const char* name;
    int dm;
  };
  std::vector<Width> widths{{"mamba-130m", 768}, {"mamba-370m", 1024}, {"mamba-1.4b", 2048}};
  std::vector<int> layers{1, 4};
  std::vector<int64_t> Ts{512, 2048};
  std::vector<DType> dts{DType::F32, DType::BF16};
  if (f.quick && !f.sweep) {
    widths = {{"mamba-130m", 768}};
    layers = {1};
    Ts = {512};
  }
  std::vector<StepCase> out;
  int group = 0;
  for (const auto& w : widths)
    for (int L : layers)
      for (int64_t T : Ts) {
        for (DType dt : dts) {
          std::ostringstream os;
          os << "train_step/" << w.name << "/dm:" << w.dm << "/L:" << L << "/B:8/T:" << T << "/"
             << to_string(dt) << "/gemm:" << gpu::to_string(gemm);
          out.push_back({w.name, w.dm, L, 8, T, dt, gemm, group, os.str()});
        }
        ++group;
      }
  return out;
}

ModelConfig config_of(const StepCase& c) {
  ModelConfig cfg;
  cfg.d_model = c.d_model;
  cfg.d_state = 16;
  cfg.d_conv = 4;
  cfg.expand = 2;
  cfg.n_layers = c.n_layers;
  cfg.input_dim = c.d_model;
  return cfg;
}

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

// One case's model, kept alive across Google Benchmark's calls of the case.
struct StepRun {
  std::unique_ptr<gpu::Model> model;
  EventTimer timer;
  size_t mem_used = 0;  // cudaMemGetInfo drop: construction + one step
  bool verified = false;
  std::string verify_detail;
  FlopModel flops;
};

struct StepBench {
  BenchFlags flags;
  BenchDevice dev;
  int n_cases = 0;
  int active = -1;
  std::unique_ptr<StepRun> run;
  std::string run_error;
};

StepBench* g_bench = nullptr;

void activate(StepBench& g, const StepCase& c, int i) {
  g.run.reset();
  g.run_error.clear();
  g.active = i;
  progress(g.flags, i + 1, g.n_cases, c.name);
  try {
    auto run = std::make_unique<StepRun>();
    const ModelConfig cfg = config_of(c);
    const Dims dims = Dims::from(cfg);
    gpu::RunOptions opt;
    opt.dtype = c.dtype;
    opt.scan = ScanMode::Auto;
    opt.gemm = c.gemm;
    opt.device = g.flags.device;
    size_t free0 = 0, total = 0, free1 = 0;
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

    // Verification: one host-visible step, everything finite.
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
    m.reset_state();
    m.forward_device();
    m.backward_device();
    m.synchronize();
    device_memory(&free1, &total);
    run->mem_used = free0 > free1 ? free0 - free1 : 0;
    run->flops = step_flops(dims, c.B, c.T);
    g.run = std::move(run);
  } catch (const std::exception& e) {
    g.run.reset();
    g.run_error = std::string("error: ") + e.what();
    std::fprintf(stderr, "%s: %s: %s\n", kProgram, c.name.c_str(), g.run_error.c_str());
  }
}

void run_case(benchmark::State& st, const StepCase& c, int index) {
  StepBench& g = *g_bench;
  if (g.active != index) activate(g, c, index);
  if (!g.run) {
    st.SkipWithError(g.run_error.c_str());
    return;
  }
  StepRun& run = *g.run;
  gpu::Model& m = *run.model;
  auto stream = static_cast<cudaStream_t>(m.stream_handle());
  const double t = run_timed_loop(
      st, run.timer, stream,
      [&] {
        m.reset_state();
        // Whatever stream reset_state used, nothing of it may overlap the timed step.
        MC_CUDA_CHECK(cudaDeviceSynchronize(), "bench_train_step: settle before timing");
      },
      [&] {
        m.forward_device();
        m.backward_device();
      },
      &g.run_error);
  if (t < 0) g.run.reset();
  if (t <= 0) return;
  using benchmark::Counter;
  st.counters["tokens_per_s"] = Counter(double(c.B * c.T) / t);
  st.counters["TFLOPs"] = Counter(run.flops.total() / t / 1e12);
  st.counters["flops_per_step"] = Counter(run.flops.total());
  st.counters["flops_gemm"] = Counter(run.flops.gemm_fwd + run.flops.gemm_bwd);
  st.counters["flops_scan"] = Counter(run.flops.scan);
  st.counters["model_bytes"] = Counter(double(m.device_bytes_allocated()));
  st.counters["mem_used_bytes"] = Counter(double(run.mem_used));
  st.counters["checkpointed_scan"] =
      Counter(m.scan_route() == ScanRoute::Checkpointed ? 1.0 : 0.0);
  st.counters["verified"] = Counter(run.verified ? 1.0 : 0.0);
  st.SetLabel(run.verified ? "ok" : "INCORRECT: " + run.verify_detail);
}

std::string help_text;
void print_help() {
  benchmark::PrintDefaultHelp();
  std::fputs(help_text.c_str(), stdout);
}

int main_impl(int argc, char** argv) {
  ArgvRewrite rw(argc, argv);
  help_text = common_flags_help() +
              "  (--sweep is the default case list for this program)\n"
              "  --gemm=f32|tf32    f32 GEMM math (default f32: true f32; tf32 opt-in)\n" +
              exit_codes_help();
  benchmark::Initialize(rw.argc(), rw.argv(), print_help);
  StepBench g;
  g.flags = parse_project_flags(*rw.argc(), rw.argv(), rw, {"gemm"});
  const gpu::GemmMath gemm =
      g.flags.get_string("gemm", "f32", {"f32", "tf32"}) == "tf32" ? gpu::GemmMath::TF32
                                                                   : gpu::GemmMath::F32;

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
                     "cudaEventRecord on the model's stream around forward_device() + "
                     "backward_device() (UseManualTime); 1 warm-up step per case; recurrent state "
                     "reset before every step, untimed; no L2 scrub (working set >> L2)");
  using benchmark::AddCustomContext;
  AddCustomContext("step_shapes", "d_model 768/1024/2048 (mamba-130m/-370m/-1.4b widths), "
                                  "n_layers 1 and 4, B 8, T 512 and 2048, d_state 16, expand 2, "
                                  "d_conv 4, input_dim = d_model, scan mode Auto");
  AddCustomContext("step_gemm_math", gpu::to_string(gemm));
  AddCustomContext("typed_gemm_compute", "CUBLAS_COMPUTE_32F_PEDANTIC (bf16/f16 storage)");
  AddCustomContext("flop_model",
                   "G = 2*BT*(dm*2di + di*xd + dr*di + di*dm) per layer; fwd = L*G + "
                   "2*BT*mid*dm (input_proj); bwd = 2*L*G + 2*BT*mid*dm (input_proj dW only); "
                   "scan = L*(9+20)*BT*di*ds (fwd ~9, bwd ~20 flops per state update); "
                   "elementwise kernels ignored; TFLOPs = total/t");
  AddCustomContext("memory", "model_bytes = Model::device_bytes_allocated(); mem_used_bytes = "
                             "cudaMemGetInfo free-memory drop across construction + one step");
  AddCustomContext("verify_method", "one host-visible forward + backward from zero state: output "
                                    "and all gradients finite -> verified = 1");

  const std::vector<StepCase> all = make_cases(g.flags, gemm);
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
