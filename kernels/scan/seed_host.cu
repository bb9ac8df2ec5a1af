// scan_host.cu — host side of the selective scan: shape validation with
// field/value/limit messages, the backward scratch layout, the traffic model
// (minimal bytes) used by the benchmarks, and small launch helpers.
#include <sstream>
#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/scan/seed_common.cuh"

namespace mc::kern {

namespace {

[[noreturn]] void fail(bool parallel, const char* field, int64_t value, const char* relation,
                       int64_t limit, const char* why) {
  std::ostringstream os;
  os << "scan (" << (parallel ? "parallel" : "sequential") << "): " << field << " = " << value
     << " violates " << field << " " << relation << " " << limit;
  if (why && *why) os << " (" << why << ")";
  throw ConfigError(os.str());
}

void require_range(bool parallel, const char* field, int64_t v, int64_t lo, int64_t hi,
                   const char* why = "") {
  if (v < lo) fail(parallel, field, v, ">=", lo, why);
  if (v > hi) fail(parallel, field, v, "<=", hi, why);
}

// 2^60 elements: every 64-bit index and byte count of the scan stays far from overflow.
constexpr int64_t kMaxScanElements = int64_t(1) << 60;

}  // namespace

void check_scan_shape(const ScanShape& s, bool parallel) {
  require_range(parallel, "batch", s.B, 1, Limits::kMaxBatch);
  require_range(parallel, "seq_len", s.T, 1, Limits::kMaxSeqLen);
  require_range(parallel, "d_inner", s.di, 1, Limits::kMaxDInner);
  if (parallel)
    require_range(parallel, "d_state", s.ds, 1, Limits::kMaxDState,
                  "the parallel scan keeps per-state segment aggregates in shared memory");
  else
    require_range(parallel, "d_state", s.ds, 1, Limits::kMaxSeqScanDState,
                  "the sequential scan holds the state in registers; use the parallel scan "
                  "(ScanMode::Auto selects it for d_state > 64)");
  require_range(parallel, "ld_bc", s.ld_bc, s.ds, int64_t(1) << 31, "row stride of Bm/Cm");
  // B*(T+1)*di*ds without overflow: each factor is bounded above, so check stepwise.
  const unsigned __int128 elems =
      (unsigned __int128)(s.B) * (unsigned __int128)(s.T + 1) * (unsigned __int128)(s.di) *
      (unsigned __int128)(s.ds);
  if (elems > (unsigned __int128)kMaxScanElements) {
    std::ostringstream os;
    os << "scan: batch*(seq_len+1)*d_inner*d_state = " << s.B << "*" << (s.T + 1) << "*" << s.di
       << "*" << s.ds << " violates <= 2^60 elements (h_saved size)";
    throw ConfigError(os.str());
  }
  if (parallel) {
    // one block per (b, d) on grid.x
    require_range(parallel, "batch*d_inner", s.B * s.di, 1, int64_t(0x7fffffff),
                  "one block per (b, d) on gridDim.x");
  }
}

// ---- scratch --------------------------------------------------------------------
namespace scan_detail {

void bwd_scratch_offsets(const ScanShape& s, size_t off[5]) {
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  const size_t part = size_t(s.B) * size_t(s.T) * size_t(s.di) * size_t(s.ds) * sizeof(float);
  off[0] = 0;                                                                       // dB_part
  off[1] = align(off[0] + part);                                                    // dC_part
  off[2] = align(off[1] + part);                                                    // dAlog_part
  off[3] = align(off[2] + size_t(s.B) * size_t(s.di) * size_t(s.ds) * sizeof(float));  // dD_part
  off[4] = align(off[3] + size_t(s.B) * size_t(s.di) * sizeof(float));              // total
}

BwdScratch carve_bwd_scratch(const ScanShape& s, void* scratch) {
  if (reinterpret_cast<uintptr_t>(scratch) % 16 != 0)
    throw ConfigError("scan_bwd: scratch must be 16-byte aligned (cudaMalloc memory is)");
  size_t off[5];
  bwd_scratch_offsets(s, off);
  char* base = static_cast<char*>(scratch);
  return BwdScratch{reinterpret_cast<float*>(base + off[0]), reinterpret_cast<float*>(base + off[1]),
                    reinterpret_cast<float*>(base + off[2]), reinterpret_cast<float*>(base + off[3])};
}

void require_ptr(const char* fn, const char* name, const void* p) {
  if (p == nullptr) throw ConfigError(std::string(fn) + ": " + name + " is null");
}

}  // namespace scan_detail

ScanGeometry scan_geometry(const ScanShape& s, bool parallel, bool backward) {
  check_scan_shape(s, parallel);
  ScanGeometry g;
  if (parallel) {
    const scan_detail::ParGeom pg =
        backward ? scan_detail::bwd_par_geom(s) : scan_detail::par_geom(s.T, s.ds);
    g.threads = pg.threads;
    g.lanes = pg.sw;
    g.segments = pg.groups;
    g.items = scan_detail::kItems;
    g.chunk = pg.chunk;
    g.channels_per_block = pg.dt;
    g.blocks = s.B * scan_detail::bwd_groups(s, pg);
    g.smem_bytes = sizeof(float) * (backward ? scan_detail::par_bwd_smem_floats(pg, s.ds)
                                             : scan_detail::par_fwd_smem_floats(pg, s.ds));
  } else {
    g.threads = scan_detail::kSeqThreads;
    g.lanes = 1;
    g.segments = 1;
    g.items = int(s.T < (int64_t(1) << 30) ? s.T : (int64_t(1) << 30));
    g.chunk = s.T;
    g.blocks = (s.B * s.di + scan_detail::kSeqThreads - 1) / scan_detail::kSeqThreads;
  }
  return g;
}

size_t scan_bwd_scratch_bytes(const ScanShape& s) {
  size_t off[5];
  scan_detail::bwd_scratch_offsets(s, off);
  return off[4];
}

// ---- traffic model (formulas documented in seed.hpp) ----------------------------------
size_t scan_fwd_min_bytes(const ScanShape& s, int e, bool save) {
  const size_t BT = size_t(s.B) * size_t(s.T), di = size_t(s.di), ds = size_t(s.ds);
  const size_t S = size_t(s.B) * di * ds;
  size_t bytes = 2 * BT * di * e      // delta, u
                 + 2 * BT * ds * e    // Bm, Cm
                 + 4 * (di * ds + di) // a_neg, D
                 + 4 * S              // h in
                 + BT * di * e        // y
                 + 4 * S;             // h out
  if (save) bytes += 4 * size_t(s.B) * size_t(s.T + 1) * di * ds;  // h_saved
  return bytes;
}

size_t scan_bwd_min_bytes(const ScanShape& s, int e, bool with_dh0) {
  const size_t BT = size_t(s.B) * size_t(s.T), di = size_t(s.di), ds = size_t(s.ds);
  size_t bytes = 3 * BT * di * e                                  // delta, u, dy
                 + 2 * BT * ds * e                                // Bm, Cm
                 + 4 * (di * ds + di)                             // a_neg, D
                 + 4 * size_t(s.B) * size_t(s.T + 1) * di * ds    // h_saved
                 + 2 * BT * di * e                                // d_delta, du
                 + 2 * 4 * BT * ds                                // dB, dC
                 + 2 * 4 * (di + di * ds);                        // dD, dA_log (read + write)
  if (with_dh0) bytes += 4 * size_t(s.B) * di * ds;
  return bytes;
}

size_t scan_bwd_extra_bytes(const ScanShape& s, bool parallel) {
  check_scan_shape(s, parallel);
  const int64_t ngrp =
      parallel ? scan_detail::bwd_groups(s, scan_detail::bwd_par_geom(s)) : s.di;
  const size_t part = size_t(s.B) * size_t(s.T) * size_t(ngrp) * size_t(s.ds) * 4;
  const size_t per_b = size_t(s.B) * size_t(s.di) * (size_t(s.ds) + 1) * 4;
  return 2 * 2 * part + 2 * per_b;  // dB/dC partials written + read; dA_log/dD partials
}

}  // namespace mc::kern
