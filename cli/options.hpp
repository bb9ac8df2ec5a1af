// options.hpp — what the mambacheck subcommands share: exit codes, the
// problem shapes a command runs on (built-in names, shape options, JSON
// config files), strict value parsing (every bad value is a ConfigError
// naming field, value and limit), output-path checks with the OS reason, and
// the OpenMP thread setup (capped, with a note).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/builtin_configs.hpp"
#include "core/config.hpp"

namespace CLI {
class App;
}

namespace mc::cli {

// Exit codes (README "The mambacheck command", and every --help).
constexpr int kExitPass = 0;      // every requested check ran and passed
constexpr int kExitFail = 1;      // at least one check ran and failed
constexpr int kExitUsage = 2;     // usage or configuration error; nothing was run
constexpr int kExitCannotRun = 3; // a requested check could not run (no usable GPU, not enough
                                  // memory, shape too small for the rule, I/O error), none failed
extern const char* const kExitCodesHelp;

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A check or an output that was requested but could not be produced: exit 3.
class CannotRun : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One problem: a named config with its B and T.
using Case = ref::NamedConfig;

// The shape options of validate and dump, as given (strings: parsed strictly
// by resolve_cases so that every bad value names its field).
struct ShapeOptions {
  std::vector<std::string> configs;      // --config NAME (repeatable)
  std::vector<std::string> config_files; // --config-file FILE (repeatable)
  std::string d_model, d_state, d_conv, expand, n_layers, input_dim, batch, seq_len, eps;
  // dtype / scan given in a config file ("" = not given there)
  std::string file_dtype, file_scan;
  bool any_override() const;
};
// Adds --config, --config-file, --d-model, --d-state, --d-conv, --expand,
// --n-layers, --input-dim, --batch/-B, --seq-len/-T, --eps to `app`.
void add_shape_options(CLI::App& app, ShapeOptions& s);
extern const char* const kShapeHelp;

// The cases to run: the named built-ins and the config files' shapes (or, with
// neither, `default_all` ? every built-in : the default shape
// mamba-rs-default), each with the shape options applied on top. Every value
// is validated (ConfigError naming field, value, limit).
std::vector<Case> resolve_cases(ShapeOptions& s, bool default_all);

// Strict parsers; ConfigError naming the field on anything else.
int64_t parse_int(const std::string& field, const std::string& v);
uint64_t parse_seed(const std::string& field, const std::string& v);
double parse_double(const std::string& field, const std::string& v);
std::vector<DType> parse_dtypes(const std::string& s);     // f32|bf16|f16, lists "f32,bf16", all
std::vector<ScanMode> parse_scans(const std::string& s);   // auto|checkpointed|sequential|parallel,
                                                          // lists, both (= seq+par), all

// Sets the OpenMP thread count: --threads (if given) or OMP_NUM_THREADS,
// validated (ConfigError for garbage) and capped at check::thread_cap() with a
// note on stderr. Returns the count in use.
int setup_threads(const std::string& threads_option);

// Output folder checks for dump (UsageError with the OS reason).
std::string describe_errno(int e);

}  // namespace mc::cli
