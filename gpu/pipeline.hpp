// pipeline.hpp — the templated GPU pipeline behind mc::gpu::Model: one
// implementation over the storage type T (float = the pure f32 path,
// __nv_bfloat16 / __half = the mixed path of docs/math.md), chosen at run time
// from RunOptions::dtype by make_pipeline. Internal to gpu/.
//
// Buffer plan (R = B·T rows; "T" = storage type, f32 otherwise). The forward
// saves only what the backward cannot cheaply rebuild; the backward recomputes
// the rest of a layer (the conv output u, Δ, the gated output, and at B4 the
// dt_proj GEMM for Δraw) into one layer's scratch with the same kernels and
// inputs, so the recomputed values are bit-identical to the forward's.
//   parameters   params, grads [total] f32; a_neg [L, di, ds] f32; typed compute
//                copy of the whole arena [total] T (typed path only; only the
//                GEMM weights are read from it)
//   state        conv [L, B, di, dc], ssm [L, B, di, ds] f32 (persistent, carried);
//                d_conv0 / d_ssm0 of the same shapes when state_grads
//   saved        hs [L, R, dm] f32 (hs[l] = layer l's input H_l; the norm_f input Z [R, dm]
//                f32 is kept in the shared region below until the backward's norm_f step;
//                with RunOptions::h0 = Recompute (bf16/f16's default), hs holds layers 1..L-1 only:
//                H0 = q(X·W_ip + b_ip) lives through the forward in dH, which the backward
//                alone uses, and the backward forms it again before layer 0's B7 in layer
//                0's y slot, free from B6 on — the same GEMM on the saved typed input and
//                the same norm kernel as the forward's layer-0 F1, so the same bits),
//                rms [L, R] f32, conv_s0 [L, B, di, dc] f32 (each layer's incoming conv
//                state), scan_saved [L, saved] f32 (the scan route's saved states:
//                checkpoints [B, n_saved, di, ds] — every chunk's state, or with grouped
//                checkpoints (RunOptions::scan_checkpoints) one per group of G chunks, the
//                group's states refilled by the backward into the scan workspace below —
//                or h_saved [B, T+1, di, ds] on the cross-check routes), rms_f [R] f32;
//                proj [L, R, 2di] T (the in_proj output P = [xb | z]: the conv reads xb
//                and the gate reads z through the row stride 2di), xdbl [L, R, xd] T,
//                y [L, R, di] T (scan output before gating)
//   layer scratch  (forward and backward, one layer at a time) s1 [R, di] T and dP
//                [R, 2di] T (and du, s3, u [R, di] T on the cross-check scan routes only,
//                which read u contiguous); o_dn [R, dm] T (out_proj output, read by F6
//                inside the next norm's pass; then the in_proj input gradient dN). On the
//                checkpointed route u lives in dP's x half (row stride 2di), the backward's
//                gated in its z half, and the backward writes dY and dU over the layer's
//                saved y, whose last reader is B2: two [R, di] buffers fewer than a buffer
//                each. Lifetimes (F = forward, R = backward recompute, B1–B8 the steps):
//                  dP x half  F: u -> F4b, F4d (scan);  R: u -> B3 (scan), B5 (x_proj
//                             dW);  B6: dxb -> B7
//                  dP z half  R: gated -> B1 (out_proj dW);  B2: dz -> B7
//                  s1  F: Δ -> F4d (scan); then gated -> F5; B1: dG -> B2; R (after
//                      B2): Δ -> B3; B3: dΔ written over Δ by the checkpointed scan (the
//                      cross-check routes write it into du) -> B4; B4: dΔraw (over dΔ,
//                      elementwise) -> B4's GEMMs; B5: dU_x -> B6
//                  y[l]  F: y (saved) -> R, B2;  B2: dY written over y (elementwise) ->
//                      B3; B3: dU written over dY by the checkpointed scan (the cross-check
//                      routes write it into s3) -> B6 (which adds dU_x as it reads). So a
//                      backward consumes the saved y: it needs the forward before it, as
//                      the shared region's Z already requires.
//                The f32 dt_proj accumulator [R, di] of F4c, of the backward's recompute of
//                Δ after B2 and of B4 sits in the shared region (free at F4c: o_dn and
//                post_norm are consumed by then and Z is not yet formed; free in the
//                backward from B1's last read of dH_typed to B7). Δraw [R, di] is never
//                stored: B4 runs the dt_proj GEMM again and the softplus backward forms
//                q(acc + b_dt) from it, as F4c does (the same bits).
//   bwd scratch  dH [R, dm] f32 (B8 adds the norm gradient in place), dH_typed [R, dm] T,
//                d_dt_in [R, dr] T, dxdbl [R, xd] T (the checkpointed scan writes dB, dC
//                into its B and C columns; the cross-check routes write f32 dB, dC [R, ds],
//                assembled into it); reduction scratch (the RMSNorm backwards' and column
//                sums'; B6's conv partials go to the shared region, which holds nothing
//                from B4's GEMMs to B7)
//   shared region  [o_dn | dH_typed (typed path) | Z], the scan backward's workspace and
//                B4's dt_proj accumulator [R, di] f32 share one allocation (bwd_region_,
//                the largest of the three uses): the
//                workspace lives only inside B3, after B1 has read dH_typed and before B7
//                writes dN into o_dn; o_dn's forward use (F6) ends inside the next norm's
//                forward pass; Z, written by norm_f's forward pass, is read by the norm_f
//                backward, before any B3. So the first B3 ends Z's life: a backward needs
//                the forward before it (Pipeline::backward refuses a second one). Before Z
//                is formed and after it is read, the Z slot holds a layer's post_norm [R, dm]
//                T (not saved): written by F1 for F2, rebuilt before B7 for in_proj's dW by
//                the same RMSNorm forward on the saved layer input (the same bits). With
//                RunOptions::scan_partial_budget = kScanPartialsFitScratch the partials are
//                budgeted to fit in the activations' part of the region. From B4's softplus
//                backward (the accumulator's last reader) to B7 the region holds nothing:
//                B6's conv partials (dw, dbias per (b, chunk, d)) go there.
//   input        X [R, mid] f32 (f32 path); typed path: x_typed [R, mid] T only, cast by
//                upload_input from f32 rows staged in dP (or in an X buffer of their own
//                when R·mid f32 does not fit in dP); d_out [R, dm] f32
//   output       out [R, dm] f32 (f32 path: the norm_f output; typed path: out_typed
//                [R, dm] T, whose f32 copy download_output forms in dP, or in an out
//                buffer allocated on first use where R·dm f32 does not fit in dP)
//   target       allocated on first use: its own input, residual, state, post_norm,
//                proj, xdbl, y, output and dt_proj accumulator; the layer scratch is shared
// Everything that mamba-rs keeps f32 in its mixed path stays f32 here too
// (residual stream, states, h_saved / checkpoints, rms, master weights, grads).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "gpu/device_buffer.hpp"
#include "gpu/device_context.hpp"
#include "gpu/finite_check.hpp"
#include "gpu/gemm.hpp"
#include "core/param_layout.hpp"
#include "gpu/model.hpp"
#include "kernels/norm.cuh"
#include "kernels/scan/scan.hpp"

namespace mc::gpu {

// What Model needs from a pipeline, independent of the storage type.
class PipelineBase {
 public:
  virtual ~PipelineBase() = default;
  virtual void set_params(const float* host) = 0;               // [total]
  virtual void set_state(const float* conv, const float* ssm) = 0;
  virtual void reset_state() = 0;
  virtual void get_state(float* conv, float* ssm) = 0;
  // Upstream gradients on the final states for the next backwards ([L, B, di,
  // dc] and [L, B, di, ds]); both nullptr = none (zero).
  virtual void set_final_state_grads(const float* d_conv, const float* d_ssm) = 0;
  virtual void upload_input(const float* X) = 0;                // [R, mid]
  virtual void upload_d_out(const float* d_out) = 0;            // [R, dm]
  virtual void forward() = 0;                                   // enqueue only
  virtual void download_output(float* out) = 0;                 // [R, dm]
  virtual void backward(bool want_d_input) = 0;                 // enqueue only
  virtual void download_grads(float* grads) = 0;                // [total]
  virtual void download_state_grads(float* d_conv0, float* d_ssm0) = 0;
  virtual void download_d_input(float* d_input) = 0;            // [R, mid]
  virtual void target_forward(const float* X, float* target) = 0;  // [R, mid] -> [B, dm]
  virtual bool has_forward() const = 0;
  virtual int64_t bytes_allocated() const = 0;
  virtual int64_t scan_checkpoint_group() const = 0;  // chunks per saved scan state
};

std::unique_ptr<PipelineBase> make_pipeline(const DeviceContext& ctx, const ParamLayout& lay,
                                            int64_t B, int64_t T, const RunOptions& opt);
// The buffers make_pipeline would allocate, with the cuBLAS workspace, computed without a
// device (a plan-only pipeline: the same constructor, nothing allocated).
MemoryPlan plan_pipeline_memory(const ParamLayout& lay, int64_t B, int64_t T,
                                const RunOptions& opt);

// Raw pointers to one layer's saved activations (or the target forward's
// nosave set, where conv_s0 and scan_saved are nullptr).
template <class T>
struct LayerActs {
  float* rms;         // [R]
  T* post_norm;       // [R, dm] (training path: not saved, in the shared region's Z slot)
  T* proj;            // [R, 2di]: [xb | z]
  float* conv_s0;     // [B, di, dc] copy of the incoming conv state (nullptr = not saved)
  T* xdbl;            // [R, xd]
  float* scan_saved;  // the scan route's saved states (nullptr = not saved)
  T* y;               // [R, di]
};

// One layer's scratch (pipeline.hpp's lifetimes table). On the checkpointed scan route u
// lives in dP's x half; the cross-check routes read it contiguous, from a buffer of its own.
template <class T>
struct LayerScratch {
  T* u;          // [R rows, ld_u]: the conv output
  int64_t ld_u;  // 2·di (in dP), or di
  T *s1, *s3, *du, *dP, *o_dn;
};

// Target forward buffers (allocated on first use). The layer scratch is shared;
// everything else is separate, so a target forward never clobbers the training
// forward's saved activations, input or state.
template <class T>
struct TargetBuffers {
  DeviceBuffer<float> x, cur, rms, conv, ssm, target;  // [R,mid] [R,dm] [R] [L,B,di,dc] [L,B,di,ds] [B,dm]
  DeviceBuffer<float> acc;  // [R, di]: F4c's dt_proj accumulator
  DeviceBuffer<T> x_typed, post_norm, proj, y, xdbl, out;
};

template <class T>
class Pipeline final : public PipelineBase {
 public:
  // ctx null: plan only (memory_plan()); no buffer is allocated and no method but
  // memory_plan and the accessors may be called.
  Pipeline(const DeviceContext* ctx, const ParamLayout& lay, int64_t B, int64_t T_len,
           const RunOptions& opt);
  const MemoryPlan& memory_plan() const { return plan_; }

  void set_params(const float* host) override;
  void set_state(const float* conv, const float* ssm) override;
  void reset_state() override;
  void get_state(float* conv, float* ssm) override;
  void set_final_state_grads(const float* d_conv, const float* d_ssm) override;
  void upload_input(const float* X) override;
  void upload_d_out(const float* d_out) override;
  void forward() override;
  void download_output(float* out) override;
  void backward(bool want_d_input) override;
  void download_grads(float* grads) override;
  void download_state_grads(float* d_conv0, float* d_ssm0) override;
  void download_d_input(float* d_input) override;
  void target_forward(const float* X, float* target) override;
  bool has_forward() const override { return have_forward_; }
  int64_t bytes_allocated() const override { return bytes_; }
  int64_t scan_checkpoint_group() const override { return scan_group_; }

 private:
  // forward.cpp
  // An addition left to the next RMSNorm forward (kern::rmsnorm_fwd_add), formed in the
  // norm's own pass: input_proj's biased epilogue x_out = q(src + bias), or layer
  // `layer`'s F6 residual x_out = src + f32(residual); none when both are null (then
  // x_out = src is the norm's input). layer: the layer whose F6 is pending (-1: none).
  struct PendingAdd {
    const float* src;
    kern::RmsNormPreAdd<T> add;
    int layer;
  };
  PendingAdd input_proj(const std::string& what, const T* x, float* H0);  // GEMM, bias pending
  void norm_with_pending(const PendingAdd& in, const float* g, T* y, float* rms);
  PendingAdd layer_forward(int l, const LayerActs<T>& a, const PendingAdd& in, float* H_next,
                           float* conv_state, float* ssm_state, float* dt_acc);
  void conv_forward(int l, const T* proj, const float* s0, float* final_state);  // -> u
  void check_u(const char* step, int l, float* tmp);  // check_finite of u via tmp [R, di] f32
  void dt_proj_acc(int l, const T* xdbl, float* acc);  // acc [R, di] f32 = dt_in·W_dt
  void delta_forward(int l, const T* xdbl, float* acc);  // -> s1: Δ (acc: f32 [R, di])
  void fused_dt_softplus(int l, const T* xdbl, const T* d_delta, T* out);  // fused_dt_ only
  LayerActs<T> saved(int l);
  LayerScratch<T> scratch();
  // backward.cpp
  void layer_backward(int l, float* dH);
  // pipeline.cpp
  void ensure_target_buffers();
  void check_external_inputs_forward();

  // Parameter views.
  const float* p(int64_t off) const { return params_.get() + off; }
  float* g(int64_t off) { return grads_.get() + off; }
  const T* w(int64_t off) const;           // typed compute copy of a GEMM weight
  const float* a_neg(int l) const { return a_neg_.get() + int64_t(l) * d_.di * d_.ds; }
  const T* x_typed() const;                // the (typed) input of input_proj
  bool x_staged_in_scratch() const;        // typed path: X's f32 upload goes through dP
  bool f32_fits_in_dP(int64_t n) const;    // n f32 values fit in the dP scratch
  T* out_typed();                          // norm_f output
  const T* typed_copy_of_dH();             // B0: q(dH) (the f32 dH itself for float)
  T* typed_dH_out();                       // where an RMSNorm backward writes q(dH) (or null)
  float* conv_state(int l, float* base) const { return base + int64_t(l) * B_ * d_.di * d_.dc; }
  float* ssm_state(int l, float* base) const { return base + int64_t(l) * B_ * d_.di * d_.ds; }
  // layer l's saved input H_l (l >= 1 where H0 is recomputed: h0_recomputed_)
  float* hs(int l) const {
    return hs_.get() + int64_t(h0_recomputed_ ? l - 1 : l) * R_ * d_.dm;
  }
  // Where the forward forms H0: dH (backward-only) where H0 is recomputed, else hs(0).
  float* h0_forward() const { return h0_recomputed_ ? dH_.get() : hs(0); }
  // Layer 0's y slot as f32 [R, dm]: where the backward forms H0 again (free from B6 on).
  float* h0_rebuilt() const { return reinterpret_cast<float*>(y_.get()); }
  // H0 is recomputed when asked for and R·dm f32 fits in a layer's y slot [R, di] T.
  static bool h0_fits_y_slot(const Dims& d) {
    return size_t(d.dm) * sizeof(float) <= size_t(d.di) * sizeof(T);
  }

  cudaStream_t stream() const { return ctx_->stream(); }

  const DeviceContext* ctx_;  // null: a plan-only pipeline (plan_memory), no device work
  const ParamLayout lay_;
  const Dims d_;
  const int64_t B_, T_, R_;
  const RunOptions opt_;
  const ScanRoute route_;
  const ScanExp scan_exp_;
  const kern::scan::Shape scan_shape_;
  const bool h0_recomputed_;     // RunOptions::h0 resolved to Recompute, where h0_fits_y_slot
  int64_t scan_group_ = 1;       // chunks per saved scan state (RunOptions::scan_checkpoints)
  size_t scan_saved_floats_ = 0;  // per layer
  size_t scan_partial_budget_;  // the budget the workspace was sized with (0 = the scan's default)
  const int scan_cpt_;          // RunOptions::scan_channels_per_thread
  const ScanLayout scan_layout_;  // RunOptions::scan_layout
  const Gemm gemm_;
  // F4c / B4 with RunOptions::fused_dt_softplus (opt-in) on the tensor-core tier: the
  // dt_proj GEMM and its softplus in one kernel (kernels/dt_softplus.cuh); otherwise, and
  // always for f32 storage and the strict tier, cuBLAS then the softplus kernels.
  const bool fused_dt_;
  FiniteChecker fc_;
  int64_t bytes_ = 0;
  MemoryPlan plan_;  // the constructor's buffer plan (and, on a device, what it allocated)
  bool have_params_ = false;
  bool have_forward_ = false;
  bool have_d_input_ = false;
  bool have_final_grads_ = false;  // d_conv_T_ / d_ssm_T_ hold upstream final-state gradients

  // parameters
  DeviceBuffer<float> params_, grads_, a_neg_;
  DeviceBuffer<T> wtyped_;
  // recurrent state
  DeviceBuffer<float> conv_state_, ssm_state_, d_conv0_, d_ssm0_;
  DeviceBuffer<float> d_conv_T_, d_ssm_T_;  // allocated by the first set_final_state_grads
  // input / output
  DeviceBuffer<float> x_, d_out_, out_, d_input_;
  DeviceBuffer<T> x_typed_, out_typed_;
  // saved activations
  DeviceBuffer<float> hs_, rms_, conv_s0_, scan_saved_, rms_f_;
  DeviceBuffer<T> proj_, xdbl_, y_;
  // layer scratch
  DeviceBuffer<T> s1_, s3_, du_, u_, dP_;  // s3_, du_, u_: the cross-check scan routes only
  // backward scratch
  DeviceBuffer<float> dH_, dB_, dC_, reduce_scratch_;  // dB, dC: cross-check routes only
  DeviceBuffer<T> d_dt_in_, dxdbl_;
  // o_dn [R, dm] T at 0, dH_typed [R, dm] T (typed path) at dH_typed_offset_, the norm_f
  // input Z [R, dm] f32 at z_offset_, and the scan backward's workspace over all of it
  // during B3 (the header's "shared region")
  DeviceBuffer<unsigned char> bwd_region_;
  size_t dH_typed_offset_ = 0, z_offset_ = 0;
  bool conv_scratch_in_region_ = false;  // B6's partials in the shared region (pipeline.cpp)
  bool z_saved_ = false;  // Z holds the last forward's norm_f input (no B3 has run since)
  T* o_dn() const { return reinterpret_cast<T*>(bwd_region_.get()); }
  T* dH_typed() const { return reinterpret_cast<T*>(bwd_region_.get() + dH_typed_offset_); }
  float* norm_f_input() const { return reinterpret_cast<float*>(bwd_region_.get() + z_offset_); }
  T* post_norm_slot() const { return reinterpret_cast<T*>(bwd_region_.get() + z_offset_); }
  float* dt_acc_in_region() const { return reinterpret_cast<float*>(bwd_region_.get()); }
  // where layer l's F6 residual sum goes: the next layer's input, or Z after the last layer
  float* residual_after(int l) const { return l + 1 < d_.L ? hs(l + 1) : norm_f_input(); }
  // target forward (lazy)
  std::unique_ptr<TargetBuffers<T>> tgt_;
};

template <class T>
const T* Pipeline<T>::w(int64_t off) const {
  if constexpr (std::is_same<T, float>::value) return params_.get() + off;
  else return wtyped_.get() + off;
}

template <class T>
const T* Pipeline<T>::x_typed() const {
  if constexpr (std::is_same<T, float>::value) return x_.get();
  else return x_typed_.get();
}

template <class T>
T* Pipeline<T>::out_typed() {
  if constexpr (std::is_same<T, float>::value) return out_.get();
  else return out_typed_.get();
}

}  // namespace mc::gpu
