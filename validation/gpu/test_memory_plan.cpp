// ctest-labels: cpu
// test_memory_plan.cpp — the training step's device memory as planned without a device
// (gpu::plan_memory: the Model's own buffer plan, nothing allocated). Runs on the CPU; the
// GPU suite holds the plan to what a Model really allocates (test_model_parity.cpp,
// ModelMemory.DeviceBytesEqualThePlan), so these properties are the step's.
//   * at every row of the peer table (check/peer_step.hpp), on the default tiers, the
//     planned peak is at or below the reference implementation's peak (issue 9): the
//     smaller of the figure and the fresh-process measurement;
//   * layer 0's input recomputed by the backward (RunOptions::h0) saves exactly
//     its R·d_model f32 and changes no other buffer; where it does not fit the y slot it
//     is saved as before;
//   * the plan's buffers add up to its total, and grouped scan checkpoints change only
//     the saved states (exactly the states they do not save) and never grow the shared
//     region that holds the scan workspace with a group's refilled states;
//   * the cuBLAS workspace is the GEMM tier's size unless one is given, and nothing else,
//     and the tier's description (gpu::describe, in every report) names that size;
//   * plan_memory refuses what the Model refuses, naming the field.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "check/peer_step.hpp"
#include "core/config.hpp"
#include "gpu/model.hpp"
#include "kernels/scan/scan.hpp"

namespace mc::testing {
namespace {

ModelConfig peer_config(const check::PeerStepRow& r) { return check::step_config(r.dm, r.L); }

int64_t sum_of_buffers(const gpu::MemoryPlan& p) {
  int64_t s = 0;
  for (const auto& b : p.buffers) s += b.second;
  return s;
}

// a and b hold the same buffers in the same order, and a − b is `diff` bytes in buffer `name`
// and 0 in every other.
void expect_differ_only_in(const gpu::MemoryPlan& a, const gpu::MemoryPlan& b,
                           const std::string& name, int64_t diff, const std::string& row) {
  ASSERT_EQ(a.buffers.size(), b.buffers.size()) << row;
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    ASSERT_EQ(a.buffers[i].first, b.buffers[i].first) << row;
    EXPECT_EQ(a.buffers[i].second - b.buffers[i].second, a.buffers[i].first == name ? diff : 0)
        << row << " " << a.buffers[i].first;
  }
}

TEST(MemoryPlan, AtOrBelowThePeersPeakAtEveryRow) {
  for (const check::PeerStepRow& r : check::kPeerStep)
    for (DType dt : {DType::F32, DType::BF16}) {
      gpu::RunOptions o;  // the default tiers: strict f32, bf16 on tensor cores
      o.dtype = dt;
      const gpu::MemoryPlan p = gpu::plan_memory(peer_config(r), check::kPeerStepBatch, r.T, o);
      const double peer = check::peer_peak_bytes(r, dt == DType::F32);
      const std::string row = std::to_string(r.dm) + "/" + std::to_string(r.T) + " x" +
                              std::to_string(r.L) + " " + to_string(dt);
      std::cout << "  " << row << ": planned " << double(p.total_bytes) / 1e6 << " MB, peer "
                << peer / 1e6 << " MB (" << double(p.total_bytes) / peer << "x), scan group "
                << p.scan_checkpoint_group << "\n";
      EXPECT_EQ(sum_of_buffers(p), p.total_bytes) << row;
      EXPECT_LE(double(p.total_bytes), peer) << row;
    }
}

TEST(MemoryPlan, RecomputedH0SavesExactlyItsBytes) {
  for (const check::PeerStepRow& r : check::kPeerStep)
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      const ModelConfig cfg = peer_config(r);
      gpu::RunOptions save, recompute;
      save.dtype = recompute.dtype = dt;
      save.h0 = H0Mode::Save;
      recompute.h0 = H0Mode::Recompute;
      const gpu::MemoryPlan ps = gpu::plan_memory(cfg, check::kPeerStepBatch, r.T, save);
      const gpu::MemoryPlan pr = gpu::plan_memory(cfg, check::kPeerStepBatch, r.T, recompute);
      const std::string row = std::to_string(r.dm) + "/" + std::to_string(r.T) + " x" +
                              std::to_string(r.L) + " " + to_string(dt);
      const int64_t h0 = check::kPeerStepBatch * r.T * r.dm * int64_t(sizeof(float));
      EXPECT_EQ(ps.total_bytes - pr.total_bytes, h0) << row;
      expect_differ_only_in(ps, pr, "residual_stream", h0, row);
    }
  // expand 1 in bf16: R·d_model f32 is twice a layer's y slot [R, d_inner] bf16, so H0 stays
  // saved and the option changes nothing
  ModelConfig narrow = check::step_config(64, 2);
  narrow.expand = 1;
  gpu::RunOptions save, recompute;
  save.dtype = recompute.dtype = DType::BF16;
  save.h0 = H0Mode::Save;
  recompute.h0 = H0Mode::Recompute;
  EXPECT_EQ(gpu::plan_memory(narrow, 2, 64, save).total_bytes,
            gpu::plan_memory(narrow, 2, 64, recompute).total_bytes);
}

TEST(MemoryPlan, GroupedCheckpointsChangeOnlyTheSavedStates) {
  for (const check::PeerStepRow& r : check::kPeerStep) {
    const ModelConfig cfg = peer_config(r);
    gpu::RunOptions every, grouped;
    every.dtype = grouped.dtype = DType::BF16;
    every.scan_checkpoints = ScanCheckpoints::Every;
    grouped.scan_checkpoints = ScanCheckpoints::Grouped;
    const gpu::MemoryPlan pe = gpu::plan_memory(cfg, check::kPeerStepBatch, r.T, every);
    const gpu::MemoryPlan pg = gpu::plan_memory(cfg, check::kPeerStepBatch, r.T, grouped);
    const Dims d = Dims::from(cfg);
    const kern::scan::Shape s{check::kPeerStepBatch, r.T, d.di, d.ds};
    const int64_t G = pg.scan_checkpoint_group;
    EXPECT_EQ(pe.scan_checkpoint_group, 1);
    EXPECT_GE(G, 2) << r.dm << "/" << r.T;
    // the largest group whose workspace fits in what the shared region already holds
    EXPECT_EQ(G, kern::scan::max_checkpoint_group(s, ScanRoute::Checkpointed,
                                                  kern::scan::bwd_workspace_bytes(
                                                      s, ScanRoute::Checkpointed,
                                                      kern::scan::group_partial_budget(
                                                          s, ScanRoute::Checkpointed, G),
                                                      0, G)));
    // buffer by buffer: the same, except the saved states (exactly the states not saved)
    // and the shared region holding the scan workspace, which does not grow
    const int64_t freed = 4 * d.L *
                          int64_t(kern::scan::saved_floats(s, ScanRoute::Checkpointed) -
                                  kern::scan::saved_floats(s, ScanRoute::Checkpointed, G));
    ASSERT_EQ(pe.buffers.size(), pg.buffers.size());
    for (size_t i = 0; i < pe.buffers.size(); ++i) {
      const auto& [name, bytes] = pe.buffers[i];
      ASSERT_EQ(name, pg.buffers[i].first);
      const int64_t diff = bytes - pg.buffers[i].second;
      if (name == "scan_saved_states")
        EXPECT_EQ(diff, freed) << name;
      else if (name.find("scan_bwd_workspace") != std::string::npos)
        EXPECT_GE(diff, 0) << name << ": the grouped workspace grew the region";
      else
        EXPECT_EQ(diff, 0) << name;
    }
    // Auto is grouped for bf16
    gpu::RunOptions dflt;
    dflt.dtype = DType::BF16;
    EXPECT_EQ(gpu::plan_memory(cfg, check::kPeerStepBatch, r.T, dflt).total_bytes, pg.total_bytes);
  }
}

// The cuBLAS workspace in the plan: the tier's size by default (4 MiB on the tensor-core tier,
// 32 MiB on strict and tf32), a size given in RunOptions on every tier, and no other buffer
// changed by it.
int64_t cublas_workspace_of(const gpu::MemoryPlan& p) {
  for (const auto& b : p.buffers)
    if (b.first == "cublas_workspace") return b.second;
  ADD_FAILURE() << "no cublas_workspace buffer in the plan";
  return -1;
}

TEST(MemoryPlan, CublasWorkspaceFollowsTheTier) {
  const ModelConfig cfg = peer_config(check::kPeerStep[0]);
  const check::PeerStepRow& r = check::kPeerStep[0];
  struct Tier {
    DType dt;
    gpu::GemmMath math;
    gpu::TypedGemm typed;
    size_t bytes;
  };
  const Tier tiers[] = {
      {DType::F32, gpu::GemmMath::F32, gpu::TypedGemm::TensorCore, size_t(32) << 20},
      {DType::F32, gpu::GemmMath::TF32, gpu::TypedGemm::TensorCore, size_t(32) << 20},
      {DType::BF16, gpu::GemmMath::F32, gpu::TypedGemm::TensorCore, size_t(4) << 20},
      {DType::F16, gpu::GemmMath::F32, gpu::TypedGemm::TensorCore, size_t(4) << 20},
      {DType::BF16, gpu::GemmMath::F32, gpu::TypedGemm::Strict, size_t(32) << 20}};
  for (const Tier& t : tiers) {
    gpu::RunOptions dflt;
    dflt.dtype = t.dt;
    dflt.gemm = t.math;
    dflt.typed_gemm = t.typed;
    const std::string tier = to_string(gpu::gemm_tier(t.dt, t.math, t.typed));
    EXPECT_EQ(gpu::cublas_workspace_bytes(dflt), t.bytes) << tier;
    // the tier's description in every report names the size its runs use
    const std::string said = gpu::describe(gpu::gemm_tier(t.dt, t.math, t.typed));
    EXPECT_NE(said.find("by default " + std::to_string(t.bytes) + " bytes"), std::string::npos)
        << tier << ": " << said;
    const gpu::MemoryPlan pd = gpu::plan_memory(cfg, check::kPeerStepBatch, r.T, dflt);
    EXPECT_EQ(cublas_workspace_of(pd), int64_t(t.bytes)) << tier;
    gpu::RunOptions given = dflt;
    given.cublas_workspace_bytes = size_t(1) << 20;
    const gpu::MemoryPlan pg = gpu::plan_memory(cfg, check::kPeerStepBatch, r.T, given);
    EXPECT_EQ(cublas_workspace_of(pg), int64_t(1) << 20) << tier;
    const int64_t diff = int64_t(t.bytes) - (int64_t(1) << 20);
    EXPECT_EQ(pd.total_bytes - pg.total_bytes, diff) << tier;
    expect_differ_only_in(pd, pg, "cublas_workspace", diff, tier);
  }
}

TEST(MemoryPlan, RefusesWhatTheModelRefuses) {
  ModelConfig cfg = peer_config(check::kPeerStep[0]);
  cfg.d_state = 257;
  try {
    gpu::plan_memory(cfg, 8, 64, gpu::RunOptions{});
    ADD_FAILURE() << "d_state 257 planned";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("d_state"), std::string::npos) << e.what();
  }
  gpu::RunOptions o;
  o.dtype = DType::BF16;
  o.scan_checkpoints = ScanCheckpoints::Grouped;
  o.scan_partial_budget = 1;
  EXPECT_THROW(gpu::plan_memory(peer_config(check::kPeerStep[0]), 8, 64, o), ConfigError);
  // a workspace off the 256-byte grid, named with its value
  gpu::RunOptions w;
  w.cublas_workspace_bytes = (size_t(4) << 20) + 1;
  try {
    gpu::plan_memory(peer_config(check::kPeerStep[0]), 8, 64, w);
    ADD_FAILURE() << "cublas_workspace_bytes 4194305 planned";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cublas_workspace_bytes = 4194305"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mc::testing
