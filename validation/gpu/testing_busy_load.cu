// testing_busy_load.cu — the background load thread of testing_busy_load.cuh.
#include "validation/gpu/testing_busy_load.cuh"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "kernels/cuda_check.hpp"

namespace mc::testing {

namespace {

constexpr int kThreads = 256;
constexpr int kPasses = 4;        // passes over the buffers per launch (~1 ms on an H200)
constexpr int kInFlight = 2;      // launches queued before the thread waits

// dst [n4] float4 = 0.5 * (src + dst), kPasses times: 3 x 16 B of DRAM
// traffic per element and pass, nothing else. Values stay finite (zeros).
__global__ void busy_stream_kernel(const float4* __restrict__ src, float4* __restrict__ dst,
                                   int64_t n4) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int p = 0; p < kPasses; ++p)
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
      const float4 a = src[i];
      float4 b = dst[i];
      b.x = 0.5f * (a.x + b.x);
      b.y = 0.5f * (a.y + b.y);
      b.z = 0.5f * (a.z + b.z);
      b.w = 0.5f * (a.w + b.w);
      dst[i] = b;
    }
}

}  // namespace

struct GpuBusyLoad::Impl {
  int device = 0;
  size_t bytes = 0;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> completed{0};
  std::atomic<double> first_us{0.0};
  mutable std::mutex mu;
  std::condition_variable started_cv;
  bool started = false;  // first kernel done or failed (guarded by mu)
  std::string error;     // guarded by mu
  std::thread thread;

  void fail(const std::string& msg) {
    std::lock_guard<std::mutex> g(mu);
    error = msg;
    started = true;
    started_cv.notify_all();
  }

  void run() {
    float4* src = nullptr;
    float4* dst = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    try {
      MC_CUDA_CHECK(cudaSetDevice(device), "busy load: select device");
      MC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "busy load stream");
      MC_CUDA_CHECK(cudaEventCreate(&e0), "busy load event");
      MC_CUDA_CHECK(cudaEventCreate(&e1), "busy load event");
      MC_CUDA_CHECK(cudaMalloc(&src, bytes), "busy load: " + std::to_string(bytes) + " B");
      MC_CUDA_CHECK(cudaMalloc(&dst, bytes), "busy load: " + std::to_string(bytes) + " B");
      MC_CUDA_CHECK(cudaMemsetAsync(src, 0, bytes, stream), "busy load: zero src");
      MC_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream), "busy load: zero dst");
      int sms = 0;
      MC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                    "busy load: SM count");
      const int64_t n4 = int64_t(bytes / sizeof(float4));
      const unsigned blocks = unsigned(sms) * 8;  // every SM, several resident blocks each
      // first launch, timed: the constructor returns once it is done
      MC_CUDA_CHECK(cudaEventRecord(e0, stream), "busy load: event");
      busy_stream_kernel<<<blocks, kThreads, 0, stream>>>(src, dst, n4);
      MC_LAUNCH_CHECK("busy_stream_kernel");
      MC_CUDA_CHECK(cudaEventRecord(e1, stream), "busy load: event");
      MC_CUDA_CHECK(cudaEventSynchronize(e1), "busy load: first kernel");
      float ms = 0.f;
      MC_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1), "busy load: time");
      first_us = 1e3 * double(ms);
      completed = 1;
      {
        std::lock_guard<std::mutex> g(mu);
        started = true;
      }
      started_cv.notify_all();
      while (!stop.load()) {
        for (int k = 0; k < kInFlight; ++k) {
          busy_stream_kernel<<<blocks, kThreads, 0, stream>>>(src, dst, n4);
          MC_LAUNCH_CHECK("busy_stream_kernel");
        }
        MC_CUDA_CHECK(cudaStreamSynchronize(stream), "busy load: wait");
        completed += kInFlight;
      }
    } catch (const std::exception& e) {
      fail(std::string("background load thread: ") + e.what());
    }
    if (stream) cudaStreamSynchronize(stream);
    cudaFree(src);
    cudaFree(dst);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (stream) cudaStreamDestroy(stream);
  }
};

GpuBusyLoad::GpuBusyLoad(int device, size_t bytes) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->bytes = bytes - bytes % sizeof(float4);
  Impl* p = impl_.get();
  impl_->thread = std::thread([p] { p->run(); });
  std::unique_lock<std::mutex> lk(impl_->mu);
  impl_->started_cv.wait(lk, [this] { return impl_->started; });
}

GpuBusyLoad::~GpuBusyLoad() { stop(); }

void GpuBusyLoad::stop() {
  impl_->stop = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

int64_t GpuBusyLoad::kernels_completed() const { return impl_->completed.load(); }

double GpuBusyLoad::kernel_us() const { return impl_->first_us.load(); }

std::string GpuBusyLoad::error() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->error;
}

}  // namespace mc::testing
