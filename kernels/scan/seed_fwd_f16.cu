// seed_fwd_f16.cu — explicit instantiation of the seed routes' forward selective scan
// for __half storage (one TU per dtype so nvcc compiles them in parallel).
#include "kernels/scan/seed_fwd.cuh"

MC_INSTANTIATE_SEED_FWD(__half)
