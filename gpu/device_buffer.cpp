// device_buffer.cpp — allocation with descriptive out-of-memory errors and the
// two-phase BufferPlan of device_buffer.hpp.
#include "gpu/device_buffer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace mc::gpu {

std::string device_memory_summary() {
  size_t free_b = 0, total_b = 0;
  const cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear: this is a best-effort summary
    return std::string("device memory unknown (cudaMemGetInfo: ") + cudaGetErrorName(e) + ")";
  }
  std::ostringstream os;
  os << "device has " << free_b << " bytes free of " << total_b << " total";
  return os.str();
}

void* device_alloc(size_t bytes, const std::string& name) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    std::ostringstream os;
    os << "cudaMalloc of " << bytes << " bytes for tensor '" << name << "' failed: "
       << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << "); " << device_memory_summary();
    throw DeviceOutOfMemory(os.str(), bytes);
  }
  return p;
}

void device_free(void* p) noexcept {
  if (p) cudaFree(p);  // errors on free are deliberately ignored (destructors must not throw)
}

void throw_buffer_overrun(const std::string& name, const char* what, size_t n, size_t size) {
  std::ostringstream os;
  os << what << " of " << n << " elements into device tensor '" << name << "' of " << size
     << " elements";
  throw std::out_of_range(os.str());
}

size_t BufferPlan::total_bytes() const {
  size_t t = 0;
  for (const auto& e : entries_) t += e.bytes;
  return t;
}

std::vector<std::pair<std::string, size_t>> BufferPlan::items() const {
  std::vector<std::pair<std::string, size_t>> v;
  for (const auto& e : entries_) v.emplace_back(e.name, e.bytes);
  return v;
}

size_t BufferPlan::allocate_all(const std::string& what) {
  const size_t total = total_bytes();
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && total > free_b) {
    std::vector<const Entry*> big;
    for (const auto& e : entries_) big.push_back(&e);
    std::sort(big.begin(), big.end(), [](const Entry* a, const Entry* b) { return a->bytes > b->bytes; });
    std::ostringstream os;
    os << what << " needs " << total << " bytes of device memory but the device has " << free_b
       << " bytes free of " << total_b << " total; largest tensors:";
    for (size_t i = 0; i < big.size() && i < 4; ++i)
      os << " " << big[i]->name << " (" << big[i]->bytes << " B)";
    throw DeviceOutOfMemory(os.str(), total);
  }
  cudaGetLastError();
  if (const char* v = std::getenv("MAMBACHECK_MEMORY_PLAN"); v && *v && *v != '0') {
    std::fprintf(stderr, "[memory plan] %s: %zu bytes in %zu buffers\n", what.c_str(), total,
                 entries_.size());
    for (const auto& e : entries_)
      std::fprintf(stderr, "[memory plan]   %-34s %14zu\n", e.name.c_str(), e.bytes);
  }
  for (auto& e : entries_) e.alloc();
  entries_.clear();
  return total;
}

}  // namespace mc::gpu
