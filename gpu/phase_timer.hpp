// phase_timer.hpp — the optional per-phase timing of eager steps
// (Model::set_phase_timing, bench_train_step's GEMM / scan / elementwise
// breakdown). Disabled it costs one branch per hook. Enabled, every hook
// records a CUDA event on the model's stream; the stream time from one mark to
// the next counts as the phase named at the first, so the phases of a step add
// up to its event-timed wall time on the stream (launch gaps included, as in
// any eager step). Hooks: the Gemm class marks Gemm before and Elementwise
// after every cuBLAS call; the pipeline marks Scan / Elementwise around each
// scan call; Model marks Elementwise at the start of forward_device() and
// Idle (not counted) at the end of backward_device().
//
// Eager steps only: Model refuses to capture a CUDA graph while it is on.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "gpu/model.hpp"

namespace mc::gpu {

enum class Phase { Gemm, Scan, Elementwise, Idle };

class PhaseTimer {
 public:
  PhaseTimer() = default;
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  // Turning it off (or on) forgets pending marks and the sums.
  void set_enabled(bool on);
  bool enabled() const { return enabled_; }
  // No-op unless enabled: records an event on s; the stream time until the next
  // mark counts as p (Idle: not counted).
  void mark(Phase p, cudaStream_t s) {
    if (enabled_) record(p, s);
  }
  void count_step() {
    if (enabled_) ++sums_.steps;
  }
  // Waits for the last mark, adds every closed interval to its phase, forgets
  // the marks and returns the sums since the last take (then zeroes them).
  PhaseTimes take();

 private:
  void record(Phase p, cudaStream_t s);
  // Adds the closed intervals; keeps the last mark as the start of the next one.
  void collect();

  bool enabled_ = false;
  std::vector<cudaEvent_t> events_;  // pool, reused
  std::vector<Phase> phases_;        // phases_[i]: phase of the interval starting at events_[i]
  size_t used_ = 0;
  PhaseTimes sums_;
};

}  // namespace mc::gpu
