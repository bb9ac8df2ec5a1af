// model.cpp — mc::gpu::Model (model.hpp): validation of config, shape and
// host vector sizes, then delegation to the storage-type pipeline chosen at
// construction from RunOptions::dtype.
#include <sstream>

#include "gpu/phase_timer.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/step_graph.hpp"

namespace mc::gpu {

struct Model::Impl {
  Impl(const ModelConfig& cfg, int64_t B, int64_t T, const RunOptions& o)
      : dims(Dims::from(cfg)), layout(dims), opt(o), B(B), T(T),
        ctx(o.device, o.gemm, cublas_workspace_bytes(o)) {
    pipe = make_pipeline(ctx, layout, B, T, opt);
  }
  ~Impl() {
    try {
      ctx.activate();  // free the buffers on the model's device
    } catch (...) {
    }
    graph.reset();
    pipe.reset();
  }
  Dims dims;
  ParamLayout layout;
  RunOptions opt;
  int64_t B, T;
  DeviceContext ctx;
  std::unique_ptr<PipelineBase> pipe;
  StepGraph graph;           // capture_step / replay_step
  bool have_params = false;  // set_params was called
};

void require_cublas_workspace_bytes(const char* field, size_t bytes) {
  if (bytes >= kCublasWorkspaceMin && bytes <= kCublasWorkspaceMax && bytes % 256 == 0) return;
  std::ostringstream os;
  os << field << " = " << bytes << " violates " << kCublasWorkspaceMin
     << " <= cublas_workspace_bytes <= " << kCublasWorkspaceMax << ", a multiple of 256";
  throw ConfigError(os.str());
}

namespace {

// Host vector of the wrong size: a ConfigError naming the argument and both sizes.
template <class V>
void require_size(const char* what, const V& v, int64_t expected, const char* formula) {
  if (int64_t(v.size()) == expected) return;
  std::ostringstream os;
  os << what << ".size() = " << v.size() << " violates " << what << ".size() == " << formula
     << " = " << expected;
  throw ConfigError(os.str());
}

// Everything that must hold before any device work (ConfigError naming field, value, limit),
// except a device.
void validate_options(const ModelConfig& cfg, int64_t B, int64_t T, const RunOptions& opt) {
  const Dims d = Dims::from(cfg);  // validates cfg
  validate_runtime(d, B, T);
  // the scan route's own limits (d_state per implementation), before any device work
  kern::scan::check_shape(kern::scan::Shape{B, T, d.di, d.ds}, scan_route(opt.scan, d.ds));
  require_cublas_workspace_bytes("RunOptions::cublas_workspace_bytes", cublas_workspace_bytes(opt));
  // a grouped scan backward runs one segment per group: no partial budget of its own
  if (opt.scan_checkpoints == ScanCheckpoints::Grouped && opt.scan_partial_budget != 0)
    throw ConfigError("RunOptions::scan_partial_budget = " +
                      std::to_string(opt.scan_partial_budget) +
                      " violates scan_partial_budget == 0 with scan_checkpoints = grouped "
                      "(its backward runs one segment per group)");
}

// ... and a device (GpuUnavailable with the reason).
void validate(const ModelConfig& cfg, int64_t B, int64_t T, const RunOptions& opt) {
  validate_options(cfg, B, T, opt);
  std::string reason;
  if (!gpu_available(&reason)) throw GpuUnavailable(reason);
}

// The state gradients d_conv0/d_ssm0 exist only when the model was built with them.
void require_state_grads(bool requested, const RunOptions& opt) {
  if (requested && !opt.state_grads)
    throw ConfigError(
        "state gradients requested (d_conv0/d_ssm0 non-null) but RunOptions::state_grads is "
        "false");
}

}  // namespace

MemoryPlan plan_memory(const ModelConfig& cfg, int64_t B, int64_t T, const RunOptions& opt) {
  validate_options(cfg, B, T, opt);
  const Dims dims = Dims::from(cfg);
  return plan_pipeline_memory(ParamLayout(dims), B, T, opt);
}

Model::Model(const ModelConfig& cfg, int64_t B, int64_t T, const RunOptions& opt) {
  validate(cfg, B, T, opt);
  impl_ = std::make_unique<Impl>(cfg, B, T, opt);
}

Model::~Model() = default;

const Dims& Model::dims() const { return impl_->dims; }
int64_t Model::batch() const { return impl_->B; }
int64_t Model::seq_len() const { return impl_->T; }
const RunOptions& Model::options() const { return impl_->opt; }
ScanRoute Model::scan_route() const { return mc::scan_route(impl_->opt.scan, impl_->dims.ds); }
ScanExp Model::scan_exp() const {
  return mc::scan_exp(impl_->opt.scan_exp, scan_route(), impl_->opt.dtype);
}
int64_t Model::scan_checkpoint_group() const { return impl_->pipe->scan_checkpoint_group(); }
GemmTier Model::gemm_tier() const {
  return mc::gpu::gemm_tier(impl_->opt.dtype, impl_->opt.gemm, impl_->opt.typed_gemm);
}

void Model::set_params(const std::vector<float>& host) {
  require_size("params", host, impl_->layout.total, "params_total");
  impl_->ctx.activate();
  impl_->pipe->set_params(host.data());
  impl_->have_params = true;
}

void Model::set_state(const std::vector<float>& conv, const std::vector<float>& ssm) {
  const Dims& d = impl_->dims;
  require_size("conv", conv, d.L * impl_->B * d.di * d.dc, "n_layers*B*d_inner*d_conv");
  require_size("ssm", ssm, d.L * impl_->B * d.di * d.ds, "n_layers*B*d_inner*d_state");
  impl_->ctx.activate();
  impl_->pipe->set_state(conv.data(), ssm.data());
}

void Model::set_final_state_grads(const std::vector<float>& d_conv,
                                  const std::vector<float>& d_ssm) {
  const Dims& d = impl_->dims;
  require_size("d_conv_final", d_conv, d.L * impl_->B * d.di * d.dc, "n_layers*B*d_inner*d_conv");
  require_size("d_ssm_final", d_ssm, d.L * impl_->B * d.di * d.ds, "n_layers*B*d_inner*d_state");
  impl_->ctx.activate();
  impl_->pipe->set_final_state_grads(d_conv.data(), d_ssm.data());
}

void Model::clear_final_state_grads() {
  impl_->ctx.activate();
  impl_->pipe->set_final_state_grads(nullptr, nullptr);
}

void Model::reset_state() {
  impl_->ctx.activate();
  impl_->pipe->reset_state();
}

void Model::get_state(std::vector<float>& conv, std::vector<float>& ssm) const {
  const Dims& d = impl_->dims;
  conv.resize(size_t(d.L * impl_->B * d.di * d.dc));
  ssm.resize(size_t(d.L * impl_->B * d.di * d.ds));
  impl_->ctx.activate();
  impl_->pipe->get_state(conv.data(), ssm.data());
}

void Model::forward(const std::vector<float>& X, std::vector<float>& out) {
  upload_input(X);
  forward_device();
  out.resize(size_t(impl_->B * impl_->T * impl_->dims.dm));
  impl_->pipe->download_output(out.data());
}

void Model::backward(const std::vector<float>& d_out, std::vector<float>& grads,
                     std::vector<float>* d_conv0, std::vector<float>* d_ssm0,
                     std::vector<float>* d_input) {
  require_state_grads(d_conv0 || d_ssm0, impl_->opt);  // before the step runs
  upload_d_out(d_out);
  impl_->pipe->backward(d_input != nullptr);
  impl_->ctx.phases().mark(Phase::Idle, impl_->ctx.stream());
  impl_->ctx.phases().count_step();
  download_grads(grads, d_conv0, d_ssm0);
  if (d_input) {
    d_input->resize(size_t(impl_->B * impl_->T * impl_->dims.mid));
    impl_->pipe->download_d_input(d_input->data());
  }
}

void Model::target_forward(const std::vector<float>& X, std::vector<float>& target) {
  require_size("X", X, impl_->B * impl_->T * impl_->dims.mid, "B*T*input_dim");
  impl_->ctx.activate();
  target.resize(size_t(impl_->B * impl_->dims.dm));
  impl_->pipe->target_forward(X.data(), target.data());
}

void Model::upload_input(const std::vector<float>& X) {
  require_size("X", X, impl_->B * impl_->T * impl_->dims.mid, "B*T*input_dim");
  impl_->ctx.activate();
  impl_->pipe->upload_input(X.data());
}

void Model::upload_d_out(const std::vector<float>& d_out) {
  require_size("d_out", d_out, impl_->B * impl_->T * impl_->dims.dm, "B*T*d_model");
  impl_->ctx.activate();
  impl_->pipe->upload_d_out(d_out.data());
}

void Model::forward_device() {
  impl_->ctx.activate();
  impl_->ctx.phases().mark(Phase::Elementwise, impl_->ctx.stream());
  impl_->pipe->forward();
}

void Model::backward_device() {
  impl_->ctx.activate();
  impl_->pipe->backward(false);
  impl_->ctx.phases().mark(Phase::Idle, impl_->ctx.stream());
  impl_->ctx.phases().count_step();
}

// ---- CUDA graph of the training step -------------------------------------------------

namespace {

// Why this model's step cannot be captured ("" if it can).
std::string capture_refusal(const RunOptions& opt, bool have_params, bool phase_timing) {
  if (opt.check_finite)
    return "RunOptions::check_finite is on: after every step the non-finite detector copies the "
           "first bad index to the host and synchronises (kern::first_nonfinite), which a CUDA "
           "graph cannot contain. Capture a model with check_finite off, or run checked steps "
           "eagerly (forward_device / backward_device)";
  if (launch_sync_enabled())
    return "MAMBACHECK_SYNC_LAUNCHES is set: every kernel launch is followed by "
           "cudaDeviceSynchronize, which is illegal while a stream is being captured. Unset it "
           "to capture (it is a debugging aid for eager steps)";
  if (phase_timing)
    return "phase timing is on (set_phase_timing): its CUDA events are read back by the host "
           "after each eager step. Turn it off to capture; phases are measured on eager steps";
  if (!have_params) return "no parameters: call set_params() before capturing the step";
  return "";
}

}  // namespace

void Model::capture_step() {
  Impl& m = *impl_;
  const std::string why = capture_refusal(m.opt, m.have_params, m.ctx.phases().enabled());
  if (!why.empty()) throw CaptureRefused("Model::capture_step refused: " + why);
  m.ctx.activate();
  m.graph.reset();
  // Warm-up: one eager step loads every kernel module and initialises cuBLAS
  // outside the capture; the recurrent state it advanced is put back.
  std::vector<float> conv, ssm;
  get_state(conv, ssm);
  m.pipe->forward();
  m.pipe->backward(false);
  MC_CUDA_CHECK(cudaStreamSynchronize(m.ctx.stream()), "capture_step: warm-up step");
  m.pipe->set_state(conv.data(), ssm.data());
  m.graph.capture(
      m.ctx.stream(),
      [&] {
        m.pipe->forward();
        m.pipe->backward(false);
      },
      "the training step (forward_device + backward_device)");
}

void Model::replay_step() {
  if (!impl_->graph.ready())
    throw std::logic_error("Model::replay_step called before capture_step");
  impl_->ctx.activate();
  impl_->graph.launch(impl_->ctx.stream());
}

bool Model::step_captured() const { return impl_->graph.ready(); }

int64_t Model::step_graph_nodes() const { return int64_t(impl_->graph.nodes()); }

void Model::release_step() {
  impl_->ctx.activate();
  impl_->graph.reset();
}

// ---- phase timing ---------------------------------------------------------------------

void Model::set_phase_timing(bool on) {
  impl_->ctx.activate();
  MC_CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream()), "set_phase_timing");
  impl_->ctx.phases().set_enabled(on);
}

PhaseTimes Model::take_phase_times() {
  impl_->ctx.activate();
  return impl_->ctx.phases().take();
}

void Model::download_output(std::vector<float>& out) {
  impl_->ctx.activate();
  out.resize(size_t(impl_->B * impl_->T * impl_->dims.dm));
  impl_->pipe->download_output(out.data());
}

void Model::download_grads(std::vector<float>& grads, std::vector<float>* d_conv0,
                           std::vector<float>* d_ssm0) {
  const Dims& d = impl_->dims;
  require_state_grads(d_conv0 || d_ssm0, impl_->opt);
  impl_->ctx.activate();
  grads.resize(size_t(impl_->layout.total));
  impl_->pipe->download_grads(grads.data());
  if (d_conv0) d_conv0->resize(size_t(d.L * impl_->B * d.di * d.dc));
  if (d_ssm0) d_ssm0->resize(size_t(d.L * impl_->B * d.di * d.ds));
  if (d_conv0 || d_ssm0)
    impl_->pipe->download_state_grads(d_conv0 ? d_conv0->data() : nullptr,
                                      d_ssm0 ? d_ssm0->data() : nullptr);
}

void Model::synchronize() {
  impl_->ctx.activate();
  MC_CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream()), "Model::synchronize");
}

void* Model::stream_handle() { return impl_->ctx.stream(); }

int64_t Model::device_bytes_allocated() const { return impl_->pipe->bytes_allocated(); }

}  // namespace mc::gpu
