// scan/detail.hpp — host-side internals shared by the scan's launch units:
// the checkpointed route's geometry (a pure function of the shape), its
// workspace layout, argument checks, and the reduction launchers. Not part of
// the public API (scan.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/scan/scan.hpp"

namespace mc::kern::scan_detail {

// Host view of the checkpointed geometry (mirrors CkptGeom of ckpt_kernels.cuh).
struct CkptPlan {
  int dt = 0;          // tile plan (d_state <= 16, tile_kernels.cuh): channels per thread;
                       // 0 = the states-per-thread plans of ckpt_kernels.cuh
  bool whole = false;  // d_state <= 16: a channel's whole state a thread
                       // (whole_kernels.cuh; S = 16, lanes 1, one warp a block)
  int S = 4;           // states per thread
  int K = 16;          // checkpoint stride = backward register chunk (ckpt_chunk(S))
  int lanes = 1;       // threads per channel
  int log2_lanes = 0;
  int warps = 4;       // per block
  int cb = 0;          // channels per block
  int ds_pad = 4;
  int64_t nblk_d = 0;  // channel blocks per sample
  int64_t n_ckpt = 0;
  int64_t blocks = 0;  // B * nblk_d
  size_t smem_bytes = 0;
};
// A pure function of the shape and the direction (and of a forced channels_per_thread,
// 0 = the plan's choice; ConfigError when it is not 1..4, or above 1 at d_state > 16).
// `layout`: the thread layout at d_state <= 16 (scan::FwdLayout; ConfigError when
// WholeState is forced where it does not apply).
CkptPlan ckpt_plan(const scan::Shape& s, bool backward, int channels_per_thread = 0,
                   scan::FwdLayout layout = scan::FwdLayout::Auto);

// The backward's segments (scan::BwdParams::partial_budget): chunks per launch, so
// that the dB and dC partials of one segment, [B, seg_rows, nblk_d, ds] f32 each, fit
// the budget (at least one chunk per segment, whatever the budget). `pl` is the
// backward's plan of the shape.
// With grouped checkpoints (scan.hpp) the chunks are walked in groups of `group`; a
// segment never crosses a group's edge, so each group holds ceil(group / chunks) of them.
// Pieces (scan.hpp, "Pieces of the backward"): the chunks are also cut into `pieces` pieces
// of piece_chunks (a pure function of the plan: host.cu, ckpt_piece_chunks); each piece sums
// its own dA_log and dD. Segments never cross a piece's edge either. When every piece's
// partial rows fit the budget at once and there are no groups, one launch walks all pieces in
// parallel (`parallel`, after the carry pass of piece_kernels.cuh); either way the same bits.
struct CkptSegments {
  int64_t chunks = 1;    // checkpoint chunks per segment (the last of a group may have fewer)
  int64_t count = 1;     // launches of the walk in all (1 with parallel pieces)
  int64_t rows = 0;      // partial rows per sample = min(T, chunks·K)
  int64_t group = 1;     // chunks per saved state (1 = every chunk's state saved)
  int64_t span = 0;      // chunks per group walk: group, or n_ckpt when group = 1
  int64_t n_saved = 0;   // saved states per sample = ceil(n_ckpt / group)
  int64_t pieces = 1;    // pieces of the walk (1: one sum over all T)
  int64_t piece_chunks = 0;  // chunks per piece (n_ckpt with one piece)
  bool parallel = false;     // every piece in one launch
  bool refill() const { return group > 1; }
};
// `pieces`: scan::BwdParams::pieces (0 = the plan's choice; ConfigError when negative, or
// above 1 on a plan compiled without pieces).
CkptSegments ckpt_segments(const scan::Shape& s, const CkptPlan& pl, size_t partial_budget,
                           int64_t checkpoint_group = 1, int64_t pieces = 0);
// The forward's pieces (scan.hpp, "Pieces of the forward"): stages of `stage_chunks` chunks
// (the forward kernel's steps per stage / K) per piece, and the pieces. One piece unless the
// plan is the d_state <= 16 one-channel lane plan, the forward saves its checkpoints
// (`saves`) and every chunk's (checkpoint_group 1), the storage is 2-byte (bf16/f16: the
// only storage measured faster with them) and the grid is under half of the 3 · kPlanSMs
// slots. `elem_bytes`: the storage's element size (4 f32, 2 bf16/f16), which also sets the
// stage. `forced`: scan::FwdParams::pieces (0 = this choice; ConfigError when negative, or
// above 1 where the forward has no pieces).
struct FwdPieces {
  int64_t pieces = 1;
  int64_t piece_stages = 0;  // stages per piece (all of them with one piece)
  int64_t piece_chunks = 0;  // chunks per piece = piece_stages · stage_chunks
};
FwdPieces ckpt_fwd_pieces(const scan::Shape& s, const CkptPlan& pl, size_t elem_bytes,
                          bool saves, int64_t checkpoint_group, int64_t forced);
// The sequential launches of a group's chunks g_lo .. g_hi-1, last first: each covers whole
// chunks of one piece, at most sg.chunks of them. fn(c_lo, c_hi) per launch.
template <class Fn>
void for_each_segment(const CkptSegments& sg, int64_t g_lo, int64_t g_hi, const Fn& fn) {
  for (int64_t hi = g_hi; hi > g_lo;) {
    const int64_t piece_lo = (hi - 1) / sg.piece_chunks * sg.piece_chunks;
    const int64_t lo = piece_lo > g_lo ? piece_lo : g_lo;  // the piece's part of the group
    for (int64_t seg = (hi - lo + sg.chunks - 1) / sg.chunks - 1; seg >= 0; --seg) {
      const int64_t c_lo = lo + seg * sg.chunks;
      fn(c_lo, c_lo + sg.chunks < hi ? c_lo + sg.chunks : hi);
    }
    hi = lo;
  }
}
// checkpoint_group: >= 1, and 1 off the checkpointed route (ConfigError naming fn, the
// field, the value and the limit). Every entry point that takes a group calls it first.
void require_checkpoint_group(const char* fn, scan::Route route, int64_t group);
// Saved states per sample of a forward with a checked `checkpoint_group`.
int64_t ckpt_saved_per_sample(const CkptPlan& pl, int64_t checkpoint_group);

// Byte offsets of the backward workspace parts: dB_part, dC_part, dAlog_part
// [B, pieces, di, ds], dD_part [B, pieces, di], carry (with more than one launch: dh, dAn,
// dA_log and dD sums; with parallel pieces: the carry pass's [pieces - 1][2][B, di, ds]),
// the group's chunk states (only with group > 1: [B, group, di, ds]); off[6] = total. Each
// part 256-byte aligned.
// `pl`, `sg`: the backward's plan and segments of the shape.
void ckpt_workspace_offsets(const scan::Shape& s, const CkptPlan& pl, const CkptSegments& sg,
                            size_t off[7]);

[[noreturn]] void fail(const char* fn, const char* field, int64_t value, const char* relation,
                       int64_t limit, const char* why = "");
void require_ptr(const char* fn, const char* name, const void* p);
// ld == 0 means "contiguous" (= cols); returns the effective ld, checks ld >= cols.
int64_t effective_ld(const char* fn, const char* name, int64_t ld, int64_t cols);

// Fixed-order reductions (reduce.cu).
// Which rows one reduction covers: samples b < B, the rows t0 .. t0+rows-1 of each
// (partial row b·part_rows + t - t0, output row b·T + t), ngrp groups of ds values.
struct PartialRows {
  int64_t B = 0, T = 0, t0 = 0, rows = 0, part_rows = 0, ngrp = 0, ds = 0;
};
// Partials of part_rows rows per sample, starting at t0 = 0 (a caller covering a later
// segment sets t0 and rows).
inline PartialRows partial_rows(int64_t B, int64_t T, int64_t part_rows, int64_t ngrp,
                                int64_t ds) {
  PartialRows pr;
  pr.B = B;
  pr.T = T;
  pr.rows = part_rows;
  pr.part_rows = part_rows;
  pr.ngrp = ngrp;
  pr.ds = ds;
  return pr;
}
template <class O>
void launch_reduce_bc(const float* dB_part, const float* dC_part, O* dB, int64_t ld_b, O* dC,
                      int64_t ld_c, const PartialRows& pr, cudaStream_t stream);
void launch_reduce_b(const float* dAlog_part, const float* dD_part, float* dA_log, float* dD,
                     int64_t B, int64_t di, int64_t ds, cudaStream_t stream);

}  // namespace mc::kern::scan_detail
