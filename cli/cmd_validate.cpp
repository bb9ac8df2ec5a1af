// cmd_validate.cpp — `mambacheck validate`: the oracle's self-checks
// (directional f64 gradient checks of the backbone and of every step, OpenMP
// thread-count invariance) and the GPU-vs-oracle comparison of every tensor
// of the catalogue (f32: the ensemble rule of check/ensemble.hpp, the same as
// the model-level GPU suites; bf16/f16: the k = 2 rule of the precision
// suite, e_P over P and conforming runs, check/model_check.hpp), on the
// built-in configs or on user shapes. Every check ends as pass, FAIL, not run
// (with the reason) or n/a; the exit status says which (options.hpp), and a
// run that checked nothing never exits 0.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check/catalogue.hpp"
#include "check/compare.hpp"
#include "check/determinism.hpp"
#include "check/ensemble.hpp"
#include "check/gradcheck.hpp"
#include "check/model_check.hpp"
#include "check/problem.hpp"
#include "check/report_json.hpp"
#include "check/resources.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "gpu/model.hpp"

namespace mc::cli {

namespace {

using report::Json;

struct ValidateOptions {
  ShapeOptions shape;
  std::string dtype, scan, seed = "1", json, threads, typed_gemm;
  bool cpu_only = false, gpu_only = false, require_gpu = false, tf32 = false,
       check_finite = false, verbose = false;
};

enum class Status { Pass, Fail, NotRun, NotApplicable };
const char* status_name(Status s) {
  switch (s) {
    case Status::Pass: return "pass";
    case Status::Fail: return "FAIL";
    case Status::NotRun: return "not run";
    case Status::NotApplicable: return "n/a";
  }
  return "?";
}
const char* status_key(Status s) {
  switch (s) {
    case Status::Pass: return "pass";
    case Status::Fail: return "fail";
    case Status::NotRun: return "not_run";
    case Status::NotApplicable: return "not_applicable";
  }
  return "?";
}

struct Row {
  std::string config, check, detail;
  Status status;
};

struct Summary {
  std::vector<Row> rows;
  Json oracle = Json::array(), precision = Json::array(), determinism = Json::array(),
       checks = Json::array();
  void add(const Case& c, const std::string& check, const std::string& detail, Status st) {
    rows.push_back({c.name, check, detail, st});
    checks.push_back({{"config", c.name},
                      {"shape", check::describe(c.cfg, c.B, c.T)},
                      {"check", check},
                      {"status", status_key(st)},
                      {"detail", detail}});
    std::printf("  %-7s %-28s %s\n", st == Status::Pass ? "ok" : status_name(st), check.c_str(),
                detail.c_str());
    std::fflush(stdout);
  }
  int count(Status s) const {
    int n = 0;
    for (const Row& r : rows) n += r.status == s;
    return n;
  }
};

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// ---- CPU: the oracle's self-checks -----------------------------------------------

void record_gradcheck(Summary& s, const Case& c, const std::string& what,
                      const check::GradcheckResult& r) {
  std::string detail = "rel err " + fmt("%.2e", r.all.rel_error()) + " <= tol " +
                       fmt("%.2e", r.all.rel_tol());
  if (!r.pass) {
    detail = "rel err " + fmt("%.2e", r.all.rel_error()) + " > tol " + fmt("%.2e", r.all.rel_tol());
    if (!r.all.finite) detail += " (non-finite evaluation)";
    if (!r.guilty.empty()) {
      detail += "; guilty:";
      for (const auto& g : r.guilty) detail += " " + g;
    }
  }
  s.add(c, "gradcheck " + what, detail, r.pass ? Status::Pass : Status::Fail);
  s.oracle.push_back({{"config", c.name},
                      {"shape", check::describe(c.cfg, c.B, c.T)},
                      {"check", "gradcheck " + what},
                      {"rel_error", report::number(r.all.rel_error())},
                      {"rel_tol", report::number(r.all.rel_tol())},
                      {"pass", r.pass}});
}

// Every result tensor of the f64 oracle under `threads` OpenMP threads.
check::ModelOutputs<double> oracle_under(const check::ModelInputs& in, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  check::ModelOutputs<double> o = check::oracle_run<double>(in, DType::F32);
  omp_set_num_threads(saved);
  return o;
}

int64_t ulp_distance_f64(double a, double b) {
  int64_t ia, ib;
  std::memcpy(&ia, &a, 8);
  std::memcpy(&ib, &b, 8);
  if (ia < 0) ia = INT64_MIN - ia;
  if (ib < 0) ib = INT64_MIN - ib;
  const double d = double(ia) - double(ib);
  return d > 9.2e18 ? INT64_MAX : int64_t(d < 0 ? -d : d);
}

// OpenMP thread-count invariance of every catalogue tensor (bitwise).
void thread_invariance(Summary& s, const Case& c, const check::ModelInputs& in) {
  std::vector<int> counts = {1, 2};
  const int most = omp_get_max_threads();
  if (most > 2) counts.push_back(most);
  const auto specs = check::result_catalogue(in.cfg, in.B, in.T);
  const check::ModelOutputs<double> ref = oracle_under(in, counts[0]);
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const auto& t : specs)
    hash = check::fnv1a64(check::field(ref, t.field).data() + t.offset, size_t(t.count) * 8, hash);
  bool same = true;
  std::string tensor = "all " + std::to_string(specs.size()) + " result tensors";
  int64_t first = -1, ulp = 0;
  int bad_threads = 0;
  for (size_t k = 1; k < counts.size() && same; ++k) {
    const check::ModelOutputs<double> o = oracle_under(in, counts[k]);
    for (const auto& t : specs) {
      const double* a = check::field(ref, t.field).data() + t.offset;
      const double* b = check::field(o, t.field).data() + t.offset;
      for (int64_t i = 0; i < t.count; ++i)
        if (std::memcmp(a + i, b + i, 8) != 0) {
          same = false;
          tensor = t.name;
          first = i;
          ulp = ulp_distance_f64(a[i], b[i]);
          bad_threads = counts[k];
          break;
        }
      if (!same) break;
    }
  }
  std::string threads;
  for (int n : counts) threads += (threads.empty() ? "" : " vs ") + std::to_string(n);
  const std::string detail =
      same ? "bitwise identical (" + tensor + ")"
           : "BYTES DIFFER under " + std::to_string(bad_threads) + " threads: " + tensor +
                 " index " + std::to_string(first) + " (" + std::to_string(ulp) + " ulp)";
  s.add(c, "threads " + threads, detail, same ? Status::Pass : Status::Fail);
  s.determinism.push_back({{"id", "cpu_thread_invariance|" + c.name},
                           {"test", "cpu_thread_invariance"},
                           {"dtype", "f64"},
                           {"scan", "cpu oracle"},
                           {"runs", int(counts.size())},
                           {"hash", check::hash_hex(hash)},
                           {"identical", same},
                           {"first_diff_index", same ? -1 : first},
                           {"ulp", same ? 0 : ulp},
                           {"expected_identical", true},
                           {"required", true},
                           {"tensor", tensor},
                           {"config", c.name},
                           {"shape", check::describe(c.cfg, c.B, c.T)},
                           {"note", "CPU f64 oracle, OMP_NUM_THREADS " + threads}});
}

void run_cpu_checks(Summary& s, const Case& c, uint64_t seed) {
  try {
    check::require_host_memory("the CPU checks of " + c.name,
                               check::oracle_bytes_estimate(c.cfg, c.B, c.T,
                                                            check::OracleWork::GradientChecks));
  } catch (const check::ResourceError& e) {
    s.add(c, "cpu checks", std::string("not run: ") + e.what(), Status::NotRun);
    return;
  }
  const check::Problem p = check::make_problem(c.cfg, c.B, c.T, seed);
  check::GradcheckOptions opt;
  opt.seed = seed;
  record_gradcheck(s, c, "backbone", check::gradcheck(check::backbone_function(p), opt));
  for (const std::string& step : check::step_names())
    record_gradcheck(s, c, step, check::gradcheck(check::step_function(step, p), opt));
  thread_invariance(s, c, check::make_model_inputs(c.cfg, c.B, c.T, seed, DType::F32));
}

// ---- GPU: the pipeline against the oracle ------------------------------------------

struct GpuTensor {
  check::KRuleResult r;
  std::string source = "P";  // baseline member that set e_P
  double k_P = 0;
};

void run_gpu_check(Summary& s, const Case& c, uint64_t seed, DType dtype, ScanMode scan,
                   gpu::GemmMath gemm, gpu::TypedGemm typed, bool check_finite, bool verbose) {
  const gpu::GemmTier tier = gpu::gemm_tier(dtype, gemm, typed);
  const std::string name = std::string("gpu ") + to_string(dtype) + " " + to_string(scan) +
                           " gemm:" + gpu::to_string(tier);
  if (!check::shape_ok_for_k_rule(c.cfg, c.B, c.T)) {
    int64_t smallest = INT64_MAX;
    std::string which;
    for (const auto& t : check::result_catalogue(c.cfg, c.B, c.T))
      if (t.count < smallest) smallest = t.count, which = t.name;
    s.add(c, name,
          "the k-rule needs >= " + std::to_string(check::kMinRuleElements) +
              " elements per tensor; " + which + " has " + std::to_string(smallest),
          Status::NotApplicable);
    return;
  }
  const bool f32 = dtype == DType::F32;
  try {
    check::require_host_memory(
        "the oracle references of " + name + " on " + c.name,
        check::oracle_bytes_estimate(c.cfg, c.B, c.T,
                                     f32 ? check::OracleWork::Ensemble : check::OracleWork::Dump));
  } catch (const check::ResourceError& e) {
    s.add(c, name, std::string("not run: ") + e.what(), Status::NotRun);
    return;
  }
  const check::ModelInputs in = check::make_model_inputs(c.cfg, c.B, c.T, seed, dtype);
  // The GPU first: a model that does not fit is refused before any allocation
  // (gpu::Model sums its buffer plan against cudaMemGetInfo), before the
  // oracle work starts.
  check::ModelOutputs<float> K;
  try {
    K = check::gpu_run(in, scan, gemm, check_finite, ScanExp::Auto, typed);
  } catch (const gpu::NonFiniteError& e) {
    s.add(c, name,
          std::string(e.overflow ? "f16 OVERFLOW" : "NON-FINITE") + " at step " + e.step +
              ", tensor " + e.tensor + ", index " + std::to_string(e.index),
          Status::Fail);
    return;
  } catch (const std::exception& e) {
    if (dynamic_cast<const gpu::OutOfDeviceMemory*>(&e)) {
      s.add(c, name, std::string("not run: ") + e.what(), Status::NotRun);
      return;
    }
    s.add(c, name, std::string("the GPU run failed: ") + e.what(), Status::Fail);
    return;
  }
  const std::string label = check::describe(c.cfg, c.B, c.T) + " dtype=" + to_string(dtype) +
                            " scan=" + to_string(scan);
  std::vector<GpuTensor> ts;
  if (f32) {
    // The ensemble rule of the model-level suites (check/ensemble.hpp).
    const check::References refs = check::references(in, /*backward=*/true, seed);
    const check::ModelCheck mc = check::compare_ensemble(label, in, K, refs, /*backward=*/true);
    for (const auto& t : mc.tensors) ts.push_back({t.r, t.source, t.k_P});
    if (verbose) std::fputs(mc.report().c_str(), stdout);
    if (!mc.pass()) std::fputs(mc.report(true).c_str(), stdout);
  } else {
    // The k = 2 rule of the precision suite: e_P over P and the conforming runs.
    const auto O = check::oracle_run<double>(in, DType::F32);
    const auto P = check::oracle_run<float>(in, dtype);
    const auto N = check::conforming_runs(in, dtype, check::kTypedBaselineRuns, seed);
    const check::Comparison cmp = check::compare_model(label, in, K, O, P, nullptr, &N);
    for (const auto& r : cmp.tensors)
      ts.push_back({r, r.baseline_source, r.k_P < 0 ? r.k : r.k_P});
    if (verbose) std::fputs(cmp.report().c_str(), stdout);
    if (!cmp.pass()) std::fputs(cmp.report(true).c_str(), stdout);
  }
  int passed = 0;
  const GpuTensor* worst = nullptr;
  double max_k = 0;
  for (const GpuTensor& t : ts) {
    passed += t.r.verdict();
    if (std::isfinite(t.r.k) && t.r.k > max_k) max_k = t.r.k;
    if (!worst || !(t.r.headroom <= worst->r.headroom)) worst = &t;
    s.precision.push_back(report::precision_row(
        to_string(dtype), check::describe(c.cfg, c.B, c.T), t.r,
        {{"config", c.name},
         {"scan", to_string(scan)},
         {"gemm_tier", gpu::to_string(tier)},
         {"suite", "mambacheck validate"},
         {"baseline", f32 ? "ensemble: P + " + std::to_string(check::kMcaRuns) + " MCA runs" : "P"},
         {"baseline_from", t.source},
         {"k_P", report::number(t.k_P)}}));
  }
  const bool pass = !ts.empty() && passed == int(ts.size());
  std::string detail = std::to_string(passed) + "/" + std::to_string(ts.size()) +
                       " tensors, max k " + fmt("%.3g", max_k) + " (limit " +
                       fmt("%g", check::k_limit_for(dtype)) + ")";
  if (worst) detail += ", worst headroom " + fmt("%.2f", worst->r.headroom) + " (" + worst->r.tensor + ")";
  s.add(c, name, detail, pass ? Status::Pass : Status::Fail);
}

int run(ValidateOptions& o) {
  setup_threads(o.threads);
  const uint64_t seed = parse_seed("seed", o.seed);
  std::vector<Case> cases = resolve_cases(o.shape, /*default_all=*/true);
  const std::string dtype_text = !o.dtype.empty() ? o.dtype : o.shape.file_dtype;
  const std::string scan_text = !o.scan.empty() ? o.scan : o.shape.file_scan;
  const std::vector<DType> dtypes = parse_dtypes(dtype_text.empty() ? "f32" : dtype_text);
  const std::vector<ScanMode> scans = parse_scans(scan_text.empty() ? "auto" : scan_text);
  const gpu::GemmMath gemm = o.tf32 ? gpu::GemmMath::TF32 : gpu::GemmMath::F32;
  gpu::TypedGemm typed = gpu::TypedGemm::TensorCore;
  try {
    typed = gpu::parse_typed_gemm(o.typed_gemm.empty() ? "tensor-core" : o.typed_gemm);
  } catch (const std::exception& e) {
    throw UsageError(std::string("--typed-gemm: ") + e.what());
  }
  if (!o.json.empty()) {
    try {
      report::check_output_file(o.json);
    } catch (const std::runtime_error& e) {
      throw UsageError(std::string("--json: ") + e.what());
    }
  }
  // GPU checks are requested explicitly by --gpu-only, --require-gpu or any
  // GPU-only setting (--dtype, --scan, --tf32, --check-finite, or dtype/scan in
  // a config file); otherwise they run when a GPU is usable.
  const bool want_cpu = !o.gpu_only;
  const bool gpu_requested = !o.cpu_only && (o.gpu_only || o.require_gpu || !dtype_text.empty() ||
                                             !scan_text.empty() || o.tf32 || o.check_finite ||
                                             !o.typed_gemm.empty());
  std::string reason;
  const bool gpu_usable = !o.cpu_only && gpu::gpu_available(&reason);
  if (o.cpu_only && (o.require_gpu || !o.dtype.empty() || !o.scan.empty() || o.tf32 || o.check_finite))
    throw UsageError("--cpu-only excludes the GPU options --require-gpu, --dtype, --scan, --tf32 "
                     "and --check-finite");

  std::printf("mambacheck validate: %zu config%s, seed %" PRIu64 ", %d OpenMP threads\n",
              cases.size(), cases.size() == 1 ? "" : "s", seed, omp_get_max_threads());
  std::string gpu_line;
  if (gpu_usable) {
    gpu_line = "GPU checks on " + gpu::device_info(0).to_string() + " (GEMM tiers: f32 " +
               gpu::to_string(gpu::gemm_tier(DType::F32, gemm, typed)) + ", bf16/f16 " +
               gpu::to_string(gpu::gemm_tier(DType::BF16, gemm, typed)) + ")";
  } else if (o.cpu_only) {
    gpu_line = "GPU checks: not requested (--cpu-only)";
  } else {
    gpu_line = std::string("GPU checks: ") + (gpu_requested ? "REQUESTED BUT " : "") +
               "not run: no usable GPU on this machine (" + reason + ")";
  }
  std::printf("%s\n", gpu_line.c_str());
  const bool nothing_to_run = o.gpu_only && !gpu_usable;

  Summary s;
  for (size_t i = 0; i < cases.size() && !nothing_to_run; ++i) {
    const Case& c = cases[i];
    std::printf("[%zu/%zu] %s (%s)\n", i + 1, cases.size(), c.name.c_str(),
                check::describe(c.cfg, c.B, c.T).c_str());
    std::fflush(stdout);
    if (want_cpu) run_cpu_checks(s, c, seed);
    if (gpu_usable)
      for (DType t : dtypes)
        for (ScanMode m : scans)
          run_gpu_check(s, c, seed, t, m, gemm, typed, o.check_finite, o.verbose);
  }

  const int failed = s.count(Status::Fail), passed = s.count(Status::Pass),
            not_run = s.count(Status::NotRun), na = s.count(Status::NotApplicable);
  std::printf("\nSummary\n%-22s %-28s %-7s %s\n", "config", "check", "result", "detail");
  for (const Row& r : s.rows)
    std::printf("%-22s %-28s %-7s %s\n", r.config.c_str(), r.check.c_str(), status_name(r.status),
                r.detail.c_str());
  if (s.rows.empty()) std::printf("(no check ran)\n");
  const bool gpu_missing = gpu_requested && !gpu_usable;
  int code = kExitPass;
  std::string verdict;
  if (failed > 0) {
    code = kExitFail;
    verdict = "FAILED";
  } else if (passed == 0) {
    code = kExitCannotRun;
    verdict = "NOTHING CHECKED";
  } else if (not_run > 0 || gpu_missing) {
    code = kExitCannotRun;
    verdict = "INCOMPLETE: requested checks did not run";
  } else {
    verdict = "passed";
  }
  std::printf("\n%d checks ran: %d passed, %d failed; %d not run, %d not applicable. %s\n",
              passed + failed, passed, failed, not_run, na, gpu_line.c_str());
  std::printf("validate: %s (exit %d)\n", verdict.c_str(), code);
  if (gpu_missing)
    std::fprintf(stderr,
                 "mambacheck validate: the requested GPU checks cannot run: no usable GPU on this "
                 "machine (%s)%s (exit %d)\n",
                 reason.c_str(), passed + failed == 0 ? "; no check ran" : "", code);

  if (!o.json.empty()) {
    Json extra = Json::object();
    extra["seed"] = seed;
    extra["f32_gemm"] = gpu::to_string(gemm);
    extra["gemm_tier_f32"] = gpu::describe(gpu::gemm_tier(DType::F32, gemm, typed));
    extra["gemm_tier_bf16_f16"] = gpu::describe(gpu::gemm_tier(DType::BF16, gemm, typed));
    extra["gpu_checks"] = gpu_usable ? "ran" : (o.cpu_only ? "not requested (--cpu-only)"
                                                            : "not run: no usable GPU (" + reason + ")");
    extra["verdict"] = verdict;
    extra["exit_code"] = code;
    const Json context = report::context_object("mambacheck validate", gpu_usable, extra);
    try {
      report::write_json_file(o.json, report::validation_document(
                                          context, {{"checks", s.checks},
                                                    {"oracle_checks", s.oracle},
                                                    {"precision", s.precision},
                                                    {"determinism", s.determinism}}));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mambacheck validate: %s\n", e.what());
      return code == kExitFail ? kExitFail : kExitCannotRun;
    }
    std::printf("validate: results written to %s\n", o.json.c_str());
  }
  return code;
}

}  // namespace

Command add_validate(CLI::App& root) {
  auto o = std::make_shared<ValidateOptions>();
  CLI::App* app = root.add_subcommand(
      "validate", "run the oracle self-checks and (with a GPU) the GPU-vs-oracle checks");
  add_shape_options(*app, o->shape);
  app->add_option("--dtype", o->dtype, "GPU storage dtype: f32 | bf16 | f16 | all, or a list f32,bf16 (default f32)")
      ->type_name("D");
  app->add_option("--scan", o->scan,
                  "GPU scan route: auto (= checkpointed, the training default) | checkpointed | "
                  "sequential | parallel, a list, both (= sequential,parallel) or all (default auto)")
      ->type_name("M");
  app->add_option("--seed", o->seed, "data seed (default 1)")->type_name("S");
  app->add_option("--threads", o->threads, "OpenMP threads (default OMP_NUM_THREADS; capped)")
      ->type_name("N");
  auto* cpu = app->add_flag("--cpu-only", o->cpu_only, "run the CPU oracle checks only");
  auto* gpu = app->add_flag("--gpu-only", o->gpu_only,
                            "run the GPU checks only (exit 3 when no GPU can be used)");
  cpu->excludes(gpu);
  app->add_flag("--require-gpu", o->require_gpu, "fail with exit 3 when the GPU checks cannot run");
  app->add_flag("--tf32", o->tf32, "run f32 GEMMs in TF32 (recorded in the output)");
  app->add_option("--typed-gemm", o->typed_gemm,
                  "bf16/f16 GEMM tier: tensor-core (default: CUBLAS_COMPUTE_32F, tensor cores "
                  "with f32 accumulation) | strict (CUBLAS_COMPUTE_32F_PEDANTIC)")
      ->type_name("T");
  app->add_flag("--check-finite", o->check_finite,
                "scan every GPU step's outputs for NaN/Inf; the first is reported with its step, "
                "tensor and index (f16 overflow as overflow)");
  app->add_option("--json", o->json, "write all results as JSON (reports/README.md schema)")
      ->type_name("FILE");
  app->add_flag("--verbose", o->verbose, "print every tensor's comparison line");
  app->footer(std::string(
      "Runs, for every built-in config (or the shapes given):\n"
      "  CPU  directional finite-difference gradient checks of the f64 oracle (the whole\n"
      "       backbone, final states included, and every step function) and bitwise\n"
      "       OpenMP thread-count invariance (1 vs 2 vs N threads);\n"
      "  GPU  the GPU pipeline against the f64 oracle for every output, final state and\n"
      "       gradient tensor: max|K-O| <= k*e_P + 2 ulp. f32: k = 4 and e_P the worst of the\n"
      "       float oracle and 8 Monte Carlo arithmetic runs (the model-level suites' rule);\n"
      "       bf16/f16: k = 2 and e_P from the same-precision baseline P.\n"
      "GPU checks run when a GPU is usable; they are REQUIRED (exit 3 without a GPU) with\n"
      "--gpu-only, --require-gpu, or any GPU setting (--dtype, --scan, --tf32,\n"
      "--check-finite, or dtype/scan in a config file)." "\n\n") +
              kShapeHelp + "\n" + kExitCodesHelp);
  return {app, [o] { return run(*o); }};
}

}  // namespace mc::cli
