// commands.hpp — the mambacheck subcommands (one file each) and their help.
#pragma once

namespace mc::cli {

int cmd_validate(int argc, char** argv);  // cmd_validate.cpp
int cmd_dump(int argc, char** argv);      // cmd_dump.cpp
int cmd_configs(int argc, char** argv);   // cmd_info.cpp
int cmd_devices(int argc, char** argv);   // cmd_info.cpp

extern const char* const kValidateHelp;
extern const char* const kDumpHelp;
extern const char* const kConfigsHelp;
extern const char* const kDevicesHelp;

// True when argv[first..] asks for help (-h / --help).
bool wants_help(int argc, char** argv, int first);

}  // namespace mc::cli
