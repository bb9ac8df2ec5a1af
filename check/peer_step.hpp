// check/peer_step.hpp — the reference implementation's training-step figures that issue 9's
// targets are stated against: state-spaces/mamba's fast path (the Mamba block with
// mamba_inner_fn and causal_conv1d, RMSNorm and residual around the mixer, PyTorch 2.11,
// TF32 off) measured on an H200 at B = 8, d_state 16, expand 2, d_conv 4 (bench/README.md).
// Shared by bench_train_step (the ratio printed beside each row) and the memory-plan test
// (validation/gpu/test_memory_plan.cpp: the planned peak at or below the peer's).
#pragma once

#include <cstdint>

#include "core/config.hpp"

namespace mc::check {

// The GPU model the figures below were measured on (a substring of its device name).
inline constexpr const char* kPeerStepGpu = "H200";

struct PeerStepRow {
  int dm;
  int64_t T;
  int L;
  double f32_graph_us, bf16_graph_us;  // the step replayed as one CUDA graph
  double f32_peak_gib, bf16_peak_gib;  // peak device memory, as issue 9 states it
  // The peak measured by bench/peer_train_step.py, each row in a fresh process: the step's
  // torch.cuda.max_memory_allocated plus the peer's own parameters, x and g (H100, PyTorch
  // 2.11, 2026-12-06; reports/h100/data/session-2026-12-06-twelfth/call2-report/
  // peer_train_step.json; the same bytes on a second machine). Below the issue's figures on
  // every row: the bound the memory-plan test holds our plan to is the smaller of the two.
  int64_t f32_peak_total_bytes, bf16_peak_total_bytes;
};

inline constexpr PeerStepRow kPeerStep[] = {
    {768, 512, 1, 3206, 984, 0.41, 0.24, 420194304, 245136896},
    {768, 2048, 1, 11668, 3458, 1.41, 0.74, 1413507072, 741817856},
    {1024, 2048, 1, 18410, 4668, 1.87, 0.97, 1868968960, 969341952},
    {2048, 2048, 1, 61661, 10598, 3.73, 1.90, 3734725632, 1904276480},
    {768, 2048, 4, 46374, 13564, 2.75, 1.41, 2695824384, 1384455168},
};

// The smaller of a row's two peer peaks (issue 9's figure, the fresh-process measurement).
inline double peer_peak_bytes(const PeerStepRow& r, bool f32) {
  const double issue = (f32 ? r.f32_peak_gib : r.bf16_peak_gib) * double(1ull << 30);
  const double measured = double(f32 ? r.f32_peak_total_bytes : r.bf16_peak_total_bytes);
  return issue < measured ? issue : measured;
}
inline constexpr int64_t kPeerStepBatch = 8;

// The model of a row (and of bench_train_step's other widths): d_state 16, d_conv 4,
// expand 2, input_proj from d_model.
inline ModelConfig step_config(int d_model, int n_layers) {
  ModelConfig c;
  c.d_model = d_model;
  c.d_state = 16;
  c.d_conv = 4;
  c.expand = 2;
  c.n_layers = n_layers;
  c.input_dim = d_model;
  return c;
}

// The row of (d_model, T, layers), or nullptr.
inline const PeerStepRow* peer_step_row(int dm, int64_t T, int L) {
  for (const PeerStepRow& p : kPeerStep)
    if (p.dm == dm && p.T == T && p.L == L) return &p;
  return nullptr;
}

}  // namespace mc::check
