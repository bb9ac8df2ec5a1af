// step_graph.hpp — one CUDA graph recorded by stream capture and replayed
// (Model::capture_step / replay_step). Capture uses
// cudaStreamCaptureModeThreadLocal: a capture-unsafe call of this thread (a
// synchronisation, a synchronous copy, cudaMalloc) invalidates the capture and
// is reported as an error naming what was being captured; other threads are
// not affected. If the enqueue callback throws, the capture is ended and
// discarded, so the stream is usable again, and the exception propagates.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

namespace mc::gpu {

class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph() { reset(); }
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Records everything `enqueue` puts on `stream` into a graph and
  // instantiates it (replacing any previous one). `what` names it in errors.
  void capture(cudaStream_t stream, const std::function<void()>& enqueue, const std::string& what);
  // cudaGraphLaunch on `stream`: enqueue only.
  void launch(cudaStream_t stream) const;
  bool ready() const { return exec_ != nullptr; }
  size_t nodes() const { return nodes_; }
  void reset() noexcept;

 private:
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
  std::string what_;
};

}  // namespace mc::gpu
