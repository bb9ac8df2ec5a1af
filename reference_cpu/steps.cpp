// steps.cpp — the CPU oracle's forward and backward steps of one Mamba-1 layer
// (docs/math.md: F1–F6, B1–B8), templated on the scalar S and
// instantiated at the end of the file for float, double and the Monte Carlo
// arithmetic scalar Mca (mca_scalar.hpp), whose runs sample the rounding
// noise of the float instantiation element by element.
//
// Determinism contract (docs/DESIGN.md "Determinism rules"): every loop that
// OpenMP splits runs over INDEPENDENT outputs (rows, (b, d) pairs, channels d,
// output columns). Each output element is produced by exactly one thread with
// a fixed summation order written out in the comment of its function, so the
// bits do not depend on OMP_NUM_THREADS (validation/cpu/test_oracle_threads.cpp).
// Reductions across the parallel index
// (dB/dC over d) go through a partial buffer and a second, fixed-order pass.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/config.hpp"
#include "reference_cpu/gemm.hpp"
#include "reference_cpu/mca_scalar.hpp"
#include "reference_cpu/steps.hpp"
#include "reference_cpu/testing_faults.hpp"

namespace mc::ref {

// Unqualified math calls: std:: overloads for float/double (float stays in
// float), mc::ref::exp/log1p/sqrt for the Monte Carlo arithmetic scalar Mca (ADL).
using std::exp;
using std::log1p;
using std::sqrt;

namespace {

std::atomic<int64_t> g_parallel_min_work{int64_t(1) << 18};

// Whether a region of `ops` scalar operations is worth a parallel team.
bool par(int64_t ops) { return ops >= g_parallel_min_work.load(std::memory_order_relaxed); }

template <class S>
S sigmoid(S x) {
  return S(1) / (S(1) + exp(-x));
}

// SiLU(x) = x·σ(x), written x / (1 + e^-x) (mamba-rs's conv form).
template <class S>
S silu(S x) {
  return x / (S(1) + exp(-x));
}

// SiLU'(x) = σ(x)·(1 + x·(1 − σ(x))).
template <class S>
S silu_prime(S x) {
  const S sg = sigmoid(x);
  return sg * (S(1) + x * (S(1) - sg));
}

// Shape guard for the steps that keep per-channel registers in fixed arrays.
void require_dim(const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return;
  std::ostringstream os;
  os << field << " = " << v << " violates " << lo << " <= " << field << " <= " << hi;
  throw ConfigError(os.str());
}

}  // namespace

int64_t parallel_min_work() { return g_parallel_min_work.load(std::memory_order_relaxed); }
void set_parallel_min_work(int64_t ops) { g_parallel_min_work.store(ops, std::memory_order_relaxed); }

// ---------------------------------------------------------------- RMSNorm ---

// x [R, D], g [D] -> y [R, D], rms [R]. Per row: ms = (Σ_i x_i², i ascending) / D,
// rms = sqrt(ms + eps), y_i = (x_i · (1/rms)) · g_i. Parallel over rows.
template <class S>
void rmsnorm_fwd(const S* x, const S* g, int64_t R, int64_t D, double eps, S* y, S* rms) {
#pragma omp parallel for schedule(static) if (par(R * D))
  for (int64_t r = 0; r < R; ++r) {
    const S* xr = x + r * D;
    S ss = S(0);
    for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
    const S rv = sqrt(ss / S(D) + S(eps));
    const S inv = S(1) / rv;
    rms[r] = rv;
    S* yr = y + r * D;
    for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] * inv) * g[i];
  }
}

// dy [R, D], x [R, D], g [D], rms [R] -> dx [R, D] (=), dg [D] (+=).
// Per row (parallel over rows): inv = 1/rms, x̂ = x·inv,
//   m = (Σ_i dy_i·x̂_i·g_i) / D, dx_i = (g_i·dy_i − x̂_i·m)·inv.
// dg_i += Σ_r dy[r,i]·x̂[r,i] (parallel over columns i, rows ascending, summed from 0).
template <class S>
void rmsnorm_bwd(const S* dy, const S* x, const S* g, const S* rms, int64_t R, int64_t D, S* dx,
                 S* dg) {
#pragma omp parallel for schedule(static) if (par(R * D))
  for (int64_t r = 0; r < R; ++r) {
    const S inv = S(1) / rms[r];
    const S* xr = x + r * D;
    const S* dyr = dy + r * D;
    S dot = S(0);
    for (int64_t i = 0; i < D; ++i) dot += dyr[i] * (xr[i] * inv) * g[i];
    const S m = dot / S(D);
    S* dxr = dx + r * D;
    for (int64_t i = 0; i < D; ++i) dxr[i] = (g[i] * dyr[i] - (xr[i] * inv) * m) * inv;
  }
#pragma omp parallel for schedule(static) if (par(R * D))
  for (int64_t i = 0; i < D; ++i) {
    S acc = S(0);
    for (int64_t r = 0; r < R; ++r) acc += dy[r * D + i] * (x[r * D + i] * (S(1) / rms[r]));
    dg[i] += acc;
  }
}

// ----------------------------------------------------------------- Linear ---
//
// The three GEMM roles share the oracle's one GEMM kernel, ordered_gemm
// (reference_cpu/gemm.hpp), whose result is BITWISE that of the textbook loop
// (test: validation/cpu/test_oracle_gemm.cpp): each output element has one
// running accumulator that starts from its seed and adds the products in
// ascending order of the reduction index, exactly as written out in the
// comments of linear_fwd / linear_bwd_dx / linear_bwd_dw below.

// X [M, K], W [K, N], b [N] or nullptr -> Y [M, N]. Y[m,n] = b[n] + Σ_k X[m,k]·W[k,n],
// seeded with the bias (0 without), k ascending. Parallel over output tiles.
template <class S>
void linear_fwd(const S* X, const S* W, const S* b, int64_t M, int64_t K, int64_t N, S* Y) {
  ordered_gemm<S>(M, N, K, GemmOperand<S>{X, K, 1}, GemmOperand<S>{W, 1, N}, b, Y, N);
}

// dY [M, N], W [K, N] -> dX [M, K] (=). dX[m,k] = Σ_n dY[m,n]·W[k,n], from 0, n ascending.
// Parallel over output tiles.
template <class S>
void linear_bwd_dx(const S* dY, const S* W, int64_t M, int64_t K, int64_t N, S* dX) {
  ordered_gemm<S>(M, K, N, GemmOperand<S>{dY, N, 1}, GemmOperand<S>{W, N, 1},
                  static_cast<const S*>(nullptr), dX, K);
}

// X [M, K], dY [M, N] -> dW [K, N] += Σ_m X[m,k]·dY[m,n] (summed from 0, m ascending,
// then added). Parallel over output tiles.
template <class S>
void linear_bwd_dw(const S* X, const S* dY, int64_t M, int64_t K, int64_t N, S* dW) {
  std::vector<S> acc(size_t(K * N));
  ordered_gemm<S>(K, N, M, GemmOperand<S>{X, 1, K}, GemmOperand<S>{dY, 1, N},
                  static_cast<const S*>(nullptr), acc.data(), N);
  for (int64_t i = 0; i < K * N; ++i) dW[i] += acc[size_t(i)];
}

// dY [M, N] -> db [N] += Σ_m dY[m,n] (from 0, m ascending, then added). Parallel over n.
template <class S>
void linear_bwd_db(const S* dY, int64_t M, int64_t N, S* db) {
#pragma omp parallel for schedule(static) if (par(M * N))
  for (int64_t n = 0; n < N; ++n) {
    S acc = S(0);
    for (int64_t m = 0; m < M; ++m) acc += dY[m * N + n];
    db[n] += acc;
  }
}

// ------------------------------------------------------------ Split / gate ---

// P [R, 2di] -> xb [R, di] = P[:, 0:di], z [R, di] = P[:, di:2di], gs = SiLU(z) [R, di].
template <class S>
void split_gate_silu_fwd(const S* P, int64_t R, int64_t di, S* xb, S* z, S* gs) {
#pragma omp parallel for schedule(static) if (par(R * di * 16))
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t d = 0; d < di; ++d) {
      const S zv = P[r * 2 * di + di + d];
      xb[r * di + d] = P[r * 2 * di + d];
      z[r * di + d] = zv;
      gs[r * di + d] = silu(zv);
    }
  }
}

// dxb [R, di], dz [R, di] -> dP [R, 2di] = [dxb | dz] (=).
template <class S>
void concat_halves(const S* dxb, const S* dz, int64_t R, int64_t di, S* dP) {
#pragma omp parallel for schedule(static) if (par(R * di))
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t d = 0; d < di; ++d) {
      dP[r * 2 * di + d] = dxb[r * di + d];
      dP[r * 2 * di + di + d] = dz[r * di + d];
    }
  }
}

// ------------------------------------------------------------------- Conv ---

// xb [B, T, di], w [di, dc], bias [di], state [B, di, dc] (in S0, out last window)
//   -> windows [B, T, di, dc], pc [B, T, di], u [B, T, di].
// Per (b, d) (parallel over the B·di pairs), t ascending: shift the register
// left, insert xb[b,t,d] at slot dc-1, save the window, pc = bias + Σ_k s[k]·w[k]
// (k ascending), u = SiLU(pc). The last window is written back to state.
template <class S>
void conv1d_silu_fwd(const S* xb, const S* w, const S* bias, int64_t B, int64_t T, int64_t di,
                     int64_t dc, S* state, S* windows, S* pc, S* u) {
  require_dim("d_conv", dc, 1, Limits::kMaxDConv);
#pragma omp parallel for schedule(static) if (par(B * T * di * (dc + 16)))
  for (int64_t i = 0; i < B * di; ++i) {
    const int64_t b = i / di, d = i % di;
    S s[Limits::kMaxDConv];
    S* st = state + (b * di + d) * dc;
    for (int64_t k = 0; k < dc; ++k) s[k] = st[k];
    const S* wd = w + d * dc;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t idx = (b * T + t) * di + d;
      for (int64_t k = 0; k + 1 < dc; ++k) s[k] = s[k + 1];
      s[dc - 1] = xb[idx];
      S acc = bias[d];
      for (int64_t k = 0; k < dc; ++k) {
        windows[idx * dc + k] = s[k];
        acc += s[k] * wd[k];
      }
      pc[idx] = acc;
      u[idx] = silu(acc);
    }
    for (int64_t k = 0; k < dc; ++k) st[k] = s[k];
  }
}

// du [B, T, di], pc [B, T, di], windows [B, T, di, dc], w [di, dc], d_state_T [B, di, dc] or null
//   -> dxb [B, T, di] (=), dw [di, dc] (+=), dbias [di] (+=), d_state0 [B, di, dc] (=) or null.
// Parallel over channels d; inside, samples b ascending, t descending (mamba-rs's order):
//   g_t = du·SiLU'(pc_t); dxb_t = g_t·w[dc-1] + carry[0];
//   carry[k] = carry[k+1] + g_t·w[dc-2-k] (k < dc-2), carry[dc-2] = g_t·w[0].
// Before step t, carry[k] is the gradient of input t-k from the outputs after t.
// So the final-state gradient enters as the initial carry: slot dc-1-k of the
// final window is input T-1-k, carry[k] = d_state_T[dc-1-k] (k < dc-1) — the
// same numbers, in the same order, as if the next segment had been part of
// this backward. Slot 0 (input T-dc, or S0[T] when T < dc) is one carry beyond
// the dc-1 the recurrence needs: it joins carry[dc-2] at the first step
// (carry[dc-2] = d_state_T[0] + g_{T-1}·w[0]), exactly where a one-step next
// segment would have put it, so any split of a sequence gives the same bits.
// After t = 0, carry[k] is the gradient of the virtual input xb[-1-k] =
// S0[dc-1-k]; S0[0] is never read (gradient 0).
// dw/dbias: per sample Σ_t (t descending, from 0), then Σ_b (b ascending, from 0), then added.
template <class S>
void conv1d_silu_bwd_chained(const S* du, const S* pc, const S* windows, const S* w,
                             const S* d_state_T, int64_t B, int64_t T, int64_t di, int64_t dc,
                             S* dxb, S* dw, S* dbias, S* d_state0) {
  require_dim("d_conv", dc, 1, Limits::kMaxDConv);
#pragma omp parallel for schedule(static) if (par(B * T * di * (dc + 16)))
  for (int64_t d = 0; d < di; ++d) {
    const S* wd = w + d * dc;
    S acc_w[Limits::kMaxDConv];
    S acc_b = S(0);
    for (int64_t k = 0; k < dc; ++k) acc_w[k] = S(0);
    for (int64_t b = 0; b < B; ++b) {
      S carry[Limits::kMaxDConv];
      S part_w[Limits::kMaxDConv];
      S part_b = S(0);
      const S* dsT = d_state_T ? d_state_T + (b * di + d) * dc : nullptr;
      for (int64_t k = 0; k < dc; ++k) {
        part_w[k] = S(0);
        carry[k] = (dsT && k + 1 < dc) ? dsT[dc - 1 - k] : S(0);
      }
      // slot 0 of the final window, pending until the first step moves it in
      bool slot0 = dsT && dsT[0] != S(0);
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t idx = (b * T + t) * di + d;
        const S g = du[idx] * silu_prime(pc[idx]);
        part_b += g;
        for (int64_t k = 0; k < dc; ++k) part_w[k] += g * windows[idx * dc + k];
        S v = g * wd[dc - 1];
        if (dc > 1) v += carry[0];
        if (slot0 && dc == 1) v += dsT[0];  // d_conv 1: the window is the current input
        dxb[idx] = v;
        for (int64_t k = 0; k + 2 < dc; ++k) carry[k] = carry[k + 1] + g * wd[dc - 2 - k];
        if (dc > 1) carry[dc - 2] = slot0 ? dsT[0] + g * wd[0] : g * wd[0];
        slot0 = false;
      }
      if (d_state0) {
        S* g0 = d_state0 + (b * di + d) * dc;
        g0[0] = S(0);
        for (int64_t k = 0; k + 1 < dc; ++k) g0[dc - 1 - k] = carry[k];
      }
      for (int64_t k = 0; k < dc; ++k) acc_w[k] += part_w[k];
      acc_b += part_b;
    }
    for (int64_t k = 0; k < dc; ++k) dw[d * dc + k] += acc_w[k];
    dbias[d] += acc_b;
  }
}

template <class S>
void conv1d_silu_bwd(const S* du, const S* pc, const S* windows, const S* w, int64_t B, int64_t T,
                     int64_t di, int64_t dc, S* dxb, S* dw, S* dbias, S* d_state0) {
  conv1d_silu_bwd_chained<S>(du, pc, windows, w, nullptr, B, T, di, dc, dxb, dw, dbias, d_state0);
}

// --------------------------------------------------------------- Softplus ---

// x [n] -> y [n] = x > 20 ? x : log1p(exp(x))  (strict >, as mamba's threshold).
template <class S>
void softplus_fwd(const S* x, int64_t n, S* y) {
#pragma omp parallel for schedule(static) if (par(n * 32))
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > S(20) ? x[i] : log1p(exp(x[i]));
}

// x [n], dy [n] -> dx [n] = x > 20 ? dy : dy·σ(x)  (mamba-rs's CPU form; = dy·σ(x) in f32 anyway).
template <class S>
void softplus_bwd(const S* x, const S* dy, int64_t n, S* dx) {
#pragma omp parallel for schedule(static) if (par(n * 16))
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > S(20) ? dy[i] : dy[i] * sigmoid(x[i]);
}

// ---------------------------------------------------------- Selective scan ---

// delta, u [B, T, di], Bm, Cm [B, T, ds], a_neg [di, ds], D [di], h [B, di, ds] (in/out)
//   -> h_saved [B, T+1, di, ds], y [B, T, di].
// Per (b, d) (parallel over the B·di pairs), t ascending:
//   for n ascending: h[n] = exp(δ·A[n])·h[n] + (δ·u)·B[n]; y += h[n]·C[n]  (y from 0);
//   then y += D·u (mamba-rs's CPU order).
template <class S>
void selective_scan_fwd(const S* delta, const S* u, const S* Bm, const S* Cm, const S* a_neg,
                        const S* D, int64_t B, int64_t T, int64_t di, int64_t ds, S* h, S* h_saved,
                        S* y) {
#pragma omp parallel for schedule(static) if (par(B * T * di * ds * 8))
  for (int64_t i = 0; i < B * di; ++i) {
    const int64_t b = i / di, d = i % di;
    S* hb = h + (b * di + d) * ds;
    const S* a = a_neg + d * ds;
    S* h0 = h_saved + ((b * (T + 1)) * di + d) * ds;
    for (int64_t n = 0; n < ds; ++n) h0[n] = hb[n];
    for (int64_t t = 0; t < T; ++t) {
      const int64_t r = b * T + t;
      const int64_t idx = r * di + d;
      const S dl = delta[idx], uv = u[idx];
      const S du = dl * uv;
      const S* Br = Bm + r * ds;
      const S* Cr = Cm + r * ds;
      S acc = S(0);
      for (int64_t n = 0; n < ds; ++n) {
        hb[n] = exp(dl * a[n]) * hb[n] + du * Br[n];
        acc += hb[n] * Cr[n];
      }
      y[idx] = acc + D[d] * uv;
      S* hs = h_saved + ((b * (T + 1) + t + 1) * di + d) * ds;
      for (int64_t n = 0; n < ds; ++n) hs[n] = hb[n];
    }
  }
}

// Backward of the scan (docs/math.md B3), with optional upstream dh_T [B, di, ds].
// Phase 1, parallel over channels d; inside, b ascending and t descending, n ascending:
//   dh[n] += dy·C[n]; dδ += dh[n]·(A[n]·dA·h_{t-1}[n] + u·B[n]); du += dh[n]·δ·B[n] (du from dy·D);
//   partial_B[b,t,d,n] = dh[n]·δ·u; dAlog_b[n] += dh[n]·dA·δ·A[n]·h_{t-1}[n]; dh[n] = dA·dh[n].
//   dD_b = Σ_t dy·u. After t = 0, dh = dA_0·dh_0 = ∂L/∂h_{-1} (the initial state) -> dh0.
//   dD[d] += Σ_b dD_b and dA_log[d,n] += Σ_b dAlog_b[n] (b ascending, from 0).
// Phase 2, parallel over rows r = b·T + t: dBm[r,n] = Σ_d partial_B[r,d,n] and
//   dCm[r,n] = Σ_d dy[r,d]·h_t[d,n], d ascending from 0 (unrounded partials).
//
// Negative controls (testing_faults.hpp): the body is a template on a compile-time
// policy, kExact for the product; the two deliberate bugs are other instantiations,
// chosen ONCE per call from the fault switch (outside every loop: the hot loops are
// the exact code, with no flag to test).
namespace {
enum class ScanBwdVariant { Exact, DropTransitionTerm, NoALogChainRule };

template <class S, ScanBwdVariant V>
void selective_scan_bwd_impl(const S* delta, const S* u, const S* Bm, const S* Cm,
                             const S* a_neg, const S* D, const S* h_saved, const S* dy,
                             const S* dh_T, int64_t B, int64_t T, int64_t di, int64_t ds,
                             S* d_delta, S* du, S* dBm, S* dCm, S* dD, S* dA_log, S* dh0) {
  constexpr bool keep_transition_term = V != ScanBwdVariant::DropTransitionTerm;
  constexpr bool chain_rule_factor = V != ScanBwdVariant::NoALogChainRule;

  std::vector<S> partial_B(size_t(B * T * di * ds));  // [B, T, di, ds]
#pragma omp parallel if (par(B * T * di * ds * 16))
  {
    const size_t nds = static_cast<size_t>(ds);
    std::vector<S> dh(nds), dalog_b(nds), dalog_acc(nds);
#pragma omp for schedule(static)
    for (int64_t d = 0; d < di; ++d) {
      const S* a = a_neg + d * ds;
      S dD_acc = S(0);
      for (int64_t n = 0; n < ds; ++n) dalog_acc[size_t(n)] = S(0);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t n = 0; n < ds; ++n) {
          dh[size_t(n)] = dh_T ? dh_T[(b * di + d) * ds + n] : S(0);
          dalog_b[size_t(n)] = S(0);
        }
        S dD_b = S(0);
        for (int64_t t = T - 1; t >= 0; --t) {
          const int64_t r = b * T + t;
          const int64_t idx = r * di + d;
          const S dyv = dy[idx], dl = delta[idx], uv = u[idx];
          dD_b += dyv * uv;
          S du_acc = dyv * D[d];
          S dd_acc = S(0);
          const S* hp = h_saved + ((b * (T + 1) + t) * di + d) * ds;
          const S* Br = Bm + r * ds;
          const S* Cr = Cm + r * ds;
          S* pB = partial_B.data() + idx * ds;
          for (int64_t n = 0; n < ds; ++n) {
            const S dA = exp(dl * a[n]);
            S& g = dh[size_t(n)];
            g += dyv * Cr[n];
            if constexpr (keep_transition_term)
              dd_acc += g * (a[n] * dA * hp[n] + uv * Br[n]);
            else
              dd_acc += g * (S(0) + uv * Br[n]);
            du_acc += g * dl * Br[n];
            pB[n] = g * dl * uv;
            if constexpr (chain_rule_factor)
              dalog_b[size_t(n)] += g * dA * dl * a[n] * hp[n];
            else
              dalog_b[size_t(n)] += g * dA * dl * hp[n];
            g = dA * g;
          }
          d_delta[idx] = dd_acc;
          du[idx] = du_acc;
        }
        if (dh0)
          for (int64_t n = 0; n < ds; ++n) dh0[(b * di + d) * ds + n] = dh[size_t(n)];
        dD_acc += dD_b;
        for (int64_t n = 0; n < ds; ++n) dalog_acc[size_t(n)] += dalog_b[size_t(n)];
      }
      dD[d] += dD_acc;
      for (int64_t n = 0; n < ds; ++n) dA_log[d * ds + n] += dalog_acc[size_t(n)];
    }
  }
#pragma omp parallel for schedule(static) if (par(B * T * di * ds))
  for (int64_t r = 0; r < B * T; ++r) {
    const int64_t b = r / T, t = r % T;
    S* gB = dBm + r * ds;
    S* gC = dCm + r * ds;
    for (int64_t n = 0; n < ds; ++n) gB[n] = gC[n] = S(0);
    for (int64_t d = 0; d < di; ++d) {
      const S* pB = partial_B.data() + (r * di + d) * ds;
      const S* hc = h_saved + ((b * (T + 1) + t + 1) * di + d) * ds;
      const S dyv = dy[r * di + d];
      for (int64_t n = 0; n < ds; ++n) {
        gB[n] += pB[n];
        gC[n] += dyv * hc[n];
      }
    }
  }
}
}  // namespace

template <class S>
void selective_scan_bwd_chained(const S* delta, const S* u, const S* Bm, const S* Cm,
                                const S* a_neg, const S* D, const S* h_saved, const S* dy,
                                const S* dh_T, int64_t B, int64_t T, int64_t di, int64_t ds,
                                S* d_delta, S* du, S* dBm, S* dCm, S* dD, S* dA_log, S* dh0) {
  using testing::Fault;
  switch (testing::current_fault()) {  // read once per call; the only consult point
    case Fault::ScanDeltaGradDropsTerm:
      return selective_scan_bwd_impl<S, ScanBwdVariant::DropTransitionTerm>(
          delta, u, Bm, Cm, a_neg, D, h_saved, dy, dh_T, B, T, di, ds, d_delta, du, dBm, dCm, dD,
          dA_log, dh0);
    case Fault::ALogGradMissesChainRule:
      return selective_scan_bwd_impl<S, ScanBwdVariant::NoALogChainRule>(
          delta, u, Bm, Cm, a_neg, D, h_saved, dy, dh_T, B, T, di, ds, d_delta, du, dBm, dCm, dD,
          dA_log, dh0);
    case Fault::None:
      break;
  }
  selective_scan_bwd_impl<S, ScanBwdVariant::Exact>(delta, u, Bm, Cm, a_neg, D, h_saved, dy, dh_T,
                                                    B, T, di, ds, d_delta, du, dBm, dCm, dD,
                                                    dA_log, dh0);
}

template <class S>
void selective_scan_bwd(const S* delta, const S* u, const S* Bm, const S* Cm, const S* a_neg,
                        const S* D, const S* h_saved, const S* dy, int64_t B, int64_t T,
                        int64_t di, int64_t ds, S* d_delta, S* du, S* dBm, S* dCm, S* dD,
                        S* dA_log, S* dh0) {
  selective_scan_bwd_chained<S>(delta, u, Bm, Cm, a_neg, D, h_saved, dy, nullptr, B, T, di, ds,
                                d_delta, du, dBm, dCm, dD, dA_log, dh0);
}

// ----------------------------------------------------------------- Gating ---

// y [n], gs [n] -> g [n] = y·gs.
template <class S>
void gating_fwd(const S* y, const S* gs, int64_t n, S* g) {
#pragma omp parallel for schedule(static) if (par(n))
  for (int64_t i = 0; i < n; ++i) g[i] = y[i] * gs[i];
}

// dG, y, z, gs [n] -> dY = dG·gs (=), dz = (dG·y)·SiLU'(z) (=).
template <class S>
void gating_bwd(const S* dG, const S* y, const S* z, const S* gs, int64_t n, S* dY, S* dz) {
#pragma omp parallel for schedule(static) if (par(n * 16))
  for (int64_t i = 0; i < n; ++i) {
    dY[i] = dG[i] * gs[i];
    dz[i] = (dG[i] * y[i]) * silu_prime(z[i]);
  }
}

// --------------------------------------------------------------- Residual ---

// a [n], b [n] -> out [n] = a + b (out may alias a).
template <class S>
void residual_add(const S* a, const S* b, int64_t n, S* out) {
#pragma omp parallel for schedule(static) if (par(n))
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// ---------------------------------------------------------------- Helpers ---

// a_log [n] -> a_neg [n] = -exp(a_log).
template <class S>
void exp_negate(const S* a_log, int64_t n, S* a_neg) {
#pragma omp parallel for schedule(static) if (par(n * 16))
  for (int64_t i = 0; i < n; ++i) a_neg[i] = -exp(a_log[i]);
}

// src [R, ld] columns [off, off+w) -> dst [R, w].
template <class S>
void gather_cols(const S* src, int64_t R, int64_t ld, int64_t off, int64_t w, S* dst) {
#pragma omp parallel for schedule(static) if (par(R * w))
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < w; ++j) dst[r * w + j] = src[r * ld + off + j];
}

// dst [R, ld] columns [off, off+w) += src [R, w].
template <class S>
void scatter_add_cols(const S* src, int64_t R, int64_t ld, int64_t off, int64_t w, S* dst) {
#pragma omp parallel for schedule(static) if (par(R * w))
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < w; ++j) dst[r * ld + off + j] += src[r * w + j];
}

// ------------------------------------------------- explicit instantiations ---

#define MC_INSTANTIATE_STEPS(S)                                                                   \
  template void rmsnorm_fwd<S>(const S*, const S*, int64_t, int64_t, double, S*, S*);             \
  template void rmsnorm_bwd<S>(const S*, const S*, const S*, const S*, int64_t, int64_t, S*, S*); \
  template void linear_fwd<S>(const S*, const S*, const S*, int64_t, int64_t, int64_t, S*);       \
  template void linear_bwd_dx<S>(const S*, const S*, int64_t, int64_t, int64_t, S*);              \
  template void linear_bwd_dw<S>(const S*, const S*, int64_t, int64_t, int64_t, S*);              \
  template void linear_bwd_db<S>(const S*, int64_t, int64_t, S*);                                 \
  template void split_gate_silu_fwd<S>(const S*, int64_t, int64_t, S*, S*, S*);                   \
  template void concat_halves<S>(const S*, const S*, int64_t, int64_t, S*);                       \
  template void conv1d_silu_fwd<S>(const S*, const S*, const S*, int64_t, int64_t, int64_t,       \
                                   int64_t, S*, S*, S*, S*);                                      \
  template void conv1d_silu_bwd<S>(const S*, const S*, const S*, const S*, int64_t, int64_t,      \
                                   int64_t, int64_t, S*, S*, S*, S*);                             \
  template void conv1d_silu_bwd_chained<S>(const S*, const S*, const S*, const S*, const S*,      \
                                           int64_t, int64_t, int64_t, int64_t, S*, S*, S*, S*);   \
  template void softplus_fwd<S>(const S*, int64_t, S*);                                           \
  template void softplus_bwd<S>(const S*, const S*, int64_t, S*);                                 \
  template void selective_scan_fwd<S>(const S*, const S*, const S*, const S*, const S*, const S*, \
                                      int64_t, int64_t, int64_t, int64_t, S*, S*, S*);            \
  template void selective_scan_bwd<S>(const S*, const S*, const S*, const S*, const S*, const S*, \
                                      const S*, const S*, int64_t, int64_t, int64_t, int64_t, S*, \
                                      S*, S*, S*, S*, S*, S*);                                    \
  template void selective_scan_bwd_chained<S>(const S*, const S*, const S*, const S*, const S*,   \
                                              const S*, const S*, const S*, const S*, int64_t,    \
                                              int64_t, int64_t, int64_t, S*, S*, S*, S*, S*, S*,  \
                                              S*);                                                \
  template void gating_fwd<S>(const S*, const S*, int64_t, S*);                                   \
  template void gating_bwd<S>(const S*, const S*, const S*, const S*, int64_t, S*, S*);           \
  template void residual_add<S>(const S*, const S*, int64_t, S*);                                 \
  template void exp_negate<S>(const S*, int64_t, S*);                                             \
  template void gather_cols<S>(const S*, int64_t, int64_t, int64_t, int64_t, S*);                 \
  template void scatter_add_cols<S>(const S*, int64_t, int64_t, int64_t, int64_t, S*);

MC_INSTANTIATE_STEPS(float)
MC_INSTANTIATE_STEPS(double)
MC_INSTANTIATE_STEPS(Mca)  // Monte Carlo arithmetic (mca_scalar.hpp)
#undef MC_INSTANTIATE_STEPS

}  // namespace mc::ref
