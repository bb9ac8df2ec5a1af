// resources.hpp — what a check needs before it starts: the host memory the
// CPU oracle will use for a shape (estimated from the tensor sizes, before
// anything is allocated), the memory this process may use, a clean refusal
// naming both, and the OpenMP thread cap.
//
// The GPU side needs no estimate here: gpu::Model sums its whole buffer plan
// and compares it with cudaMemGetInfo before it allocates anything, and
// refuses with gpu::OutOfDeviceMemory naming the bytes needed, free and total.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/config.hpp"

namespace mc::check {

// A requested check cannot run on this machine (memory, no GPU, ...): the
// message says what was needed and what is available. Not a failed check.
class ResourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Peak host bytes of the CPU oracle work for one shape (doubles are used for
// the sizes so that absurd shapes cannot overflow):
//   gradient checks   the backbone's f64 and f32 runs with saved activations and
//                     the copies the directional check keeps of every input;
//   ensemble          O, P and kMcaRuns Monte Carlo runs of every output and
//                     gradient, plus one run's activations (GPU comparisons);
//   dump              O (and P for bf16/f16) with activations, plus the inputs;
// then 25% and 64 MiB on top (calibrated against the measured peak RSS).
enum class OracleWork { GradientChecks, Ensemble, Dump };
double oracle_bytes_estimate(const ModelConfig& cfg, int64_t B, int64_t T, OracleWork work);

// Bytes this process may still allocate: the smaller of MemAvailable
// (/proc/meminfo) and a cgroup memory limit minus current usage, when one is
// set. `source` says where the number came from. Negative when unknown.
// MAMBACHECK_MEMORY_LIMIT=<bytes> overrides it (for tests).
double available_host_bytes(std::string* source = nullptr);

// Throws ResourceError "<what> needs about X GiB (N bytes) of host memory;
// available: Y GiB (M bytes, <source>)" when needed > available.
void require_host_memory(const std::string& what, double needed);

// "1.5 GiB", "12.0 MiB", "512 B".
std::string format_bytes(double bytes);

// The OpenMP thread count is capped at kMaxThreadsPerCore x the hardware
// threads (at least kMinThreadCap): far more only costs memory and, past the
// system's thread limits, crashes inside libgomp. The oracle's bits do not
// depend on the count.
constexpr int kMaxThreadsPerCore = 4;
constexpr int kMinThreadCap = 8;
int thread_cap();

// Parses a thread count ("4"; for OMP_NUM_THREADS also a nested list "4,2",
// of which the first level counts). Throws ConfigError naming `field`, the
// value and the rule when it is not a positive integer.
int parse_thread_count(const std::string& field, const std::string& value);

}  // namespace mc::check
