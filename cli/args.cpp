// args.cpp — implementation of the mambacheck option parser.
#include "cli/args.hpp"

#include <algorithm>

namespace mc::cli {

Args::Args(int argc, char** argv, int first, const std::vector<std::string>& options,
           const std::vector<std::string>& flags) {
  auto is_in = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (is_in(flags, name)) {
      if (inline_value) throw UsageError("--" + name + " takes no value");
      values_.emplace(name, "1");
    } else if (is_in(options, name)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError("--" + name + " needs a value");
        value = argv[++i];
      }
      values_.emplace(name, value);
    } else {
      throw UsageError("unknown option --" + name + " (see --help)");
    }
  }
}

std::string Args::get(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

std::string Args::require(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw UsageError("missing required option --" + name);
  return it->second;
}

std::vector<std::string> Args::all(const std::string& name) const {
  std::vector<std::string> out;
  auto range = values_.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) out.push_back(it->second);
  return out;
}

long long Args::get_int(const std::string& name, long long def) const {
  if (!has(name)) return def;
  const std::string v = get(name, "");
  try {
    size_t pos = 0;
    long long x = std::stoll(v, &pos);
    if (pos != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw UsageError("--" + name + " = '" + v + "' is not an integer");
  }
}

unsigned long long Args::get_u64(const std::string& name, unsigned long long def) const {
  if (!has(name)) return def;
  const std::string v = get(name, "");
  try {
    size_t pos = 0;
    unsigned long long x = std::stoull(v, &pos);
    if (pos != v.size() || v.empty() || v[0] == '-') throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw UsageError("--" + name + " = '" + v + "' is not a non-negative integer");
  }
}

}  // namespace mc::cli
