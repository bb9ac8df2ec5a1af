// args.hpp — a small command-line parser for the mambacheck subcommands:
// `--name value` / `--name=value` options and `--flag` switches, with clear
// errors for unknown options and missing values.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace mc::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  // options: names taking a value; flags: names without one (both without "--").
  Args(int argc, char** argv, int first, const std::vector<std::string>& options,
       const std::vector<std::string>& flags);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool flag(const std::string& name) const { return has(name); }
  std::string get(const std::string& name, const std::string& def) const;
  std::string require(const std::string& name) const;  // UsageError if absent
  std::vector<std::string> all(const std::string& name) const;  // repeated options
  long long get_int(const std::string& name, long long def) const;
  unsigned long long get_u64(const std::string& name, unsigned long long def) const;

 private:
  std::multimap<std::string, std::string> values_;
};

}  // namespace mc::cli
