// model.cpp — the CPU oracle's Mamba-1 layer (F1–F6 / B0–B8), backbone
// (input_proj, L layers, norm_f) and target forward (docs/math.md),
// composed from the steps of steps.cpp and templated on the scalar S (float,
// double and the Monte Carlo arithmetic scalar Mca instantiated at the end).
//
// Mixed-precision rounding points. With Storage{F32} none of
// them rounds (the oracle); with BF16/F16 each applies st.q (RN to the typed
// dtype) where the mixed GPU path stores a typed tensor:
//   forward  backbone  H0 = q(X·W_ip + b_ip)          (then used as the f32 residual)
//            F1        post_norm = q(RMSNorm(H))       (residual H and rms stay in S)
//            F2        P = q(N·W_in)                   (-> xb, z)
//            F3        gs = q(SiLU(z))
//            F4a       pc = q(pc), u = q(SiLU(pc))     (SiLU of the UNROUNDED pc; windows,
//                                                       conv state stay in S)
//            F4b       xdbl = q(U·W_x)
//            F4c       delta_raw = q(dt_in·W_dt + b_dt)  (bias added in S to the S
//                                                          accumulator, rounded once)
//                      delta = q(softplus(delta_raw))
//            F4d       y = q(scan(...))                 (h, h_saved, a_neg stay in S)
//            F4e       gated = q(y·gs)
//            F5        O = q(G·W_out)                   (before the residual add in S)
//            backbone  out = q(RMSNorm_f(Z))            (Z, rms_f stay in S)
//   backward B0        dH'_typed = q(dH') for the GEMMs (dH' itself stays in S)
//            B1        d_gated = q(dH'_typed·W_outᵀ)
//            B2        d_y = q(·), dz = q(·)
//            B3        d_delta = q(·), d_u = q(·); dB, dC reduced over d from
//                      UNROUNDED partials, kept in S; dD, dA_log, dh0 in S
//            B4        d_delta_raw = q(·), d_dt_in = q(·);
//                      d_xdbl = [q(d_dt_in) | q(dB) | q(dC)]
//            B5        d_u_xproj = q(d_xdbl·W_xᵀ), d_u = q(d_u + d_u_xproj)
//            B6        d_x_branch = q(·)                (d_conv0 in S)
//            B7        dP = [dxb | dz] (already typed), d_norm = q(dP·W_inᵀ)
//            B8        RMSNorm backward from d_norm in S; dH = dH' + dHn in S
//            backbone  norm_f backward in S; input_proj GEMMs from q(dH0)
// Everything else — the residual stream, states, h_saved, windows, rms, all
// parameter gradients — stays in S. The input X and the GEMM weights are
// quantised once by the CALLER, not here.
#include "reference_cpu/model.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

#include "reference_cpu/mca_scalar.hpp"
#include "reference_cpu/steps.hpp"

namespace mc::ref {

namespace {

template <class S>
void require_size(const char* what, const std::vector<S>& v, int64_t expected) {
  if (int64_t(v.size()) == expected) return;
  std::ostringstream os;
  os << what << " has " << v.size() << " elements, expected " << expected;
  throw std::invalid_argument(os.str());
}

template <class S>
std::vector<S> zeros(int64_t n) {
  return std::vector<S>(size_t(n), S(0));
}

// Allocates every saved-activation buffer of one layer for R = B*T rows.
template <class S>
void allocate(LayerActivations<S>& a, const Dims& d, int64_t B, int64_t T) {
  const int64_t R = B * T;
  a.residual.resize(size_t(R * d.dm));
  a.rms.resize(static_cast<size_t>(R));
  a.post_norm.resize(size_t(R * d.dm));
  a.xb.resize(size_t(R * d.di));
  a.z.resize(size_t(R * d.di));
  a.gs.resize(size_t(R * d.di));
  a.windows.resize(size_t(R * d.di * d.dc));
  a.pc.resize(size_t(R * d.di));
  a.u.resize(size_t(R * d.di));
  a.xdbl.resize(size_t(R * d.xd));
  a.delta_raw.resize(size_t(R * d.di));
  a.delta.resize(size_t(R * d.di));
  a.h_saved.resize(size_t(B * (T + 1) * d.di * d.ds));
  a.y.resize(size_t(R * d.di));
  a.gated.resize(size_t(R * d.di));
}

// The saved activations must come from a forward with this (B, T).
template <class S>
void check_saved_shape(const LayerActivations<S>& a, const Dims& d, int64_t B, int64_t T) {
  const int64_t R = B * T;
  require_size("act.residual", a.residual, R * d.dm);
  require_size("act.windows", a.windows, R * d.di * d.dc);
  require_size("act.xdbl", a.xdbl, R * d.xd);
  require_size("act.h_saved", a.h_saved, B * (T + 1) * d.di * d.ds);
  require_size("act.gated", a.gated, R * d.di);
}

// Columns dt_in | B | C of xdbl [R, xd] as contiguous [R, dr], [R, ds], [R, ds].
template <class S>
struct XdblColumns {
  std::vector<S> dt_in, Bc, Cc;
  XdblColumns(const Dims& d, int64_t R, const S* xdbl)
      : dt_in(size_t(R * d.dr)), Bc(size_t(R * d.ds)), Cc(size_t(R * d.ds)) {
    gather_cols(xdbl, R, d.xd, 0, d.dr, dt_in.data());
    gather_cols(xdbl, R, d.xd, d.dr, d.ds, Bc.data());
    gather_cols(xdbl, R, d.xd, d.dr + d.ds, d.ds, Cc.data());
  }
};

template <class S>
std::vector<S> a_neg_of(const Dims& d, const S* params, const LayerParamOffsets& off) {
  std::vector<S> a(size_t(d.di * d.ds));
  exp_negate(params + off.a_log, d.di * d.ds, a.data());
  return a;
}

}  // namespace

// ------------------------------------------------------------ layer forward ---

// H [R, dm] -> H_out [R, dm]; conv_state [B, di, dc], ssm_state [B, di, ds] in/out.
template <class S>
void layer_forward(const Dims& d, const S* params, const LayerParamOffsets& off, int64_t B,
                   int64_t T, const S* H, S* conv_state, S* ssm_state, S* H_out,
                   LayerActivations<S>* act, const Storage& st) {
  validate_runtime(d, B, T);
  if (H == H_out) throw std::invalid_argument("layer_forward: H_out must not alias H");
  LayerActivations<S> local;
  LayerActivations<S>& a = act ? *act : local;
  allocate(a, d, B, T);
  const int64_t R = B * T, dm = d.dm, di = d.di;
  const S* p = params;

  std::copy(H, H + R * dm, a.residual.begin());
  // F1 RMSNorm
  rmsnorm_fwd(H, p + off.norm_w, R, dm, d.eps, a.post_norm.data(), a.rms.data());
  st.q_inplace(a.post_norm.data(), R * dm);
  // F2 in_proj, F3 split + gate SiLU
  std::vector<S> P(size_t(R * 2 * di));
  linear_fwd(a.post_norm.data(), p + off.in_proj_w, static_cast<const S*>(nullptr), R, dm, 2 * di,
             P.data());
  st.q_inplace(P.data(), R * 2 * di);
  split_gate_silu_fwd(P.data(), R, di, a.xb.data(), a.z.data(), a.gs.data());
  st.q_inplace(a.gs.data(), R * di);
  // F4a conv + SiLU
  conv1d_silu_fwd(a.xb.data(), p + off.conv_w, p + off.conv_b, B, T, di, d.dc, conv_state,
                  a.windows.data(), a.pc.data(), a.u.data());
  st.q_inplace(a.pc.data(), R * di);
  st.q_inplace(a.u.data(), R * di);
  // F4b x_proj
  linear_fwd(a.u.data(), p + off.x_proj_w, static_cast<const S*>(nullptr), R, di, d.xd,
             a.xdbl.data());
  st.q_inplace(a.xdbl.data(), R * d.xd);
  const XdblColumns<S> cols(d, R, a.xdbl.data());
  // F4c dt_proj (+ f32 bias, one rounding) + softplus
  linear_fwd(cols.dt_in.data(), p + off.dt_proj_w, p + off.dt_proj_b, R, d.dr, di,
             a.delta_raw.data());
  st.q_inplace(a.delta_raw.data(), R * di);
  softplus_fwd(a.delta_raw.data(), R * di, a.delta.data());
  st.q_inplace(a.delta.data(), R * di);
  // F4d selective scan
  const std::vector<S> a_neg = a_neg_of(d, p, off);
  selective_scan_fwd(a.delta.data(), a.u.data(), cols.Bc.data(), cols.Cc.data(), a_neg.data(),
                     p + off.d_param, B, T, di, d.ds, ssm_state, a.h_saved.data(), a.y.data());
  st.q_inplace(a.y.data(), R * di);
  // F4e gating
  gating_fwd(a.y.data(), a.gs.data(), R * di, a.gated.data());
  st.q_inplace(a.gated.data(), R * di);
  // F5 out_proj, F6 residual
  std::vector<S> O(size_t(R * dm));
  linear_fwd(a.gated.data(), p + off.out_proj_w, static_cast<const S*>(nullptr), R, di, dm,
             O.data());
  st.q_inplace(O.data(), R * dm);
  residual_add(H, O.data(), R * dm, H_out);
}

// ----------------------------------------------------------- layer backward ---

// dH [R, dm] in/out; grads [total] +=; d_conv_T/d_ssm_T in (optional);
// d_conv0 [B, di, dc], d_ssm0 [B, di, ds] out (optional).
template <class S>
void layer_backward_chained(const Dims& d, const S* params, const LayerParamOffsets& off,
                            int64_t B, int64_t T, const LayerActivations<S>& a, S* dH, S* grads,
                            const S* d_conv_T, const S* d_ssm_T, S* d_conv0, S* d_ssm0,
                            const Storage& st) {
  validate_runtime(d, B, T);
  check_saved_shape(a, d, B, T);
  if (!grads) throw std::invalid_argument("layer_backward: grads must not be null");
  const int64_t R = B * T, dm = d.dm, di = d.di, ds = d.ds, dr = d.dr, xd = d.xd;
  const S* p = params;
  S* g = grads;

  // B0 typed copy of dH' for the GEMMs
  std::vector<S> dHq(dH, dH + R * dm);
  st.q_inplace(dHq.data(), R * dm);
  // B1 out_proj
  std::vector<S> dG(size_t(R * di));
  linear_bwd_dx(dHq.data(), p + off.out_proj_w, R, di, dm, dG.data());
  st.q_inplace(dG.data(), R * di);
  linear_bwd_dw(a.gated.data(), dHq.data(), R, di, dm, g + off.out_proj_w);
  // B2 gating
  std::vector<S> dY(size_t(R * di)), dz(size_t(R * di));
  gating_bwd(dG.data(), a.y.data(), a.z.data(), a.gs.data(), R * di, dY.data(), dz.data());
  st.q_inplace(dY.data(), R * di);
  st.q_inplace(dz.data(), R * di);
  // B3 scan BPTT + reductions
  const XdblColumns<S> cols(d, R, a.xdbl.data());
  const std::vector<S> a_neg = a_neg_of(d, p, off);
  std::vector<S> d_delta(size_t(R * di)), dU(size_t(R * di));
  std::vector<S> dBc(size_t(R * ds)), dCc(size_t(R * ds));
  selective_scan_bwd_chained(a.delta.data(), a.u.data(), cols.Bc.data(), cols.Cc.data(),
                             a_neg.data(), p + off.d_param, a.h_saved.data(), dY.data(), d_ssm_T,
                             B, T, di, ds, d_delta.data(), dU.data(), dBc.data(), dCc.data(),
                             g + off.d_param, g + off.a_log, d_ssm0);
  st.q_inplace(d_delta.data(), R * di);
  st.q_inplace(dU.data(), R * di);
  // B4 softplus + dt_proj; assemble d_xdbl = [d_dt_in | dB | dC]
  std::vector<S> d_draw(size_t(R * di)), d_dt_in(size_t(R * dr));
  softplus_bwd(a.delta_raw.data(), d_delta.data(), R * di, d_draw.data());
  st.q_inplace(d_draw.data(), R * di);
  linear_bwd_dx(d_draw.data(), p + off.dt_proj_w, R, dr, di, d_dt_in.data());
  st.q_inplace(d_dt_in.data(), R * dr);
  linear_bwd_dw(cols.dt_in.data(), d_draw.data(), R, dr, di, g + off.dt_proj_w);
  linear_bwd_db(d_draw.data(), R, di, g + off.dt_proj_b);
  std::vector<S> d_xdbl = zeros<S>(R * xd);
  scatter_add_cols(d_dt_in.data(), R, xd, 0, dr, d_xdbl.data());
  scatter_add_cols(dBc.data(), R, xd, dr, ds, d_xdbl.data());
  scatter_add_cols(dCc.data(), R, xd, dr + ds, ds, d_xdbl.data());
  st.q_inplace(d_xdbl.data(), R * xd);
  // B5 x_proj; dU = dU_ssm + dU_x
  std::vector<S> dU_x(size_t(R * di));
  linear_bwd_dx(d_xdbl.data(), p + off.x_proj_w, R, di, xd, dU_x.data());
  st.q_inplace(dU_x.data(), R * di);
  linear_bwd_dw(a.u.data(), d_xdbl.data(), R, di, xd, g + off.x_proj_w);
  residual_add(dU.data(), dU_x.data(), R * di, dU.data());
  st.q_inplace(dU.data(), R * di);
  // B6 SiLU + conv
  std::vector<S> dxb(size_t(R * di));
  conv1d_silu_bwd_chained(dU.data(), a.pc.data(), a.windows.data(), p + off.conv_w, d_conv_T, B,
                          T, di, d.dc, dxb.data(), g + off.conv_w, g + off.conv_b, d_conv0);
  st.q_inplace(dxb.data(), R * di);
  // B7 in_proj
  std::vector<S> dP(size_t(R * 2 * di)), dN(size_t(R * dm));
  concat_halves(dxb.data(), dz.data(), R, di, dP.data());
  linear_bwd_dx(dP.data(), p + off.in_proj_w, R, dm, 2 * di, dN.data());
  st.q_inplace(dN.data(), R * dm);
  linear_bwd_dw(a.post_norm.data(), dP.data(), R, dm, 2 * di, g + off.in_proj_w);
  // B8 RMSNorm + residual
  std::vector<S> dHn(size_t(R * dm));
  rmsnorm_bwd(dN.data(), a.residual.data(), p + off.norm_w, a.rms.data(), R, dm, dHn.data(),
              g + off.norm_w);
  residual_add(dH, dHn.data(), R * dm, dH);
}

template <class S>
void layer_backward(const Dims& d, const S* params, const LayerParamOffsets& off, int64_t B,
                    int64_t T, const LayerActivations<S>& act, S* dH, S* grads, S* d_conv0,
                    S* d_ssm0, const Storage& st) {
  layer_backward_chained<S>(d, params, off, B, T, act, dH, grads, nullptr, nullptr, d_conv0,
                            d_ssm0, st);
}

// --------------------------------------------------------------- backbone ---

// X [R, mid] -> out [R, dm]; state conv [L, B, di, dc], ssm [L, B, di, ds] in/out.
template <class S>
void backbone_forward(const ParamLayout& lay, const S* params, int64_t B, int64_t T, const S* X,
                      RecurrentState<S>& state, S* out, BackboneActivations<S>* act,
                      const Storage& st) {
  const Dims& d = lay.dims;
  validate_runtime(d, B, T);
  require_size("state.conv", state.conv, d.L * B * d.di * d.dc);
  require_size("state.ssm", state.ssm, d.L * B * d.di * d.ds);
  const int64_t R = B * T, dm = d.dm;
  if (act) {
    act->B = B;
    act->T = T;
    act->x.assign(X, X + R * d.mid);
    act->layers.resize(size_t(d.L));
  }
  std::vector<S> H(size_t(R * dm)), Hn(size_t(R * dm));
  linear_fwd(X, params + lay.input_proj_w, params + lay.input_proj_b, R, d.mid, dm, H.data());
  st.q_inplace(H.data(), R * dm);
  for (int64_t l = 0; l < d.L; ++l) {
    layer_forward(d, params, lay.layers[size_t(l)], B, T, H.data(),
                  state.conv.data() + l * B * d.di * d.dc, state.ssm.data() + l * B * d.di * d.ds,
                  Hn.data(), act ? &act->layers[size_t(l)] : nullptr, st);
    H.swap(Hn);
  }
  std::vector<S> rms(static_cast<size_t>(R));
  rmsnorm_fwd(H.data(), params + lay.norm_f_w, R, dm, d.eps, out, rms.data());
  st.q_inplace(out, R * dm);
  if (act) {
    act->z = std::move(H);
    act->rms_f = std::move(rms);
  }
}

// d_out [R, dm] -> g.params (+=), g.dX [R, mid], g.d_conv0 [L, B, di, dc], g.d_ssm0 [L, B, di, ds].
template <class S>
void backbone_backward(const ParamLayout& lay, const S* params, const BackboneActivations<S>& act,
                       const S* d_out, const FinalStateGrads<S>& fin,
                       const BackboneGradOutputs<S>& g, const Storage& st) {
  const Dims& d = lay.dims;
  const int64_t B = act.B, T = act.T;
  validate_runtime(d, B, T);
  const int64_t R = B * T, dm = d.dm;
  if (int64_t(act.layers.size()) != d.L)
    throw std::invalid_argument("backbone_backward: act holds " + std::to_string(act.layers.size()) +
                                " layers, expected " + std::to_string(d.L));
  require_size("act.z", act.z, R * dm);
  require_size("act.x", act.x, R * d.mid);
  std::vector<S> scratch;
  S* gp = g.params;
  if (!gp) {
    scratch = zeros<S>(lay.total);
    gp = scratch.data();
  }
  const int64_t conv_per_layer = B * d.di * d.dc, ssm_per_layer = B * d.di * d.ds;
  auto slice = [](auto* base, int64_t l, int64_t n) { return base ? base + l * n : nullptr; };

  // norm_f backward (pure S)
  std::vector<S> dH(size_t(R * dm));
  rmsnorm_bwd(d_out, act.z.data(), params + lay.norm_f_w, act.rms_f.data(), R, dm, dH.data(),
              gp + lay.norm_f_w);
  for (int64_t l = d.L - 1; l >= 0; --l) {
    layer_backward_chained(d, params, lay.layers[size_t(l)], B, T, act.layers[size_t(l)],
                           dH.data(), gp, slice(fin.conv, l, conv_per_layer),
                           slice(fin.ssm, l, ssm_per_layer), slice(g.d_conv0, l, conv_per_layer),
                           slice(g.d_ssm0, l, ssm_per_layer), st);
  }
  // input_proj backward from the typed copy of ∂L/∂H0
  st.q_inplace(dH.data(), R * dm);
  linear_bwd_dw(act.x.data(), dH.data(), R, d.mid, dm, gp + lay.input_proj_w);
  linear_bwd_db(dH.data(), R, dm, gp + lay.input_proj_b);
  if (g.dX) linear_bwd_dx(dH.data(), params + lay.input_proj_w, R, d.mid, dm, g.dX);
}

template <class S>
void backbone_backward(const ParamLayout& lay, const S* params, const BackboneActivations<S>& act,
                       const S* d_out, const BackboneGradOutputs<S>& g, const Storage& st) {
  backbone_backward<S>(lay, params, act, d_out, FinalStateGrads<S>{}, g, st);
}

// X [R, mid] -> target [B, dm] = out[b, T-1, :], from zero initial state, nothing saved.
template <class S>
void target_forward(const ParamLayout& lay, const S* params, int64_t B, int64_t T, const S* X,
                    S* target, const Storage& st) {
  const Dims& d = lay.dims;
  validate_runtime(d, B, T);
  RecurrentState<S> state(d, B);
  std::vector<S> out(size_t(B * T * d.dm));
  backbone_forward(lay, params, B, T, X, state, out.data(), static_cast<BackboneActivations<S>*>(nullptr),
                   st);
  for (int64_t b = 0; b < B; ++b)
    std::copy(out.begin() + (b * T + T - 1) * d.dm, out.begin() + (b * T + T) * d.dm,
              target + b * d.dm);
}

// ------------------------------------------------- explicit instantiations ---

#define MC_INSTANTIATE_MODEL(S)                                                                   \
  template void layer_forward<S>(const Dims&, const S*, const LayerParamOffsets&, int64_t,        \
                                 int64_t, const S*, S*, S*, S*, LayerActivations<S>*,             \
                                 const Storage&);                                                 \
  template void layer_backward<S>(const Dims&, const S*, const LayerParamOffsets&, int64_t,       \
                                  int64_t, const LayerActivations<S>&, S*, S*, S*, S*,            \
                                  const Storage&);                                                \
  template void layer_backward_chained<S>(const Dims&, const S*, const LayerParamOffsets&,        \
                                          int64_t, int64_t, const LayerActivations<S>&, S*, S*,   \
                                          const S*, const S*, S*, S*, const Storage&);            \
  template void backbone_forward<S>(const ParamLayout&, const S*, int64_t, int64_t, const S*,     \
                                    RecurrentState<S>&, S*, BackboneActivations<S>*,              \
                                    const Storage&);                                              \
  template void backbone_backward<S>(const ParamLayout&, const S*, const BackboneActivations<S>&, \
                                     const S*, const BackboneGradOutputs<S>&, const Storage&);    \
  template void backbone_backward<S>(const ParamLayout&, const S*, const BackboneActivations<S>&, \
                                     const S*, const FinalStateGrads<S>&,                         \
                                     const BackboneGradOutputs<S>&, const Storage&);              \
  template void target_forward<S>(const ParamLayout&, const S*, int64_t, int64_t, const S*, S*,   \
                                  const Storage&);

MC_INSTANTIATE_MODEL(float)
MC_INSTANTIATE_MODEL(double)
MC_INSTANTIATE_MODEL(Mca)  // Monte Carlo arithmetic (mca_scalar.hpp)
#undef MC_INSTANTIATE_MODEL

}  // namespace mc::ref
