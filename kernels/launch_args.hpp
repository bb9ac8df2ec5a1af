// launch_args.hpp — host-side argument validation and launch geometry shared
// by the non-scan launchers. Every launcher validates its shape and pointers
// before launching, so a bad call is a clear mc::ConfigError naming the
// kernel, the field, the value and the limit — never a silent no-op.
//
// Launch geometry is a pure function of the shape (determinism rule, docs/DESIGN.md); the
// elementwise kernels' 16-byte packing also depends on pointer alignment, which cannot
// change their bits (each output element is computed alone).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>

#include "core/config.hpp"

namespace mc::kern {

// Threads per block of the 1-D elementwise kernels.
constexpr int kBlock1D = 256;
// Grid cap of the grid-stride kernels (enough blocks to fill any current GPU).
constexpr int64_t kMaxGrid1D = int64_t(1) << 16;

// ceil(n / kBlock1D) blocks, capped; the kernels loop with a 64-bit grid stride.
inline unsigned grid_1d(int64_t n) {
  const int64_t blocks = (n + kBlock1D - 1) / kBlock1D;
  return unsigned(std::max<int64_t>(1, std::min(blocks, kMaxGrid1D)));
}

// Geometry of the [R, N] row loops (MC_ROWS_COLS_LOOP of elementwise.cu): a block
// of whole warps covering up to kBlock1D columns (fewer for narrow rows), enough
// blocks in x to cover a row, and up to 65535 rows in y (the loop strides over
// the rest), the x·y product capped like grid_1d.
inline unsigned rows_cols_block(int64_t N) {
  const int64_t warps = std::max<int64_t>(1, std::min<int64_t>((N + 31) / 32, kBlock1D / 32));
  return unsigned(32 * warps);
}
inline dim3 rows_cols_grid(int64_t R, int64_t N) {
  const int64_t bx = std::max<int64_t>(
      1, std::min<int64_t>((N + rows_cols_block(N) - 1) / rows_cols_block(N), kMaxGrid1D));
  const int64_t by = std::max<int64_t>(1, std::min<int64_t>({R, int64_t(65535), kMaxGrid1D / bx}));
  return dim3(unsigned(bx), unsigned(by));
}

[[noreturn]] inline void fail_arg(const char* kernel, const char* field, int64_t value,
                                  const char* relation, int64_t limit, const char* why = "") {
  std::ostringstream os;
  os << kernel << ": " << field << " = " << value << " violates " << field << " " << relation
     << " " << limit;
  if (why && *why) os << " (" << why << ")";
  throw ConfigError(os.str());
}

// lo <= value <= hi
inline void require_range(const char* kernel, const char* field, int64_t value, int64_t lo,
                          int64_t hi, const char* why = "") {
  if (value < lo) fail_arg(kernel, field, value, ">=", lo, why);
  if (value > hi) fail_arg(kernel, field, value, "<=", hi, why);
}

inline void require_positive(const char* kernel, const char* field, int64_t value) {
  if (value < 1) fail_arg(kernel, field, value, ">=", 1);
}

// Whether a launch may move V elements at a time as 16-byte words: every length / row
// stride a multiple of V and every pointer 16-byte aligned (so every row start is too; a
// null pointer, for an absent tensor, passes).
inline bool packable(int V, std::initializer_list<int64_t> lengths,
                     std::initializer_list<const void*> ptrs) {
  for (int64_t n : lengths)
    if (n % V != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// A pointer the kernel dereferences (only checked when the tensor is non-empty).
inline void require_ptr(const char* kernel, const char* name, const void* p) {
  if (p == nullptr) throw ConfigError(std::string(kernel) + ": " + name + " is null");
}

}  // namespace mc::kern
