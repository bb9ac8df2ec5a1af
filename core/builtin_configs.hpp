// builtin_configs.hpp — the embedded default config set: named (ModelConfig,
// B, T) problems that the CLI validates and the tests reuse, from a tiny
// everything-small case to one real mamba-130m layer, plus edge cases
// (d_state 128, d_conv 1 with T 1, odd sizes, T = 257 just past mamba-rs's
// sequential/parallel scan threshold). Each description is derived from the
// entry's fields (builtin_configs.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace mc::ref {

struct NamedConfig {
  std::string name;
  ModelConfig cfg;
  int64_t B = 1, T = 1;
  std::string description;
};

// All built-in configs, in a fixed order (smallest first). Every entry passes
// validate_config / validate_runtime.
const std::vector<NamedConfig>& builtin_configs();

// The config called `name`; throws ConfigError listing the valid names.
const NamedConfig& builtin_config(const std::string& name);

}  // namespace mc::ref
