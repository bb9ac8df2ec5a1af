// gradcheck.hpp — directional finite-difference gradient checks of the CPU
// oracle in double (the directional check of PyTorch's fast gradcheck and JAX's
// check_grads, with a 4-point stencil), for each step function of steps.hpp, one
// layer and the whole backbone.
//
// For a function f of several input tensors, a random direction u over ALL
// differentiable inputs at once and a random output weighting v, compare
//     numerical  ⟨v, J·p⟩ ≈ [8(φ(h) − φ(−h)) − (φ(2h) − φ(−2h))] / 12h,  φ(s) = ⟨v, f(x + s·p)⟩
//     analytic   ⟨Jᵀv, p⟩ from one backward call with upstream gradient v,
// where p_i = u_i·max(1, |x_i|) (the step scales with the input, h ≈ ε^(1/3)).
//
// Tolerance, derived from f64 arithmetic and printed with every result:
//   trunc  = h²·|φ'''|/6, the leading truncation error of the 2-point central
//            difference (an upper bound for the 4-point stencil used, whose
//            error is O(h⁴)); φ''' is estimated from the same four evaluations,
//            φ''' ≈ [φ(2h) − 2φ(h) + 2φ(−h) − φ(−2h)] / 2h³.
//   round  = 1.5·δ/h, the cancellation error of the stencil ((8+8+1+1)/12 = 1.5
//            evaluation errors δ over h), with δ the absolute f64 rounding error of
//            one evaluation of φ, estimated as
//              δ = max(ε64·Σ|v_i·f_i|,  (ε64/ε32)·Σ|v_i|·|f32_i − f64_i|):
//            to first order a fixed sequence of operations has rounding error
//            proportional to the unit roundoff, so the float instantiation of
//            the same code measures the problem's conditioning, and scaling by
//            ε64/ε32 = 2^-29 gives the double error.
//   δA     = max(n·ε64·Σ|g_i·p_i|, (ε64/ε32)·Σ|p_i|·|g32_i − g64_i|), the same
//            estimate for the analytic side.
//   tol    = safety·(trunc + round + δA), safety = 10 (the estimates are one
//            realisation of the rounding errors, and trunc bounds a smaller term).
// A genuine gradient bug shows up as a relative error of 1e-3..1, while tol is
// typically 1e-9 of |⟨Jᵀv, p⟩|.
//
// On failure the check is repeated with p restricted to each named segment
// (each ParamEntry, X / H, each layer's initial conv and SSM state, each step
// input) and the segments that fail alone are named.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "check/problem.hpp"

namespace mc::check {

// A named, contiguous part of one input tensor (the unit of localisation).
struct Segment {
  std::string name;
  int input = 0;       // index into DiffFunction::inputs
  int64_t offset = 0;  // element offset inside that input
  int64_t size = 0;
};

template <class S>
using Tensors = std::vector<std::vector<S>>;

// f: inputs -> one output tensor, in double and in float, with its backward
// (grads has one vector per input, sized like it and ZEROED by the caller of
// g64/g32; the backward accumulates into it).
struct DiffFunction {
  std::string name;
  std::vector<std::string> input_names;
  Tensors<double> inputs;         // the point x0 (f32-exact)
  std::vector<Segment> segments;  // what u covers; disjoint
  int64_t out_size = 0;
  std::function<void(const Tensors<double>&, std::vector<double>&)> f64;
  std::function<void(const Tensors<float>&, std::vector<float>&)> f32;
  std::function<void(const Tensors<double>&, const std::vector<double>&, Tensors<double>&)> g64;
  std::function<void(const Tensors<float>&, const std::vector<float>&, Tensors<float>&)> g32;
};

enum class Direction { Rademacher, Gaussian };
enum class Localise { OnFailure, Always, Never };

struct GradcheckOptions {
  uint64_t seed = 1;          // for u and v
  double h = 6.0e-6;          // ≈ ε64^(1/3)
  double safety = 10.0;
  Direction direction = Direction::Rademacher;
  Localise localise = Localise::OnFailure;
};

// One directional comparison (all segments at once, or one segment alone).
struct DirectionalCheck {
  std::string scope;        // "all" or the segment name
  int64_t n = 0;            // elements the direction covers
  double h = 0;
  double fd2 = 0;           // 2-point central difference
  double fd4 = 0;           // 4-point stencil (the value compared)
  double analytic = 0;      // ⟨Jᵀv, p⟩
  double error = 0;         // |fd4 − analytic|
  double trunc_est = 0;     // h²|φ'''|/6
  double round_est = 0;     // 1.5·δ/h
  double analytic_round_est = 0;
  double tol = 0;
  bool finite = true;       // every evaluation (and the float estimate) finite
  bool pass = false;
  double rel_error() const;  // error / max(|analytic|, |fd4|)
  double rel_tol() const;    // tol / max(|analytic|, |fd4|)
  std::string line() const;  // one table row
};

struct GradcheckResult {
  std::string function;
  DirectionalCheck all;
  std::vector<DirectionalCheck> per_segment;  // when localised
  std::vector<std::string> guilty;            // segments failing alone
  bool pass = false;
  std::string report() const;  // multi-line: header, the "all" row, per-segment rows, verdict
};

GradcheckResult gradcheck(const DiffFunction& f, const GradcheckOptions& opt = {});

// ---- the functions the suites and the CLI check ---------------------------

// The backbone: inputs params (one segment per ParamEntry), input (X), conv0,
// ssm0 (one segment per layer each, named as in catalogue.hpp); output: out
// [B*T, dm] (post norm_f) followed by the final conv and SSM states, so the
// check covers the upstream gradients on the final states too. Always
// Storage{F32}: the bf16/f16 rounding points are not differentiable.
DiffFunction backbone_function(const Problem& p);

// Layer `l` alone: inputs params (segments: layer l's entries only), H (the
// layer's actual input in the problem's forward), conv0, ssm0 of layer l;
// output: H_out [B*T, dm] followed by the layer's final conv and SSM states.
DiffFunction layer_function(const Problem& p, int layer);

// Names of the step functions: rmsnorm, linear, conv1d_silu, softplus,
// selective_scan, gating.
const std::vector<std::string>& step_names();
// One step with random inputs shaped by p's dims, B, T (seeded by p.seed):
//   rmsnorm         x [BT, dm], g [dm]                             -> y [BT, dm]
//   linear          X [BT, di], W [di, xd], b [xd]                 -> Y [BT, xd]
//   conv1d_silu     xb [B,T,di], w [di,dc], bias [di], S0 [B,di,dc] -> u [B,T,di]
//   softplus        x [BT*di] (some > 20)                          -> y
//   selective_scan  delta, u [B,T,di], Bm, Cm [B,T,ds], a_log [di,ds], D [di],
//                   h0 [B,di,ds]                                   -> y [B,T,di]
//   gating          y [BT*di], z [BT*di]                           -> y·SiLU(z)
DiffFunction step_function(const std::string& name, const Problem& p);

}  // namespace mc::check
