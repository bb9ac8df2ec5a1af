// commands.hpp — the mambacheck subcommands (one file each): each adds its
// CLI11 subcommand with its options to the root app and returns the function
// that runs it once the command line is parsed.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace mc::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_validate(CLI::App& root);  // cmd_validate.cpp
Command add_dump(CLI::App& root);      // cmd_dump.cpp
Command add_configs(CLI::App& root);   // cmd_info.cpp
Command add_devices(CLI::App& root);   // cmd_info.cpp

}  // namespace mc::cli
