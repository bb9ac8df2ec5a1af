// report_json.cpp — validation JSON encoding and the context block (see
// report_json.hpp and reports/README.md for the schema).
#include "check/report_json.hpp"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "generated/build_info.hpp"
#include "gpu/model.hpp"

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

std::string with_id(const std::string& id, const std::string& row) {
  if (row.empty() || row[0] != '{') throw std::invalid_argument("with_id: row is not an object");
  return "{\"id\": " + json_string(id) + (row.size() > 2 ? ", " : "") + row.substr(1);
}

namespace {


std::string writer_tag(const std::string& section) {
  return "\"writer\": \"mambacheck report_json merge (" + section + ")\"";
}

// The row lines of a file merge_validation_rows wrote, in file order.
std::vector<std::string> existing_rows(const std::string& path, const std::string& section) {
  std::vector<std::string> rows;
  std::ifstream f(path);
  if (!f) return rows;  // absent: a new file
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return rows;
  if (text.find(writer_tag(section)) == std::string::npos)
    throw std::runtime_error("refusing to rewrite '" + path + "': it was not written by the '" +
                             section + "' row merger (no writer tag); use a new file");
  std::istringstream is(text);
  const std::string prefix = "{\"id\": \"";
  for (std::string line; std::getline(is, line);) {
    const size_t p = line.find_first_not_of(' ');
    if (p == std::string::npos || line.compare(p, prefix.size(), prefix) != 0) continue;
    std::string row = line.substr(p);
    while (!row.empty() && (row.back() == ',' || row.back() == ' ' || row.back() == '\r')) row.pop_back();
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

void merge_validation_rows(const std::string& path, const std::string& context,
                           const std::string& section, const std::string& owner,
                           const std::vector<std::string>& rows) {
  FileLock lock(path + ".lock");
  const std::string owned = "{\"id\": \"" + json_escape(owner);  // ids starting with owner
  std::vector<std::string> all;
  for (std::string& r : existing_rows(path, section))
    if (r.compare(0, owned.size(), owned) != 0) all.push_back(std::move(r));
  all.insert(all.end(), rows.begin(), rows.end());
  std::ostringstream os;
  os << "{\n  \"schema\": " << json_string(kValidationSchema) << ",\n  " << writer_tag(section)
     << ",\n  \"context\": " << context << ",\n  " << json_string(section) << ": [\n";
  for (size_t i = 0; i < all.size(); ++i) os << "    " << all[i] << (i + 1 < all.size() ? "," : "") << "\n";
  os << "  ]\n}\n";
  replace_file_atomically(path, os.str());
}

FileLock::FileLock(const std::string& path) {
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open lock file '" + path + "': " + std::strerror(errno));
  while (flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int e = errno;
      close(fd_);
      throw std::runtime_error("cannot lock '" + path + "': " + std::strerror(e));
    }
  }
}

FileLock::~FileLock() { close(fd_); }

void replace_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(e));
  }
}

}  // namespace mc::report
