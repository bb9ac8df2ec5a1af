// model.hpp — the public host API of the GPU Mamba-1 pipeline: device
// discovery, and a Model that owns device weights, gradients, recurrent state
// and saved activations for one (config, B, T, options) and runs the backbone
// forward, backward and the target forward (spec §3–§4, §6).
//
// This header has no CUDA types, so the CLI and tests compile against it on
// machines without a toolkit; there gpu_available() says why not and every
// Model constructor throws GpuUnavailable.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
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
// a test process that CTest assigned to GPU k runs there (issue 5, multi-GPU).
// ConfigError naming the index and the number of visible devices when it is
// out of range; GpuUnavailable without a device.
void select_device(int device);
// The device last passed to select_device (0 until then).
int default_device();

// How f32 GEMMs run. TF32 is an explicit opt-in and is recorded in every
// report; typed (bf16/f16) GEMMs always use CUBLAS_COMPUTE_32F_PEDANTIC.
enum class GemmMath { F32, TF32 };
const char* to_string(GemmMath g);

struct RunOptions {
  DType dtype = DType::F32;        // storage dtype of the typed activations
  ScanMode scan = ScanMode::Auto;  // Auto = the checkpointed route (core/config.hpp)
  ScanExp scan_exp = ScanExp::Auto;  // the scan's exp(δ·A) (kernels/scan/scan.hpp)
  GemmMath gemm = GemmMath::F32;
  bool state_grads = false;        // compute ∂L/∂(initial conv/SSM state)
  bool check_finite = false;       // scan every step's outputs for NaN/Inf
  int device = default_device();  // 0 unless select_device() chose another
};

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
  // Backward of the last forward: d_out [B*T, dm] -> grads [total] (zeroed
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
  void synchronize();
  void* stream_handle();  // cudaStream_t
  int64_t device_bytes_allocated() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::gpu
