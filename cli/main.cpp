// main.cpp — entry point of the `mambacheck` command: dispatches to the
// subcommands and turns every error into one readable line and a non-zero
// exit code (2 for usage and configuration errors, 1 for failed checks or
// runtime errors).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "core/config.hpp"

namespace {

const char* const kMainHelp =
    "mambacheck — Mamba-1 selective-state-space layer: CPU oracle, GPU kernels, checks\n"
    "\n"
    "usage: mambacheck <command> [options]\n"
    "\n"
    "commands:\n"
    "  validate   run the oracle self-checks (and the GPU checks when a GPU is present)\n"
    "             on the built-in config set; prints a summary table\n"
    "  dump       write every tensor of one config as .npy files + manifest.json\n"
    "  configs    list the built-in configs\n"
    "  devices    list the CUDA devices this build can use\n"
    "\n"
    "`mambacheck <command> --help` describes each command's options.\n";

}  // namespace

namespace mc::cli {

bool wants_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return true;
  return false;
}

}  // namespace mc::cli

int main(int argc, char** argv) {
  using namespace mc::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    std::fputs(kMainHelp, stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  struct Entry {
    const char* name;
    int (*fn)(int, char**);
    const char* help;
  };
  const Entry entries[] = {{"validate", cmd_validate, kValidateHelp},
                           {"dump", cmd_dump, kDumpHelp},
                           {"configs", cmd_configs, kConfigsHelp},
                           {"devices", cmd_devices, kDevicesHelp}};
  for (const Entry& e : entries) {
    if (cmd != e.name) continue;
    if (wants_help(argc, argv, 2)) {
      std::fputs(e.help, stdout);
      return 0;
    }
    try {
      return e.fn(argc, argv);
    } catch (const UsageError& ex) {
      std::fprintf(stderr, "mambacheck %s: %s\n", e.name, ex.what());
      return 2;
    } catch (const mc::ConfigError& ex) {
      std::fprintf(stderr, "mambacheck %s: invalid configuration: %s\n", e.name, ex.what());
      return 2;
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "mambacheck %s: error: %s\n", e.name, ex.what());
      return 1;
    }
  }
  std::fprintf(stderr, "mambacheck: unknown command '%s'\n\n%s", cmd.c_str(), kMainHelp);
  return 2;
}
