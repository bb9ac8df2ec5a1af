// cmd_dump.cpp — `mambacheck dump`: for one problem (a built-in config or a
// user shape) and seed, write every tensor of the tensor catalogue
// (check/catalogue.hpp) as .npy files: the inputs, weights and upstream
// gradients (f32-exact, as float32), and the f64 oracle's outputs, final
// states and gradients (float64), plus manifest.json describing each tensor
// (name, file, shape, layout, role), so users can compare against PyTorch or
// JAX. With --dtype bf16|f16 the GEMM weights and X are quantised first and
// the same-precision baseline's results are added as baseline.<name>.
//
// Safe output: a non-empty --out folder is refused unless --force (which then
// clears it, and only if it holds nothing but dump files); everything is
// written into a temporary folder beside it that is renamed over --out on
// success, so a failed dump leaves nothing that looks complete. The bytes do
// not depend on OMP_NUM_THREADS.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "check/catalogue.hpp"
#include "check/model_check.hpp"
#include "check/problem.hpp"
#include "check/report_json.hpp"
#include "check/resources.hpp"
#include "cli/commands.hpp"
#include "cli/npy.hpp"
#include "cli/options.hpp"

namespace mc::cli {

namespace {

namespace fs = std::filesystem;
using report::Json;

struct DumpOptions {
  ShapeOptions shape;
  std::string seed, out, dtype = "f32", threads;
  bool force = false;
};

bool is_dump_file(const fs::directory_entry& e) {
  std::error_code ec;
  if (!e.is_regular_file(ec)) return false;
  const std::string ext = e.path().extension().string();
  return ext == ".npy" || ext == ".json";
}

// Checks --out before any work. Returns true when it exists (a folder that
// may be replaced).
bool check_out_dir(const fs::path& out, bool force) {
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw UsageError("cannot use --out '" + out.string() + "': " + ec.message());
  const bool exists = fs::exists(st);
  if (exists) {
    if (!fs::is_directory(st))
      throw UsageError("--out '" + out.string() + "' exists and is not a folder" +
                       (fs::is_regular_file(st) ? " (a file)" : " (a device, pipe or socket)"));
    size_t n = 0;
    std::string example, foreign;
    for (const auto& e : fs::directory_iterator(out, ec)) {
      ++n;
      if (example.empty()) example = e.path().filename().string();
      if (foreign.empty() && !is_dump_file(e)) foreign = e.path().filename().string();
    }
    if (ec) throw UsageError("cannot read --out folder '" + out.string() + "': " + ec.message());
    if (n > 0 && !force)
      throw UsageError("--out '" + out.string() + "' is not empty (" + std::to_string(n) +
                       " entries, e.g. '" + example +
                       "'); pass --force to replace its contents, or choose a new folder");
    if (n > 0 && !foreign.empty())
      throw UsageError("--force will not clear '" + out.string() + "': it holds '" + foreign +
                       "', which is not a dump file (*.npy, *.json)");
  }
  const fs::file_status ps = fs::status(parent, ec);
  if (ec) throw UsageError("cannot write --out '" + out.string() + "': folder '" +
                           parent.string() + "': " + ec.message());
  if (!fs::is_directory(ps))
    throw UsageError("cannot write --out '" + out.string() + "': '" + parent.string() +
                     "' is not a folder");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw UsageError("cannot write --out '" + out.string() + "': folder '" + parent.string() +
                     "': " + std::strerror(errno));
  return exists;
}

struct Writer {
  fs::path dir;
  Json tensors = Json::array();
  template <class T>
  void tensor(const check::TensorSpec& t, const std::string& name, const std::vector<T>& v) {
    if (int64_t(v.size()) < t.offset + t.count)
      throw std::logic_error("dump: " + name + " has " + std::to_string(v.size()) +
                             " elements, the catalogue needs " + std::to_string(t.offset + t.count));
    const std::string file = name + ".npy";
    io::write_npy((dir / file).string(), v.data() + t.offset, t.shape);
    tensors.push_back({{"name", name},
                       {"file", file},
                       {"dtype", sizeof(T) == 8 ? "float64" : "float32"},
                       {"shape", t.shape},
                       {"layout", t.layout},
                       {"role", check::to_string(t.role)}});
  }
};

template <class S>
void write_results(Writer& w, const std::string& prefix, const check::ModelOutputs<S>& o,
                   const Case& c) {
  for (const check::TensorSpec& t : check::result_catalogue(c.cfg, c.B, c.T))
    w.tensor(t, prefix + t.name, check::field(o, t.field));
}

int run(DumpOptions& o) {
  setup_threads(o.threads);
  if (o.seed.empty()) throw UsageError("missing required option --seed (the data seed)");
  const uint64_t seed = parse_seed("seed", o.seed);
  if (o.shape.configs.empty() && o.shape.config_files.empty() && !o.shape.any_override())
    throw UsageError("no problem given: pass --config NAME, --config-file FILE or shape options "
                     "(--d-model ... --seq-len; see --help)");
  std::vector<Case> cases = resolve_cases(o.shape, /*default_all=*/false);
  if (cases.size() != 1)
    throw UsageError("dump writes one problem; " + std::to_string(cases.size()) +
                     " shapes were given");
  const Case& c = cases[0];
  const std::string dtype_text = o.dtype.empty() ? o.shape.file_dtype : o.dtype;
  const DType dtype = parse_dtype(dtype_text.empty() ? "f32" : dtype_text);
  if (o.out.empty()) throw UsageError("missing required option --out (the output folder)");
  fs::path out = fs::path(o.out).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "dir/" -> "dir"
  if (out.empty() || out == "." || out == ".." || out == "/")
    throw UsageError("--out '" + o.out + "' must name a folder of its own");
  const bool replace = check_out_dir(out, o.force);
  check::require_host_memory("dump of " + c.name,
                             check::oracle_bytes_estimate(c.cfg, c.B, c.T, check::OracleWork::Dump));

  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  const fs::path tmp = parent / ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    throw CannotRun("cannot create the temporary folder '" + tmp.string() + "': " +
                    (ec ? ec.message() : "it exists"));
  try {
    const check::ModelInputs in = check::make_model_inputs(c.cfg, c.B, c.T, seed, dtype);
    Writer w{tmp};
    for (const check::TensorSpec& t : check::input_catalogue(c.cfg, c.B, c.T))
      w.tensor(t, t.name, check::field(in, t.field));
    write_results(w, "", check::oracle_run<double>(in, DType::F32), c);
    if (dtype != DType::F32) write_results(w, "baseline.", check::oracle_run<float>(in, dtype), c);

    const Dims d = Dims::from(c.cfg);
    Json identity = Json::array();
    for (int64_t l = 0; l < d.L; ++l)
      identity.push_back(check::softplus_identity_channels(d, seed, l));
    Json m = Json::object();
    m["tool"] = "mambacheck dump";
    m["schema"] = "mambacheck-dump/2";
    m["config_name"] = c.name;
    m["config"] = {{"d_model", c.cfg.d_model}, {"d_state", c.cfg.d_state},
                   {"d_conv", c.cfg.d_conv},   {"expand", c.cfg.expand},
                   {"n_layers", c.cfg.n_layers}, {"input_dim", c.cfg.input_dim},
                   {"eps", c.cfg.eps},         {"batch", c.B},
                   {"seq_len", c.T},           {"d_inner", d.di},
                   {"dt_rank", d.dr}};
    m["seed"] = seed;
    m["dtype"] = to_string(dtype);
    m["oracle"] = std::string("f64 CPU oracle") +
                  (dtype != DType::F32 ? "; baseline.* = float math with bf16/f16 storage rounding" : "");
    m["conventions"] =
        "row-major, batch-major rows (b*T + t); linear weights [in, out] (y = x @ W + b); in_proj "
        "output columns [x | z]; x_proj output columns [dt | B | C]; loss L = sum(out * grad.out) "
        "+ sum_l sum(conv_final * grad.layers.l.conv_final) + sum_l sum(ssm_final * "
        "grad.layers.l.ssm_final)";
    m["naming"] = "one name per tensor (check/catalogue.hpp); grad.<name> is dL/d<name>; "
                  "baseline.<name> the same-precision baseline's value";
    m["problem"] = {{"softplus_identity_channels", identity},
                    {"softplus_identity_bias", "dt_proj_b = " +
                                                   std::to_string(int(check::kIdentityBias)) +
                                                   " + U(0, 1) on these channels (Δraw > 20)"},
                    {"final_state_grads", true}};
    m["tensors"] = w.tensors;
    report::write_json_file((tmp / "manifest.json").string(), m);

    if (replace) {
      for (const auto& e : fs::directory_iterator(out))
        if (is_dump_file(e)) fs::remove(e.path());
      fs::remove(out);  // empty now; fails (and is reported) if anything else appeared
    }
    fs::rename(tmp, out);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw CannotRun(std::string("dump failed: ") + e.code().message() + " (" + e.path1().string() +
                    "); nothing was written to '" + out.string() + "'");
  } catch (const std::runtime_error& e) {
    fs::remove_all(tmp, ec);
    throw CannotRun(std::string("dump failed: ") + e.what() + "; nothing was written to '" +
                    out.string() + "'");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  std::printf("dump: wrote %s (config %s: %s, seed %" PRIu64 ", dtype %s)\n", out.c_str(),
              c.name.c_str(), check::describe(c.cfg, c.B, c.T).c_str(), seed, to_string(dtype));
  return kExitPass;
}

}  // namespace

Command add_dump(CLI::App& root) {
  auto o = std::make_shared<DumpOptions>();
  CLI::App* app = root.add_subcommand("dump", "write every tensor of one problem as .npy + manifest.json");
  add_shape_options(*app, o->shape);
  app->add_option("--seed", o->seed, "data seed (required)")->type_name("S");
  app->add_option("--out", o->out, "output folder (required; created, or replaced with --force)")
      ->type_name("DIR");
  app->add_option("--dtype", o->dtype, "f32 (default) | bf16 | f16")->type_name("D");
  app->add_option("--threads", o->threads, "OpenMP threads (default OMP_NUM_THREADS; capped)")
      ->type_name("N");
  app->add_flag("--force", o->force,
                "replace the contents of a non-empty --out folder (dump files only)");
  app->footer(std::string(
      "Writes, for one problem (a built-in config or your shape) and seed, every tensor of one\n"
      "backbone forward + backward of the f64 CPU oracle as .npy files in DIR, named by the one\n"
      "tensor catalogue (grad.<name> is dL/d<name>):\n"
      "  input, layers.<l>.conv0, layers.<l>.ssm0                    inputs (f32-exact, float32)\n"
      "  <weight name> (input_proj_w, layers.<l>.in_proj_w, ...)      every weight (float32)\n"
      "  grad.out, grad.layers.<l>.conv_final, grad.layers.<l>.ssm_final  upstream gradients\n"
      "  out, layers.<l>.conv_final, layers.<l>.ssm_final             results (float64)\n"
      "  grad.<weight>, grad.input, grad.layers.<l>.conv0, grad.layers.<l>.ssm0   gradients\n"
      "and manifest.json: config, seed, dtype, and each tensor's file, shape, dtype, layout and\n"
      "role. Linear weights are stored [in, out] (y = x @ W): the TRANSPOSE of PyTorch's\n"
      "nn.Linear.weight. With --dtype bf16|f16, GEMM weights and X are rounded to that dtype\n"
      "first and the same-precision baseline's results are added as baseline.<name>.\n"
      "A non-empty DIR is refused unless --force; the dump is written to a temporary folder and\n"
      "renamed to DIR when complete. `validate --config-file DIR/manifest.json` checks the\n"
      "same shape." "\n\n") +
              kShapeHelp + "\nExit status: 0 written, 2 usage/configuration error "
              "(bad value, --out not usable), 3 could not be written (memory, I/O error).\n");
  return {app, [o] { return run(*o); }};
}

}  // namespace mc::cli
