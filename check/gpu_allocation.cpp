// gpu_allocation.cpp — parsing of CTest's resource-allocation variables for
// the GPU test fixture (gpu_allocation.hpp).
#include "check/gpu_allocation.hpp"

#include <cstdlib>
#include <string>

namespace mc::testing {

namespace {

// A non-negative decimal integer, the whole string; -1 otherwise.
long parse_index(const std::string& s) {
  if (s.empty() || s.size() > 9) return -1;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string quoted(const char* v) { return std::string("\"") + v + "\""; }

}  // namespace

GpuAllocation parse_gpu_allocation(const char* group_count, const char* group0_gpus,
                                   const char* spread) {
  GpuAllocation a;
  if (group_count == nullptr) {  // no resource spec file: allocation is off
    if (spread != nullptr && std::string(spread) == "1")
      a.error = "MAMBACHECK_GPU_SPREAD=1 removes the GPU tests' RESOURCE_LOCK, but ctest ran "
                "without --resource-spec-file (CTEST_RESOURCE_GROUP_COUNT is not set), so GPU "
                "tests would share device 0 unguarded; use the command printed by "
                "scripts/ctest_gpu_resources.sh";
    return a;
  }
  a.active = true;
  if (parse_index(group_count) < 1) {
    a.error = std::string("CTEST_RESOURCE_GROUP_COUNT = ") + quoted(group_count) +
              " violates count >= 1: this test has no RESOURCE_GROUPS, but a GPU test must "
              "declare RESOURCE_GROUPS \"gpus:1\" (validation/CMakeLists.txt)";
    return a;
  }
  if (group0_gpus == nullptr) {
    a.error = std::string("CTEST_RESOURCE_GROUP_COUNT = ") + group_count +
              " but CTEST_RESOURCE_GROUP_0_GPUS is not set: a GPU test must declare "
              "RESOURCE_GROUPS \"gpus:1\" (validation/CMakeLists.txt)";
    return a;
  }
  // "id:<id>,slots:<n>[;id:<id>,slots:<n>...]" — the first pair.
  std::string s(group0_gpus);
  s = s.substr(0, s.find(';'));
  const size_t comma = s.find(',');
  const std::string id_part = s.substr(0, comma);
  const std::string slots_part = comma == std::string::npos ? "" : s.substr(comma + 1);
  const long id = id_part.rfind("id:", 0) == 0 ? parse_index(id_part.substr(3)) : -1;
  const long slots = slots_part.rfind("slots:", 0) == 0 ? parse_index(slots_part.substr(6)) : -1;
  if (id < 0 || slots < 1) {
    a.error = std::string("CTEST_RESOURCE_GROUP_0_GPUS = ") + quoted(group0_gpus) +
              " is not of the form \"id:<CUDA device ordinal>,slots:<n>\" (the resource spec "
              "of scripts/ctest_gpu_resources.sh uses the ordinals 0..N-1 as ids)";
    return a;
  }
  a.device = int(id);
  return a;
}

const GpuAllocation& ctest_gpu_allocation() {
  static const GpuAllocation a = parse_gpu_allocation(std::getenv("CTEST_RESOURCE_GROUP_COUNT"),
                                                      std::getenv("CTEST_RESOURCE_GROUP_0_GPUS"),
                                                      std::getenv("MAMBACHECK_GPU_SPREAD"));
  return a;
}

}  // namespace mc::testing
