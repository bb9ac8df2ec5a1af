// scan/dispatch.cuh — definitions of scan::forward / scan::backward (scan.hpp):
// argument checks, then the route's launcher. Explicitly instantiated per
// dtype and direction in scan_{fwd,bwd}_{f32,bf16,f16}.cu, so nvcc compiles
// the six kernel families in parallel.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda_check.hpp"
#include "kernels/scan/seed.hpp"
#include "kernels/scan/ckpt_kernels.cuh"
#include "kernels/scan/tile_kernels.cuh"
#include "kernels/scan/whole_kernels.cuh"
#include "kernels/scan/refill_kernels.cuh"
#include "kernels/scan/piece_kernels.cuh"
#include "kernels/scan/detail.hpp"

namespace mc::kern::scan_detail {

inline CkptGeom to_geom(const CkptPlan& pl) {
  CkptGeom g;
  g.lanes = pl.lanes;
  g.log2_lanes = pl.log2_lanes;
  g.warps = pl.warps;
  g.cb = pl.cb;
  g.ds_pad = pl.ds_pad;
  g.nblk_d = pl.nblk_d;
  g.n_ckpt = pl.n_ckpt;
  return g;
}

template <class T>
constexpr DType dtype_of() {
  return std::is_same<T, float>::value ? DType::F32
                                       : (std::is_same<T, __half>::value ? DType::F16 : DType::BF16);
}

// Rows of `cols` elements of T at p + r*ld can be copied in 16-byte cp.async units.
template <class T>
bool async_rows(const T* p, int64_t ld, int64_t cols) {
  return p == nullptr || (reinterpret_cast<uintptr_t>(p) % 16 == 0 &&
                          (size_t(ld) * sizeof(T)) % 16 == 0 && (size_t(cols) * sizeof(T)) % 16 == 0);
}

// Which staged rows of a launch may be copied in 16-byte cp.async units: the B and C rows,
// and the per-channel activation rows of a block of `cb` channels (both plans).
template <class T>
bool async_bc(const CkptFwdArgs<T>& a) {
  return async_rows(a.Bm, a.ld_B, a.ds) && async_rows(a.Cm, a.ld_C, a.ds);
}
template <class T>
bool async_bc(const CkptBwdArgs<T>& a) {
  return async_rows(a.Bm, a.ld_B, a.ds) && async_rows(a.Cm, a.ld_C, a.ds);
}
template <class T>
bool async_act(const CkptFwdArgs<T>& a, int64_t cb) {
  return async_rows(a.delta, a.ld_delta, cb) && async_rows(a.u, a.ld_u, cb) &&
         async_rows(a.z, a.ld_z, cb);
}
template <class T>
bool async_act(const CkptBwdArgs<T>& a, int64_t cb) {
  return async_rows(a.delta, a.ld_delta, cb) && async_rows(a.u, a.ld_u, cb) &&
         async_rows(a.z, a.ld_z, cb) && async_rows(a.dy, a.ld_dy, cb);
}

// Largest dynamic shared memory of a block on sm_90 (the attribute only permits).
constexpr size_t kCkptSmemCap = 232448;

// ---- checkpointed forward ---------------------------------------------------------------
// The kernel arguments of a checkpointed forward (both plans).
template <class T>
CkptFwdArgs<T> ckpt_fwd_args(const scan::FwdParams<T>& p, const CkptPlan& pl) {
  const scan::Shape& s = p.shape;
  const char* fn = "scan::forward";
  CkptFwdArgs<T> a;
  a.B = s.B;
  a.T = s.T;
  a.di = s.di;
  a.ds = s.ds;
  a.delta = p.delta.p;
  a.ld_delta = effective_ld(fn, "delta", p.delta.ld, s.di);
  a.delta_bias = p.delta_bias;
  a.u = p.u.p;
  a.ld_u = effective_ld(fn, "u", p.u.ld, s.di);
  a.Bm = p.Bm.p;
  a.ld_B = effective_ld(fn, "Bm", p.Bm.ld, s.ds);
  a.Cm = p.Cm.p;
  a.ld_C = effective_ld(fn, "Cm", p.Cm.ld, s.ds);
  a.a_neg = p.a_neg;
  a.D = p.D;
  a.z = p.z.p;
  a.ld_z = p.z.p ? effective_ld(fn, "z", p.z.ld, s.di) : 0;
  a.h0 = p.h0;
  a.h_final = p.h_final;
  a.ckpt = p.saved;
  a.n_saved = ckpt_saved_per_sample(pl, p.checkpoint_group);
  a.ckpt_group = std::min<int64_t>(p.checkpoint_group, pl.n_ckpt);
  a.y = p.y.p;
  a.ld_y = effective_ld(fn, "y", p.y.ld, s.di);
  return a;
}

template <class T>
void launch_piece_state(const scan::FwdParams<T>& p, const CkptPlan& pl,
                        const CkptFwdArgs<T>& a, const FwdPieces& fp, cudaStream_t st);

// fp: the forward's pieces (ckpt_fwd_pieces; more than one only on the (4, 4) plan).
template <class T, int S, int L, int K>
void ckpt_forward_s(const scan::FwdParams<T>& p, const CkptPlan& pl, const FwdPieces& fp,
                    cudaStream_t st) {
  const scan::Shape& s = p.shape;
  const CkptFwdArgs<T> a = ckpt_fwd_args(p, pl);
  CkptGeom g = to_geom(pl);
  g.vec_state = s.ds % 4 == 0;
  g.async_bc = async_bc(a);
  g.async_act = async_act(a, pl.cb);
  const bool has_z = a.z != nullptr;
  const int stage_steps = ckpt_fwd_stage(L * S, K, sizeof(T)) * K;
  const size_t smem = ckpt_smem(g, stage_steps, S, sizeof(T), fwd_n_act(has_z), fwd_n_sc(has_z),
                                fwd_n_out(), false)
                          .total;
  const scan::ExpMath e = scan_exp(p.exp, p.route, dtype_of<T>());
  const std::string name = std::string("ckpt_fwd_kernel<") + dtype_name<T>() + "," +
                           std::to_string(S) + "," + to_string(e) + ">";
  const bool hw = e == scan::ExpMath::Hardware;
  // the kernel instance k over `blocks` blocks, named `kname` in its errors
  auto run = [&](auto* k, int64_t blocks, const std::string& kname) {
    set_smem_limit(reinterpret_cast<const void*>(k), smem, kCkptSmemCap, kname.c_str());
    launch(k, dim3(unsigned(blocks)), dim3(unsigned(32 * pl.warps)), smem, st, a, g);
    MC_LAUNCH_CHECK(kname.c_str());
  };
  if (fp.pieces > 1) {
    if constexpr (S == 4 && L == 4) {  // the only plan compiled with pieces
      if (pl.blocks * fp.pieces > int64_t(0x7fffffff))
        fail("scan::forward", "pieces", fp.pieces, "<=", int64_t(0x7fffffff) / pl.blocks,
             "pieces x blocks in one grid");
      launch_piece_state<T>(p, pl, a, fp, st);
      g.piece_stages = int(fp.piece_stages);
      run(hw ? &ckpt_fwd_kernel<T, S, L, scan::ExpMath::Hardware, K, true>
             : &ckpt_fwd_kernel<T, S, L, scan::ExpMath::Accurate, K, true>,
          pl.blocks * fp.pieces, name + " pieces");
    } else {
      throw std::logic_error(name + ": compiled without pieces");
    }
    return;
  }
  run(hw ? &ckpt_fwd_kernel<T, S, L, scan::ExpMath::Hardware, K>
         : &ckpt_fwd_kernel<T, S, L, scan::ExpMath::Accurate, K>,
      pl.blocks, name);
}

// The tile plan (d_state <= 16): DT channels x 4 states a thread.
inline TileGeom tile_geom(const CkptPlan& pl, const scan::Shape& s) {
  TileGeom g;
  g.nblk_d = pl.nblk_d;
  g.n_ckpt = pl.n_ckpt;
  g.vec_state = s.ds % 4 == 0;
  return g;
}

template <class T, int DT>
void tile_forward_s(const scan::FwdParams<T>& p, const CkptPlan& pl, cudaStream_t st) {
  const scan::Shape& s = p.shape;
  const CkptFwdArgs<T> a = ckpt_fwd_args(p, pl);
  TileGeom g = tile_geom(pl, s);
  g.async_bc = async_bc(a);
  g.async_act = async_act(a, pl.cb);
  const bool has_z = a.z != nullptr;
  const size_t smem =
      tile_smem(DT, sizeof(T), tile_fwd_n_act(has_z), tile_fwd_n_sc(has_z), false).total;
  const scan::ExpMath e = scan_exp(p.exp, p.route, dtype_of<T>());
  const std::string name = std::string("tile_fwd_kernel<") + dtype_name<T>() + "," +
                           std::to_string(DT) + "," + to_string(e) + ">";
  const dim3 grid{unsigned(pl.blocks)}, block{unsigned(kTileThreads)};
  auto* k = e == scan::ExpMath::Hardware ? &tile_fwd_kernel<T, DT, scan::ExpMath::Hardware>
                                         : &tile_fwd_kernel<T, DT, scan::ExpMath::Accurate>;
  set_smem_limit(reinterpret_cast<const void*>(k), smem, kCkptSmemCap, name.c_str());
  launch(k, grid, block, smem, st, a, g);
  MC_LAUNCH_CHECK(name.c_str());
}

// The whole-state plan's geometry of a launch with kernel arguments `a` (both directions).
template <class Args>
WholeGeom whole_geom(const CkptPlan& pl, const scan::Shape& s, const Args& a) {
  WholeGeom g;
  g.nblk_d = pl.nblk_d;
  g.n_ckpt = pl.n_ckpt;
  g.vec_state = s.ds % 4 == 0;
  g.async_bc = async_bc(a);
  g.async_act = async_act(a, pl.cb);
  return g;
}

// The whole-state plan (d_state <= 16): one thread a channel, all 16 states.
template <class T>
void whole_forward(const scan::FwdParams<T>& p, const CkptPlan& pl, cudaStream_t st) {
  const CkptFwdArgs<T> a = ckpt_fwd_args(p, pl);
  const WholeGeom g = whole_geom(pl, p.shape, a);
  const size_t smem = whole_smem(sizeof(T), a.z != nullptr);
  const scan::ExpMath e = scan_exp(p.exp, p.route, dtype_of<T>());
  const std::string name =
      std::string("whole_fwd_kernel<") + dtype_name<T>() + "," + to_string(e) + ">";
  const dim3 grid{unsigned(pl.blocks)}, block{unsigned(kWholeThreads)};
  constexpr int K = ckpt_chunk(4);
  auto* k = e == scan::ExpMath::Hardware ? &whole_fwd_kernel<T, scan::ExpMath::Hardware, K>
                                         : &whole_fwd_kernel<T, scan::ExpMath::Accurate, K>;
  set_smem_limit(reinterpret_cast<const void*>(k), smem, kCkptSmemCap, name.c_str());
  launch(k, grid, block, smem, st, a, g);
  MC_LAUNCH_CHECK(name.c_str());
}

template <class T>
void ckpt_forward(const scan::FwdParams<T>& p, cudaStream_t st) {
  const CkptPlan pl = ckpt_plan(p.shape, false, p.channels_per_thread, p.layout);
  // validates p.pieces on every plan; more than one only on the (4, 4) lane plan
  const FwdPieces fp = ckpt_fwd_pieces(p.shape, pl, sizeof(T),
                                       p.saved != nullptr, p.checkpoint_group, p.pieces);
  if (pl.whole) {
    whole_forward<T>(p, pl, st);
    return;
  }
  switch (pl.dt) {
    case 0: break;
    case 2: tile_forward_s<T, 2>(p, pl, st); return;
    case 3: tile_forward_s<T, 3>(p, pl, st); return;
    default: tile_forward_s<T, 4>(p, pl, st); return;
  }
  switch (pl.S * 100 + pl.lanes) {  // the four compiled (states, lanes) configurations
    case 404: ckpt_forward_s<T, 4, 4, ckpt_chunk(4)>(p, pl, fp, st); break;
    case 416: ckpt_forward_s<T, 4, 16, ckpt_chunk(4)>(p, pl, fp, st); break;
    case 432: ckpt_forward_s<T, 4, 32, ckpt_chunk(4)>(p, pl, fp, st); break;
    default: ckpt_forward_s<T, 8, 32, ckpt_chunk(8)>(p, pl, fp, st); break;
  }
}

// ---- checkpointed backward --------------------------------------------------------------
// The kernel arguments of a checkpointed backward (both plans), its workspace carved per
// the plan's segments.
template <class T>
CkptBwdArgs<T> ckpt_bwd_args(const scan::BwdParams<T>& p, const CkptPlan& pl,
                             const CkptSegments& sg) {
  const scan::Shape& s = p.shape;
  const char* fn = "scan::backward";
  size_t off[7];
  ckpt_workspace_offsets(s, pl, sg, off);
  char* ws = static_cast<char*>(p.workspace);
  CkptBwdArgs<T> a;
  a.B = s.B;
  a.T = s.T;
  a.di = s.di;
  a.ds = s.ds;
  a.delta = p.delta.p;
  a.ld_delta = effective_ld(fn, "delta", p.delta.ld, s.di);
  a.delta_bias = p.delta_bias;
  a.u = p.u.p;
  a.ld_u = effective_ld(fn, "u", p.u.ld, s.di);
  a.Bm = p.Bm.p;
  a.ld_B = effective_ld(fn, "Bm", p.Bm.ld, s.ds);
  a.Cm = p.Cm.p;
  a.ld_C = effective_ld(fn, "Cm", p.Cm.ld, s.ds);
  a.a_neg = p.a_neg;
  a.D = p.D;
  a.z = p.z.p;
  a.ld_z = p.z.p ? effective_ld(fn, "z", p.z.ld, s.di) : 0;
  a.ckpt = p.saved;  // grouped: set per group by ckpt_backward_segments
  a.ckpt_c0 = 0;
  a.ckpt_slots = pl.n_ckpt;
  a.dy = p.dy.p;
  a.ld_dy = effective_ld(fn, "dy", p.dy.ld, s.di);
  a.dh_final = p.dh_final;
  a.d_delta = p.d_delta.p;
  a.ld_dd = effective_ld(fn, "d_delta", p.d_delta.ld, s.di);
  a.du = p.du.p;
  a.ld_du = effective_ld(fn, "du", p.du.ld, s.di);
  a.dz = p.dz.p;
  a.ld_dz = p.dz.p ? effective_ld(fn, "dz", p.dz.ld, s.di) : 0;
  a.dB_part = reinterpret_cast<float*>(ws + off[0]);
  a.dC_part = reinterpret_cast<float*>(ws + off[1]);
  a.dAlog_part = reinterpret_cast<float*>(ws + off[2]);
  a.dD_part = reinterpret_cast<float*>(ws + off[3]);
  a.dh0 = p.dh0;
  a.seg_rows = sg.rows;
  a.carry = !sg.parallel && sg.count > 1 ? reinterpret_cast<float*>(ws + off[4]) : nullptr;
  a.piece_chunks = sg.piece_chunks;
  a.n_pieces = sg.pieces;
  a.parallel_pieces = sg.parallel;
  a.piece_carry = sg.parallel ? reinterpret_cast<const float*>(ws + off[4]) : nullptr;
  return a;
}

// The per-state passes (compiled for chunks of 16 and 8 steps and both exponentials): the
// refill (one thread per (b, d, 4 states)) and the carry pass (16 lanes per (b, d)).
struct RefillPass {
  static constexpr const char* kName = "ckpt_refill_kernel";
  static constexpr int kThreads = kRefillThreads;
  static int64_t blocks_per_sample(const scan::Shape& s) {
    return refill_blocks_per_sample(s.di, s.ds);
  }
  template <class T, scan::ExpMath E, int K>
  static auto kernel() { return &ckpt_refill_kernel<T, E, K>; }
};
// The 16-lane passes of the pieces (piece_kernels.cuh): the same grid.
struct CarryLanesGrid {
  static constexpr int kThreads = kCarryThreads;
  static int64_t blocks_per_sample(const scan::Shape& s) { return carry_blocks_per_sample(s.di); }
};
struct PieceCarryPass : CarryLanesGrid {
  static constexpr const char* kName = "ckpt_piece_carry_kernel";
  template <class T, scan::ExpMath E, int K>
  static auto kernel() { return &ckpt_piece_carry_kernel<T, E, K>; }
};
struct PieceStatePass : CarryLanesGrid {
  static constexpr const char* kName = "ckpt_piece_state_kernel";
  template <class T, scan::ExpMath E, int K>
  static auto kernel() { return &ckpt_piece_state_kernel<T, E, K>; }
};
// The pass's instance for the plan's chunk K and exponential e, launched over
// B · Pass::blocks_per_sample blocks of Pass::kThreads.
template <class Pass, class T, class Args>
void launch_state_pass(const scan::Shape& s, int K, scan::ExpMath e, const Args& r,
                       cudaStream_t st) {
  const std::string name =
      std::string(Pass::kName) + "<" + dtype_name<T>() + "," + to_string(e) + ">";
  if (K != 16 && K != 8)
    throw std::logic_error(name + ": compiled for chunks of 8 and 16 steps, not " +
                           std::to_string(K));
  constexpr scan::ExpMath H = scan::ExpMath::Hardware, A = scan::ExpMath::Accurate;
  const bool hw = e == H;
  auto* k = K == 16 ? (hw ? Pass::template kernel<T, H, 16>() : Pass::template kernel<T, A, 16>())
                    : (hw ? Pass::template kernel<T, H, 8>() : Pass::template kernel<T, A, 8>());
  const dim3 grid{unsigned(s.B * Pass::blocks_per_sample(s))}, block{unsigned(Pass::kThreads)};
  launch(k, grid, block, 0, st, r);
  MC_LAUNCH_CHECK(name.c_str());
}

// The shape and δ of a per-state pass, as the forward's or the backward's arguments hold them.
template <class T, class Args>
StatePassHead<T> state_pass_head(const scan::Shape& s, const Args& a) {
  StatePassHead<T> h;
  h.B = s.B;
  h.T = s.T;
  h.di = s.di;
  h.ds = s.ds;
  h.delta = a.delta;
  h.ld_delta = a.ld_delta;
  h.delta_bias = a.delta_bias;
  return h;
}

// The carry pass of parallel pieces (piece_kernels.cuh): the walk's (dh, dAn) entering
// every piece but the last, into a.piece_carry.
template <class T>
void launch_piece_carry(const scan::BwdParams<T>& p, const CkptPlan& pl,
                        const CkptBwdArgs<T>& a, cudaStream_t st) {
  const scan::Shape& s = p.shape;
  CkptPieceCarryArgs<T> r;
  static_cast<StatePassHead<T>&>(r) = state_pass_head<T>(s, a);
  r.Cm = a.Cm;
  r.ld_C = a.ld_C;
  r.z = a.z;
  r.ld_z = a.ld_z;
  r.dy = a.dy;
  r.ld_dy = a.ld_dy;
  r.a_neg = a.a_neg;
  r.dh_final = a.dh_final;
  r.n_ckpt = pl.n_ckpt;
  r.piece_chunks = a.piece_chunks;
  r.carry = const_cast<float*>(a.piece_carry);
  if (s.ds > kCarryLanes)
    throw std::logic_error("ckpt_piece_carry_kernel: d_state " + std::to_string(s.ds) +
                           " above the pass's " + std::to_string(kCarryLanes) + " lanes");
  launch_state_pass<PieceCarryPass, T>(s, pl.K, scan_exp(p.exp, p.route, dtype_of<T>()), r, st);
}

// The state pass of the forward's pieces (piece_kernels.cuh): the state before every piece
// but the first, into its chunk's checkpoint (a.ckpt, G = 1).
template <class T>
void launch_piece_state(const scan::FwdParams<T>& p, const CkptPlan& pl,
                        const CkptFwdArgs<T>& a, const FwdPieces& fp, cudaStream_t st) {
  const scan::Shape& s = p.shape;
  if (s.ds > kCarryLanes || !a.ckpt || a.n_saved != pl.n_ckpt)
    throw std::logic_error("ckpt_piece_state_kernel: needs d_state <= 16 and every chunk's "
                           "checkpoint");
  CkptPieceStateArgs<T> r;
  static_cast<StatePassHead<T>&>(r) = state_pass_head<T>(s, a);
  r.u = a.u;
  r.ld_u = a.ld_u;
  r.Bm = a.Bm;
  r.ld_B = a.ld_B;
  r.a_neg = a.a_neg;
  r.h0 = a.h0;
  r.n_ckpt = pl.n_ckpt;
  r.piece_chunks = fp.piece_chunks;
  r.ckpt = a.ckpt;
  launch_state_pass<PieceStatePass, T>(s, pl.K, scan_exp(p.exp, p.route, dtype_of<T>()), r, st);
}

// The refill of grouped checkpoints (refill_kernels.cuh): the states before chunks
// c_lo .. c_hi-1 into `dense` [B, group, di, ds], from the forward's saved state of c_lo.
template <class T>
void launch_refill(const scan::BwdParams<T>& p, const CkptPlan& pl, const CkptSegments& sg,
                   const CkptBwdArgs<T>& a, float* dense, int64_t c_lo, int64_t c_hi,
                   cudaStream_t st) {
  const scan::Shape& s = p.shape;
  CkptRefillArgs<T> r;
  static_cast<StatePassHead<T>&>(r) = state_pass_head<T>(s, a);
  r.u = a.u;
  r.ld_u = a.ld_u;
  r.Bm = a.Bm;
  r.ld_B = a.ld_B;
  r.a_neg = a.a_neg;
  r.saved = p.saved;
  r.n_saved = sg.n_saved;
  r.group = sg.group;
  r.dense = dense;
  r.c_lo = c_lo;
  r.c_hi = c_hi;
  // 4 B values a load: the row start and stride keep every 4-element group aligned
  r.vec_b = s.ds % 4 == 0 && reinterpret_cast<uintptr_t>(a.Bm) % (4 * sizeof(T)) == 0 &&
            a.ld_B % 4 == 0;
  r.vec_state = s.ds % 4 == 0;
  launch_state_pass<RefillPass, T>(s, pl.K, scan_exp(p.exp, p.route, dtype_of<T>()), r, st);
}

// Segments from the last to the first: each walks its chunks back from the carries the
// later one left (`launch_segment(blocks)` with a.c_lo, a.c_hi set), then its rows of dB/dC
// are reduced before the next reuses the partials; then dA_log and dD over the samples and
// pieces. With grouped checkpoints the segments go group by group, each group's chunk states
// refilled into the workspace before its first (= last in time) segment. With parallel
// pieces: the carry pass, then one launch of pieces x the plan's blocks over every chunk.
template <class T, class LaunchSegment>
void ckpt_backward_segments(const scan::BwdParams<T>& p, const CkptPlan& pl,
                            const CkptSegments& sg, CkptBwdArgs<T>& a,
                            const LaunchSegment& launch_segment, cudaStream_t st) {
  const scan::Shape& s = p.shape;
  const char* fn = "scan::backward";
  // dB/dC of the rows `pr` covers: f32 or typed outputs (their strides checked once)
  const int64_t ld_db = p.dB.p ? effective_ld(fn, "dB", p.dB.ld, s.ds)
                               : effective_ld(fn, "dB_typed", p.dB_typed.ld, s.ds);
  const int64_t ld_dc = p.dB.p ? effective_ld(fn, "dC", p.dC.ld, s.ds)
                               : effective_ld(fn, "dC_typed", p.dC_typed.ld, s.ds);
  auto reduce_bc = [&](const PartialRows& pr) {
    if (p.dB.p)
      launch_reduce_bc<float>(a.dB_part, a.dC_part, p.dB.p, ld_db, p.dC.p, ld_dc, pr, st);
    else
      launch_reduce_bc<T>(a.dB_part, a.dC_part, p.dB_typed.p, ld_db, p.dC_typed.p, ld_dc, pr, st);
  };
  PartialRows pr = partial_rows(s.B, s.T, sg.rows, pl.nblk_d, s.ds);
  size_t off[7];
  ckpt_workspace_offsets(s, pl, sg, off);
  float* dense = reinterpret_cast<float*>(static_cast<char*>(p.workspace) + off[5]);
  if (sg.parallel) {
    launch_piece_carry(p, pl, a, st);
    a.c_lo = 0;
    a.c_hi = pl.n_ckpt;
    launch_segment(pl.blocks * sg.pieces);
    reduce_bc(pr);  // every row: sg.rows = T
  } else {
    const int64_t n_groups = (pl.n_ckpt + sg.span - 1) / sg.span;
    for (int64_t grp = n_groups - 1; grp >= 0; --grp) {
      const int64_t g_lo = grp * sg.span, g_hi = std::min<int64_t>(pl.n_ckpt, g_lo + sg.span);
      if (sg.refill()) {
        launch_refill(p, pl, sg, a, dense, g_lo, g_hi, st);
        a.ckpt = dense;
        a.ckpt_c0 = g_lo;
        a.ckpt_slots = sg.group;
      }
      for_each_segment(sg, g_lo, g_hi, [&](int64_t c_lo, int64_t c_hi) {
        a.c_lo = c_lo;
        a.c_hi = c_hi;
        launch_segment(pl.blocks);
        pr.t0 = a.c_lo * pl.K;
        pr.rows = std::min<int64_t>(s.T, a.c_hi * pl.K) - pr.t0;
        reduce_bc(pr);
      });
    }
  }
  // dA_log and dD: the partials of every (sample, piece), in that order
  launch_reduce_b(a.dAlog_part, a.dD_part, p.dA_log, p.dD, s.B * sg.pieces, s.di, s.ds, st);
}

template <class T, int S, int L, int K>
void ckpt_backward_s(const scan::BwdParams<T>& p, const CkptPlan& pl, cudaStream_t st) {
  const scan::Shape& s = p.shape;
  const CkptSegments sg = ckpt_segments(s, pl, p.partial_budget, p.checkpoint_group, p.pieces);
  CkptBwdArgs<T> a = ckpt_bwd_args(p, pl, sg);
  CkptGeom g = to_geom(pl);
  g.vec_state = s.ds % 4 == 0;
  g.async_bc = async_bc(a);
  g.async_act = async_act(a, pl.cb);
  const scan::ExpMath e = scan_exp(p.exp, p.route, dtype_of<T>());
  const size_t smem = ckpt_smem(g, K, S, sizeof(T), bwd_n_act(a.z != nullptr),
                                bwd_n_sc(a.z != nullptr, a.delta_bias != nullptr),
                                bwd_n_out(a.z != nullptr), true,
                                ckpt_bwd_kept_da(e, S, L, K), ckpt_bwd_walk_steps(e, S, L, K))
                          .total;
  const std::string name = std::string("ckpt_bwd_kernel<") + dtype_name<T>() + "," +
                           std::to_string(S) + "," + to_string(e) + ">";
  const dim3 block(unsigned(32 * pl.warps));
  auto* k = e == scan::ExpMath::Hardware ? &ckpt_bwd_kernel<T, S, L, scan::ExpMath::Hardware, K>
                                         : &ckpt_bwd_kernel<T, S, L, scan::ExpMath::Accurate, K>;
  if constexpr (S == 4 && L == 4) {  // the instances compiled for pieces (ckpt_piece_chunks)
    if (sg.pieces > 1)
      k = e == scan::ExpMath::Hardware
              ? &ckpt_bwd_kernel<T, S, L, scan::ExpMath::Hardware, K, true>
              : &ckpt_bwd_kernel<T, S, L, scan::ExpMath::Accurate, K, true>;
  } else if (sg.pieces > 1) {
    throw std::logic_error("ckpt_backward_s: pieces on a plan compiled without them");
  }
  set_smem_limit(reinterpret_cast<const void*>(k), smem, kCkptSmemCap, name.c_str());
  ckpt_backward_segments(p, pl, sg, a, [&](int64_t blocks) {
    launch(k, dim3(unsigned(blocks)), block, smem, st, a, g);
    MC_LAUNCH_CHECK(name.c_str());
  }, st);
}

template <class T, int DT>
void tile_backward_s(const scan::BwdParams<T>& p, const CkptPlan& pl, cudaStream_t st) {
  const scan::Shape& s = p.shape;
  const CkptSegments sg = ckpt_segments(s, pl, p.partial_budget, p.checkpoint_group, p.pieces);
  CkptBwdArgs<T> a = ckpt_bwd_args(p, pl, sg);
  TileGeom g = tile_geom(pl, s);
  g.async_bc = async_bc(a);
  g.async_act = async_act(a, pl.cb);
  const bool has_z = a.z != nullptr, has_sp = a.delta_bias != nullptr;
  const size_t smem =
      tile_smem(DT, sizeof(T), tile_bwd_n_act(has_z), tile_bwd_n_sc(has_z, has_sp), true).total;
  const scan::ExpMath e = scan_exp(p.exp, p.route, dtype_of<T>());
  const std::string name = std::string("tile_bwd_kernel<") + dtype_name<T>() + "," +
                           std::to_string(DT) + "," + to_string(e) + ">";
  const dim3 block{unsigned(kTileThreads)};
  auto* k = e == scan::ExpMath::Hardware ? &tile_bwd_kernel<T, DT, scan::ExpMath::Hardware>
                                         : &tile_bwd_kernel<T, DT, scan::ExpMath::Accurate>;
  set_smem_limit(reinterpret_cast<const void*>(k), smem, kCkptSmemCap, name.c_str());
  ckpt_backward_segments(p, pl, sg, a, [&](int64_t blocks) {
    launch(k, dim3(unsigned(blocks)), block, smem, st, a, g);
    MC_LAUNCH_CHECK(name.c_str());
  }, st);
}

// The whole-state plan's backward (d_state <= 16, whole_kernels.cuh).
template <class T>
void whole_backward(const scan::BwdParams<T>& p, const CkptPlan& pl, cudaStream_t st) {
  const scan::Shape& s = p.shape;
  const CkptSegments sg = ckpt_segments(s, pl, p.partial_budget, p.checkpoint_group, p.pieces);
  CkptBwdArgs<T> a = ckpt_bwd_args(p, pl, sg);
  const WholeGeom g = whole_geom(pl, s, a);
  constexpr int K = ckpt_chunk(4);
  const size_t smem =
      whole_bwd_smem(K, sizeof(T), a.z != nullptr, a.delta_bias != nullptr).total;
  const scan::ExpMath e = scan_exp(p.exp, p.route, dtype_of<T>());
  const std::string name =
      std::string("whole_bwd_kernel<") + dtype_name<T>() + "," + to_string(e) + ">";
  const dim3 block{unsigned(kWholeThreads)};
  auto* k = e == scan::ExpMath::Hardware ? &whole_bwd_kernel<T, scan::ExpMath::Hardware, K>
                                         : &whole_bwd_kernel<T, scan::ExpMath::Accurate, K>;
  set_smem_limit(reinterpret_cast<const void*>(k), smem, kCkptSmemCap, name.c_str());
  ckpt_backward_segments(p, pl, sg, a, [&](int64_t blocks) {
    launch(k, dim3(unsigned(blocks)), block, smem, st, a, g);
    MC_LAUNCH_CHECK(name.c_str());
  }, st);
}

template <class T>
void ckpt_backward(const scan::BwdParams<T>& p, cudaStream_t st) {
  const CkptPlan pl = ckpt_plan(p.shape, true, p.channels_per_thread, p.layout);
  if (pl.whole) {
    whole_backward<T>(p, pl, st);
    return;
  }
  switch (pl.dt) {
    case 0: break;
    case 2: tile_backward_s<T, 2>(p, pl, st); return;
    case 3: tile_backward_s<T, 3>(p, pl, st); return;
    default: tile_backward_s<T, 4>(p, pl, st); return;
  }
  switch (pl.S * 100 + pl.lanes) {
    case 404: ckpt_backward_s<T, 4, 4, ckpt_chunk(4)>(p, pl, st); break;
    case 416: ckpt_backward_s<T, 4, 16, ckpt_chunk(4)>(p, pl, st); break;
    case 432: ckpt_backward_s<T, 4, 32, ckpt_chunk(4)>(p, pl, st); break;
    default: ckpt_backward_s<T, 8, 32, ckpt_chunk(8)>(p, pl, st); break;
  }
}

// ---- the cross-check routes (the seed kernels of seed.hpp) -----------------------
// Contiguous activations, one shared B/C row stride, no fused epilogue, D required;
// they always use the accurate exp (exp_math.cuh) whatever `exp` says.
inline void require_plain(const char* fn, scan::Route r, bool ok, const char* what) {
  if (!ok)
    throw ConfigError(std::string(fn) + ": route " + scan::to_string(r) + " does not support " +
                      what + " (use route checkpointed)");
}

template <class T>
void legacy_forward(const scan::FwdParams<T>& p, cudaStream_t st) {
  const scan::Shape& s = p.shape;
  const char* fn = "scan::forward";
  const int64_t ld_b = effective_ld(fn, "Bm", p.Bm.ld, s.ds);
  require_plain(fn, p.route, effective_ld(fn, "delta", p.delta.ld, s.di) == s.di &&
                                 effective_ld(fn, "u", p.u.ld, s.di) == s.di &&
                                 effective_ld(fn, "y", p.y.ld, s.di) == s.di,
                "strided delta/u/y rows");
  require_plain(fn, p.route, effective_ld(fn, "Cm", p.Cm.ld, s.ds) == ld_b,
                "different B and C row strides");
  require_plain(fn, p.route, p.z.p == nullptr, "the fused gate (z)");
  require_plain(fn, p.route, p.delta_bias == nullptr, "the fused softplus (delta_bias)");
  require_plain(fn, p.route, p.D != nullptr, "a missing D (no skip)");
  require_plain(fn, p.route, p.h_final != nullptr, "a null h_final (the state is updated in place)");
  const size_t state_bytes = size_t(s.B * s.di * s.ds) * sizeof(float);
  if (p.h0 == nullptr)
    MC_CUDA_CHECK(cudaMemsetAsync(p.h_final, 0, state_bytes, st), "scan::forward zero state");
  else if (p.h0 != p.h_final)
    MC_CUDA_CHECK(cudaMemcpyAsync(p.h_final, p.h0, state_bytes, cudaMemcpyDeviceToDevice, st),
                  "scan::forward copy h0");
  scan_fwd<T>(p.route == scan::Route::Chunked, ScanShape{s.B, s.T, s.di, s.ds, ld_b}, p.delta.p,
              p.u.p, p.Bm.p, p.Cm.p, p.a_neg, p.D, p.h_final, p.saved, p.y.p, st);
}

template <class T>
void legacy_backward(const scan::BwdParams<T>& p, cudaStream_t st) {
  const scan::Shape& s = p.shape;
  const char* fn = "scan::backward";
  const int64_t ld_b = effective_ld(fn, "Bm", p.Bm.ld, s.ds);
  require_plain(fn, p.route,
                effective_ld(fn, "delta", p.delta.ld, s.di) == s.di &&
                    effective_ld(fn, "u", p.u.ld, s.di) == s.di &&
                    effective_ld(fn, "dy", p.dy.ld, s.di) == s.di &&
                    effective_ld(fn, "d_delta", p.d_delta.ld, s.di) == s.di &&
                    effective_ld(fn, "du", p.du.ld, s.di) == s.di,
                "strided activation rows");
  require_plain(fn, p.route, effective_ld(fn, "Cm", p.Cm.ld, s.ds) == ld_b,
                "different B and C row strides");
  require_plain(fn, p.route, p.z.p == nullptr && p.delta_bias == nullptr,
                "fused epilogues (z, delta_bias)");
  require_plain(fn, p.route, p.D != nullptr && p.dD != nullptr, "a missing D / dD");
  require_plain(fn, p.route,
                p.dB.p != nullptr && p.dC.p != nullptr &&
                    effective_ld(fn, "dB", p.dB.ld, s.ds) == s.ds &&
                    effective_ld(fn, "dC", p.dC.ld, s.ds) == s.ds,
                "typed or strided dB/dC outputs");
  scan_bwd_chained<T>(p.route == scan::Route::Chunked, ScanShape{s.B, s.T, s.di, s.ds, ld_b},
                      p.delta.p, p.u.p, p.Bm.p, p.Cm.p, p.a_neg, p.D, p.saved, p.dy.p,
                      p.dh_final, p.d_delta.p, p.du.p, p.dB.p, p.dC.p, p.dD, p.dA_log, p.dh0,
                      p.workspace, st);
}

}  // namespace mc::kern::scan_detail

namespace mc::kern::scan {

template <class T>
void forward(const FwdParams<T>& p, cudaStream_t stream) {
  using namespace scan_detail;
  const char* fn = "scan::forward";
  check_shape(p.shape, p.route);
  require_ptr(fn, "delta", p.delta.p);
  require_ptr(fn, "u", p.u.p);
  require_ptr(fn, "Bm", p.Bm.p);
  require_ptr(fn, "Cm", p.Cm.p);
  require_ptr(fn, "a_neg", p.a_neg);
  require_ptr(fn, "y", p.y.p);
  scan_detail::require_checkpoint_group(fn, p.route, p.checkpoint_group);
  if (p.route != Route::Checkpointed && p.pieces != 0)
    fail(fn, "pieces", p.pieces, "==", 0, "pieces are a checkpointed-route setting");
  if (p.route == Route::Checkpointed)
    ckpt_forward<T>(p, stream);
  else
    legacy_forward<T>(p, stream);
}

// An output [B*T, di] given as one of the backward's inputs itself: allowed on the
// checkpointed route only, over the same rows; otherwise a ConfigError naming the pair.
template <class O, class I>
void require_in_place_allowed(const char* fn, Route route, const Shape& s, const char* out_name,
                              const Rows<O>& out, const char* in_name, const Rows<I>& in) {
  if (static_cast<const void*>(out.p) != static_cast<const void*>(in.p)) return;
  const std::string pair = std::string(fn) + ": " + out_name + " aliases " + in_name;
  if (route != Route::Checkpointed)
    throw ConfigError(pair + ", which route " + scan::to_string(route) +
                      " does not support (use route checkpointed)");
  if (scan_detail::effective_ld(fn, out_name, out.ld, s.di) !=
      scan_detail::effective_ld(fn, in_name, in.ld, s.di))
    throw ConfigError(pair + " with a different row stride");
}

template <class T>
void backward(const BwdParams<T>& p, cudaStream_t stream) {
  using namespace scan_detail;
  const char* fn = "scan::backward";
  check_shape(p.shape, p.route);
  require_ptr(fn, "delta", p.delta.p);
  require_ptr(fn, "u", p.u.p);
  require_ptr(fn, "Bm", p.Bm.p);
  require_ptr(fn, "Cm", p.Cm.p);
  require_ptr(fn, "a_neg", p.a_neg);
  require_ptr(fn, "saved", p.saved);
  require_ptr(fn, "dy", p.dy.p);
  require_ptr(fn, "d_delta", p.d_delta.p);
  require_ptr(fn, "du", p.du.p);
  require_ptr(fn, "dA_log", p.dA_log);
  if (p.z.p) require_ptr(fn, "dz (z is set)", p.dz.p);
  if (p.D) require_ptr(fn, "dD (D is set)", p.dD);
  const bool f32_bc = p.dB.p || p.dC.p;
  const bool typed_bc = p.dB_typed.p || p.dC_typed.p;
  if (f32_bc == typed_bc || (f32_bc && !(p.dB.p && p.dC.p)) ||
      (typed_bc && !(p.dB_typed.p && p.dC_typed.p)))
    throw ConfigError(std::string(fn) +
                      ": give exactly one of the pairs (dB, dC) or (dB_typed, dC_typed)");
  // outputs written over inputs: dΔ over Δ, and du over dy (a chunk's rows are staged
  // before its outputs are stored)
  require_in_place_allowed(fn, p.route, p.shape, "d_delta", p.d_delta, "delta", p.delta);
  require_in_place_allowed(fn, p.route, p.shape, "du", p.du, "dy", p.dy);
  scan_detail::require_checkpoint_group(fn, p.route, p.checkpoint_group);
  if (p.route != Route::Checkpointed && p.pieces != 0)
    fail(fn, "pieces", p.pieces, "==", 0, "pieces are a checkpointed-route setting");
  const size_t need = bwd_workspace_bytes(p.shape, p.route, p.partial_budget,
                                          p.channels_per_thread, p.checkpoint_group, p.pieces);
  if (p.workspace_bytes < need)
    fail(fn, "workspace_bytes", int64_t(p.workspace_bytes), ">=", int64_t(need),
         "bwd_workspace_bytes()");
  if (need > 0) require_ptr(fn, "workspace", p.workspace);
  if (reinterpret_cast<uintptr_t>(p.workspace) % 256 != 0)
    throw ConfigError(std::string(fn) + ": workspace must be 256-byte aligned (cudaMalloc is)");
  if (p.route == Route::Checkpointed)
    ckpt_backward<T>(p, stream);
  else
    legacy_backward<T>(p, stream);
}

}  // namespace mc::kern::scan
