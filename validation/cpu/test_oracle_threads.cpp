// ctest-labels: cpu
// test_oracle_threads.cpp — the oracle's results are BITWISE independent of
// the OpenMP thread count: outputs, final states and every gradient of the
// backbone (float and double, f32 and bf16 storage) and the target forward,
// with omp_set_num_threads(1) vs 2 vs 3, and with every parallel region forced
// on (set_parallel_min_work(0)) as well as with the default size threshold.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/builtin_configs.hpp"
#include "check/compare.hpp"
#include "validation/support/oracle_test_support.hpp"
#include "reference_cpu/steps.hpp"

namespace mc::testing {
namespace {

class OracleThreads : public RestoresOracleThreading {};

template <class S>
void expect_same_bytes(const char* what, const std::vector<S>& a, const std::vector<S>& b,
                       const std::string& ctx) {
  ASSERT_EQ(a.size(), b.size()) << what << " " << ctx;
  const bool same = std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0;
  if (!same) {
    size_t i = 0;
    while (i < a.size() && std::memcmp(&a[i], &b[i], sizeof(S)) == 0) ++i;
    ADD_FAILURE() << what << " differs bitwise (" << ctx << ") first at index " << i << ": "
                  << a[i] << " vs " << b[i];
  }
}

template <class S>
void expect_same_run(const OracleRun<S>& a, const OracleRun<S>& b, const std::string& ctx) {
  expect_same_bytes("out", a.out, b.out, ctx);
  expect_same_bytes("final conv state", a.conv_T, b.conv_T, ctx);
  expect_same_bytes("final ssm state", a.ssm_T, b.ssm_T, ctx);
  expect_same_bytes("parameter gradients", a.grads, b.grads, ctx);
  expect_same_bytes("dX", a.dX, b.dX, ctx);
  expect_same_bytes("d_conv0", a.d_conv0, b.d_conv0, ctx);
  expect_same_bytes("d_ssm0", a.d_ssm0, b.d_ssm0, ctx);
}

template <class S>
void check_config(const char* name, const Storage& st) {
  const ref::NamedConfig& c = ref::builtin_config(name);
  const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 31);
  ref::set_parallel_min_work(0);  // every region parallel
  omp_set_num_threads(1);
  const OracleRun<S> one = run_oracle<S>(p, st);
  for (int t : {2, 3}) {
    omp_set_num_threads(t);
    const OracleRun<S> many = run_oracle<S>(p, st);
    expect_same_run(one, many,
                    std::string(name) + " " + to_string(st.dtype) + " threads 1 vs " + std::to_string(t));
  }
  // The size threshold only decides who runs a region, never what it computes.
  ref::set_parallel_min_work(int64_t(1) << 18);
  omp_set_num_threads(2);
  const OracleRun<S> thresholded = run_oracle<S>(p, st);
  expect_same_run(one, thresholded, std::string(name) + " default threshold");
}

TEST_F(OracleThreads, BackboneDoubleIsThreadCountInvariant) {
  for (const char* name : {"tiny", "odd", "small", "dstate-128"}) check_config<double>(name, Storage{});
}

TEST_F(OracleThreads, BackboneFloatIsThreadCountInvariant) {
  for (const char* name : {"tiny", "odd", "small", "dstate-128"}) check_config<float>(name, Storage{});
}

TEST_F(OracleThreads, BackboneFloatBf16StorageIsThreadCountInvariant) {
  check_config<float>("odd", Storage{DType::BF16});
  check_config<float>("small", Storage{DType::F16});
}

TEST_F(OracleThreads, TargetForwardIsThreadCountInvariant) {
  const ref::NamedConfig& c = ref::builtin_config("small");
  const check::Problem p = check::make_problem(c.cfg, c.B, c.T, 32);
  ref::set_parallel_min_work(0);
  std::vector<std::vector<double>> results;
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    std::vector<double> target(size_t(p.B * p.dims.dm));
    ref::target_forward(p.layout, p.params.data(), p.B, p.T, p.X.data(), target.data());
    results.push_back(target);
  }
  expect_same_bytes("target", results[0], results[1], "1 vs 2 threads");
  expect_same_bytes("target", results[0], results[2], "1 vs 3 threads");
}

}  // namespace
}  // namespace mc::testing
