// scan_fwd.cuh — launcher of the forward selective scan: validates the shape and
// pointers (mc::ConfigError), picks the kernel and geometry, launches and
// checks. Defines the public template of seed.hpp; explicitly instantiated per
// dtype in seed_fwd_{f32,bf16,f16}.cu. Kernels in seed_fwd_kernels.cuh.
#pragma once

#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/scan/seed_fwd_kernels.cuh"

namespace mc::kern::scan_detail {

// ---- launcher ------------------------------------------------------------------------
template <class T>
void launch_scan_fwd(bool parallel, const ScanShape& s, const FwdArgs<T>& args,
                     cudaStream_t stream) {
  const bool save = args.h_saved != nullptr;
  const std::string name = std::string(parallel ? "scan_fwd_par_kernel<" : "scan_fwd_seq_kernel<") +
                           dtype_name<T>() + (save ? ",save>" : ",nosave>");
  if (parallel) {
    const ParGeom geo = par_geom(s.T, s.ds);
    const size_t smem = par_fwd_smem_floats(geo, s.ds) * sizeof(float);
    const dim3 grid(unsigned(s.B * s.di));
    if (save) {
      set_smem_limit(reinterpret_cast<const void*>(&scan_fwd_par_kernel<T, true>), smem,
                     par_fwd_smem_cap(), name.c_str());
      launch(&scan_fwd_par_kernel<T, true>, grid, dim3(geo.threads), smem, stream, args, geo);
    } else {
      set_smem_limit(reinterpret_cast<const void*>(&scan_fwd_par_kernel<T, false>), smem,
                     par_fwd_smem_cap(), name.c_str());
      launch(&scan_fwd_par_kernel<T, false>, grid, dim3(geo.threads), smem, stream, args, geo);
    }
  } else {
    const dim3 grid(unsigned((s.B * s.di + kSeqThreads - 1) / kSeqThreads));
    const bool vec4 =
        save && s.ds % 4 == 0 && reinterpret_cast<uintptr_t>(args.h_saved) % 16 == 0;
    if (save)
      launch(&scan_fwd_seq_kernel<T, true>, grid, dim3(kSeqThreads), 0, stream, args, vec4);
    else
      launch(&scan_fwd_seq_kernel<T, false>, grid, dim3(kSeqThreads), 0, stream, args, false);
  }
  MC_LAUNCH_CHECK(name.c_str());
}

}  // namespace mc::kern::scan_detail

namespace mc::kern {

// Definition of the public entry point (seed.hpp); explicitly instantiated per
// dtype in seed_fwd_{f32,bf16,f16}.cu (MC_INSTANTIATE_SEED_FWD below).
template <class T>
void scan_fwd(bool parallel, const ScanShape& s, const T* delta, const T* u, const T* Bm,
              const T* Cm, const float* a_neg, const float* D, float* h, float* h_saved, T* y,
              cudaStream_t stream) {
  using namespace scan_detail;
  check_scan_shape(s, parallel);
  const char* fn = "scan_fwd";
  require_scan_inputs(fn, delta, u, Bm, Cm, a_neg, D);
  require_ptr(fn, "h", h);
  require_ptr(fn, "y", y);
  launch_scan_fwd<T>(parallel, s, FwdArgs<T>{s, delta, u, Bm, Cm, a_neg, D, h, h_saved, y},
                     stream);
}

}  // namespace mc::kern

// The explicit instantiation of one storage type T (one translation unit per dtype).
#define MC_INSTANTIATE_SEED_FWD(T)                                                          \
  namespace mc::kern {                                                                      \
  template void scan_fwd<T>(bool, const ScanShape&, const T*, const T*, const T*, const T*, \
                            const float*, const float*, float*, float*, T*, cudaStream_t);  \
  }
