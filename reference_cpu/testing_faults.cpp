// testing_faults.cpp — the process-wide fault switch of testing_faults.hpp.
// An atomic so that an OpenMP region reading it never races with a test
// thread; it is only ever read outside the parallel loops.
#include "reference_cpu/testing_faults.hpp"

#include <atomic>

namespace mc::ref::testing {

namespace {
std::atomic<Fault> g_fault{Fault::None};
}  // namespace

const char* to_string(Fault f) {
  switch (f) {
    case Fault::None: return "none";
    case Fault::ScanDeltaGradDropsTerm: return "scan_delta_grad_drops_term";
    case Fault::ALogGradMissesChainRule: return "a_log_grad_misses_chain_rule";
  }
  return "?";
}

void set_fault(Fault f) { g_fault.store(f, std::memory_order_relaxed); }
Fault current_fault() { return g_fault.load(std::memory_order_relaxed); }

}  // namespace mc::ref::testing
