// scan/bwd_bf16.cu — explicit instantiation of scan::backward for bf16 storage:
// the backward (all routes), one translation unit per dtype and direction so that nvcc
// compiles the kernel families in parallel.
#include "kernels/scan/dispatch.cuh"

template void mc::kern::scan::backward<__nv_bfloat16>(const mc::kern::scan::BwdParams<__nv_bfloat16>&, cudaStream_t);
