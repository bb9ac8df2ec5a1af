// param_layout.hpp — the one flat arena that holds every parameter (and, with
// the same offsets, every parameter gradient), in mamba-rs's canonical order
// (the order of its gradient arena): input_proj_w, input_proj_b, then per layer norm_weight,
// in_proj_w, conv1d_weight, conv1d_bias, x_proj_w, dt_proj_w, dt_proj_b,
// a_log, d_param, out_proj_w, then norm_f_weight.
//
// Weights are stored [in, out] row-major (the transpose of PyTorch
// nn.Linear.weight); see docs/DESIGN.md. CPU and GPU share this layout, so the
// GPU uploads the arena with one copy and gradients compare offset by offset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace mc {

// Offsets of one layer's tensors inside the arena.
struct LayerParamOffsets {
  int64_t norm_w;     // [dm]
  int64_t in_proj_w;  // [dm, 2*di]   cols [0,di) = x branch, [di,2di) = gate z
  int64_t conv_w;     // [di, dc]     tap dc-1 multiplies the current input
  int64_t conv_b;     // [di]
  int64_t x_proj_w;   // [di, xd]     cols: dt_in | B | C
  int64_t dt_proj_w;  // [dr, di]
  int64_t dt_proj_b;  // [di]
  int64_t a_log;      // [di, ds]     A = -exp(a_log)
  int64_t d_param;    // [di]
  int64_t out_proj_w; // [di, dm]
};

// One named tensor of the arena (used by dump, reports and localisation of
// gradient-check failures).
struct ParamEntry {
  std::string name;            // e.g. "layers.1.x_proj_w" or "input_proj_w"
  int layer;                   // -1 for backbone tensors
  std::vector<int64_t> shape;  // row-major
  int64_t offset;
  int64_t size;
  bool gemm_weight;            // has a typed compute copy in the mixed path
};

struct ParamLayout {
  Dims dims;
  int64_t input_proj_w;  // [mid, dm]
  int64_t input_proj_b;  // [dm]
  std::vector<LayerParamOffsets> layers;
  int64_t norm_f_w;      // [dm]
  int64_t total;
  std::vector<ParamEntry> entries;  // canonical order

  explicit ParamLayout(const Dims& d);
  const ParamEntry& entry_at(int64_t flat_index) const;  // which tensor owns an index
};

// mamba-rs's parameter initialisation (LCG, Kaiming-uniform with
// bound sqrt(3/fan_in), log-uniform dt bias, A_log = ln(n+1), D = 1).
// Writes all `layout.total` values; computed in f32 as mamba-rs does.
std::vector<float> init_params(const ParamLayout& layout, uint64_t seed);

// mamba-rs's LCG: s <- s*6364136223846793005 + 1442695040888963407,
// u = (s >> 40) / 2^24 in [0, 1).
struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed) {}
  float next_unit() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return float(s >> 40) / 16777216.0f;
  }
};

}  // namespace mc
