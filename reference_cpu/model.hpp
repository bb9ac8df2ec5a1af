// model.hpp — the Mamba-1 layer (F1–F6, B1–B8) and backbone (input_proj,
// L layers, norm_f) of the CPU oracle, composed from steps.hpp, plus the
// target "burn-in nosave" forward (docs/math.md#target-forward). Templated on the scalar S;
// float and double are instantiated in model.cpp.
//
// The Storage policy rounds every tensor that the mixed-precision GPU path
// stores typed (the list opens model.cpp). With
// Storage{F32} (the default) nothing is rounded: that is the oracle.
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.hpp"
#include "core/param_layout.hpp"
#include "core/storage.hpp"

namespace mc::ref {

// Per-layer recurrent state of the whole backbone, GPU layout (docs/DESIGN.md).
template <class S>
struct RecurrentState {
  std::vector<S> conv;  // [L, B, di, dc]  full dc-wide window incl. the current slot
  std::vector<S> ssm;   // [L, B, di, ds]
  RecurrentState() = default;
  RecurrentState(const Dims& d, int64_t B)
      : conv(size_t(d.L * B * d.di * d.dc), S(0)), ssm(size_t(d.L * B * d.di * d.ds), S(0)) {}
};

// Saved activations of one layer (what the backward reads). Shapes with R = B*T rows.
template <class S>
struct LayerActivations {
  std::vector<S> residual;   // [R, dm]   layer input H
  std::vector<S> rms;        // [R]
  std::vector<S> post_norm;  // [R, dm]
  std::vector<S> xb;         // [R, di]   x branch of in_proj
  std::vector<S> z;          // [R, di]   gate pre-SiLU
  std::vector<S> gs;         // [R, di]   SiLU(z)
  std::vector<S> windows;    // [B, T, di, dc]
  std::vector<S> pc;         // [R, di]   post-conv, pre-SiLU
  std::vector<S> u;          // [R, di]
  std::vector<S> xdbl;       // [R, xd]   dt_in | B | C
  std::vector<S> delta_raw;  // [R, di]
  std::vector<S> delta;      // [R, di]
  std::vector<S> h_saved;    // [B, T+1, di, ds]
  std::vector<S> y;          // [R, di]   scan output (incl. D·u)
  std::vector<S> gated;      // [R, di]
};

template <class S>
struct BackboneActivations {
  int64_t B = 0, T = 0;
  std::vector<S> x;                           // [R, mid]  input
  std::vector<LayerActivations<S>> layers;    // L entries
  std::vector<S> z;                           // [R, dm]   norm_f input
  std::vector<S> rms_f;                       // [R]
};

// One layer forward. params: the whole arena; off: this layer's offsets.
// H [R, dm] -> H_out [R, dm] (may not alias H); conv_state [B, di, dc] and
// ssm_state [B, di, ds] are read as initial state and overwritten with the
// final state. act may be nullptr (nosave).
template <class S>
void layer_forward(const Dims& d, const S* params, const LayerParamOffsets& off, int64_t B,
                   int64_t T, const S* H, S* conv_state, S* ssm_state, S* H_out,
                   LayerActivations<S>* act, const Storage& st = Storage{});

// One layer backward. dH [R, dm]: in ∂L/∂H_out, out ∂L/∂H. Parameter
// gradients accumulate (+=) into grads (same layout as params). If non-null,
// d_conv0 [B, di, dc] and d_ssm0 [B, di, ds] receive (=) the gradient w.r.t.
// the layer's initial states (opt-in; the seed drops it).
template <class S>
void layer_backward(const Dims& d, const S* params, const LayerParamOffsets& off, int64_t B,
                    int64_t T, const LayerActivations<S>& act, S* dH, S* grads, S* d_conv0,
                    S* d_ssm0, const Storage& st = Storage{});

// layer_backward plus upstream gradients w.r.t. the layer's FINAL states (the
// ones its forward wrote back): d_conv_T [B, di, dc] and d_ssm_T [B, di, ds],
// each nullptr = 0. Chains the backward of consecutive segments of one
// sequence: segment 2's d_conv0/d_ssm0 are segment 1's d_conv_T/d_ssm_T.
template <class S>
void layer_backward_chained(const Dims& d, const S* params, const LayerParamOffsets& off,
                            int64_t B, int64_t T, const LayerActivations<S>& act, S* dH, S* grads,
                            const S* d_conv_T, const S* d_ssm_T, S* d_conv0, S* d_ssm0,
                            const Storage& st = Storage{});

// Backbone forward. X [R, mid] -> out [R, dm] (post norm_f, all positions).
// state is read as the initial state and overwritten with the final state.
template <class S>
void backbone_forward(const ParamLayout& lay, const S* params, int64_t B, int64_t T, const S* X,
                      RecurrentState<S>& state, S* out, BackboneActivations<S>* act,
                      const Storage& st = Storage{});

// Where the backbone backward writes. params gradients are accumulated (+=);
// the others are optional (nullptr = not computed) and overwritten (=).
template <class S>
struct BackboneGradOutputs {
  S* params = nullptr;   // [lay.total]          +=
  S* dX = nullptr;       // [R, mid]             =
  S* d_conv0 = nullptr;  // [L, B, di, dc]       =  w.r.t. the initial conv state
  S* d_ssm0 = nullptr;   // [L, B, di, ds]       =  w.r.t. the initial SSM state
};

// Backbone backward for upstream gradient d_out [R, dm] = ∂L/∂out.
template <class S>
void backbone_backward(const ParamLayout& lay, const S* params, const BackboneActivations<S>& act,
                       const S* d_out, const BackboneGradOutputs<S>& g,
                       const Storage& st = Storage{});

// Upstream gradients w.r.t. the FINAL recurrent states of the forward whose
// activations are passed (nullptr = 0), for chaining segments (see
// layer_backward_chained).
template <class S>
struct FinalStateGrads {
  const S* conv = nullptr;  // [L, B, di, dc]
  const S* ssm = nullptr;   // [L, B, di, ds]
};

template <class S>
void backbone_backward(const ParamLayout& lay, const S* params, const BackboneActivations<S>& act,
                       const S* d_out, const FinalStateGrads<S>& fin,
                       const BackboneGradOutputs<S>& g, const Storage& st = Storage{});

// Target "burn-in nosave" forward (docs/math.md#target-forward): zero initial state, input_proj,
// L layers without saves, norm_f, then the last-timestep gather.
// X [R, mid] -> target [B, dm] = out[b, T-1, :].
template <class S>
void target_forward(const ParamLayout& lay, const S* params, int64_t B, int64_t T, const S* X,
                    S* target, const Storage& st = Storage{});

}  // namespace mc::ref
