// bench_flags.hpp — the project flags shared by the benchmark programs
// (--sweep, --quick, --devices=0,1, --json=FILE, and the internal --device /
// --shard used by the per-device child processes), parsed around Google
// Benchmark's own flags:
//   1. ArgvRewrite (before benchmark::Initialize) keeps the original argv for
//      the shard launcher and expands --json=F into --benchmark_out=F
//      --benchmark_out_format=json;
//   2. benchmark::Initialize consumes the --benchmark_* flags;
//   3. parse_project_flags reads what is left; an unknown flag is an error.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mc::bench {

class ArgvRewrite {
 public:
  ArgvRewrite(int argc, char** argv);
  int* argc() { return &argc_; }
  char** argv() { return ptrs_.data(); }
  const std::vector<std::string>& original() const { return original_; }
  const std::string& json() const { return json_; }  // "" unless --json= was given
  bool user_min_time() const { return user_min_time_; }

 private:
  std::vector<std::string> original_, storage_;
  std::vector<char*> ptrs_;
  int argc_ = 0;
  std::string json_;
  bool user_min_time_ = false;
};

struct BenchFlags {
  bool sweep = false;
  bool quick = false;
  std::vector<int> devices;       // --devices=0,1 (empty = just --device)
  int device = 0;                 // the device this process measures on
  int shard_index = 0;            // --shard=i/N: this process runs groups g with
  int shard_count = 1;            //   g % N == i (set by the launcher)
  bool is_shard_child = false;    // started by the launcher (--shard given)
  std::string json;               // --json=FILE as given
  bool user_min_time = false;     // --benchmark_min_time given explicitly
  std::vector<std::string> original_args;
  std::map<std::string, std::string> values;  // program-specific --name=value

  // Program-specific values with a default; throw ConfigError on a bad value.
  long long get_int(const std::string& name, long long def, long long lo, long long hi) const;
  double get_double(const std::string& name, double def, double lo, double hi) const;
  std::string get_string(const std::string& name, const std::string& def,
                         const std::vector<std::string>& allowed) const;
};

// `program_flags`: names (without "--") of the program's own --name=value flags.
// Throws mc::ConfigError naming an unknown flag or a malformed value.
BenchFlags parse_project_flags(int argc, char** argv, const ArgvRewrite& rw,
                               const std::vector<std::string>& program_flags);

// Text printed by --help after Google Benchmark's own help: the shared flags,
// then the program's own, then the exit codes.
std::string common_flags_help();
std::string exit_codes_help();

}  // namespace mc::bench
