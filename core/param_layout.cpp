// param_layout.cpp — arena offsets and mamba-rs's initialisation (param_layout.hpp).
#include "core/param_layout.hpp"

#include <cmath>
#include <stdexcept>

namespace mc {

ParamLayout::ParamLayout(const Dims& d) : dims(d) {
  int64_t off = 0;
  auto add = [&](const std::string& name, int layer, std::vector<int64_t> shape, bool gemm) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    entries.push_back(ParamEntry{name, layer, shape, off, n, gemm});
    off += n;
    return entries.back().offset;
  };
  input_proj_w = add("input_proj_w", -1, {d.mid, d.dm}, true);
  input_proj_b = add("input_proj_b", -1, {d.dm}, false);
  for (int l = 0; l < d.L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerParamOffsets o;
    o.norm_w = add(p + "norm_weight", l, {d.dm}, false);
    o.in_proj_w = add(p + "in_proj_w", l, {d.dm, 2 * d.di}, true);
    o.conv_w = add(p + "conv1d_weight", l, {d.di, d.dc}, false);
    o.conv_b = add(p + "conv1d_bias", l, {d.di}, false);
    o.x_proj_w = add(p + "x_proj_w", l, {d.di, d.xd}, true);
    o.dt_proj_w = add(p + "dt_proj_w", l, {d.dr, d.di}, true);
    o.dt_proj_b = add(p + "dt_proj_b", l, {d.di}, false);
    o.a_log = add(p + "a_log", l, {d.di, d.ds}, false);
    o.d_param = add(p + "d_param", l, {d.di}, false);
    o.out_proj_w = add(p + "out_proj_w", l, {d.di, d.dm}, true);
    layers.push_back(o);
  }
  norm_f_w = add("norm_f_weight", -1, {d.dm}, false);
  total = off;
  if (total != params_total(d)) throw std::logic_error("ParamLayout: total does not match params_total");
}

const ParamEntry& ParamLayout::entry_at(int64_t i) const {
  for (const auto& e : entries)
    if (i >= e.offset && i < e.offset + e.size) return e;
  throw std::out_of_range("ParamLayout::entry_at: index " + std::to_string(i) + " >= total " +
                          std::to_string(total));
}

namespace {

void kaiming_uniform(Lcg& rng, float* w, int64_t n, int64_t fan_in) {
  const float bound = std::sqrt(3.0f / float(fan_in));
  for (int64_t i = 0; i < n; ++i) w[i] = -bound + 2.0f * bound * rng.next_unit();
}

void fill(float* w, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i) w[i] = v;
}

}  // namespace

std::vector<float> init_params(const ParamLayout& lay, uint64_t seed) {
  const Dims& d = lay.dims;
  std::vector<float> p(size_t(lay.total), 0.0f);
  Lcg rng(seed);
  kaiming_uniform(rng, &p[lay.input_proj_w], d.mid * d.dm, d.mid);
  fill(&p[lay.input_proj_b], d.dm, 0.0f);
  for (const LayerParamOffsets& o : lay.layers) {
    fill(&p[o.norm_w], d.dm, 1.0f);
    kaiming_uniform(rng, &p[o.in_proj_w], d.dm * 2 * d.di, d.dm);
    kaiming_uniform(rng, &p[o.conv_w], d.di * d.dc, d.dc);
    fill(&p[o.conv_b], d.di, 0.0f);
    kaiming_uniform(rng, &p[o.x_proj_w], d.di * d.xd, d.di);
    kaiming_uniform(rng, &p[o.dt_proj_w], d.dr * d.di, d.dr);
    const float lo = std::log(0.001f), hi = std::log(0.1f);
    for (int64_t i = 0; i < d.di; ++i) {
      const float dt = std::exp(rng.next_unit() * (hi - lo) + lo);
      p[o.dt_proj_b + i] = dt > 20.0f ? dt : std::log(std::exp(dt) - 1.0f);
    }
    for (int64_t c = 0; c < d.di; ++c)
      for (int64_t n = 0; n < d.ds; ++n) p[o.a_log + c * d.ds + n] = std::log(float(n + 1));
    fill(&p[o.d_param], d.di, 1.0f);
    kaiming_uniform(rng, &p[o.out_proj_w], d.di * d.dm, d.di);
  }
  fill(&p[lay.norm_f_w], d.dm, 1.0f);
  return p;
}

}  // namespace mc
