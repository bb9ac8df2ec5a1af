// config.hpp — Mamba-1 model configuration, derived dimensions, validation
// (docs/math.md#notation) and the scan-mode predicate. Shared by the CPU oracle, the
// GPU pipeline, the CLI and the tests, so it has no CUDA and no templates.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mc {

// Which scan implementation the GPU runs. The CPU always runs the sequential
// recurrence. Auto and Checkpointed select the checkpointed route (the training
// default); Sequential and Parallel the seed kernels kept as cross-check routes
// (as in mamba-rs, d_state > 64 forces Parallel over Sequential: the sequential
// kernel holds the state in registers).
enum class ScanMode { Auto, Sequential, Parallel, Checkpointed };

// The selective-scan implementations of kernels/scan/scan.hpp.
enum class ScanRoute { Checkpointed, Chunked, Sequential };
// How the scan computes exp(δ·A) (kernels/scan/scan.hpp): on the special-function
// unit, or with the polynomial whose bits a host build reproduces. Auto: per
// storage dtype (the choice and its reasons are in kernels/scan/scan.hpp).
enum class ScanExp { Auto, Hardware, Accurate };
// Which states the checkpointed scan's forward saves for the backward (kernels/scan/scan.hpp,
// "Grouped checkpoints"): every chunk's, or one per group of chunks with the group's states
// rebuilt by the backward (one more pass of the recurrence, the same bits). Auto: per
// storage dtype (scan_checkpoints below).
enum class ScanCheckpoints { Auto, Every, Grouped };
// The checkpointed scan's thread layout at d_state <= 16 (kernels/scan/scan.hpp, FwdLayout):
// a channel's states over 4 lanes, or all 16 in one thread; the same bits either way.
enum class ScanLayout { Auto, LaneGroups, WholeState };
// Layer 0's input H0 = q(X·W_ip + b_ip) in the training step (gpu/pipeline.hpp, "saved"):
// formed again by the backward (one input_proj GEMM more, B·T·d_model f32 less) or saved by
// the forward; the same bits either way. Auto: per storage dtype (h0_mode below).
enum class H0Mode { Auto, Recompute, Save };

// Storage dtype of the "typed" tensors of the mixed-precision path (which tensors:
// reference_cpu/model.cpp; docs/math.md#mixed-precision).
// F32 means the pure f32 pipeline (no rounding anywhere).
enum class DType { F32, BF16, F16 };

const char* to_string(ScanMode m);
const char* to_string(ScanRoute r);
const char* to_string(ScanExp e);
const char* to_string(DType d);
const char* to_string(ScanCheckpoints c);
const char* to_string(ScanLayout l);
const char* to_string(H0Mode m);
H0Mode parse_h0_mode(const std::string& s);  // auto|recompute|save; throws ConfigError
ScanLayout parse_scan_layout(const std::string& s);  // throws ConfigError
ScanMode parse_scan_mode(const std::string& s);  // throws ConfigError
ScanCheckpoints parse_scan_checkpoints(const std::string& s);  // throws ConfigError
ScanExp parse_scan_exp(const std::string& s);  // auto|hardware|accurate; throws ConfigError
DType parse_dtype(const std::string& s);         // throws ConfigError

// Thrown for every bad configuration or runtime shape. The message always
// names the field, the value and the limit that was violated.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct ModelConfig {
  int d_model = 128;
  int d_state = 16;
  int d_conv = 4;
  int expand = 2;
  int n_layers = 3;
  int input_dim = 128;  // "mid": width of the external input fed to input_proj
  double eps = 1e-5;    // RMSNorm epsilon (added to the mean of squares)
};

// Derived dimensions (docs/math.md#notation). All int64 so that products never overflow.
struct Dims {
  int64_t dm = 0, di = 0, ds = 0, dc = 0, dr = 0, xd = 0, mid = 0, L = 0;
  double eps = 1e-5;
  static Dims from(const ModelConfig& cfg);  // validates cfg first
};

// Hard limits. These are limits of this implementation, not of the math; each
// is checked before any work starts and refused with a ConfigError, so that no
// kernel ever returns early in silence (mamba-rs's sequential scan did nothing
// for d_state > 64); every index that can exceed 2^31 is 64-bit.
struct Limits {
  static constexpr int64_t kMaxDModel = int64_t(1) << 20;
  static constexpr int64_t kMaxLayers = 4096;
  static constexpr int64_t kMaxDInner = 65535;
  static constexpr int64_t kMaxDState = 256;  // parallel-scan register/smem bound
  static constexpr int64_t kMaxDConv = 8;     // conv register arrays
  static constexpr int64_t kMaxSeqScanDState = 64;  // sequential scan registers
  static constexpr int64_t kMaxSeqLen = int64_t(1) << 24;
  static constexpr int64_t kMaxBatch = int64_t(1) << 20;
  static constexpr int64_t kMaxInputDim = int64_t(1) << 20;
};

// Throws ConfigError naming field, value and limit.
void validate_config(const ModelConfig& cfg);
// Runtime shape check (B, T > 0 and below the limits). Throws ConfigError.
void validate_runtime(const Dims& d, int64_t B, int64_t T);

// mamba-rs's scan predicate: ds > 64 forces the parallel scan; its Auto picks
// parallel iff T > 256. Kept for the seed routes; mambacheck's Auto is scan_route's.
constexpr int64_t kParallelScanThreshold = 256;
bool use_parallel_scan(ScanMode mode, int64_t T, int64_t ds);
// The route a mode runs: Auto/Checkpointed -> Checkpointed, Parallel -> Chunked,
// Sequential -> Sequential (Chunked when ds > 64: the sequential kernel's registers).
ScanRoute scan_route(ScanMode mode, int64_t ds);
// The exponential a route runs with `e` for storage `dtype` (Auto resolved; the
// cross-check routes always use the accurate one).
ScanExp scan_exp(ScanExp e, ScanRoute r, DType dtype);
// The checkpoints a route saves with `c` for storage `dtype`: Every off the checkpointed
// route; Auto is Grouped for 2-byte storage and Every for f32. Why: at d_state 16 a state
// every 16 steps is 4 bytes per (t, d_inner) element, as much as two bf16 activations, so in
// the bf16 step the checkpoints are the largest saved tensor after the in_proj output, and
// grouping them is what brings its peak under the reference implementation's; the f32 step
// is already under it with every chunk's state saved, and keeps the backward one pass shorter.
// With a scan partial budget set (RunOptions::scan_partial_budget, which sizes the
// every-chunk backward's segments) Auto is Every.
ScanCheckpoints scan_checkpoints(ScanCheckpoints c, ScanRoute r, DType dtype,
                                 bool partial_budget_set = false);
// What `m` means for storage `dtype`: Auto is Recompute for 2-byte storage and Save for f32.
// Why: the typed GEMM runs on the tensor cores (+1.4 % of the bf16 step at d_model 768, +2.7 %
// at 2048, measured on an H100: docs/performance-notes.md) and its bytes bring the bf16 step's
// peak under the reference implementation's at d_model 2048 and with 4 layers; the f32 step is
// under it without them, and its strict-f32 GEMM would cost more (~3 % predicted, not run).
H0Mode h0_mode(H0Mode m, DType dtype);

// Parameter counts (the tensors of core/param_layout.hpp).
int64_t params_per_layer(const Dims& d);
int64_t params_total(const Dims& d);

}  // namespace mc
