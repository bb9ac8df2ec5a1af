// seed_bwd_bf16.cu — explicit instantiation of the seed routes' backward selective scan
// for __nv_bfloat16 storage (one TU per dtype so nvcc compiles them in parallel).
#include "kernels/scan/seed_bwd.cuh"

MC_INSTANTIATE_SEED_BWD(__nv_bfloat16)
