// cmd_info.cpp — `mambacheck configs` (the built-in config set) and
// `mambacheck devices` (the CUDA devices this build can use).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "core/builtin_configs.hpp"
#include "gpu/model.hpp"

namespace mc::cli {

Command add_configs(CLI::App& root) {
  CLI::App* app = root.add_subcommand("configs", "list the built-in configs");
  app->footer(
      "Lists the built-in configs (the default set that `validate` runs and `--config NAME`\n"
      "accepts): name, d_model, d_state, d_conv, expand, n_layers, input_dim, B, T.");
  return {app, [] {
            std::printf("%-20s %7s %7s %6s %6s %8s %9s %4s %6s  %s\n", "name", "d_model",
                        "d_state", "d_conv", "expand", "n_layers", "input_dim", "B", "T",
                        "description");
            for (const ref::NamedConfig& c : ref::builtin_configs())
              std::printf("%-20s %7d %7d %6d %6d %8d %9d %4lld %6lld  %s\n", c.name.c_str(),
                          c.cfg.d_model, c.cfg.d_state, c.cfg.d_conv, c.cfg.expand,
                          c.cfg.n_layers, c.cfg.input_dim, (long long)c.B, (long long)c.T,
                          c.description.c_str());
            return kExitPass;
          }};
}

Command add_devices(CLI::App& root) {
  CLI::App* app = root.add_subcommand("devices", "list the CUDA devices this build can use");
  app->footer(
      "Lists the CUDA devices with what a bitwise claim depends on (model, SM count, driver,\n"
      "runtime and cuBLAS versions). Without a usable device it prints the reason and exits 3.");
  return {app, [] {
            std::string reason;
            if (!gpu::gpu_available(&reason)) {
              std::printf("no usable GPU on this machine: %s\n", reason.c_str());
              return kExitCannotRun;
            }
            for (int i = 0; i < gpu::device_count(); ++i)
              std::printf("%d: %s\n", i, gpu::device_info(i).to_string().c_str());
            return kExitPass;
          }};
}

}  // namespace mc::cli
