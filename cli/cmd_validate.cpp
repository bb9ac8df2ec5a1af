// cmd_validate.cpp — `mambacheck validate`: the oracle's self-checks on the
// built-in config set (directional f64 gradient checks of the backbone and of
// every step, OMP thread-count invariance) and, when a GPU is present, the
// GPU-vs-oracle comparison of every output, state and gradient tensor under
// the k-x rule, per dtype. Prints progress, a summary table, and optionally
// writes the results as JSON for the report generator (reports/README.md).
#include <omp.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "core/builtin_configs.hpp"
#include "cli/commands.hpp"
#include "check/gradcheck.hpp"
#include "reference_cpu/model.hpp"
#include "check/model_check.hpp"
#include "gpu/model.hpp"
#include "check/problem.hpp"
#include "check/report_json.hpp"

namespace mc::cli {

const char* const kValidateHelp =
    "usage: mambacheck validate [options]\n"
    "\n"
    "Runs, for every built-in config (or those named with --config):\n"
    "  CPU  directional finite-difference gradient checks of the f64 oracle (the whole\n"
    "       backbone and every step function) and OMP_NUM_THREADS 1-vs-2 bitwise invariance;\n"
    "  GPU  (when a CUDA device is present) the GPU pipeline against the f64 oracle for\n"
    "       every output, final state and gradient tensor: max|K-O| <= k*max|P-O| + atol,\n"
    "       P = the same-precision CPU baseline (k = 4 for f32, 2 for bf16/f16).\n"
    "Exit status: 0 all checks passed, 1 a check failed, 2 usage/config error.\n"
    "\n"
    "options:\n"
    "  --config NAME     run only this built-in config (repeatable; see `mambacheck configs`)\n"
    "  --dtype D         f32 | bf16 | f16 | all   (GPU checks; default f32)\n"
    "  --scan M          auto | sequential | parallel | both   (default auto)\n"
    "  --seed S          data seed (default 1)\n"
    "  --cpu-only        skip the GPU checks even when a GPU is present\n"
    "  --gpu-only        skip the CPU oracle self-checks\n"
    "  --tf32            run f32 GEMMs in TF32 (recorded in the output)\n"
    "  --typed-gemm T    bf16/f16 GEMM tier: tensor-core (default: CUBLAS_COMPUTE_32F, tensor\n"
    "                    cores with f32 accumulation) | strict (CUBLAS_COMPUTE_32F_PEDANTIC)\n"
    "  --check-finite    scan every GPU step's outputs for NaN/Inf; the first one found is\n"
    "                    reported with its step, tensor and index (f16 overflow as overflow)\n"
    "  --json FILE       write all results as JSON (reports/README.md schema)\n"
    "  --verbose         print every tensor's comparison line\n";

namespace {

struct Row {
  std::string config, check, detail;
  bool pass;
};

struct Summary {
  std::vector<Row> rows;
  std::vector<std::string> precision_json;  // rows of "precision"
  std::vector<std::string> oracle_json;     // rows of "oracle_checks"
  void add(const std::string& config, const std::string& check, const std::string& detail,
           bool pass) {
    rows.push_back({config, check, detail, pass});
    std::printf("  %-4s %-22s %s\n", pass ? "ok" : "FAIL", check.c_str(), detail.c_str());
    std::fflush(stdout);
  }
};

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// ---- CPU: the oracle's self-checks -----------------------------------------

void record_gradcheck(Summary& s, const std::string& config, const std::string& what,
                      const check::GradcheckResult& r) {
  std::string detail = "rel err " + fmt("%.2e", r.all.rel_error()) + " <= tol " +
                       fmt("%.2e", r.all.rel_tol());
  if (!r.pass && !r.guilty.empty()) {
    detail += "; guilty:";
    for (const auto& g : r.guilty) detail += " " + g;
  }
  s.add(config, "gradcheck " + what, detail, r.pass);
  s.oracle_json.push_back(report::json_object({{"config", report::json_string(config)},
                                                {"check", report::json_string("gradcheck " + what)},
                                                {"rel_error", report::json_number(r.all.rel_error())},
                                                {"rel_tol", report::json_number(r.all.rel_tol())},
                                                {"pass", report::json_bool(r.pass)}}));
}

// Backbone forward+backward bytes under `threads` OpenMP threads.
std::vector<double> oracle_bytes(const check::Problem& p, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  ref::RecurrentState<double> state = p.state<double>();
  const int64_t R = p.B * p.T;
  std::vector<double> out(size_t(R * p.dims.dm));
  ref::BackboneActivations<double> act;
  ref::backbone_forward<double>(p.layout, p.params.data(), p.B, p.T, p.X.data(), state,
                                out.data(), &act);
  std::vector<double> grads(size_t(p.layout.total), 0.0), dX(size_t(R * p.dims.mid));
  std::vector<double> dc0(p.conv0.size()), ds0(p.ssm0.size());
  ref::BackboneGradOutputs<double> g{grads.data(), dX.data(), dc0.data(), ds0.data()};
  ref::backbone_backward<double>(p.layout, p.params.data(), act, p.d_out.data(), g);
  omp_set_num_threads(saved);
  std::vector<double> all;
  for (const auto* v : {&out, &state.conv, &state.ssm, &grads, &dX, &dc0, &ds0})
    all.insert(all.end(), v->begin(), v->end());
  return all;
}

void run_cpu_checks(Summary& s, const ref::NamedConfig& nc, uint64_t seed) {
  const check::Problem p = check::make_problem(nc.cfg, nc.B, nc.T, seed);
  check::GradcheckOptions opt;
  opt.seed = seed;
  record_gradcheck(s, nc.name, "backbone", check::gradcheck(check::backbone_function(p), opt));
  for (const std::string& step : check::step_names())
    record_gradcheck(s, nc.name, step, check::gradcheck(check::step_function(step, p), opt));
  const std::vector<double> a = oracle_bytes(p, 1), b = oracle_bytes(p, 2);
  const bool same = a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 8) == 0;
  s.add(nc.name, "threads 1 vs 2", same ? "bitwise identical" : "BYTES DIFFER", same);
}

// ---- GPU: the pipeline against the oracle ----------------------------------

void run_gpu_checks(Summary& s, const ref::NamedConfig& nc, uint64_t seed, DType dtype,
                    ScanMode scan, gpu::GemmMath gemm, gpu::TypedGemm typed, bool check_finite,
                    bool verbose) {
  if (!check::shape_ok_for_k_rule(nc.cfg, nc.B, nc.T)) {
    s.add(nc.name, std::string("gpu ") + to_string(dtype),
          "skipped: a tensor has < 16 elements, too few for the k-rule", true);
    return;
  }
  const gpu::GemmTier tier = gpu::gemm_tier(dtype, gemm, typed);
  const std::string check = std::string("gpu ") + to_string(dtype) + " " + to_string(scan) +
                            " gemm:" + to_string(tier);
  check::Comparison c;
  try {
    c = check::check_gpu_against_oracle(nc.cfg, nc.B, nc.T, seed, dtype, scan, gemm, check_finite,
                                        typed);
  } catch (const gpu::NonFiniteError& e) {
    s.add(nc.name, check,
          std::string(e.overflow ? "f16 OVERFLOW" : "NON-FINITE") + " at step " + e.step +
              ", tensor " + e.tensor + ", index " + std::to_string(e.index),
          false);
    return;
  }
  if (verbose) std::fputs(c.report().c_str(), stdout);
  int passed = 0;
  const check::KRuleResult* worst = nullptr;
  for (const auto& r : c.tensors) {
    passed += r.pass;
    if (!worst || r.headroom > worst->headroom) worst = &r;
    s.precision_json.push_back(report::precision_row_json(
        to_string(dtype), check::describe(nc.cfg, nc.B, nc.T), r,
        {{"config", report::json_string(nc.name)},
         {"scan", report::json_string(to_string(scan))},
         {"gemm_tier", report::json_string(to_string(tier))}}));
  }
  std::string detail = std::to_string(passed) + "/" + std::to_string(c.tensors.size()) +
                       " tensors, max k " + fmt("%.3g", c.max_k());
  if (worst) detail += ", worst headroom " + fmt("%.2f", worst->headroom) + " (" + worst->tensor + ")";
  s.add(nc.name, check, detail, c.pass());
  if (!c.pass()) std::fputs(c.report(true).c_str(), stdout);
}

std::vector<DType> parse_dtypes(const std::string& s) {
  if (s == "all") return {DType::F32, DType::BF16, DType::F16};
  return {parse_dtype(s)};
}

std::vector<ScanMode> parse_scans(const std::string& s) {
  if (s == "both") return {ScanMode::Sequential, ScanMode::Parallel};
  return {parse_scan_mode(s)};
}

}  // namespace

int cmd_validate(int argc, char** argv) {
  Args args(argc, argv, 2, {"config", "dtype", "scan", "seed", "json", "typed-gemm"},
            {"cpu-only", "gpu-only", "tf32", "check-finite", "verbose"});
  const std::vector<DType> dtypes = parse_dtypes(args.get("dtype", "f32"));
  const std::vector<ScanMode> scans = parse_scans(args.get("scan", "auto"));
  const uint64_t seed = args.get_u64("seed", 1);
  const gpu::GemmMath gemm = args.flag("tf32") ? gpu::GemmMath::TF32 : gpu::GemmMath::F32;
  const gpu::TypedGemm typed = gpu::parse_typed_gemm(args.get("typed-gemm", "tensor-core"));
  std::vector<ref::NamedConfig> configs;
  if (args.has("config")) {
    for (const std::string& n : args.all("config")) configs.push_back(ref::builtin_config(n));
  } else {
    configs = ref::builtin_configs();
  }

  std::string reason, device = "none";
  const bool gpu = !args.flag("cpu-only") && gpu::gpu_available(&reason);
  if (gpu) device = gpu::device_info(0).to_string();
  std::printf("mambacheck validate: %zu configs, seed %llu\n", configs.size(),
              (unsigned long long)seed);
  if (gpu)
    std::printf("GPU checks on %s (GEMM tiers: f32 %s, bf16/f16 %s)\n", device.c_str(),
                gpu::to_string(gpu::gemm_tier(DType::F32, gemm, typed)),
                gpu::to_string(gpu::gemm_tier(DType::BF16, gemm, typed)));
  else
    std::printf("CPU checks only: %s\n",
                args.flag("cpu-only") ? "--cpu-only given" : reason.c_str());

  Summary s;
  for (size_t i = 0; i < configs.size(); ++i) {
    const ref::NamedConfig& nc = configs[i];
    std::printf("[%zu/%zu] %s (%s, B=%lld, T=%lld)\n", i + 1, configs.size(), nc.name.c_str(),
                check::describe(nc.cfg, nc.B, nc.T).c_str(), (long long)nc.B, (long long)nc.T);
    std::fflush(stdout);
    if (!args.flag("gpu-only")) run_cpu_checks(s, nc, seed);
    if (gpu)
      for (DType t : dtypes)
        for (ScanMode m : scans)
          run_gpu_checks(s, nc, seed, t, m, gemm, typed, args.flag("check-finite"),
                         args.flag("verbose"));
  }

  int failed = 0;
  std::printf("\nSummary\n%-20s %-26s %-6s %s\n", "config", "check", "result", "detail");
  for (const Row& r : s.rows) {
    failed += !r.pass;
    std::printf("%-20s %-26s %-6s %s\n", r.config.c_str(), r.check.c_str(),
                r.pass ? "pass" : "FAIL", r.detail.c_str());
  }
  std::printf("\n%zu checks, %d failed; %s\n", s.rows.size(), failed,
              gpu ? ("GPU: " + device).c_str() : "ran the CPU checks only (no GPU checks)");
  if (args.has("json")) {
    // Context keys shared with the benchmark JSON (reports/README.md): what a
    // bitwise or precision claim depends on.
    const std::string context = report::context_json(
        "mambacheck validate", gpu,
        {{"seed", report::json_int((long long)seed)},
         {"f32_gemm", report::json_string(gpu::to_string(gemm))},
         {"gemm_tier_f32", report::json_string(gpu::describe(gpu::gemm_tier(DType::F32, gemm, typed)))},
         {"gemm_tier_bf16_f16",
          report::json_string(gpu::describe(gpu::gemm_tier(DType::BF16, gemm, typed)))}});
    report::write_validation_json(args.get("json", ""), context,
                                  {{"oracle_checks", s.oracle_json}, {"precision", s.precision_json}});
  }
  return failed ? 1 : 0;
}

}  // namespace mc::cli
