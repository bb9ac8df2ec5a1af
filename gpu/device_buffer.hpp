// device_buffer.hpp — RAII device memory for the GPU pipeline. An allocation
// failure throws DeviceOutOfMemory naming the tensor, the bytes requested and
// the device's free/total memory (cudaMemGetInfo), never a bare error code.
// BufferPlan collects a model's allocations first, so a model that cannot fit
// is refused with its total size before anything is allocated.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/model.hpp"
#include "kernels/cuda_check.hpp"

namespace mc::gpu {

// Also an OutOfDeviceMemory (model.hpp), so callers without CUDA headers can
// tell "does not fit" from a failing kernel.
class DeviceOutOfMemory : public CudaError, public OutOfDeviceMemory {
 public:
  DeviceOutOfMemory(const std::string& msg, size_t bytes_requested)
      : CudaError(msg, cudaErrorMemoryAllocation),
        OutOfDeviceMemory(int64_t(bytes_requested)),
        bytes_requested(bytes_requested) {}
  size_t bytes_requested;
};

// cudaMalloc with a descriptive error; returns nullptr for 0 bytes.
void* device_alloc(size_t bytes, const std::string& name);
void device_free(void* p) noexcept;
// "free F of total T bytes" on the current device (best effort).
std::string device_memory_summary();

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t n, const std::string& name) { allocate(n, name); }
  ~DeviceBuffer() { device_free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }

  // Frees any previous allocation, then allocates n elements (uninitialised).
  void allocate(size_t n, const std::string& name) {
    reset();
    ptr_ = static_cast<T*>(device_alloc(n * sizeof(T), name));
    n_ = n;
    name_ = name;
  }
  void reset() noexcept {
    device_free(ptr_);
    ptr_ = nullptr;
    n_ = 0;
  }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  const std::string& name() const { return name_; }
  bool empty() const { return n_ == 0; }

  void zero(cudaStream_t s) {
    if (n_) MC_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, bytes(), s), "zero " + name_);
  }
  // Host -> device / device -> host of the first n elements (synchronous w.r.t. the host
  // for pageable memory; ordered on stream s).
  void upload(const T* host, size_t n, cudaStream_t s) {
    check_count(n, "upload");
    if (n) MC_CUDA_CHECK(cudaMemcpyAsync(ptr_, host, n * sizeof(T), cudaMemcpyHostToDevice, s),
                         "upload " + name_);
  }
  void download(T* host, size_t n, cudaStream_t s) const {
    check_count(n, "download");
    if (n) {
      MC_CUDA_CHECK(cudaMemcpyAsync(host, ptr_, n * sizeof(T), cudaMemcpyDeviceToHost, s),
                    "download " + name_);
      MC_CUDA_CHECK(cudaStreamSynchronize(s), "download " + name_);
    }
  }

 private:
  void check_count(size_t n, const char* what) const;
  void swap(DeviceBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    std::swap(name_, o.name_);
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
  std::string name_;
};

[[noreturn]] void throw_buffer_overrun(const std::string& name, const char* what, size_t n,
                                       size_t size);

template <class T>
void DeviceBuffer<T>::check_count(size_t n, const char* what) const {
  if (n > n_) throw_buffer_overrun(name_, what, n, n_);
}

// Two-phase allocation: add() records (buffer, count, name); allocate_all()
// checks the total against the free device memory (a clear error naming the
// total and the largest tensors when it cannot fit), then allocates each. With
// MAMBACHECK_MEMORY_PLAN=1 in the environment it first lists every buffer and its
// bytes on stderr (where a model's memory goes).
class BufferPlan {
 public:
  template <class T>
  void add(DeviceBuffer<T>& buf, size_t n, std::string name) {
    entries_.push_back({n * sizeof(T), name, [&buf, n, name] { buf.allocate(n, name); }});
  }
  size_t total_bytes() const;
  // (name, bytes) of every buffer added, in order (what allocate_all would allocate).
  std::vector<std::pair<std::string, size_t>> items() const;
  // what: e.g. "Model(d_model=768, L=4, B=8, T=2048, dtype=bf16)". Returns total bytes.
  size_t allocate_all(const std::string& what);

 private:
  struct Entry {
    size_t bytes;
    std::string name;
    std::function<void()> alloc;
  };
  std::vector<Entry> entries_;
};

}  // namespace mc::gpu
