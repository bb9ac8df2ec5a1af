// scan/host.cu — host side of the selective scan (scan.hpp): names, shape
// limits with field/value/limit messages, the checkpointed route's geometry
// and workspace layout, sizes of what each route saves, and the traffic model
// the benchmarks divide by.
#include <algorithm>
#include <sstream>
#include <string>

#include "core/config.hpp"
#include "kernels/scan/seed.hpp"
#include "kernels/scan/ckpt_kernels.cuh"
#include "kernels/scan/tile_kernels.cuh"
#include "kernels/scan/whole_kernels.cuh"
#include "kernels/scan/detail.hpp"

namespace mc::kern::scan {

void check_shape(const Shape& s, Route r) {
  using scan_detail::fail;
  const char* fn = "scan";
  auto range = [&](const char* field, int64_t v, int64_t lo, int64_t hi, const char* why = "") {
    if (v < lo) fail(fn, field, v, ">=", lo, why);
    if (v > hi) fail(fn, field, v, "<=", hi, why);
  };
  range("batch", s.B, 1, Limits::kMaxBatch);
  range("seq_len", s.T, 1, Limits::kMaxSeqLen);
  range("d_inner", s.di, 1, Limits::kMaxDInner);
  if (r == Route::Sequential)
    range("d_state", s.ds, 1, Limits::kMaxSeqScanDState,
          "the sequential route holds the state in registers; use route checkpointed");
  else
    range("d_state", s.ds, 1, Limits::kMaxDState);
  if (r == Route::Checkpointed) {
    const scan_detail::CkptPlan pl = scan_detail::ckpt_plan(s, true);
    range("batch*channel_blocks", pl.blocks, 1, int64_t(0x7fffffff), "one block per gridDim.x");
  } else {
    check_scan_shape(ScanShape{s.B, s.T, s.di, s.ds, s.ds}, r == Route::Chunked);
  }
}

size_t saved_floats(const Shape& s, Route r, int64_t checkpoint_group) {
  scan_detail::require_checkpoint_group("scan", r, checkpoint_group);
  if (r == Route::Checkpointed)
    return size_t(s.B) *
           size_t(scan_detail::ckpt_saved_per_sample(scan_detail::ckpt_plan(s, false),
                                                     checkpoint_group)) *
           size_t(s.di) * size_t(s.ds);
  return size_t(s.B) * size_t(s.T + 1) * size_t(s.di) * size_t(s.ds);
}

size_t bwd_workspace_bytes(const Shape& s, Route r, size_t partial_budget,
                           int channels_per_thread, int64_t checkpoint_group, int64_t pieces) {
  scan_detail::require_checkpoint_group("scan", r, checkpoint_group);
  if (r == Route::Checkpointed) {
    const scan_detail::CkptPlan pl = scan_detail::ckpt_plan(s, true, channels_per_thread);
    size_t off[7];
    scan_detail::ckpt_workspace_offsets(
        s, pl, scan_detail::ckpt_segments(s, pl, partial_budget, checkpoint_group, pieces), off);
    return off[6];
  }
  return scan_bwd_scratch_bytes(ScanShape{s.B, s.T, s.di, s.ds, s.ds});
}

size_t group_partial_budget(const Shape& s, Route r, int64_t checkpoint_group,
                            int channels_per_thread) {
  scan_detail::require_checkpoint_group("scan", r, checkpoint_group);
  if (r != Route::Checkpointed) return 0;
  const scan_detail::CkptPlan pl = scan_detail::ckpt_plan(s, true, channels_per_thread);
  const int64_t g = std::min<int64_t>(checkpoint_group, pl.n_ckpt);
  // dB and dC partials of g chunks of every sample (ckpt_segments' unit)
  return 2 * size_t(s.B) * size_t(pl.K) * size_t(pl.nblk_d) * size_t(s.ds) * sizeof(float) *
         size_t(g);
}

int64_t max_checkpoint_group(const Shape& s, Route r, size_t bytes, int channels_per_thread) {
  if (r != Route::Checkpointed) return 1;
  const scan_detail::CkptPlan pl = scan_detail::ckpt_plan(s, true, channels_per_thread);
  auto fits = [&](int64_t g) {
    return bwd_workspace_bytes(s, r, group_partial_budget(s, r, g, channels_per_thread),
                               channels_per_thread, g) <= bytes;
  };
  if (pl.n_ckpt < 2 || !fits(2)) return 1;
  int64_t lo = 2, hi = pl.n_ckpt;  // fits(lo); the workspace grows with the group
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

Geometry geometry(const Shape& s, Route r, bool backward, size_t partial_budget,
                  int channels_per_thread, int64_t checkpoint_group, FwdLayout layout,
                  int64_t pieces, int elem_bytes) {
  check_shape(s, r);
  scan_detail::require_checkpoint_group("scan", r, checkpoint_group);
  if (elem_bytes != 2 && elem_bytes != 4)
    throw ConfigError("scan::geometry: elem_bytes = " + std::to_string(elem_bytes) +
                      " is no storage's element size (4 for f32, 2 for bf16/f16)");
  Geometry g;
  if (r == Route::Checkpointed) {
    const scan_detail::CkptPlan pl =
        scan_detail::ckpt_plan(s, backward, channels_per_thread, layout);
    g.threads = 32 * pl.warps;
    g.lanes = pl.lanes;
    g.states = pl.S;
    g.channels_per_thread = pl.dt > 0 ? pl.dt : 1;
    g.channels_per_block = pl.cb;
    g.chunk = pl.K;
    g.n_ckpt = pl.n_ckpt;
    g.blocks = pl.blocks;
    g.smem_bytes = pl.smem_bytes;
    g.reduce_groups = backward ? pl.nblk_d : 0;
    const scan_detail::CkptSegments sg =
        scan_detail::ckpt_segments(s, pl, partial_budget, checkpoint_group, backward ? pieces : 0);
    g.checkpoint_group = sg.group;
    g.n_saved = sg.n_saved;
    if (backward) {
      g.segments = sg.count;
      g.segment_chunks = sg.chunks;
      g.pieces = sg.pieces;
      g.piece_chunks = sg.piece_chunks;
      g.parallel_pieces = sg.parallel;
      g.refills = sg.refill() ? (pl.n_ckpt + sg.group - 1) / sg.group : 0;
    } else {  // a training forward (checkpoints saved) with elem_bytes storage
      const scan_detail::FwdPieces fp = scan_detail::ckpt_fwd_pieces(
          s, pl, size_t(elem_bytes), true, checkpoint_group, pieces);
      g.pieces = fp.pieces;
      g.piece_chunks = fp.piece_chunks;
      g.parallel_pieces = fp.pieces > 1;
    }
  } else {
    const ScanGeometry lg =
        scan_geometry(ScanShape{s.B, s.T, s.di, s.ds, s.ds}, r == Route::Chunked, backward);
    g.threads = lg.threads;
    g.lanes = lg.lanes;
    g.states = 1;
    g.channels_per_block = lg.channels_per_block;
    g.chunk = lg.chunk;
    g.blocks = lg.blocks;
    g.smem_bytes = lg.smem_bytes;
    g.reduce_groups = backward ? (r == Route::Chunked ? s.di / lg.channels_per_block : s.di) : 0;
  }
  return g;
}

Traffic forward_traffic(const Shape& s, Route r, int e, bool save, int64_t checkpoint_group) {
  const double BT = double(s.B) * double(s.T), di = double(s.di), ds = double(s.ds);
  Traffic t;
  t.min_bytes = size_t(3 * BT * di * e + 2 * BT * ds * e + 4 * (2 * s.B * di * ds + di * ds + di));
  if (save) t.route_bytes = 4 * saved_floats(s, r, checkpoint_group);
  t.exps = BT * di * ds;
  if (save && r == Route::Checkpointed) {
    // pieces: the state pass reads δ, u and B of every chunk before the last piece's (its
    // checkpoint writes are the forward's own) and runs their recurrence once more
    const scan_detail::CkptPlan pl = scan_detail::ckpt_plan(s, false);
    const scan_detail::FwdPieces fp =
        scan_detail::ckpt_fwd_pieces(s, pl, size_t(e), true, checkpoint_group, 0);
    if (fp.pieces > 1) {
      const double walked = double((fp.pieces - 1) * fp.piece_chunks) / double(pl.n_ckpt);
      t.route_bytes += size_t(walked * BT * (2 * di + ds) * e);
      t.exps += walked * BT * di * ds;
    }
  }
  return t;
}

Traffic backward_traffic(const Shape& s, Route r, int e, int64_t checkpoint_group) {
  const double BT = double(s.B) * double(s.T), di = double(s.di), ds = double(s.ds);
  Traffic t;
  t.min_bytes =
      size_t(5 * BT * di * e + 2 * BT * ds * e + 8 * BT * ds + 4 * (3 * di * ds + 3 * di));
  t.route_bytes = 4 * saved_floats(s, r, checkpoint_group);
  if (r == Route::Checkpointed) {
    const scan_detail::CkptPlan pl = scan_detail::ckpt_plan(s, true);
    const scan_detail::CkptSegments sg = scan_detail::ckpt_segments(s, pl, 0, checkpoint_group);
    if (sg.refill()) {
      // the refill: δ, u, B read again; every chunk state written, then read by the walk
      t.route_bytes +=
          size_t(BT * (2 * di + ds) * e + 2 * 4 * double(s.B) * double(pl.n_ckpt) * di * ds);
      t.exps += BT * di * ds;
    }
    // dB/dC block partials written and read once; per-sample dA_log/dD partials likewise
    t.route_bytes += size_t(2 * 2 * 4 * BT * double(pl.nblk_d) * ds +
                            2 * 4 * double(s.B) * di * (ds + 1));
    // between segments the carries (dh, dAn, dal, dD) are written and read once each
    t.route_bytes += size_t(sg.count - 1) * 2 * 4 * size_t(s.B) * size_t(s.di) * size_t(3 * s.ds + 1);
    // pieces: one dA_log / dD partial per piece; in parallel, the carry pass reads δ, dy and
    // C of every chunk but the first piece's, and writes (then the walk reads) its carries
    t.route_bytes += size_t(sg.pieces - 1) * 2 * 4 * size_t(s.B) * size_t(s.di) * size_t(s.ds + 1);
    if (sg.parallel) {
      const double later = double(pl.n_ckpt - sg.piece_chunks) / double(pl.n_ckpt);
      t.route_bytes += size_t(later * BT * (2 * di + ds) * e) +
                       size_t(sg.pieces - 1) * 2 * 2 * 4 * size_t(s.B) * size_t(s.di) *
                           size_t(s.ds);
      t.exps += later * BT * di * ds;
    }
    t.exps += 2 * BT * di * ds;  // the chunk's states recomputed, then dA again walking back
  } else {
    t.route_bytes +=
        scan_bwd_extra_bytes(ScanShape{s.B, s.T, s.di, s.ds, s.ds}, r == Route::Chunked);
    t.exps = BT * di * ds;
  }
  return t;
}

}  // namespace mc::kern::scan

namespace mc::kern::scan_detail {

void fail(const char* fn, const char* field, int64_t value, const char* relation, int64_t limit,
          const char* why) {
  std::ostringstream os;
  os << fn << ": " << field << " = " << value << " violates " << field << " " << relation << " "
     << limit;
  if (why && *why) os << " (" << why << ")";
  throw ConfigError(os.str());
}

int64_t effective_ld(const char* fn, const char* name, int64_t ld, int64_t cols) {
  if (ld == 0) return cols;
  if (ld < cols) {
    const std::string field = std::string(name) + ".ld";
    fail(fn, field.c_str(), ld, ">=", cols, "row stride of a [B*T, cols] view");
  }
  return ld;
}

namespace {
// The plan's own choice of channels per thread at d_state <= 16:
// - forward: one channel a thread everywhere (the tile plan was slower at d_inner 1536 and
//   2048 in f32, and won 8 % only at bf16 d_inner 4096; H200, docs/performance-notes.md,
//   "2026-12-04");
// - backward: whichever plan needs fewer waves of blocks, a wave of each weighted by what it
//   costs. One-channel blocks (32 channels) run 3 an SM: a wave is 3 x kPlanSMs blocks. Tile
//   blocks at 4 channels a thread (128 channels) run one an SM: a wave is kPlanSMs blocks,
//   and it takes ~1.27x a one-channel wave (T 2048, d_state 16, backward: H100 bf16 1253
//   against 992 us, f32 2505 against 1945; H200 bf16 1246 against 985). Measured over nine
//   grids from 384 to 1536 one-channel blocks (H100, docs/performance-notes.md, "2026-12-07,
//   seventeenth session") this picks the faster plan at every grid in bf16, and in f32 at all
//   but two where the plans are within 2 %. The rule it replaced (the tile plan as soon as the
//   one-channel plan needs a second wave) lost 1.25-1.5x at 576-768 one-channel blocks
//   (B 12-16 at d_inner 1536, B 8 at 2560-3072), where the tile plan needs two waves too.
// A pure function of the shape: kPlanSMs is the H100/H200 SXM's 132 whatever the device, so
// the bits depend on the shape alone.
constexpr int64_t kPlanSMs = 132;
constexpr int64_t kTileWaveCost = 127, kOneChannelWaveCost = 100;  // relative, per wave
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int auto_channels_per_thread(const scan::Shape& s, bool backward) {
  if (!backward) return 1;
  constexpr int64_t cb1 = kCkptMaxThreads / 4;  // the one-channel plan's block: 4 lanes a channel
  constexpr int64_t cb4 = tile_cb(4);
  const int64_t one_channel_waves =
      ceil_div(s.B * ceil_div(s.di, cb1), kCkptBwdMinBlocks * kPlanSMs);
  const int64_t tile_waves = ceil_div(s.B * ceil_div(s.di, cb4), kPlanSMs);
  return kTileWaveCost * tile_waves < kOneChannelWaveCost * one_channel_waves ? 4 : 1;
}
}  // namespace

CkptPlan ckpt_plan(const scan::Shape& s, bool backward, int channels_per_thread,
                   scan::FwdLayout layout) {
  CkptPlan pl;
  if (layout == scan::FwdLayout::WholeState) {
    if (s.ds > kWholeStates)
      fail("scan", "d_state", s.ds, "<=", kWholeStates,
           "layout whole-state holds a channel's states in one thread");
    if (channels_per_thread > 1)
      fail("scan", "channels_per_thread", channels_per_thread, "<=", 1,
           "layout whole-state is one channel a thread");
  }
  if (channels_per_thread != 0) {
    if (channels_per_thread < 1)
      fail("scan", "channels_per_thread", channels_per_thread, ">=", 1, "0 = the plan's choice");
    if (channels_per_thread > 4)
      fail("scan", "channels_per_thread", channels_per_thread, "<=", 4, "tile plan");
    if (channels_per_thread > 1 && s.ds > kTileMaxDState)
      fail("scan", "channels_per_thread", channels_per_thread, "<=", 1,
           "the tile plan serves d_state <= 16 only");
  }
  const int cpt = s.ds <= kTileMaxDState
                      ? (channels_per_thread ? channels_per_thread
                                             : auto_channels_per_thread(s, backward))
                      : 1;
  // The whole-state layout only when forced (d_state <= 16 checked above), and only where the
  // plan is one channel a thread (a backward whose own choice is the tile plan keeps it).
  // Auto is the lane groups: whole-state measured 2.8x slower forward and 1.8x backward at
  // B 8, d_inner 1536, T 2048 (H200, docs/performance-notes.md, "2026-12-05, second
  // session"): one warp a scheduler issued 0.24 / 0.33 instructions a cycle, its fully
  // unrolled steps missing the instruction cache.
  if (layout == scan::FwdLayout::WholeState && cpt <= 1) {
    pl.whole = true;
    pl.S = kWholeStates;
    pl.K = ckpt_chunk(4);  // the lane plan's stride: the same checkpoints
    pl.lanes = 1;
    pl.log2_lanes = 0;
    pl.warps = kWholeThreads / 32;
    pl.cb = kWholeThreads;
    pl.ds_pad = kWholeStates;
    pl.nblk_d = (s.di + pl.cb - 1) / pl.cb;
    pl.n_ckpt = (s.T + pl.K - 1) / pl.K;
    pl.blocks = s.B * pl.nblk_d;
    // f32 storage, no fused epilogue (the launch computes its own)
    pl.smem_bytes = backward ? whole_bwd_smem(pl.K, 4, false, false).total : whole_smem(4, false);
    return pl;
  }
  if (cpt > 1) {
    pl.dt = cpt;
    pl.S = 4;
    pl.K = kTileChunk;
    pl.lanes = kTileLanes;
    pl.log2_lanes = 2;
    pl.warps = kTileWarps;
    pl.cb = tile_cb(pl.dt);
    pl.ds_pad = kTileMaxDState;
    pl.nblk_d = (s.di + pl.cb - 1) / pl.cb;
    pl.n_ckpt = (s.T + pl.K - 1) / pl.K;
    pl.blocks = s.B * pl.nblk_d;
    // f32 storage, no fused epilogue (the launch computes its own case)
    pl.smem_bytes = backward ? tile_smem(pl.dt, 4, tile_bwd_n_act(false), tile_bwd_n_sc(false, false),
                                         true).total
                             : tile_smem(pl.dt, 4, tile_fwd_n_act(false), tile_fwd_n_sc(false),
                                         false).total;
    return pl;
  }
  // (lanes, states) per channel: (4, 4) up to d_state 16, (16, 4) up to 64, (32, 4) up
  // to 128, (32, 8) up to 256 — the kernels are compiled for these four (the lane
  // butterflies unrolled); smaller d_state leaves states masked (zero).
  pl.S = s.ds <= 128 ? 4 : 8;
  pl.K = ckpt_chunk(pl.S);
  pl.lanes = s.ds <= 16 ? 4 : (s.ds <= 64 ? 16 : 32);
  pl.log2_lanes = pl.lanes == 4 ? 2 : (pl.lanes == 16 ? 4 : 5);
  pl.warps = kCkptWarps;  // the kernels are compiled for this block size
  pl.cb = pl.warps * 32 / pl.lanes;
  pl.ds_pad = pl.lanes * pl.S;
  pl.nblk_d = (s.di + pl.cb - 1) / pl.cb;
  pl.n_ckpt = (s.T + pl.K - 1) / pl.K;
  pl.blocks = s.B * pl.nblk_d;
  CkptGeom g;
  g.lanes = pl.lanes;
  g.warps = pl.warps;
  g.cb = pl.cb;
  g.ds_pad = pl.ds_pad;
  // f32 storage, no fused epilogue (the launch computes its own case)
  pl.smem_bytes = backward ? ckpt_smem(g, pl.K, pl.S, 4, bwd_n_act(false), bwd_n_sc(false, false),
                                       bwd_n_out(false), true).total
                           : ckpt_smem(g, ckpt_fwd_stage(pl.ds_pad, pl.K, 4) * pl.K, pl.S, 4,
                                       fwd_n_act(false), fwd_n_sc(false), fwd_n_out(), false)
                                 .total;
  return pl;
}

void require_checkpoint_group(const char* fn, scan::Route route, int64_t group) {
  if (group < 1)
    fail(fn, "checkpoint_group", group, ">=", 1,
         "chunks per saved state; 1 = every chunk's state saved");
  if (route != scan::Route::Checkpointed && group != 1)
    fail(fn, "checkpoint_group", group, "==", 1,
         "grouped checkpoints are a checkpointed-route setting");
}

int64_t ckpt_saved_per_sample(const CkptPlan& pl, int64_t checkpoint_group) {
  const int64_t g = std::min<int64_t>(checkpoint_group, pl.n_ckpt);
  return (pl.n_ckpt + g - 1) / g;
}

// The d_state <= 16 lane-group plan of one channel a thread (4 lanes of 4 states), the one
// plan both directions' kernels are compiled with pieces for (the backward's whole-state
// layout too).
static bool is_d16_lane_plan(const CkptPlan& pl) {
  return !pl.whole && pl.dt == 0 && pl.S == 4 && pl.lanes == 4;
}

// The pieces both directions ask for, over `units` (chunks or stages) of a plan with `blocks`
// blocks: `forced` when given (ConfigError when negative, or above 1 where `no_pieces` names
// why the plan has none), else about 3 · kPlanSMs / blocks where the plan has pieces,
// `by_default` and its grid fills under half of those slots; clamped to 1 .. units.
static int64_t wanted_pieces(int64_t blocks, int64_t units, int64_t forced,
                             const char* no_pieces, bool by_default) {
  if (forced < 0) fail("scan", "pieces", forced, ">=", 0, "0 = the plan's choice");
  if (forced > 1 && no_pieces) fail("scan", "pieces", forced, "<=", 1, no_pieces);
  const int64_t slots = kCkptBwdMinBlocks * kPlanSMs;
  const int64_t want =
      forced ? forced : (no_pieces || !by_default || 2 * blocks > slots ? 1 : slots / blocks);
  return std::max<int64_t>(1, std::min(want, units));
}

// The backward's pieces (scan.hpp, "Pieces of the backward"): where the one-channel
// backward has blocks for less than half of the 3 · kPlanSMs slots (B 2, d_inner 1536 at
// d_state 16: 96 blocks), its chunks are cut into about 3 · kPlanSMs / blocks pieces, which
// one launch can walk at once. The lane plan at B 2 took 708 us against 958 us at B 8 (four
// times the work; H200, docs/performance-notes.md, "2026-12-05, second session"): a block
// alone on its SM is latency-bound. The d_state <= 16 one-channel plans only (lane groups and
// whole-state, whose bits are compared); the tile plan and the wider plans keep one piece.
// A pure function of the shape and the plan, like the plan itself.
// `forced`: BwdParams::pieces (0 = this choice).
static int64_t ckpt_piece_chunks(const CkptPlan& pl, int64_t forced) {
  const bool d16 = pl.whole || is_d16_lane_plan(pl);  // compiled for them
  const int64_t want = wanted_pieces(
      pl.blocks, pl.n_ckpt, forced,
      d16 ? nullptr : "pieces serve the d_state <= 16 plan of one channel a thread", true);
  return (pl.n_ckpt + want - 1) / want;
}

// Chunks per stage of the forward's lane-plan kernel (ckpt_fwd_stage of ckpt_kernels.cuh).
static int64_t ckpt_fwd_stage_chunks(const CkptPlan& pl, size_t elem_bytes) {
  return pl.dt == 0 && !pl.whole ? ckpt_fwd_stage(pl.ds_pad, pl.K, elem_bytes) : 1;
}

// The forward's pieces: as the backward's, on the forward's own grid (the lane plan's B·nblk_d
// blocks; B 2, d_inner 1536 at d_state 16: 96), in whole stages of the kernel. A piece's walk
// starts from the state saved before its first chunk, which a state pass writes first
// (piece_kernels.cuh), so only a forward that saves every chunk's state has pieces.
// The plan takes them with 2-byte storage only. Measured (H100, build 60aa8b0, T 2048, d_state
// 16, d_inner 1536; docs/performance-notes.md, "2026-12-05, fifth session"), forward µs with
// the plan's pieces against one walk: bf16 115 / 203 (B 1), 145 / 205 (B 2), 213 / 229 (B 4);
// f32 158 / 162, 182 / 163, 226 / 210, so f32 keeps one walk. Forced counts
// (FwdParams::pieces) run them with either storage.
static bool fwd_pieces_by_default(size_t elem_bytes) { return elem_bytes == 2; }

FwdPieces ckpt_fwd_pieces(const scan::Shape& s, const CkptPlan& pl, size_t elem_bytes,
                          bool saves, int64_t checkpoint_group, int64_t forced) {
  const char* no_pieces =
      !is_d16_lane_plan(pl) ? "the forward's pieces serve the d_state <= 16 lane-group plan"
      : !saves ? "the forward's pieces start from saved checkpoints (saved is null)"
      : std::min<int64_t>(checkpoint_group, pl.n_ckpt) > 1
          ? "the forward's pieces need every chunk's state saved (checkpoint_group 1)"
          : nullptr;
  const int64_t stage_chunks = ckpt_fwd_stage_chunks(pl, elem_bytes);
  const int64_t n_stage = (s.T + pl.K * stage_chunks - 1) / (pl.K * stage_chunks);
  const int64_t want = wanted_pieces(pl.blocks, n_stage, forced, no_pieces,
                                     fwd_pieces_by_default(elem_bytes));
  FwdPieces fp;
  fp.piece_stages = (n_stage + want - 1) / want;
  fp.pieces = (n_stage + fp.piece_stages - 1) / fp.piece_stages;
  fp.piece_chunks = std::min(fp.piece_stages * stage_chunks, pl.n_ckpt);
  return fp;
}

CkptSegments ckpt_segments(const scan::Shape& s, const CkptPlan& pl, size_t partial_budget,
                           int64_t checkpoint_group, int64_t pieces) {
  const size_t budget = partial_budget ? partial_budget : scan::kDefaultPartialBudget;
  // dB and dC partials of one chunk of every sample
  const size_t chunk_bytes =
      2 * size_t(s.B) * size_t(pl.K) * size_t(pl.nblk_d) * size_t(s.ds) * sizeof(float);
  CkptSegments sg;
  sg.n_saved = ckpt_saved_per_sample(pl, checkpoint_group);
  sg.group = std::min<int64_t>(checkpoint_group, pl.n_ckpt);
  sg.span = sg.refill() ? sg.group : pl.n_ckpt;
  sg.piece_chunks = ckpt_piece_chunks(pl, pieces);
  sg.pieces = (pl.n_ckpt + sg.piece_chunks - 1) / sg.piece_chunks;
  const int64_t fit = int64_t(budget / chunk_bytes);  // chunks whose partials fit the budget
  sg.parallel = sg.pieces > 1 && !sg.refill() && fit >= pl.n_ckpt;
  if (sg.parallel) {
    sg.chunks = pl.n_ckpt;
    sg.count = 1;
  } else {
    sg.chunks = std::max<int64_t>(1, std::min<int64_t>(std::min(sg.span, sg.piece_chunks), fit));
    sg.count = 0;
    for (int64_t g_lo = 0; g_lo < pl.n_ckpt; g_lo += sg.span)
      for_each_segment(sg, g_lo, std::min<int64_t>(pl.n_ckpt, g_lo + sg.span),
                       [&](int64_t, int64_t) { ++sg.count; });
  }
  sg.rows = std::min<int64_t>(s.T, sg.chunks * pl.K);
  return sg;
}

void ckpt_workspace_offsets(const scan::Shape& s, const CkptPlan& pl, const CkptSegments& sg,
                            size_t off[7]) {
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  const size_t part =
      size_t(s.B) * size_t(sg.rows) * size_t(pl.nblk_d) * size_t(s.ds) * sizeof(float);
  const size_t states = size_t(s.B) * size_t(s.di) * size_t(s.ds) * sizeof(float);
  const size_t chans = size_t(s.B) * size_t(s.di) * sizeof(float);
  const size_t pieces = size_t(sg.pieces);
  off[0] = 0;
  off[1] = align(off[0] + part);
  off[2] = align(off[1] + part);
  off[3] = align(off[2] + pieces * states);
  off[4] = align(off[3] + pieces * chans);
  // carry: dh, dAn, dal, dD between launches; the carry pass's (dh, dAn) per piece
  const size_t carry = sg.parallel ? 2 * (pieces - 1) * states
                                   : (sg.count > 1 ? 3 * states + chans : 0);
  off[5] = off[4] + (carry ? align(carry) : 0);
  off[6] = off[5] + (sg.refill() ? align(size_t(sg.group) * states) : 0);  // a group's states
}

}  // namespace mc::kern::scan_detail
