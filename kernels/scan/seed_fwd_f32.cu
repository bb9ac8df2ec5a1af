// seed_fwd_f32.cu — explicit instantiation of the seed routes' forward selective scan
// for float storage (one TU per dtype so nvcc compiles them in parallel).
#include "kernels/scan/seed_fwd.cuh"

MC_INSTANTIATE_SEED_FWD(float)
