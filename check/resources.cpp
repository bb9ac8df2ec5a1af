// resources.cpp — host memory estimates and limits, the thread cap (see
// resources.hpp).
#include "check/resources.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace mc::check {

namespace {

// Element counts of one backbone problem, as doubles.
struct Counts {
  double params = 0;  // arena
  double io = 0;      // X, d_out, initial states, final-state upstream gradients
  double out = 0;     // out, final states, grads, dX, initial-state grads
  double act = 0;     // saved activations of one forward (all layers)
  double scratch = 0; // one layer's backward temporaries
};

Counts counts(const ModelConfig& c, int64_t B_, int64_t T_) {
  const Dims d = Dims::from(c);
  const double B = double(B_), T = double(T_), R = B * T;
  const double dm = double(d.dm), di = double(d.di), ds = double(d.ds), dc = double(d.dc),
               xd = double(d.xd), mid = double(d.mid), L = double(d.L);
  const double pl = dm + 2 * dm * di + di * dc + di + di * xd + double(d.dr) * di + di +
                    di * ds + di + di * dm;
  Counts k;
  k.params = mid * dm + dm + L * pl + dm;
  const double states = L * B * di * (dc + ds);
  k.io = R * mid + R * dm + 2 * states;
  k.out = R * dm + states + k.params + R * mid + states;
  // per layer: residual, post_norm [R, dm]; rms [R]; xb, z, gs, pc, u, delta_raw,
  // delta, y, gated [R, di]; windows [R, di, dc]; xdbl [R, xd]; h_saved [B, T+1, di, ds]
  k.act = L * (R * (2 * dm + 1 + 9 * di + di * dc + xd) + B * (T + 1) * di * ds) + R * (mid + dm + 1);
  k.scratch = R * (14 * di + 3 * dm + 3 * xd + 2 * ds);
  return k;
}

bool read_number_file(const char* path, double* v) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return false;
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(s.c_str(), &end);
  if (errno || end == s.c_str()) return false;
  *v = x;
  return true;
}

}  // namespace

// Measured peak RSS against these sums (mamba-130m-layer, T 200): validate's CPU
// checks 484 MiB for 490 estimated, dump 373 MiB for 309; hence the 25% margin and
// 64 MiB for the process itself (binary, libraries, allocator slack).
constexpr double kMargin = 1.25;
constexpr double kProcessBytes = 64.0 * 1024 * 1024;

double oracle_bytes_sum(const ModelConfig& cfg, int64_t B, int64_t T, OracleWork work);

double oracle_bytes_estimate(const ModelConfig& cfg, int64_t B, int64_t T, OracleWork work) {
  return kMargin * oracle_bytes_sum(cfg, B, T, work) + kProcessBytes;
}

double oracle_bytes_sum(const ModelConfig& cfg, int64_t B, int64_t T, OracleWork work) {
  const Counts k = counts(cfg, B, T);
  const double inputs = k.params + k.io;
  switch (work) {
    case OracleWork::GradientChecks:
      // f64 and f32 runs with activations; the directional check keeps x0, the
      // direction, a perturbed point and two gradient sets of every input.
      return 8 * (k.act + k.scratch + 6 * inputs + 2 * k.out) + 4 * (k.act + k.scratch + inputs + k.out);
    case OracleWork::Ensemble:
      // O, P and the MCA runs' outputs kept as doubles (1 + 1 + 8), one run's
      // activations at a time (Mca is one double), the f32 inputs.
      return 8 * (10 * k.out + k.act + k.scratch) + 4 * (inputs + k.out);
    case OracleWork::Dump:
      return 8 * (k.act + k.scratch + inputs + k.out) + 4 * (k.act + k.scratch + 2 * inputs + 2 * k.out);
  }
  return 0;
}

double available_host_bytes(std::string* source) {
  if (const char* env = std::getenv("MAMBACHECK_MEMORY_LIMIT"); env && *env) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end != env && *end == '\0' && v >= 0) {
      if (source) *source = "MAMBACHECK_MEMORY_LIMIT";
      return v;
    }
  }
  double avail = -1;
  std::string src;
  {
    std::ifstream f("/proc/meminfo");
    std::string key, unit;
    double kb = 0;
    while (f >> key >> kb) {
      std::getline(f, unit);
      if (key == "MemAvailable:") {
        avail = kb * 1024.0;
        src = "MemAvailable in /proc/meminfo";
        break;
      }
    }
  }
  double limit = 0, used = 0;
  if (read_number_file("/sys/fs/cgroup/memory.max", &limit) &&
      read_number_file("/sys/fs/cgroup/memory.current", &used)) {
    const double cg = std::max(0.0, limit - used);
    if (avail < 0 || cg < avail) {
      avail = cg;
      src = "cgroup memory.max minus memory.current";
    }
  }
  if (source) *source = avail < 0 ? "unknown" : src;
  return avail;
}

std::string format_bytes(double b) {
  char buf[64];
  if (b >= 1024.0 * 1024 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f TiB", b / (1024.0 * 1024 * 1024 * 1024));
  else if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

void require_host_memory(const std::string& what, double needed) {
  std::string src;
  const double avail = available_host_bytes(&src);
  if (avail < 0 || needed <= avail) return;
  std::ostringstream os;
  os.precision(0);
  os << std::fixed << what << " needs about " << format_bytes(needed) << " (" << needed
     << " bytes) of host memory; available: " << format_bytes(avail) << " (" << avail
     << " bytes, " << src << ")";
  throw ResourceError(os.str());
}

int thread_cap() {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return std::max(kMinThreadCap, int(hw) * kMaxThreadsPerCore);
}

int parse_thread_count(const std::string& field, const std::string& value) {
  const std::string first = value.substr(0, value.find(','));
  size_t b = first.find_first_not_of(" \t"), e = first.find_last_not_of(" \t");
  const std::string v = b == std::string::npos ? "" : first.substr(b, e - b + 1);
  bool digits = !v.empty() && v.size() <= 9;
  for (char c : v) digits = digits && c >= '0' && c <= '9';
  if (!digits || std::stoi(v) < 1) {
    // keep it one line, whatever the value holds
    std::string shown = value.substr(0, 40);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    throw ConfigError(field + " = '" + shown + "' is not a positive integer (at most 9 digits)");
  }
  return std::stoi(v);
}

}  // namespace mc::check
