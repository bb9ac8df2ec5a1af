// catalogue.hpp — the ONE list of the tensors of a backbone problem and their
// names, used by every place that names a tensor: the k-rule comparisons of
// the CLI and the suites (model_check.hpp, ensemble.hpp), the determinism
// hashes (determinism.hpp), `mambacheck dump` (file names and manifest.json),
// the validation JSON and the reports.
//
// Naming scheme: every tensor has one name; the gradient of the loss with
// respect to a tensor called X is called "grad.X". The loss is
//   L = Σ out·grad.out + Σ_l Σ conv_final·grad.layers.l.conv_final
//                      + Σ_l Σ ssm_final·grad.layers.l.ssm_final
// (the three upstream gradients are inputs of the problem).
//
//   inputs      input [B*T, input_dim], layers.l.conv0 [B, di, dc], layers.l.ssm0 [B, di, ds]
//   weights     the ParamEntry names (input_proj_w, layers.l.in_proj_w, ..., norm_f_weight)
//   upstream    grad.out [B*T, d_model], grad.layers.l.conv_final, grad.layers.l.ssm_final
//   outputs     out [B*T, d_model], layers.l.conv_final [B, di, dc], layers.l.ssm_final [B, di, ds]
//   gradients   grad.<weight>, grad.input, grad.layers.l.conv0, grad.layers.l.ssm0
//
// Per-layer state tensors are one entry per layer (slices of the [L, B, di, w]
// buffers the oracle and the GPU use).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/param_layout.hpp"

namespace mc::check {

// Where a tensor lives: a field of ModelInputs (first group) or of
// ModelOutputs (second group), model_check.hpp.
enum class Field {
  X, Conv0, Ssm0, Params, DOut, DConvFinal, DSsmFinal,  // ModelInputs
  Out, ConvFinal, SsmFinal, Grads, DX, DConv0, DSsm0     // ModelOutputs
};

enum class Role { Input, InitialState, Weight, UpstreamGradient, Output, FinalState, Gradient };
const char* to_string(Role r);  // "input", "initial_state", "weight", ...

struct TensorSpec {
  std::string name;             // the one name (see above)
  Role role = Role::Output;
  Field field = Field::Out;
  int64_t offset = 0;           // first element inside the field's vector
  int64_t count = 0;            // elements
  std::vector<int64_t> shape;   // row-major
  std::string layout;           // human-readable layout (manifest.json)
};

// The inputs of a problem: input, layers.l.conv0, layers.l.ssm0, every
// weight, grad.out, grad.layers.l.conv_final, grad.layers.l.ssm_final.
std::vector<TensorSpec> input_catalogue(const ModelConfig& cfg, int64_t B, int64_t T);

// The results of one forward (+ backward): out, layers.l.conv_final,
// layers.l.ssm_final; with the backward also grad.<weight> (each ParamEntry),
// grad.input, grad.layers.l.conv0, grad.layers.l.ssm0. This is the list every
// comparison and every determinism hash walks, in this order.
std::vector<TensorSpec> result_catalogue(const ModelConfig& cfg, int64_t B, int64_t T,
                                         bool backward = true);
std::vector<TensorSpec> forward_results(const ModelConfig& cfg, int64_t B, int64_t T);
std::vector<TensorSpec> backward_results(const ModelConfig& cfg, int64_t B, int64_t T);

// Name helpers of the scheme.
std::string layer_tensor(int64_t layer, const std::string& what);  // "layers.<l>.<what>"
inline std::string grad_name(const std::string& name) { return "grad." + name; }

}  // namespace mc::check
