// steps.hpp — every forward and backward step of one Mamba-1 layer
// (docs/math.md) as its own function, templated on the scalar S
// (float and double are instantiated in steps.cpp).
//
// Conventions (docs/DESIGN.md): all tensors row-major and contiguous, rows
// batch-major (r = b*T + t). Linear weights are W[in, out]. Functions named
// *_bwd write input gradients (overwrite) and accumulate (+=) parameter
// gradients, exactly like the GPU pipeline. Every function is OpenMP-parallel
// over independent outputs only; each output element is produced by one
// thread with a fixed summation order, so results are bitwise identical for
// any OMP_NUM_THREADS (test: validation/cpu/test_oracle_threads.cpp).
#pragma once

#include <cstdint>

namespace mc::ref {

// ---- Threading ---------------------------------------------------------------
// An OpenMP region whose work (scalar operations, roughly) is below this
// threshold runs on the calling thread only: below it fork/join costs more than
// the loop (badly so on a loaded machine). The results never depend on it,
// because every output element is computed by the same code in the same order
// whichever thread runs it. Default 1 << 18; tests set 0 to force every region
// parallel when they check bitwise thread-count invariance.
int64_t parallel_min_work();
void set_parallel_min_work(int64_t ops);

// ---- RMSNorm (F1, norm_f; B8) -------------------------------------------
// x [R, D], g [D] -> y [R, D], rms [R]  (rms = sqrt(mean(x^2) + eps), saved as is)
template <class S>
void rmsnorm_fwd(const S* x, const S* g, int64_t R, int64_t D, double eps, S* y, S* rms);
// dy [R, D], x [R, D], g [D], rms [R] -> dx [R, D] (=), dg [D] (+=)
template <class S>
void rmsnorm_bwd(const S* dy, const S* x, const S* g, const S* rms, int64_t R, int64_t D, S* dx,
                 S* dg);

// ---- Linear (F2, F4b, F4c, F5, input_proj; B1, B4, B5, B7) ---------------
// X [M, K], W [K, N], b [N] or nullptr -> Y [M, N] = X·W + b
template <class S>
void linear_fwd(const S* X, const S* W, const S* b, int64_t M, int64_t K, int64_t N, S* Y);
// dY [M, N], W [K, N] -> dX [M, K] = dY·Wᵀ (=)
template <class S>
void linear_bwd_dx(const S* dY, const S* W, int64_t M, int64_t K, int64_t N, S* dX);
// X [M, K], dY [M, N] -> dW [K, N] += Xᵀ·dY
template <class S>
void linear_bwd_dw(const S* X, const S* dY, int64_t M, int64_t K, int64_t N, S* dW);
// dY [M, N] -> db [N] += Σ_rows dY
template <class S>
void linear_bwd_db(const S* dY, int64_t M, int64_t N, S* db);

// ---- Split + SiLU gate (F3) ---------------------------------------------
// P [R, 2*di] -> xb [R, di] (cols [0,di)), z [R, di] (cols [di,2di)), gs = SiLU(z) [R, di]
template <class S>
void split_gate_silu_fwd(const S* P, int64_t R, int64_t di, S* xb, S* z, S* gs);
// dxb [R, di], dz [R, di] -> dP [R, 2*di] (=), x half first (B7 concat)
template <class S>
void concat_halves(const S* dxb, const S* dz, int64_t R, int64_t di, S* dP);

// ---- Causal depthwise conv1d + SiLU with carried state (F4a, B6) ----------
// xb [B, T, di], w [di, dc], bias [di], state [B, di, dc] (in: S0, out: last window)
//   -> windows [B, T, di, dc] (after shift+insert), pc [B, T, di], u = SiLU(pc) [B, T, di]
template <class S>
void conv1d_silu_fwd(const S* xb, const S* w, const S* bias, int64_t B, int64_t T, int64_t di,
                     int64_t dc, S* state, S* windows, S* pc, S* u);
// du [B, T, di], pc [B, T, di], windows [B, T, di, dc], w [di, dc]
//   -> dxb [B, T, di] (=), dw [di, dc] (+=), dbias [di] (+=),
//      d_state0 [B, di, dc] (=) if non-null: gradient w.r.t. the incoming state
//      (slot 0 is never read by the forward, so its gradient is 0).
template <class S>
void conv1d_silu_bwd(const S* du, const S* pc, const S* windows, const S* w, int64_t B, int64_t T,
                     int64_t di, int64_t dc, S* dxb, S* dw, S* dbias, S* d_state0);
// Same, plus an upstream gradient w.r.t. the FINAL state (the window of t = T-1
// that the forward writes back), d_state_T [B, di, dc] or nullptr. Slot k of
// that window is xb[T-dc+k] (or S0[T+k] when T-dc+k < 0), and the gradient is
// routed there. Used to chain the backward of consecutive segments of one
// sequence (split-sequence invariance, truncated BPTT).
template <class S>
void conv1d_silu_bwd_chained(const S* du, const S* pc, const S* windows, const S* w,
                             const S* d_state_T, int64_t B, int64_t T, int64_t di, int64_t dc,
                             S* dxb, S* dw, S* dbias, S* d_state0);

// ---- Softplus (F4c, B4) --------------------------------------------------
// x [n] -> y [n] = x > 20 ? x : log1p(exp(x))
template <class S>
void softplus_fwd(const S* x, int64_t n, S* y);
// x [n] (pre-softplus), dy [n] -> dx [n] = dy·σ(x)  (dy when x > 20)
template <class S>
void softplus_bwd(const S* x, const S* dy, int64_t n, S* dx);

// ---- Selective scan (F4d, B3) --------------------------------------------
// delta [B, T, di], u [B, T, di], Bm [B, T, ds], Cm [B, T, ds], a_neg [di, ds] (= -exp(A_log)),
// D [di], h [B, di, ds] (in: initial state, out: final state)
//   -> h_saved [B, T+1, di, ds] (h_saved[:,0] = initial state), y [B, T, di]
template <class S>
void selective_scan_fwd(const S* delta, const S* u, const S* Bm, const S* Cm, const S* a_neg,
                        const S* D, int64_t B, int64_t T, int64_t di, int64_t ds, S* h, S* h_saved,
                        S* y);
// Backward of the scan. dy [B, T, di] ->
//   d_delta [B, T, di] (=), du [B, T, di] (=), dBm [B, T, ds] (=), dCm [B, T, ds] (=),
//   dD [di] (+=), dA_log [di, ds] (+=, chain rule through a_neg = -exp(A_log)),
//   dh0 [B, di, ds] (=) if non-null: gradient w.r.t. the initial state.
// The per-(b,t,d,n) dB/dC terms are summed over d in ascending order without
// rounding (our GPU keeps those partials in f32 for every dtype; mamba-rs
// rounds each to bf16/f16 before the sum).
template <class S>
void selective_scan_bwd(const S* delta, const S* u, const S* Bm, const S* Cm, const S* a_neg,
                        const S* D, const S* h_saved, const S* dy, int64_t B, int64_t T,
                        int64_t di, int64_t ds, S* d_delta, S* du, S* dBm, S* dCm, S* dD,
                        S* dA_log, S* dh0);
// Same, plus an upstream gradient w.r.t. the FINAL state h_T, dh_T [B, di, ds]
// or nullptr (the reverse recurrence starts from dh = dh_T instead of 0).
template <class S>
void selective_scan_bwd_chained(const S* delta, const S* u, const S* Bm, const S* Cm,
                                const S* a_neg, const S* D, const S* h_saved, const S* dy,
                                const S* dh_T, int64_t B, int64_t T, int64_t di, int64_t ds,
                                S* d_delta, S* du, S* dBm, S* dCm, S* dD, S* dA_log, S* dh0);

// ---- Gating (F4e, B2) ------------------------------------------------------
// y [n], gs [n] -> g [n] = y ⊙ gs
template <class S>
void gating_fwd(const S* y, const S* gs, int64_t n, S* g);
// dG [n], y [n], z [n] (pre-SiLU gate), gs [n] -> dY = dG ⊙ gs (=), dz = dG ⊙ y ⊙ SiLU'(z) (=)
template <class S>
void gating_bwd(const S* dG, const S* y, const S* z, const S* gs, int64_t n, S* dY, S* dz);

// ---- Residual (F6) ---------------------------------------------------------
// a [n], b [n] -> out [n] = a + b  (out may alias a)
template <class S>
void residual_add(const S* a, const S* b, int64_t n, S* out);

// ---- Helpers -----------------------------------------------------------------
// a_log [n] -> a_neg [n] = -exp(a_log)
template <class S>
void exp_negate(const S* a_log, int64_t n, S* a_neg);
// src [R, ld] columns [off, off+w) -> dst [R, w]
template <class S>
void gather_cols(const S* src, int64_t R, int64_t ld, int64_t off, int64_t w, S* dst);
// dst [R, ld] columns [off, off+w) += src [R, w]
template <class S>
void scatter_add_cols(const S* src, int64_t R, int64_t ld, int64_t off, int64_t w, S* dst);

}  // namespace mc::ref
