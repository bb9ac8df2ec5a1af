// no_cuda_stub.cpp — the GPU API of model.hpp for builds without a CUDA
// toolkit: gpu_available() says so, and constructing a Model throws
// (ConfigError for a bad config or shape, exactly as the CUDA build, else
// GpuUnavailable).
#include "gpu/model.hpp"

namespace mc::gpu {

static const char* kReason = "no CUDA device: mambacheck was built without a CUDA toolkit";

bool gpu_available(std::string* reason) {
  if (reason) *reason = kReason;
  return false;
}
int device_count() { return 0; }
void select_device(int) { throw GpuUnavailable(kReason); }
int default_device() { return 0; }
DeviceInfo device_info(int) { throw GpuUnavailable(kReason); }
std::string DeviceInfo::to_string() const { return name; }

// The memory plan needs the CUDA build's pipeline (and its kernels' sizes).
MemoryPlan plan_memory(const ModelConfig& cfg, int64_t B, int64_t T, const RunOptions&) {
  validate_runtime(Dims::from(cfg), B, T);
  throw GpuUnavailable(kReason);
}

// Every Model member is unreachable (the constructor throws) but must link.
struct Model::Impl {};
[[noreturn]] static void unavailable() { throw GpuUnavailable(kReason); }
Model::Model(const ModelConfig& cfg, int64_t B, int64_t T, const RunOptions&) {
  validate_runtime(Dims::from(cfg), B, T);  // same refusals as the CUDA build
  unavailable();
}
Model::~Model() = default;
const Dims& Model::dims() const { unavailable(); }
int64_t Model::batch() const { unavailable(); }
int64_t Model::seq_len() const { unavailable(); }
const RunOptions& Model::options() const { unavailable(); }
ScanRoute Model::scan_route() const { unavailable(); }
ScanExp Model::scan_exp() const { unavailable(); }
int64_t Model::scan_checkpoint_group() const { unavailable(); }
void Model::set_params(const std::vector<float>&) { unavailable(); }
void Model::set_state(const std::vector<float>&, const std::vector<float>&) { unavailable(); }
void Model::reset_state() { unavailable(); }
void Model::set_final_state_grads(const std::vector<float>&, const std::vector<float>&) {
  unavailable();
}
void Model::clear_final_state_grads() { unavailable(); }
void Model::get_state(std::vector<float>&, std::vector<float>&) const { unavailable(); }
void Model::forward(const std::vector<float>&, std::vector<float>&) { unavailable(); }
void Model::backward(const std::vector<float>&, std::vector<float>&, std::vector<float>*,
                     std::vector<float>*, std::vector<float>*) {
  unavailable();
}
void Model::target_forward(const std::vector<float>&, std::vector<float>&) { unavailable(); }
void Model::upload_input(const std::vector<float>&) { unavailable(); }
void Model::upload_d_out(const std::vector<float>&) { unavailable(); }
void Model::forward_device() { unavailable(); }
void Model::backward_device() { unavailable(); }
void Model::download_output(std::vector<float>&) { unavailable(); }
void Model::download_grads(std::vector<float>&, std::vector<float>*, std::vector<float>*) {
  unavailable();
}
void Model::synchronize() { unavailable(); }
void* Model::stream_handle() { unavailable(); }
int64_t Model::device_bytes_allocated() const { unavailable(); }
GemmTier Model::gemm_tier() const { unavailable(); }
void Model::capture_step() { unavailable(); }
void Model::replay_step() { unavailable(); }
bool Model::step_captured() const { unavailable(); }
int64_t Model::step_graph_nodes() const { unavailable(); }
void Model::release_step() { unavailable(); }
void Model::set_phase_timing(bool) { unavailable(); }
PhaseTimes Model::take_phase_times() { unavailable(); }

}  // namespace mc::gpu
