// scan_sanity.hpp — the per-row correctness disposition of bench_scan (the
// CUTLASS profiler habit: never report a speed for a wrong answer silently).
// Before timing a case, one (b, d) channel of the scan is recomputed on the
// host in f64 from the exact (already quantised) inputs the GPU read, together
// with a first-order forward error bound for an f32 implementation; a GPU value
// is accepted iff |gpu - ref| <= bound + 1 ulp of the output dtype at |ref|+bound.
//
// This is a cheap screen, not the oracle (reference_cpu/ is, and the parity
// suites apply the k-rule); it exists here because it must return a bound
// alongside each value, which the oracle does not.
//
// Error model (u = 2^-24, the f32 unit roundoff; x = δ·a is the exp argument):
//   every dA = exp(x) factor carries relative error  ρ = u·(6 + 2|x|)
//     (exp2f <= 2 ulp, argument rounding 2u·|x|, the product and the add);
//   every input term b = δ·u·B carries 4u;
//   a scan that combines pairs in a tree adds 2u per level: `composition_depth`
//     (0 for the sequential recurrence, whose per-step roundings are in ρ).
//   Forward, per n:  habs_t = dA_t·habs_{t-1} + |b_t|           (habs_{-1} = |h0|)
//                    S_t    = dA_t·(S_{t-1} + ρ_t·habs_{t-1})
//                    |ĥ_t - h_t| <= S_t + u·(6 + 2·depth)·habs_t
//   y_t = D·u_t + Σ_n h_t[n]·C_t[n]:
//     |ŷ - y| <= Σ_n |C|·herr_n + (ds + 2)·u·(|D·u| + Σ_n |C|·habs_n)
//   Backward: the same recurrence run in reverse for dh_t = dy_t·C_t + dA_{t+1}·dh_{t+1},
//   then du_t = dy·D + Σ_n dh·δ·B and dδ_t = Σ_n dh·(a·dA·h_{t-1} + u·B) with
//   product/sum terms bounded the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace mc::bench {

struct ChannelInputs {
  int64_t T = 0, ds = 0;
  std::vector<double> delta, u, dy;  // [T]      (dy only needed for the backward)
  std::vector<double> Bm, Cm;        // [T, ds]
  std::vector<double> a, h0;         // [ds]     a = a_neg[d, :], h0 = initial state[b, d, :]
  double D = 0;
  int64_t composition_depth = 0;     // see the header comment
};

struct ChannelResult {
  std::vector<double> y, y_bound;              // [T]
  std::vector<double> d_delta, d_delta_bound;  // [T] (empty without backward)
  std::vector<double> du, du_bound;            // [T] (empty without backward)
};

// f64 scan of one channel with error bounds; `backward` adds d_delta and du.
ChannelResult channel_reference(const ChannelInputs& in, bool backward);

// Upper bound on the pair-composition depth of a chunked parallel scan at
// length T: 2·ceil(log2(T+1)) tree levels + one chained composition per 64
// timesteps (any chunk >= 64) + 16 for in-thread chains and final combines.
int64_t parallel_composition_depth(int64_t T);

// Outcome of the comparisons of one case.
struct Disposition {
  bool ok = true;
  double worst = 0;    // max over compared values of |gpu - ref| / allowed
  std::string detail;  // first failure, or "" when ok
  int64_t compared = 0;
};

// got [n] (GPU values, upcast to float) vs ref [n] with bound [n], output dtype `dtype`.
void compare_channel(Disposition& d, const std::string& what, const std::vector<float>& got,
                     const std::vector<double>& ref, const std::vector<double>& bound,
                     DType dtype);

}  // namespace mc::bench
