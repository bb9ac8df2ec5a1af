// testing_busy_load.cuh — TEST-ONLY background GPU load for the determinism
// suite's "under load" check (the bits must not change while other work
// shares the GPU): a host thread with its own
// device and non-blocking stream keeps launching a long memory-bound kernel
// (a streaming read-modify-write over two large buffers, grid sized to fill
// every SM) until stopped, so the checked runs share SMs, L2 and DRAM
// bandwidth with unrelated work and their blocks are scheduled differently.
// Host-only interface (no CUDA types); built into mc_testing_kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mc::testing {

class GpuBusyLoad {
 public:
  // Starts the load on `device` with two buffers of `bytes` each and returns
  // once its first kernel has completed (or the thread failed: see error()).
  explicit GpuBusyLoad(int device, size_t bytes = size_t(256) << 20);
  ~GpuBusyLoad();  // stop()
  GpuBusyLoad(const GpuBusyLoad&) = delete;
  GpuBusyLoad& operator=(const GpuBusyLoad&) = delete;

  // Stops launching, waits for the thread, frees the buffers. Idempotent.
  void stop();
  // Kernels the load has completed so far (read while it runs).
  int64_t kernels_completed() const;
  // Microseconds of one load kernel (the first, timed with events).
  double kernel_us() const;
  // Empty unless the load thread hit an error (it then stopped early).
  std::string error() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mc::testing
