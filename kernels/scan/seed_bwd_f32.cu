// seed_bwd_f32.cu — explicit instantiation of the seed routes' backward selective scan
// for float storage (one TU per dtype so nvcc compiles them in parallel).
#include "kernels/scan/seed_bwd.cuh"

MC_INSTANTIATE_SEED_BWD(float)
