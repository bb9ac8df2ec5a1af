// testing_faults.hpp — deliberate bugs for the negative controls of the
// validation suites ("a checker that cannot fail proves nothing"). A test
// switches one fault on, shows that the gradient check FAILS and names the
// right tensor, and switches it off again (FaultGuard).
//
// Only tests include this header; no production header does. The oracle reads
// the switch once per call of selective_scan_bwd_chained (steps.cpp) and runs a
// separate compile-time instantiation of the scan backward per fault (a policy
// template parameter): the exact code's loops contain no fault test at all.
#pragma once

namespace mc::ref::testing {

enum class Fault {
  None,
  // selective_scan_bwd: dδ_t drops the state-transition term Σ_n dh·A·dA·h_{t-1}
  // and keeps only Σ_n dh·u·B (a plausible "forgot the dA/dδ path" bug). Wrong:
  // d_delta of the scan, hence every gradient upstream of Δ (dt_proj, x_proj,
  // conv, in_proj, norm, the layer input, the conv initial state).
  ScanDeltaGradDropsTerm,
  // selective_scan_bwd: dA_log omits the chain-rule factor ∂A/∂A_log = A
  // (accumulates the gradient w.r.t. a_neg instead). Wrong: a_log only.
  ALogGradMissesChainRule,
};

const char* to_string(Fault f);
void set_fault(Fault f);
Fault current_fault();

// RAII: enables a fault for one scope and restores the previous one.
class FaultGuard {
 public:
  explicit FaultGuard(Fault f) : prev_(current_fault()) { set_fault(f); }
  ~FaultGuard() { set_fault(prev_); }
  FaultGuard(const FaultGuard&) = delete;
  FaultGuard& operator=(const FaultGuard&) = delete;

 private:
  Fault prev_;
};

}  // namespace mc::ref::testing
