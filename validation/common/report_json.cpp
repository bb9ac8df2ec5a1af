// report_json.cpp — validation JSON encoding and the context block (see
// report_json.hpp and reports/README.md for the schema).
#include "report_json.hpp"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "build_info.hpp"
#include "pipeline.hpp"

namespace mc::report {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += c;
        }
    }
  }
  return o;
}

std::string json_string(const std::string& s) { return "\"" + json_escape(s) + "\""; }

std::string json_number(double x) {
  if (!std::isfinite(x)) return x > 0 ? "\"inf\"" : (x < 0 ? "\"-inf\"" : "\"nan\"");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string json_int(long long x) { return std::to_string(x); }

std::string json_bool(bool b) { return b ? "true" : "false"; }

std::string json_object(const Fields& fields) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < fields.size(); ++i)
    os << (i ? ", " : "") << json_string(fields[i].first) << ": " << fields[i].second;
  os << "}";
  return os.str();
}

std::string context_json(const std::string& tool, bool with_gpu, const Fields& extra, int device) {
  Fields f = {{"tool", json_string(tool)},
              {"git_sha", json_string(build::kGitSha)},
              {"git_tree", json_string(build::kGitDirty)},
              {"build_flags", json_string(build::kBuildFlags)},
              {"omp_threads", json_int(omp_get_max_threads())}};
  if (with_gpu) {
    const gpu::DeviceInfo d = gpu::device_info(device);
    f.push_back({"gpu_index", json_int(d.index)});
    f.push_back({"gpu_name", json_string(d.name)});
    f.push_back({"gpu_cc", json_string(std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor))});
    f.push_back({"gpu_sm_count", json_int(d.sm_count)});
    f.push_back({"gpu_total_mem_bytes", json_int(d.total_mem_bytes)});
    f.push_back({"cuda_driver", json_int(d.driver_version)});
    f.push_back({"cuda_runtime", json_int(d.runtime_version)});
    f.push_back({"cublas_version", json_int(d.cublas_version)});
  } else {
    f.push_back({"gpu_name", json_string("none")});
  }
  f.insert(f.end(), extra.begin(), extra.end());
  return json_object(f);
}

std::string precision_row_json(const std::string& dtype, const std::string& shape,
                               const check::KRuleResult& r, const Fields& extra) {
  Fields f = {{"dtype", json_string(dtype)},
              {"shape", json_string(shape)},
              {"tensor", json_string(r.tensor)},
              {"k", json_number(r.k)},
              {"k_limit", json_number(r.k_limit)},
              {"max_abs", json_number(r.kernel.max_abs)},
              {"max_rel", json_number(r.kernel.max_rel)},
              {"nmse", json_number(r.kernel.nmse)},
              {"max_ulp", json_number(r.kernel.max_ulp)},
              {"pass", json_bool(r.pass)},
              {"atol", json_number(r.atol)},
              {"bound", json_number(r.bound)},
              {"headroom", json_number(r.headroom)},
              {"baseline_max_abs", json_number(r.baseline.max_abs)}};
  f.insert(f.end(), extra.begin(), extra.end());
  return json_object(f);
}

void write_validation_json(const std::string& path, const std::string& context,
                           const std::vector<std::pair<std::string, std::vector<std::string>>>& sections) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write validation JSON '" + path + "'");
  out << "{\n  \"schema\": " << json_string(kValidationSchema) << ",\n  \"context\": " << context;
  for (const auto& [name, rows] : sections) {
    out << ",\n  " << json_string(name) << ": [";
    for (size_t i = 0; i < rows.size(); ++i) out << (i ? ",\n    " : "\n    ") << rows[i];
    out << (rows.empty() ? "]" : "\n  ]");
  }
  out << "\n}\n";
  out.flush();
  if (!out) throw std::runtime_error("error while writing validation JSON '" + path + "'");
}

}  // namespace mc::report
