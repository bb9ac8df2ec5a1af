// scan_bwd.cuh — launcher of the backward selective scan: validates the shape and
// pointers (mc::ConfigError), picks the kernel and geometry, launches and
// checks. Defines the public template of seed.hpp; explicitly instantiated per
// dtype in seed_bwd_{f32,bf16,f16}.cu. Kernels in seed_bwd_kernels.cuh.
#pragma once

#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/scan/detail.hpp"
#include "kernels/scan/seed_bwd_kernels.cuh"

namespace mc::kern::scan_detail {

// ---- launcher ------------------------------------------------------------------------
// Returns the number of channel groups of the partials (ngrp) for the reduction.
template <class T>
int64_t launch_scan_bwd(bool parallel, const ScanShape& s, const BwdArgs<T>& args,
                        cudaStream_t stream) {
  const std::string name =
      std::string(parallel ? "scan_bwd_par_kernel<" : "scan_bwd_seq_kernel<") + dtype_name<T>() +
      ">";
  int64_t ngrp = s.di;
  if (parallel) {
    const ParGeom geo = bwd_par_geom(s);
    ngrp = bwd_groups(s, geo);
    const size_t smem = par_bwd_smem_floats(geo, s.ds) * sizeof(float);
    set_smem_limit(reinterpret_cast<const void*>(&scan_bwd_par_kernel<T>), smem,
                   par_bwd_smem_cap(), name.c_str());
    launch(&scan_bwd_par_kernel<T>, dim3(unsigned(s.B * ngrp)), dim3(geo.threads), smem, stream,
           args, geo);
  } else {
    const dim3 grid(unsigned((s.B * s.di + kSeqThreads - 1) / kSeqThreads));
    launch(&scan_bwd_seq_kernel<T>, grid, dim3(kSeqThreads), 0, stream, args);
  }
  MC_LAUNCH_CHECK(name.c_str());
  return ngrp;
}

}  // namespace mc::kern::scan_detail

namespace mc::kern {

// Definitions of the public entry points (seed.hpp); explicitly instantiated
// per dtype in seed_bwd_{f32,bf16,f16}.cu (MC_INSTANTIATE_SEED_BWD below).
template <class T>
void scan_bwd_chained(bool parallel, const ScanShape& s, const T* delta, const T* u, const T* Bm,
                      const T* Cm, const float* a_neg, const float* D, const float* h_saved,
                      const T* dy, const float* dh_final, T* d_delta, T* du, float* dB, float* dC,
                      float* dD, float* dA_log, float* dh0, void* scratch, cudaStream_t stream) {
  using namespace scan_detail;
  check_scan_shape(s, parallel);
  const char* fn = "scan_bwd";
  require_scan_inputs(fn, delta, u, Bm, Cm, a_neg, D);
  require_ptr(fn, "h_saved", h_saved);
  require_ptr(fn, "dy", dy);
  require_ptr(fn, "d_delta", d_delta);
  require_ptr(fn, "du", du);
  require_ptr(fn, "dB", dB);
  require_ptr(fn, "dC", dC);
  require_ptr(fn, "dD", dD);
  require_ptr(fn, "dA_log", dA_log);
  require_ptr(fn, "scratch", scratch);
  const BwdScratch sc = carve_bwd_scratch(s, scratch);
  const BwdArgs<T> args{s,  delta,      u,          Bm,         Cm,         a_neg,
                        D,  h_saved,    dy,         dh_final,   d_delta,    du,
                        sc.dB_part, sc.dC_part, sc.dAlog_part, sc.dD_part, dh0};
  const int64_t ngrp = launch_scan_bwd<T>(parallel, s, args, stream);
  // the checkpointed route's fixed-order reductions (reduce.cuh): dB/dC over the
  // channel groups into contiguous f32 rows, dA_log/dD over b (+=)
  // all of T in one pass: partial row = output row
  launch_reduce_bc<float>(sc.dB_part, sc.dC_part, dB, s.ds, dC, s.ds,
                          partial_rows(s.B, s.T, s.T, ngrp, s.ds), stream);
  launch_reduce_b(sc.dAlog_part, sc.dD_part, dA_log, dD, s.B, s.di, s.ds, stream);
}

template <class T>
void scan_bwd(bool parallel, const ScanShape& s, const T* delta, const T* u, const T* Bm,
              const T* Cm, const float* a_neg, const float* D, const float* h_saved, const T* dy,
              T* d_delta, T* du, float* dB, float* dC, float* dD, float* dA_log, float* dh0,
              void* scratch, cudaStream_t stream) {
  scan_bwd_chained<T>(parallel, s, delta, u, Bm, Cm, a_neg, D, h_saved, dy, nullptr, d_delta, du,
                      dB, dC, dD, dA_log, dh0, scratch, stream);
}

}  // namespace mc::kern

// The explicit instantiations of one storage type T (one translation unit per dtype).
#define MC_INSTANTIATE_SEED_BWD(T)                                                              \
  namespace mc::kern {                                                                          \
  template void scan_bwd<T>(bool, const ScanShape&, const T*, const T*, const T*, const T*,     \
                            const float*, const float*, const float*, const T*, T*, T*, float*, \
                            float*, float*, float*, float*, void*, cudaStream_t);               \
  template void scan_bwd_chained<T>(bool, const ScanShape&, const T*, const T*, const T*,       \
                                    const T*, const float*, const float*, const float*,         \
                                    const T*, const float*, T*, T*, float*, float*, float*,     \
                                    float*, float*, void*, cudaStream_t);                       \
  }
