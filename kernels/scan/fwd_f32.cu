// scan/fwd_f32.cu — explicit instantiation of scan::forward for f32 storage:
// the forward (all routes), one translation unit per dtype and direction so that nvcc
// compiles the kernel families in parallel.
#include "kernels/scan/dispatch.cuh"

template void mc::kern::scan::forward<float>(const mc::kern::scan::FwdParams<float>&, cudaStream_t);
