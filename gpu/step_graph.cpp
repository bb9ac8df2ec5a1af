// step_graph.cpp — stream capture, instantiation and replay of one CUDA graph
// (step_graph.hpp).
#include "gpu/step_graph.hpp"

#include <stdexcept>

#include "kernels/cuda_check.hpp"

namespace mc::gpu {

namespace {

// Ends a capture that failed and drops whatever was recorded; clears the error
// the failed capture left, so the stream and the context stay usable.
void abandon_capture(cudaStream_t stream) noexcept {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(stream, &partial);
  if (partial) cudaGraphDestroy(partial);
  cudaGetLastError();
}

}  // namespace

void StepGraph::capture(cudaStream_t stream, const std::function<void()>& enqueue,
                        const std::string& what) {
  reset();
  what_ = what;
  MC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                "begin capture of " + what);
  try {
    enqueue();
  } catch (const CudaError& e) {
    abandon_capture(stream);
    throw CudaError("capture of " + what + " failed (a call inside it is not capturable or "
                    "failed): " + e.what(), e.code());
  } catch (...) {
    abandon_capture(stream);
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (end != cudaSuccess || graph == nullptr) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    MC_CUDA_CHECK(end != cudaSuccess ? end : cudaErrorStreamCaptureInvalidated,
                  "end capture of " + what +
                      " (the capture was invalidated: a capture-unsafe call such as a "
                      "synchronisation or a synchronous copy ran inside the step)");
  }
  size_t n = 0;
  cudaError_t e = cudaGraphGetNodes(graph, nullptr, &n);
  if (e == cudaSuccess) e = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    exec_ = nullptr;
    MC_CUDA_CHECK(e, "instantiate the graph of " + what);
  }
  nodes_ = n;
  // Upload now, so the first replay is not slower than the others.
  MC_CUDA_CHECK(cudaGraphUpload(exec_, stream), "upload the graph of " + what);
}

void StepGraph::launch(cudaStream_t stream) const {
  if (!exec_) throw std::logic_error("StepGraph::launch: nothing was captured");
  MC_CUDA_CHECK(cudaGraphLaunch(exec_, stream), "replay the graph of " + what_);
}

void StepGraph::reset() noexcept {
  if (exec_) cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
  nodes_ = 0;
}

}  // namespace mc::gpu
