// cmd_dump.cpp — `mambacheck dump`: for one built-in config and seed, write
// every input, weight, initial state, output, final state and gradient of the
// f64 oracle as .npy files (plus the fixed upstream gradient), and
// manifest.json describing each tensor (shape, layout, weight orientation), so
// users can compare against PyTorch or JAX. With --dtype bf16|f16 the GEMM
// weights and X are quantised to that dtype first, and the same-precision
// baseline's results (float math, bf16/f16 storage) are written beside the
// oracle's as baseline.*.npy. The bytes do not depend on OMP_NUM_THREADS.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "core/builtin_configs.hpp"
#include "cli/commands.hpp"
#include "check/model_check.hpp"
#include "cli/npy.hpp"
#include "core/param_layout.hpp"
#include "check/report_json.hpp"

namespace mc::cli {

const char* const kDumpHelp =
    "usage: mambacheck dump --config NAME --seed S --out DIR [--dtype f32|bf16|f16]\n"
    "\n"
    "Writes, for one built-in config (see `mambacheck configs`), every tensor of one\n"
    "backbone forward + backward of the f64 CPU oracle as .npy files in DIR:\n"
    "  input.X, input.state0.conv, input.state0.ssm, input.d_out   (inputs, f32-exact)\n"
    "  param.<name>                 every weight, in the canonical arena order\n"
    "  out, state_final.conv, state_final.ssm                      (f64)\n"
    "  grad.<name>, grad.X, grad.state0.conv, grad.state0.ssm      (f64)\n"
    "and manifest.json: config, seed, dtype, and each tensor's file, shape, dtype, layout\n"
    "and role. Linear weights are stored [in, out] (y = x @ W): the TRANSPOSE of PyTorch's\n"
    "nn.Linear.weight. With --dtype bf16|f16, GEMM weights and X are rounded to that dtype\n"
    "first and the same-precision baseline's results are added as baseline.<name>.\n"
    "\n"
    "options:\n"
    "  --config NAME   built-in config (required)\n"
    "  --seed S        data seed (required)\n"
    "  --out DIR       output folder, created if missing (required)\n"
    "  --dtype D       f32 (default) | bf16 | f16\n";

namespace {

void make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create --out folder '" + dir + "': " + std::strerror(errno));
}

struct Manifest {
  std::ostringstream entries;
  bool first = true;
};

template <class T>
void dump_tensor(const std::string& dir, Manifest& m, const std::string& name, const T* data,
                 const std::vector<int64_t>& shape, const std::string& layout,
                 const std::string& role) {
  const std::string file = name + ".npy";
  io::write_npy(dir + "/" + file, data, shape);
  m.entries << (m.first ? "" : ",\n    ") << "{\"name\": \"" << report::json_escape(name)
            << "\", \"file\": \"" << file << "\", \"dtype\": \""
            << (sizeof(T) == 8 ? "float64" : "float32") << "\", \"shape\": " << io::json_shape(shape)
            << ", \"layout\": \"" << report::json_escape(layout) << "\", \"role\": \"" << role << "\"}";
  m.first = false;
}

std::string param_layout_text(const ParamEntry& e) {
  const std::string n = e.name;
  auto ends = [&](const char* suf) {
    const size_t L = std::strlen(suf);
    return n.size() >= L && n.compare(n.size() - L, L, suf) == 0;
  };
  if (e.gemm_weight)
    return "[in, out] row-major, y = x @ W (transpose of PyTorch nn.Linear.weight)";
  if (ends("conv1d_weight"))
    return "[d_inner, d_conv] row-major; tap d_conv-1 multiplies the current input (no flip; "
           "PyTorch conv1d.weight[:, 0, :])";
  if (ends("a_log")) return "[d_inner, d_state] row-major; A = -exp(a_log)";
  return "[" + std::to_string(e.shape[0]) + "] vector";
}

// The results of one run (oracle O, or baseline P) under a name prefix.
template <class S>
void dump_results(const std::string& dir, Manifest& m, const std::string& prefix,
                  const check::ModelOutputs<S>& o, const ParamLayout& lay, int64_t B, int64_t T) {
  const Dims& d = lay.dims;
  const std::string R = "[B*T, ";
  dump_tensor(dir, m, prefix + "out", o.out.data(), {B * T, d.dm}, R + "d_model] rows b*T+t",
              "output");
  dump_tensor(dir, m, prefix + "state_final.conv", o.conv_final.data(), {d.L, B, d.di, d.dc},
              "[L, B, d_inner, d_conv] window incl. current slot", "final_state");
  dump_tensor(dir, m, prefix + "state_final.ssm", o.ssm_final.data(), {d.L, B, d.di, d.ds},
              "[L, B, d_inner, d_state]", "final_state");
  for (const ParamEntry& e : lay.entries)
    dump_tensor(dir, m, prefix + "grad." + e.name, o.grads.data() + e.offset, e.shape,
                param_layout_text(e), "gradient");
  dump_tensor(dir, m, prefix + "grad.X", o.dX.data(), {B * T, d.mid}, R + "input_dim]",
              "gradient");
  dump_tensor(dir, m, prefix + "grad.state0.conv", o.d_conv0.data(), {d.L, B, d.di, d.dc},
              "[L, B, d_inner, d_conv]", "gradient");
  dump_tensor(dir, m, prefix + "grad.state0.ssm", o.d_ssm0.data(), {d.L, B, d.di, d.ds},
              "[L, B, d_inner, d_state]", "gradient");
}

}  // namespace

int cmd_dump(int argc, char** argv) {
  Args args(argc, argv, 2, {"config", "seed", "out", "dtype"}, {});
  const ref::NamedConfig& nc = ref::builtin_config(args.require("config"));
  const uint64_t seed = args.get_u64("seed", 0);
  args.require("seed");
  const std::string dir = args.require("out");
  const DType dtype = parse_dtype(args.get("dtype", "f32"));
  make_dir(dir);

  const check::ModelInputs in = check::make_model_inputs(nc.cfg, nc.B, nc.T, seed, dtype);
  const Dims d = Dims::from(nc.cfg);
  const ParamLayout lay(d);
  const int64_t B = nc.B, T = nc.T;

  Manifest m;
  dump_tensor(dir, m, "input.X", in.X.data(), {B * T, d.mid}, "[B*T, input_dim] rows b*T+t",
              "input");
  dump_tensor(dir, m, "input.state0.conv", in.conv0.data(), {d.L, B, d.di, d.dc},
              "[L, B, d_inner, d_conv] window incl. current slot", "initial_state");
  dump_tensor(dir, m, "input.state0.ssm", in.ssm0.data(), {d.L, B, d.di, d.ds},
              "[L, B, d_inner, d_state]", "initial_state");
  dump_tensor(dir, m, "input.d_out", in.d_out.data(), {B * T, d.dm},
              "[B*T, d_model] upstream gradient dL/d(out)", "upstream_gradient");
  for (const ParamEntry& e : lay.entries)
    dump_tensor(dir, m, "param." + e.name, in.params.data() + e.offset, e.shape,
                param_layout_text(e), "weight");

  dump_results(dir, m, "", check::oracle_run<double>(in, DType::F32), lay, B, T);
  if (dtype != DType::F32)
    dump_results(dir, m, "baseline.", check::oracle_run<float>(in, dtype), lay, B, T);

  std::ofstream f(dir + "/manifest.json");
  if (!f) throw std::runtime_error("cannot write '" + dir + "/manifest.json'");
  const ModelConfig& c = nc.cfg;
  f << "{\n  \"tool\": \"mambacheck dump\",\n  \"config_name\": \"" << nc.name
    << "\",\n  \"config\": {\"d_model\": " << c.d_model << ", \"d_state\": " << c.d_state
    << ", \"d_conv\": " << c.d_conv << ", \"expand\": " << c.expand << ", \"n_layers\": "
    << c.n_layers << ", \"input_dim\": " << c.input_dim << ", \"eps\": " << c.eps
    << ", \"d_inner\": " << d.di << ", \"dt_rank\": " << d.dr << ", \"batch\": " << B
    << ", \"seq_len\": " << T << "},\n  \"seed\": " << seed << ",\n  \"dtype\": \""
    << to_string(dtype) << "\",\n  \"oracle\": \"f64 CPU oracle"
    << (dtype != DType::F32 ? "; baseline.* = float math with bf16/f16 storage rounding" : "")
    << "\",\n  \"conventions\": \"row-major, batch-major rows (b*T + t); linear weights [in, out]"
       " (y = x @ W + b); in_proj output columns [x | z]; x_proj output columns [dt | B | C];"
       " loss L = sum(out * d_out)\",\n  \"tensors\": [\n    "
    << m.entries.str() << "\n  ]\n}\n";
  std::printf("dump: wrote %s (config %s, seed %llu, dtype %s)\n", dir.c_str(), nc.name.c_str(),
              (unsigned long long)seed, to_string(dtype));
  return 0;
}

}  // namespace mc::cli
