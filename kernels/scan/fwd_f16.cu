// scan/fwd_f16.cu — explicit instantiation of scan::forward for f16 storage:
// the forward (all routes), one translation unit per dtype and direction so that nvcc
// compiles the kernel families in parallel.
#include "kernels/scan/dispatch.cuh"

template void mc::kern::scan::forward<__half>(const mc::kern::scan::FwdParams<__half>&, cudaStream_t);
