// ctest-labels: gpu
// ctest-timeout: 900
// test_scan_emulation_bits.cpp — the device's scan outputs equal the CPU
// emulation's BYTE FOR BYTE: every case of validation/emulation/scan_bits_cases.hpp
// (routes Checkpointed with ExpMath::Accurate, Chunked and Sequential; f32, bf16
// and f16; y, the saved states, h_final, d_delta, du, dB, dC, dD, dA_log, dh0) runs
// on the GPU and is compared with the dump that scan_bits_emulated wrote from the
// same kernel sources run on the CPU emulator (ctest ScanEmulation.BitsDump). No
// oracle is involved: this is the check behind "the scan's arithmetic is fixed at
// the source level" (explicit fmaf / __fmul_rn, no contraction left to nvcc, the
// polynomial exp of exp_math.cuh). A mismatch names the tensor, the number of
// differing elements, the first index, both values and their ULP distance.
//
// The same source also builds against the emulated kernels (validation/emulation,
// ctests ScanEmulation.BitsSelfCheck and ...Corrupted, label cpu): there "device"
// and dump are the same code, which checks this comparison and the dump format
// without a GPU, and that a one-bit difference is caught.
//
// The dump: $MC_SCAN_EMU_BITS, else scan_emulation_bits.bin next to this binary
// (the staged build carries it). When it is missing, or older than the emulated
// program next to this binary, that program is run first to write it (about a
// minute on one core). Without either the test fails: a GPU run that cannot
// compare must not pass.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/storage.hpp"
#include "validation/emulation/scan_bits_cases.hpp"
#include "validation/support/child_process.hpp"
#include "validation/support/gpu_test.hpp"

namespace {

namespace sb = mc::testing::scan_bits;

std::string self_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "./";
  const std::string self(buf, size_t(n));
  return self.substr(0, self.rfind('/') + 1);
}

bool file_time(const std::string& p, struct timespec* t) {
  struct stat st;
  if (stat(p.c_str(), &st) != 0) return false;
  *t = st.st_mtim;
  return true;
}

// The dump (written by the emulated program if needed); "" + *error on failure.
std::string ensure_dump(std::string* error) {
  if (const char* e = std::getenv("MC_SCAN_EMU_BITS"); e && *e) return e;
  const std::string dump = self_dir() + "scan_emulation_bits.bin";
  const std::string prog = self_dir() + "scan_bits_emulated";
  struct timespec td{}, tp{};
  const bool have_dump = file_time(dump, &td), have_prog = file_time(prog, &tp);
  const bool stale = have_dump && have_prog &&
                     (tp.tv_sec > td.tv_sec || (tp.tv_sec == td.tv_sec && tp.tv_nsec > td.tv_nsec));
  if (have_dump && !stale) return dump;
  if (!have_prog) {
    *error = "no emulation dump " + dump + " and no " + prog +
             " to write it (build scan_bits_emulated, or set MC_SCAN_EMU_BITS)";
    return "";
  }
  std::cout << "writing the emulation dump: " << prog << " --out " << dump << "\n";
  const mc::testing::ChildResult r =
      mc::testing::run_child(prog, {"--out", dump}, dump + ".log", 1800);
  if (!(r.exited && r.exit_code == 0)) {
    *error = prog + ": " + r.describe() + "\n" + mc::testing::quote_child_log(r.log);
    return "";
  }
  return dump;
}

const std::map<std::string, sb::Tensor>& dump_tensors(std::string* error) {
  static std::string err;
  static const std::map<std::string, sb::Tensor> m = [] {
    std::map<std::string, sb::Tensor> out;
    try {
      const std::string path = ensure_dump(&err);
      if (path.empty()) return out;
      for (sb::Tensor& t : sb::read_dump(path)) out[t.name] = std::move(t);
    } catch (const std::exception& e) {
      err = e.what();
    }
    return out;
  }();
  *error = err;
  return m;
}

// Value of element i of a tensor of `dt` and its order-preserving integer.
double value_at(mc::DType dt, const sb::Tensor& t, size_t i, int64_t* ord) {
  if (t.elem_bytes == 4) {
    uint32_t u;
    std::memcpy(&u, t.bytes.data() + 4 * i, 4);
    float f;
    std::memcpy(&f, &u, 4);
    *ord = (u & 0x80000000u) ? -int64_t(u & 0x7fffffffu) : int64_t(u);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, t.bytes.data() + 2 * i, 2);
  *ord = (h & 0x8000u) ? -int64_t(h & 0x7fffu) : int64_t(h);
  return dt == mc::DType::BF16 ? mc::bf16_bits_to_f32(h) : mc::f16_bits_to_f32(h);
}

// "" when identical, else what differs.
std::string difference(mc::DType dt, const sb::Tensor& dev, const sb::Tensor& emu) {
  std::ostringstream os;
  if (dev.elem_bytes != emu.elem_bytes || dev.bytes.size() != emu.bytes.size()) {
    os << dev.name << ": device " << dev.bytes.size() << " bytes of " << dev.elem_bytes
       << "-byte elements, emulation " << emu.bytes.size() << " of " << emu.elem_bytes;
    return os.str();
  }
  if (std::memcmp(dev.bytes.data(), emu.bytes.data(), dev.bytes.size()) == 0) return "";
  const size_t n = dev.bytes.size() / size_t(dev.elem_bytes);
  size_t count = 0, first = n;
  int64_t max_ulp = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(dev.bytes.data() + i * dev.elem_bytes, emu.bytes.data() + i * emu.elem_bytes,
                    size_t(dev.elem_bytes)) == 0)
      continue;
    if (first == n) first = i;
    ++count;
    int64_t a, b;
    value_at(dt, dev, i, &a);
    value_at(dt, emu, i, &b);
    max_ulp = std::max<int64_t>(max_ulp, a > b ? a - b : b - a);
  }
  int64_t oa, ob;
  const double va = value_at(dt, dev, first, &oa), vb = value_at(dt, emu, first, &ob);
  os.precision(9);
  os << dev.name << ": " << count << " of " << n << " elements differ; first at " << first
     << ": device " << va << ", emulation " << vb << " (" << (oa > ob ? oa - ob : ob - oa)
     << " ulp); max " << max_ulp << " ulp";
  return os.str();
}

class ScanEmulationBits : public mc::testing::GpuTest,
                          public ::testing::WithParamInterface<sb::Case> {};

TEST_P(ScanEmulationBits, DeviceEqualsEmulation) {
  const sb::Case& c = GetParam();
  std::string error;
  const auto& emu = dump_tensors(&error);
  ASSERT_TRUE(error.empty()) << error;
  std::vector<sb::Tensor> dev = sb::run_case_any(c);
  ASSERT_FALSE(dev.empty());
  // Control of the comparison itself (ctest ScanEmulation.BitsSelfCheckCorrupted,
  // WILL_FAIL): one flipped bit in every case's first tensor must be reported.
  if (const char* e = std::getenv("MC_SCAN_BITS_CORRUPT"); e && *e == '1' && !dev[0].bytes.empty())
    dev[0].bytes[0] ^= 1u;
  int compared = 0;
  for (const sb::Tensor& t : dev) {
    const auto it = emu.find(t.name);
    if (it == emu.end()) {
      ADD_FAILURE() << t.name << ": not in the emulation dump (rebuild scan_bits_emulated and "
                    << "rerun ctest ScanEmulation.BitsDump)";
      continue;
    }
    const std::string d = difference(c.dtype, t, it->second);
    EXPECT_TRUE(d.empty()) << d;
    ++compared;
  }
  std::cout << "[scan bits] " << c.name() << ": " << compared << " tensors compared\n";
}

// Every dumped case is one the device runs (the two builds agree on the list).
TEST(ScanEmulationBitsDump, CoversEveryCase) {
  std::string reason;
  if (!mc::gpu::gpu_available(&reason)) GTEST_SKIP() << reason;
  std::string error;
  const auto& emu = dump_tensors(&error);
  ASSERT_TRUE(error.empty()) << error;
  size_t expected_prefixes = 0;
  for (const sb::Case& c : sb::cases()) {
    const std::string p = c.name() + "/";
    const auto it = emu.lower_bound(p);
    EXPECT_TRUE(it != emu.end() && it->first.compare(0, p.size(), p) == 0)
        << c.name() << " is missing from the dump";
    ++expected_prefixes;
  }
  EXPECT_GE(emu.size(), expected_prefixes * 9);
}

INSTANTIATE_TEST_SUITE_P(Cases, ScanEmulationBits, ::testing::ValuesIn(sb::cases()),
                         [](const ::testing::TestParamInfo<sb::Case>& i) { return i.param.name(); });

}  // namespace
