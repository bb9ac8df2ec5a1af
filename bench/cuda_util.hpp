// cuda_util.hpp — small CUDA host helpers for the benchmarks: an RAII device
// buffer, an event pair that times work enqueued on one stream, the L2
// scrubber that runs before every timed iteration (outside the timed region),
// and the device-to-device copy probe whose GB/s is the "peak" that every
// %-of-peak column refers to (measured in the same run, never a datasheet).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mc::bench {

// Device memory that frees itself. Allocation failure throws mc::gpu::CudaError
// naming the tensor, the bytes requested and the device's free/total memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// cudaEventRecord before and after the timed work on `stream`.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(cudaStream_t stream);
  void stop(cudaStream_t stream);
  double seconds();  // waits for the stop event

 private:
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

// Evicts the L2 between timed iterations: cudaMemsetAsync of a buffer twice
// the device's L2 size, enqueued before the start event (so it is not timed).
class L2Scrubber {
 public:
  explicit L2Scrubber(int device);
  void scrub(cudaStream_t stream);
  size_t l2_bytes() const { return l2_bytes_; }
  size_t buffer_bytes() const { return buf_.bytes(); }
  std::string policy() const;  // one sentence for the JSON context

 private:
  size_t l2_bytes_ = 0;
  DeviceBuffer buf_;
  unsigned iter_ = 0;
};

// Device-to-device cudaMemcpyAsync of `bytes` (one buffer to another), `reps`
// timed repetitions after one warm-up. GB/s counts read + write traffic,
// i.e. 2 * bytes / seconds (the same convention as the minimal-bytes formulas).
struct CopyProbe {
  size_t bytes = 0;
  int reps = 0;
  double best_gbps = 0;    // fastest repetition: the "peak" of %-of-peak columns
  double median_gbps = 0;
};
CopyProbe measure_d2d_copy(size_t bytes, int reps, cudaStream_t stream);

// cudaMemGetInfo of the current device.
void device_memory(size_t* free_bytes, size_t* total_bytes);

}  // namespace mc::bench
