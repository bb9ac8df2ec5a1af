// builtin_configs.cpp — the table of built-in named configs (see the header).
#include "core/builtin_configs.hpp"

namespace mc::ref {

namespace {

NamedConfig make(std::string name, int dm, int ds, int dc, int expand, int L, int mid, int64_t B,
                 int64_t T, double eps, std::string description) {
  NamedConfig c;
  c.name = std::move(name);
  c.cfg.d_model = dm;
  c.cfg.d_state = ds;
  c.cfg.d_conv = dc;
  c.cfg.expand = expand;
  c.cfg.n_layers = L;
  c.cfg.input_dim = mid;
  c.cfg.eps = eps;
  c.B = B;
  c.T = T;
  c.description = std::move(description);
  return c;
}

std::vector<NamedConfig> build_table() {
  std::vector<NamedConfig> v;
  v.push_back(make("tiny", 8, 4, 3, 2, 2, 5, 2, 7, 1e-5, "everything small: dm 8, di 16, ds 4, dc 3, L 2, B 2, T 7"));
  v.push_back(make("dconv1-t1", 8, 4, 1, 2, 2, 4, 2, 1, 1e-5,
                   "edge case: d_conv 1 (the conv is a per-channel scale) and a single timestep"));
  v.push_back(make("odd", 13, 7, 2, 3, 3, 11, 3, 17, 1e-6,
                   "odd sizes: dm 13, di 39 (not a multiple of 4), ds 7, dc 2, L 3, B 3, T 17, eps 1e-6"));
  v.push_back(make("small", 32, 16, 4, 2, 2, 20, 2, 33, 1e-5,
                   "mamba-rs parity-test size: dm 32, ds 16, dc 4, L 2, mid 20, B 2, T 33"));
  v.push_back(make("dstate-128", 16, 128, 4, 2, 1, 8, 2, 5, 1e-5,
                   "d_state 128 (> 64: the GPU must use the parallel scan), small T"));
  v.push_back(make("scan-t257", 16, 16, 4, 2, 1, 16, 1, 257, 1e-5,
                   "T 257: first length the Auto scan mode routes to the parallel scan"));
  v.push_back(make("mamba-rs-default", 128, 16, 4, 2, 3, 128, 2, 32, 1e-5,
                   "mamba-rs MambaConfig::default(): dm 128, ds 16, dc 4, L 3, B 2, T 32"));
  v.push_back(make("mamba-130m-layer", 768, 16, 4, 2, 1, 768, 1, 16, 1e-5,
                   "one layer of mamba-130m: d_model 768, d_inner 1536, dt_rank 48, ds 16, B 1, T 16"));
  for (const NamedConfig& c : v) validate_runtime(Dims::from(c.cfg), c.B, c.T);
  return v;
}

}  // namespace

const std::vector<NamedConfig>& builtin_configs() {
  static const std::vector<NamedConfig> table = build_table();
  return table;
}

const NamedConfig& builtin_config(const std::string& name) {
  for (const NamedConfig& c : builtin_configs())
    if (c.name == name) return c;
  std::string names;
  for (const NamedConfig& c : builtin_configs()) names += (names.empty() ? "" : ", ") + c.name;
  throw ConfigError("config = '" + name + "' is not a built-in config; valid names: " + names);
}

}  // namespace mc::ref
