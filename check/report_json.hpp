// report_json.hpp — writing the validation JSON that reports/generate.py reads
// (schema "mambacheck-validation/1", reports/README.md): JSON string/number
// encoding, the "context" block (what a precision or bitwise claim depends
// on: git revision and build flags from the generated build_info.hpp, OpenMP
// threads, and the GPU, driver, CUDA runtime and cuBLAS of
// gpu::device_info), one "precision" row per k-rule result, and the file
// itself. Shared by `mambacheck validate --json` and the precision suite
// (MAMBACHECK_PRECISION_JSON), so both write the same keys.
//
// All encoding, parsing and merging goes through nlohmann-json (ordered
// objects, so keys keep the order they were written in); the string-valued
// helpers below are kept for the callers that build rows field by field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "check/compare.hpp"

namespace mc::report {

inline constexpr const char* kValidationSchema = "mambacheck-validation/1";

using Json = nlohmann::ordered_json;

// A finite number as a JSON number; inf/-inf/nan as the strings the schema allows.
Json number(double x);

// Reads and parses a JSON file; throws std::runtime_error naming the path and
// the OS or parse error.
Json read_json_file(const std::string& path);
// Writes `doc` (indented) through replace_file_atomically; refuses a path that
// exists and is not a regular file (e.g. /dev/null, a folder).
void write_json_file(const std::string& path, const Json& doc);
// Throws std::runtime_error with the reason when `path` cannot be written as a
// result file: it is a folder or another non-regular file, or its folder does
// not exist or is not writable. Touches nothing. Used before long runs.
void check_output_file(const std::string& path);

// The context object (see context_json) as JSON.
Json context_object(const std::string& tool, bool with_gpu, const Json& extra = Json::object(),
                    int device = 0);
// One "precision" row (see precision_row_json) as JSON.
Json precision_row(const std::string& dtype, const std::string& shape, const check::KRuleResult& r,
                   const Json& extra = Json::object());
// {"schema", "context", then each section} as one document.
Json validation_document(const Json& context,
                         const std::vector<std::pair<std::string, Json>>& sections);

// Key -> already-encoded JSON value (use json_string / json_number).
using Fields = std::vector<std::pair<std::string, std::string>>;

std::string json_escape(const std::string& s);  // contents of a JSON string, no quotes
std::string json_string(const std::string& s);  // "..." with escapes
// %.6g for finite numbers; "inf", "-inf", "nan" as strings (the README allows them).
std::string json_number(double x);
std::string json_int(long long x);
std::string json_bool(bool b);
std::string json_object(const Fields& fields);  // {"k": v, ...} on one line

// The context object: tool, git_sha, git_tree, build_flags, omp_threads, and
// with_gpu ? gpu_index, gpu_name, gpu_cc, gpu_sm_count, gpu_total_mem_bytes,
// cuda_driver, cuda_runtime, cublas_version (of `device`) : gpu_name "none"
// and gpu_unavailable_reason (why no GPU can be used, when that is the case);
// then `extra` in order.
std::string context_json(const std::string& tool, bool with_gpu, const Fields& extra = {},
                         int device = 0);

// One "precision" row: dtype, shape, tensor, k, k_limit, max_abs, max_rel,
// nmse, max_ulp, pass (required), then atol, bound, headroom,
// baseline_max_abs (optional columns), then `extra` (e.g. config, scan, suite).
std::string precision_row_json(const std::string& dtype, const std::string& shape,
                               const check::KRuleResult& r, const Fields& extra = {});

// Writes {"schema", "context", then each section as an array of row objects}.
// Throws std::runtime_error naming the path if the file cannot be written.
void write_validation_json(const std::string& path, const std::string& context,
                           const std::vector<std::pair<std::string, std::vector<std::string>>>& sections);

// `row` (a one-line JSON object) with "id": id as its first key.
std::string with_id(const std::string& id, const std::string& row);

// Accumulates rows of several processes (ctest runs every test in its own)
// in ONE validation JSON: the rows already in `path` (created if absent)
// whose id starts with `owner` are dropped, `rows` (from with_id) appended,
// the others kept, and the context replaced. The file is parsed and written
// as JSON (not matched line by line). Concurrent writers are serialised with
// flock on <path>.lock; the file is written to a temporary and renamed. It
// only rewrites files it wrote (a "writer" key naming `section`); anything
// else is refused with an error naming the path.
void merge_validation_rows(const std::string& path, const std::string& context,
                           const std::string& section, const std::string& owner,
                           const std::vector<std::string>& rows);

// Exclusive advisory lock (flock) on `path`, created if absent, held for the
// object's lifetime: serialises the writers of one JSON file across processes.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// Writes `text` to a temporary beside `path` and renames it over `path`, so a
// reader never sees a half-written file. Refuses a `path` that exists and is
// not a regular file. Throws naming the path and the OS reason on failure.
void replace_file_atomically(const std::string& path, const std::string& text);

}  // namespace mc::report
