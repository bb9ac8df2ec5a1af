// scan_bwd_f32.cu — explicit instantiation of the backward selective scan for
// float storage (one TU per dtype so nvcc compiles them in parallel).
#include "kernels/scan/seed_bwd.cuh"

namespace mc::kern {
using T = float;
template void scan_bwd<T>(bool, const ScanShape&, const T*, const T*, const T*, const T*,
                          const float*, const float*, const float*, const T*, T*, T*, float*,
                          float*, float*, float*, float*, void*, cudaStream_t);
template void scan_bwd_chained<T>(bool, const ScanShape&, const T*, const T*, const T*,
                                  const T*, const float*, const float*, const float*, const T*,
                                  const float*, T*, T*, float*, float*, float*, float*, float*,
                                  void*, cudaStream_t);
}  // namespace mc::kern
