// scan_bits_dump.cpp — scan_bits_emulated: runs every case of scan_bits_cases.hpp
// on the CPU emulation of the scan kernels (MC_SCAN_HOST_EMULATION, emulation.cuh)
// and writes every output's raw bytes to one dump file, the reference that
// validation/gpu/test_scan_emulation_bits.cpp holds the device to, byte for byte.
// usage: scan_bits_emulated --out FILE
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "validation/emulation/scan_bits_cases.hpp"

int main(int argc, char** argv) {
  std::string out;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) out = argv[++i];
  }
  if (out.empty()) {
    std::fprintf(stderr, "usage: %s --out FILE\n", argv[0]);
    return 2;
  }
  namespace sb = mc::testing::scan_bits;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<sb::Tensor> all;
    size_t bytes = 0;
    const std::vector<sb::Case> cases = sb::cases();
    for (const sb::Case& c : cases) {
      std::vector<sb::Tensor> t = sb::run_case_any(c);
      for (auto& x : t) {
        bytes += x.bytes.size();
        all.push_back(std::move(x));
      }
    }
    sb::write_dump(out, all);
    std::printf("scan_bits_emulated: %zu cases, %zu tensors, %zu bytes in %.1f s -> %s\n",
                cases.size(), all.size(), bytes,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scan_bits_emulated: %s\n", e.what());
    return 1;
  }
  return 0;
}
