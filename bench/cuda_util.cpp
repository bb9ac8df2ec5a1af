// cuda_util.cpp — implementation of the benchmark CUDA helpers (cuda_util.hpp).
#include "bench/cuda_util.hpp"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "kernels/cuda_check.hpp"

namespace mc::bench {

void device_memory(size_t* free_bytes, size_t* total_bytes) {
  MC_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes), "bench: device memory query");
}

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : n_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&p_, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free allocation error
    size_t fr = 0, tot = 0;
    (void)cudaMemGetInfo(&fr, &tot);
    std::ostringstream ctx;
    ctx << "allocating " << what << ": " << bytes << " bytes requested, " << fr
        << " bytes free of " << tot;
    p_ = nullptr;
    n_ = 0;
    mc::gpu::check_cuda(e, "cudaMalloc", ctx.str(), __FILE__, __LINE__);
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (p_) (void)cudaFree(p_);  // destructors must not throw
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) (void)cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

EventTimer::EventTimer() {
  MC_CUDA_CHECK(cudaEventCreate(&a_), "bench: timer start event");
  MC_CUDA_CHECK(cudaEventCreate(&b_), "bench: timer stop event");
}

EventTimer::~EventTimer() {
  if (a_) (void)cudaEventDestroy(a_);
  if (b_) (void)cudaEventDestroy(b_);
}

void EventTimer::start(cudaStream_t stream) {
  MC_CUDA_CHECK(cudaEventRecord(a_, stream), "bench: record start event");
}

void EventTimer::stop(cudaStream_t stream) {
  MC_CUDA_CHECK(cudaEventRecord(b_, stream), "bench: record stop event");
}

double EventTimer::seconds() {
  MC_CUDA_CHECK(cudaEventSynchronize(b_), "bench: wait for the timed work");
  float ms = 0;
  MC_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_), "bench: event elapsed time");
  return double(ms) * 1e-3;
}

static size_t l2_size_of(int device) {
  int l2 = 0;
  MC_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device),
                "bench: L2 size query");
  return size_t(l2);
}

L2Scrubber::L2Scrubber(int device)
    : l2_bytes_(l2_size_of(device)),
      buf_(std::max<size_t>(2 * l2_size_of(device), size_t(1) << 20), "L2 scrub buffer") {}

void L2Scrubber::scrub(cudaStream_t stream) {
  // A changing byte value so the memset is never elided as a no-op rewrite.
  MC_CUDA_CHECK(cudaMemsetAsync(buf_.get(), int(++iter_ & 0xff), buf_.bytes(), stream),
                "bench: L2 scrub memset");
}

std::string L2Scrubber::policy() const {
  std::ostringstream os;
  os << "cold L2: cudaMemsetAsync of a " << buf_.bytes() << "-byte buffer (2x the "
     << l2_bytes_ << "-byte L2) on the same stream before every timed iteration, "
     << "outside the timed events; no buffer rotation";
  return os.str();
}

CopyProbe measure_d2d_copy(size_t bytes, int reps, cudaStream_t stream) {
  CopyProbe r;
  r.bytes = bytes;
  r.reps = reps;
  DeviceBuffer src(bytes, "copy probe source"), dst(bytes, "copy probe destination");
  MC_CUDA_CHECK(cudaMemsetAsync(src.get(), 1, bytes, stream), "bench: copy probe init");
  EventTimer timer;
  std::vector<double> gbps;
  for (int i = 0; i <= reps; ++i) {  // i == 0 is the warm-up
    timer.start(stream);
    MC_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream),
                  "bench: device-to-device copy probe");
    timer.stop(stream);
    const double s = timer.seconds();
    if (i > 0 && s > 0) gbps.push_back(2.0 * double(bytes) / s / 1e9);
  }
  if (!gbps.empty()) {
    std::sort(gbps.begin(), gbps.end());
    r.best_gbps = gbps.back();
    r.median_gbps = gbps[gbps.size() / 2];
  }
  return r;
}

}  // namespace mc::bench
