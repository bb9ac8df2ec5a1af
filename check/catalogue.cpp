// catalogue.cpp — the tensor catalogue (see catalogue.hpp).
#include "check/catalogue.hpp"

#include <cstring>

namespace mc::check {

const char* to_string(Role r) {
  switch (r) {
    case Role::Input: return "input";
    case Role::InitialState: return "initial_state";
    case Role::Weight: return "weight";
    case Role::UpstreamGradient: return "upstream_gradient";
    case Role::Output: return "output";
    case Role::FinalState: return "final_state";
    case Role::Gradient: return "gradient";
  }
  return "?";
}

std::string layer_tensor(int64_t layer, const std::string& what) {
  return "layers." + std::to_string(layer) + "." + what;
}

namespace {

const char* const kRows = " rows b*T+t";
const char* const kConvLayout = "[B, d_inner, d_conv] window incl. the current slot (slot d_conv-1)";
const char* const kSsmLayout = "[B, d_inner, d_state]";

std::string weight_layout(const ParamEntry& e) {
  const std::string& n = e.name;
  auto ends = [&](const char* suf) {
    const size_t L = std::strlen(suf);
    return n.size() >= L && n.compare(n.size() - L, L, suf) == 0;
  };
  if (e.gemm_weight)
    return "[in, out] row-major, y = x @ W (transpose of PyTorch nn.Linear.weight)";
  if (ends("conv1d_weight"))
    return "[d_inner, d_conv] row-major; tap d_conv-1 multiplies the current input (no flip; "
           "PyTorch conv1d.weight[:, 0, :])";
  if (ends("a_log")) return "[d_inner, d_state] row-major; A = -exp(a_log)";
  return "[" + std::to_string(e.shape[0]) + "] vector";
}

// One entry per layer of an [L, B, di, w] buffer.
void per_layer(std::vector<TensorSpec>& v, const Dims& d, int64_t B, int64_t w,
               const std::string& prefix, const std::string& what, Role role, Field f,
               const std::string& layout) {
  const int64_t per = B * d.di * w;
  for (int64_t l = 0; l < d.L; ++l)
    v.push_back({prefix + layer_tensor(l, what), role, f, l * per, per, {B, d.di, w}, layout});
}

}  // namespace

std::vector<TensorSpec> input_catalogue(const ModelConfig& cfg, int64_t B, int64_t T) {
  const Dims d = Dims::from(cfg);
  const ParamLayout lay(d);
  const int64_t R = B * T;
  std::vector<TensorSpec> v;
  v.push_back({"input", Role::Input, Field::X, 0, R * d.mid, {R, d.mid},
               std::string("[B*T, input_dim]") + kRows});
  per_layer(v, d, B, d.dc, "", "conv0", Role::InitialState, Field::Conv0, kConvLayout);
  per_layer(v, d, B, d.ds, "", "ssm0", Role::InitialState, Field::Ssm0, kSsmLayout);
  for (const ParamEntry& e : lay.entries)
    v.push_back({e.name, Role::Weight, Field::Params, e.offset, e.size, e.shape, weight_layout(e)});
  v.push_back({"grad.out", Role::UpstreamGradient, Field::DOut, 0, R * d.dm, {R, d.dm},
               std::string("[B*T, d_model]") + kRows + "; dL/d(out)"});
  per_layer(v, d, B, d.dc, "grad.", "conv_final", Role::UpstreamGradient, Field::DConvFinal,
            std::string(kConvLayout) + "; dL/d(final conv state)");
  per_layer(v, d, B, d.ds, "grad.", "ssm_final", Role::UpstreamGradient, Field::DSsmFinal,
            std::string(kSsmLayout) + "; dL/d(final SSM state)");
  return v;
}

std::vector<TensorSpec> forward_results(const ModelConfig& cfg, int64_t B, int64_t T) {
  const Dims d = Dims::from(cfg);
  const int64_t R = B * T;
  std::vector<TensorSpec> v;
  v.push_back({"out", Role::Output, Field::Out, 0, R * d.dm, {R, d.dm},
               std::string("[B*T, d_model]") + kRows + " (after norm_f)"});
  per_layer(v, d, B, d.dc, "", "conv_final", Role::FinalState, Field::ConvFinal, kConvLayout);
  per_layer(v, d, B, d.ds, "", "ssm_final", Role::FinalState, Field::SsmFinal, kSsmLayout);
  return v;
}

std::vector<TensorSpec> backward_results(const ModelConfig& cfg, int64_t B, int64_t T) {
  const Dims d = Dims::from(cfg);
  const ParamLayout lay(d);
  const int64_t R = B * T;
  std::vector<TensorSpec> v;
  for (const ParamEntry& e : lay.entries)
    v.push_back({grad_name(e.name), Role::Gradient, Field::Grads, e.offset, e.size, e.shape,
                 weight_layout(e)});
  v.push_back({"grad.input", Role::Gradient, Field::DX, 0, R * d.mid, {R, d.mid},
               std::string("[B*T, input_dim]") + kRows});
  per_layer(v, d, B, d.dc, "grad.", "conv0", Role::Gradient, Field::DConv0, kConvLayout);
  per_layer(v, d, B, d.ds, "grad.", "ssm0", Role::Gradient, Field::DSsm0, kSsmLayout);
  return v;
}

std::vector<TensorSpec> result_catalogue(const ModelConfig& cfg, int64_t B, int64_t T,
                                         bool backward) {
  std::vector<TensorSpec> v = forward_results(cfg, B, T);
  if (backward) {
    std::vector<TensorSpec> b = backward_results(cfg, B, T);
    v.insert(v.end(), b.begin(), b.end());
  }
  return v;
}

}  // namespace mc::check
