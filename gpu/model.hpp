// model.hpp — the public host API of the GPU Mamba-1 pipeline: device
// discovery, and a Model that owns device weights, gradients, recurrent state
// and saved activations for one (config, B, T, options) and runs the backbone
// forward, backward and the target forward (docs/math.md).
//
// This header has no CUDA types, so the CLI and tests compile against it on
// machines without a toolkit; there gpu_available() says why not and every
// Model constructor throws GpuUnavailable.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"

namespace mc::gpu {

class GpuUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A second base of the exception a Model constructor (or an allocation) throws
// when the device memory does not suffice; catch it as `const
// OutOfDeviceMemory&` and use what() of the std::exception it comes with
// (dynamic_cast) for the message: bytes needed, free and total.
class OutOfDeviceMemory {
 public:
  explicit OutOfDeviceMemory(int64_t bytes) : bytes_needed(bytes) {}
  virtual ~OutOfDeviceMemory() = default;
  int64_t bytes_needed;
};

// True when a CUDA device can be used. Otherwise *reason (if non-null) says
// why, e.g. "no CUDA device: cudaErrorNoDevice (no CUDA-capable device is
// detected)" or "built without CUDA". Cached; safe to call anywhere.
bool gpu_available(std::string* reason = nullptr);
int device_count();

// What a bitwise claim depends on (recorded in every report).
struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t total_mem_bytes = 0;
  int driver_version = 0;   // cudaDriverGetVersion
  int runtime_version = 0;  // cudaRuntimeGetVersion
  int cublas_version = 0;   // cublasGetVersion
  int mem_clock_khz = 0, mem_bus_width_bits = 0, sm_clock_khz = 0;
  std::string to_string() const;  // one line, e.g. for test summaries
};
DeviceInfo device_info(int device = 0);

// Makes `device` current for the calling thread (cudaSetDevice) and the
// default of RunOptions::device for every Model constructed afterwards, so
// a test process that CTest assigned to GPU k runs there (several GPUs).
// ConfigError naming the index and the number of visible devices when it is
// out of range; GpuUnavailable without a device.
void select_device(int device);
// The device last passed to select_device (0 until then).
int default_device();

// GEMM tiers. Every cuBLAS GEMM of a Model runs on one tier,
// resolved from the storage dtype and two options:
//   f32 storage (RunOptions::gemm, GemmMath):
//     F32  -> tier "strict": CUBLAS_COMPUTE_32F_PEDANTIC, true f32 (the default);
//     TF32 -> tier "tf32":   CUBLAS_COMPUTE_32F_FAST_TF32, an explicit opt-in.
//   bf16/f16 storage (RunOptions::typed_gemm, TypedGemm):
//     TensorCore -> tier "tensor-core": CUBLAS_COMPUTE_32F, tensor cores with f32
//                   accumulation (the default);
//     Strict     -> tier "strict": CUBLAS_COMPUTE_32F_PEDANTIC (no tensor cores).
// On every tier the handle forbids reduced-precision split-K reductions
// (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION): a GEMM's partial sums are
// reduced in f32 and its result is rounded to the output type once, which is
// what the same-precision baseline of the precision rule models
// (reference_cpu/model.cpp, docs/DESIGN.md "GEMM tiers"). Atomics are not
// allowed, the workspace is fixed: cuBLAS's choice of kernel is a pure function
// of (shape, types, alignment, device, cuBLAS version), so bits reproduce.
// Every report and JSON names the tier (to_string(GemmTier)).
enum class GemmMath { F32, TF32 };
const char* to_string(GemmMath g);  // "f32" | "tf32"
enum class TypedGemm { TensorCore, Strict };
const char* to_string(TypedGemm t);                 // "tensor-core" | "strict"
TypedGemm parse_typed_gemm(const std::string& s);   // the same names; throws ConfigError
enum class GemmTier { Strict, TF32, TensorCore };
GemmTier gemm_tier(DType dtype, GemmMath f32_math, TypedGemm typed);
const char* to_string(GemmTier t);                  // "strict" | "tf32" | "tensor-core"
const char* cublas_compute_name(GemmTier t);        // "CUBLAS_COMPUTE_32F_PEDANTIC", ...
// One sentence for reports: the tier, its compute type and what it means.
std::string describe(GemmTier t);

// The cuBLAS workspace of a model (gpu/device_context.hpp). By default its size follows the
// GEMM tier (cublas_workspace_bytes(RunOptions), below): 4 MiB on the tensor-core tier,
// 32 MiB on the strict and TF32 tiers. Why: the bf16 step's tensor-core GEMMs ran as fast
// with 4 MiB as with 32 on every peer row (within 0.3 %, two runs each, H100), for 29 MB
// less; the strict-f32 step lost 5.5 % with 4 MiB at d_model 768, T 512
// (docs/performance-notes.md, twenty-fourth session). Another size must lie in
// [kCublasWorkspaceMin, kCublasWorkspaceMax] and be a multiple of 256.
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;            // strict and TF32 tiers
constexpr size_t kCublasWorkspaceTensorCoreBytes = size_t(4) << 20;  // tensor-core tier
constexpr size_t kCublasWorkspaceMin = size_t(64) << 10;
constexpr size_t kCublasWorkspaceMax = size_t(1) << 30;
// RunOptions::cublas_workspace_bytes: the tier's default size (the default value).
constexpr size_t kCublasWorkspaceByTier = ~size_t(0);
// The default size of `tier`'s workspace.
size_t default_cublas_workspace_bytes(GemmTier tier);
// The default sizes in words, for reports: "4194304 bytes on tensor-core, 33554432 on strict
// and 33554432 on tf32".
std::string describe_default_cublas_workspaces();
// ConfigError naming `field` (e.g. "RunOptions::cublas_workspace_bytes"), the value and
// the limits unless `bytes` is a workspace size a model accepts.
void require_cublas_workspace_bytes(const char* field, size_t bytes);

// RunOptions::scan_partial_budget: size the scan's dB/dC partials to fit the scratch they share.
constexpr size_t kScanPartialsFitScratch = ~size_t(0);

struct RunOptions {
  DType dtype = DType::F32;        // storage dtype of the typed activations
  ScanMode scan = ScanMode::Auto;  // Auto = the checkpointed route (core/config.hpp)
  ScanExp scan_exp = ScanExp::Auto;  // the scan's exp(δ·A) (kernels/scan/scan.hpp)
  GemmMath gemm = GemmMath::F32;   // f32 GEMMs: strict (default) or TF32 (opt-in)
  TypedGemm typed_gemm = TypedGemm::TensorCore;  // bf16/f16 GEMMs: tensor cores (default) or strict
  bool state_grads = false;        // compute ∂L/∂(initial conv/SSM state)
  bool check_finite = false;       // scan every step's outputs for NaN/Inf
  // Most bytes the checkpointed scan backward's dB/dC partials may take (0 = the scan's
  // default, kern::scan::kDefaultPartialBudget, 512 MiB). A smaller budget runs that backward
  // in more segments of whole chunks with the same bits (test_determinism ScanSegments): at
  // 32 MiB the bf16 768/2048 step takes 60 MB less and runs ~1 % slower (performance-notes.md).
  // kScanPartialsFitScratch: the largest budget whose workspace fits in the backward scratch
  // it shares (o_dn and dH_typed, gpu/pipeline.hpp), so that the workspace adds no bytes.
  size_t scan_partial_budget = 0;
  // Which states the checkpointed scan saves (core/config.hpp; kernels/scan/scan.hpp,
  // "Grouped checkpoints"). Auto: grouped for bf16/f16, every chunk's for f32. Grouped: one
  // state per group of chunks, the group the largest whose backward workspace fits in the
  // shared region it uses (gpu/pipeline.hpp) with one segment per group, at least 2 chunks;
  // the backward refills each group's states (one more pass of the recurrence; the same
  // bits). Grouped takes no scan_partial_budget (ConfigError); Auto with a budget set is Every.
  ScanCheckpoints scan_checkpoints = ScanCheckpoints::Auto;
  // The checkpointed scan's channels per thread (kernels/scan/scan.hpp: 0 = its plan's
  // choice, 1 = one channel a thread, 2..4 = the d_state <= 16 tile plan), for tests and
  // benchmarks that compare the plans.
  int scan_channels_per_thread = 0;
  // The checkpointed scan's thread layout at d_state <= 16 (kernels/scan/scan.hpp FwdLayout:
  // Auto = its plan's choice). The same bits either way; for benchmarks that compare them.
  ScanLayout scan_layout = ScanLayout::Auto;
  // bf16/f16 on the tensor-core tier: F4c's and B4's dt_proj GEMM with its softplus as one
  // kernel (kernels/dt_softplus.cuh), opt-in; dt_rank above kDtSoftplusMaxRank (256) keeps
  // the cuBLAS path. Default false: cuBLAS, then the softplus
  // kernels (what f32 and the strict tier always run). The fused kernel is bound by the
  // softplus's own arithmetic, as the unfused one is, so it did not pay on the H200: a tie
  // at dt_rank 48 and 64, 4 % slower at 128 (docs/performance-notes.md, 2026-12-03 evening).
  bool fused_dt_softplus = false;
  // Bytes of the cuBLAS workspace (gpu/device_context.hpp), within [64 KiB, 1 GiB], a
  // multiple of 256; kCublasWorkspaceByTier (the default): the tier's size, 4 MiB on the
  // tensor-core tier and 32 MiB otherwise. cuBLAS chooses kernels by it, so another size may
  // change GEMM times and bits; for benchmarks that weigh its memory (bench_train_step
  // --cublas-workspace).
  size_t cublas_workspace_bytes = kCublasWorkspaceByTier;
  // Layer 0's input H0 = q(X·W_ip + b_ip) [R, d_model] f32 (gpu/pipeline.hpp, "saved").
  // Recompute keeps it only through the forward, in the backward's d_hidden buffer, and
  // the backward forms it again before layer 0's B7 from the saved typed input, by the
  // forward's own GEMM and norm kernel (the same bits: ModelParity.RecomputedH0KeepsEveryBit)
  // in layer 0's scan-output slot, which holds nothing there: R·d_model·4 bytes less for one
  // input_proj GEMM more a backward. Where R·d_model f32 does not fit in that slot
  // (d_inner·sizeof(storage) < 4·d_model) H0 is saved whatever this says. Auto: recompute
  // for bf16/f16, save for f32 (core/config.hpp, h0_mode).
  H0Mode h0 = H0Mode::Auto;
  int device = default_device();  // 0 unless select_device() chose another
};

// The cuBLAS workspace a model with `opt` holds: opt.cublas_workspace_bytes, or the default of
// its GEMM tier where that is kCublasWorkspaceByTier.
size_t cublas_workspace_bytes(const RunOptions& opt);

// The device memory of Model(cfg, B, T, opt), computed without a device (plan_memory): every
// buffer the model allocates at construction, by name, and the cuBLAS workspace. The total
// equals Model::device_bytes_allocated() right after construction (test_model_parity.cpp,
// ModelMemory); the step itself allocates nothing.
struct MemoryPlan {
  int64_t total_bytes = 0;
  std::vector<std::pair<std::string, int64_t>> buffers;  // (name, bytes), allocation order
  int64_t scan_checkpoint_group = 1;  // RunOptions::scan_checkpoints resolved for the shape
};
// The same refusals as the Model constructor (ConfigError naming field, value, limit),
// except that no device is needed.
MemoryPlan plan_memory(const ModelConfig& cfg, int64_t B, int64_t T, const RunOptions& opt);

// Thrown by check_finite runs: names the step, tensor and first bad index.
class NonFiniteError : public std::runtime_error {
 public:
  NonFiniteError(const std::string& msg, std::string step, std::string tensor, int64_t index,
                 bool overflow)
      : std::runtime_error(msg), step(std::move(step)), tensor(std::move(tensor)), index(index),
        overflow(overflow) {}
  std::string step, tensor;
  int64_t index;
  bool overflow;  // true when a finite input overflowed the storage dtype (f16)
};

// Thrown by Model::capture_step when the step cannot be captured into a CUDA
// graph: the message names the feature and what to do instead.
class CaptureRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Stream time of eager steps by phase (Model::set_phase_timing): GEMMs (every
// cuBLAS call), the scan (forward and backward kernels) and everything else
// ("elementwise": norms, conv, casts, gating, reductions, memsets, launch
// gaps). The three add up to the event-timed wall time of the steps.
struct PhaseTimes {
  double gemm_s = 0, scan_s = 0, elementwise_s = 0;
  int64_t steps = 0;  // backward_device() calls timed
  double total_s() const { return gemm_s + scan_s + elementwise_s; }
};

class Model {
 public:
  // Validates config and shape (ConfigError naming field, value, limit) and
  // allocates everything (an OOM error says how many bytes were requested).
  Model(const ModelConfig& cfg, int64_t B, int64_t T, const RunOptions& opt);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const Dims& dims() const;
  int64_t batch() const;
  int64_t seq_len() const;
  const RunOptions& options() const;
  ScanRoute scan_route() const;  // the scan implementation this model runs
  ScanExp scan_exp() const;      // and its exponential (Auto resolved)
  // Chunks per saved scan state (1 = every chunk's; RunOptions::scan_checkpoints resolved)
  int64_t scan_checkpoint_group() const;
  GemmTier gemm_tier() const;    // the tier every GEMM of this model runs on

  // Parameters: f32 arena in ParamLayout order ([total]); typed compute copies
  // and a_neg are refreshed from it.
  void set_params(const std::vector<float>& host);
  // Recurrent state: conv [L, B, di, dc], ssm [L, B, di, ds] (f32).
  void set_state(const std::vector<float>& conv, const std::vector<float>& ssm);
  void reset_state();
  void get_state(std::vector<float>& conv, std::vector<float>& ssm) const;
  // Upstream gradients w.r.t. the FINAL recurrent states (the ones forward
  // writes back): d_conv [L, B, di, dc], d_ssm [L, B, di, ds] (f32), used by
  // every following backward until cleared; without them they are zero (the
  // loss sees the output alone). The scan takes d_ssm as its dh_final, the
  // conv backward adds d_conv where the final window came from.
  void set_final_state_grads(const std::vector<float>& d_conv, const std::vector<float>& d_ssm);
  void clear_final_state_grads();

  // Training forward: X [B*T, mid] -> out [B*T, dm]; saves activations;
  // carries the recurrent state (read as initial, written as final).
  void forward(const std::vector<float>& X, std::vector<float>& out);
  // Backward of the last forward (once: a second backward needs a new forward, since
  // the saved norm_f input shares memory with the backward's scratch; std::logic_error
  // otherwise): d_out [B*T, dm] -> grads [total] (zeroed
  // first, then accumulated), and if RunOptions::state_grads, d_conv0
  // [L, B, di, dc] and d_ssm0 [L, B, di, ds]. d_input (optional, [B*T, mid]).
  void backward(const std::vector<float>& d_out, std::vector<float>& grads,
                std::vector<float>* d_conv0 = nullptr, std::vector<float>* d_ssm0 = nullptr,
                std::vector<float>* d_input = nullptr);
  // Target burn-in nosave forward from zero state: X [B*T, mid] -> [B, dm].
  void target_forward(const std::vector<float>& X, std::vector<float>& target);

  // Device-resident variants for benchmarks: inputs uploaded once, no host
  // copies; enqueue on the model's stream and return without synchronising.
  void upload_input(const std::vector<float>& X);
  void upload_d_out(const std::vector<float>& d_out);
  void forward_device();
  void backward_device();
  // Results of the last device step (eager or replay_step), downloaded
  // (synchronises): out [B*T, dm]; grads [total] and, with state_grads,
  // d_conv0 / d_ssm0 (null: not wanted).
  void download_output(std::vector<float>& out);
  void download_grads(std::vector<float>& grads, std::vector<float>* d_conv0 = nullptr,
                      std::vector<float>* d_ssm0 = nullptr);
  void synchronize();
  void* stream_handle();  // cudaStream_t
  int64_t device_bytes_allocated() const;

  // CUDA graph of the training step. capture_step() records one
  // training step — exactly what forward_device() + backward_device() enqueue:
  // every kernel, cuBLAS call and memset — into one CUDA graph and
  // instantiates it; replay_step() launches it on the model's stream (enqueue
  // only, like the *_device calls). A replay reads the uploaded input and d_out,
  // the parameters and the recurrent state from device memory when it runs, and
  // writes what an eager step writes (output, final state, saved activations,
  // gradients) with the same kernels, arguments and order: the same bits as an
  // eager step (validation/gpu/test_step_graph.cpp). upload_input, upload_d_out,
  // set_params, set_state and reset_state between replays are honoured: they
  // write the buffers the graph reads. Host-side downloads (get_state,
  // Model::backward's grads, ...) work after a replay as after an eager step.
  // Before capturing, one eager step runs as a warm-up (kernel modules and
  // cuBLAS are loaded outside the capture); the recurrent state is restored
  // afterwards, so capture_step() leaves the state as it found it (the
  // output, activations and gradients hold the warm-up step's values).
  // Refused with CaptureRefused, before anything is enqueued, where the step
  // cannot be pure device work: RunOptions::check_finite (a device-to-host
  // copy and a synchronisation after every step), MAMBACHECK_SYNC_LAUNCHES (a
  // synchronisation after every launch), phase timing on (host-read events),
  // or no parameters yet. A failed capture leaves no graph and a usable model.
  void capture_step();
  void replay_step();
  bool step_captured() const;
  int64_t step_graph_nodes() const;  // nodes of the captured graph (0: none)
  void release_step();               // frees the graph

  // Per-phase timing of eager steps (PhaseTimes; gpu/phase_timer.hpp): while
  // on, the model records CUDA events around its GEMMs and scans. Everything
  // enqueued on the model's stream between marks is attributed, so time only
  // training steps (forward_device + backward_device) while it is on.
  // take_phase_times() synchronises and returns the sums since the last take.
  void set_phase_timing(bool on);
  PhaseTimes take_phase_times();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::gpu
