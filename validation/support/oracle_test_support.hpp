// oracle_test_support.hpp — shared pieces of the CPU oracle suites:
//  * the rapidcheck generator of random oracle problems: shrinkable shapes
//    (B, T, d_model, expand, d_state, d_conv, n_layers, input dim) plus a
//    noShrink 64-bit data seed, so a failure shrinks to the smallest shape
//    while the data stay reproducible;
//  * run-the-oracle helpers (forward + backward of a Problem in S);
//  * the default of one OpenMP thread for these processes (see below).
#pragma once

#include <gtest/gtest.h>
#include <omp.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "reference_cpu/model.hpp"
#include "reference_cpu/steps.hpp"
#include "check/problem.hpp"

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

// A fixture base for tests that change the OpenMP thread count or the oracle's
// parallel threshold: both are restored after each test.
class RestoresOracleThreading : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = omp_get_max_threads();
    min_work_ = ref::parallel_min_work();
  }
  void TearDown() override {
    omp_set_num_threads(threads_);
    ref::set_parallel_min_work(min_work_);
  }

 private:
  int threads_ = 1;
  int64_t min_work_ = 0;
};

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

// ---- running the oracle --------------------------------------------------------

// Everything one forward + backward of a Problem produces, in scalar S (the
// backward with the problem's d_out and final-state upstream gradients).
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
  const std::vector<S> d_conv_T = check::convert<S>(p.d_conv_final);
  const std::vector<S> d_ssm_T = check::convert<S>(p.d_ssm_final);
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
  // the problem's upstream gradients on the final states (problem.hpp)
  ref::FinalStateGrads<S> fin;
  if (d_conv_T.size() == state.conv.size()) fin.conv = d_conv_T.data();
  if (d_ssm_T.size() == state.ssm.size()) fin.ssm = d_ssm_T.data();
  ref::backbone_backward(p.layout, params.data(), act, d_out.data(), fin, g, st);
  return r;
}

}  // namespace mc::testing
