// device_context.cpp — device discovery (gpu_available, device_count,
// device_info), cuBLAS error checking and the DeviceContext of a Model.
#include "gpu/device_context.hpp"

#include <atomic>
#include <sstream>

namespace mc::gpu {

// ---- discovery ---------------------------------------------------------------------

namespace {

struct Availability {
  bool ok = false;
  int count = 0;
  std::string reason;
};

// Queried once. Any error (no driver, no device, ...) or zero devices means
// "unavailable"; the error is cleared so later CUDA calls do not see it.
const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      r.reason = std::string("no CUDA device: ") + cudaGetErrorName(e) + " (" +
                 cudaGetErrorString(e) + ")";
      return r;
    }
    if (n <= 0) {
      r.reason = "no CUDA device: cudaGetDeviceCount reported 0 devices";
      return r;
    }
    r.ok = true;
    r.count = n;
    return r;
  }();
  return a;
}

void require_device_index(int device) {
  const Availability& a = availability();
  if (!a.ok) throw GpuUnavailable(a.reason);
  if (device < 0 || device >= a.count) {
    std::ostringstream os;
    os << "device = " << device << " violates 0 <= device < " << a.count
       << " (visible CUDA devices)";
    throw ConfigError(os.str());
  }
}

int attribute(cudaDeviceAttr attr, int device, const char* what) {
  int v = 0;
  MC_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device), what);
  return v;
}

int cublas_version() {
  int major = 0, minor = 0, patch = 0;
  MC_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &major), "cuBLAS version");
  MC_CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &minor), "cuBLAS version");
  MC_CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &patch), "cuBLAS version");
  return major * 10000 + minor * 100 + patch;  // the CUBLAS_VERSION encoding
}

}  // namespace

bool gpu_available(std::string* reason) {
  const Availability& a = availability();
  if (reason) *reason = a.reason;
  return a.ok;
}

int device_count() { return availability().ok ? availability().count : 0; }

namespace {
std::atomic<int> g_default_device{0};
}  // namespace

void select_device(int device) {
  require_device_index(device);
  MC_CUDA_CHECK(cudaSetDevice(device), "select_device " + std::to_string(device));
  g_default_device.store(device);
}

int default_device() { return g_default_device.load(); }

DeviceInfo device_info(int device) {
  require_device_index(device);
  cudaDeviceProp p{};
  MC_CUDA_CHECK(cudaGetDeviceProperties(&p, device), "device_info");
  DeviceInfo d;
  d.index = device;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.total_mem_bytes = int64_t(p.totalGlobalMem);
  MC_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version), "device_info");
  MC_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version), "device_info");
  d.cublas_version = cublas_version();
  // CUDA 13 removed cudaDeviceProp::clockRate / memoryClockRate: use attributes.
  d.sm_clock_khz = attribute(cudaDevAttrClockRate, device, "sm clock");
  d.mem_clock_khz = attribute(cudaDevAttrMemoryClockRate, device, "memory clock");
  d.mem_bus_width_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, device, "memory bus width");
  return d;
}

std::string DeviceInfo::to_string() const {
  std::ostringstream os;
  os << "GPU " << index << ": " << name << ", sm_" << cc_major << cc_minor << ", " << sm_count
     << " SMs, " << (total_mem_bytes >> 20) << " MiB, SM clock " << sm_clock_khz / 1000
     << " MHz, memory clock " << mem_clock_khz / 1000 << " MHz x " << mem_bus_width_bits
     << " bit, driver " << driver_version << ", runtime " << runtime_version << ", cuBLAS "
     << cublas_version;
  return os.str();
}

// ---- cuBLAS errors ---------------------------------------------------------------------

void check_cublas(cublasStatus_t s, const char* call, const std::string& ctx) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::ostringstream os;
  os << "cuBLAS " << cublasGetStatusName(s) << " (" << cublasGetStatusString(s) << ") in "
     << call;
  if (!ctx.empty()) os << " [" << ctx << "]";
  throw CublasError(os.str(), s);
}

// ---- DeviceContext ---------------------------------------------------------------------

DeviceContext::DeviceContext(int device, GemmMath math, size_t cublas_workspace)
    : device_(device), math_(math) {
  require_device_index(device);
  activate();
  MC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "model stream");
  try {
    MC_CUBLAS_CHECK(cublasCreate(&cublas_), "model cuBLAS handle");
    MC_CUBLAS_CHECK(cublasSetStream(cublas_, stream_), "bind cuBLAS to the model stream");
    workspace_.allocate(cublas_workspace, "cublas_workspace");
    MC_CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace_.get(), workspace_.bytes()),
                    "cuBLAS workspace");
    MC_CUBLAS_CHECK(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST), "pointer mode");
    MC_CUBLAS_CHECK(cublasSetAtomicsMode(cublas_, CUBLAS_ATOMICS_NOT_ALLOWED), "atomics mode");
    const int base = math == GemmMath::TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    MC_CUBLAS_CHECK(cublasSetMathMode(cublas_, static_cast<cublasMath_t>(
                                                   base | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                    std::string("math mode ") + to_string(math) +
                        " | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION");
  } catch (...) {
    if (cublas_) cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

DeviceContext::~DeviceContext() {
  cudaSetDevice(device_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void DeviceContext::activate() const {
  MC_CUDA_CHECK(cudaSetDevice(device_), "select the model's device");
}

}  // namespace mc::gpu
