// validation/emulation/emulation_runtime.cuh — host-memory stand-ins for the few
// CUDA runtime calls the emulated programs make (test_scan_parity.cpp,
// scan_bits_dump.cpp), plus gpu_available()/select_device(), so that unmodified
// host code can run the scan kernels in the CPU emulation of emulation.cuh on a
// machine without a GPU or driver. Force-included into the program's own
// translation unit only (-include, validation/emulation/CMakeLists.txt); defines
// functions, so exactly one TU per program.
//
// Every device->host copy is hashed (FNV-1a, printed at exit as EMU_D2H_HASH and,
// when MC_SCAN_EMU_HASH_FILE names a file, written there too; the file is removed
// at start so that a run that dies leaves none). Running the suite with
// MC_SCAN_EMU_REVERSE=0 and =1 and getting the same hash shows that no result
// depends on the order of threads between barriers: ctest ScanEmulation.Parity
// records the ascending run's hash, ScanEmulation.ThreadOrderRace runs the
// descending order and compares (thread_order_race.cmake).
//
// Build and run: the CMake targets of validation/emulation (test_scan_emulated,
// scan_bits_emulated); ctest -L emulation. The T = 65536 case skips: the fake
// cudaMemGetInfo reports 8 GiB free.
#pragma once

#if !defined(MC_SCAN_HOST_EMULATION) || defined(__CUDACC__)
#error "validation/emulation/emulation_runtime.cuh is for host-compiler emulation builds only"
#endif

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace mc::kern::emu {

struct D2HHash {
  uint64_t h = 0xcbf29ce484222325ULL;
  size_t bytes = 0;
  const char* file = std::getenv("MC_SCAN_EMU_HASH_FILE");
  D2HHash() {
    if (file != nullptr) std::remove(file);
  }
  void add(const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 0x100000001b3ULL;
    bytes += n;
  }
  ~D2HHash() {
    char line[96];
    std::snprintf(line, sizeof line, "EMU_D2H_HASH %016llx over %zu bytes\n",
                  static_cast<unsigned long long>(h), bytes);
    std::fputs(line, stdout);
    if (file == nullptr) return;
    if (std::FILE* f = std::fopen(file, "w")) {
      std::fputs(line, f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "emulation: cannot write MC_SCAN_EMU_HASH_FILE '%s'\n", file);
    }
  }
};
inline D2HHash d2h_hash;

inline void copy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  std::memcpy(d, s, n);
  if (k == cudaMemcpyDeviceToHost) d2h_hash.add(d, n);
}

}  // namespace mc::kern::emu

extern "C" {
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  mc::kern::emu::copy(d, s, n, k);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) {
  mc::kern::emu::copy(d, s, n, k);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2D(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h,
                         cudaMemcpyKind k) {
  if (dp < w || sp < w) return cudaErrorInvalidPitchValue;
  for (size_t r = 0; r < h; ++r)
    mc::kern::emu::copy(static_cast<char*>(d) + r * dp, static_cast<const char*>(s) + r * sp, w, k);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "cudaErrorEmulated"; }
const char* cudaGetErrorString(cudaError_t) { return "emulated"; }
cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
  *free_b = size_t(8) << 30;
  *total_b = size_t(16) << 30;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) { return cudaSuccess; }
}

namespace mc::gpu {
bool gpu_available(std::string* reason) {
  if (reason) *reason = "CPU emulation of the scan kernels (validation/emulation/emulation.cuh)";
  return true;
}
void select_device(int) {}
}  // namespace mc::gpu
