// phase_timer.cpp — CUDA-event phase timing of eager steps (phase_timer.hpp).
#include "gpu/phase_timer.hpp"

#include <utility>

#include "kernels/cuda_check.hpp"

namespace mc::gpu {

namespace {
// A step has ~15 marks per layer; collect (synchronising) when the pool is full
// so a caller that never takes the times cannot grow it without bound.
constexpr size_t kMaxMarks = 8192;
}  // namespace

PhaseTimer::~PhaseTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void PhaseTimer::set_enabled(bool on) {
  enabled_ = on;
  used_ = 0;
  sums_ = PhaseTimes{};
}

void PhaseTimer::record(Phase p, cudaStream_t s) {
  if (used_ == kMaxMarks) collect();
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    MC_CUDA_CHECK(cudaEventCreate(&e), "phase timing event");
    events_.push_back(e);
    phases_.push_back(Phase::Idle);
  }
  MC_CUDA_CHECK(cudaEventRecord(events_[used_], s), "phase timing mark");
  phases_[used_] = p;
  ++used_;
}

void PhaseTimer::collect() {
  if (used_ == 0) return;
  MC_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]), "phase timing: wait for the last mark");
  for (size_t i = 0; i + 1 < used_; ++i) {
    if (phases_[i] == Phase::Idle) continue;
    float ms = 0;
    MC_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "phase timing interval");
    const double s = double(ms) * 1e-3;
    switch (phases_[i]) {
      case Phase::Gemm: sums_.gemm_s += s; break;
      case Phase::Scan: sums_.scan_s += s; break;
      case Phase::Elementwise: sums_.elementwise_s += s; break;
      case Phase::Idle: break;
    }
  }
  // the last mark opens the next interval
  std::swap(events_[0], events_[used_ - 1]);
  phases_[0] = phases_[used_ - 1];
  used_ = 1;
}

PhaseTimes PhaseTimer::take() {
  collect();
  used_ = 0;  // an interval still open (no closing mark) is not counted
  const PhaseTimes t = sums_;
  sums_ = PhaseTimes{};
  return t;
}

}  // namespace mc::gpu
