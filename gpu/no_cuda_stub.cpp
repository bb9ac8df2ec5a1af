// no_cuda_stub.cpp — the GPU API of pipeline.hpp for builds without a CUDA
// toolkit: gpu_available() says so, and constructing a Model throws.
#include "pipeline.hpp"

namespace mc::gpu {

static const char* kReason = "no CUDA device: mambacheck was built without a CUDA toolkit";

bool gpu_available(std::string* reason) {
  if (reason) *reason = kReason;
  return false;
}
int device_count() { return 0; }
DeviceInfo device_info(int) { throw GpuUnavailable(kReason); }
std::string DeviceInfo::to_string() const { return name; }
const char* to_string(GemmMath g) { return g == GemmMath::TF32 ? "tf32" : "f32"; }

struct Model::Impl {};
Model::Model(const ModelConfig&, int64_t, int64_t, const RunOptions&) { throw GpuUnavailable(kReason); }
Model::~Model() = default;

}  // namespace mc::gpu
