// scan/bwd_f16.cu — explicit instantiation of scan::backward for f16 storage:
// the backward (all routes), one translation unit per dtype and direction so that nvcc
// compiles the kernel families in parallel.
#include "kernels/scan/dispatch.cuh"

template void mc::kern::scan::backward<__half>(const mc::kern::scan::BwdParams<__half>&, cudaStream_t);
