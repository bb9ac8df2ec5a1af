// forward.cpp — the backbone forward (docs/math.md: input_proj, L layers of
// F1–F6 with carried conv/SSM state, norm_f) and the target "burn-in nosave"
// forward (docs/math.md, target forward), one implementation over the storage type T. Where the
// typed path rounds is listed in reference_cpu/model.cpp; the GPU rounds at
// exactly those points (the kernels' typed stores).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "kernels/conv.cuh"
#include "kernels/dt_softplus.cuh"
#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.cuh"
#include "kernels/norm.cuh"
#include "gpu/pipeline.hpp"

namespace mc::gpu {

template <class T>
LayerActs<T> Pipeline<T>::saved(int l) {
  const int64_t R = R_, di = d_.di;
  return LayerActs<T>{rms_.get() + int64_t(l) * R,
                      post_norm_slot(),  // not saved: B7 rebuilds it (pipeline.hpp)
                      proj_.get() + int64_t(l) * R * 2 * di,
                      conv_s0_.get() + int64_t(l) * B_ * di * d_.dc,
                      xdbl_.get() + int64_t(l) * R * d_.xd,
                      scan_saved_.get() + int64_t(l) * int64_t(scan_saved_floats_),
                      y_.get() + int64_t(l) * R * di};
}

template <class T>
LayerScratch<T> Pipeline<T>::scratch() {
  const bool u_in_dP = route_ == ScanRoute::Checkpointed;  // (pipeline.hpp)
  return LayerScratch<T>{u_in_dP ? dP_.get() : u_.get(), u_in_dP ? 2 * d_.di : d_.di, s1_.get(),
                         s3_.get(), du_.get(), dP_.get(), o_dn()};
}

// F4a: u [R rows, ld_u] T (scratch().u: dP's x half) = SiLU(conv(xb) + bias), xb read in
// place from the in_proj output proj [R, 2di] (row stride 2di), the incoming state s0
// [B, di, dc] read-only, the final window written to final_state (nullptr = not written;
// may alias s0).
template <class T>
void Pipeline<T>::conv_forward(int l, const T* proj, const float* s0, float* final_state) {
  const LayerParamOffsets& off = lay_.layers[size_t(l)];
  kern::ConvFwdParams<T> cp;
  cp.xb = proj;
  cp.ld_x = 2 * d_.di;
  cp.w = p(off.conv_w);
  cp.bias = p(off.conv_b);
  cp.B = B_;
  cp.seq_len = T_;
  cp.di = d_.di;
  cp.dc = d_.dc;
  cp.s0 = s0;
  cp.final_state = final_state;
  const LayerScratch<T> sc = scratch();
  cp.u = sc.u;
  cp.ld_u = sc.ld_u;
  kern::conv1d_silu_fwd<T>(cp, stream());
}

// check_finite of u. In dP's x half it is not contiguous: its rows are copied into the
// free accumulator space `tmp` (R·di f32 >= R·di T) and checked there. No-op when off.
template <class T>
void Pipeline<T>::check_u(const char* step, int l, float* tmp) {
  if (!fc_.enabled()) return;
  const LayerScratch<T> sc = scratch();
  if (sc.ld_u == d_.di) {  // the cross-check routes' contiguous u
    fc_.check(step, l, "u", sc.u, R_ * d_.di);
    return;
  }
  const size_t row = size_t(d_.di) * sizeof(T);
  MC_CUDA_CHECK(cudaMemcpy2DAsync(tmp, row, sc.u, size_t(sc.ld_u) * sizeof(T), row, size_t(R_),
                                  cudaMemcpyDeviceToDevice, stream()),
                std::string(step) + ": gather u for the finite check");
  fc_.check(step, l, "u", reinterpret_cast<const T*>(tmp), R_ * d_.di);
}

// The dt_proj GEMM: acc [R, di] f32 = dt_in·W_dt, dt_in read in place from xdbl [R, xd]
// (row stride xd). F4c forms it in the shared region (the target forward: in its own
// buffer); B4 forms it again (the same call, the same bits) there, because
// Δraw = q(acc + b_dt) is not kept.
template <class T>
void Pipeline<T>::dt_proj_acc(int l, const T* xdbl, float* acc) {
  const LayerParamOffsets& off = lay_.layers[size_t(l)];
  gemm_.forward<T, float>("layer " + std::to_string(l) + " dt_proj", xdbl, d_.xd,
                          w(off.dt_proj_w), acc, d_.di, R_, d_.dr, d_.di);
}

// The dt_proj GEMM and its softplus as one tensor-core kernel (fused_dt_): F4c with
// d_delta null (out = Δ), B4 with it (out = dΔraw). Timed as a GEMM interval.
template <class T>
void Pipeline<T>::fused_dt_softplus(int l, const T* xdbl, const T* d_delta, T* out) {
  if constexpr (std::is_same<T, float>::value) {
    throw std::logic_error("fused_dt_softplus: f32 storage runs dt_proj through cuBLAS");
  } else {
    const LayerParamOffsets& off = lay_.layers[size_t(l)];
    kern::DtSoftplusParams<T> dp;
    dp.dt_in = xdbl;
    dp.ld_in = d_.xd;
    dp.w = w(off.dt_proj_w);
    dp.bias = p(off.dt_proj_b);
    dp.R = R_;
    dp.dr = d_.dr;
    dp.di = d_.di;
    dp.d_delta = d_delta;
    dp.out = out;
    ctx_->phases().mark(Phase::Gemm, stream());
    if (d_delta) kern::dt_softplus_bwd<T>(dp, stream());
    else kern::dt_softplus_fwd<T>(dp, stream());
    ctx_->phases().mark(Phase::Elementwise, stream());
  }
}

// F4c: Δ = q(softplus(q(acc + b_dt))) -> scratch s1 [R, di] T, the bias added in f32
// before Δraw's one rounding; Δraw itself is not stored (B4 re-forms it). On the
// tensor-core tier acc stays on chip (fused_dt_softplus); otherwise it goes through
// `acc` [R, di] f32 (the shared region; the target forward's own buffer).
template <class T>
void Pipeline<T>::delta_forward(int l, const T* xdbl, float* acc) {
  const LayerParamOffsets& off = lay_.layers[size_t(l)];
  const LayerScratch<T> sc = scratch();
  if (fused_dt_) {
    fused_dt_softplus(l, xdbl, nullptr, sc.s1);
  } else {
    dt_proj_acc(l, xdbl, acc);
    kern::softplus_bias_fwd<T>(acc, p(off.dt_proj_b), R_, d_.di, nullptr, sc.s1, stream());
  }
  fc_.check("F4c dt_proj_softplus", l, "delta", sc.s1, R_ * d_.di);
}

// F1 of a layer or norm_f: RMSNorm of in.add.x_out, formed from in.src in the same pass
// where an addition is pending (input_proj's bias before layer 0's F1 or norm_f without
// layers; the residual of layer in.layer's F6 before the next F1 or norm_f).
template <class T>
void Pipeline<T>::norm_with_pending(const PendingAdd& in, const float* g, T* y, float* rms) {
  const int64_t R = R_, dm = d_.dm;
  kern::rmsnorm_fwd_add<T>(in.src, in.add, g, R, dm, d_.eps, y, rms, stream());
  if (in.add.bias) fc_.check_rounded<T>("input_proj", -1, "H0", in.add.x_out, R * dm);
  if (in.add.residual) fc_.check("F6 residual", in.layer, "residual_out", in.add.x_out, R * dm);
}

// input_proj: the GEMM x·W_ip [R, mid] -> H0 [R, dm] f32, with its bias and rounding left
// pending on it (in place) for the next norm, layer 0's F1. The forward, the target forward
// and the backward's rebuild of H0 all form it here, so the rebuild is the forward's call.
template <class T>
typename Pipeline<T>::PendingAdd Pipeline<T>::input_proj(const std::string& what, const T* x,
                                                         float* H0) {
  gemm_.forward<T, float>(what, x, d_.mid, w(lay_.input_proj_w), H0, d_.dm, R_, d_.mid, d_.dm);
  kern::RmsNormPreAdd<T> add;
  add.bias = p(lay_.input_proj_b);
  add.x_out = H0;
  return PendingAdd{H0, add, -1};
}

// One layer, F1–F5 and F6 pending. The layer's input H = in.add.x_out [R, dm] f32
// (formed by F1 from in.src where an addition is pending). Returns F6, H_next = H +
// f32(out_proj output) [R, dm] f32 (may alias H), as the addition pending for the next
// norm, which writes H_next in its own pass; the out_proj output stays in the layer
// scratch (o_dn) until then. conv_state [B, di, dc] and ssm_state [B, di, ds] are read
// as the initial and written as the final state; with a.conv_s0 the incoming conv
// state is first copied there for the backward.
template <class T>
typename Pipeline<T>::PendingAdd Pipeline<T>::layer_forward(int l, const LayerActs<T>& a,
                                                            const PendingAdd& in, float* H_next,
                                                            float* conv_state, float* ssm_state,
                                                            float* dt_acc) {
  const LayerParamOffsets& off = lay_.layers[size_t(l)];
  const int64_t R = R_, dm = d_.dm, di = d_.di, ds = d_.ds, dr = d_.dr, xd = d_.xd;
  const std::string layer = "layer " + std::to_string(l) + " ";
  cudaStream_t s = stream();
  const LayerScratch<T> sc = scratch();

  // F1 RMSNorm (after input_proj's pending bias, layer 0): f32 residual in, typed N out,
  // f32 rms saved
  const float* H = in.add.x_out ? in.add.x_out : in.src;
  norm_with_pending(in, p(off.norm_w), a.post_norm, a.rms);
  fc_.check("F1 rmsnorm", l, "post_norm", a.post_norm, R * dm);
  // F2 in_proj: P [R, 2di] = N·W_in, saved; x half = xb, z half = the gate input
  gemm_.forward<T, T>(layer + "in_proj", a.post_norm, dm, w(off.in_proj_w), a.proj, 2 * di,
                      R, dm, 2 * di);
  fc_.check("F2 in_proj", l, "in_proj_out", a.proj, R * 2 * di);
  // F4a causal conv + SiLU with carried state, xb read in place (F3's split is
  // only strides now)
  const int64_t n_state = B_ * di * d_.dc;
  if (a.conv_s0) {
    MC_CUDA_CHECK(cudaMemcpyAsync(a.conv_s0, conv_state, size_t(n_state) * sizeof(float),
                                  cudaMemcpyDeviceToDevice, s),
                  "layer " + std::to_string(l) + " save incoming conv state");
    conv_forward(l, a.proj, a.conv_s0, conv_state);
  } else {
    conv_forward(l, a.proj, conv_state, conv_state);
  }
  check_u("F4a conv1d_silu", l, dt_acc);
  fc_.check("F4a conv1d_silu", l, "conv_state", conv_state, n_state);
  // F4b x_proj: xdbl [R, xd] = U·W_x  (columns dt_in | B | C)
  gemm_.forward<T, T>(layer + "x_proj", sc.u, sc.ld_u, w(off.x_proj_w), a.xdbl, xd, R, di, xd);
  fc_.check("F4b x_proj", l, "xdbl", a.xdbl, R * xd);
  // F4c dt_proj + bias + softplus: Δ -> s1
  delta_forward(l, a.xdbl, dt_acc);
  // F4d selective scan; B and C are read in place from xdbl (row stride xd); the
  // state is carried in place (h0 = h_final)
  kern::scan::FwdParams<T> sp;
  sp.shape = scan_shape_;
  sp.route = route_;
  sp.exp = scan_exp_;
  sp.channels_per_thread = scan_cpt_;
  sp.layout = scan_layout_;
  sp.checkpoint_group = scan_group_;
  sp.delta = {sc.s1, di};
  sp.u = {sc.u, sc.ld_u};
  sp.Bm = {a.xdbl + dr, xd};
  sp.Cm = {a.xdbl + dr + ds, xd};
  sp.a_neg = a_neg(l);
  sp.D = p(off.d_param);
  sp.h0 = ssm_state;
  sp.h_final = ssm_state;
  sp.saved = a.scan_saved;
  sp.y = {a.y, di};
  ctx_->phases().mark(Phase::Scan, s);  // phase timing hook (phase_timer.hpp)
  kern::scan::forward<T>(sp, s);
  ctx_->phases().mark(Phase::Elementwise, s);
  fc_.check("F4d scan", l, "y", a.y, R * di);
  fc_.check("F4d scan", l, "ssm_state", ssm_state, B_ * di * ds);
  if (a.scan_saved)
    fc_.check("F4d scan", l, "scan_saved_states", a.scan_saved, int64_t(scan_saved_floats_));
  // F3 gate SiLU + F4e gating in one pass: gated = q(y·q(SiLU(z))) -> scratch s1 (Δ is
  // dead after the scan), z read in place from P
  kern::gate_fwd<T>(a.y, a.proj + di, 2 * di, R, di, sc.s1, di, s);
  fc_.check("F4e gating", l, "gated", sc.s1, R * di);
  // F5 out_proj
  gemm_.forward<T, T>(layer + "out_proj", sc.s1, di, w(off.out_proj_w), sc.o_dn, dm, R, di,
                      dm);
  fc_.check("F5 out_proj", l, "out_proj_out", sc.o_dn, R * dm);
  // F6 residual (f32 + typed -> f32), added by the next norm's pass
  kern::RmsNormPreAdd<T> residual;
  residual.residual = sc.o_dn;
  residual.x_out = H_next;
  return PendingAdd{H, residual, l};
}

template <class T>
void Pipeline<T>::forward() {
  if (!have_params_) throw std::logic_error("Model::forward called before set_params");
  const int64_t R = R_, dm = d_.dm;
  check_external_inputs_forward();
  // input: the typed copy of X, cast at upload (upload_input), saved for the input_proj
  // weight gradient
  // H0 = f32(q(X·W_ip + b_ip)): GEMM into the f32 residual, bias in f32, one rounding
  // (the bias and its rounding are added by the first RMSNorm forward: layer 0's F1)
  // (in hs(0), or in dH where the backward forms H0 again)
  PendingAdd pend = input_proj("input_proj", x_typed(), h0_forward());
  for (int l = 0; l < int(d_.L); ++l)
    pend = layer_forward(l, saved(l), pend, residual_after(l), conv_state(l, conv_state_.get()),
                         ssm_state(l, ssm_state_.get()), dt_acc_in_region());
  // norm_f on all positions
  norm_with_pending(pend, p(lay_.norm_f_w), out_typed(), rms_f_.get());
  fc_.check("norm_f", -1, "output", out_typed(), R * dm);
  have_forward_ = true;
  z_saved_ = true;
  have_d_input_ = false;
}

template <class T>
void Pipeline<T>::target_forward(const float* X, float* target) {
  if (!have_params_) throw std::logic_error("Model::target_forward called before set_params");
  ensure_target_buffers();
  TargetBuffers<T>& t = *tgt_;
  const int64_t R = R_, dm = d_.dm, mid = d_.mid;
  cudaStream_t s = stream();
  t.x.upload(X, t.x.size(), s);
  if (fc_.enabled()) {
    fc_.check("input", -1, "params", params_.get(), lay_.total);
    fc_.check("input", -1, "X", t.x.get(), R * mid);
  }
  // zero initial state, every call
  t.conv.zero(s);
  t.ssm.zero(s);
  const T* xt;
  if constexpr (std::is_same<T, float>::value) {
    xt = t.x.get();
  } else {
    kern::cast_from_f32<T>(t.x.get(), R * mid, t.x_typed.get(), s);
    xt = t.x_typed.get();
  }
  PendingAdd pend = input_proj("target input_proj", xt, t.cur.get());
  // nosave layers: no saved conv state or scan states; one layer's buffers reused
  const LayerActs<T> acts{t.rms.get(), t.post_norm.get(), t.proj.get(), nullptr,
                          t.xdbl.get(), nullptr,          t.y.get()};
  for (int l = 0; l < int(d_.L); ++l)
    pend = layer_forward(l, acts, pend, t.cur.get(), conv_state(l, t.conv.get()),
                         ssm_state(l, t.ssm.get()), t.acc.get());
  // norm_f on all rows (configured eps), then the last timestep of every sample
  norm_with_pending(pend, p(lay_.norm_f_w), t.out.get(), t.rms.get());
  fc_.check("norm_f", -1, "output", t.out.get(), R * dm);
  kern::gather_last_timestep<T>(t.out.get(), B_, T_, dm, t.target.get(), s);
  t.target.download(target, t.target.size(), s);
}

#define MC_INSTANTIATE_FORWARD(T)                                                       \
  template LayerActs<T> Pipeline<T>::saved(int);                                       \
  template LayerScratch<T> Pipeline<T>::scratch();                                     \
  template void Pipeline<T>::conv_forward(int, const T*, const float*, float*);        \
  template void Pipeline<T>::dt_proj_acc(int, const T*, float*);                      \
  template void Pipeline<T>::delta_forward(int, const T*, float*);                     \
  template void Pipeline<T>::fused_dt_softplus(int, const T*, const T*, T*);          \
  template typename Pipeline<T>::PendingAdd Pipeline<T>::layer_forward(                \
      int, const LayerActs<T>&, const PendingAdd&, float*, float*, float*, float*);    \
  template void Pipeline<T>::check_u(const char*, int, float*);                       \
  template void Pipeline<T>::norm_with_pending(const PendingAdd&, const float*, T*,    \
                                               float*);                                \
  template typename Pipeline<T>::PendingAdd Pipeline<T>::input_proj(const std::string&, \
                                                                    const T*, float*);   \
  template void Pipeline<T>::forward();                                                \
  template void Pipeline<T>::target_forward(const float*, float*);
MC_INSTANTIATE_FORWARD(float)
MC_INSTANTIATE_FORWARD(__nv_bfloat16)
MC_INSTANTIATE_FORWARD(__half)
#undef MC_INSTANTIATE_FORWARD

}  // namespace mc::gpu
