// validation/emulation/emulation.cuh — CPU execution of the unmodified scan
// kernels (kernels/scan/), for checking kernel logic (indexing, chunking,
// carries, barrier placement) on a machine without a GPU, and for producing the
// reference bits that the device must reproduce on the routes whose arithmetic is
// fixed at the source level (ExpMath::Accurate, Chunked, Sequential: test
// validation/gpu/test_scan_emulation_bits.cpp). Test code: only compiled by a host
// compiler with -DMC_SCAN_HOST_EMULATION, and FORCE-INCLUDED (-include) into every
// emulated translation unit by validation/emulation/CMakeLists.txt, ahead of the
// kernel sources; the launch seam of kernels/scan/seed_common.cuh then uses this
// file's scan_detail::launch instead of the <<<>>> launch. Never part of the CUDA
// build, and no product file includes it.
//
// Model: a grid runs block after block; the threads of a block are fibers on one
// OS thread. On x86-64 they are switched by fiber_switch.cpp's few instructions;
// elsewhere, or with -DMC_EMU_UCONTEXT, by ucontext, whose swapcontext makes a
// sigprocmask system call at every switch (9 parity cases: 99 s, half of it in the
// kernel, against 10.8 s with the short switch; same bytes). A fiber runs until
// __syncthreads() or its end; when every live fiber of the block has reached the
// barrier, all of them are resumed. Between barriers the fibers run one after
// another, in ascending thread order or, with emu::set_reverse_order(true) or
// MC_SCAN_EMU_REVERSE=1 in the environment, descending — a kernel whose results
// depend on that order has a shared-memory race (a poor man's racecheck; ctest
// ScanEmulation.ThreadOrderRace). Shared memory is refilled with NaN before every
// block, so a read of never-written shared memory poisons the result. Not
// thread-safe; one launch at a time.
#pragma once
#define MC_SCAN_EMULATION_LOADED 1

#if !defined(MC_SCAN_HOST_EMULATION) || defined(__CUDACC__)
#error "validation/emulation/emulation.cuh is for host-compiler emulation builds only"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <ucontext.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && !defined(MC_EMU_UCONTEXT)
#define MC_EMU_FAST_SWITCH 1
// validation/emulation/fiber_switch.cpp: pushes the callee-saved registers, MXCSR and
// the x87 control word on the current stack, stores the stack pointer in *save_sp,
// loads load_sp and pops the same from there.
extern "C" void mc_emu_switch(void** save_sp, void* load_sp);
#else
#define MC_EMU_FAST_SWITCH 0
#endif

namespace mc::kern::emu {

// A suspended execution context: a stack pointer (fast switch) or a ucontext.
struct Context {
#if MC_EMU_FAST_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

// Saves the running context into `from` and resumes `to`.
inline void switch_context(Context& from, Context& to) {
#if MC_EMU_FAST_SWITCH
  mc_emu_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

// Makes `c` start `entry` (which must never return) on `stack` when switched to.
inline void make_context(Context& c, std::vector<char>& stack, void (*entry)()) {
#if MC_EMU_FAST_SWITCH
  // The frame mc_emu_switch pops, from the new stack pointer up: MXCSR and the x87
  // control word (this thread's), r15 r14 r13 r12 rbx rbp (zero), the return address
  // (entry). After the pop and ret the stack pointer is 8 mod 16, as at a call's entry.
  uintptr_t top = reinterpret_cast<uintptr_t>(stack.data() + stack.size()) & ~uintptr_t(15);
  auto* frame = reinterpret_cast<uint64_t*>(top - 72);
  uint32_t mxcsr;
  uint16_t fcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fcw));
  frame[0] = uint64_t(mxcsr) | (uint64_t(fcw) << 32);
  for (int i = 1; i <= 6; ++i) frame[i] = 0;
  frame[7] = reinterpret_cast<uint64_t>(entry);
  frame[8] = 0;  // where entry's own return address would be: it never returns
  c.sp = frame;
#else
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack.data();
  c.uc.uc_stack.ss_size = stack.size();
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
#endif
}

struct Fiber {
  Context ctx;
  std::vector<char> stack;
  uint3 tid;
  bool done = false;
  bool at_barrier = false;
};

struct BlockState {
  Context sched;
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  size_t smem_floats = 0;  // requested dynamic shared memory
  uint3 bid;
  dim3 bdim, gdim;
  bool reverse = false;
};

inline BlockState& state() {
  static BlockState s = [] {
    BlockState b;
    const char* r = std::getenv("MC_SCAN_EMU_REVERSE");  // start in reverse thread order
    b.reverse = r && *r && *r != '0';
    return b;
  }();
  return s;
}

inline void set_reverse_order(bool r) { state().reverse = r; }

// Shared memory of the running block (the kernels' `extern __shared__ float smem[]`).
constexpr size_t kSmemFloats = size_t(1) << 16;

inline void fiber_entry() {
  BlockState& s = state();
  (*s.body)();
  s.current->done = true;
  switch_context(s.current->ctx, s.sched);
  std::abort();  // a finished fiber is never resumed
}

inline void syncthreads() {
  BlockState& s = state();
  s.current->at_barrier = true;
  switch_context(s.current->ctx, s.sched);
}

inline void fill_smem_nan(size_t floats);  // defined after the smem array (scan_detail)

inline void run_grid(dim3 grid, dim3 block, const std::function<void()>& body) {
  BlockState& s = state();
  if (grid.y != 1 || grid.z != 1 || block.y != 1 || block.z != 1)
    throw std::runtime_error("emulation: only 1-D grids and blocks");
  const unsigned nt = block.x;
  s.fibers.resize(nt);
  for (auto& f : s.fibers)
    if (f.stack.size() < (1 << 16)) f.stack.resize(1 << 16);
  s.body = &body;
  s.bdim = block;
  s.gdim = grid;
  for (unsigned bx = 0; bx < grid.x; ++bx) {
    s.bid = uint3{bx, 0, 0};
    fill_smem_nan(s.smem_floats);
    for (unsigned i = 0; i < nt; ++i) {
      Fiber& f = s.fibers[i];
      f.tid = uint3{i, 0, 0};
      f.done = false;
      f.at_barrier = false;
      make_context(f.ctx, f.stack, fiber_entry);
    }
    for (;;) {
      for (unsigned k = 0; k < nt; ++k) {
        Fiber& f = s.fibers[s.reverse ? nt - 1 - k : k];
        if (f.done) continue;
        f.at_barrier = false;
        s.current = &f;
        switch_context(s.sched, f.ctx);
      }
      unsigned done = 0, waiting = 0;
      for (auto& f : s.fibers) {
        done += f.done;
        waiting += f.at_barrier;
      }
      if (done == nt) break;
      if (done != 0)
        throw std::runtime_error("emulation: __syncthreads reached by " + std::to_string(waiting) +
                                 " threads while " + std::to_string(done) + " had exited");
    }
  }
  s.current = nullptr;
}

}  // namespace mc::kern::emu

// The CUDA built-ins the kernels use, for the host compiler.
#define threadIdx (::mc::kern::emu::state().current->tid)
#define blockIdx (::mc::kern::emu::state().bid)
#define blockDim (::mc::kern::emu::state().bdim)
#define gridDim (::mc::kern::emu::state().gdim)
#define __launch_bounds__(...)
inline void __syncthreads() { ::mc::kern::emu::syncthreads(); }
inline float __ldg(const float* p) { return *p; }
inline __nv_bfloat16 __ldg(const __nv_bfloat16* p) { return *p; }
inline __half __ldg(const __half* p) { return *p; }
using std::max;
using std::min;

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }

// Vector loads through the read-only path.
inline float4 __ldg(const float4* p) { return *p; }
inline uint2 __ldg(const uint2* p) { return *p; }
inline uint4 __ldg(const uint4* p) { return *p; }

// Warp shuffles and __syncwarp. The emulated kernels call them with every thread of
// the block, in the same order (the checkpointed scan does), so a shuffle is:
// publish the value, block barrier, read the partner's, block barrier. The
// barriers make __syncwarp at least as strong as on the device.
namespace mc::kern::emu {
inline std::vector<float>& shfl_slots() {
  static std::vector<float> v;
  return v;
}
inline float shfl_from(float v, unsigned src_in_warp) {
  BlockState& s = state();
  const unsigned tid = s.current->tid.x;
  auto& slots = shfl_slots();
  if (slots.size() < s.bdim.x) slots.resize(s.bdim.x);
  slots[tid] = v;
  syncthreads();
  const unsigned src = (tid & ~31u) | (src_in_warp & 31u);
  const float r = src < s.bdim.x ? slots[src] : v;
  syncthreads();
  return r;
}
}  // namespace mc::kern::emu
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  return ::mc::kern::emu::shfl_from(
      v, (::mc::kern::emu::state().current->tid.x & 31u) ^ unsigned(lane_mask));
}
inline float __shfl_sync(unsigned, float v, int src_lane) {
  return ::mc::kern::emu::shfl_from(v, unsigned(src_lane));
}
inline void __syncwarp(unsigned = 0xffffffffu) { ::mc::kern::emu::syncthreads(); }

namespace mc::kern::scan_detail {

alignas(16) inline float smem[emu::kSmemFloats];

template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t,
            const A&... args) {
  if (smem_bytes > sizeof(smem))
    throw std::runtime_error("emulation: launch asks for " + std::to_string(smem_bytes) +
                             " B of shared memory");
  const std::tuple<std::decay_t<P>...> targs(args...);
  const std::function<void()> body = [&] { std::apply(kernel, targs); };
  emu::state().smem_floats = (smem_bytes + sizeof(float) - 1) / sizeof(float);
  emu::run_grid(grid, block, body);
}

}  // namespace mc::kern::scan_detail

inline void mc::kern::emu::fill_smem_nan(size_t floats) {
  for (size_t i = 0; i < floats && i < kSmemFloats; ++i)
    scan_detail::smem[i] = std::numeric_limits<float>::quiet_NaN();
}
