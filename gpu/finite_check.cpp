// finite_check.cpp — NonFiniteError construction for FiniteChecker.
#include "gpu/finite_check.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <sstream>
#include <type_traits>

#include "kernels/reduce.cuh"

namespace mc::gpu {

namespace {

float host_f32(float x) { return x; }
float host_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
float host_f32(__half x) { return __half2float(x); }

template <class T>
const char* storage_name() {
  if (std::is_same<T, __half>::value) return "f16";
  if (std::is_same<T, __nv_bfloat16>::value) return "bf16";
  return "f32";
}

}  // namespace

void FiniteChecker::plan(BufferPlan& plan, int64_t max_elements) {
  if (!enabled_) return;
  max_elements_ = max_elements;
  plan.add(scratch_, kern::first_nonfinite_scratch_bytes(max_elements), "finite_check_scratch");
}

template <class T>
void FiniteChecker::check(const char* step, int layer, const char* tensor, const T* p, int64_t n) {
  scan(step, layer, tensor, p, n, storage_name<T>(), std::is_same<T, __half>::value);
}

template <class R>
void FiniteChecker::check_rounded(const char* step, int layer, const char* tensor, const float* p,
                                  int64_t n) {
  const std::string storage = std::string("f32 holding ") + storage_name<R>() + "-rounded values";
  scan(step, layer, tensor, p, n, storage.c_str(), std::is_same<R, __half>::value);
}

// The inputs of this step were checked before it ran: a non-finite output whose
// values are f16 (stored or rounded) of finite inputs is an overflow of f16.
template <class T>
void FiniteChecker::scan(const char* step, int layer, const char* tensor, const T* p, int64_t n,
                         const char* storage, bool overflow) {
  if (!enabled_ || n == 0) return;
  if (n > max_elements_) {
    std::ostringstream os;
    os << "finite check of " << tensor << ": " << n << " elements exceed the reserved "
       << max_elements_;
    throw std::logic_error(os.str());
  }
  const int64_t idx = kern::first_nonfinite(p, n, scratch_.get(), stream_);
  if (idx < 0) return;
  T v{};
  MC_CUDA_CHECK(cudaMemcpy(&v, p + idx, sizeof(T), cudaMemcpyDeviceToHost), "non-finite value");
  std::ostringstream os;
  os << "non-finite value " << host_f32(v) << " in " << tensor << " [" << storage
     << "] at flat index " << idx << " of " << n << ", after step " << step;
  if (layer >= 0) os << " of layer " << layer;
  if (overflow) os << " (inputs were finite: f16 storage overflow)";
  std::string step_name = step;
  if (layer >= 0) step_name = "layer " + std::to_string(layer) + " " + step;
  throw NonFiniteError(os.str(), step_name, tensor, idx, overflow);
}

template void FiniteChecker::check<float>(const char*, int, const char*, const float*, int64_t);
template void FiniteChecker::check<__nv_bfloat16>(const char*, int, const char*,
                                                  const __nv_bfloat16*, int64_t);
template void FiniteChecker::check<__half>(const char*, int, const char*, const __half*, int64_t);
template void FiniteChecker::check_rounded<float>(const char*, int, const char*, const float*,
                                                  int64_t);
template void FiniteChecker::check_rounded<__nv_bfloat16>(const char*, int, const char*,
                                                          const float*, int64_t);
template void FiniteChecker::check_rounded<__half>(const char*, int, const char*, const float*,
                                                   int64_t);

}  // namespace mc::gpu
