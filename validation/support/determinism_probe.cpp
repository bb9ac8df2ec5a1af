// determinism_probe.cpp — the child process of the cross-process determinism
// check (test_determinism.cpp, CrossProcess.*): runs the routes of
// determinism_cases.hpp once each (a fresh Model per route, forward +
// backward) on one device and writes the hash manifest of every output,
// final state and gradient, plus (optionally) the raw values so that the
// parent can name the first differing index and its ULP distance.
// Not a gtest program: nothing it prints can look like a gtest verdict.
// test_determinism_tools.cpp (ChildProcess.*, label cpu) also runs it, on a bad
// command line only (exit 2 before any device call), to check the child runner.
//
// usage: determinism_probe --manifest FILE [--data FILE] [--device N] [--route NAME]...
//   --route  restrict to these routes (names as "bf16/parallel/ds16/tensor-core"; default all)
// exit status: 0 written, 1 error (message on stderr), 2 usage, 3 no usable GPU.
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "check/determinism.hpp"
#include "validation/support/determinism_cases.hpp"
#include "gpu/model.hpp"

namespace {

int usage(const std::string& why) {
  std::cerr << "determinism_probe: " << why
            << "\nusage: determinism_probe --manifest FILE [--data FILE] [--device N] "
               "[--route NAME]...\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  namespace det = mc::testing::det;
  std::string manifest, data;
  int device = 0;
  std::vector<std::string> wanted;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage("missing value after " + a);
    const std::string v = argv[++i];
    if (a == "--manifest") {
      manifest = v;
    } else if (a == "--data") {
      data = v;
    } else if (a == "--device") {
      char* end = nullptr;
      const long d = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || d < 0 || d > 1024)
        return usage("--device '" + v + "' is not a device ordinal");
      device = int(d);
    } else if (a == "--route") {
      wanted.push_back(v);
    } else {
      return usage("unknown argument " + a);
    }
  }
  if (manifest.empty()) return usage("--manifest is required");

  std::vector<det::Route> routes;
  for (const det::Route& r : det::routes())
    for (const auto& w : wanted)
      if (w == det::route_name(r)) routes.push_back(r);
  if (wanted.empty()) routes = det::routes();
  if (routes.size() != (wanted.empty() ? det::routes().size() : wanted.size()))
    return usage("unknown --route (known: f32|bf16|f16 / sequential|parallel|checkpointed / "
                 "ds16|ds128 / strict|tensor-core, e.g. bf16/checkpointed/ds16/tensor-core)");

  std::string reason;
  if (!mc::gpu::gpu_available(&reason)) {
    std::cerr << "determinism_probe: " << reason << "\n";
    return 3;
  }
  try {
    mc::gpu::select_device(device);
    mc::check::TensorList all;
    for (const det::Route& r : routes) {
      auto t = det::run_route_once(r, device);
      for (auto& x : t) all.push_back(std::move(x));
      std::cout << "determinism_probe: ran " << det::route_name(r) << "\n";
    }
    const std::string header = "determinism_probe manifest (mambacheck)\n" +
                               mc::gpu::device_info(device).to_string() + "\n" +
                               det::shape_text(16) + " / " + det::shape_text(128) +
                               ", seed " + std::to_string(det::kSeed) +
                               "\nname count fnv1a64";
    mc::check::write_manifest(manifest, mc::check::make_manifest(all), header);
    if (!data.empty()) mc::check::write_tensor_data(data, all);
    std::cout << "determinism_probe: wrote " << all.size() << " tensors to " << manifest << "\n";
  } catch (const std::exception& e) {
    std::cerr << "determinism_probe: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
