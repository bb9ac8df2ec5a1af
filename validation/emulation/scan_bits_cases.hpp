// scan_bits_cases.hpp — the cases of the device-vs-emulation bit comparison and
// the code that runs one of them through the public scan API (kernels/scan/scan.hpp),
// compiled twice from this one source:
//   * into scan_bits_emulated (validation/emulation, host compiler,
//     MC_SCAN_HOST_EMULATION): the kernels run on the CPU emulator and every
//     output's raw bytes go to a dump file (ctest ScanEmulation.BitsDump, label cpu);
//   * into test_scan_emulation_bits (validation/gpu, label gpu): the same cases on
//     the device, each output compared BYTE FOR BYTE with the dump.
// Only routes whose arithmetic is fixed at the source level are compared:
// Checkpointed with ExpMath::Accurate, Chunked and Sequential (the seed kernels);
// ExpMath::Hardware uses ex2.approx, which has no host twin. The fused softplus
// and SiLU gate call CUDA's expf/log1pf, whose bits differ from the host libm's,
// so no case here fuses them (their parity is test_scan_parity's); the D·u skip,
// a null h0 and an upstream dh_final are pure f32 arithmetic and are covered.
// Inputs are deterministic (SplitMix64 from the case's seed), typed inputs
// quantised once on the host, so both builds see the same bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "check/problem.hpp"
#include "core/config.hpp"
#include "core/storage.hpp"
#include "gpu/device_buffer.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/scan/scan.hpp"

namespace mc::testing::scan_bits {

namespace scan = ::mc::kern::scan;

struct Case {
  DType dtype = DType::F32;
  scan::Route route = scan::Route::Checkpointed;
  int64_t B = 1, T = 1, di = 17, ds = 16;
  bool xdbl = false;     // B/C strided views into one [B*T, 3 + 2·ds] row
  bool chained = false;  // upstream dh_final
  bool no_skip = false;  // D = null (checkpointed only)
  bool zero_h0 = false;  // h0 = null (checkpointed only)
  int cpt = 0;           // checkpointed, d_state <= 16: forced channels per thread (0 = plan's)
  int64_t pieces = 0;    // checkpointed backward, d_state <= 16: forced pieces (0 = plan's)
  uint64_t seed = 1;
  std::string name() const {
    std::ostringstream os;
    os << to_string(dtype) << "_" << scan::to_string(route) << "_B" << B << "_T" << T << "_di"
       << di << "_ds" << ds << (xdbl ? "_xdbl" : "") << (chained ? "_chained" : "")
       << (no_skip ? "_noskip" : "") << (zero_h0 ? "_h0zero" : "")
       << (cpt ? "_cpt" + std::to_string(cpt) : "") << (pieces ? "_p" + std::to_string(pieces) : "");
    return os.str();
  }
};

// Every route on every shape it supports, f32, bf16 and f16: chunk boundaries of
// the checkpointed stride (T = 17, 33), several channel blocks with the last one
// partial (di = 75), the chunked route past one chunk (T = 257) and with its
// backward's channel grouping (B·di >= 2048), odd d_state (5, 65, 129; 129 in every
// dtype: the plan of 8 states a thread), sequential's limit (ds = 64),
// strided B/C rows, and the accumulate/initial-state/upstream-gradient options.
inline std::vector<Case> cases() {
  struct Shape {
    int64_t B, T, di, ds;
    bool xdbl, chained, ckpt_only_opts;
  };
  const Shape f32_shapes[] = {{2, 37, 19, 16, true, false, false},
                              {1, 70, 21, 5, false, true, false},
                              {3, 17, 75, 64, false, false, false},
                              {1, 33, 17, 129, true, false, false},
                              {1, 257, 19, 16, false, false, false},  // chunked: past one chunk
                              {2, 7, 1031, 4, false, false, false},   // chunked bwd: channel groups
                              {2, 41, 19, 16, false, true, true}};
  const Shape typed_shapes[] = {{2, 37, 19, 16, true, false, false},
                                {1, 33, 21, 65, false, true, false},
                                {1, 19, 9, 129, false, false, false},  // 8 states a thread
                                {2, 41, 19, 16, false, true, true},
                                // 16 lanes a channel: the accurate backward keeps dA there
                                {1, 35, 13, 48, false, false, false}};
  std::vector<Case> v;
  auto add = [&](DType dt, const Shape& s) {
    for (scan::Route r : {scan::Route::Checkpointed, scan::Route::Chunked, scan::Route::Sequential}) {
      if (s.ckpt_only_opts && r != scan::Route::Checkpointed) continue;
      if (r == scan::Route::Sequential && s.ds > Limits::kMaxSeqScanDState) continue;
      Case c;
      c.dtype = dt;
      c.route = r;
      c.B = s.B;
      c.T = s.T;
      c.di = s.di;
      c.ds = s.ds;
      c.xdbl = s.xdbl;
      c.chained = s.chained;
      c.no_skip = c.zero_h0 = s.ckpt_only_opts;
      c.seed = 7000 + v.size();
      v.push_back(c);
    }
  };
  for (const Shape& s : f32_shapes) add(DType::F32, s);
  for (DType dt : {DType::BF16, DType::F16})
    for (const Shape& s : typed_shapes) add(dt, s);
  // Checkpointed cases with a forced plan (the shapes above are small enough that the plan
  // gives one channel a thread and, at d_state <= 16, cuts the backward into one-chunk
  // pieces):
  // - the d_state <= 16 tile plan at each forced channels per thread, with several channel
  //   blocks, the last partial;
  // - one walk over every chunk (pieces = 1): the instance without pieces, which the plan
  //   gives grids of 198 blocks and more and these small grids never get.
  // `opts` sets chained, no_skip and zero_h0 together.
  struct Forced {
    DType dt;
    int64_t B, T, di, ds;
    int cpt;
    int64_t pieces;
    bool chained, opts;
  };
  for (const Forced& f : {Forced{DType::F32, 2, 37, 300, 16, 4, 0, false, false},
                          Forced{DType::F32, 1, 41, 200, 13, 3, 0, false, true},
                          Forced{DType::BF16, 2, 33, 130, 16, 3, 0, false, false},
                          Forced{DType::F16, 1, 17, 19, 16, 4, 0, false, true},
                          Forced{DType::F32, 2, 29, 150, 16, 2, 0, false, true},
                          Forced{DType::F32, 2, 41, 19, 16, 0, 1, true, false},
                          Forced{DType::BF16, 2, 41, 19, 16, 0, 1, true, false},
                          Forced{DType::F16, 2, 41, 19, 16, 0, 1, true, false}}) {
    Case c;
    c.dtype = f.dt;
    c.B = f.B;
    c.T = f.T;
    c.di = f.di;
    c.ds = f.ds;
    c.cpt = f.cpt;
    c.pieces = f.pieces;
    c.chained = f.chained || f.opts;
    c.no_skip = c.zero_h0 = f.opts;
    c.seed = 7000 + v.size();
    v.push_back(c);
  }
  return v;
}

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

// One output tensor of one case: its name ("<case>/<tensor>"), its element size
// (4 for f32 outputs, 2 for typed ones) and its raw bytes as the device wrote them.
struct Tensor {
  std::string name;
  int elem_bytes = 4;
  std::vector<unsigned char> bytes;
};

template <class T>
T to_elem(float x);
template <>
inline float to_elem<float>(float x) {
  return x;
}
template <>
inline __nv_bfloat16 to_elem<__nv_bfloat16>(float x) {
  __nv_bfloat16_raw r;
  r.x = f32_to_bf16_bits(x);
  return __nv_bfloat16(r);
}
template <>
inline __half to_elem<__half>(float x) {
  __half_raw r;
  r.x = f32_to_f16_bits(x);
  return __half(r);
}

inline cudaStream_t stream() { return nullptr; }  // the legacy default stream: all ordered

template <class T>
gpu::DeviceBuffer<T> upload(const std::vector<float>& host, const std::string& name) {
  std::vector<T> tmp(host.size());
  for (size_t i = 0; i < host.size(); ++i) tmp[i] = to_elem<T>(host[i]);
  gpu::DeviceBuffer<T> d(host.empty() ? 1 : host.size(), name);
  if (!host.empty()) d.upload(tmp.data(), tmp.size(), stream());
  return d;
}

template <class T>
void add_tensor(std::vector<Tensor>& out, const std::string& prefix, const char* name,
                const gpu::DeviceBuffer<T>& d, size_t n) {
  Tensor t;
  t.name = prefix + "/" + name;
  t.elem_bytes = int(sizeof(T));
  t.bytes.resize(n * sizeof(T));
  if (n) {
    MC_CUDA_CHECK(cudaMemcpy(t.bytes.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost),
                  "scan_bits download " + t.name);
  }
  out.push_back(std::move(t));
}

// Forward (with saving) and backward of one case; every output's bytes.
template <class T>
std::vector<Tensor> run_case(const Case& c) {
  const scan::Shape sh{c.B, c.T, c.di, c.ds};
  const int64_t R = c.B * c.T, n = R * c.di, ns = c.B * c.di * c.ds;
  check::SplitMix64 rng(c.seed * 0x9e3779b97f4a7c15ULL + 99);
  auto q = [&](double x) { return round_to(c.dtype, float(x)); };
  const size_t un = static_cast<size_t>(n), uns = static_cast<size_t>(ns);
  std::vector<float> delta(un), u(un), dy(un);
  for (int64_t i = 0; i < n; ++i) {
    delta[size_t(i)] = q(std::log1p(std::exp(rng.uniform(-7.0, 0.0))));  // softplus of U(-7, 0)
    u[size_t(i)] = q(rng.uniform(-2.0, 2.0));
    dy[size_t(i)] = q(rng.uniform(-1.0, 1.0));
  }
  const int64_t ld = c.xdbl ? 3 + 2 * c.ds : c.ds;
  std::vector<float> Bm(size_t(R * ld), q(7.0)), Cm(size_t(R * ld), q(7.0));  // xdbl: one buffer
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < c.ds; ++k) {
      Bm[size_t(r * ld + (c.xdbl ? 3 : 0) + k)] = q(rng.uniform(-1.0, 1.0));
      Cm[size_t(r * ld + (c.xdbl ? 3 : 0) + k)] = q(rng.uniform(-1.0, 1.0));
    }
  const size_t nA = static_cast<size_t>(c.di * c.ds), nD = static_cast<size_t>(c.di);
  std::vector<float> a(nA), D(nD), h0(uns), dhT(uns), dD0(nD), dA0(nA);
  for (int64_t d = 0; d < c.di; ++d)
    for (int64_t k = 0; k < c.ds; ++k)
      a[size_t(d * c.ds + k)] = -std::exp(float(std::log(double(k + 1)) + rng.uniform(-0.3, 0.3)));
  for (auto& x : D) x = float(rng.uniform(0.5, 1.5));
  for (auto& x : h0) x = float(rng.uniform(-1.0, 1.0));
  for (auto& x : dhT) x = float(rng.uniform(-1.0, 1.0));
  for (auto& x : dD0) x = float(rng.uniform(-0.5, 0.5));
  for (auto& x : dA0) x = float(rng.uniform(-0.5, 0.5));

  auto d_delta_in = upload<T>(delta, "delta"), d_u = upload<T>(u, "u"), d_dy = upload<T>(dy, "dy");
  auto d_B = upload<T>(Bm, "Bm"), d_C = upload<T>(Cm, "Cm");
  auto d_a = upload<float>(a, "a_neg"), d_D = upload<float>(D, "D"), d_h0 = upload<float>(h0, "h0"),
       d_dhT = upload<float>(dhT, "dh_final"), d_dD = upload<float>(dD0, "dD"),
       d_dA = upload<float>(dA0, "dA_log");
  const size_t nsaved = scan::saved_floats(sh, c.route);
  gpu::DeviceBuffer<float> saved(nsaved, "saved"), hf(size_t(ns), "h_final"), dB(size_t(R * c.ds), "dB"),
      dC(size_t(R * c.ds), "dC"), dh0(size_t(ns), "dh0");
  gpu::DeviceBuffer<T> y(size_t(n), "y"), ddelta(size_t(n), "d_delta"), du(size_t(n), "du");
  const size_t ws_bytes = scan::bwd_workspace_bytes(sh, c.route, 0, c.cpt, 1, c.pieces);
  gpu::DeviceBuffer<char> ws(ws_bytes ? ws_bytes : 1, "workspace");
  // Every output starts as all-ones bytes (NaN): an unwritten element differs.
  MC_CUDA_CHECK(cudaMemset(saved.get(), 0xff, saved.bytes()), "fill saved");
  MC_CUDA_CHECK(cudaMemset(hf.get(), 0xff, hf.bytes()), "fill h_final");
  MC_CUDA_CHECK(cudaMemset(y.get(), 0xff, y.bytes()), "fill y");

  const int64_t off = c.xdbl ? 3 : 0;
  scan::FwdParams<T> f;
  f.shape = sh;
  f.route = c.route;
  f.exp = scan::ExpMath::Accurate;
  f.channels_per_thread = c.cpt;
  f.delta = {d_delta_in.get(), 0};
  f.u = {d_u.get(), 0};
  f.Bm = {d_B.get() + off, c.xdbl ? ld : 0};
  f.Cm = {d_C.get() + off, c.xdbl ? ld : 0};
  f.a_neg = d_a.get();
  f.D = c.no_skip ? nullptr : d_D.get();
  f.h0 = c.zero_h0 ? nullptr : d_h0.get();
  f.h_final = hf.get();
  f.saved = saved.get();
  f.y = {y.get(), 0};
  scan::forward<T>(f, stream());

  MC_CUDA_CHECK(cudaMemset(ddelta.get(), 0xff, ddelta.bytes()), "fill d_delta");
  MC_CUDA_CHECK(cudaMemset(du.get(), 0xff, du.bytes()), "fill du");
  MC_CUDA_CHECK(cudaMemset(dB.get(), 0xff, dB.bytes()), "fill dB");
  MC_CUDA_CHECK(cudaMemset(dC.get(), 0xff, dC.bytes()), "fill dC");
  MC_CUDA_CHECK(cudaMemset(dh0.get(), 0xff, dh0.bytes()), "fill dh0");
  MC_CUDA_CHECK(cudaMemset(ws.get(), 0xff, ws.bytes()), "fill workspace");
  scan::BwdParams<T> b = scan::backward_of(f);
  b.dy = {d_dy.get(), 0};
  b.dh_final = c.chained ? d_dhT.get() : nullptr;
  b.d_delta = {ddelta.get(), 0};
  b.du = {du.get(), 0};
  b.dB = {dB.get(), 0};
  b.dC = {dC.get(), 0};
  b.dD = c.no_skip ? nullptr : d_dD.get();
  b.dA_log = d_dA.get();
  b.dh0 = dh0.get();
  b.workspace = ws.get();
  b.workspace_bytes = ws_bytes;
  b.pieces = c.pieces;
  scan::backward<T>(b, stream());
  MC_CUDA_CHECK(cudaDeviceSynchronize(), "scan_bits " + c.name());

  std::vector<Tensor> out;
  const std::string p = c.name();
  add_tensor(out, p, "y", y, size_t(n));
  add_tensor(out, p, "saved", saved, nsaved);
  add_tensor(out, p, "h_final", hf, size_t(ns));
  add_tensor(out, p, "d_delta", ddelta, size_t(n));
  add_tensor(out, p, "du", du, size_t(n));
  add_tensor(out, p, "dB", dB, size_t(R * c.ds));
  add_tensor(out, p, "dC", dC, size_t(R * c.ds));
  if (!c.no_skip) add_tensor(out, p, "dD", d_dD, size_t(c.di));
  add_tensor(out, p, "dA_log", d_dA, size_t(c.di * c.ds));
  add_tensor(out, p, "dh0", dh0, size_t(ns));
  return out;
}

inline std::vector<Tensor> run_case_any(const Case& c) {
  switch (c.dtype) {
    case DType::F32: return run_case<float>(c);
    case DType::BF16: return run_case<__nv_bfloat16>(c);
    case DType::F16: return run_case<__half>(c);
  }
  throw std::logic_error("scan_bits: unknown dtype");
}

// ---- the dump file: "MCSCANBITS 1\n" then per tensor "<name> <elem_bytes> <nbytes>\n<bytes>\n"
constexpr const char* kMagic = "MCSCANBITS 1";

inline void write_dump(const std::string& path, const std::vector<Tensor>& all) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << kMagic << "\n";
  for (const Tensor& t : all) {
    f << t.name << " " << t.elem_bytes << " " << t.bytes.size() << "\n";
    f.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
    f << "\n";
  }
  if (!f) throw std::runtime_error("short write to " + path);
}

inline std::vector<Tensor> read_dump(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::string line;
  std::getline(f, line);
  if (line != kMagic) throw std::runtime_error(path + ": not a scan bits dump (" + line + ")");
  std::vector<Tensor> all;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    std::istringstream is(line);
    Tensor t;
    size_t nbytes = 0;
    if (!(is >> t.name >> t.elem_bytes >> nbytes)) throw std::runtime_error(path + ": bad header " + line);
    t.bytes.resize(nbytes);
    f.read(reinterpret_cast<char*>(t.bytes.data()), std::streamsize(nbytes));
    if (!f) throw std::runtime_error(path + ": truncated at " + t.name);
    all.push_back(std::move(t));
  }
  return all;
}

}  // namespace mc::testing::scan_bits
