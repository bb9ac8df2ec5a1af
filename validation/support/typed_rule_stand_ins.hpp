// typed_rule_stand_ins.hpp — stand-ins for a bf16/f16 pipeline that are exactly as
// accurate as the same-precision baseline P by construction: conforming runs of the
// oracle (check::conforming_runs) seeded apart from the typed rule's own runs, taken as
// a kernel's f32 results. Shared by the CPU calibration test
// (validation/cpu/test_typed_rule_calibration.cpp) and its model-size tool
// (typed_rule_calibration_probe.cpp); no GoogleTest here.
#pragma once

#include <cstdint>
#include <vector>

#include "check/model_check.hpp"
#include "core/config.hpp"

namespace mc::testing {

// An f64 result as a kernel's f32 result.
inline check::ModelOutputs<float> as_float(const check::ModelOutputs<double>& m) {
  auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  return {f(m.out), f(m.conv_final), f(m.ssm_final), f(m.grads), f(m.dX), f(m.d_conv0),
          f(m.d_ssm0)};
}

// `n` stand-ins of the problem `in` (the conforming runs of seed + an offset, so none is
// one of the rule's own runs, check::conforming_runs(in, dtype, runs, seed)).
inline std::vector<check::ModelOutputs<double>> stand_ins(const check::ModelInputs& in,
                                                          DType dtype, int n, uint64_t seed) {
  return check::conforming_runs(in, dtype, n, seed + 0x5bd1e995);
}

}  // namespace mc::testing
