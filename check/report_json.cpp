// report_json.cpp — validation JSON encoding, parsing and merging through
// nlohmann-json, and the context block (see report_json.hpp and
// reports/README.md for the schema).
#include "check/report_json.hpp"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <sys/stat.h>
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

namespace {

std::string dump_line(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json parse_row(const std::string& row, const char* what) {
  try {
    Json j = Json::parse(row);
    if (!j.is_object()) throw std::invalid_argument("not an object");
    return j;
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string(what) + ": row is not a JSON object (" + e.what() +
                                "): " + row.substr(0, 200));
  }
}

Json fields_to_json(const Fields& fields) {
  Json o = Json::object();
  for (const auto& [k, v] : fields) o[k] = parse_row("{\"v\": " + v + "}", "json_object")["v"];
  return o;
}

std::string dirname_of(const std::string& path) {
  const size_t p = path.find_last_of('/');
  if (p == std::string::npos) return ".";
  if (p == 0) return "/";
  return path.substr(0, p);
}

}  // namespace

Json number(double x) {
  if (!std::isfinite(x)) return x > 0 ? Json("inf") : (x < 0 ? Json("-inf") : Json("nan"));
  return Json(x);
}

std::string json_escape(const std::string& s) {
  const std::string q = dump_line(Json(s));
  return q.substr(1, q.size() - 2);
}

std::string json_string(const std::string& s) { return dump_line(Json(s)); }

std::string json_number(double x) {
  if (!std::isfinite(x)) return x > 0 ? "\"inf\"" : (x < 0 ? "\"-inf\"" : "\"nan\"");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string json_int(long long x) { return std::to_string(x); }

std::string json_bool(bool b) { return b ? "true" : "false"; }

std::string json_object(const Fields& fields) { return dump_line(fields_to_json(fields)); }

Json context_object(const std::string& tool, bool with_gpu, const Json& extra, int device) {
  Json f = Json::object();
  f["tool"] = tool;
  f["git_sha"] = build::kGitSha;
  f["git_tree"] = build::kGitDirty;
  f["build_flags"] = build::kBuildFlags;
  f["omp_threads"] = omp_get_max_threads();
  if (with_gpu) {
    const gpu::DeviceInfo d = gpu::device_info(device);
    f["gpu_index"] = d.index;
    f["gpu_name"] = d.name;
    f["gpu_cc"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
    f["gpu_sm_count"] = d.sm_count;
    f["gpu_total_mem_bytes"] = d.total_mem_bytes;
    f["cuda_driver"] = d.driver_version;
    f["cuda_runtime"] = d.runtime_version;
    f["cublas_version"] = d.cublas_version;
  } else {
    f["gpu_name"] = "none";
    std::string reason;
    if (!gpu::gpu_available(&reason)) f["gpu_unavailable_reason"] = reason;
  }
  for (const auto& [k, v] : extra.items()) f[k] = v;
  return f;
}

std::string context_json(const std::string& tool, bool with_gpu, const Fields& extra, int device) {
  return dump_line(context_object(tool, with_gpu, fields_to_json(extra), device));
}

Json precision_row(const std::string& dtype, const std::string& shape, const check::KRuleResult& r,
                   const Json& extra) {
  Json f = Json::object();
  f["dtype"] = dtype;
  f["shape"] = shape;
  f["tensor"] = r.tensor;
  f["k"] = number(r.k);
  f["k_limit"] = number(r.k_limit);
  f["max_abs"] = number(r.kernel.max_abs);
  f["max_rel"] = number(r.kernel.max_rel);
  f["nmse"] = number(r.kernel.nmse);
  f["max_ulp"] = number(r.kernel.max_ulp);
  f["pass"] = r.pass;
  f["atol"] = number(r.atol);
  f["bound"] = number(r.bound);
  f["headroom"] = number(r.headroom);
  f["baseline_max_abs"] = number(r.baseline.max_abs);
  for (const auto& [k, v] : extra.items()) f[k] = v;
  return f;
}

std::string precision_row_json(const std::string& dtype, const std::string& shape,
                               const check::KRuleResult& r, const Fields& extra) {
  return dump_line(precision_row(dtype, shape, r, fields_to_json(extra)));
}

Json validation_document(const Json& context,
                         const std::vector<std::pair<std::string, Json>>& sections) {
  Json doc = Json::object();
  doc["schema"] = kValidationSchema;
  doc["context"] = context;
  for (const auto& [name, rows] : sections) doc[name] = rows;
  return doc;
}

void write_validation_json(const std::string& path, const std::string& context,
                           const std::vector<std::pair<std::string, std::vector<std::string>>>& sections) {
  std::vector<std::pair<std::string, Json>> s;
  for (const auto& [name, rows] : sections) {
    Json a = Json::array();
    for (const std::string& r : rows) a.push_back(parse_row(r, "write_validation_json"));
    s.emplace_back(name, std::move(a));
  }
  write_json_file(path, validation_document(parse_row(context, "write_validation_json"), s));
}

std::string with_id(const std::string& id, const std::string& row) {
  Json r = parse_row(row, "with_id");
  Json o = Json::object();
  o["id"] = id;
  for (const auto& [k, v] : r.items())
    if (k != "id") o[k] = v;
  return dump_line(o);
}

Json read_json_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
  try {
    return Json::parse(f);
  } catch (const Json::parse_error& e) {
    throw std::runtime_error("'" + path + "' is not valid JSON: " + e.what());
  }
}

void check_output_file(const std::string& path) {
  if (path.empty()) throw std::runtime_error("the output path is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw std::runtime_error("'" + path + "' is a folder, not a file");
    if (!S_ISREG(st.st_mode))
      throw std::runtime_error("'" + path + "' exists and is not a regular file (a device, pipe or "
                               "socket); results are written through a temporary file and a rename");
    if (::access(path.c_str(), W_OK) != 0)
      throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
  }
  const std::string dir = dirname_of(path);
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0)
    throw std::runtime_error("cannot write '" + path + "': folder '" + dir + "': " +
                             std::strerror(errno));
  if (!S_ISDIR(ds.st_mode))
    throw std::runtime_error("cannot write '" + path + "': '" + dir + "' is not a folder");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error("cannot write '" + path + "': folder '" + dir + "': " +
                             std::strerror(errno));
}

void write_json_file(const std::string& path, const Json& doc) {
  replace_file_atomically(path, doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
}

namespace {

std::string writer_tag(const std::string& section) {
  return "mambacheck report_json merge (" + section + ")";
}

// The rows of a file merge_validation_rows wrote, in file order.
Json existing_rows(const std::string& path, const std::string& section) {
  std::ifstream f(path);
  if (!f) return Json::array();  // absent: a new file
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return Json::array();
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw std::runtime_error("refusing to rewrite '" + path + "': it is not valid JSON (" +
                             e.what() + "); use a new file");
  }
  if (!doc.is_object() || !doc.contains("writer") || doc["writer"] != writer_tag(section))
    throw std::runtime_error("refusing to rewrite '" + path + "': it was not written by the '" +
                             section + "' row merger (no writer tag); use a new file");
  if (!doc.contains(section) || !doc[section].is_array()) return Json::array();
  return doc[section];
}

}  // namespace

void merge_validation_rows(const std::string& path, const std::string& context,
                           const std::string& section, const std::string& owner,
                           const std::vector<std::string>& rows) {
  FileLock lock(path + ".lock");
  Json all = Json::array();
  for (const Json& r : existing_rows(path, section)) {
    const std::string id = r.contains("id") && r["id"].is_string() ? r["id"].get<std::string>() : "";
    if (id.compare(0, owner.size(), owner) != 0) all.push_back(r);
  }
  for (const std::string& r : rows) all.push_back(parse_row(r, "merge_validation_rows"));
  Json doc = Json::object();
  doc["schema"] = kValidationSchema;
  doc["writer"] = writer_tag(section);
  doc["context"] = parse_row(context, "merge_validation_rows");
  doc[section] = std::move(all);
  write_json_file(path, doc);
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
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::runtime_error("cannot write '" + path + "': it exists and is not a regular file");
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    errno = 0;
    std::ofstream out(tmp);
    if (!out)
      throw std::runtime_error("cannot write '" + tmp + "': " +
                               (errno ? std::strerror(errno) : "open failed"));
    out << text;
    out.flush();
    if (!out) {
      const int e = errno;
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot write '" + tmp + "': " + (e ? std::strerror(e) : "write failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(e));
  }
}

}  // namespace mc::report
