// scan/fwd_bf16.cu — explicit instantiation of scan::forward for bf16 storage:
// the forward (all routes), one translation unit per dtype and direction so that nvcc
// compiles the kernel families in parallel.
#include "kernels/scan/dispatch.cuh"

template void mc::kern::scan::forward<__nv_bfloat16>(const mc::kern::scan::FwdParams<__nv_bfloat16>&, cudaStream_t);
