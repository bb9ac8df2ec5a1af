// bench_flags.cpp — parsing of the benchmark programs' project flags
// (bench_flags.hpp).
#include "bench/bench_flags.hpp"

#include <cstdlib>
#include <sstream>

#include "core/config.hpp"

namespace mc::bench {

static bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

ArgvRewrite::ArgvRewrite(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) original_.emplace_back(argv[i]);
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (i > 0 && starts_with(a, "--json=")) {
      json_ = a.substr(7);
      storage_.push_back("--benchmark_out=" + json_);
      storage_.push_back("--benchmark_out_format=json");
      continue;
    }
    if (starts_with(a, "--benchmark_min_time")) user_min_time_ = true;
    storage_.push_back(a);
  }
  for (auto& s : storage_) ptrs_.push_back(s.data());
  ptrs_.push_back(nullptr);
  argc_ = int(storage_.size());
}

static long long parse_ll(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0')
    throw ConfigError("--" + flag + "=" + v + ": not an integer");
  return x;
}

static std::vector<int> parse_device_list(const std::string& v) {
  std::vector<int> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const long long d = parse_ll("devices", item);
    if (d < 0 || d > 1023) throw ConfigError("--devices: device index " + item + " out of [0, 1023]");
    for (int e : out)
      if (e == d) throw ConfigError("--devices: device " + item + " listed twice");
    out.push_back(int(d));
  }
  if (out.empty()) throw ConfigError("--devices=" + v + ": expected a list like 0,1");
  return out;
}

BenchFlags parse_project_flags(int argc, char** argv, const ArgvRewrite& rw,
                               const std::vector<std::string>& program_flags) {
  BenchFlags f;
  f.original_args = rw.original();
  f.json = rw.json();
  f.user_min_time = rw.user_min_time();
  bool device_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    const std::string name = starts_with(a, "--") ? a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2) : a;
    const std::string val = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (a == "--sweep") {
      f.sweep = true;
    } else if (a == "--quick") {
      f.quick = true;
    } else if (name == "devices" && eq != std::string::npos) {
      f.devices = parse_device_list(val);
    } else if (name == "device" && eq != std::string::npos) {
      const long long d = parse_ll("device", val);
      if (d < 0 || d > 1023) throw ConfigError("--device=" + val + ": out of [0, 1023]");
      f.device = int(d);
      device_given = true;
    } else if (name == "shard" && eq != std::string::npos) {
      const auto slash = val.find('/');
      if (slash == std::string::npos) throw ConfigError("--shard=" + val + ": expected i/N");
      f.shard_index = int(parse_ll("shard", val.substr(0, slash)));
      f.shard_count = int(parse_ll("shard", val.substr(slash + 1)));
      if (f.shard_count < 1 || f.shard_index < 0 || f.shard_index >= f.shard_count)
        throw ConfigError("--shard=" + val + ": need 0 <= i < N");
      f.is_shard_child = true;
    } else {
      bool known = false;
      for (const auto& p : program_flags)
        if (name == p && eq != std::string::npos) known = true;
      if (!known) {
        std::string list = "--sweep, --quick, --devices=LIST, --json=FILE";
        for (const auto& p : program_flags) list += ", --" + p + "=V";
        throw ConfigError("unknown flag '" + a + "' (known: " + list +
                          ", and Google Benchmark's --benchmark_* flags)");
      }
      f.values[name] = val;
    }
  }
  if (!f.devices.empty() && !device_given) f.device = f.devices.front();
  return f;
}

long long BenchFlags::get_int(const std::string& name, long long def, long long lo,
                              long long hi) const {
  auto it = values.find(name);
  if (it == values.end()) return def;
  const long long v = parse_ll(name, it->second);
  if (v < lo || v > hi)
    throw ConfigError("--" + name + "=" + it->second + ": out of [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
  return v;
}

double BenchFlags::get_double(const std::string& name, double def, double lo, double hi) const {
  auto it = values.find(name);
  if (it == values.end()) return def;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !(v >= lo && v <= hi)) {
    std::ostringstream os;
    os << "--" << name << "=" << it->second << ": expected a number in [" << lo << ", " << hi
       << "]";
    throw ConfigError(os.str());
  }
  return v;
}

std::string BenchFlags::get_string(const std::string& name, const std::string& def,
                                   const std::vector<std::string>& allowed) const {
  auto it = values.find(name);
  if (it == values.end()) return def;
  for (const auto& a : allowed)
    if (it->second == a) return a;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : "|") + a;
  throw ConfigError("--" + name + "=" + it->second + ": expected one of " + list);
}

std::string exit_codes_help() {
  return "Exit codes: 0 ok, 1 error, 77 no usable CUDA device (message on stderr).\n";
}

std::string common_flags_help() {
  return "\nmambacheck flags:\n"
         "  --sweep            run the full grid instead of the small default set\n"
         "  --quick            shorter runs (a smaller min time per case unless\n"
         "                     --benchmark_min_time is given) and, without --sweep,\n"
         "                     an even smaller set (used by the ctest smoke runs)\n"
         "  --devices=0,1      shard the case groups round-robin over these devices:\n"
         "                     one child process per device (own CUDA context, own\n"
         "                     GPU, disjoint cases); results in FILE.dev<d>.json\n"
         "  --json=FILE        shorthand for --benchmark_out=FILE\n"
         "                     --benchmark_out_format=json\n";
}

}  // namespace mc::bench
