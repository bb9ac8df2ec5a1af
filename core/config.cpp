// config.cpp — validation and derived dimensions for ModelConfig (docs/math.md#notation).
#include "core/config.hpp"

#include <sstream>

namespace mc {

const char* to_string(ScanMode m) {
  switch (m) {
    case ScanMode::Auto: return "auto";
    case ScanMode::Sequential: return "sequential";
    case ScanMode::Parallel: return "parallel";
    case ScanMode::Checkpointed: return "checkpointed";
  }
  return "?";
}

const char* to_string(ScanRoute r) {
  switch (r) {
    case ScanRoute::Checkpointed: return "checkpointed";
    case ScanRoute::Chunked: return "chunked";
    case ScanRoute::Sequential: return "sequential";
  }
  return "?";
}

const char* to_string(ScanExp e) {
  switch (e) {
    case ScanExp::Auto: return "auto-exp";
    case ScanExp::Hardware: return "hw-exp";
    case ScanExp::Accurate: return "accurate-exp";
  }
  return "?";
}

const char* to_string(DType d) {
  switch (d) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
  }
  return "?";
}

const char* to_string(ScanCheckpoints c) {
  switch (c) {
    case ScanCheckpoints::Auto: return "auto";
    case ScanCheckpoints::Every: return "every";
    case ScanCheckpoints::Grouped: return "grouped";
  }
  return "?";
}

const char* to_string(ScanLayout l) {
  switch (l) {
    case ScanLayout::Auto: return "auto";
    case ScanLayout::LaneGroups: return "lane-groups";
    case ScanLayout::WholeState: return "whole-state";
  }
  return "?";
}

const char* to_string(H0Mode m) {
  switch (m) {
    case H0Mode::Auto: return "auto";
    case H0Mode::Recompute: return "recompute";
    case H0Mode::Save: return "save";
  }
  return "?";
}

H0Mode parse_h0_mode(const std::string& s) {
  if (s == "auto") return H0Mode::Auto;
  if (s == "recompute") return H0Mode::Recompute;
  if (s == "save") return H0Mode::Save;
  throw ConfigError("h0 = '" + s + "' is not one of auto|recompute|save");
}

H0Mode h0_mode(H0Mode m, DType dtype) {
  if (m != H0Mode::Auto) return m;
  return dtype == DType::F32 ? H0Mode::Save : H0Mode::Recompute;
}

ScanLayout parse_scan_layout(const std::string& s) {
  if (s == "auto") return ScanLayout::Auto;
  if (s == "lane-groups" || s == "lanes") return ScanLayout::LaneGroups;
  if (s == "whole-state" || s == "whole") return ScanLayout::WholeState;
  throw ConfigError("scan_layout = '" + s + "' is not one of auto|lane-groups|whole-state");
}

ScanCheckpoints parse_scan_checkpoints(const std::string& s) {
  if (s == "auto") return ScanCheckpoints::Auto;
  if (s == "every") return ScanCheckpoints::Every;
  if (s == "grouped") return ScanCheckpoints::Grouped;
  throw ConfigError("scan_checkpoints = '" + s + "' is not one of auto|every|grouped");
}

ScanExp parse_scan_exp(const std::string& s) {
  if (s == "auto") return ScanExp::Auto;
  if (s == "hardware" || s == "hw") return ScanExp::Hardware;
  if (s == "accurate" || s == "acc") return ScanExp::Accurate;
  throw ConfigError("scan_exp = '" + s + "' is not one of auto|hardware|accurate");
}

ScanMode parse_scan_mode(const std::string& s) {
  if (s == "auto") return ScanMode::Auto;
  if (s == "sequential" || s == "seq") return ScanMode::Sequential;
  if (s == "parallel" || s == "par" || s == "chunked") return ScanMode::Parallel;
  if (s == "checkpointed" || s == "ckpt") return ScanMode::Checkpointed;
  throw ConfigError("scan_mode = '" + s +
                    "' is not one of auto|checkpointed|sequential|parallel");
}

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::F32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::F16;
  throw ConfigError("dtype = '" + s + "' is not one of f32|bf16|f16");
}

namespace {

[[noreturn]] void fail(const char* field, int64_t value, const char* relation, int64_t limit,
                       const char* why) {
  std::ostringstream os;
  os << field << " = " << value << " violates " << field << " " << relation << " " << limit;
  if (why && *why) os << " (" << why << ")";
  throw ConfigError(os.str());
}

void require_range(const char* field, int64_t v, int64_t lo, int64_t hi, const char* why) {
  if (v < lo) fail(field, v, ">=", lo, why);
  if (v > hi) fail(field, v, "<=", hi, why);
}

}  // namespace

void validate_config(const ModelConfig& c) {
  require_range("d_model", c.d_model, 1, Limits::kMaxDModel, "");
  require_range("d_state", c.d_state, 1, Limits::kMaxDState,
                "parallel scan keeps per-state running prefixes in shared memory");
  require_range("d_conv", c.d_conv, 1, Limits::kMaxDConv, "conv kernels hold the window in registers");
  require_range("expand", c.expand, 1, 64, "");
  require_range("n_layers", c.n_layers, 1, Limits::kMaxLayers, "");
  require_range("input_dim", c.input_dim, 1, Limits::kMaxInputDim, "");
  const int64_t di = int64_t(c.expand) * c.d_model;
  require_range("d_inner (= expand*d_model)", di, 1, Limits::kMaxDInner,
                "d_inner is a grid dimension of the parallel scan");
  if (!(c.eps > 0.0) || !(c.eps < 1.0)) {
    std::ostringstream os;
    os << "eps = " << c.eps << " violates 0 < eps < 1";
    throw ConfigError(os.str());
  }
}

Dims Dims::from(const ModelConfig& c) {
  validate_config(c);
  Dims d;
  d.dm = c.d_model;
  d.di = int64_t(c.expand) * c.d_model;
  d.ds = c.d_state;
  d.dc = c.d_conv;
  d.dr = (d.dm + 15) / 16;
  d.xd = d.dr + 2 * d.ds;
  d.mid = c.input_dim;
  d.L = c.n_layers;
  d.eps = c.eps;
  return d;
}

void validate_runtime(const Dims& d, int64_t B, int64_t T) {
  require_range("batch", B, 1, Limits::kMaxBatch, "");
  require_range("seq_len", T, 1, Limits::kMaxSeqLen, "");
  (void)d;
}

bool use_parallel_scan(ScanMode mode, int64_t T, int64_t ds) {
  if (ds > Limits::kMaxSeqScanDState) return true;
  switch (mode) {
    case ScanMode::Sequential: return false;
    case ScanMode::Parallel: return true;
    case ScanMode::Auto: return T > kParallelScanThreshold;
    case ScanMode::Checkpointed: return false;
  }
  return false;
}

ScanRoute scan_route(ScanMode mode, int64_t ds) {
  switch (mode) {
    case ScanMode::Auto:
    case ScanMode::Checkpointed: return ScanRoute::Checkpointed;
    case ScanMode::Parallel: return ScanRoute::Chunked;
    case ScanMode::Sequential:
      return ds > Limits::kMaxSeqScanDState ? ScanRoute::Chunked : ScanRoute::Sequential;
  }
  return ScanRoute::Checkpointed;
}

ScanExp scan_exp(ScanExp e, ScanRoute r, DType dtype) {
  if (r != ScanRoute::Checkpointed) return ScanExp::Accurate;
  if (e != ScanExp::Auto) return e;
  return dtype == DType::F32 ? ScanExp::Accurate : ScanExp::Hardware;
}

ScanCheckpoints scan_checkpoints(ScanCheckpoints c, ScanRoute r, DType dtype,
                                 bool partial_budget_set) {
  if (r != ScanRoute::Checkpointed) return ScanCheckpoints::Every;
  if (c != ScanCheckpoints::Auto) return c;
  return dtype == DType::F32 || partial_budget_set ? ScanCheckpoints::Every
                                                   : ScanCheckpoints::Grouped;
}

int64_t params_per_layer(const Dims& d) {
  return d.dm + 2 * d.dm * d.di + d.di * d.dc + d.di + d.di * d.xd + d.dr * d.di + d.di +
         d.di * d.ds + d.di + d.di * d.dm;
}

int64_t params_total(const Dims& d) { return d.mid * d.dm + d.dm + d.L * params_per_layer(d) + d.dm; }

}  // namespace mc
