// determinism.cpp — named tensors of a Model run, FNV-1a manifests, the rerun
// checker and the determinism rows of the validation JSON (determinism.hpp).
#include "check/determinism.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "check/compare.hpp"
#include "core/param_layout.hpp"
#include "check/report_json.hpp"

namespace mc::check {

namespace {

std::vector<float> slice(const std::vector<float>& v, int64_t off, int64_t n) {
  if (off < 0 || n < 0 || off + n > int64_t(v.size()))
    throw std::out_of_range("determinism: slice [" + std::to_string(off) + ", " +
                            std::to_string(off + n) + ") of a tensor of " +
                            std::to_string(v.size()) + " elements");
  return std::vector<float>(v.begin() + off, v.begin() + off + n);
}

// Sample b's part of a per-layer tensor [L, B, di, w]: one entry per layer.
void add_sample_per_layer(TensorList& t, const char* prefix, const char* what,
                          const std::vector<float>& v, const Dims& d, int64_t B, int64_t b,
                          int64_t w) {
  const int64_t per_sample = d.di * w;
  for (int64_t l = 0; l < d.L; ++l)
    t.push_back({prefix + layer_tensor(l, what), slice(v, (l * B + b) * per_sample, per_sample)});
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// Creates/truncates `path` with `bytes`, or throws naming the file.
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
  f.write(bytes.data(), std::streamsize(bytes.size()));
  f.close();
  if (!f) throw std::runtime_error("error writing '" + path + "'");
}

}  // namespace

// ---- the tensors of one run ------------------------------------------------------------

TensorList catalogue_tensors(const std::vector<TensorSpec>& specs, const ModelOutputs<float>& o) {
  TensorList t;
  for (const TensorSpec& s : specs) t.push_back({s.name, slice(field(o, s.field), s.offset, s.count)});
  return t;
}

TensorList forward_tensors(const ModelInputs& in, const ModelOutputs<float>& o) {
  return catalogue_tensors(forward_results(in.cfg, in.B, in.T), o);
}

TensorList backward_tensors(const ModelInputs& in, const ModelOutputs<float>& o) {
  return catalogue_tensors(backward_results(in.cfg, in.B, in.T), o);
}

ModelOutputs<float> run_forward_backward(gpu::Model& m, const ModelInputs& in) {
  ModelOutputs<float> o;
  m.set_params(in.params);
  m.set_state(in.conv0, in.ssm0);
  if (has_final_state_grads(in))
    m.set_final_state_grads(in.d_conv_final, in.d_ssm_final);
  else
    m.clear_final_state_grads();
  m.forward(in.X, o.out);
  m.get_state(o.conv_final, o.ssm_final);
  m.backward(in.d_out, o.grads, &o.d_conv0, &o.d_ssm0, &o.dX);
  return o;
}

// ---- batch composition -------------------------------------------------------------------

ModelInputs select_samples(const ModelInputs& in, const std::vector<int64_t>& samples) {
  const Dims d = Dims::from(in.cfg);
  if (samples.empty()) throw std::invalid_argument("select_samples: no samples given");
  for (int64_t b : samples)
    if (b < 0 || b >= in.B)
      throw std::out_of_range("select_samples: sample " + std::to_string(b) +
                              " violates 0 <= sample < B = " + std::to_string(in.B));
  ModelInputs out;
  out.cfg = in.cfg;
  out.B = int64_t(samples.size());
  out.T = in.T;
  out.dtype = in.dtype;
  out.params = in.params;
  auto rows = [&](const std::vector<float>& v, int64_t width) {
    std::vector<float> r;
    for (int64_t b : samples) {
      const auto s = slice(v, b * in.T * width, in.T * width);
      r.insert(r.end(), s.begin(), s.end());
    }
    return r;
  };
  auto per_layer = [&](const std::vector<float>& v, int64_t w) {
    std::vector<float> r;
    for (int64_t l = 0; l < d.L; ++l)
      for (int64_t b : samples) {
        const auto s = slice(v, (l * in.B + b) * d.di * w, d.di * w);
        r.insert(r.end(), s.begin(), s.end());
      }
    return r;
  };
  out.X = rows(in.X, d.mid);
  out.d_out = rows(in.d_out, d.dm);
  out.conv0 = per_layer(in.conv0, d.dc);
  out.ssm0 = per_layer(in.ssm0, d.ds);
  if (!in.d_conv_final.empty()) out.d_conv_final = per_layer(in.d_conv_final, d.dc);
  if (!in.d_ssm_final.empty()) out.d_ssm_final = per_layer(in.d_ssm_final, d.ds);
  return out;
}

TensorList sample_tensors(const ModelInputs& in, const ModelOutputs<float>& o, int64_t b) {
  if (b < 0 || b >= in.B)
    throw std::out_of_range("sample_tensors: sample " + std::to_string(b) +
                            " violates 0 <= sample < B = " + std::to_string(in.B));
  const Dims d = Dims::from(in.cfg);
  TensorList t;
  t.push_back({"out", slice(o.out, b * in.T * d.dm, in.T * d.dm)});
  add_sample_per_layer(t, "", "conv_final", o.conv_final, d, in.B, b, d.dc);
  add_sample_per_layer(t, "", "ssm_final", o.ssm_final, d, in.B, b, d.ds);
  t.push_back({"grad.input", slice(o.dX, b * in.T * d.mid, in.T * d.mid)});
  add_sample_per_layer(t, "grad.", "conv0", o.d_conv0, d, in.B, b, d.dc);
  add_sample_per_layer(t, "grad.", "ssm0", o.d_ssm0, d, in.B, b, d.ds);
  return t;
}

// ---- hashes and manifests ------------------------------------------------------------------

Manifest make_manifest(const TensorList& t) {
  Manifest m;
  m.reserve(t.size());
  for (const auto& x : t)
    m.push_back({x.name, int64_t(x.values.size()),
                 fnv1a64(x.values.data(), x.values.size() * sizeof(float))});
  return m;
}

uint64_t combined_hash(const TensorList& t) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis: chaining = hashing the concatenation
  for (const auto& x : t) h = fnv1a64(x.values.data(), x.values.size() * sizeof(float), h);
  return h;
}

std::string hash_hex(uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, h);
  return buf;
}

std::string manifest_to_text(const Manifest& m, const std::string& header) {
  std::ostringstream os;
  std::istringstream hs(header);
  for (std::string line; std::getline(hs, line);) os << "# " << line << "\n";
  for (const auto& e : m) {
    if (e.name.empty() || e.name.find_first_of(" \t\r\n") != std::string::npos)
      throw std::invalid_argument("manifest: tensor name '" + e.name +
                                  "' is empty or contains blanks");
    os << e.name << " " << e.count << " " << hash_hex(e.hash) << "\n";
  }
  return os.str();
}

Manifest manifest_from_text(const std::string& text, const std::string& source) {
  Manifest m;
  std::istringstream is(text);
  int lineno = 0;
  for (std::string line; std::getline(is, line);) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    TensorHash e;
    std::string hex, extra;
    auto bad = [&](const std::string& why) {
      return std::runtime_error(source + ":" + std::to_string(lineno) + ": " + why + " in '" +
                                line + "' (expected '<name> <count> 0x<16 hex digits>')");
    };
    if (!(ls >> e.name >> e.count >> hex)) throw bad("missing field");
    if (ls >> extra) throw bad("extra field '" + extra + "'");
    if (e.count < 0) throw bad("negative count");
    if (hex.size() != 18 || hex.compare(0, 2, "0x") != 0 ||
        hex.find_first_not_of("0123456789abcdef", 2) != std::string::npos)
      throw bad("malformed hash '" + hex + "'");
    e.hash = std::stoull(hex.substr(2), nullptr, 16);
    m.push_back(e);
  }
  return m;
}

void write_manifest(const std::string& path, const Manifest& m, const std::string& header) {
  write_file(path, manifest_to_text(m, header));
}

Manifest read_manifest(const std::string& path) { return manifest_from_text(read_file(path), path); }

void write_tensor_data(const std::string& path, const TensorList& t) {
  std::string bytes;
  for (const auto& x : t)
    bytes.append(reinterpret_cast<const char*>(x.values.data()), x.values.size() * sizeof(float));
  write_file(path, bytes);
}

TensorList read_tensor_data(const std::string& path, const Manifest& m) {
  const std::string bytes = read_file(path);
  int64_t total = 0;
  for (const auto& e : m) total += e.count;
  if (int64_t(bytes.size()) != total * int64_t(sizeof(float)))
    throw std::runtime_error("'" + path + "' has " + std::to_string(bytes.size()) +
                             " bytes; its manifest lists " + std::to_string(total) +
                             " f32 values (" + std::to_string(total * 4) + " bytes)");
  TensorList t;
  size_t off = 0;
  for (const auto& e : m) {
    NamedTensor x{e.name, std::vector<float>(size_t(e.count))};
    std::memcpy(x.values.data(), bytes.data() + off, size_t(e.count) * sizeof(float));
    off += size_t(e.count) * sizeof(float);
    t.push_back(std::move(x));
  }
  return t;
}

// ---- comparisons ---------------------------------------------------------------------------

int64_t ulp_distance(float a, float b) {
  auto ord = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    const int64_t mag = int64_t(u & 0x7fffffffu);
    return (u & 0x80000000u) ? -mag : mag;
  };
  const int64_t d = ord(a) - ord(b);
  return d < 0 ? -d : d;
}

std::string TensorDiff::summary() const {
  std::ostringstream os;
  os << tensor << ": ";
  if (!problem.empty()) {
    os << problem;
    return os.str();
  }
  char va[32], vb[32];
  std::snprintf(va, sizeof va, "%.9g", double(a));
  std::snprintf(vb, sizeof vb, "%.9g", double(b));
  os << "first difference at index " << index << " (" << va << " vs " << vb << ", " << ulp
     << " ulp); " << n_diff << " elements differ, max " << max_ulp << " ulp";
  return os.str();
}

std::vector<TensorDiff> diff_tensor_lists(const TensorList& a, const TensorList& b) {
  std::vector<TensorDiff> out;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    TensorDiff d;
    if (i >= a.size() || i >= b.size()) {
      d.tensor = i < a.size() ? a[i].name : b[i].name;
      d.index = 0;
      d.problem = std::string("present only in the ") + (i < a.size() ? "first" : "second") + " run";
      out.push_back(d);
      continue;
    }
    const auto& x = a[i];
    const auto& y = b[i];
    d.tensor = x.name;
    if (x.name != y.name) {
      d.index = 0;
      d.problem = "tensor #" + std::to_string(i) + " is '" + x.name + "' in the first run but '" +
                  y.name + "' in the second";
      out.push_back(d);
      continue;
    }
    const int64_t m = int64_t(std::min(x.values.size(), y.values.size()));
    const BitDiff first = first_bit_difference(x.values.data(), y.values.data(), m);
    if (x.values.size() != y.values.size()) {
      d.index = first.index >= 0 ? first.index : m;
      d.problem = "sizes differ: " + std::to_string(x.values.size()) + " vs " +
                  std::to_string(y.values.size()) + " elements";
      out.push_back(d);
      continue;
    }
    if (first.index < 0) continue;
    d.index = first.index;
    d.a = first.a;
    d.b = first.b;
    d.ulp = first.ulp;
    for (int64_t k = 0; k < m; ++k) {
      if (same_bits(x.values[size_t(k)], y.values[size_t(k)])) continue;
      ++d.n_diff;
      d.max_ulp = std::max(d.max_ulp, ulp_distance(x.values[size_t(k)], y.values[size_t(k)]));
    }
    out.push_back(d);
  }
  return out;
}

std::vector<std::string> diff_manifests(const Manifest& a, const Manifest& b) {
  std::vector<std::string> out;
  auto find = [](const Manifest& m, const std::string& name) -> const TensorHash* {
    for (const auto& e : m)
      if (e.name == name) return &e;
    return nullptr;
  };
  for (const auto& e : a) {
    const TensorHash* o = find(b, e.name);
    if (o == nullptr || o->count != e.count || o->hash != e.hash) out.push_back(e.name);
  }
  for (const auto& e : b)
    if (find(a, e.name) == nullptr) out.push_back(e.name);
  return out;
}

void RerunChecker::add_run(const TensorList& t) {
  const Manifest m = make_manifest(t);
  const uint64_t h = combined_hash(t);
  if (std::find(hashes_.begin(), hashes_.end(), h) == hashes_.end()) hashes_.push_back(h);
  if (runs_ == 0) {
    ref_ = t;
    ref_manifest_ = m;
    ref_hash_ = h;
    runs_ = 1;
    return;
  }
  if (!diff_manifests(ref_manifest_, m).empty()) {
    const std::vector<TensorDiff> diffs = diff_tensor_lists(ref_, t);
    for (const auto& d : diffs) max_ulp_ = std::max(max_ulp_, d.max_ulp);
    if (first_bad_run_ < 0) {
      first_bad_run_ = runs_;
      first_diffs_ = diffs;
    }
  }
  ++runs_;
}

std::string RerunChecker::report() const {
  std::ostringstream os;
  os << what_ << ": " << runs_ << " runs, " << ref_manifest_.size() << " tensors, ";
  if (identical()) {
    os << "bitwise identical (hash " << hash_hex(ref_hash_) << ")";
    return os.str();
  }
  os << "NOT reproducible: " << distinct_hashes() << " distinct hashes; run " << first_bad_run_
     << " differs from run 0 in " << first_diffs_.size() << " tensor(s), max " << max_ulp_
     << " ulp over all runs";
  for (const auto& d : first_diffs_) os << "\n    " << d.summary();
  return os.str();
}

// ---- validation JSON ---------------------------------------------------------------------

DeterminismRow row_from(const RerunChecker& c, std::string id, std::string test, std::string dtype,
                        std::string scan, std::string note) {
  DeterminismRow r;
  r.id = std::move(id);
  r.test = std::move(test);
  r.dtype = std::move(dtype);
  r.scan = std::move(scan);
  r.runs = c.runs();
  r.hash = c.reference_hash();
  r.identical = c.identical();
  r.max_ulp = c.max_ulp();
  if (!c.identical() && !c.first_mismatch().empty()) {
    const TensorDiff& d = c.first_mismatch().front();
    r.first_diff_index = d.index;
    r.ulp = d.ulp;
    r.tensor = d.tensor;
  }
  r.note = std::move(note);
  return r;
}

std::string to_json_line(const DeterminismRow& r) {
  using report::json_bool;
  using report::json_int;
  using report::json_string;
  return report::json_object({
      {"id", json_string(r.id)},
      {"test", json_string(r.test)},
      {"dtype", json_string(r.dtype)},
      {"scan", json_string(r.scan)},
      {"runs", json_int(r.runs)},
      {"hash", json_string(hash_hex(r.hash))},
      {"identical", json_bool(r.identical)},
      {"first_diff_index", json_int(r.identical ? -1 : r.first_diff_index)},
      {"ulp", json_int(r.identical ? 0 : r.ulp)},
      {"expected_identical", json_bool(r.expected_identical)},
      {"required", json_bool(r.required)},
      {"tensor", json_string(r.tensor)},
      {"max_ulp", json_int(r.max_ulp)},
      {"device", json_int(r.device)},
      {"note", json_string(r.note)},
  });
}

namespace {

// Part of the file format (a file without this tag is never overwritten), so
// it keeps the path this writer had when the format was defined: files written
// before the move to check/ stay mergeable.
constexpr const char* kWriterTag = "mambacheck determinism (validation/common/determinism.cpp)";

// The rows of a file this writer produced, in file order (parsed as JSON).
report::Json existing_rows(const std::string& path) {
  std::ifstream f(path);
  if (!f) return report::Json::array();  // absent: a new file
  const std::string text = read_file(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return report::Json::array();
  report::Json doc;
  try {
    doc = report::Json::parse(text);
  } catch (const report::Json::parse_error& e) {
    throw std::runtime_error("refusing to rewrite '" + path + "': it is not valid JSON (" +
                             e.what() + "); point " + std::string(kDeterminismJsonEnv) +
                             " at a new file");
  }
  if (!doc.is_object() || !doc.contains("writer") || doc["writer"] != kWriterTag)
    throw std::runtime_error("refusing to rewrite '" + path +
                             "': it was not written by merge_determinism_json (no writer tag); "
                             "point " + std::string(kDeterminismJsonEnv) + " at a new file");
  if (!doc.contains("determinism") || !doc["determinism"].is_array()) return report::Json::array();
  for (const auto& r : doc["determinism"])
    if (!r.is_object() || !r.contains("id") || !r["id"].is_string())
      throw std::runtime_error("'" + path + "': a determinism row has no string id: " + r.dump());
  return doc["determinism"];
}

}  // namespace

void merge_determinism_json(const std::string& path, const std::string& context_json,
                            const std::vector<DeterminismRow>& rows) {
  report::FileLock lock(path + ".lock");
  report::Json all = existing_rows(path);
  for (const auto& r : rows) {
    if (r.id.empty() || r.id.find_first_of("\"\\") != std::string::npos)
      throw std::invalid_argument("determinism row id '" + r.id + "' is empty or has quotes");
    report::Json line = report::Json::parse(to_json_line(r));
    bool replaced = false;
    for (auto& x : all)
      if (x["id"] == r.id) {
        x = line;
        replaced = true;
        break;
      }
    if (!replaced) all.push_back(std::move(line));
  }
  report::Json doc = report::Json::object();
  doc["schema"] = report::kValidationSchema;
  doc["writer"] = kWriterTag;
  doc["context"] = report::Json::parse(context_json);
  doc["determinism"] = std::move(all);
  report::write_json_file(path, doc);
}

}  // namespace mc::check
