// scan/bwd_f32.cu — explicit instantiation of scan::backward for f32 storage:
// the backward (all routes), one translation unit per dtype and direction so that nvcc
// compiles the kernel families in parallel.
#include "kernels/scan/dispatch.cuh"

template void mc::kern::scan::backward<float>(const mc::kern::scan::BwdParams<float>&, cudaStream_t);
