// bench_scan.cpp — Google Benchmark of the selective scan alone
// (kernels/scan/scan.hpp: forward, backward, forward+backward; every route —
// checkpointed with the hardware and the accurate exp, chunked, sequential;
// f32 / bf16 / f16 storage).
//
// Method (also written into the JSON context):
//   * fixed B and d_inner (default B=8, d_inner=1536 = the mamba-130m layer
//     width); cases are (op, dtype, route, T, d_state); by default the cases
//     of the scan performance targets: T 512 / 2048 / 8192 at d_state 16 and
//     T 2048 at d_state 256 (--cases=T:ds,... for others, --sweep for a grid);
//   * timing: manual time from cudaEvents recorded on the stream around the
//     launch(es) only; one warm-up launch per case; before every timed
//     iteration (outside the events) the state is reset (h <- h0, dD/dA_log
//     zeroed) and the L2 is scrubbed by a 2x-L2 cudaMemsetAsync;
//   * counters are computed from the measured time per iteration t:
//     tokens_per_s = B*T/t, state_updates_per_s = B*T*di*ds/t,
//     GBps = min_bytes/t (traffic model of kernels/scan/scan.hpp), GBps_impl adds the
//     bytes this implementation moves beyond the minimum, pct_peak_bw =
//     100*GBps/peak where the peak is the device-to-device copy measured at the
//     start of the same run, speedup_vs_chunked = t(chunked seed route, same
//     case)/t, speedup_vs_f32 = t(f32, same case)/t — ratios, never asserted;
//   * beside each case the physical floor: floor_us = max(bytes_min / peak
//     copy bandwidth, exps / (16 per clock per SM x SMs x max SM clock)), with
//     exps = B*T*di*ds per pass (forward 1, backward 1, fwdbwd 2), and x_floor
//     = t / floor_us (kFloorFormula, in the JSON context);
//   * scan_mem_bytes: what the scan itself allocates for the case (saved
//     states + backward workspace), beside total_alloc_bytes (with its inputs
//     and outputs);
//   * before timing, a correctness disposition (CUTLASS habit): all outputs
//     finite, and the channels (b, d) = (0, 0) and (B-1, di-1) equal to an f64
//     host recomputation within a forward error bound (scan_sanity.hpp);
//     counter verified = 1/0, label "ok" or the first failure;
//   * a case whose buffers exceed --mem_budget (default 40 %) of the device
//     memory, or that the scan refuses (ConfigError), is skipped with
//     SkipWithError and the reason.
#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_context.hpp"
#include "bench/timed_loop.hpp"
#include "bench/bench_flags.hpp"
#include "core/config.hpp"
#include "kernels/cuda_check.hpp"
#include "bench/cuda_util.hpp"
#include "bench/device_fill.cuh"
#include "kernels/scan/scan.hpp"
#include "bench/scan_sanity.hpp"
#include "bench/shard_launcher.hpp"
#include "core/storage.hpp"

namespace mc::bench {
namespace {

constexpr const char* kProgram = "bench_scan";

namespace scan = kern::scan;

enum class Op { Fwd, Bwd, FwdBwd };
const char* op_name(Op o) { return o == Op::Fwd ? "fwd" : (o == Op::Bwd ? "bwd" : "fwdbwd"); }
bool has_fwd(Op o) { return o != Op::Bwd; }
bool has_bwd(Op o) { return o != Op::Fwd; }

// A route and its exponential ("checkpointed-hw", "checkpointed-acc", "chunked",
// "sequential"); a checkpointed route may force its channels per thread with a ":cpt1"
// (one channel a thread) .. ":cpt4" suffix (2..4: the d_state <= 16 tile plan; the plan's
// own choice otherwise), and save one state per group of N chunks with ":gN" (scan.hpp,
// grouped checkpoints; N >= 2), e.g. "checkpointed-hw:cpt1:g64"; ":lanes" / ":whole" force
// the forward's thread layout at d_state <= 16 (scan::FwdLayout: a channel's states over 4
// lanes, or all in one thread; the same bits); ":pN" forces the pieces of the backward and,
// where it has them, of the forward (scan.hpp, "Pieces of the backward", "Pieces of the
// forward"; :p1 = one walk over all T, the A/B against the plan's pieces).
struct Run {
  scan::Route route;
  scan::ExpMath exp;
  int cpt = 0;
  int64_t group = 1;  // chunks per saved state
  scan::FwdLayout layout = scan::FwdLayout::Auto;
  int64_t pieces = 0;  // the pieces of the walks (0 = the plan's choice)
};
// The forward's share of :pN: the same count where the forward has pieces (scan.hpp, "Pieces
// of the forward": lane groups, every chunk's state saved), else one walk.
int64_t fwd_pieces_of(const Run& r) {
  return r.pieces > 1 && (r.layout == scan::FwdLayout::WholeState || r.group > 1) ? 1 : r.pieces;
}
std::string run_name(const Run& r) {
  if (r.route != scan::Route::Checkpointed) return to_string(r.route);
  return std::string("checkpointed-") + (r.exp == scan::ExpMath::Hardware ? "hw" : "acc") +
         (r.cpt ? ":cpt" + std::to_string(r.cpt) : "") +
         (r.layout == scan::FwdLayout::LaneGroups
              ? ":lanes"
              : (r.layout == scan::FwdLayout::WholeState ? ":whole" : "")) +
         (r.group != 1 ? ":g" + std::to_string(r.group) : "") +
         (r.pieces ? ":p" + std::to_string(r.pieces) : "");
}
Run parse_run(const std::string& spec) {
  std::string s = spec;
  int cpt = 0;
  int64_t group = 1, pieces = 0;
  scan::FwdLayout layout = scan::FwdLayout::Auto;
  auto number_after = [](const std::string& v, char c) {  // "cN" with N decimal
    return v.size() > 1 && v.size() < 10 && v[0] == c &&
           v.find_first_not_of("0123456789", 1) == std::string::npos;
  };
  for (size_t colon = s.rfind(':'); colon != std::string::npos; colon = s.rfind(':')) {
    const std::string v = s.substr(colon + 1);
    if (v == "lanes" || v == "whole") {
      layout = parse_scan_layout(v);
    } else if (v.rfind("cpt", 0) == 0) {
      if (v != "cpt1" && v != "cpt2" && v != "cpt3" && v != "cpt4")
        throw ConfigError("routes: '" + spec + "': the channels per thread suffix is :cpt1 .. :cpt4");
      cpt = std::stoi(v.substr(3));
    } else if (number_after(v, 'g')) {
      group = std::stoll(v.substr(1));
      if (group < 2)
        throw ConfigError("routes: '" + spec + "': the checkpoint group suffix is :gN, N >= 2");
    } else if (number_after(v, 'p')) {
      pieces = std::stoll(v.substr(1));
      if (pieces < 1)
        throw ConfigError("routes: '" + spec + "': the backward's pieces suffix is :pN, N >= 1");
    } else {
      throw ConfigError("routes: '" + spec + "': suffix ':" + v +
                        "' is not :cpt1..:cpt4, :lanes, :whole, :gN or :pN");
    }
    s = s.substr(0, colon);
  }
  Run r;
  if (s == "checkpointed-hw" || s == "ckpt-hw") r = {scan::Route::Checkpointed, scan::ExpMath::Hardware};
  else if (s == "checkpointed-acc" || s == "ckpt-acc") r = {scan::Route::Checkpointed, scan::ExpMath::Accurate};
  else if (s == "chunked") r = {scan::Route::Chunked, scan::ExpMath::Accurate};
  else if (s == "sequential") r = {scan::Route::Sequential, scan::ExpMath::Accurate};
  else
    throw ConfigError("routes: '" + spec +
                      "' is not one of checkpointed-hw|checkpointed-acc|chunked|sequential");
  if ((cpt || group != 1 || pieces || layout != scan::FwdLayout::Auto) &&
      r.route != scan::Route::Checkpointed)
    throw ConfigError("routes: '" + spec +
                      "': :cpt, :lanes, :whole, :g and :p apply to the checkpointed routes");
  if (layout == scan::FwdLayout::WholeState && cpt > 1)
    throw ConfigError("routes: '" + spec + "': :whole is one channel a thread, not :cpt" +
                      std::to_string(cpt));
  r.cpt = cpt;
  r.group = group;
  r.layout = layout;
  r.pieces = pieces;
  return r;
}

struct ScanCase {
  Op op;
  DType dtype;
  Run run;
  int64_t T, ds;
  int group;  // index of the (T, ds) pair: the unit of sharding and of baselines
  std::string name;
};

std::string case_key(Op op, DType dt, const std::string& run, int64_t T, int64_t ds) {
  std::ostringstream os;
  os << "scan_" << op_name(op) << "/" << to_string(dt) << "/" << run << "/T:" << T
     << "/ds:" << ds;
  return os.str();
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

int elem_bytes(DType d) { return d == DType::F32 ? 4 : 2; }

// ---------------------------------------------------------------------------
// The case list. Order inside a (T, ds) group: op, then dtype (f32 first), then
// the routes in --routes order (the cross-check routes first by default), so each
// case's baselines ran just before it.
std::vector<ScanCase> make_cases(const BenchFlags& f) {
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (T, ds)
  std::vector<DType> dts{DType::F32, DType::BF16, DType::F16};
  if (f.values.count("cases")) {
    for (const std::string& c : split_list(f.values.at("cases"))) {
      const size_t colon = c.find(':');
      if (colon == std::string::npos)
        throw ConfigError("cases: '" + c + "' is not T:d_state (e.g. 2048:16)");
      shapes.emplace_back(std::stoll(c.substr(0, colon)), std::stoll(c.substr(colon + 1)));
    }
  } else if (f.sweep) {
    for (int64_t T : {128, 512, 2048, 8192, 32768})
      for (int64_t ds : {16, 32, 64, 128, 256}) shapes.emplace_back(T, ds);
  } else if (f.quick) {
    shapes = {{512, 16}};
    dts = {DType::F32, DType::BF16};
  } else {
    shapes = {{512, 16}, {2048, 16}, {8192, 16}, {2048, 256}};
  }
  if (f.values.count("dtypes")) {
    dts.clear();
    for (const std::string& d : split_list(f.values.at("dtypes"))) dts.push_back(parse_dtype(d));
  }
  std::vector<Run> runs;
  for (const std::string& r :
       split_list(f.values.count("routes") ? f.values.at("routes")
                                           : "sequential,chunked,checkpointed-acc,checkpointed-hw"))
    runs.push_back(parse_run(r));
  std::vector<ScanCase> out;
  int group = 0;
  for (const auto& [T, ds] : shapes) {
    for (Op op : {Op::Fwd, Op::Bwd, Op::FwdBwd})
      for (DType dt : dts)
        for (const Run& r : runs) {
          if (r.route == scan::Route::Sequential && ds > Limits::kMaxSeqScanDState) continue;
          if (r.cpt > 1 && ds > 16) continue;  // the tile plan serves d_state <= 16
          if (r.layout == scan::FwdLayout::WholeState && ds > 16) continue;  // likewise
          out.push_back({op, dt, r, T, ds, group, case_key(op, dt, run_name(r), T, ds)});
        }
    ++group;
  }
  return out;
}

// ---------------------------------------------------------------------------
// --partial_budget (bytes; 0 = the scan's default, scan::kDefaultPartialBudget): the
// checkpointed backward's dB/dC partial budget of every case, set once by main.
size_t g_partial_budget = 0;

// Bytes the scan itself allocates for a case: the states the forward saves
// and, with a backward, its workspace.
size_t case_scan_bytes(const ScanCase& c, int64_t B, int64_t di) {
  const scan::Shape s{B, c.T, di, c.ds};
  return 4 * scan::saved_floats(s, c.run.route, c.run.group) +
         (has_bwd(c.op) ? scan::bwd_workspace_bytes(s, c.run.route, g_partial_budget, c.run.cpt,
                                                    c.run.group, c.run.pieces)
                        : 0);
}

// Bytes a case allocates (checked against the budget before allocating).
size_t case_alloc_bytes(const ScanCase& c, int64_t B, int64_t di) {
  const size_t e = size_t(elem_bytes(c.dtype));
  const size_t BT = size_t(B * c.T), ds = size_t(c.ds), D = size_t(di);
  size_t n = 3 * BT * D * e          // delta, u, y
             + 2 * BT * ds * e       // Bm, Cm
             + 4 * (D * ds + D)      // a_neg, D
             + 2 * 4 * size_t(B) * D * ds;  // h, h0
  if (has_bwd(c.op))
    n += 3 * BT * D * e                // dy, d_delta, du
         + 2 * 4 * BT * ds             // dB, dC
         + 4 * (D + D * ds);           // dD, dA_log
  return n + case_scan_bytes(c, B, di);
}

size_t case_min_bytes(const ScanCase& c, int64_t B, int64_t di) {
  const scan::Shape s{B, c.T, di, c.ds};
  const int e = elem_bytes(c.dtype);
  size_t n = 0;
  if (has_fwd(c.op))
    n += scan::forward_traffic(s, c.run.route, e, /*save=*/true, c.run.group).min_bytes;
  if (has_bwd(c.op)) n += scan::backward_traffic(s, c.run.route, e, c.run.group).min_bytes;
  return n;
}

size_t case_impl_bytes(const ScanCase& c, int64_t B, int64_t di) {
  const scan::Shape s{B, c.T, di, c.ds};
  const int e = elem_bytes(c.dtype);
  size_t n = case_min_bytes(c, B, di);
  if (has_fwd(c.op))
    n += scan::forward_traffic(s, c.run.route, e, /*save=*/true, c.run.group).route_bytes;
  if (has_bwd(c.op)) n += scan::backward_traffic(s, c.run.route, e, c.run.group).route_bytes;
  return n;
}

// Exponentials any implementation must evaluate: one per element and pass
// (the backward needs dA again: stored, or recomputed).
double case_min_exps(const ScanCase& c, int64_t B, int64_t di) {
  const double per_pass = double(B) * double(c.T) * double(di) * double(c.ds);
  return per_pass * ((has_fwd(c.op) ? 1 : 0) + (has_bwd(c.op) ? 1 : 0));
}

// ---------------------------------------------------------------------------
// Host views of typed device data (exact upcast of the stored values).
template <class T>
float host_to_float(T v);
template <>
float host_to_float<float>(float v) {
  return v;
}
template <>
float host_to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return bf16_bits_to_f32(b);
}
template <>
float host_to_float<__half>(__half v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return f16_bits_to_f32(b);
}

// src [rows, ld] on the device -> rows values of column `col` (upcast to float).
template <class T>
std::vector<float> fetch_column(const T* src, int64_t rows, int64_t ld, int64_t col,
                                cudaStream_t s) {
  std::vector<T> raw(static_cast<size_t>(rows));
  MC_CUDA_CHECK(cudaMemcpy2DAsync(raw.data(), sizeof(T), src + col, size_t(ld) * sizeof(T),
                                  sizeof(T), size_t(rows), cudaMemcpyDeviceToHost, s),
                "bench_scan: fetch one channel");
  MC_CUDA_CHECK(cudaStreamSynchronize(s), "bench_scan: fetch one channel");
  std::vector<float> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) out[i] = host_to_float<T>(raw[i]);
  return out;
}

// src [n] contiguous on the device -> n values (upcast to float).
template <class T>
std::vector<float> fetch_span(const T* src, int64_t n, cudaStream_t s) {
  std::vector<T> raw(static_cast<size_t>(n));
  MC_CUDA_CHECK(cudaMemcpyAsync(raw.data(), src, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost, s),
                "bench_scan: fetch rows");
  MC_CUDA_CHECK(cudaStreamSynchronize(s), "bench_scan: fetch rows");
  std::vector<float> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) out[i] = host_to_float<T>(raw[i]);
  return out;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// ---------------------------------------------------------------------------
// One case's buffers and launches (kept alive across Google Benchmark's calls
// of the same case).
class ScanRun {
 public:
  virtual ~ScanRun() = default;
  virtual void prepare(cudaStream_t s) = 0;  // untimed: reset state / accumulators
  virtual void launch(cudaStream_t s) = 0;   // timed: the op
  virtual Disposition verify(cudaStream_t s) = 0;
  EventTimer timer;
  Disposition disposition;
};

template <class T>
class TypedScanRun final : public ScanRun {
 public:
  TypedScanRun(const ScanCase& c, int64_t B, int64_t di, cudaStream_t s)
      : c_(c), shape_{B, c.T, di, c.ds} {
    const int64_t BT = B * c.T, ds = c.ds;
    const size_t e = sizeof(T);
    delta_ = DeviceBuffer(size_t(BT * di) * e, "delta [B,T,di]");
    u_ = DeviceBuffer(size_t(BT * di) * e, "u [B,T,di]");
    y_ = DeviceBuffer(size_t(BT * di) * e, "y [B,T,di]");
    Bm_ = DeviceBuffer(size_t(BT * ds) * e, "Bm [B*T,ds]");
    Cm_ = DeviceBuffer(size_t(BT * ds) * e, "Cm [B*T,ds]");
    a_neg_ = DeviceBuffer(size_t(di * ds) * 4, "a_neg [di,ds]");
    D_ = DeviceBuffer(size_t(di) * 4, "D [di]");
    h_ = DeviceBuffer(size_t(B * di * ds) * 4, "h [B,di,ds]");
    h0_ = DeviceBuffer(size_t(B * di * ds) * 4, "h0 [B,di,ds]");
    saved_ = DeviceBuffer(scan::saved_floats(shape_, c.run.route, c.run.group) * 4,
                          std::string("saved states (") + run_name(c.run) + ")");
    if (has_bwd(c.op)) {
      dy_ = DeviceBuffer(size_t(BT * di) * e, "dy [B,T,di]");
      d_delta_ = DeviceBuffer(size_t(BT * di) * e, "d_delta [B,T,di]");
      du_ = DeviceBuffer(size_t(BT * di) * e, "du [B,T,di]");
      dB_ = DeviceBuffer(size_t(BT * ds) * 4, "dB [B*T,ds]");
      dC_ = DeviceBuffer(size_t(BT * ds) * 4, "dC [B*T,ds]");
      dD_ = DeviceBuffer(size_t(di) * 4, "dD [di]");
      dA_log_ = DeviceBuffer(size_t(di * ds) * 4, "dA_log [di,ds]");
      const size_t ws_bytes =
          scan::bwd_workspace_bytes(shape_, c.run.route, g_partial_budget, c.run.cpt,
                                    c.run.group, c.run.pieces);
      ws_ = DeviceBuffer(std::max<size_t>(1, ws_bytes), "scan backward workspace");
    }
    fill_inputs(s);
  }

  void prepare(cudaStream_t s) override {
    if (has_fwd(c_.op))
      MC_CUDA_CHECK(cudaMemcpyAsync(h_.get(), h0_.get(), h_.bytes(), cudaMemcpyDeviceToDevice, s),
                    "bench_scan: reset h");
    if (has_bwd(c_.op)) {
      MC_CUDA_CHECK(cudaMemsetAsync(dD_.get(), 0, dD_.bytes(), s), "bench_scan: zero dD");
      MC_CUDA_CHECK(cudaMemsetAsync(dA_log_.get(), 0, dA_log_.bytes(), s),
                    "bench_scan: zero dA_log");
    }
  }

  void launch(cudaStream_t s) override {
    if (has_fwd(c_.op)) run_fwd(s);
    if (has_bwd(c_.op)) run_bwd(s);
  }

  // Runs the forward (and the backward) once from h0 and screens the outputs.
  Disposition verify(cudaStream_t s) override {
    prepare(s);  // (a bwd-only case needs the forward too, for h_saved)
    MC_CUDA_CHECK(cudaMemcpyAsync(h_.get(), h0_.get(), h_.bytes(), cudaMemcpyDeviceToDevice, s),
                  "bench_scan: reset h");
    run_fwd(s);
    if (has_bwd(c_.op)) run_bwd(s);
    MC_CUDA_CHECK(cudaStreamSynchronize(s), "bench_scan: verification run");
    Disposition d;
    check_finite(d, "y", y_.as<T>(), y_.bytes() / sizeof(T), s);
    check_finite(d, "h_final", h_.as<float>(), h_.bytes() / 4, s);
    check_finite(d, "saved", saved_.as<float>(), saved_.bytes() / 4, s);
    if (has_bwd(c_.op)) {
      check_finite(d, "d_delta", d_delta_.as<T>(), d_delta_.bytes() / sizeof(T), s);
      check_finite(d, "du", du_.as<T>(), du_.bytes() / sizeof(T), s);
      check_finite(d, "dB", dB_.as<float>(), dB_.bytes() / 4, s);
      check_finite(d, "dC", dC_.as<float>(), dC_.bytes() / 4, s);
      check_finite(d, "dD", dD_.as<float>(), dD_.bytes() / 4, s);
      check_finite(d, "dA_log", dA_log_.as<float>(), dA_log_.bytes() / 4, s);
    }
    check_channel(d, 0, 0, s);
    check_channel(d, shape_.B - 1, shape_.di - 1, s);
    return d;
  }

 private:
  // The case's forward call: in place, h_ is read as the initial and written as the
  // final state.
  scan::FwdParams<T> fwd_params() {
    scan::FwdParams<T> p;
    p.shape = shape_;
    p.route = c_.run.route;
    p.exp = c_.run.exp;
    p.channels_per_thread = c_.run.cpt;
    p.layout = c_.run.layout;
    p.checkpoint_group = c_.run.group;
    // :pN forces the forward's pieces too, where it has them (lane groups, every chunk saved)
    p.pieces = fwd_pieces_of(c_.run);
    p.delta = {delta_.as<T>(), 0};
    p.u = {u_.as<T>(), 0};
    p.Bm = {Bm_.as<T>(), 0};
    p.Cm = {Cm_.as<T>(), 0};
    p.a_neg = a_neg_.as<float>();
    p.D = D_.as<float>();
    p.h0 = h_.as<float>();
    p.h_final = h_.as<float>();
    p.saved = saved_.as<float>();
    p.y = {y_.as<T>(), 0};
    return p;
  }

  void run_fwd(cudaStream_t s) { scan::forward<T>(fwd_params(), s); }

  void run_bwd(cudaStream_t s) {
    scan::BwdParams<T> p = scan::backward_of(fwd_params());
    p.pieces = c_.run.pieces;
    p.dy = {dy_.as<T>(), 0};
    p.d_delta = {d_delta_.as<T>(), 0};
    p.du = {du_.as<T>(), 0};
    p.dB = {dB_.as<float>(), 0};
    p.dC = {dC_.as<float>(), 0};
    p.dD = dD_.as<float>();
    p.dA_log = dA_log_.as<float>();
    p.workspace = ws_.get();
    p.workspace_bytes = ws_.bytes();
    p.partial_budget = g_partial_budget;
    scan::backward<T>(p, s);
  }

  // Inputs: Δ log-uniform in [1e-3, 0.1] (softplus of the spec's dt bias
  // init), u, B, C, dy uniform in [-1, 1], h0 uniform in [-0.5, 0.5],
  // A = a_neg[d, n] = -(n+1) (A_log = ln(n+1), the S4D-real initialisation), D = 1.
  void fill_inputs(cudaStream_t s) {
    const int64_t BT = shape_.B * shape_.T, di = shape_.di, ds = shape_.ds;
    fill_log_uniform<T>(delta_.as<T>(), BT * di, 1e-3f, 1e-1f, 0x5eed0001ULL, s);
    fill_uniform<T>(u_.as<T>(), BT * di, -1.f, 1.f, 0x5eed0002ULL, s);
    fill_uniform<T>(Bm_.as<T>(), BT * ds, -1.f, 1.f, 0x5eed0003ULL, s);
    fill_uniform<T>(Cm_.as<T>(), BT * ds, -1.f, 1.f, 0x5eed0004ULL, s);
    fill_uniform<float>(h0_.as<float>(), shape_.B * di * ds, -0.5f, 0.5f, 0x5eed0005ULL, s);
    if (has_bwd(c_.op)) fill_uniform<T>(dy_.as<T>(), BT * di, -1.f, 1.f, 0x5eed0006ULL, s);
    a_host_.resize(size_t(di * ds));
    for (int64_t d = 0; d < di; ++d)
      for (int64_t n = 0; n < ds; ++n) a_host_[size_t(d * ds + n)] = -float(n + 1);
    D_host_.assign(size_t(di), 1.0f);
    MC_CUDA_CHECK(cudaMemcpyAsync(a_neg_.get(), a_host_.data(), a_neg_.bytes(),
                                  cudaMemcpyHostToDevice, s),
                  "bench_scan: upload a_neg");
    MC_CUDA_CHECK(cudaMemcpyAsync(D_.get(), D_host_.data(), D_.bytes(), cudaMemcpyHostToDevice, s),
                  "bench_scan: upload D");
    MC_CUDA_CHECK(cudaStreamSynchronize(s), "bench_scan: input generation");
  }

  template <class V>
  void check_finite(Disposition& d, const char* what, const V* p, size_t n, cudaStream_t s) {
    const int64_t bad = count_nonfinite<V>(p, int64_t(n), s);
    if (bad != 0) {
      if (d.ok) d.detail = std::string(what) + ": " + std::to_string(bad) + " non-finite values";
      d.ok = false;
    }
  }

  // Channel (b, d): inputs read back from the device, f64 recomputation with
  // error bounds, comparison of y (and du, d_delta).
  void check_channel(Disposition& disp, int64_t b, int64_t d, cudaStream_t s) {
    const int64_t len = shape_.T, di = shape_.di, ds = shape_.ds;
    const int64_t row0 = b * len;  // first row of sample b in [B*T, ...] tensors
    ChannelInputs in;
    in.T = len;
    in.ds = ds;
    in.delta = to_double(fetch_column<T>(delta_.as<T>() + row0 * di, len, di, d, s));
    in.u = to_double(fetch_column<T>(u_.as<T>() + row0 * di, len, di, d, s));
    in.Bm = to_double(fetch_span<T>(Bm_.as<T>() + row0 * ds, len * ds, s));
    in.Cm = to_double(fetch_span<T>(Cm_.as<T>() + row0 * ds, len * ds, s));
    in.h0 = to_double(fetch_span<float>(h0_.as<float>() + (b * di + d) * ds, ds, s));
    in.a.assign(a_host_.begin() + d * ds, a_host_.begin() + (d + 1) * ds);
    in.D = D_host_[size_t(d)];
    in.composition_depth =
        c_.run.route == scan::Route::Chunked ? parallel_composition_depth(len) : 0;
    if (has_bwd(c_.op)) in.dy = to_double(fetch_column<T>(dy_.as<T>() + row0 * di, len, di, d, s));
    const ChannelResult r = channel_reference(in, has_bwd(c_.op));
    const std::string at = "(b=" + std::to_string(b) + ",d=" + std::to_string(d) + ")";
    compare_channel(disp, "y" + at, fetch_column<T>(y_.as<T>() + row0 * di, len, di, d, s), r.y,
                    r.y_bound, c_.dtype);
    if (has_bwd(c_.op)) {
      compare_channel(disp, "du" + at, fetch_column<T>(du_.as<T>() + row0 * di, len, di, d, s),
                      r.du, r.du_bound, c_.dtype);
      compare_channel(disp, "d_delta" + at,
                      fetch_column<T>(d_delta_.as<T>() + row0 * di, len, di, d, s), r.d_delta,
                      r.d_delta_bound, c_.dtype);
    }
  }

  ScanCase c_;
  scan::Shape shape_;
  DeviceBuffer delta_, u_, y_, Bm_, Cm_, a_neg_, D_, h_, h0_, saved_;
  DeviceBuffer dy_, d_delta_, du_, dB_, dC_, dD_, dA_log_, ws_;
  std::vector<float> a_host_, D_host_;
};

std::unique_ptr<ScanRun> make_run(const ScanCase& c, int64_t B, int64_t di, cudaStream_t s) {
  switch (c.dtype) {
    case DType::F32: return std::make_unique<TypedScanRun<float>>(c, B, di, s);
    case DType::BF16: return std::make_unique<TypedScanRun<__nv_bfloat16>>(c, B, di, s);
    case DType::F16: return std::make_unique<TypedScanRun<__half>>(c, B, di, s);
  }
  throw ConfigError("bench_scan: unknown dtype");
}

// ---------------------------------------------------------------------------
// The run's shared state.
struct ScanBench {
  BenchFlags flags;
  BenchDevice dev;
  cudaStream_t stream = nullptr;
  std::unique_ptr<L2Scrubber> scrub;
  int64_t B = 8, di = 1536;
  size_t budget_bytes = 0;
  double budget_frac = 0.4;
  int n_cases = 0;
  std::map<std::string, double> seconds;  // case name -> s/iteration (baselines)
  int active = -1;                        // index of the case whose buffers are alive
  std::unique_ptr<ScanRun> run;
  std::string run_error;
};

ScanBench* g_bench = nullptr;

std::string gib(size_t b) {
  std::ostringstream os;
  os.precision(3);
  os << double(b) / double(size_t(1) << 30) << " GiB";
  return os.str();
}

// Frees the previous case, then allocates, verifies and warms up case i.
void activate(ScanBench& g, const ScanCase& c, int i) {
  g.run.reset();
  g.run_error.clear();
  g.active = i;
  progress(g.flags, i + 1, g.n_cases, c.name);
  try {
    scan::check_shape(scan::Shape{g.B, c.T, g.di, c.ds}, c.run.route);
    const size_t need = case_alloc_bytes(c, g.B, g.di);
    size_t free_b = 0, total_b = 0;
    device_memory(&free_b, &total_b);
    if (need > g.budget_bytes) {
      g.run_error = "skipped: needs " + gib(need) + " of device memory > budget " +
                    gib(g.budget_bytes) + " (--mem_budget fraction of the device)";
      return;
    }
    if (need > free_b) {
      g.run_error = "skipped: needs " + gib(need) + ", only " + gib(free_b) + " free";
      return;
    }
    auto run = make_run(c, g.B, g.di, g.stream);
    run->disposition = run->verify(g.stream);
    if (!run->disposition.ok)
      std::fprintf(stderr, "%s: WARNING %s: verification failed: %s\n", kProgram, c.name.c_str(),
                   run->disposition.detail.c_str());
    run->prepare(g.stream);  // warm-up launch
    run->launch(g.stream);
    MC_CUDA_CHECK(cudaStreamSynchronize(g.stream), "bench_scan: warm-up");
    g.run = std::move(run);
  } catch (const std::exception& e) {
    g.run.reset();
    g.run_error = std::string("error: ") + e.what();
    std::fprintf(stderr, "%s: %s: %s\n", kProgram, c.name.c_str(), g.run_error.c_str());
  }
}

void set_counters(benchmark::State& st, const ScanBench& g, const ScanCase& c, double t) {
  using benchmark::Counter;
  const double BT = double(g.B * c.T);
  const double min_b = double(case_min_bytes(c, g.B, g.di));
  const double impl_b = double(case_impl_bytes(c, g.B, g.di));
  const double gbps = min_b / t / 1e9;
  st.counters["tokens_per_s"] = Counter(BT / t);
  st.counters["state_updates_per_s"] = Counter(BT * double(g.di * c.ds) / t);
  st.counters["GBps"] = Counter(gbps);
  st.counters["GBps_impl"] = Counter(impl_b / t / 1e9);
  st.counters["bytes_min"] = Counter(min_b);
  st.counters["pct_peak_bw"] = Counter(g.dev.copy.best_gbps > 0 ? 100.0 * gbps / g.dev.copy.best_gbps : 0);
  // the physical floor: the larger of moving bytes_min and issuing the exps on the SFU
  const double floor_bytes_s = g.dev.copy.best_gbps > 0 ? min_b / (g.dev.copy.best_gbps * 1e9) : 0;
  const double sfu_per_s = 16.0 * double(g.dev.info.sm_count) * double(g.dev.info.sm_clock_khz) * 1e3;
  const double floor_exp_s = sfu_per_s > 0 ? case_min_exps(c, g.B, g.di) / sfu_per_s : 0;
  const double floor_s = std::max(floor_bytes_s, floor_exp_s);
  st.counters["floor_bytes_us"] = Counter(floor_bytes_s * 1e6);
  st.counters["floor_exp_us"] = Counter(floor_exp_s * 1e6);
  st.counters["floor_us"] = Counter(floor_s * 1e6);
  st.counters["x_floor"] = Counter(floor_s > 0 ? t / floor_s : 0);
  st.counters["scan_mem_bytes"] = Counter(double(case_scan_bytes(c, g.B, g.di)));
  if (c.run.route == scan::Route::Checkpointed && c.op != Op::Bwd) {
    // the forward's pieces (scan.hpp), for the training forward this case runs
    const scan::Geometry fg =
        scan::geometry(scan::Shape{g.B, c.T, g.di, c.ds}, c.run.route, false, g_partial_budget,
                       c.run.cpt, c.run.group, c.run.layout, fwd_pieces_of(c.run),
                       elem_bytes(c.dtype));
    st.counters["fwd_pieces"] = Counter(double(fg.pieces));
  }
  if (c.run.route == scan::Route::Checkpointed && has_bwd(c.op)) {
    // the backward's pieces (scan.hpp): > 1 where its grid alone would leave SMs idle
    const scan::Geometry bg =
        scan::geometry(scan::Shape{g.B, c.T, g.di, c.ds}, c.run.route, true, g_partial_budget,
                       c.run.cpt, c.run.group, c.run.layout, c.run.pieces);
    st.counters["bwd_pieces"] = Counter(double(bg.pieces));
    st.counters["bwd_launches"] = Counter(double(bg.segments));
  }
  st.counters["total_alloc_bytes"] = Counter(double(case_alloc_bytes(c, g.B, g.di)));
  if (c.run.route != scan::Route::Chunked) {
    auto it = g.seconds.find(case_key(c.op, c.dtype, "chunked", c.T, c.ds));
    if (it != g.seconds.end()) st.counters["speedup_vs_chunked"] = Counter(it->second / t);
  }
  if (c.run.route != scan::Route::Sequential && c.ds <= Limits::kMaxSeqScanDState) {
    auto it = g.seconds.find(case_key(c.op, c.dtype, "sequential", c.T, c.ds));
    if (it != g.seconds.end()) st.counters["speedup_vs_sequential"] = Counter(it->second / t);
  }
  if (c.dtype != DType::F32) {
    auto it = g.seconds.find(case_key(c.op, DType::F32, run_name(c.run), c.T, c.ds));
    if (it != g.seconds.end()) st.counters["speedup_vs_f32"] = Counter(it->second / t);
  }
  st.counters["verified"] = Counter(g.run->disposition.ok ? 1.0 : 0.0);
  st.counters["verify_worst"] = Counter(g.run->disposition.worst);
}

void run_case(benchmark::State& st, const ScanCase& c, int index) {
  ScanBench& g = *g_bench;
  if (g.active != index) activate(g, c, index);
  if (!g.run) {
    st.SkipWithError(g.run_error.c_str());
    return;
  }
  ScanRun& run = *g.run;
  const double t = run_timed_loop(
      st, run.timer, g.stream,
      [&] {
        run.prepare(g.stream);
        g.scrub->scrub(g.stream);
      },
      [&] { run.launch(g.stream); }, &g.run_error);
  if (t < 0) g.run.reset();
  if (t <= 0) return;
  g.seconds[c.name] = t;
  set_counters(st, g, c, t);
  st.SetLabel(run.disposition.ok ? "ok" : "INCORRECT: " + run.disposition.detail);
}

// ---------------------------------------------------------------------------
const char* kBytesFormula =
    "e = element bytes (4 f32, 2 bf16/f16), BT = B*T. bytes_min (route-independent): "
    "fwd: 3*BT*di*e (read delta,u; write y) + 2*BT*ds*e (read B,C) + 4*(2*B*di*ds + di*ds + di) "
    "(states, a_neg, D); bwd: 5*BT*di*e (read delta,u,dy; write d_delta,du) + 2*BT*ds*e (read B,C) "
    "+ 8*BT*ds (write dB,dC f32) + 4*(3*di*ds + 3*di) (a_neg, D, dD and dA_log r+w); "
    "fwdbwd = fwd + bwd. GBps = bytes_min/t; GBps_impl adds what the route moves beyond it: "
    "its saved states (checkpoints [B,ceil(T/chunk),di,ds] or h_saved [B,T+1,di,ds], f32, written "
    "by the forward, read by the backward) and the backward's partials "
    "(scan::forward_traffic / backward_traffic, kernels/scan/scan.hpp).";
const char* kFloorFormula =
    "floor_us = max(floor_bytes_us, floor_exp_us); floor_bytes_us = bytes_min / peak copy "
    "bandwidth (measured at the start of this run); floor_exp_us = exps / (16 per clock per SM "
    "x SM count x max SM clock), exps = B*T*di*ds per pass (fwd 1, bwd 1, fwdbwd 2); "
    "x_floor = t / floor_us";

// --plan: the case list with its memory needs against a hypothetical device.
void print_plan(const std::vector<ScanCase>& cases, int64_t B, int64_t di, double device_bytes,
                double frac) {
  const double budget = frac * device_bytes;
  std::printf("bench_scan plan: B=%lld d_inner=%lld, budget %.1f GiB (%.0f%% of %.1f GiB)\n",
              (long long)B, (long long)di, budget / double(size_t(1) << 30), 100 * frac,
              device_bytes / double(size_t(1) << 30));
  std::printf("%-44s %12s %14s %s\n", "case", "alloc GiB", "min bytes GB", "runs?");
  int runs = 0;
  for (const auto& c : cases) {
    const double need = double(case_alloc_bytes(c, B, di));
    const bool fits = need <= budget;
    runs += fits;
    std::printf("%-44s %12.3f %14.3f %s\n", c.name.c_str(), need / double(size_t(1) << 30),
                double(case_min_bytes(c, B, di)) / 1e9, fits ? "yes" : "skipped (budget)");
  }
  std::printf("%d of %zu cases fit the budget\n", runs, cases.size());
}

std::string help_text;
void print_help() {
  benchmark::PrintDefaultHelp();
  std::fputs(help_text.c_str(), stdout);
}

int main_impl(int argc, char** argv) {
  ArgvRewrite rw(argc, argv);
  help_text = common_flags_help() +
              "  --batch=B          batch size of every case (default 8)\n"
              "  --d_inner=DI       channels of every case (default 1536, mamba-130m)\n"
              "  --mem_budget=F     skip cases needing more than F x device memory (0.4)\n"
              "  --partial_budget=MIB  the checkpointed backward's dB/dC partials budget\n"
              "                     (default 0: the scan's own, kDefaultPartialBudget)\n"
              "  --cases=T:DS,...   the (T, d_state) pairs (default 512:16,2048:16,8192:16,2048:256)\n"
              "  --routes=R,...     of checkpointed-hw, checkpointed-acc, chunked, sequential;\n"
              "                     a checkpointed route with :cpt1..:cpt4 forces its channels\n"
              "                     per thread (2..4: the tile plan, d_state <= 16), and with\n"
              "                     :gN saves one state per group of N chunks (grouped\n"
              "                     checkpoints: the backward refills them), e.g. checkpointed-hw:g64;\n"
              "                     :lanes / :whole force the forward's layout at d_state <= 16\n"
              "                     (a channel's states over 4 lanes, or all in one thread);\n"
              "                     :pN forces the pieces of the backward and, where it has\n"
              "                     them, the forward (d_state <= 16, one channel a thread;\n"
              "                     :p1 = one walk over all T)\n"
              "  --dtypes=D,...     of f32, bf16, f16 (default all three)\n"
              "  --plan=GIB         no GPU needed: list the cases with the bytes each allocates\n"
              "                     and moves, and which a device of GIB GiB would skip\n" +
              exit_codes_help();
  benchmark::Initialize(rw.argc(), rw.argv(), print_help);
  ScanBench g;
  g.flags = parse_project_flags(*rw.argc(), rw.argv(), rw,
                                {"batch", "d_inner", "mem_budget", "plan", "cases", "routes", "dtypes",
                                 "partial_budget"});
  g.B = g.flags.get_int("batch", 8, 1, Limits::kMaxBatch);
  g.di = g.flags.get_int("d_inner", 1536, 1, Limits::kMaxDInner);
  g.budget_frac = g.flags.get_double("mem_budget", 0.4, 0.01, 0.95);
  g_partial_budget = size_t(g.flags.get_int("partial_budget", 0, 0, int64_t(1) << 20)) << 20;

  if (g.flags.values.count("plan")) {
    print_plan(make_cases(g.flags), g.B, g.di,
               g.flags.get_double("plan", 0, 0.001, 1e6) * double(size_t(1) << 30), g.budget_frac);
    return 0;
  }
  if (const int rc = check_gpu_or_explain(kProgram)) return rc;
  if (g.flags.devices.size() > 1 && !g.flags.is_shard_child)
    return run_device_shards(g.flags, kProgram);

  MC_CUDA_CHECK(cudaSetDevice(g.flags.device), "bench_scan: select device");
  MC_CUDA_CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking),
                "bench_scan: create stream");
  g.dev = open_bench_device(g.flags, g.stream);
  g.scrub = std::make_unique<L2Scrubber>(g.flags.device);
  g.budget_bytes = size_t(g.budget_frac * double(g.dev.total_mem));
  g_bench = &g;

  add_common_context(g.dev, g.flags, kProgram,
                     "cudaEventRecord on the benchmark stream around the scan launch(es) only "
                     "(UseManualTime); 1 warm-up launch per case; before every timed iteration, "
                     "untimed: h <- h0, dD/dA_log zeroed, L2 scrub");
  using benchmark::AddCustomContext;
  AddCustomContext("scan_B", std::to_string(g.B));
  AddCustomContext("scan_d_inner", std::to_string(g.di));
  AddCustomContext("scan_dtypes", "f32,bf16,f16 (storage of delta,u,B,C,y,dy,d_delta,du; "
                                  "state, h_saved, dB/dC/dD/dA_log always f32)");
  AddCustomContext("scan_routes", "checkpointed-hw (default for bf16/f16 storage), "
                                  "checkpointed-acc (default for f32), chunked (seed parallel), "
                                  "sequential (d_state <= 64 only)");
  AddCustomContext("scan_fwd_variant", "training forward: the route's saved states written");
  AddCustomContext("l2_policy", g.scrub->policy());
  AddCustomContext("bytes_formula", kBytesFormula);
  AddCustomContext("floor_formula", kFloorFormula);
  AddCustomContext("state_updates_formula", "B*T*di*ds per iteration (per op; fwdbwd counts once)");
  AddCustomContext("baselines",
                   "speedup_vs_chunked = t(chunked seed route, same op/dtype/T/ds, this run)/t; "
                   "speedup_vs_sequential likewise; "
                   "speedup_vs_f32 = t(f32 storage, same op/route/T/ds, this run)/t; "
                   "pct_peak_bw = 100*GBps/peak_copy_GBps");
  AddCustomContext("inputs", "delta log-uniform [1e-3,0.1]; u,B,C,dy uniform [-1,1]; "
                             "h0 uniform [-0.5,0.5]; A[d,n] = -(n+1); D = 1");
  AddCustomContext("verify_method",
                   "outputs finite + channels (0,0) and (B-1,di-1) vs f64 host recomputation "
                   "within a first-order f32 error bound + 1 ulp of the output dtype "
                   "(bench/scan_sanity.hpp); verified = 1/0");
  AddCustomContext("mem_budget_bytes", std::to_string(g.budget_bytes));
  AddCustomContext("partial_budget_bytes",
                   g_partial_budget ? std::to_string(g_partial_budget)
                                    : std::to_string(scan::kDefaultPartialBudget) + " (default)");

  const std::vector<ScanCase> all = make_cases(g.flags);
  std::vector<ScanCase> mine;
  for (const auto& c : all)
    if (c.group % g.flags.shard_count == g.flags.shard_index) mine.push_back(c);
  g.n_cases = int(mine.size());
  // Manual time is exempt from Google Benchmark's wall-time cap, so small cases
  // run min_time / t iterations (each with an untimed ~2xL2 memset): keep it short.
  const double min_time = g.flags.quick ? 0.01 : (g.flags.sweep ? 0.05 : 0.1);
  for (int i = 0; i < int(mine.size()); ++i) {
    const ScanCase c = mine[size_t(i)];
    auto* b = benchmark::RegisterBenchmark(c.name.c_str(), [c, i](benchmark::State& st) {
      run_case(st, c, i);
    });
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
    if (!g.flags.user_min_time) b->MinTime(min_time);
  }
  std::fprintf(stderr, "%s: %d cases on device %d (%s), B=%lld d_inner=%lld, peak copy %.1f GB/s\n",
               kProgram, g.n_cases, g.flags.device, g.dev.info.name.c_str(), (long long)g.B,
               (long long)g.di, g.dev.copy.best_gbps);
  benchmark::RunSpecifiedBenchmarks();
  g.run.reset();
  benchmark::Shutdown();
  g_bench = nullptr;
  MC_CUDA_CHECK(cudaStreamDestroy(g.stream), "bench_scan: destroy stream");
  return 0;
}

}  // namespace
}  // namespace mc::bench

int main(int argc, char** argv) {
  try {
    return mc::bench::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_scan: error: %s\n", e.what());
    return 1;
  }
}
