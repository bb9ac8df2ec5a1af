// backward.cpp — the backbone backward (docs/math.md: norm_f, B0–B8 per layer in
// reverse, input_proj) with optional initial-state gradients, optional upstream
// gradients on the final states (Model::set_final_state_grads) and d_input, one
// implementation over the storage type T. Parameter gradients accumulate into
// the f32 arena (zeroed at the start); every reduction is fixed-order (GEMMs
// with beta = 1, reduce_sum_axis0 / column_sum), no atomics.
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
#include "kernels/reduce.cuh"

namespace mc::gpu {

// B0: the typed copy q(dH) that the GEMMs read; the f32 dH itself is kept. The
// RMSNorm backward that last updated dH (norm_f's, or the layer above's B8) wrote
// the copy in the same pass (typed_dH_out).
template <class T>
const T* Pipeline<T>::typed_copy_of_dH() {
  if constexpr (std::is_same<T, float>::value) return dH_.get();
  else return dH_typed();
}

// Where an RMSNorm backward writes q(dH): the typed copy, or nowhere on the f32 path
// (the GEMMs read dH itself).
template <class T>
T* Pipeline<T>::typed_dH_out() {
  if constexpr (std::is_same<T, float>::value) return nullptr;
  else return dH_typed();
}

// One layer, B0–B8. dH [R, dm] f32: in ∂L/∂H_{l+1}, out ∂L/∂H_l. The layer's
// u, Δ and gated output are first recomputed from the saved in_proj output,
// incoming conv state, xdbl and scan output with the forward's own kernels
// (bit-identical values), and B4 forms the dt_proj GEMM again for Δraw; the
// lifetimes of the scratch buffers are tabled in pipeline.hpp.
template <class T>
void Pipeline<T>::layer_backward(int l, float* dH) {
  const LayerParamOffsets& off = lay_.layers[size_t(l)];
  const LayerActs<T> a = saved(l);
  const LayerScratch<T> sc = scratch();
  const int64_t R = R_, dm = d_.dm, di = d_.di, ds = d_.ds, dr = d_.dr, xd = d_.xd;
  const std::string layer = "layer " + std::to_string(l) + " ";
  cudaStream_t s = stream();
  T* U = sc.u;            // recomputed u (dP's x half, row stride 2di): -> B3, B5
  T* gated = sc.dP + di;  // recomputed gated output (dP's z half, row stride 2di): -> B1
  T* dG = sc.s1;          // B1 -> B2
  T* dY = a.y;            // B2, written over the saved y (B2 is its last reader) -> B3
  T* delta = sc.s1;       // Δ recomputed after B2 (dG is dead): -> B3
  // B3's outputs: dΔ written over Δ and du over dy by the checkpointed scan (scan.hpp
  // allows both there); the cross-check routes need buffers of their own
  const bool scan_in_place = route_ == ScanRoute::Checkpointed;
  T* d_delta = scan_in_place ? sc.s1 : sc.du;  // B3 -> B4
  T* dU = scan_in_place ? a.y : sc.s3;         // B3 -> B6
  // the dt_proj accumulator of the Δ recompute and of B4, in the shared region (it holds
  // nothing from B1's reads of dH_typed to B7)
  float* dt_acc = dt_acc_in_region();
  T* d_draw = sc.s1;      // B4: dΔraw (over dΔ on the checkpointed route, elementwise)
  T* dU_x = sc.s1;        // B5 -> B6 (written once B4's GEMMs have read dΔraw)
  T* dP = sc.dP;          // [R, 2di] = [dxb | dz]: dz from B2, dxb from B6, read by B7
  T* dN = sc.o_dn;        // B7 -> B8
  T* dxdbl = dxdbl_.get();

  // Recompute: F4a (no state written), F4e into dP's z half (free until B2 writes dz
  // there); F4c (Δ) after B2, where s1 is free
  conv_forward(l, a.proj, a.conv_s0, /*final_state=*/nullptr);
  kern::gate_fwd<T>(a.y, a.proj + di, 2 * di, R, di, gated, 2 * di, s);
  // B0
  const T* dHt = typed_copy_of_dH();
  fc_.check("B0 typed dH", l, "d_H_typed", dHt, R * dm);
  // B1 out_proj: dG = dH'·W_outᵀ, dW_out += Gᵀ·dH'
  gemm_.input_grad<T, T>(layer + "out_proj dX", dHt, w(off.out_proj_w), dG, R, di, dm);
  gemm_.weight_grad<T>(layer + "out_proj dW", gated, 2 * di, dHt, g(off.out_proj_w), R, di, dm);
  fc_.check("B1 out_proj", l, "d_gated", dG, R * di);
  // B2 gating, gs recomputed from z (read in place from P); dz written straight
  // into the z half of dP (over gated, dead since B1), dY over y
  kern::gate_bwd<T>(dG, a.y, a.proj + di, 2 * di, R, di, dY, dP + di, 2 * di, s);
  fc_.check("B2 gating", l, "d_y", dY, R * di);
  // (dz sits in dP's z half: it is checked with dxb after B6)
  // F4c again: Δ into s1, its dt_proj accumulator in the shared region (not dP, whose z
  // half now holds dz); the same kernels and inputs as the forward, so the same bits
  delta_forward(l, a.xdbl, dt_acc);
  // B3 scan BPTT; dB, dC summed over d in f32 and rounded once, straight into
  // xdbl's gradient columns; dD, dA_log accumulate into the arena
  float* dh0 = opt_.state_grads ? ssm_state(l, d_ssm0_.get()) : nullptr;
  const float* dh_final = have_final_grads_ ? ssm_state(l, d_ssm_T_.get()) : nullptr;
  kern::scan::BwdParams<T> sp;
  sp.shape = scan_shape_;
  sp.route = route_;
  sp.exp = scan_exp_;
  sp.channels_per_thread = scan_cpt_;
  sp.layout = scan_layout_;
  sp.checkpoint_group = scan_group_;
  sp.delta = {delta, di};
  sp.u = {U, sc.ld_u};
  sp.Bm = {a.xdbl + dr, xd};
  sp.Cm = {a.xdbl + dr + ds, xd};
  sp.a_neg = a_neg(l);
  sp.D = p(off.d_param);
  sp.saved = a.scan_saved;
  sp.dy = {dY, di};
  sp.d_delta = {d_delta, di};
  sp.du = {dU, di};
  if (route_ == ScanRoute::Checkpointed) {  // rounded once, in place in d_xdbl
    sp.dB_typed = {dxdbl + dr, xd};
    sp.dC_typed = {dxdbl + dr + ds, xd};
  } else {  // the cross-check routes write contiguous f32 sums (assembled at B4)
    sp.dB = {dB_.get(), ds};
    sp.dC = {dC_.get(), ds};
  }
  sp.dD = g(off.d_param);
  sp.dA_log = g(off.a_log);
  sp.dh_final = dh_final;
  sp.dh0 = dh0;
  sp.workspace = bwd_region_.get();  // o_dn and dH_typed hold nothing during B3
  sp.workspace_bytes = bwd_region_.bytes();
  sp.partial_budget = scan_partial_budget_;  // the same value the workspace was sized with
  ctx_->phases().mark(Phase::Scan, s);  // phase timing hook (phase_timer.hpp)
  kern::scan::backward<T>(sp, s);
  ctx_->phases().mark(Phase::Elementwise, s);
  fc_.check("B3 scan", l, "d_delta", d_delta, R * di);
  fc_.check("B3 scan", l, "d_u", dU, R * di);
  // B4 softplus + dt_proj (dt_in read in place from xdbl, row stride xd); the
  // dt_in gradient is copied into the first dr columns of d_xdbl. Δraw is not kept:
  // the dt_proj GEMM runs again (F4c's call, the same bits) into the shared region,
  // which holds nothing from the end of B3 to B7, and the softplus backward forms
  // q(acc + b_dt) as F4c did.
  if (fused_dt_) {  // on the tensor-core tier acc stays on chip
    fused_dt_softplus(l, a.xdbl, d_delta, d_draw);
  } else {
    dt_proj_acc(l, a.xdbl, dt_acc);
    kern::softplus_bias_bwd<T>(dt_acc, p(off.dt_proj_b), R, di, d_delta, d_draw, s);
  }
  fc_.check("B4 softplus", l, "d_delta_raw", d_draw, R * di);
  gemm_.input_grad<T, T>(layer + "dt_proj dX", d_draw, w(off.dt_proj_w), d_dt_in_.get(), R, dr,
                         di);
  gemm_.weight_grad<T>(layer + "dt_proj dW", a.xdbl, xd, d_draw, g(off.dt_proj_w), R, dr, di);
  kern::column_sum<T>(d_draw, R, di, di, g(off.dt_proj_b), /*accumulate=*/true,
                      reduce_scratch_.get(), s);
  if (route_ == ScanRoute::Checkpointed)
    MC_CUDA_CHECK(cudaMemcpy2DAsync(dxdbl, size_t(xd) * sizeof(T), d_dt_in_.get(),
                                    size_t(dr) * sizeof(T), size_t(dr) * sizeof(T), size_t(R),
                                    cudaMemcpyDeviceToDevice, s),
                  layer + "d_dt_in -> d_xdbl");
  else
    kern::assemble_dxdbl<T>(d_dt_in_.get(), dB_.get(), dC_.get(), R, dr, ds, dxdbl, s);
  fc_.check("B4 assemble", l, "d_xdbl", dxdbl, R * xd);
  // B5 x_proj (its u gradient dU_x; the total q(dU_ssm + dU_x) is formed by B6 as it reads
  // the two and never stored, so the finite checks see its parts here and at B3, and a sum
  // that overflows the storage type in B6's output)
  gemm_.input_grad<T, T>(layer + "x_proj dX", dxdbl, w(off.x_proj_w), dU_x, R, di, xd);
  gemm_.weight_grad<T>(layer + "x_proj dW", U, sc.ld_u, dxdbl, g(off.x_proj_w), R, di, xd);
  fc_.check("B5 x_proj", l, "d_u_xproj", dU_x, R * di);
  // B6 SiLU + conv (+ gradient w.r.t. the incoming conv state): the upstream gradient
  // is dU = q(dU_ssm + dU_x), summed as the conv reads it (never stored); the windows
  // and the pre-activation are rebuilt from xb (in place in P) and the saved state;
  // dxb written straight into the x half of dP
  kern::ConvBwdParams<T> cp;
  cp.du = dU;
  cp.du_add = dU_x;
  cp.xb = a.proj;
  cp.ld_x = 2 * di;
  cp.s0 = a.conv_s0;
  cp.bias = p(off.conv_b);
  cp.w = p(off.conv_w);
  cp.B = B_;
  cp.seq_len = T_;
  cp.di = di;
  cp.dc = d_.dc;
  cp.dxb = dP;
  cp.ld_dx = 2 * di;
  cp.dw = g(off.conv_w);
  cp.dbias = g(off.conv_b);
  cp.d_state0 = opt_.state_grads ? conv_state(l, d_conv0_.get()) : nullptr;
  cp.d_state_T = have_final_grads_ ? conv_state(l, d_conv_T_.get()) : nullptr;
  cp.scratch = conv_scratch_in_region_ ? reinterpret_cast<float*>(bwd_region_.get())
                                        : reduce_scratch_.get();  // (pipeline.hpp)
  kern::conv1d_silu_bwd<T>(cp, s);
  fc_.check("B6 conv1d_silu", l, "d_in_proj_out", dP, R * 2 * di);  // [dxb | dz]
  // F1 again for B7: post_norm N = q(RMSNorm(H_l)) into its slot (not saved, pipeline.hpp),
  // from the layer input the forward saved, by the same kernel arithmetic as F1 (the rms
  // it recomputes goes to scratch; B8 reads the saved one). Layer 0 with H0 not saved:
  // input_proj's GEMM on the saved typed input into the y slot (free since B6), then the
  // very norm call of the forward's layer-0 F1, bias and rounding pending: the same H0
  // and N bits.
  const bool rebuild_h0 = l == 0 && h0_recomputed_;
  const float* H = rebuild_h0 ? h0_rebuilt() : hs(l);
  if (rebuild_h0) {
    norm_with_pending(input_proj("B7 input_proj rebuilt", x_typed(), h0_rebuilt()), p(off.norm_w),
                      a.post_norm, reduce_scratch_.get());
  } else {
    kern::rmsnorm_fwd<T>(H, p(off.norm_w), R, dm, d_.eps, a.post_norm, reduce_scratch_.get(), s);
  }
  fc_.check("B7 rmsnorm rebuilt", l, "post_norm", a.post_norm, R * dm);
  // B7 in_proj: dN = dP·W_inᵀ, dW_in += Nᵀ·dP
  gemm_.input_grad<T, T>(layer + "in_proj dX", dP, w(off.in_proj_w), dN, R, dm, 2 * di);
  gemm_.weight_grad<T>(layer + "in_proj dW", a.post_norm, dm, dP, g(off.in_proj_w), R, dm,
                       2 * di);
  fc_.check("B7 in_proj", l, "d_post_norm", dN, R * dm);
  // B8 RMSNorm backward (typed dy, f32 x) with the residual: dH += dHn (f32)
  kern::rmsnorm_bwd_residual<T>(dN, H, p(off.norm_w), a.rms, R, dm, dH, g(off.norm_w),
                                reduce_scratch_.get(), s, typed_dH_out());
  fc_.check("B8 rmsnorm", l, "d_hidden", dH, R * dm);
}

template <class T>
void Pipeline<T>::backward(bool want_d_input) {
  if (!have_forward_)
    throw std::logic_error(
        "Model::backward called without a forward of the current input (no forward yet, or "
        "an input uploaded since the last one): run forward first");
  if (!z_saved_)  // pipeline.hpp, "shared region"
    throw std::logic_error(
        "Model::backward called twice after one forward: the norm_f input the forward saved "
        "shares its memory with the scan backward's workspace and is gone; run forward again");
  const int64_t R = R_, dm = d_.dm, mid = d_.mid;
  cudaStream_t s = stream();
  fc_.check("input", -1, "d_out", d_out_.get(), R * dm);
  grads_.zero(s);
  // norm_f backward, pure f32: dH := ∂L/∂Z (and its typed copy, B0 of the last layer)
  kern::rmsnorm_bwd<float, T>(d_out_.get(), norm_f_input(), p(lay_.norm_f_w), rms_f_.get(), R,
                              dm, dH_.get(), g(lay_.norm_f_w), reduce_scratch_.get(), s,
                              typed_dH_out());
  fc_.check("norm_f backward", -1, "d_hidden", dH_.get(), R * dm);
  z_saved_ = false;  // the first B3 writes its workspace over Z
  for (int l = int(d_.L) - 1; l >= 0; --l) layer_backward(l, dH_.get());
  // input_proj from q(∂L/∂H0): dW, db (column sums of the typed copy), optional dX
  const T* dHt = typed_copy_of_dH();
  gemm_.weight_grad<T>("input_proj dW", x_typed(), mid, dHt, g(lay_.input_proj_w), R, mid, dm);
  kern::column_sum<T>(dHt, R, dm, dm, g(lay_.input_proj_b), /*accumulate=*/true,
                      reduce_scratch_.get(), s);
  have_d_input_ = false;
  if (want_d_input) {
    if (d_input_.empty()) {
      d_input_.allocate(size_t(R * mid), "d_input");
      bytes_ += int64_t(d_input_.bytes());
    }
    gemm_.input_grad<T, float>("input_proj dX", dHt, w(lay_.input_proj_w), d_input_.get(), R, mid,
                               dm);
    fc_.check("input_proj backward", -1, "d_input", d_input_.get(), R * mid);
    have_d_input_ = true;
  }
  fc_.check("backward", -1, "grads", grads_.get(), lay_.total);
}

#define MC_INSTANTIATE_BACKWARD(T)                                   \
  template const T* Pipeline<T>::typed_copy_of_dH();                \
  template T* Pipeline<T>::typed_dH_out();                          \
  template void Pipeline<T>::layer_backward(int, float*);           \
  template void Pipeline<T>::backward(bool);
MC_INSTANTIATE_BACKWARD(float)
MC_INSTANTIATE_BACKWARD(__nv_bfloat16)
MC_INSTANTIATE_BACKWARD(__half)
#undef MC_INSTANTIATE_BACKWARD

}  // namespace mc::gpu
