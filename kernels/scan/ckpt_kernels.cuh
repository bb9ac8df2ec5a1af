// scan/ckpt_kernels.cuh — device code of the checkpointed selective scan
// (route Checkpointed of scan.hpp), one channel a thread: forward and backward
// kernels, templated on the storage type T, the states per thread S, the
// exponential E and the checkpoint stride K. Launchers in dispatch.cuh; the
// d_state <= 16 tile plan (several channels a thread) is tile_kernels.cuh.
//
// Thread layout (both directions). A block serves CB consecutive channels d of
// one sample b; channel ch of the block is served by L consecutive lanes of one
// warp (L = lanes, a power of two <= 32); lane j of the group holds the S states
// n = j·S .. j·S+S-1 in registers (states >= d_state are masked: A = B = C = 0,
// so they stay 0 and contribute nothing). A warp holds CW = 32/L channels. Each
// thread walks ALL T steps of its (b, d, states) in order: the recurrence is
// never split in time, so nothing is composed and there is no scan tree.
//
// Chunk pipeline (both directions): the inputs of chunk c+1 (δ/Δraw, u, z, dy of
// the block's CB channels and the B/C rows, [K] steps each) are copied into one of
// two shared-memory buffers with cp.async while chunk c is computed from the
// other; no global load is ever on a step's critical path (at 2-byte storage and
// d_state <= 16 the B/C rows are then converted once to an f32 copy: ckpt_bc_f32). Per
// chunk, lane j of a group transforms steps k ≡ j (mod L) of its channel into f32 scalars [K][SL]
// (δ, with the fused softplus; u; the gate), so an activation is evaluated once
// per (t, d), not once per lane. The K steps then run branch-free: steps past
// T have δ = 0 (dA = 1) and zero B/C rows, so they leave every state unchanged,
// and only their stores are predicated off.
//
// Forward, per step: dA = exp(δ·A); h = dA·h + (δ·u)·B; y = Σ_n h·C (in-thread
// over the S states, then an xor butterfly over the L lanes), then + D·u, then
// · silu(z). The state before every K-th step is stored as a checkpoint
// [B, n_ckpt, di, ds]; the final state to h_final.
//
// Backward, chunks from last to first (the pipeline stages chunk c-1 while chunk
// c runs). Per chunk: take the checkpoint (loaded before the previous chunk's walk, so
// its latency runs under that walk: see ckpt_bwd_kernel), recompute the chunk's K states
// into shared memory hs[K+1][thread][S] (one exp per element; each thread reads back
// only its own), then walk the chunk backwards
// with the carries dh = ∂L/∂h_{t+1} and dAn = dA_{t+1}:
//   dh   = dAn·dh + dy·C                      (∂L/∂h_t)
//   P    = dA·h_{t-1}   (dA recomputed: one more exp per element)
//   dAlog_acc += δ·dh·P          -> dA_log[n] += A·Σ_b,t δ·dh·P
//   S2  += A·dh·P,  S1 += dh·B   -> dδ = S2 + u·S1,  du = δ·S1 + D·dy
//   dC[t,n] = Σ_d dy·h_t,  dB[t,n] = Σ_d (δ·u)·dh
// dB/dC, per step, without leaving registers until the warp is done: each lane
// forms its S terms (δ·u)·dh and dy·h_t, and a butterfly over the warp's CW
// channels (lane bits log2 L .. 4) reduce-scatters them: after log2(CW) xor
// levels every lane holds 2S/CW sums over the warp's channels (reduce_scatter_channels,
// device.cuh), which it writes to its warp's slot of wsum. Every Q steps, after one
// block barrier, the warps' sums are added in warp order and written as the block's
// partial [b, t, group, n]; a fixed-order kernel sums the groups (ckpt_reduce). Long
// sequences run as several launches over segments of chunks (last first), so that
// the partials hold one segment's rows; the carries pass between them through device
// memory unchanged, so the bits do not depend on the segmentation. dD and
// dA_log partials are per (b, d[, n]) — one thread owns each over all t — and are
// summed over b by the seed route's fixed-order reduction. No atomics anywhere.
//
// Shared-memory rows of per-(t, d) scalars are CB + CW wide (raw activation tiles
// too where 16-byte rows allow): the per-chunk transform has 32/CW steps per warp
// instruction, and the pad puts them on distinct banks.
#pragma once

#include <type_traits>

#include "kernels/scan/device.cuh"

namespace mc::kern::scan_detail {

// ---- geometry shared by host and device --------------------------------------------
// Blocks are kCkptWarps warps (ckpt_plan always plans them), so the channels per
// block CB = kCkptWarps·32/L and the states per tile row DP = L·S are compile-time
// constants of each kernel instance.
// Launch bounds. The backward asks for 3 resident blocks per SM at S = 4: 65536
// registers / (3 · 128 threads) caps it at 168 registers, and 3 blocks' shared memory
// (<= 75 KiB each at f32, d_state <= 16, no fused epilogue) fits the 228 KB carveout, so
// the 384 blocks of B 8, d_inner 1536 run as one wave of 396 slots instead of 1.45 waves
// of 264 (f32 used 171 registers without the bound: 2 blocks). At S = 8 (d_state > 128)
// the chunk is 8 steps (ckpt_chunk), a batch 1 step (ckpt_q) and, at f32, the B/C tiles
// single-buffered (ckpt_single_bc), so that three blocks (<= 71 KiB each) fit an SM there
// too, at the same 168-register cap (no spill at f32, up to 8 bytes of stack at bf16/f16).
constexpr int kCkptWarps = 4;
constexpr int kCkptMaxThreads = 32 * kCkptWarps;
constexpr int kCkptBwdMinBlocks = 3;
// Checkpoint stride K (steps per chunk) of the states-per-thread plan: 16, and 8 at S = 8,
// where a 16-step chunk's hs (68 KB), B/C tiles (64 KB at f32) and warp sums left room for
// one block of 4 warps per SM (4 warps an SM: latency-bound). The halved chunk doubles the
// checkpoints (3.2 GB at B 8, T 2048, d_inner 1536, d_state 256).
__host__ __device__ constexpr int ckpt_chunk(int S) { return S == 8 ? 8 : 16; }
// Backward: B/C tiles in one buffer instead of two (f32 storage at S = 8, where the two
// buffers' 32 KB would keep a third block off the SM). The next chunk's B/C rows are then
// staged after the chunk's last batch barrier instead of beside its math. Measured at
// T 2048, d_state 256 (H200, performance-notes.md): f32 backward 31.7 -> 25.7 ms.
__host__ __device__ constexpr bool ckpt_single_bc(int S, size_t elem, bool backward) {
  return backward && S == 8 && elem == 4;
}
// 2-byte storage in the d_state <= 16 plan (S = 4, L = 4): after the first barrier of a
// chunk (backward) or stage (forward) the block converts its staged B/C rows into one f32
// copy [2][rows][DP] that the steps read. Without it every thread read and unpacked its 4 B
// and 4 C values from 2-byte rows on every step (one integer op a value: 8 a forward step,
// 12 a step of the backward's recompute and walk); the block now converts each value once
// (4 a thread and chunk, 8 a thread and forward stage), for one more barrier a chunk or
// stage. Shared memory: the backward stages its B/C rows in one 2-byte buffer, not two (the
// conversion ends before the next chunk's rows are staged), so it grows by 1 KB; the
// forward keeps two buffers and grows by the 4 KB copy.
__host__ __device__ constexpr bool ckpt_bc_f32(int S, int L, size_t elem) {
  return elem == 2 && S == 4 && L == 4;
}
// Backward: steps per dB/dC batch (one block barrier each). 8 where a batch's warp sums
// are small (DP <= 16: 8 KB double-buffered), 4 up to DP = 128, 1 above (16 KB
// double-buffered at DP = 256; 4 steps were 64 KB and kept the block alone on its SM).
__host__ __device__ constexpr int ckpt_q(int dp) { return dp <= 16 ? 8 : (dp <= 128 ? 4 : 1); }
// Backward: recomputed steps whose states a thread holds in registers before storing
// them to hs (S·RG registers): the whole chunk at (S, L) = (4, 4), half of it where the
// wider lane groups or 8 states per thread leave fewer registers (ptxas spilled there).
__host__ __device__ constexpr int ckpt_recompute_group(int S, int L, int K) {
  return S == 4 && L == 4 ? K : K / 2;
}
// Forward: checkpoint chunks per pipeline stage. The forward stages, transforms and
// stores a stage of steps at a time (one barrier, one pass of index arithmetic per
// stage) and writes a checkpoint every K steps inside it: 32 steps up to DP = 64 (2
// chunks of 16); above, where the B/C tiles dominate shared memory, 16 steps at 2-byte
// storage (2 chunks of 8 at d_state > 128) and one chunk at f32. Measured at d_state 256,
// T 2048 (H200, performance-notes.md): 16-step stages took the bf16 forward from 3463 to
// 3184 us and the f32 one from 5187 to 5518 us.
__host__ __device__ constexpr int ckpt_fwd_stage(int dp, int k, size_t elem) {
  return dp <= 64 ? 32 / k : (elem == 2 ? 16 / k : 1);
}

struct CkptGeom {
  int lanes = 1;       // L
  int log2_lanes = 0;
  int warps = 4;       // W per block
  int cb = 0;          // channels per block = W·32/L
  // The forward's pieces (PIECES instances only): stages of KF steps per piece. This int
  // was an unused field kept so that the parameter offsets stay where the forward was
  // measured (dropping it made ptxas schedule the forward differently, checked on the SASS).
  int piece_stages = 0;
  int ds_pad = 4;      // L·S: states per channel the threads hold (the B/C tile row)
  int64_t nblk_d = 0;  // channel blocks per sample = ceil(di / cb)
  int64_t n_ckpt = 0;  // ceil(T / K)
  // per launch (pointers and strides): which tiles may be copied with 16-byte cp.async
  bool async_bc = false;   // the B and C rows
  bool async_act = false;  // the δ/u/z/dy rows of a block's channels (full blocks only)
  bool vec_state = false;  // ds % 4 == 0: states, checkpoints and partials as float4
};

// Bytes of one 16-byte aligned shared-memory region of n elements of size e.
__host__ __device__ inline size_t smem_region(size_t n, size_t e) { return (n * e + 15) / 16 * 16; }

// Row strides (elements) of the per-(t, d) tiles: scalars SL = CB + CW; raw activation
// tiles RL = CB + CW where those rows stay 16-byte multiples (cp.async), else CB. The
// kernels use the compile-time forms (sc_ld_c, raw_ld_c); the layout uses these.
__host__ __device__ constexpr int sc_ld_c(int cb, int lanes) { return cb + 32 / lanes; }
__host__ __device__ constexpr int raw_ld_c(int cb, int lanes, size_t elem) {
  return (size_t(cb + 32 / lanes) * elem) % 16 == 0 ? cb + 32 / lanes : cb;
}
__host__ __device__ inline int sc_ld(const CkptGeom& g) { return sc_ld_c(g.cb, g.lanes); }
__host__ __device__ inline int raw_ld(const CkptGeom& g, size_t elem) {
  return raw_ld_c(g.cb, g.lanes, elem);
}

// Shared memory layout (bytes, every region 16-byte aligned), both directions:
//   raw [2 buffers][n_act][K][RL] T     the staged activation rows (n_act tensors)
//   bc  [2 buffers][2][K][DP] T         the staged B and C rows (columns >= ds are 0); one
//                                       buffer in the backward where ckpt_single_bc; where
//                                       ckpt_bc_f32, then their f32 copy [2][K][DP] f32
//                                       (after one buffer in the backward, two in the forward)
//   sc  [n_sc][K][SL] f32               the transformed per-(t, d) scalars
//   out [n_ob][n_out][K][OL] f32        the per-(t, d) outputs of a chunk (y; dδ, du, dz),
//                                       written to device memory by the whole block, one
//                                       coalesced pass per chunk; n_ob = 2 buffers in the
//                                       forward (stored after the next chunk's barrier), 1
//                                       in the backward (stored after its last batch barrier);
//                                       rows OL = CB floats apart in the backward,
//                                       fwd_out_ld_c(CB, L) in the forward
// backward only, after those:
//   hs    [WK+1][NT·S] f32              the states of the steps walked next, per thread:
//                                       slot 0 the state before them, slot k+1 the state
//                                       after their step k (each thread reads back only its
//                                       own); WK = K, or Q where the chunk is walked in halves
//                                       (ckpt_da_halves)
//   da    [WK][NT·S] f32                where keep_da (ckpt_keeps_da, ckpt_da_halves): the
//                                       recompute's dA of each of those steps, per thread,
//                                       read back by the walk instead of a second exponential
//   wsum  [2][W][Q][2][DP] f32          per warp sums of dB (0) and dC (1), double-buffered
//                                       across batches
// forward only, at L = 4 (fwd_defers_y):
//   ysum  [NT][kYSumRow] f32            per thread, the y partials of 8 steps: the
//                                       group's four lanes add them after the stage
struct CkptSmem {
  size_t raw, bc, sc, out, hs, da, wsum, ysum, total;  // byte offsets; total = size
};
// Forward: at L = 4 lanes per channel the y of a stage's steps are summed over the
// lanes after the stage, through shared memory (8 steps per round, each lane adds
// 2 of them), instead of one xor butterfly per step on every lane: the same
// additions in the same order, a quarter of the skip/gate work and y stores.
__host__ __device__ constexpr bool fwd_defers_y(int lanes) { return lanes == 4; }
constexpr int kYSumSteps = 8;             // steps per round
constexpr int kYSumRow = kYSumSteps + 4;  // floats per thread row: 16-byte stores on distinct banks
// The rounds' shared-memory accesses on distinct banks (the forward is bound by shared-memory
// throughput: Nsight Compute put its L1 at 82 % with 14 % of the wavefronts excess, f32,
// B 8, d_inner 1536, T 2048; performance-notes.md, "2026-12-04, evening"):
// - the y rows are fwd_out_ld_c = CB + 4 floats apart, so the two y stores of a round's
//   lanes, which write steps 2j and 2j+1 of 4 lanes j into one column, fall on 4 banks
//   8 apart instead of one (a 4-way conflict at rows of CB = 32). Without the rounds
//   (wider lane groups) every lane of a group stores the same address: rows of CB;
// - lane j of the groups whose index has bit 1 set reads the four partial rows of its
//   group in the order 2, 3, 0, 1 (ysum_row_swap), so that the two groups of a half-warp
//   that share banks (rows 48 floats apart, 16 banks) read 24 banks apart. The sum
//   ((p0 + p1) + (p2 + p3)) is then formed as ((p2 + p3) + (p0 + p1)): + commutes, the
//   same bits.
__host__ __device__ constexpr int fwd_out_ld_c(int cb, int lanes) {
  return fwd_defers_y(lanes) ? cb + 4 : cb;
}
__device__ __forceinline__ int ysum_row_swap(int tid) { return (tid & 8) ? 2 : 0; }
__host__ __device__ inline size_t hs_step_floats(const CkptGeom& g, int S) {
  return size_t(32) * g.warps * S;
}
__host__ __device__ inline size_t wsum_batch_floats(const CkptGeom& g) {  // one warp, one batch
  return size_t(ckpt_q(g.ds_pad)) * 2 * g.ds_pad;
}
// The backward keeps the recompute's dA of every step in shared memory (the da region) and
// the walk reads it instead of evaluating the exponential a second time. The same function of
// the same inputs, so the same bits; the cost is K·NT·S·4 bytes more a block (32 KB) and
// launch bounds of 2 blocks an SM. Only where it was measured faster: the accurate
// exponential (~27 instructions an element; the hardware one is 2) on the (S, L) = (4, 16)
// plan, d_state 17-64. H100, B 8, d_inner 1536, T 2048, d_state 64, backward: f32 7543 ->
// 7128 µs, bf16 7596 -> 6967 (docs/performance-notes.md, "twenty-second session"). Measured
// slower elsewhere: at d_state 16 (1.45 waves of blocks instead of one; 1890 -> 1990 µs) and
// in f32 at d_state 256 (35.8 -> 42.5 ms); equal in bf16 at 256; d_state 65-128 not measured.
__host__ __device__ constexpr bool ckpt_keeps_da(scan::ExpMath e, int S, int L) {
  return e == scan::ExpMath::Accurate && S == 4 && L == 16;
}
// Resident blocks an SM the backward's launch bounds ask for: 2 where it keeps dA (as
// measured), else 3.
__host__ __device__ constexpr int ckpt_bwd_min_blocks(scan::ExpMath e, int S, int L) {
  return ckpt_keeps_da(e, S, L) ? 2 : kCkptBwdMinBlocks;
}
// At d_state <= 16 ((S, L) = (4, 4), K = 16, batches of Q = 8) the accurate exponential's
// backward keeps dA too, but walks each chunk in two halves of Q steps: hs and da then hold
// Q + 1 and Q slots, the same 17 slots as hs alone over the whole chunk, so 3 blocks still fit
// an SM (keeping the whole chunk's dA needed 2 an SM and lost 5-6 % to the second wave). The
// first half's states are recomputed once more, to reach the second half's starting state:
// 24 exponentials per 16 steps instead of 32; the same function of the same inputs, so the
// same bits. H200, B 8, d_inner 1536, T 2048, backward: f32 1884 -> 1650 µs, bf16 1878 ->
// 1610 (docs/performance-notes.md, "twenty-third session").
__host__ __device__ constexpr bool ckpt_da_halves(scan::ExpMath e, int S, int L, int K) {
  return e == scan::ExpMath::Accurate && S == 4 && L == 4 && K == 2 * ckpt_q(L * S);
}
// The backward's walk storage, one rule for the kernel's layout and the launch's byte count
// (dispatch.cuh): whether it keeps dA (whole chunk or halves), and the steps hs (and da) hold.
__host__ __device__ constexpr bool ckpt_bwd_kept_da(scan::ExpMath e, int S, int L, int K) {
  return ckpt_keeps_da(e, S, L) || ckpt_da_halves(e, S, L, K);
}
__host__ __device__ constexpr int ckpt_bwd_walk_steps(scan::ExpMath e, int S, int L, int K) {
  return ckpt_da_halves(e, S, L, K) ? K / 2 : K;
}
__host__ __device__ inline CkptSmem ckpt_smem(const CkptGeom& g, int K, int S, size_t elem,
                                              int n_act, int n_sc, int n_out, bool backward,
                                              bool keep_da = false, int walk_steps = 0) {
  const int ws = walk_steps > 0 ? walk_steps : K;  // steps hs (and da) hold
  CkptSmem m;
  m.raw = 0;
  m.bc = m.raw + 2 * size_t(n_act) * smem_region(size_t(K) * raw_ld(g, elem), elem);
  const bool bc_f32 = ckpt_bc_f32(S, g.lanes, elem);
  const size_t bc_tiles = ckpt_single_bc(S, elem, backward) || (bc_f32 && backward) ? 2 : 4;
  m.sc = m.bc + bc_tiles * smem_region(size_t(K) * g.ds_pad, elem) +
         (bc_f32 ? 2 * smem_region(size_t(K) * g.ds_pad, 4) : 0);
  m.out = m.sc + size_t(n_sc) * smem_region(size_t(K) * sc_ld(g), 4);
  m.hs = m.out + (backward ? 1 : 2) * size_t(n_out) *
                     smem_region(size_t(K) * (backward ? g.cb : fwd_out_ld_c(g.cb, g.lanes)), 4);
  m.da = m.hs + (backward ? smem_region(size_t(ws + 1) * hs_step_floats(g, S), 4) : 0);
  m.wsum = m.da + (backward && keep_da ? smem_region(size_t(ws) * hs_step_floats(g, S), 4) : 0);
  m.ysum = m.wsum + (backward ? smem_region(size_t(2) * g.warps * wsum_batch_floats(g), 4) : 0);
  m.total = m.ysum + (!backward && fwd_defers_y(g.lanes)
                          ? smem_region(size_t(32) * g.warps * kYSumRow, 4)
                          : 0);
  return m;
}
// The tensors each direction stages and the scalars it keeps (the z / softplus
// ones only when those epilogues are fused).
__host__ __device__ inline int fwd_n_act(bool z) { return z ? 3 : 2; }           // δ u [z]
__host__ __device__ inline int fwd_n_sc(bool z) { return z ? 4 : 3; }            // δ δu D·u [gate]
__host__ __device__ inline int fwd_n_out() { return 1; }                           // y
__host__ __device__ inline int bwd_n_act(bool z) { return z ? 4 : 3; }           // δ u dy [z]
__host__ __device__ inline int bwd_n_sc(bool z, bool sp) { return 3 + z + sp; }  // δ u dy [fz] [fd]
__host__ __device__ inline int bwd_n_out(bool z) { return z ? 3 : 2; }           // dδ du [dz]

template <class V>  // V: the storage type (T is the sequence length below)
struct CkptFwdArgs {
  int64_t B, T, di, ds;
  const V* delta;
  int64_t ld_delta;
  const float* delta_bias;
  const V* u;
  int64_t ld_u;
  const V* Bm;
  int64_t ld_B;
  const V* Cm;
  int64_t ld_C;
  const float* a_neg;
  const float* D;
  const V* z;
  int64_t ld_z;
  const float* h0;
  float* h_final;
  float* ckpt;  // [B, n_saved, di, ds] or null: the states before chunks 0, G, 2G, ...
  int64_t ckpt_group;  // G: chunks per saved state (scan.hpp, grouped checkpoints)
  int64_t n_saved;     // ceil(n_ckpt / G)
  V* y;
  int64_t ld_y;
};

template <class V>
struct CkptBwdArgs {
  int64_t B, T, di, ds;
  const V* delta;
  int64_t ld_delta;
  const float* delta_bias;
  const V* u;
  int64_t ld_u;
  const V* Bm;
  int64_t ld_B;
  const V* Cm;
  int64_t ld_C;
  const float* a_neg;
  const float* D;
  const V* z;
  int64_t ld_z;
  // chunk c's state: ckpt[b, c - ckpt_c0, d, :] of [B, ckpt_slots, di, ds] (the forward's
  // saved states: c0 = 0, slots = n_ckpt; grouped: the refilled group's, c0 = its first chunk)
  const float* ckpt;
  int64_t ckpt_c0, ckpt_slots;
  const V* dy;
  int64_t ld_dy;
  const float* dh_final;
  V* d_delta;
  int64_t ld_dd;
  V* du;
  int64_t ld_du;
  V* dz;
  int64_t ld_dz;
  float* dB_part;     // [B, T, nblk_d, ds]
  float* dC_part;     // [B, T, nblk_d, ds]
  float* dAlog_part;  // [B, di, ds]
  float* dD_part;     // [B, di]
  float* dh0;         // [B, di, ds] or null
  // This launch's segment: chunks c_lo .. c_hi-1, walked last to first. The partials
  // hold the segment's rows only: [B, seg_rows, nblk_d, ds], row t - c_lo·K. Between
  // segments the walk's carries (dh, dAn, dal [B, di, ds] each, then dD [B, di]) wait
  // in `carry`: read unless the segment ends at T, written unless it starts at 0.
  int64_t c_lo, c_hi, seg_rows;
  float* carry;
  // Pieces (scan.hpp, "Pieces of the backward"): the chunks in pieces of piece_chunks;
  // each piece sums its own dA_log and dD, from 0, into partial slot b·n_pieces + piece.
  // One piece (piece_chunks = n_ckpt) is the walk over all T in one sum. With
  // parallel_pieces one launch walks every piece at once (blockIdx.x = piece·B·nblk_d +
  // b·nblk_d + dblk, c_lo = 0, c_hi = n_ckpt), each piece but the last starting from the
  // (dh, dAn) that the carry pass (piece_kernels.cuh) left in piece_carry
  // [n_pieces - 1][2][B, di, ds]; otherwise launches never cross a piece's edge.
  int64_t piece_chunks = 0, n_pieces = 1;
  bool parallel_pieces = false;
  const float* piece_carry = nullptr;
};

// Which chunks a backward block walks, and where its sums start and end (CkptBwdArgs,
// pieces). Both one-channel backward kernels (ckpt_bwd_kernel, whole_bwd_kernel).
struct BwdPiece {
  int64_t bid;         // the block's index within one piece's grid: b·nblk_d + dblk
  int64_t c_lo, c_hi;  // this block walks chunks c_hi-1 down to c_lo
  int64_t piece;       // the piece these chunks belong to
  bool last;           // c_hi = n_ckpt: dh_final (or 0) in
  bool fresh;          // the walk starts its piece: the dA_log and dD sums start at 0
  bool done;           // the walk ends its piece: the piece's dA_log and dD partials out
};
template <class V>
__device__ __forceinline__ BwdPiece bwd_piece(const CkptBwdArgs<V>& p, int64_t nblk_d,
                                              int64_t n_ckpt) {
  BwdPiece w;
  const int64_t per_piece = p.B * nblk_d;
  if (p.parallel_pieces) {
    w.piece = int64_t(blockIdx.x) / per_piece;
    w.bid = int64_t(blockIdx.x) - w.piece * per_piece;
    w.c_lo = w.piece * p.piece_chunks;
    w.c_hi = min(n_ckpt, w.c_lo + p.piece_chunks);
  } else {
    w.bid = int64_t(blockIdx.x);
    w.c_lo = p.c_lo;
    w.c_hi = p.c_hi;
    w.piece = (w.c_hi - 1) / p.piece_chunks;
  }
  w.last = w.c_hi >= n_ckpt;
  w.fresh = w.last || w.c_hi % p.piece_chunks == 0;
  w.done = w.c_lo % p.piece_chunks == 0;
  return w;
}

// Which thread serves what (both kernels).
struct LaneMap {
  int L, ch, j, lane, warp, n0, nvalid;
  int64_t b, dblk, d0, d;  // d clamped to di-1 for the padding channels of the last block
  int cols_valid;          // channels of this block inside di
  bool dvalid;
};
// `bid`: the block's index b·nblk_d + dblk (blockIdx.x but in a pieces launch).
__device__ __forceinline__ LaneMap lane_map(const CkptGeom& g, int64_t di, int64_t ds, int S,
                                            int64_t bid) {
  LaneMap m;
  const int tid = int(threadIdx.x);
  m.L = g.lanes;
  m.ch = tid >> g.log2_lanes;
  m.j = tid & (g.lanes - 1);
  m.lane = tid & 31;
  m.warp = tid >> 5;
  m.b = bid / g.nblk_d;
  m.dblk = bid - m.b * g.nblk_d;
  m.d0 = m.dblk * g.cb;
  const int64_t left_d = di - m.d0;
  m.cols_valid = int(left_d < g.cb ? left_d : g.cb);
  const int64_t d = m.d0 + m.ch;
  m.dvalid = d < di;
  m.d = m.dvalid ? d : di - 1;
  m.n0 = m.j * S;
  const int64_t left = ds - m.n0;
  m.nvalid = int(left < 0 ? 0 : (left > S ? S : left));
  return m;
}

// S states of the f32 row `p` (checkpoints, h0, dh_final; the store also an hs slot):
// float4 when allowed.
template <int S>
__device__ __forceinline__ void load_states(const float* p, bool vec, int valid, float (&v)[S]) {
  load_vec<S>(p, vec && valid == S, valid, v);
}
template <int S>
__device__ __forceinline__ void store_states(float* p, bool vec, int valid, const float (&v)[S]) {
  if (vec && valid == S) {
#pragma unroll
    for (int q = 0; q < S / 4; ++q)
      reinterpret_cast<float4*>(p)[q] =
          make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  } else {
#pragma unroll
    for (int s = 0; s < S; ++s)
      if (s < valid) p[s] = v[s];
  }
}

// Zero the padding columns (ds .. DP) of the B/C tiles once (`tiles`: 4 for two buffers of
// B and C, 2 for one): the staging never writes them, the masked states read them.
template <class T>
__device__ __forceinline__ void zero_bc_padding(T* bc, int K, int DP, int64_t ds, int tiles = 4) {
  const int pad = DP - int(ds);
  if (pad <= 0) return;
  const size_t buf = smem_region(size_t(K) * DP, sizeof(T)) / sizeof(T);
  for (int e = int(threadIdx.x); e < tiles * K * pad; e += int(blockDim.x)) {
    const int t = e / (K * pad), r = (e / pad) % K, c = int(ds) + e % pad;
    bc[size_t(t) * buf + r * DP + c] = zero_elem<T>();
  }
}

// The B and C rows a chunk's (or stage's) steps read, at this thread's first state n0: the
// f32 copy [2][rows][DP] (FB: ckpt_bc_f32) or the staged tiles themselves.
template <bool FB, class T>
struct BcRows {
  using Elem = std::conditional_t<FB, float, T>;
  const Elem* B;
  const Elem* C;
};
template <bool FB, class T>
__device__ __forceinline__ BcRows<FB, T> bc_rows(const float* bc32, const T* staged_b,
                                                 const T* staged_c, int rows, int DP, int n0) {
  if constexpr (FB)
    return {bc32 + n0, bc32 + rows * DP + n0};
  else
    return {staged_b + n0, staged_c + n0};
}

// n staged 2-byte values (n a multiple of 4, both rows 16-byte aligned) upcast into an f32
// copy, 4 a thread and pass (block-cooperative; visible after the next __syncthreads()).
template <class T>
__device__ __forceinline__ void convert_rows_f32(float* dst, const T* src, int n) {
  for (int e = 4 * int(threadIdx.x); e < n; e += 4 * int(blockDim.x)) {
    float v[4];
    smem_vec<4>(src + e, v);
    *reinterpret_cast<float4*>(dst + e) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

// The chunk's per-(t, d) outputs [K][CB] (f32 in shared memory, rows SLD >= CB floats
// apart) to the device rows t0 .. t0+nk-1 of the block's valid channels, RN to T: one
// coalesced block pass. CB divides the block size: each thread keeps one column and
// walks the rows with a pointer step (no 64-bit multiply per element).
template <class T, int CB, int SLD = CB>
__device__ __forceinline__ void store_chunk(T* dst, int64_t ld, const float* src, int nk,
                                            int cols_valid) {
  constexpr int rstep = kCkptMaxThreads / CB;
  const int c = int(threadIdx.x) % CB;
  if (c >= cols_valid) return;
  int r = int(threadIdx.x) / CB;
  T* d = dst + int64_t(r) * ld + c;
  const int64_t dstep = int64_t(rstep) * ld;
  for (; r < nk; r += rstep, d += dstep) store_rn(d, src[r * SLD + c]);
}

// ---- forward --------------------------------------------------------------------------
// The stages one block of a forward with pieces walks (ckpt_fwd_kernel<.., PIECES>).
struct FwdPiece {
  int64_t bid;         // the block's index within one piece's grid: b·nblk_d + dblk
  int64_t s_lo, s_hi;  // this block walks stages s_lo .. s_hi-1 of KF steps
};
template <class V>
__device__ __forceinline__ FwdPiece fwd_piece(const CkptFwdArgs<V>& p, const CkptGeom& g,
                                              int KF) {
  FwdPiece w;
  const int64_t per_piece = p.B * g.nblk_d;
  const int64_t piece = int64_t(blockIdx.x) / per_piece;
  const int64_t n_stage = (p.T + KF - 1) / KF;
  w.bid = int64_t(blockIdx.x) - piece * per_piece;
  w.s_lo = piece * g.piece_stages;
  w.s_hi = min(n_stage, w.s_lo + g.piece_stages);
  return w;
}

// The forward's per-stage transform loop unrolled: only where a device A/B measured it faster.
// H100, B 8, d_inner 1536, T 2048, two runs each (docs/performance-notes.md, nineteenth
// session): the one-channel plan's f32 forward with the accurate exponential 807 -> 758 µs;
// the same unroll made the f32 hardware-exp forward 247 -> 263 µs and bf16 253 -> 285 µs.
template <class T, int S, int L, scan::ExpMath E, bool PIECES>
inline constexpr bool kUnrollFwdTransform =
    sizeof(T) == 4 && S == 4 && L == 4 && E == scan::ExpMath::Accurate && !PIECES;

//   δ (or Δraw + delta_bias [di]), u, z [B*T, ld] V; B, C [B*T, ld] V (ds columns);
//   a_neg [di, ds], D [di], h0 [B, di, ds] f32 -> y [B*T, ld_y] V, h_final [B, di, ds] f32,
//   ckpt [B, n_saved, di, ds] f32.
// grid B·nblk_d blocks of 32·W threads (PIECES: pieces x that, block = piece·B·nblk_d +
// b·nblk_d + dblk); dynamic smem ckpt_smem(KF, .., backward = false) with
// KF = ckpt_fwd_stage(DP, K, sizeof(T))·K rows per stage. PIECES (the d_state <= 16 plan,
// checkpoints saved with G = 1; scan.hpp, "Pieces of the forward"): piece p walks stages
// p·g.piece_stages .. from the state ckpt_piece_state_kernel saved before its first chunk.
template <class T, int S, int L, scan::ExpMath E, int K, bool PIECES = false>
__global__ void __launch_bounds__(kCkptMaxThreads) ckpt_fwd_kernel(CkptFwdArgs<T> p, CkptGeom g) {
  constexpr int CB = kCkptWarps * 32 / L, DP = L * S;
  constexpr int FS = ckpt_fwd_stage(DP, K, sizeof(T)), KF = FS * K;  // checkpoints / steps per stage
  constexpr int RL = raw_ld_c(CB, L, sizeof(T)), SL = sc_ld_c(CB, L);
  constexpr bool DY = fwd_defers_y(L);
  constexpr bool FB = ckpt_bc_f32(S, L, sizeof(T));  // the stage's B/C rows as an f32 copy
  static_assert(!DY || KF % kYSumSteps == 0, "y rounds: 2 steps per lane of 4");
  extern __shared__ float smem[];
  // Without PIECES every use below reads the code measured before pieces existed (stages
  // 0 .. n_stage-1); `PIECES ? fw.x : ...` folds away (the SASS of those instances is
  // unchanged but for register names, checked with cuobjdump).
  [[maybe_unused]] FwdPiece fw{};
  if constexpr (PIECES) fw = fwd_piece(p, g, KF);
  const LaneMap m = lane_map(g, p.di, p.ds, S, PIECES ? fw.bid : int64_t(blockIdx.x));
  const bool has_z = p.z != nullptr;
  const CkptSmem lay =
      ckpt_smem(g, KF, S, sizeof(T), fwd_n_act(has_z), fwd_n_sc(has_z), fwd_n_out(), false);
  char* base = reinterpret_cast<char*>(smem);
  float* ysum = reinterpret_cast<float*>(base + lay.ysum);
  const size_t act_bytes = smem_region(size_t(KF) * RL, sizeof(T));
  const size_t bc_bytes = smem_region(size_t(KF) * DP, sizeof(T));
  const size_t sc_bytes = smem_region(size_t(KF) * SL, 4);
  constexpr int OL = fwd_out_ld_c(CB, L);  // y rows in shared memory
  const size_t out_bytes = smem_region(size_t(KF) * OL, 4);
  // raw tile `i` of buffer `bf`; B (i = 0) / C (i = 1) tile of buffer `bf`; scalar array `i`
  auto raw = [&](int bf, int i) {
    return reinterpret_cast<T*>(base + lay.raw + (size_t(bf) * fwd_n_act(has_z) + i) * act_bytes);
  };
  auto bct = [&](int bf, int i) { return reinterpret_cast<T*>(base + lay.bc + (2 * bf + i) * bc_bytes); };
  // FB: the f32 copy of the stage's B rows [KF][DP], then its C rows, after the two buffers
  float* bc32 = reinterpret_cast<float*>(base + lay.bc + 4 * bc_bytes);
  float* sc_delta = reinterpret_cast<float*>(base + lay.sc);
  float* sc_du = reinterpret_cast<float*>(base + lay.sc + sc_bytes);
  float* sc_skip = reinterpret_cast<float*>(base + lay.sc + 2 * sc_bytes);
  float* sc_gate = reinterpret_cast<float*>(base + lay.sc + 3 * sc_bytes);
  auto out_y = [&](int bf) { return reinterpret_cast<float*>(base + lay.out + bf * out_bytes); };

  float a[S], h[S];
  {
    float A[S];
    load_vec<S>(p.a_neg + m.d * p.ds + m.n0, g.vec_state && m.nvalid == S, m.nvalid, A);
#pragma unroll
    for (int s = 0; s < S; ++s) a[s] = exp_coef<E>(A[s]);
    if (PIECES && fw.s_lo > 0)  // the state pass's state before the piece's first chunk
      load_states<S>(p.ckpt + ((m.b * p.n_saved + fw.s_lo * FS) * p.di + m.d) * p.ds + m.n0,
                     g.vec_state, m.nvalid, h);
    else if (p.h0)
      load_states<S>(p.h0 + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid, h);
    else
#pragma unroll
      for (int s = 0; s < S; ++s) h[s] = 0.f;
  }
  const float Dd = p.D ? __ldg(p.D + m.d) : 0.f;
  const float bias = p.delta_bias ? __ldg(p.delta_bias + m.d) : 0.f;
  const int64_t row0 = m.b * p.T;
  const int64_t n_stage = (p.T + KF - 1) / KF;
  const bool saves = p.ckpt && m.dvalid && m.nvalid > 0;
  // this thread's row of saved state 0; the state before chunk next_save goes there next,
  // then the row moves ckpt_step on and next_save ckpt_group on (PIECES, G = 1: from the
  // piece's first chunk)
  float* ckpt_row = saves ? p.ckpt + ((m.b * p.n_saved) * p.di + m.d) * p.ds + m.n0 : nullptr;
  const int64_t ckpt_step = p.di * p.ds;
  int64_t next_save = 0;
  if constexpr (PIECES) {
    next_save = fw.s_lo * FS;
    if (saves) ckpt_row += next_save * ckpt_step;
  }
  zero_bc_padding<T>(bct(0, 0), KF, DP, p.ds);
  const UnitMap act_map = unit_map<T>(CB), bc_map = unit_map<T>(int(p.ds));

  auto stage = [&](int64_t c, int bf) {
    const int64_t r = row0 + c * KF;
    const int rv = int(min(int64_t(KF), p.T - c * KF));
    stage_tile<T>(raw(bf, 0), RL, p.delta + r * p.ld_delta + m.d0, p.ld_delta, KF, CB, rv,
                  m.cols_valid, g.async_act, act_map);
    stage_tile<T>(raw(bf, 1), RL, p.u + r * p.ld_u + m.d0, p.ld_u, KF, CB, rv, m.cols_valid,
                  g.async_act, act_map);
    if (has_z)
      stage_tile<T>(raw(bf, 2), RL, p.z + r * p.ld_z + m.d0, p.ld_z, KF, CB, rv, m.cols_valid,
                    g.async_act, act_map);
    stage_tile<T>(bct(bf, 0), DP, p.Bm + r * p.ld_B, p.ld_B, KF, int(p.ds), rv, int(p.ds),
                  g.async_bc, bc_map);
    stage_tile<T>(bct(bf, 1), DP, p.Cm + r * p.ld_C, p.ld_C, KF, int(p.ds), rv, int(p.ds),
                  g.async_bc, bc_map);
    cp_async_commit();
  };
  stage(PIECES ? fw.s_lo : 0, PIECES ? int(fw.s_lo & 1) : 0);

  for (int64_t c = PIECES ? fw.s_lo : 0; c < (PIECES ? fw.s_hi : n_stage); ++c) {
    const int bf = int(c & 1);
    const int64_t t0 = c * KF;
    const int nk = int(min(int64_t(KF), p.T - t0));
    cp_async_wait_all();
    __syncthreads();  // stage c's tiles are in buffer bf; every thread is done with stage c-1
    if (c + 1 < (PIECES ? fw.s_hi : n_stage)) stage(c + 1, bf ^ 1);  // overlaps this stage's math
    if constexpr (FB) {  // stage c's B/C rows to f32 (every thread is done with stage c-1's)
      convert_rows_f32<T>(bc32, bct(bf, 0), 2 * KF * DP);
      __syncthreads();
    }
    if (c > (PIECES ? fw.s_lo : 0))  // stage c-1's y, one coalesced pass
      store_chunk<T, CB, OL>(p.y + (row0 + t0 - KF) * p.ld_y + m.d0, p.ld_y, out_y(bf ^ 1),
                             KF, m.cols_valid);
    // per-(t, d) scalars, lane j of the group takes steps k ≡ j (mod L)
    auto transform_step = [&](int k) {
      const int e = k * RL + m.ch, es = k * SL + m.ch;
      const float x = smem_f32(raw(bf, 0)[e]);
      const float dl = k < nk ? (p.delta_bias ? act_softplus(x + bias) : x) : 0.f;
      const float uv = smem_f32(raw(bf, 1)[e]);
      sc_delta[es] = dl;
      sc_du[es] = dl * uv;
      sc_skip[es] = __fmul_rn(Dd, uv);
      if (has_z) sc_gate[es] = act_silu(smem_f32(raw(bf, 2)[e]));
    };
    if constexpr (kUnrollFwdTransform<T, S, L, E, PIECES>) {
      static_assert(KF % L == 0, "the unrolled transform: whole rounds of L steps");
#pragma unroll
      for (int i = 0; i < KF / L; ++i) transform_step(m.j + i * L);
    } else {
      for (int k = m.j; k < KF; k += L) transform_step(k);
    }
    __syncwarp();
    const BcRows<FB, T> bcr = bc_rows<FB>(bc32, bct(bf, 0), bct(bf, 1), KF, DP, m.n0);
    const auto* Bt = bcr.B;
    const auto* Ct = bcr.C;
    // The stage's y stay in registers until its last step: a shared-memory store inside
    // the step loop would order every later step's loads after it (the compiler cannot
    // tell the regions apart), serialising the steps; without it they overlap.
    float ys[KF];
#pragma unroll
    for (int k = 0; k < KF; ++k) {  // branch-free: steps past T leave h unchanged
      if (k % K == 0) {  // the state before step t0 + k: chunk (t0 + k) / K
        const int64_t ci = c * FS + k / K;
        if (saves && ci == next_save && ci < g.n_ckpt) {
          store_states<S>(ckpt_row, g.vec_state, m.nvalid, h);
          ckpt_row += ckpt_step;
          next_save += p.ckpt_group;
        }
      }
      const float dl = sc_delta[k * SL + m.ch];
      const float du = sc_du[k * SL + m.ch];
      float bv[S], cv[S];
      smem_vec<S>(Bt + k * DP, bv);
      smem_vec<S>(Ct + k * DP, cv);
      float yp = 0.f;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const float dA = expm<E>(dl * a[s]);
        h[s] = fmaf(dA, h[s], du * bv[s]);
        yp = fmaf(h[s], cv[s], yp);
      }
      if constexpr (DY) {
        ys[k] = yp;  // this lane's partial: summed over the group after the stage
      } else {
        float yv = group_sum_c<L>(yp) + sc_skip[k * SL + m.ch];
        if (has_z) yv *= sc_gate[k * SL + m.ch];
        ys[k] = yv;  // every lane of the group: the same value
      }
    }
    if constexpr (DY) {
      // Rounds of 8 steps: every lane stores its 8 partials to its row, then lane j of
      // the group adds the four lanes' partials of steps 2j, 2j+1 as (p0+p1)+(p2+p3),
      // the butterfly's order (group_sum_c<4>), so y has the same bits. pl[l] is row
      // l ^ sw of the group (ysum_row_swap: (pl0+pl1)+(pl2+pl3) is then
      // (p2+p3)+(p0+p1), the same bits).
      float* my_row = ysum + size_t(threadIdx.x) * kYSumRow;
      const float* grp_row = ysum + size_t(threadIdx.x & ~3u) * kYSumRow + 2 * m.j;
      const int sw = ysum_row_swap(int(threadIdx.x));
#pragma unroll
      for (int r = 0; r < KF / kYSumSteps; ++r) {
#pragma unroll
        for (int q = 0; q < kYSumSteps / 4; ++q)
          reinterpret_cast<float4*>(my_row)[q] =
              make_float4(ys[r * kYSumSteps + 4 * q], ys[r * kYSumSteps + 4 * q + 1],
                          ys[r * kYSumSteps + 4 * q + 2], ys[r * kYSumSteps + 4 * q + 3]);
        __syncwarp();
        float2 pl[4];
#pragma unroll
        for (int l = 0; l < 4; ++l)
          pl[l] = *reinterpret_cast<const float2*>(grp_row + (l ^ sw) * kYSumRow);
        const int k = r * kYSumSteps + 2 * m.j;
        float y0 = ((pl[0].x + pl[1].x) + (pl[2].x + pl[3].x)) + sc_skip[k * SL + m.ch];
        float y1 = ((pl[0].y + pl[1].y) + (pl[2].y + pl[3].y)) + sc_skip[(k + 1) * SL + m.ch];
        if (has_z) {
          y0 *= sc_gate[k * SL + m.ch];
          y1 *= sc_gate[(k + 1) * SL + m.ch];
        }
        out_y(bf)[k * OL + m.ch] = y0;
        out_y(bf)[(k + 1) * OL + m.ch] = y1;
        __syncwarp();  // the group has read the row before the next round overwrites it
      }
    } else {
#pragma unroll
      for (int k = 0; k < KF; ++k) out_y(bf)[k * OL + m.ch] = ys[k];
    }
  }
  __syncthreads();  // the last stage's y
  {
    const int64_t c = (PIECES ? fw.s_hi : n_stage) - 1;
    store_chunk<T, CB, OL>(p.y + (row0 + c * KF) * p.ld_y + m.d0, p.ld_y, out_y(int(c & 1)),
                           int(PIECES ? min(int64_t(KF), p.T - c * KF) : p.T - c * KF), m.cols_valid);
  }
  if (p.h_final && m.dvalid && m.nvalid > 0 && (!PIECES || fw.s_hi == n_stage))
    store_states<S>(p.h_final + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid, h);
}

// ---- backward -------------------------------------------------------------------------
// One batch of a backward block's dB/dC partials (every backward kernel's block sums):
//   wbuf [W][Q][2][DP] f32, the warps' sums of the batch of Q = NO / (2·DP) steps from tb
//   (entry o = (kk·2 + q)·DP + n of a warp, the warps NO = Q·2·DP floats apart)
//   -> p.dB_part (q = 0) and p.dC_part (q = 1) [B, seg_rows, nblk_d, ds], rows
//   part_row0 + tb + kk of channel block dblk.
// Each sum adds the W warps in ascending order. Steps past T and states n >= ds are not
// stored. The calling thread takes entries first, first + STRIDE, ... (the whole block
// covers NO). The two row pointers are formed once a batch; an entry then costs its test,
// its loads and adds, a 32-bit offset and the store (the loop is unrolled; ptxas puts each
// entry's loads, adds and store under its test). Before, each entry formed its 64-bit
// partial index ((row0 + t)·nblk_d + dblk)·ds + n itself: ~35 instructions an entry, four
// entries a step at d_state 256, about as many instructions as the walk's arithmetic of that
// step (docs/performance-notes.md, "twenty-ninth session"). The same sums go to the same
// addresses, so the bits do not change.
// The row step nblk_d·ds <= kMaxDInner·kMaxDState and kk < Q <= kMaxPartialBatch: offsets
// fit an int.
constexpr int kMaxPartialBatch = 8;  // steps a dB/dC batch, the most any backward plan uses
static_assert(int64_t(::mc::Limits::kMaxDInner) * ::mc::Limits::kMaxDState * kMaxPartialBatch <
                  (int64_t(1) << 31),
              "store_batch_partials: 32-bit row offsets");
template <int NO, int DP, int W, int STRIDE, class V>
__device__ __forceinline__ void store_batch_partials(const CkptBwdArgs<V>& p, const float* wbuf,
                                                     int first, int64_t nblk_d, int64_t dblk,
                                                     int64_t part_row0, int64_t tb) {
  constexpr int Q = NO / (2 * DP);
  static_assert(NO % STRIDE == 0, "the block covers a batch's entries in whole passes");
  static_assert(Q <= kMaxPartialBatch, "a batch's rows: 32-bit offsets");
  if (tb >= p.T) return;  // a batch wholly past T (the last chunk's padding)
  const int64_t row = ((part_row0 + tb) * nblk_d + dblk) * p.ds;
  float* dB_rows = p.dB_part + row;
  float* dC_rows = p.dC_part + row;
  const int row_step = int(nblk_d * p.ds), ds = int(p.ds);
  const int rows_valid = int(min(int64_t(Q), p.T - tb));
#pragma unroll
  for (int i = 0; i < NO / STRIDE; ++i) {
    const int o = first + i * STRIDE;
    const int kk = o / (2 * DP), q = (o / DP) % 2, n = o % DP;
    float acc = wbuf[o];
#pragma unroll
    for (int w = 1; w < W; ++w) acc += wbuf[w * NO + o];
    float* dst = (q == 0 ? dB_rows : dC_rows) + (kk * row_step + n);
    if (n < ds && kk < rows_valid) *dst = acc;
  }
}

//   the forward's inputs, ckpt [B, ckpt_slots, di, ds] f32, dy [B*T, ld_dy] V,
//   dh_final [B, di, ds] -> dδ, du, dz [B*T, ld] V; dB_part, dC_part [B, seg_rows, nblk_d, ds],
//   dAlog_part [B, di, ds], dD_part [B, di], dh0 [B, di, ds] f32; carry between segments.
// grid B·nblk_d blocks of 32·W threads (PIECES with parallel pieces: pieces x that);
// dynamic smem ckpt_smem(.., backward = true). PIECES: compiled for the pieces of
// CkptBwdArgs (the d_state <= 16 plan only, host.cu); the instances without them run the
// code that was measured before pieces existed, and take one piece only.
template <class T, int S, int L, scan::ExpMath E, int K, bool PIECES = false>
__global__ void __launch_bounds__(kCkptMaxThreads, ckpt_bwd_min_blocks(E, S, L))
    ckpt_bwd_kernel(CkptBwdArgs<T> p, CkptGeom g) {
  constexpr int CW = 32 / L;  // channels per warp
  constexpr int CB = kCkptWarps * CW, DP = L * S, W = kCkptWarps;
  constexpr int Q = ckpt_q(DP);
  constexpr int NV = 2 * S;       // a lane's dB and dC terms per step
  constexpr int R = NV / CW;      // its sums after the channel reduce-scatter
  constexpr int NO = Q * 2 * DP;  // one warp's sums of one batch
  constexpr int RG = ckpt_recompute_group(S, L, K);  // recomputed steps held in registers
  constexpr bool SB = ckpt_single_bc(S, sizeof(T), true);  // one B/C buffer
  constexpr bool FB = ckpt_bc_f32(S, L, sizeof(T));  // one B/C buffer and its f32 copy
  constexpr int QD = Q > 1 ? Q / 2 : 1;  // walked steps whose sums and outputs are stored together
  // S1, S2 summed over the group once per QD steps (one step per lane) instead of a
  // butterfly per step on every lane: at (S, L) = (4, 4), the d_state <= 16 plan
  constexpr bool DS = S == 4 && L == 4 && QD == 4;
  constexpr bool HV = ckpt_da_halves(E, S, L, K);  // the chunk walked in two halves of Q steps
  constexpr bool KD = ckpt_bwd_kept_da(E, S, L, K);  // the recompute's dA kept for the walk
  constexpr int WK = ckpt_bwd_walk_steps(E, S, L, K);  // steps whose states (and dA) hs holds
  static_assert(!HV || WK == Q, "the halves are the walk's batches");
  static_assert(K % Q == 0, "chunk must be a multiple of the reduction batch");
  static_assert(S % 4 == 0, "states per thread in float4 units");
  static_assert(R >= 1, "a lane's terms cover the warp's channels");
  extern __shared__ float smem[];
  // Without PIECES every use below reads the launch's own chunks (p.c_lo, p.c_hi) and
  // blockIdx.x, as the kernel did before pieces (the same SASS but for parameter offsets).
  // The carry-in and the end are therefore two branches, the second the code as it was:
  // folding them into one (PIECES ? pw.x : p.x, !PIECES || ...; equal in value) was tried
  // and changed the SASS of every instance without pieces.
  [[maybe_unused]] BwdPiece pw{};  // read only with PIECES (zeroes: no use-before-set warning)
  if constexpr (PIECES) pw = bwd_piece(p, g.nblk_d, g.n_ckpt);
  const LaneMap m = lane_map(g, p.di, p.ds, S, PIECES ? pw.bid : int64_t(blockIdx.x));
  const int wch = m.lane / L;  // channel within the warp
  const bool has_z = p.z != nullptr, has_sp = p.delta_bias != nullptr;
  const CkptSmem lay = ckpt_smem(g, K, S, sizeof(T), bwd_n_act(has_z), bwd_n_sc(has_z, has_sp),
                                 bwd_n_out(has_z), true, KD, WK);
  constexpr int RL = raw_ld_c(CB, L, sizeof(T)), SL = sc_ld_c(CB, L);
  constexpr int HS = 32 * W * S;  // floats per hs slot
  char* base = reinterpret_cast<char*>(smem);
  const size_t act_bytes = smem_region(size_t(K) * RL, sizeof(T));
  const size_t bc_bytes = smem_region(size_t(K) * DP, sizeof(T));
  const size_t sc_bytes = smem_region(size_t(K) * SL, 4);
  const size_t out_bytes = smem_region(size_t(K) * CB, 4);
  auto raw = [&](int bf, int i) {
    return reinterpret_cast<T*>(base + lay.raw + (size_t(bf) * bwd_n_act(has_z) + i) * act_bytes);
  };
  auto bct = [&](int bf, int i) { return reinterpret_cast<T*>(base + lay.bc + (2 * bf + i) * bc_bytes); };
  // FB: the f32 copy of the chunk's B rows [K][DP], then its C rows, after the staged buffer
  float* bc32 = reinterpret_cast<float*>(base + lay.bc + 2 * bc_bytes);
  float* sc_delta = reinterpret_cast<float*>(base + lay.sc);
  float* sc_u = reinterpret_cast<float*>(base + lay.sc + sc_bytes);
  float* sc_dy = reinterpret_cast<float*>(base + lay.sc + 2 * sc_bytes);
  float* sc_fz = reinterpret_cast<float*>(base + lay.sc + 3 * sc_bytes);  // with z
  float* sc_fd = reinterpret_cast<float*>(base + lay.sc + (3 + int(has_z)) * sc_bytes);  // softplus
  // outputs: dδ (0), du (1), dz (2)
  auto out_t = [&](int i) {
    return reinterpret_cast<float*>(base + lay.out + size_t(i) * out_bytes);
  };
  // this thread's hs slots [K+1][S] (stride HS): slot i = the state before step i
  float* my_hs = reinterpret_cast<float*>(base + lay.hs) + size_t(threadIdx.x) * S;
  float* wsum = reinterpret_cast<float*>(base + lay.wsum);
  // S states to / from slot i, as float4s (smem_vec reads shared-memory rows)
  auto put_states = [&](int i, const float(&v)[S]) { store_states<S>(my_hs + i * HS, true, S, v); };
  auto get_states = [&](int i, float(&v)[S]) { smem_vec<S>(my_hs + i * HS, v); };
  // KD: this thread's da slots [K][S] (stride HS): slot k = dA of step k
  float* my_da = reinterpret_cast<float*>(base + lay.da) + size_t(threadIdx.x) * S;

  // a = exp_coef(A); S2 is accumulated with a and scaled back once per step
  // (exp_coef_inverse), so A itself need not stay in registers.
  float a[S], dh[S], dAn[S], dal[S];
  load_vec<S>(p.a_neg + m.d * p.ds + m.n0, g.vec_state && m.nvalid == S, m.nvalid, a);
#pragma unroll
  for (int s = 0; s < S; ++s) {
    a[s] = exp_coef<E>(a[s]);
    dAn[s] = 1.f;  // dA_T := 1, so the last step sees dh_{T-1} = dy·C + dh_final
    dal[s] = 0.f;
  }
  const int64_t state_off = (m.b * p.di + m.d) * p.ds + m.n0;  // this thread's [b, d, n0]
  const int64_t carry_plane = p.B * p.di * p.ds;
  const bool first_seg = (PIECES ? pw.c_hi : p.c_hi) >= g.n_ckpt;  // ends at T: no carry in
  float dD_acc = 0.f;
  if (!first_seg) {
    if constexpr (PIECES) {  // the carry pass's state, or the later launch's of this piece
      const float* cin = p.parallel_pieces ? p.piece_carry + 2 * pw.piece * carry_plane : p.carry;
      load_states<S>(cin + state_off, g.vec_state, m.nvalid, dh);
      load_states<S>(cin + carry_plane + state_off, g.vec_state, m.nvalid, dAn);
      if (!pw.fresh) {  // a later launch of the same piece: its sums go on
        load_states<S>(p.carry + 2 * carry_plane + state_off, g.vec_state, m.nvalid, dal);
        dD_acc = p.carry[3 * carry_plane + m.b * p.di + m.d];
      }
    } else {
      load_states<S>(p.carry + state_off, g.vec_state, m.nvalid, dh);
      load_states<S>(p.carry + carry_plane + state_off, g.vec_state, m.nvalid, dAn);
      load_states<S>(p.carry + 2 * carry_plane + state_off, g.vec_state, m.nvalid, dal);
      dD_acc = p.carry[3 * carry_plane + m.b * p.di + m.d];
    }
  } else if (p.dh_final) {
    load_states<S>(p.dh_final + state_off, g.vec_state, m.nvalid, dh);
  } else {
#pragma unroll
    for (int s = 0; s < S; ++s) dh[s] = 0.f;
  }
  const float Dd = p.D ? __ldg(p.D + m.d) : 0.f;
  const float bias = p.delta_bias ? __ldg(p.delta_bias + m.d) : 0.f;
  const int64_t row0 = m.b * p.T;
  const int64_t t_lo = p.c_lo * K;                 // the segment's first step
  const int64_t part_row0 = m.b * p.seg_rows - t_lo;  // partial row of step t: part_row0 + t
  // chunk c's dδ, du (and dz), one coalesced pass
  auto store_outputs = [&](int64_t c) {
    const int rows = int(min(int64_t(K), p.T - c * K));
    const int64_t r = row0 + c * K;
    store_chunk<T, CB>(p.d_delta + r * p.ld_dd + m.d0, p.ld_dd, out_t(0), rows, m.cols_valid);
    store_chunk<T, CB>(p.du + r * p.ld_du + m.d0, p.ld_du, out_t(1), rows, m.cols_valid);
    if (has_z) store_chunk<T, CB>(p.dz + r * p.ld_dz + m.d0, p.ld_dz, out_t(2), rows, m.cols_valid);
  };
  int wb = 0;  // wsum buffer
  zero_bc_padding<T>(bct(0, 0), K, DP, p.ds, SB || FB ? 2 : 4);
  const UnitMap act_map = unit_map<T>(CB), bc_map = unit_map<T>(int(p.ds));

  // chunk c's activation tiles (acts) into buffer bf and its B/C rows (bc) into buffer bf,
  // or buffer 0 with one B/C buffer (SB, FB), as one cp.async group. Without SB a chunk's
  // tiles are staged together, beside the previous chunk's math (with FB after the barrier
  // that ends the conversion of the chunk's B/C rows); with SB the B/C rows follow after the
  // previous chunk's last batch barrier (in the walk below).
  auto stage = [&](int64_t c, int bf, bool acts, bool bc) {
    const int64_t r = row0 + c * K;
    const int rv = int(min(int64_t(K), p.T - c * K));
    if (acts) {
      stage_tile<T>(raw(bf, 0), RL, p.delta + r * p.ld_delta + m.d0, p.ld_delta, K, CB, rv,
                    m.cols_valid, g.async_act, act_map);
      stage_tile<T>(raw(bf, 1), RL, p.u + r * p.ld_u + m.d0, p.ld_u, K, CB, rv, m.cols_valid,
                    g.async_act, act_map);
      stage_tile<T>(raw(bf, 2), RL, p.dy + r * p.ld_dy + m.d0, p.ld_dy, K, CB, rv, m.cols_valid,
                    g.async_act, act_map);
      if (has_z)
        stage_tile<T>(raw(bf, 3), RL, p.z + r * p.ld_z + m.d0, p.ld_z, K, CB, rv, m.cols_valid,
                      g.async_act, act_map);
    }
    if (bc) {
      const int bb = SB || FB ? 0 : bf;
      stage_tile<T>(bct(bb, 0), DP, p.Bm + r * p.ld_B, p.ld_B, K, int(p.ds), rv, int(p.ds),
                    g.async_bc, bc_map);
      stage_tile<T>(bct(bb, 1), DP, p.Cm + r * p.ld_C, p.ld_C, K, int(p.ds), rv, int(p.ds),
                    g.async_bc, bc_map);
    }
    cp_async_commit();
  };
  stage((PIECES ? pw.c_hi : p.c_hi) - 1, int(((PIECES ? pw.c_hi : p.c_hi) - 1) & 1), true, true);

  // chunk cc's checkpoint (the state before its first step) into v
  auto load_ckpt = [&](int64_t cc, float(&v)[S]) {
    load_states<S>(p.ckpt + ((m.b * p.ckpt_slots + (cc - p.ckpt_c0)) * p.di + m.d) * p.ds + m.n0,
                   g.vec_state, m.nvalid, v);
  };
  // The checkpoint of the chunk walked next is loaded before the current chunk's walk, into
  // the registers its recompute has just freed, so the load's latency runs under the walk
  // (the same addresses as a load at the top of the next chunk, earlier: no bit changes).
  // H100 A/Bs, B 8, d_inner 1536, T 2048, two runs each, alternated (docs/performance-notes.md):
  // twentieth session, the d_state <= 16 one-channel plan 967 -> 922 µs (bf16, hardware exp);
  // twenty-first, every other instance: d_state 64/128/256 1.5-4.7 % faster with the hardware
  // exp, 1.3-4.6 % with the accurate one; the pieces (B 2) 3.4-4.6 % faster with the hardware
  // exp, within the spread with the accurate one (-0.6 to +1.4 %).
  float hck[S];
  load_ckpt((PIECES ? pw.c_hi : p.c_hi) - 1, hck);
  for (int64_t c = (PIECES ? pw.c_hi : p.c_hi) - 1; c >= (PIECES ? pw.c_lo : p.c_lo); --c) {
    const int bf = int(c & 1);
    const int64_t t0 = c * K;
    const int nk = int(min(int64_t(K), p.T - t0));
    cp_async_wait_all();
    __syncthreads();  // chunk c's tiles are in buffer bf; every thread is done with chunk c+1
    if constexpr (FB) {  // chunk c's B/C rows to f32, before chunk c-1's overwrite them
      convert_rows_f32<T>(bc32, bct(0, 0), 2 * K * DP);
      __syncthreads();
    }
    if (c > (PIECES ? pw.c_lo : p.c_lo)) stage(c - 1, bf ^ 1, true, !SB);  // overlaps the math
    // per-(t, d) scalars, lane j of the group takes steps k ≡ j (mod L)
    for (int k = m.j; k < K; k += L) {
      const int e = k * RL + m.ch, es = k * SL + m.ch;
      const float x = smem_f32(raw(bf, 0)[e]);
      float dl = 0.f, dyv = 0.f;
      if (k < nk) {
        dl = has_sp ? act_softplus(x + bias) : x;
        dyv = smem_f32(raw(bf, 2)[e]);  // 0 on padding channels and rows: nothing to dB/dC
      }
      if (has_sp) sc_fd[es] = act_sigmoid(x + bias);
      if (has_z) {
        const float zv = smem_f32(raw(bf, 3)[e]);
        sc_fz[es] = dyv * act_silu_grad(zv);  // dz = dG·y·silu'(z), y from the recompute
        dyv = dyv * act_silu(zv);             // ∂L/∂y = dG·silu(z)
      }
      sc_delta[es] = dl;
      sc_u[es] = smem_f32(raw(bf, 1)[e]);
      sc_dy[es] = dyv;
    }
    __syncwarp();
    const int bb = SB || FB ? 0 : bf;  // the staged buffer of chunk c's B/C rows (as in stage)
    const BcRows<FB, T> bcr = bc_rows<FB>(bc32, bct(bb, 0), bct(bb, 1), K, DP, m.n0);
    const auto* Bt = bcr.B;
    const auto* Ct = bcr.C;

    // HV: steps kb0 .. kb0+Q-1 from the state hin before them into hs slots 0..Q and da slots
    // 0..Q-1 (and, with z, y for dz), as the recompute below does for a whole chunk. Kept apart
    // from it on purpose: one helper for both (tried in the twenty-third session) gave the same
    // instruction counts but another register allocation and order in 21 instances, whose
    // timings were measured as they are.
    [[maybe_unused]] auto recompute_half = [&](int kb0, const float(&hin)[S]) {
      float h[S];
#pragma unroll
      for (int s = 0; s < S; ++s) h[s] = hin[s];
      float hk[Q][S], yk[Q], dk[Q][S];
#pragma unroll
      for (int i = 0; i < Q; ++i) {
        const int k = kb0 + i;
        const float dl = sc_delta[k * SL + m.ch];
        const float du = dl * sc_u[k * SL + m.ch];
        float bv[S];
        smem_vec<S>(Bt + k * DP, bv);
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const float dA = expm<E>(dl * a[s]);
          h[s] = fmaf(dA, h[s], du * bv[s]);
          hk[i][s] = h[s];
          dk[i][s] = dA;
        }
        if (has_z) {  // block-uniform
          float cv[S];
          smem_vec<S>(Ct + k * DP, cv);
          float yp = 0.f;
#pragma unroll
          for (int s = 0; s < S; ++s) yp = fmaf(h[s], cv[s], yp);
          yk[i] = group_sum_c<L>(yp) + __fmul_rn(Dd, sc_u[k * SL + m.ch]);
        }
      }
      put_states(0, hin);
#pragma unroll
      for (int i = 0; i < Q; ++i) put_states(i + 1, hk[i]);
#pragma unroll
      for (int i = 0; i < Q; ++i) store_states<S>(my_da + i * HS, true, S, dk[i]);
      if (has_z)
#pragma unroll
        for (int i = 0; i < Q; ++i)
          out_t(2)[(kb0 + i) * CB + m.ch] = sc_fz[(kb0 + i) * SL + m.ch] * yk[i];
    };
    if constexpr (HV) {
      // the first half's steps from the checkpoint, only the state after them kept; then the
      // second half into hs and da (the first half is recomputed before its own walk)
      float h[S];
#pragma unroll
      for (int s = 0; s < S; ++s) h[s] = hck[s];
#pragma unroll
      for (int k = 0; k < Q; ++k) {
        const float dl = sc_delta[k * SL + m.ch];
        const float du = dl * sc_u[k * SL + m.ch];
        float bv[S];
        smem_vec<S>(Bt + k * DP, bv);
#pragma unroll
        for (int s = 0; s < S; ++s) h[s] = fmaf(expm<E>(dl * a[s]), h[s], du * bv[s]);
      }
      recompute_half(Q, h);
    } else
    // recompute the chunk's states into hs (and, with z, y for dz); branch-free. RG steps'
    // states and y stay in registers and are stored after the group's last step: a
    // shared-memory store inside the loop would order the later steps' loads after it
    // (the compiler cannot tell the regions apart) and serialise the steps.
    {
      float h[S];
#pragma unroll
      for (int s = 0; s < S; ++s) h[s] = hck[s];
#pragma unroll
      for (int k0 = 0; k0 < K; k0 += RG) {
        float hk[RG][S], yk[RG];
        [[maybe_unused]] float dk[RG][S];  // KD: the steps' dA
#pragma unroll
        for (int i = 0; i < RG; ++i) {
          const int k = k0 + i;
          const float dl = sc_delta[k * SL + m.ch];
          const float du = dl * sc_u[k * SL + m.ch];
          float bv[S];
          smem_vec<S>(Bt + k * DP, bv);
#pragma unroll
          for (int s = 0; s < S; ++s) {
            const float dA = expm<E>(dl * a[s]);
            h[s] = fmaf(dA, h[s], du * bv[s]);
            hk[i][s] = h[s];
            if constexpr (KD) dk[i][s] = dA;
          }
          if (has_z) {  // block-uniform
            float cv[S];
            smem_vec<S>(Ct + k * DP, cv);
            float yp = 0.f;
#pragma unroll
            for (int s = 0; s < S; ++s) yp = fmaf(h[s], cv[s], yp);
            yk[i] = group_sum_c<L>(yp) + __fmul_rn(Dd, sc_u[k * SL + m.ch]);
          }
        }
        if (k0 == 0) put_states(0, hck);
#pragma unroll
        for (int i = 0; i < RG; ++i) put_states(k0 + i + 1, hk[i]);
        if constexpr (KD)
#pragma unroll
          for (int i = 0; i < RG; ++i) store_states<S>(my_da + (k0 + i) * HS, true, S, dk[i]);
        if (has_z)
#pragma unroll
          for (int i = 0; i < RG; ++i)
            out_t(2)[(k0 + i) * CB + m.ch] = sc_fz[(k0 + i) * SL + m.ch] * yk[i];
      }
    }

    // the next chunk's checkpoint, in flight during this chunk's walk (hck is free now;
    // HV: after the first half's recompute, in the loop below)
    if constexpr (!HV)
      if (c > (PIECES ? pw.c_lo : p.c_lo)) load_ckpt(c - 1, hck);

    // walk the chunk backwards, all K steps, Q per dB/dC batch; steps past T have
    // dl = dy = 0: dA = 1 and dh, dAn (= 1), dal, dD unchanged, no dB/dC terms.
    // hcur = h_t of the step walked (slot k+1); hp = h_{t-1} (slot k).
    float hcur[S];
    get_states(WK, hcur);
    for (int qb = K / Q - 1; qb >= 0; --qb) {
      if constexpr (HV) {  // the first half's states and dA, then the next checkpoint's load
        if (qb == 0) {
          recompute_half(0, hck);
          if (c > (PIECES ? pw.c_lo : p.c_lo)) load_ckpt(c - 1, hck);
        }
      }
      const int hb = HV ? qb * Q : 0;  // the step of hs slot 0 (da slot 0)
      float* ws = wsum + (size_t(wb) * W + m.warp) * NO;  // this warp's sums of this batch
      // The sums and outputs of QD steps stay in registers until the last of them (see
      // the recompute: a shared-memory store would serialise the steps' loads behind it).
#pragma unroll
      for (int kh = Q - QD; kh >= 0; kh -= QD) {
        float wv[QD][R], o_dd[QD], o_du[QD];
        float(&s1p)[QD] = o_dd;  // with DS the same registers hold the lane's S1, S2 partials
        float(&s2p)[QD] = o_du;
#pragma unroll
        for (int kk = kh + QD - 1; kk >= kh; --kk) {
          const int k = qb * Q + kk;
          const float dl = sc_delta[k * SL + m.ch];
          const float uv = sc_u[k * SL + m.ch];
          const float dyv = sc_dy[k * SL + m.ch];
          float bv[S], cv[S], hp[S];
          smem_vec<S>(Bt + k * DP, bv);
          smem_vec<S>(Ct + k * DP, cv);
          get_states(k - hb, hp);
          [[maybe_unused]] float dak[S];  // KD: the recompute's dA of this step
          if constexpr (KD) smem_vec<S>(my_da + (k - hb) * HS, dak);
          float S1 = 0.f, S2 = 0.f;
#pragma unroll
          for (int s = 0; s < S; ++s) {
            const float dA = KD ? dak[s] : expm<E>(dl * a[s]);
            dh[s] = fmaf(dAn[s], dh[s], dyv * cv[s]);
            const float dhP = dh[s] * (dA * hp[s]);
            dal[s] = fmaf(dl, dhP, dal[s]);
            S2 = fmaf(a[s], dhP, S2);
            S1 = fmaf(dh[s], bv[s], S1);
            dAn[s] = dA;
          }
          // dB terms (δ·u)·dh and dC terms dy·h_t, summed over the warp's channels
          float v[NV];
          const float w = dl * uv;
#pragma unroll
          for (int s = 0; s < S; ++s) {
            v[s] = w * dh[s];
            v[S + s] = dyv * hcur[s];
            hcur[s] = hp[s];
          }
          reduce_scatter_channels<L, NV>(v, m.lane);
#pragma unroll
          for (int r = 0; r < R; ++r) wv[kk - kh][r] = v[r];
          dD_acc = fmaf(dyv, uv, dD_acc);
          if constexpr (DS) {  // the lane's partials: summed over the group below
            s1p[kk - kh] = S1;
            s2p[kk - kh] = S2;
          } else {
            S1 = group_sum_c<L>(S1);
            S2 = group_sum_c<L>(S2) * exp_coef_inverse<E>();
            {  // every lane of the group: the same values
              const float fd = has_sp ? sc_fd[k * SL + m.ch] : 1.f;
              o_dd[kk - kh] = fmaf(uv, S1, S2) * fd;
              o_du[kk - kh] = fmaf(dl, S1, __fmul_rn(Dd, dyv));
            }
          }
        }
#pragma unroll
        for (int kk = kh; kk < kh + QD; ++kk) {
          const int k = qb * Q + kk;
#pragma unroll
          for (int r = 0; r < R; ++r) {  // entry index wch·R + r = (q, state s of lane j)
            const int vi = wch * R + r, q = vi / S, n = m.j * S + vi % S;
            ws[(kk * 2 + q) * DP + n] = wv[kk - kh][r];
          }
          if constexpr (!DS) {
            out_t(0)[k * CB + m.ch] = o_dd[kk - kh];
            out_t(1)[k * CB + m.ch] = o_du[kk - kh];
          }
        }
        if constexpr (DS) {
          // S1, S2 of the QD = 4 steps kb .. kb+3 over the group's 4 lanes: lane j adds
          // step kb+j's, in the butterfly's order (group_sum_c<4>: (l0+l1)+(l2+l3)), so
          // dδ and du have the same bits. The pairs pass through hs slots kb+1, kb+2 of
          // this warp's threads, whose states the walk has consumed (hcur holds slot kb):
          // group wch's row is 32 floats, pair (step i, lane l) at 4·((i + wch) mod 4) + l
          // (stores on distinct banks per half-warp), read as two float4s, the odd groups'
          // halves swapped (distinct banks per quarter-warp; the outer + commutes).
          const int kb = qb * Q + kh, rot = wch & 3;
          float* row = reinterpret_cast<float*>(base + lay.hs) +
                       size_t(kb - hb + 1 + (wch >> 2)) * HS + m.warp * 32 * S + rot * 32;
          __syncwarp();  // every lane of the warp has read its states of slots kb+1, kb+2
#pragma unroll
          for (int i = 0; i < QD; ++i)
            *reinterpret_cast<float2*>(row + 2 * (4 * ((i + rot) & 3) + m.j)) =
                make_float2(s1p[i], s2p[i]);
          __syncwarp();
          const float4* mine = reinterpret_cast<const float4*>(row + 8 * ((m.j + rot) & 3));
          const int h0 = wch & 1;
          const float4 x = mine[h0], y = mine[h0 ^ 1];
          const float S1 = (x.x + x.z) + (y.x + y.z);
          const float S2 = ((x.y + x.w) + (y.y + y.w)) * exp_coef_inverse<E>();
          const int k = kb + m.j, e = k * SL + m.ch;
          const float fd = has_sp ? sc_fd[e] : 1.f;
          out_t(0)[k * CB + m.ch] = fmaf(sc_u[e], S1, S2) * fd;
          out_t(1)[k * CB + m.ch] = fmaf(sc_delta[e], S1, __fmul_rn(Dd, sc_dy[e]));
        }
      }
      __syncthreads();  // every warp's sums of this batch are in wsum[wb]
      // one B/C buffer: after the chunk's last batch barrier no thread reads its B/C rows
      if (SB && qb == 0 && c > (PIECES ? pw.c_lo : p.c_lo)) stage(c - 1, 0, false, true);
      // block sums (warps ascending) -> the block's partials of rows t0 + qb·Q + kk
      store_batch_partials<NO, DP, W, kCkptMaxThreads>(p, wsum + size_t(wb) * W * NO,
                                                       int(threadIdx.x), g.nblk_d, m.dblk,
                                                       part_row0, t0 + qb * Q);
      wb ^= 1;  // the next batch fills the other buffer; this one is read until the next barrier
    }
    // the last batch's barrier published this chunk's outputs; the next chunk's first
    // barrier keeps its walk from overwriting them before every thread has stored them
    store_outputs(c);
  }

  if constexpr (PIECES) {
    if (pw.c_lo > 0 && !p.parallel_pieces) {  // more launches of this piece follow: the carries
      if (m.dvalid && m.nvalid > 0) {
        store_states<S>(p.carry + state_off, g.vec_state, m.nvalid, dh);
        store_states<S>(p.carry + carry_plane + state_off, g.vec_state, m.nvalid, dAn);
        store_states<S>(p.carry + 2 * carry_plane + state_off, g.vec_state, m.nvalid, dal);
      }
      if (m.dvalid && m.j == 0) p.carry[3 * carry_plane + m.b * p.di + m.d] = dD_acc;
    }
    if (!pw.done) return;
    const int64_t slot = m.b * p.n_pieces + pw.piece;  // this piece's dA_log / dD partials
    if (m.dvalid && m.nvalid > 0) {
      float out[S];
      load_vec<S>(p.a_neg + m.d * p.ds + m.n0, g.vec_state && m.nvalid == S, m.nvalid, out);
#pragma unroll
      for (int s = 0; s < S; ++s) out[s] *= dal[s];  // dA_log = A·Σ δ·dh·P
      store_states<S>(p.dAlog_part + (slot * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid,
                      out);
      if (p.dh0 && pw.c_lo == 0) {
#pragma unroll
        for (int s = 0; s < S; ++s) out[s] = dAn[s] * dh[s];  // ∂L/∂h_{-1} = dA_0·∂L/∂h_0
        store_states<S>(p.dh0 + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid, out);
      }
    }
    if (m.dvalid && m.j == 0) p.dD_part[slot * p.di + m.d] = dD_acc;
  } else {
    if (p.c_lo > 0) {  // more segments follow: hand the carries on
      if (m.dvalid && m.nvalid > 0) {
        store_states<S>(p.carry + state_off, g.vec_state, m.nvalid, dh);
        store_states<S>(p.carry + carry_plane + state_off, g.vec_state, m.nvalid, dAn);
        store_states<S>(p.carry + 2 * carry_plane + state_off, g.vec_state, m.nvalid, dal);
      }
      if (m.dvalid && m.j == 0) p.carry[3 * carry_plane + m.b * p.di + m.d] = dD_acc;
      return;
    }
    if (m.dvalid && m.nvalid > 0) {
      float out[S];
      load_vec<S>(p.a_neg + m.d * p.ds + m.n0, g.vec_state && m.nvalid == S, m.nvalid, out);
#pragma unroll
      for (int s = 0; s < S; ++s) out[s] *= dal[s];  // dA_log = A·Σ δ·dh·P
      store_states<S>(p.dAlog_part + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid,
                      out);
      if (p.dh0) {
#pragma unroll
        for (int s = 0; s < S; ++s) out[s] = dAn[s] * dh[s];  // ∂L/∂h_{-1} = dA_0·∂L/∂h_0
        store_states<S>(p.dh0 + (m.b * p.di + m.d) * p.ds + m.n0, g.vec_state, m.nvalid, out);
      }
    }
    if (m.dvalid && m.j == 0) p.dD_part[m.b * p.di + m.d] = dD_acc;
  }
}

}  // namespace mc::kern::scan_detail
