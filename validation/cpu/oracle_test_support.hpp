// oracle_test_support.hpp — shared pieces of the CPU oracle suites:
//  * the rapidcheck generator of random oracle problems: shrinkable shapes
//    (B, T, d_model, expand, d_state, d_conv, n_layers, input dim) plus a
//    noShrink 64-bit data seed, so a failure shrinks to the smallest shape
//    while the data stay reproducible;
//  * the first-order rounding-error model ("depth") behind the stated bounds
//    of the float-vs-double and split-sequence comparisons;
//  * run-the-oracle helpers (forward + backward of a Problem in S);
//  * the default of one OpenMP thread for these processes (see below).
#pragma once

#include <omp.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "config.hpp"
#include "model.hpp"
#include "problem.hpp"

namespace mc::testing {

// ---- threads ---------------------------------------------------------------
// The suites run the oracle on one OpenMP thread unless OMP_NUM_THREADS is
// set. The oracle's bits do not depend on the thread count
// (test_oracle_threads.cpp proves it with every region forced parallel), and
// on a shared 2-core machine libgomp's spinning workers slow these workloads
// of many small parallel regions by ~5x.
inline bool single_thread_unless_asked() {
  if (std::getenv("OMP_NUM_THREADS") == nullptr) omp_set_num_threads(1);
  return true;
}

// ---- shapes ----------------------------------------------------------------

struct OracleShape {
  int B = 1, T = 1, d_model = 2, expand = 1, d_state = 1, d_conv = 1, n_layers = 1, input_dim = 1;
  uint64_t seed = 0;

  ModelConfig config() const {
    ModelConfig c;
    c.d_model = d_model;
    c.expand = expand;
    c.d_state = d_state;
    c.d_conv = d_conv;
    c.n_layers = n_layers;
    c.input_dim = input_dim;
    return c;
  }
  check::Problem problem() const { return check::make_problem(config(), B, T, seed); }
  std::string str() const {
    std::ostringstream os;
    os << "B " << B << " T " << T << " dm " << d_model << " expand " << expand << " ds " << d_state
       << " dc " << d_conv << " L " << n_layers << " mid " << input_dim << " seed " << seed;
    return os.str();
  }
};

// T in [min_T, max_T], with 1 and primes favoured.
inline rc::Gen<int> gen_seq_len(int min_T, int max_T) {
  return rc::gen::suchThat(
      rc::gen::oneOf(rc::gen::element(1, 2, 3, 5, 7, 11, 13, 17, 31, 37, 61),
                     rc::gen::inRange(min_T, max_T + 1)),
      [=](int t) { return t >= min_T && t <= max_T; });
}

// Ranges (brief): B 1..3; T 1..64; d_model 2..48; expand 1..3; d_state 1..32;
// d_conv 1..4; n_layers 1..3; input dim 1..24. About one case in 16 takes
// d_state in {64, 65, 100, 128, 255, 256} and then caps the rest (T <= 4,
// d_model <= 8, L = 1, B <= 2) to stay cheap. rapidcheck's size scales every
// inRange, so early cases are small. min_B / min_T / max_T let a property
// that needs e.g. two samples or a split point narrow them.
inline rc::Gen<OracleShape> gen_oracle_shape(int max_T = 64, int min_T = 1, int min_B = 1) {
  return rc::gen::exec([=] {
    OracleShape s;
    const bool big_state = *rc::gen::weightedElement<bool>({{15, false}, {1, true}});
    if (big_state) {
      s.d_state = *rc::gen::element(64, 65, 100, 128, 255, 256);
      s.B = *rc::gen::inRange(min_B, std::max(min_B, 2) + 1);
      s.T = *rc::gen::inRange(min_T, std::max(min_T, std::min(4, max_T)) + 1);
      s.d_model = *rc::gen::inRange(2, 9);
      s.n_layers = 1;
    } else {
      s.d_state = *rc::gen::inRange(1, 33);
      s.B = *rc::gen::inRange(min_B, 4);
      s.T = *gen_seq_len(min_T, max_T);
      s.d_model = *rc::gen::inRange(2, 49);
      s.n_layers = *rc::gen::inRange(1, 4);
    }
    s.expand = *rc::gen::inRange(1, 4);
    s.d_conv = *rc::gen::inRange(1, 5);
    s.input_dim = *rc::gen::inRange(1, 25);
    s.seed = *rc::gen::noShrink(rc::gen::arbitrary<uint64_t>());
    return s;
  });
}

// ---- rounding-error model ----------------------------------------------------
// First-order model (Higham, Accuracy and Stability of Numerical Algorithms,
// §2–3): every elementary operation rounds with relative error <= u; a dot
// product or sum of n terms has error <= n·u relative to its terms (γ_n); the
// errors of consecutive stages add to first order, each carried forward with
// the stage's condition number. For the Mamba layer on our random problems
// the conditions are O(1): RMSNorm rescales, GEMMs have random-sign weights,
// SiLU/softplus/σ are 1-Lipschitz in relative terms for the value ranges used,
// exp(δA) with δA <= 0 has |x·e^x| <= 1/e, and the scan recurrence is
// contractive (|exp(δA)| < 1), so a rounding error in h is never amplified
// but can accumulate over the T steps. The "depth" is therefore the count of
// sequential roundings along the longest path, and the bound for a tensor is
//     max_i |x_i − ref_i| <= u · depth · max_i |ref_i|
// (norm-wise, in the ∞-norm: an element that happens to be small still
// carries the absolute error of its terms). Worst-case counting (γ_n, not the
// √n of random rounding) makes this bound loose by design: it must hold for
// every random case, and it still catches any loss of precision that scales
// worse than linearly with depth (overflow, cancellation, a float-only code
// path, a wrong epsilon).
struct RoundingDepth {
  double forward = 0;         // outputs, final states
  double input_grads = 0;     // dX, d_conv0, d_ssm0
  double param_grads = 0;     // every ParamEntry gradient
};

inline RoundingDepth rounding_depth(const Dims& d, int64_t B, int64_t T) {
  const double dm = double(d.dm), di = double(d.di), ds = double(d.ds), dc = double(d.dc);
  const double dr = double(d.dr), xd = double(d.xd), mid = double(d.mid), L = double(d.L);
  const double t = double(T);
  const double norm_fwd = dm + 6;            // Σx² over dm, ÷D, +eps, sqrt, 1/rms, ·inv, ·g
  const double layer_fwd = norm_fwd          // F1
                           + dm              // F2 in_proj dot
                           + dc + 4          // F4a conv dot + bias, SiLU (exp, +1, ÷)
                           + di              // F4b x_proj dot
                           + dr + 1 + 3      // F4c dt_proj dot + bias, softplus (exp, log1p)
                           + 5 * t + ds + 2  // F4d exp(δA)·h + δu·B per step over T, C·h over ds, +D·u
                           + 4               // F4e SiLU(z)·y
                           + di + 1;         // F5 out_proj dot, F6 residual
  const double forward = (mid + 1) + L * layer_fwd + norm_fwd;
  const double norm_bwd = dm + 8;            // Σ dy·x̂·g over dm, ÷D, x̂·m, −, ·inv
  const double layer_bwd = norm_bwd          // B8
                           + 2 * di          // B7 dN = dP·W_inᵀ over 2di
                           + dc + 6          // B6 carry over dc, SiLU'
                           + xd              // B5 dU_x = dXD·W_xᵀ over xd
                           + di              // B3 dB/dC summed over di channels
                           + di + 3          // B4 d_dt_in over di, σ
                           + 6 * t + 2 * ds  // B3 reverse recurrence over T, dδ/du over ds
                           + 6               // B2 SiLU'
                           + dm + 1;         // B1 dG over dm, B8 residual add
  const double input_grads = forward + L * layer_bwd + norm_bwd + dm;
  const double param_grads = input_grads + double(B) * t;  // Σ over the B·T rows
  return {forward, input_grads, param_grads};
}

// ---- running the oracle --------------------------------------------------------

// Everything one forward + backward of a Problem produces, in scalar S.
template <class S>
struct OracleRun {
  std::vector<S> out;     // [B*T, dm]
  std::vector<S> conv_T;  // [L, B, di, dc] final conv state
  std::vector<S> ssm_T;   // [L, B, di, ds] final SSM state
  std::vector<S> grads;   // [total]
  std::vector<S> dX;      // [B*T, mid]
  std::vector<S> d_conv0; // [L, B, di, dc]
  std::vector<S> d_ssm0;  // [L, B, di, ds]
};

template <class S>
OracleRun<S> run_oracle(const check::Problem& p, const Storage& st = Storage{}) {
  OracleRun<S> r;
  const std::vector<S> params = check::convert<S>(p.params);
  const std::vector<S> X = check::convert<S>(p.X);
  const std::vector<S> d_out = check::convert<S>(p.d_out);
  ref::RecurrentState<S> state = p.state<S>();
  ref::BackboneActivations<S> act;
  r.out.resize(size_t(p.B * p.T * p.dims.dm));
  ref::backbone_forward(p.layout, params.data(), p.B, p.T, X.data(), state, r.out.data(), &act, st);
  r.conv_T = state.conv;
  r.ssm_T = state.ssm;
  r.grads.assign(size_t(p.layout.total), S(0));
  r.dX.resize(X.size());
  r.d_conv0.resize(state.conv.size());
  r.d_ssm0.resize(state.ssm.size());
  ref::BackboneGradOutputs<S> g;
  g.params = r.grads.data();
  g.dX = r.dX.data();
  g.d_conv0 = r.d_conv0.data();
  g.d_ssm0 = r.d_ssm0.data();
  ref::backbone_backward(p.layout, params.data(), act, d_out.data(), g, st);
  return r;
}

// A named slice of a result, for per-tensor comparisons.
struct NamedSlice {
  std::string name;
  int64_t offset, size;
  double depth;
};

}  // namespace mc::testing
