// options.cpp — shapes, strict value parsing and thread setup shared by the
// mambacheck subcommands (see options.hpp).
#include "cli/options.hpp"

#include <omp.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "check/report_json.hpp"
#include "check/resources.hpp"

namespace mc::cli {

const char* const kExitCodesHelp =
    "Exit status:\n"
    "  0  every requested check ran and passed (at least one check ran)\n"
    "  1  at least one check ran and failed\n"
    "  2  usage or configuration error (bad option or value, bad output path); nothing ran\n"
    "  3  a requested check could not run and none failed: no usable GPU for GPU checks,\n"
    "     not enough memory for the shape, a shape too small for the k-rule, an I/O error\n";

const char* const kShapeHelp =
    "Shapes: --config NAME picks a built-in config (`mambacheck configs`); --config-file FILE\n"
    "reads one shape object, an array of them, {\"configs\": [...]} or a dump's manifest.json,\n"
    "with the keys name, d_model, d_state, d_conv, expand, n_layers, input_dim, eps, batch,\n"
    "seq_len (and optionally dtype, scan). --d-model ... --seq-len override those fields of\n"
    "every selected shape; given alone they apply to mamba-rs-default (dm 128, ds 16, dc 4,\n"
    "expand 2, L 3, input_dim 128, B 2, T 32). Limits: d_model <= 2^20, d_state <= 256,\n"
    "1 <= d_conv <= 8, expand <= 64, n_layers <= 4096, d_inner = expand*d_model <= 65535,\n"
    "B <= 2^20, T <= 2^24; a value outside is refused naming field, value and limit.\n";

bool ShapeOptions::any_override() const {
  for (const std::string* v : {&d_model, &d_state, &d_conv, &expand, &n_layers, &input_dim, &batch,
                               &seq_len, &eps})
    if (!v->empty()) return true;
  return false;
}

void add_shape_options(CLI::App& app, ShapeOptions& s) {
  app.add_option("--config", s.configs, "built-in config (repeatable; see `mambacheck configs`)")
      ->type_name("NAME");
  app.add_option("--config-file", s.config_files,
                 "JSON shape file (object, array, {\"configs\": [...]}, or a dump manifest.json)")
      ->type_name("FILE");
  app.add_option("--d-model", s.d_model, "model width d_model")->type_name("N");
  app.add_option("--d-state", s.d_state, "SSM state size d_state (<= 256)")->type_name("N");
  app.add_option("--d-conv", s.d_conv, "conv width d_conv (1..8)")->type_name("N");
  app.add_option("--expand", s.expand, "d_inner = expand * d_model")->type_name("N");
  app.add_option("--n-layers", s.n_layers, "number of layers")->type_name("N");
  app.add_option("--input-dim", s.input_dim, "width of the input X (input_proj rows)")->type_name("N");
  app.add_option("-B,--batch", s.batch, "batch size B")->type_name("N");
  app.add_option("-T,--seq-len", s.seq_len, "sequence length T")->type_name("N");
  app.add_option("--eps", s.eps, "RMSNorm epsilon (0 < eps < 1)")->type_name("X");
}

namespace {

std::string shown(const std::string& v) {
  std::string s = v.substr(0, 60);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  return s;
}

// Digits with an optional sign; *overflow when it does not fit int64.
bool integer_text(const std::string& v, int64_t* out, bool* overflow) {
  *overflow = false;
  if (v.empty()) return false;
  size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0;
  if (i == v.size()) return false;
  for (size_t j = i; j < v.size(); ++j)
    if (v[j] < '0' || v[j] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno == ERANGE) {
    *overflow = true;
    *out = v[0] == '-' ? INT64_MIN : INT64_MAX;
    return true;
  }
  *out = x;
  return true;
}

[[noreturn]] void out_of_range(const std::string& field, const std::string& v, bool negative,
                               int64_t limit) {
  std::ostringstream os;
  os << field << " = " << v << " violates " << field << (negative ? " >= 1" : " <= ") ;
  if (!negative) os << limit;
  throw ConfigError(os.str());
}

// An int field of ModelConfig: values beyond int are refused here (naming the
// limit), the rest by validate_config with its own message.
void set_int_field(const std::string& field, const std::string& v, int64_t limit, int& dst) {
  const int64_t x = parse_int(field, v);
  if (x > INT_MAX || x < INT_MIN) out_of_range(field, shown(v), x < 0, limit);
  dst = int(x);
}

void set_i64_field(const std::string& field, const std::string& v, int64_t& dst) {
  dst = parse_int(field, v);
}

// JSON value -> the text parse_int / parse_double read.
std::string json_scalar_text(const std::string& file, const std::string& key,
                             const report::Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    if (key == "eps") return v.dump();
    throw ConfigError(key + " = " + v.dump() + " is not an integer (config file '" + file + "')");
  }
  if (v.is_string()) return v.get<std::string>();
  throw ConfigError(key + " = " + v.dump() + " is not a number (config file '" + file + "')");
}

Case base_case() {
  Case c = ref::builtin_config("mamba-rs-default");
  c.name = "custom";
  c.description = "user shape";
  return c;
}

// One shape object of a config file.
Case case_from_json(const std::string& file, const report::Json& o, ShapeOptions& s, size_t index) {
  if (!o.is_object())
    throw ConfigError("config file '" + file + "': entry " + std::to_string(index) +
                      " is not a JSON object");
  Case c = base_case();
  c.name = "file:" + file + (index ? "#" + std::to_string(index) : "");
  int64_t d_inner = -1, dt_rank = -1;
  for (const auto& [key, v] : o.items()) {
    const std::string f = "config file '" + file + "'";
    if (key == "name") {
      if (!v.is_string()) throw ConfigError("name = " + v.dump() + " is not a string (" + f + ")");
      c.name = v.get<std::string>();
    } else if (key == "description") {
      if (v.is_string()) c.description = v.get<std::string>();
    } else if (key == "dtype" || key == "scan") {
      if (!v.is_string()) throw ConfigError(key + " = " + v.dump() + " is not a string (" + f + ")");
      (key == "dtype" ? s.file_dtype : s.file_scan) = v.get<std::string>();
    } else if (key == "eps") {
      c.cfg.eps = parse_double("eps", json_scalar_text(file, key, v));
    } else {
      const std::string t = json_scalar_text(file, key, v);
      if (key == "d_model") set_int_field(key, t, Limits::kMaxDModel, c.cfg.d_model);
      else if (key == "d_state") set_int_field(key, t, Limits::kMaxDState, c.cfg.d_state);
      else if (key == "d_conv") set_int_field(key, t, Limits::kMaxDConv, c.cfg.d_conv);
      else if (key == "expand") set_int_field(key, t, 64, c.cfg.expand);
      else if (key == "n_layers") set_int_field(key, t, Limits::kMaxLayers, c.cfg.n_layers);
      else if (key == "input_dim") set_int_field(key, t, Limits::kMaxInputDim, c.cfg.input_dim);
      else if (key == "batch" || key == "B") set_i64_field("batch", t, c.B);
      else if (key == "seq_len" || key == "T") set_i64_field("seq_len", t, c.T);
      else if (key == "d_inner") d_inner = parse_int(key, t);
      else if (key == "dt_rank") dt_rank = parse_int(key, t);
      else
        throw ConfigError("config file '" + file + "': unknown key '" + shown(key) +
                          "' (known: name, d_model, d_state, d_conv, expand, n_layers, input_dim, "
                          "eps, batch, seq_len, dtype, scan)");
    }
  }
  const Dims d = Dims::from(c.cfg);
  if (d_inner >= 0 && d_inner != d.di)
    throw ConfigError("d_inner = " + std::to_string(d_inner) + " in config file '" + file +
                      "' does not match expand*d_model = " + std::to_string(d.di));
  if (dt_rank >= 0 && dt_rank != d.dr)
    throw ConfigError("dt_rank = " + std::to_string(dt_rank) + " in config file '" + file +
                      "' does not match ceil(d_model/16) = " + std::to_string(d.dr));
  return c;
}

std::vector<Case> cases_from_file(const std::string& file, ShapeOptions& s) {
  report::Json doc;
  try {
    doc = report::read_json_file(file);
  } catch (const std::runtime_error& e) {
    throw ConfigError(std::string("--config-file: ") + e.what());
  }
  std::vector<Case> out;
  if (doc.is_object() && doc.contains("tool") && doc.contains("config") && doc["config"].is_object()) {
    // a dump manifest: its "config" block (+ its dtype)
    report::Json c = doc["config"];
    if (doc.contains("config_name") && doc["config_name"].is_string()) c["name"] = doc["config_name"];
    if (doc.contains("dtype") && doc["dtype"].is_string()) c["dtype"] = doc["dtype"];
    out.push_back(case_from_json(file, c, s, 0));
  } else if (doc.is_object() && doc.contains("configs")) {
    if (!doc["configs"].is_array() || doc["configs"].empty())
      throw ConfigError("config file '" + file + "': \"configs\" is not a non-empty array");
    for (size_t i = 0; i < doc["configs"].size(); ++i)
      out.push_back(case_from_json(file, doc["configs"][i], s, i + 1));
  } else if (doc.is_array()) {
    if (doc.empty()) throw ConfigError("config file '" + file + "' holds an empty array");
    for (size_t i = 0; i < doc.size(); ++i) out.push_back(case_from_json(file, doc[i], s, i + 1));
  } else {
    out.push_back(case_from_json(file, doc, s, 0));
  }
  return out;
}

void apply_overrides(const ShapeOptions& s, Case& c) {
  if (!s.d_model.empty()) set_int_field("d_model", s.d_model, Limits::kMaxDModel, c.cfg.d_model);
  if (!s.d_state.empty()) set_int_field("d_state", s.d_state, Limits::kMaxDState, c.cfg.d_state);
  if (!s.d_conv.empty()) set_int_field("d_conv", s.d_conv, Limits::kMaxDConv, c.cfg.d_conv);
  if (!s.expand.empty()) set_int_field("expand", s.expand, 64, c.cfg.expand);
  if (!s.n_layers.empty()) set_int_field("n_layers", s.n_layers, Limits::kMaxLayers, c.cfg.n_layers);
  if (!s.input_dim.empty())
    set_int_field("input_dim", s.input_dim, Limits::kMaxInputDim, c.cfg.input_dim);
  if (!s.batch.empty()) set_i64_field("batch", s.batch, c.B);
  if (!s.seq_len.empty()) set_i64_field("seq_len", s.seq_len, c.T);
  if (!s.eps.empty()) c.cfg.eps = parse_double("eps", s.eps);
}

}  // namespace

int64_t parse_int(const std::string& field, const std::string& v) {
  int64_t x = 0;
  bool overflow = false;
  if (!integer_text(v, &x, &overflow))
    throw ConfigError(field + " = '" + shown(v) + "' is not an integer");
  if (overflow) {
    const bool neg = x < 0;
    throw ConfigError(field + " = " + shown(v) + " violates " + field +
                      (neg ? " >= 1" : " <= " + std::to_string(INT64_MAX)) +
                      " (it does not fit a 64-bit integer)");
  }
  return x;
}

uint64_t parse_seed(const std::string& field, const std::string& v) {
  bool digits = !v.empty();
  for (char c : v) digits = digits && c >= '0' && c <= '9';
  if (!digits) throw ConfigError(field + " = '" + shown(v) + "' is not a non-negative integer");
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), nullptr, 10);
  if (errno == ERANGE)
    throw ConfigError(field + " = " + shown(v) + " violates " + field + " <= 2^64-1");
  return x;
}

double parse_double(const std::string& field, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE)
    throw ConfigError(field + " = '" + shown(v) + "' is not a number");
  return x;
}

std::vector<DType> parse_dtypes(const std::string& s) {
  if (s == "all") return {DType::F32, DType::BF16, DType::F16};
  std::vector<DType> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(parse_dtype(item));
  if (out.empty()) throw ConfigError("dtype = '' is not one of f32|bf16|f16|all");
  return out;
}

std::vector<ScanMode> parse_scans(const std::string& s) {
  if (s == "both") return {ScanMode::Sequential, ScanMode::Parallel};
  if (s == "all") return {ScanMode::Checkpointed, ScanMode::Sequential, ScanMode::Parallel};
  std::vector<ScanMode> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(parse_scan_mode(item));
  if (out.empty()) throw ConfigError("scan_mode = '' is not one of auto|checkpointed|sequential|parallel");
  return out;
}

std::vector<Case> resolve_cases(ShapeOptions& s, bool default_all) {
  std::vector<Case> cases;
  for (const std::string& n : s.configs) cases.push_back(ref::builtin_config(n));
  for (const std::string& f : s.config_files)
    for (Case& c : cases_from_file(f, s)) cases.push_back(std::move(c));
  const bool overrides = s.any_override();
  if (cases.empty()) {
    if (overrides || !default_all)
      cases.push_back(base_case());
    else
      cases = ref::builtin_configs();
  }
  if (overrides)
    for (Case& c : cases) {
      apply_overrides(s, c);
      if (c.name != "custom" && c.name.rfind("file:", 0) != 0 && !s.configs.empty())
        c.name += "+custom";
      c.description = "user shape";
    }
  for (const Case& c : cases) validate_runtime(Dims::from(c.cfg), c.B, c.T);
  return cases;
}

int setup_threads(const std::string& threads_option) {
  const int cap = check::thread_cap();
  int want = 0;
  std::string from;
  if (!threads_option.empty()) {
    want = check::parse_thread_count("--threads", threads_option);
    from = "--threads " + threads_option;
  } else if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) {
    want = check::parse_thread_count("OMP_NUM_THREADS", env);
    from = std::string("OMP_NUM_THREADS=") + env;
  }
  if (want > cap) {
    std::fprintf(stderr,
                 "mambacheck: note: %s asks for %d OpenMP threads; capped at %d (%d per hardware "
                 "thread, at least %d; the results do not depend on the count)\n",
                 from.c_str(), want, cap, check::kMaxThreadsPerCore, check::kMinThreadCap);
    want = cap;
  }
  if (want > 0) omp_set_num_threads(want);
  return want > 0 ? want : omp_get_max_threads();
}

std::string describe_errno(int e) { return std::strerror(e); }

}  // namespace mc::cli
