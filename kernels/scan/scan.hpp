// scan/scan.hpp — the selective scan of the Mamba-1 layer (forward F4d and
// backward B3, optionally with the layer's softplus, D·u skip and SiLU gate
// fused in), on NVIDIA GPUs, for f32, bf16 and f16 storage. One params struct
// per direction; every optional input or output is a nullable pointer.
//
// The math, per (b, d, n) with A = a_neg[d, n] < 0 and the state h carried
// over t = 0..T-1 from h0 (zero when h0 is null):
//   δ_t  = Δ[b,t,d]                  or softplus(Δraw[b,t,d] + delta_bias[d])
//   h_t  = exp(δ_t·A)·h_{t-1} + δ_t·u_t·B[b,t,n]
//   y_t  = Σ_n C[b,t,n]·h_t[n]  (+ D[d]·u_t)   then, with z, y_t·silu(z_t)
// and the backward produces, for an upstream gradient dy of the forward's
// output (and optionally dh_final of the final state):
//   d_delta (dΔ, or dΔraw = dΔ·σ(Δraw + bias) when the softplus is fused),
//   du, dz (with z), dB and dC summed over d, dD and dA_log accumulated (+=)
//   summed over b and t, and optionally dh0 = ∂L/∂h0.
//
// Routes (all compute the same function; bits differ between routes):
//   Checkpointed  the default. The forward saves the state only every `chunk`
//                 steps ([B, n_ckpt, di, ds], see geometry()); the backward
//                 recomputes each chunk's states from its checkpoint. dB/dC are
//                 summed over the channels of a block on chip and over the
//                 blocks by a fixed-order reduction; no per-(b,t,d,n) tensor
//                 reaches device memory. Supports every fused epilogue. Two plans
//                 (geometry()): one channel a thread, and at d_state <= 16 the tile
//                 plan (2..4 channels x 4 states a thread), which the backward takes
//                 where it needs fewer waves of the SMs than one channel a thread,
//                 each of its waves counted as 1.27 one-channel waves (host.cu).
//   Chunked       the seed parallel kernels: one block per (b, d), h_saved
//                 [B, T+1, di, ds] written after every step. Cross-check route.
//   Sequential    one thread per (b, d), d_state <= 64, h_saved written.
//                 Cross-check route.
// The two cross-check routes take contiguous [B*T, di] activations and no
// fused epilogue (ConfigError otherwise), and always use ExpMath::Accurate.
//
// Exponential (ExpMath; Auto = Accurate for f32 storage, Hardware for bf16/f16,
// where the hardware exp's error is far below the storage rounding):
//   Hardware  exp(δ·A) = 2^(δ·(A·log2 e)) on the special-function unit
//             (ex2.approx, ≤ 2 ulp relative; absolute error of dA ≤ ~2.2e-8
//             from the rounded argument). What makes the scan fast.
//   Accurate  a correctly-scaled polynomial exp on the FMA and integer pipes
//             (exp_math.cuh, ≤ 0.62 ulp, unbiased); the same bits as a host build of
//             the same source, which the emulation tests rely on (device vs emulation:
//             validation/gpu/test_scan_emulation_bits.cpp). Slower.
//
// Determinism: no atomics anywhere. Launch geometry is a pure function of the
// shape; every sum has a fixed order. Same inputs, route, ExpMath, geometry and
// device -> the same bits (tests: test_determinism.cpp Routes/Rerun, CrossProcess,
// UnderLoad; the reruns of test_scan_parity.cpp).
//
// Layouts: row-major; activation rows r = b*T + t. A Rows<T> view is
// [B*T rows, ≥ cols] with row stride ld elements, so B/C can be read in place
// from the x_proj output and z from the in_proj output.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/config.hpp"

namespace mc::kern::scan {

// core/config.hpp: Checkpointed | Chunked | Sequential, and Auto | Hardware |
// Accurate (Auto: Accurate for f32 storage, Hardware for bf16/f16, see above).
using Route = ::mc::ScanRoute;
using ExpMath = ::mc::ScanExp;
using ::mc::to_string;

struct Shape {
  int64_t B = 0, T = 0, di = 0, ds = 0;
};

// A strided row view [B*T rows, cols], row stride `ld` elements (0 = contiguous: ld = cols).
template <class E>
struct Rows {
  E* p = nullptr;
  int64_t ld = 0;
};

// The checkpointed scan's thread layout at d_state <= 16 when one channel a thread
// (channels_per_thread <= 1), in either direction:
//   LaneGroups  a channel's 16 states over 4 lanes of 4 (ckpt_kernels.cuh);
//   WholeState  all 16 states in one thread, a warp serving 32 channels of one sample
//               (whole_kernels.cuh): the B/C rows of a step are one broadcast load for
//               the whole warp, and y, dδ, du need no lane sums.
// Both give the same bits (forward: y, saved states, final state; backward: every
// output): the same arithmetic per state and every sum in the same order
// (test_scan_parity.cpp, the layout twins).
// (core/config.hpp: ScanLayout.)
using FwdLayout = ::mc::ScanLayout;

template <class T>
struct FwdParams {
  Shape shape;
  Route route = Route::Checkpointed;
  ExpMath exp = ExpMath::Auto;
  // inputs
  Rows<const T> delta;                // [B*T, di]: Δ, or Δraw when delta_bias is set
  const float* delta_bias = nullptr;  // [di] or null: δ = softplus(Δraw + bias) in the kernel
  Rows<const T> u;                    // [B*T, di]
  Rows<const T> Bm, Cm;               // [B*T, ds]
  const float* a_neg = nullptr;       // [di, ds], A = -exp(A_log)
  const float* D = nullptr;           // [di] or null: no D·u skip
  Rows<const T> z;                    // [B*T, di] or null: output y·silu(z)
  // state (h0 and h_final may alias: each element is read before it is written)
  const float* h0 = nullptr;          // [B, di, ds] or null (zero initial state)
  float* h_final = nullptr;           // [B, di, ds] or null
  // what the backward needs (null = inference, nothing saved):
  //   Checkpointed: [B, n_ckpt, di, ds] states before steps 0, chunk, 2·chunk, ...
  //   Chunked / Sequential: h_saved [B, T+1, di, ds]
  float* saved = nullptr;
  // output
  Rows<T> y;                          // [B*T, di]
  // Checkpointed route: channels per thread (0 = the plan's choice for the shape, see
  // geometry(); 1 = one channel x 4 or 8 states a thread; 2..4 = the tile plan, d_state
  // <= 16 only). For tests and benchmarks that compare the plans; bits differ between them.
  int channels_per_thread = 0;
  // Checkpointed route, d_state <= 16, one channel a thread: how a channel's states are
  // laid out over threads (FwdLayout below; Auto = the plan's choice). Same bits either way.
  FwdLayout layout = FwdLayout::Auto;
  // Checkpointed route: chunks per saved state G (>= 1; see "Grouped checkpoints" below).
  // Pass the same value to the backward, saved_floats and bwd_workspace_bytes.
  int64_t checkpoint_group = 1;
  // Checkpointed route, d_state <= 16 lane groups, checkpoints saved with checkpoint_group
  // 1: the pieces of the walk (see "Pieces of the forward" below; 0 = the plan's choice,
  // one piece for now; 1 = one walk over all T; N > 1 = about N pieces of whole stages).
  // No output's bits depend on it.
  int64_t pieces = 0;
};

template <class T>
struct BwdParams {
  Shape shape;
  Route route = Route::Checkpointed;
  ExpMath exp = ExpMath::Auto;
  // the forward's inputs, as given to it
  Rows<const T> delta;
  const float* delta_bias = nullptr;
  Rows<const T> u;
  Rows<const T> Bm, Cm;
  const float* a_neg = nullptr;
  const float* D = nullptr;
  Rows<const T> z;
  const float* saved = nullptr;       // what the forward saved
  // upstream gradients
  Rows<const T> dy;                   // [B*T, di]: ∂L/∂(forward output)
  const float* dh_final = nullptr;    // [B, di, ds] or null (= 0)
  // outputs ("=" unless marked +=)
  Rows<T> d_delta;                    // [B*T, di]: dΔ, or dΔraw with delta_bias; on the
                                      // Checkpointed route it may be delta itself (same
                                      // rows and ld: a chunk's δ is staged before its dδ
                                      // is stored, and no other block reads them)
  Rows<T> du;                         // [B*T, di]; on the Checkpointed route it may be dy
                                      // itself (same rows and ld, the same argument as for
                                      // d_delta over delta)
  Rows<T> dz;                         // [B*T, di], required iff z is set
  // dB, dC: [B*T, ds], reduced in f32; give either the f32 or the typed views
  // (typed: one RN rounding of the f32 sum, e.g. straight into the x_proj gradient)
  Rows<float> dB, dC;
  Rows<T> dB_typed, dC_typed;
  float* dD = nullptr;                // [di] (+=), required iff D is set
  float* dA_log = nullptr;            // [di, ds] (+=)
  float* dh0 = nullptr;               // [B, di, ds] or null
  void* workspace = nullptr;          // bwd_workspace_bytes() bytes, 256-byte aligned
  size_t workspace_bytes = 0;
  // Checkpointed: the most bytes the dB/dC partials may take (0 = kDefaultPartialBudget).
  // Longer sequences run in segments of whole chunks; the bits do not depend on it. Pass
  // the same value to bwd_workspace_bytes.
  size_t partial_budget = 0;
  // As FwdParams::channels_per_thread; pass the same value to bwd_workspace_bytes.
  int channels_per_thread = 0;
  // As FwdParams::layout (the backward has both layouts too; same bits either way).
  FwdLayout layout = FwdLayout::Auto;
  // The forward's checkpoint_group (the backward rebuilds a group's chunk states in its
  // workspace); pass the same value to bwd_workspace_bytes.
  int64_t checkpoint_group = 1;
  // Checkpointed route, d_state <= 16, one channel a thread: the pieces of the walk (see
  // "Pieces of the backward" below; 0 = the plan's choice, 1 = one walk over all T, N > 1
  // = pieces of ceil(n_ckpt / N) chunks; above n_ckpt acts as n_ckpt). For tests and
  // benchmarks that compare them: dA_log and dD bits depend on it, nothing else does.
  // Pass the same value to bwd_workspace_bytes.
  int64_t pieces = 0;
};
// 512 MiB. At B 8, d_inner 1536: d_state 16 runs in one segment up to T 10912 (682
// chunks); d_state 256 at T 2048 (8-step chunks) runs 26 segments of 80 steps, and its
// partials (12.9 GB in one segment) take 0.50 GB beside 3.2 GB of checkpoints: 3.8 GB of
// scan memory in all.
constexpr size_t kDefaultPartialBudget = size_t(512) << 20;

// The backward of forward call `f`: its shape, route, exponential, inputs and
// saved buffer. The upstream gradients, the outputs and the workspace are the
// caller's to set.
template <class T>
BwdParams<T> backward_of(const FwdParams<T>& f) {
  BwdParams<T> b;
  b.shape = f.shape;
  b.route = f.route;
  b.exp = f.exp;
  b.delta = f.delta;
  b.delta_bias = f.delta_bias;
  b.u = f.u;
  b.Bm = f.Bm;
  b.Cm = f.Cm;
  b.a_neg = f.a_neg;
  b.D = f.D;
  b.z = f.z;
  b.saved = f.saved;
  b.channels_per_thread = f.channels_per_thread;
  b.layout = f.layout;
  b.checkpoint_group = f.checkpoint_group;
  return b;
}

// ---- pieces of the backward (Checkpointed route) -------------------------------------
// The backward walks each (b, d, n) back over all T, so it has B·d_inner/channels-per-block
// blocks, whatever T. Where that is less than half of 3 x 132 (the blocks three to an SM of
// an H100/H200 hold: B 2, d_inner 1536 gives 96 at d_state 16) on the d_state <= 16
// one-channel plan (either layout; the other plans keep one piece), the walk is cut into
// `pieces` of whole chunks (about 396 / blocks of them; Geometry::pieces, piece_chunks), and
// one launch walks every piece at once. A piece's walk needs the adjoint state at its end
// (dh, and the decay of the step after it): a carry pass computes those first from the
// adjoint recurrence alone (dh_t = exp(δ_{t+1}·A)·dh_{t+1} + dy_t·C_t, no state h, about a
// tenth of the backward's work), with the walk's own arithmetic, so every output that
// depends on them (dδ, du, dz, dB, dC, dh0) has the bits of one walk over all T. dA_log and
// dD, which sum over t, are summed per piece and then over the samples and pieces in a fixed
// order. The pieces are a pure function of the shape and the plan (one piece at B 8,
// d_inner 1536; one piece on the tile plan), and how they run does not change a bit: when the
// dB/dC partials of all T do not fit partial_budget, or with grouped checkpoints, the pieces
// are walked one after the other in segments that never cross a piece's edge
// (test_scan_parity.cpp compares one launch with segments of 1 and 2 chunks, grouped
// checkpoints and the other layout on every test shape, all of which have pieces).

// ---- pieces of the forward (Checkpointed route) ------------------------------------------
// The forward's grid is B·d_inner/32 blocks at d_state <= 16 too (96 at B 2, d_inner 1536),
// and a block alone on its SM is latency-bound: the f32 forward took 163 us at B 1 and B 2
// alike on an H100 (docs/performance-notes.md, "2026-12-05, fourth session"). Where that grid
// is under half of 3 x 132 blocks and the forward saves every chunk's state (a training
// forward, checkpoint_group 1), its stages can be cut into about 3 x 132 / blocks pieces
// (FwdParams::pieces forces a count; Geometry::pieces with backward = false and the
// storage's elem_bytes). The plan takes them with bf16/f16 storage only, the storage
// measured faster with them (host.cu, fwd_pieces_by_default). One launch walks them
// all, and a state pass first runs the recurrence
// h_t = exp(δ_t·A)·h_{t-1} + δ_t·u_t·B_t alone (no y, one thread per state) with the
// forward's arithmetic and writes the state before each piece into that chunk's
// checkpoint. The piece's walk starts from it and writes it again, so y, every checkpoint
// and h_final have the bits of one walk (test_scan_parity.cpp: the forward without saved
// states, which has no pieces, and the other layout must match bit for bit).

// ---- grouped checkpoints (Checkpointed route) --------------------------------------
// With checkpoint_group G = 1 (the default) the forward saves the state before every
// chunk of `chunk` steps, [B, n_ckpt, di, ds] f32: at d_state 16 and 16-step chunks
// that is 4 bytes per (t, d), as much as one f32 [B*T, di] activation. With G > 1 it
// saves only the states before chunks 0, G, 2G, ...: [B, ceil(n_ckpt / G), di, ds].
// The backward then walks the chunks in groups of G, last group first; before each
// group one extra launch (the refill) runs the forward recurrence over the group from
// its saved state and writes the group's G chunk states into the backward workspace
// (B·G·di·ds floats), where the walk reads them as it reads saved ones at G = 1. The
// refill repeats the forward's arithmetic on the same inputs, so every output has the
// same bits as at G = 1 (test_scan_parity.cpp, "grouped checkpoints"); the cost is one
// more pass of the recurrence (B·T·di·ds exponentials) in the backward. A group holds
// whole segments: a segment never crosses a group's edge. G above n_ckpt acts as n_ckpt.
// The largest group (with segments of one group each) whose workspace fits `bytes`;
// 1 when even a group of 2 does not fit.
int64_t max_checkpoint_group(const Shape& s, Route r, size_t bytes, int channels_per_thread = 0);
// The dB/dC partial budget that makes each segment one whole group of G chunks.
size_t group_partial_budget(const Shape& s, Route r, int64_t checkpoint_group,
                            int channels_per_thread = 0);

// ---- sizes ----------------------------------------------------------------------
// Floats the forward saves for the backward (checkpoints or h_saved).
size_t saved_floats(const Shape& s, Route r, int64_t checkpoint_group = 1);
// Bytes of backward workspace (partials of the fixed-order reductions; Checkpointed:
// one segment's dB/dC partials under `partial_budget` (0 = the default), or every row's
// with parallel pieces, a dA_log / dD partial per piece, the carries between segments or
// the carry pass's per piece, and with checkpoint_group G > 1 one group's chunk states).
size_t bwd_workspace_bytes(const Shape& s, Route r, size_t partial_budget = 0,
                           int channels_per_thread = 0, int64_t checkpoint_group = 1,
                           int64_t pieces = 0);

// ---- launch geometry (for tests at chunk edges and for benchmark reports) -------
struct Geometry {
  int threads = 0;             // per block
  int lanes = 0;               // threads per channel (each holds `states` states)
  int states = 0;              // states per thread
  int channels_per_thread = 1; // Checkpointed: 1, or the tile plan's 2..4 (d_state <= 16)
  int channels_per_block = 0;
  int64_t chunk = 0;           // Checkpointed: checkpoint stride; Chunked: chunk; Sequential: T
  int64_t n_ckpt = 0;          // Checkpointed: ceil(T / chunk)
  int64_t blocks = 0;
  size_t smem_bytes = 0;       // Checkpointed: f32 storage, no fused epilogue; the accurate
                               // exponential's backward at d_state 17-64 adds chunk x threads
                               // x states x 4 bytes (it keeps each step's dA, 32 KB)
  int64_t reduce_groups = 0;   // backward: channel groups of the dB/dC partials
  int64_t segments = 1;        // Checkpointed backward: launches over chunk segments
  int64_t segment_chunks = 0;  // Checkpointed backward: chunks per segment
  int64_t pieces = 1;          // Checkpointed: pieces of the walk (see below; the forward's
                               // for a forward that saves every chunk's state)
  int64_t piece_chunks = 0;    // Checkpointed: chunks per piece
  bool parallel_pieces = false;  // Checkpointed: every piece in one launch
  int64_t checkpoint_group = 1;  // Checkpointed: chunks per saved state (clamped to n_ckpt)
  int64_t n_saved = 0;         // Checkpointed: saved states per sample = ceil(n_ckpt / group)
  int64_t refills = 0;         // Checkpointed backward: refill launches (groups, when group > 1)
};
// Checkpointed: blocks of 4 warps. One channel a thread (channels_per_thread = 1): its
// states spread over `lanes` lanes of `states` each. The tile plan (tile_kernels.cuh,
// d_state <= 16, channels_per_thread 2..4): a thread owns channels_per_thread channels x 4
// states, one block per SM. The plan's own choice is a pure function of the shape (so the
// bits do not depend on the device); `channels_per_thread` overrides it.
// At d_state <= 16 the forward's one-channel plan may hold a channel's whole state in one
// thread (FwdLayout; `layout` forces it): lanes 1, states 16, 32 threads a block.
// `elem_bytes`: the storage's element size (4 f32, 2 bf16/f16; ConfigError otherwise), which
// sets the forward's pieces (the backward's do not depend on it).
Geometry geometry(const Shape& s, Route r, bool backward, size_t partial_budget = 0,
                  int channels_per_thread = 0, int64_t checkpoint_group = 1,
                  FwdLayout layout = FwdLayout::Auto, int64_t pieces = 0, int elem_bytes = 4);

// ---- entry points ----------------------------------------------------------------
// Validate (mc::ConfigError naming field, value and limit) and launch on `stream`.
template <class T>
void forward(const FwdParams<T>& p, cudaStream_t stream);
template <class T>
void backward(const BwdParams<T>& p, cudaStream_t stream);

// Shape limits of a route; throws mc::ConfigError. Called by forward/backward.
void check_shape(const Shape& s, Route r);

// ---- traffic and floor model (benchmarks) ------------------------------------------
// The least device-memory traffic any implementation must move (each input read
// once, each output written once; e = bytes per element of T). Without z / skip:
//   forward : δ, u read; y written: 3·BT·di·e;  B, C: 2·BT·ds·e;  states and
//             params: 4·(2·B·di·ds + di·ds + di)
//   backward: δ, u, dy read, dδ, du written: 5·BT·di·e;  B, C read: 2·BT·ds·e;
//             dB, dC written (f32): 8·BT·ds;  params/accumulators: 4·(3·di·ds + 3·di)
// plus what the route saves (forward write, backward read) and, for the
// backward, its partials (bwd_workspace traffic): route_extra_bytes.
struct Traffic {
  size_t min_bytes = 0;    // the route-independent minimum above
  size_t route_bytes = 0;  // extra bytes this route moves (saved states, partials)
  double exps = 0;         // exponentials of the recurrence (B·T·di·ds per pass)
};
// With checkpoint_group G > 1 the saved states shrink G-fold, and the backward's
// refill reads δ, u, B again and writes (then the walk reads) the groups' chunk states:
// B·T·(2·di + ds)·e + 4·B·n_ckpt·di·ds more bytes, B·T·di·ds more exponentials.
Traffic forward_traffic(const Shape& s, Route r, int elem_bytes, bool save,
                        int64_t checkpoint_group = 1);
Traffic backward_traffic(const Shape& s, Route r, int elem_bytes, int64_t checkpoint_group = 1);

}  // namespace mc::kern::scan
