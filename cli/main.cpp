// main.cpp — entry point of the `mambacheck` command: the command line
// through CLI11, dispatch to the subcommands, and every error turned into one
// readable line and the exit code of options.hpp (2 usage/configuration, 3 a
// requested check or output could not be produced).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "check/resources.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "core/config.hpp"
#include "gpu/model.hpp"

namespace {

const char* const kMainDescription =
    "mambacheck — Mamba-1 selective-state-space layer: CPU oracle, GPU kernels, checks\n"
    "\n"
    "  validate   run the oracle self-checks (and the GPU checks when a GPU is present)\n"
    "             on the built-in configs or on your shape; prints a summary table\n"
    "  dump       write every tensor of one problem as .npy files + manifest.json\n"
    "  configs    list the built-in configs\n"
    "  devices    list the CUDA devices this build can use\n"
    "\n"
    "`mambacheck <command> --help` describes each command's options.";

}  // namespace

int main(int argc, char** argv) {
  using namespace mc::cli;
  CLI::App app{kMainDescription, "mambacheck"};
  app.footer(kExitCodesHelp);
  std::vector<Command> cmds = {add_validate(app), add_dump(app), add_configs(app),
                               add_devices(app)};
  if (argc < 2) {
    std::fputs(app.help().c_str(), stdout);
    return kExitUsage;
  }
  const std::string first = argv[1];
  if (first == "help") {
    std::fputs(app.help().c_str(), stdout);
    return kExitPass;
  }
  if (first.empty() || first[0] != '-') {
    bool known = false;
    for (const Command& c : cmds) known = known || first == c.app->get_name();
    if (!known) {
      std::fprintf(stderr, "mambacheck: unknown command '%s' (commands: validate, dump, configs, "
                   "devices; see mambacheck --help)\n", first.c_str());
      return kExitUsage;
    }
  }
  std::string name = "mambacheck";
  try {
    app.require_subcommand(1);
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    for (const Command& c : cmds)
      if (c.app->parsed()) name = "mambacheck " + c.app->get_name();
    std::fprintf(stderr, "%s: %s (see %s --help)\n", name.c_str(), e.what(), name.c_str());
    return kExitUsage;
  }
  for (const Command& c : cmds) {
    if (!c.app->parsed()) continue;
    name = "mambacheck " + c.app->get_name();
    try {
      return c.run();
    } catch (const UsageError& ex) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), ex.what());
      return kExitUsage;
    } catch (const mc::ConfigError& ex) {
      std::fprintf(stderr, "%s: invalid configuration: %s\n", name.c_str(), ex.what());
      return kExitUsage;
    } catch (const mc::check::ResourceError& ex) {
      std::fprintf(stderr, "%s: cannot run: %s\n", name.c_str(), ex.what());
      return kExitCannotRun;
    } catch (const CannotRun& ex) {
      std::fprintf(stderr, "%s: cannot run: %s\n", name.c_str(), ex.what());
      return kExitCannotRun;
    } catch (const mc::gpu::GpuUnavailable& ex) {
      std::fprintf(stderr, "%s: cannot run: no usable GPU on this machine (%s)\n", name.c_str(),
                   ex.what());
      return kExitCannotRun;
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "%s: error: %s\n", name.c_str(), ex.what());
      return kExitCannotRun;
    }
  }
  std::fputs(app.help().c_str(), stdout);
  return kExitUsage;
}
