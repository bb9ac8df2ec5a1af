// gpu_allocation.hpp — which GPU a test process runs on, so that CTest can spread
// the GPU tests over every visible GPU.
//
// `MAMBACHECK_GPU_SPREAD=1 ctest -L gpu --resource-spec-file <spec> -j N`
// (spec and command from scripts/ctest_gpu_resources.sh) runs the GPU tests
// side by side, one per GPU: every GPU test declares RESOURCE_GROUPS
// "gpus:1" (validation/CMakeLists.txt) and CTest tells each process its GPU:
//   CTEST_RESOURCE_GROUP_COUNT=1
//   CTEST_RESOURCE_GROUP_0_GPUS=id:<CUDA ordinal>,slots:1
// Without a spec file those variables are absent (CTest ignores
// RESOURCE_GROUPS, ctest(1) "Resource Allocation"): the test uses device 0 and
// RESOURCE_LOCK gpu keeps GPU tests from overlapping. MAMBACHECK_GPU_SPREAD=1
// drops that lock, so without a spec file it is refused (tests would share
// device 0 unguarded). GpuTest (gpu_test.hpp) applies this. No CUDA here.
#pragma once

#include <string>

namespace mc::testing {

struct GpuAllocation {
  bool active = false;  // CTest resource allocation is on for this process
  int device = 0;       // the CUDA ordinal to use (0 when not active)
  std::string error;    // non-empty: unusable (names the variable, its value, what was expected)
};

// From the variables' values (nullptr = unset): CTEST_RESOURCE_GROUP_COUNT,
// CTEST_RESOURCE_GROUP_0_GPUS, MAMBACHECK_GPU_SPREAD. Group 0 is used; of
// several "id:..,slots:.." pairs (a test given more than one GPU) the first.
GpuAllocation parse_gpu_allocation(const char* group_count, const char* group0_gpus,
                                   const char* spread = nullptr);

// parse_gpu_allocation of this process's environment (read once, cached).
const GpuAllocation& ctest_gpu_allocation();

}  // namespace mc::testing
