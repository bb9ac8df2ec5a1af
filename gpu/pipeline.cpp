// pipeline.cpp — Pipeline<T> construction (the buffer plan of pipeline.hpp,
// allocated in one checked step), parameter/state/input upload and download,
// the lazily allocated target buffers, and make_pipeline (runtime dtype ->
// storage type). Explicit instantiations for float, __nv_bfloat16, __half.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "kernels/conv.cuh"
#include "kernels/dt_softplus.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/norm.cuh"
#include "gpu/pipeline.hpp"
#include "kernels/reduce.cuh"

namespace mc::gpu {

namespace {

size_t n_of(int64_t n) { return size_t(n); }

// Byte offsets inside a shared allocation: 256-byte aligned, as cudaMalloc's bases are.
size_t align_bytes(size_t n) { return (n + 255) / 256 * 256; }

// The largest dB/dC partial budget whose scan backward workspace fits in `bytes`; the scan's
// default (0) when the budget does not matter (cross-check routes) or when even one chunk per
// segment does not fit (then the shared region grows to the workspace).
size_t partial_budget_fitting(const kern::scan::Shape& s, ScanRoute r, int cpt, size_t bytes) {
  auto ws = [&](size_t budget) { return kern::scan::bwd_workspace_bytes(s, r, budget, cpt); };
  if (r != ScanRoute::Checkpointed || ws(1) > bytes) return 0;
  size_t lo = 1, hi = kern::scan::kDefaultPartialBudget;  // ws(lo) fits; find the largest that does
  if (ws(hi) <= bytes) return hi;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    (ws(mid) <= bytes ? lo : hi) = mid;
  }
  return lo;
}

std::string describe(const Dims& d, int64_t B, int64_t T, const RunOptions& opt) {
  std::ostringstream os;
  os << "Model(d_model=" << d.dm << ", d_inner=" << d.di << ", d_state=" << d.ds
     << ", d_conv=" << d.dc << ", n_layers=" << d.L << ", input_dim=" << d.mid << ", B=" << B
     << ", T=" << T << ", dtype=" << to_string(opt.dtype) << ")";
  return os.str();
}

}  // namespace

template <class T>
Pipeline<T>::Pipeline(const DeviceContext* ctx, const ParamLayout& lay, int64_t B, int64_t T_len,
                      const RunOptions& opt)
    : ctx_(ctx),
      lay_(lay),
      d_(lay.dims),
      B_(B),
      T_(T_len),
      R_(B * T_len),
      opt_(opt),
      route_(scan_route(opt.scan, lay.dims.ds)),
      scan_exp_(scan_exp(opt.scan_exp, route_, opt.dtype)),
      scan_shape_{B, T_len, lay.dims.di, lay.dims.ds},
      h0_recomputed_(h0_mode(opt.h0, opt.dtype) == H0Mode::Recompute && h0_fits_y_slot(lay.dims)),
      scan_partial_budget_(opt.scan_partial_budget),
      scan_cpt_(opt.scan_channels_per_thread),
      scan_layout_(opt.scan_layout),
      gemm_(ctx ? ctx->cublas() : nullptr, opt.gemm, opt.typed_gemm, ctx ? &ctx->phases() : nullptr),
      fused_dt_(!std::is_same<T, float>::value && opt.typed_gemm == TypedGemm::TensorCore &&
                opt.fused_dt_softplus && kern::dt_softplus_supported(lay.dims.dr)),
      fc_(opt.check_finite, ctx ? ctx->stream() : nullptr) {
  kern::scan::check_shape(scan_shape_, route_);
  const int64_t L = d_.L, dm = d_.dm, di = d_.di, ds = d_.ds, dc = d_.dc, dr = d_.dr,
                xd = d_.xd, mid = d_.mid, R = R_;
  constexpr bool typed = !std::is_same<T, float>::value;
  // The shared region (pipeline.hpp): o_dn | dH_typed | Z, the scan backward's workspace
  // and B4's f32 dt_proj accumulator. region_floor: what the workspace may fill without
  // growing it.
  dH_typed_offset_ = align_bytes(n_of(R * dm) * sizeof(T));
  z_offset_ = typed ? dH_typed_offset_ + align_bytes(n_of(R * dm) * sizeof(T)) : dH_typed_offset_;
  const size_t shared_acts = z_offset_ + n_of(R * dm) * sizeof(float);
  const size_t b4_acc = fused_dt_ ? 0 : n_of(R * di) * sizeof(float);  // fused: no acc
  const size_t region_floor = std::max(shared_acts, b4_acc);
  // The scan's checkpoints: every chunk's state, or one per group of chunks whose states
  // the backward refills into its workspace in the shared region (the largest group that
  // fits there with one segment per group, so grouping adds no bytes; at least 2 chunks).
  const ScanCheckpoints ck = scan_checkpoints(opt.scan_checkpoints, route_, opt.dtype,
                                             opt.scan_partial_budget != 0);
  if (ck == ScanCheckpoints::Grouped) {  // (Model refused a partial budget with it)
    const int64_t n_ckpt =
        kern::scan::geometry(scan_shape_, route_, true, 0, scan_cpt_).n_ckpt;
    const int64_t fit = kern::scan::max_checkpoint_group(scan_shape_, route_, region_floor, scan_cpt_);
    scan_group_ = n_ckpt < 2 ? 1 : std::min<int64_t>(n_ckpt, std::max<int64_t>(2, fit));
    scan_partial_budget_ =
        kern::scan::group_partial_budget(scan_shape_, route_, scan_group_, scan_cpt_);
  }
  scan_saved_floats_ = kern::scan::saved_floats(scan_shape_, route_, scan_group_);
  BufferPlan plan;
  // parameters
  plan.add(params_, n_of(lay.total), "params");
  plan.add(grads_, n_of(lay.total), "grads");
  plan.add(a_neg_, n_of(L * di * ds), "a_neg");
  if (typed) plan.add(wtyped_, n_of(lay.total), "params_typed");
  // recurrent state
  plan.add(conv_state_, n_of(L * B * di * dc), "conv_state");
  plan.add(ssm_state_, n_of(L * B * di * ds), "ssm_state");
  if (opt.state_grads) {
    plan.add(d_conv0_, n_of(L * B * di * dc), "d_conv0");
    plan.add(d_ssm0_, n_of(L * B * di * ds), "d_ssm0");
  }
  // input / output
  // The typed path keeps only the typed copy of X: upload_input stages the f32 rows in the
  // dP scratch (free between calls) where they fit, else in a buffer of their own.
  if (!typed || !x_staged_in_scratch()) plan.add(x_, n_of(R * mid), "input");
  plan.add(d_out_, n_of(R * dm), "d_out");
  if (typed) {
    plan.add(x_typed_, n_of(R * mid), "input_typed");
    plan.add(out_typed_, n_of(R * dm), "output_typed");
  } else {
    plan.add(out_, n_of(R * dm), "output");
  }
  // saved activations
  // Z lives in the shared region; H0 in dH through the forward where it is recomputed
  plan.add(hs_, n_of((h0_recomputed_ ? L - 1 : L) * R * dm), "residual_stream");
  plan.add(rms_, n_of(L * R), "rms");
  plan.add(conv_s0_, n_of(L * B * di * dc), "incoming_conv_state");
  plan.add(scan_saved_, n_of(L) * scan_saved_floats_, "scan_saved_states");
  plan.add(rms_f_, n_of(R), "norm_f_rms");
  plan.add(proj_, n_of(L * R * 2 * di), "in_proj_out");
  plan.add(xdbl_, n_of(L * R * xd), "xdbl");
  plan.add(y_, n_of(L * R * di), "scan_y");
  // layer scratch (lifetimes in pipeline.hpp; u lives in dP's x half, the backward's
  // gated in its z half, dY and dU over the layer's saved y)
  plan.add(s1_, n_of(R * di), "delta|gated|d_gated|d_delta|d_delta_raw|d_u_xproj");
  // the cross-check routes can write neither dΔ over Δ nor du over dy, and read u
  // contiguous only
  if (route_ != ScanRoute::Checkpointed) {
    plan.add(du_, n_of(R * di), "d_delta");
    plan.add(s3_, n_of(R * di), "d_u");
    plan.add(u_, n_of(R * di), "u");
  }
  plan.add(dP_, n_of(R * 2 * di), "u|gated|d_in_proj_out");
  // the shared region (offsets above), sized for the scan workspace too
  if (opt.scan_partial_budget == kScanPartialsFitScratch)
    scan_partial_budget_ = partial_budget_fitting(scan_shape_, route_, scan_cpt_, region_floor);
  const size_t scan_ws = kern::scan::bwd_workspace_bytes(scan_shape_, route_, scan_partial_budget_,
                                                         scan_cpt_, scan_group_);
  const std::string region_name =
      std::string(typed ? "out_proj_out|d_post_norm|d_hidden_typed|post_norm|norm_f_input|scan_bwd_workspace"
                        : "out_proj_out|d_post_norm|post_norm|norm_f_input|scan_bwd_workspace") +
      (fused_dt_ ? "" : "|dt_proj_acc");
  const size_t region_bytes = std::max(region_floor, scan_ws);
  plan.add(bwd_region_, region_bytes, region_name);
  // backward scratch
  plan.add(dH_, n_of(R * dm), "d_hidden");
  // B6's partials go to the shared region, which holds nothing from B4's last read of the
  // dt_proj accumulator to B7 (pipeline.hpp), where they fit (always, at expand >= 1)
  const size_t conv_scratch = kern::conv1d_silu_bwd_scratch_floats(B, T_len, di, dc);
  conv_scratch_in_region_ = conv_scratch * sizeof(float) <= region_bytes;
  const size_t reduce = std::max({n_of(R),  // B7's rebuilt post_norm: its rms, unused
                                  kern::rmsnorm_bwd_scratch_floats(R, dm),
                                  conv_scratch_in_region_ ? size_t(1) : conv_scratch,
                                  kern::column_sum_scratch_floats(R, di),
                                  kern::column_sum_scratch_floats(R, dm), size_t(1)});
  plan.add(reduce_scratch_, reduce, "reduce_scratch");
  plan.add(d_dt_in_, n_of(R * dr), "d_dt_in");
  if (route_ != ScanRoute::Checkpointed) {  // the cross-check routes' f32 dB, dC
    plan.add(dB_, n_of(R * ds), "dB");
    plan.add(dC_, n_of(R * ds), "dC");
  }
  plan.add(dxdbl_, n_of(R * xd), "d_xdbl");
  // largest tensor the finite check scans in one piece
  const int64_t biggest = std::max({lay.total, int64_t(scan_saved_floats_), R * 2 * di, R * xd, R * mid, R * dm, L * B * di * std::max(dc, ds)});
  fc_.plan(plan, biggest);
  // the plan, with the cuBLAS workspace the context holds (or, plan only, would hold)
  const size_t cublas_ws = ctx ? ctx->workspace_bytes() : cublas_workspace_bytes(opt);
  for (const auto& [name, bytes] : plan.items()) plan_.buffers.emplace_back(name, int64_t(bytes));
  plan_.buffers.emplace_back("cublas_workspace", int64_t(cublas_ws));
  plan_.total_bytes = int64_t(plan.total_bytes() + cublas_ws);
  plan_.scan_checkpoint_group = scan_group_;
  bytes_ = plan_.total_bytes;
  if (!ctx) return;  // plan only
  plan.allocate_all(describe(d_, B, T_len, opt));
  // Defined contents everywhere the first use may read: zero state and grads.
  conv_state_.zero(stream());
  ssm_state_.zero(stream());
  grads_.zero(stream());
  MC_CUDA_CHECK(cudaStreamSynchronize(stream()), "model initialisation");
}

template <class T>
void Pipeline<T>::set_params(const float* host) {
  params_.upload(host, n_of(lay_.total), stream());
  if constexpr (!std::is_same<T, float>::value)
    kern::cast_from_f32<T>(params_.get(), lay_.total, wtyped_.get(), stream());  // RN
  for (int l = 0; l < int(d_.L); ++l)
    kern::exp_negate(p(lay_.layers[size_t(l)].a_log), d_.di * d_.ds,
                     a_neg_.get() + int64_t(l) * d_.di * d_.ds, stream());
  MC_CUDA_CHECK(cudaStreamSynchronize(stream()), "set_params");
  have_params_ = true;
}

template <class T>
void Pipeline<T>::set_state(const float* conv, const float* ssm) {
  conv_state_.upload(conv, conv_state_.size(), stream());
  ssm_state_.upload(ssm, ssm_state_.size(), stream());
  MC_CUDA_CHECK(cudaStreamSynchronize(stream()), "set_state");
}

template <class T>
void Pipeline<T>::reset_state() {
  conv_state_.zero(stream());
  ssm_state_.zero(stream());
  MC_CUDA_CHECK(cudaStreamSynchronize(stream()), "reset_state");
}

template <class T>
void Pipeline<T>::get_state(float* conv, float* ssm) {
  conv_state_.download(conv, conv_state_.size(), stream());
  ssm_state_.download(ssm, ssm_state_.size(), stream());
}

template <class T>
void Pipeline<T>::set_final_state_grads(const float* d_conv, const float* d_ssm) {
  if (!d_conv || !d_ssm) {
    have_final_grads_ = false;
    return;
  }
  const size_t nc = conv_state_.size(), ns = ssm_state_.size();
  if (d_conv_T_.empty()) {
    d_conv_T_.allocate(nc, "d_conv_final");
    d_ssm_T_.allocate(ns, "d_ssm_final");
    bytes_ += int64_t(d_conv_T_.bytes() + d_ssm_T_.bytes());
  }
  d_conv_T_.upload(d_conv, nc, stream());
  d_ssm_T_.upload(d_ssm, ns, stream());
  MC_CUDA_CHECK(cudaStreamSynchronize(stream()), "set_final_state_grads");
  have_final_grads_ = true;
}

// Typed path: X lands in f32 staging (the dP scratch, or x_ where it does not fit), is
// checked there when the finite check is on, and is cast to the typed copy at once; the
// forward reads only the copy. f32 path: X itself is the input.
template <class T>
bool Pipeline<T>::f32_fits_in_dP(int64_t n) const {
  return size_t(n) * sizeof(float) <= size_t(R_ * 2 * d_.di) * sizeof(T);
}

template <class T>
bool Pipeline<T>::x_staged_in_scratch() const {
  return !std::is_same<T, float>::value && f32_fits_in_dP(R_ * d_.mid);
}

template <class T>
void Pipeline<T>::upload_input(const float* X) {
  if constexpr (std::is_same<T, float>::value) {
    x_.upload(X, x_.size(), stream());
  } else {
    const int64_t n = R_ * d_.mid;
    float* staging = x_staged_in_scratch() ? reinterpret_cast<float*>(dP_.get()) : x_.get();
    MC_CUDA_CHECK(cudaMemcpyAsync(staging, X, size_t(n) * sizeof(float), cudaMemcpyHostToDevice,
                                  stream()),
                  "upload input");
    fc_.check("input", -1, "X", staging, n);
    kern::cast_from_f32<T>(staging, n, x_typed_.get(), stream());  // RN, saved for the backward
    MC_CUDA_CHECK(cudaStreamSynchronize(stream()), "upload input");
  }
  // the backward reads X (input_proj's dW, and H0 where it is recomputed): a new X makes
  // the last forward's saved activations another input's
  have_forward_ = false;
}

template <class T>
void Pipeline<T>::upload_d_out(const float* d_out) {
  d_out_.upload(d_out, d_out_.size(), stream());
}

// Typed path: the f32 copy of the typed output is formed in the dP scratch (free between
// calls) where it fits, else in a buffer allocated on first use, and copied from there.
template <class T>
void Pipeline<T>::download_output(float* out) {
  const int64_t n = R_ * d_.dm;
  if constexpr (!std::is_same<T, float>::value) {
    const bool in_scratch = f32_fits_in_dP(n);
    if (!in_scratch && out_.empty()) {
      out_.allocate(n_of(n), "output");
      bytes_ += int64_t(out_.bytes());
    }
    float* f32 = in_scratch ? reinterpret_cast<float*>(dP_.get()) : out_.get();
    kern::cast_to_f32<T>(out_typed_.get(), n, f32, stream());
    MC_CUDA_CHECK(cudaMemcpyAsync(out, f32, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream()),
                  "download output");
    MC_CUDA_CHECK(cudaStreamSynchronize(stream()), "download output");
  } else {
    out_.download(out, size_t(n), stream());
  }
}

template <class T>
void Pipeline<T>::download_grads(float* grads) {
  grads_.download(grads, grads_.size(), stream());
}

template <class T>
void Pipeline<T>::download_state_grads(float* d_conv0, float* d_ssm0) {
  if (!opt_.state_grads)
    throw std::logic_error("state gradients were requested but RunOptions::state_grads is false");
  if (d_conv0) d_conv0_.download(d_conv0, d_conv0_.size(), stream());
  if (d_ssm0) d_ssm0_.download(d_ssm0, d_ssm0_.size(), stream());
}

template <class T>
void Pipeline<T>::download_d_input(float* d_input) {
  if (!have_d_input_) throw std::logic_error("d_input was not computed by the last backward");
  d_input_.download(d_input, d_input_.size(), stream());
}

template <class T>
void Pipeline<T>::ensure_target_buffers() {
  if (tgt_) return;
  auto t = std::make_unique<TargetBuffers<T>>();
  const int64_t L = d_.L, dm = d_.dm, di = d_.di, R = R_;
  BufferPlan plan;
  plan.add(t->x, n_of(R * d_.mid), "target_input");
  plan.add(t->cur, n_of(R * dm), "target_residual");
  plan.add(t->rms, n_of(R), "target_rms");
  plan.add(t->conv, n_of(L * B_ * di * d_.dc), "target_conv_state");
  plan.add(t->ssm, n_of(L * B_ * di * d_.ds), "target_ssm_state");
  plan.add(t->target, n_of(B_ * dm), "target_output");
  if constexpr (!std::is_same<T, float>::value) plan.add(t->x_typed, n_of(R * d_.mid), "target_input_typed");
  plan.add(t->post_norm, n_of(R * dm), "target_post_norm");
  plan.add(t->proj, n_of(R * 2 * di), "target_in_proj_out");
  plan.add(t->y, n_of(R * di), "target_scan_y");
  plan.add(t->xdbl, n_of(R * d_.xd), "target_xdbl");
  plan.add(t->out, n_of(R * dm), "target_norm_f_out");
  // F4c's dt_proj accumulator (and the finite check's copy of u): the training forward's
  // sits in the shared region, whose Z slot the target forward must not touch (the saved
  // norm_f input of a pending backward)
  plan.add(t->acc, n_of(R * di), "target_dt_proj_acc");
  bytes_ += int64_t(plan.allocate_all("target forward buffers"));
  tgt_ = std::move(t);
}

// With check_finite, the external inputs of a forward are checked first, so a
// later non-finite step output is attributed to that step.
template <class T>
void Pipeline<T>::check_external_inputs_forward() {
  if (!fc_.enabled()) return;
  fc_.check("input", -1, "params", params_.get(), lay_.total);
  if (std::is_same<T, float>::value) fc_.check("input", -1, "X", x_.get(), R_ * d_.mid);
  fc_.check("input", -1, "conv_state", conv_state_.get(), int64_t(conv_state_.size()));
  fc_.check("input", -1, "ssm_state", ssm_state_.get(), int64_t(ssm_state_.size()));
}

std::unique_ptr<PipelineBase> make_pipeline(const DeviceContext& ctx, const ParamLayout& lay,
                                            int64_t B, int64_t T, const RunOptions& opt) {
  switch (opt.dtype) {
    case DType::F32: return std::make_unique<Pipeline<float>>(&ctx, lay, B, T, opt);
    case DType::BF16: return std::make_unique<Pipeline<__nv_bfloat16>>(&ctx, lay, B, T, opt);
    case DType::F16: return std::make_unique<Pipeline<__half>>(&ctx, lay, B, T, opt);
  }
  throw ConfigError("dtype: unknown value");
}

MemoryPlan plan_pipeline_memory(const ParamLayout& lay, int64_t B, int64_t T,
                                const RunOptions& opt) {
  switch (opt.dtype) {
    case DType::F32: return Pipeline<float>(nullptr, lay, B, T, opt).memory_plan();
    case DType::BF16: return Pipeline<__nv_bfloat16>(nullptr, lay, B, T, opt).memory_plan();
    case DType::F16: return Pipeline<__half>(nullptr, lay, B, T, opt).memory_plan();
  }
  throw ConfigError("dtype: unknown value");
}

template class Pipeline<float>;
template class Pipeline<__nv_bfloat16>;
template class Pipeline<__half>;

}  // namespace mc::gpu
