// cmd_info.cpp — `mambacheck configs` (the built-in config set) and
// `mambacheck devices` (the CUDA devices this build can use).
#include <cstdio>

#include "cli/args.hpp"
#include "core/builtin_configs.hpp"
#include "cli/commands.hpp"
#include "gpu/model.hpp"

namespace mc::cli {

const char* const kConfigsHelp =
    "usage: mambacheck configs\n"
    "\n"
    "Lists the built-in configs (the default set that `validate` runs and `dump --config`\n"
    "accepts): name, d_model, d_state, d_conv, expand, n_layers, input_dim, B, T.\n";

const char* const kDevicesHelp =
    "usage: mambacheck devices\n"
    "\n"
    "Lists the CUDA devices with what a bitwise claim depends on (model, SM count, driver,\n"
    "runtime and cuBLAS versions). Exits 1 with the reason when no device can be used.\n";

int cmd_configs(int argc, char** argv) {
  Args args(argc, argv, 2, {}, {});
  std::printf("%-20s %7s %7s %6s %6s %8s %9s %4s %6s  %s\n", "name", "d_model", "d_state",
              "d_conv", "expand", "n_layers", "input_dim", "B", "T", "description");
  for (const ref::NamedConfig& c : ref::builtin_configs()) {
    std::printf("%-20s %7d %7d %6d %6d %8d %9d %4lld %6lld  %s\n", c.name.c_str(), c.cfg.d_model,
                c.cfg.d_state, c.cfg.d_conv, c.cfg.expand, c.cfg.n_layers, c.cfg.input_dim,
                (long long)c.B, (long long)c.T, c.description.c_str());
  }
  return 0;
}

int cmd_devices(int argc, char** argv) {
  Args args(argc, argv, 2, {}, {});
  std::string reason;
  if (!gpu::gpu_available(&reason)) {
    std::printf("%s\n", reason.c_str());
    return 1;
  }
  for (int i = 0; i < gpu::device_count(); ++i)
    std::printf("%d: %s\n", i, gpu::device_info(i).to_string().c_str());
  return 0;
}

}  // namespace mc::cli
