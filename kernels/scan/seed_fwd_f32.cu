// scan_fwd_f32.cu — explicit instantiation of the forward selective scan for
// float storage (one TU per dtype so nvcc compiles them in parallel).
#include "kernels/scan/seed_fwd.cuh"

namespace mc::kern {
using T = float;
template void scan_fwd<T>(bool, const ScanShape&, const T*, const T*, const T*, const T*,
                          const float*, const float*, float*, float*, T*, cudaStream_t);
}  // namespace mc::kern
