// determinism.hpp — bitwise reproducibility of whole Model runs.
//
//  * A run is a list of named f32 tensors: every output, final state and
//    gradient of one forward + backward, in the order and with the names of
//    the tensor catalogue (catalogue.hpp: out, layers.l.conv_final, ...,
//    grad.<ParamEntry>, grad.input, grad.layers.l.ssm0).
//  * Each tensor is hashed with FNV-1a 64 over its raw bytes; a manifest is the
//    ordered list (name, element count, hash) and can be written to / read from
//    a small text file, so another process's run can be compared.
//  * RerunChecker compares N runs with the first one, tensor by tensor; on a
//    mismatch it names the run, the tensor, the first differing index and the
//    ULP distance there (first_bit_difference), plus the largest ULP distance.
//  * DeterminismRow / merge_determinism_json write the "determinism" rows of
//    the validation JSON (reports/README.md) into one file shared by several
//    test processes (rows keyed by id; flock + atomic rename).
// No CUDA here (the GPU is reached only through gpu::Model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "check/model_check.hpp"
#include "gpu/model.hpp"

namespace mc::check {

struct NamedTensor {
  std::string name;
  std::vector<float> values;
};
using TensorList = std::vector<NamedTensor>;

// ---- the tensors of one run ------------------------------------------------------------

// The catalogue entries' slices of o.
TensorList catalogue_tensors(const std::vector<TensorSpec>& specs, const ModelOutputs<float>& o);
// Forward group (forward_results): out [B*T, dm], layers.l.conv_final [B, di, dc],
// layers.l.ssm_final [B, di, ds].
TensorList forward_tensors(const ModelInputs& in, const ModelOutputs<float>& o);
// Backward group (backward_results): grad.<ParamEntry> (each parameter tensor),
// grad.input [B*T, mid], grad.layers.l.conv0 [B, di, dc], grad.layers.l.ssm0 [B, di, ds].
TensorList backward_tensors(const ModelInputs& in, const ModelOutputs<float>& o);

// One forward + backward (with state and input gradients) on an existing Model
// built for in.cfg, in.B, in.T with state_grads: parameters, initial state and
// the final-state upstream gradients are set first, so a reused Model starts
// every run from the same point.
ModelOutputs<float> run_forward_backward(gpu::Model& m, const ModelInputs& in);

// ---- batch composition -------------------------------------------------------------------

// The same problem restricted to the given samples, in that order (same
// parameters; X/d_out rows and each layer's initial-state slice per sample).
ModelInputs select_samples(const ModelInputs& in, const std::vector<int64_t>& samples);
// What belongs to sample b alone: out rows [T, dm], layers.l.conv_final /
// ssm_final [di, dc|ds], grad.input rows [T, mid], grad.layers.l.conv0 / ssm0.
// (Parameter gradients are sums over the batch and are not per-sample.)
TensorList sample_tensors(const ModelInputs& in, const ModelOutputs<float>& o, int64_t b);

// ---- hashes and manifests ------------------------------------------------------------------

struct TensorHash {
  std::string name;
  int64_t count = 0;  // elements
  uint64_t hash = 0;  // fnv1a64 of the raw bytes
};
using Manifest = std::vector<TensorHash>;

Manifest make_manifest(const TensorList& t);
// One hash for the whole list: FNV-1a 64 over every tensor's bytes in order.
uint64_t combined_hash(const TensorList& t);
std::string hash_hex(uint64_t h);  // "0x0123456789abcdef"

// Text form: '#' comment lines (the header, one line per '\n' in it), then one
// line per tensor: "<name> <count> <hash_hex>". Names contain no blanks.
std::string manifest_to_text(const Manifest& m, const std::string& header);
// Throws std::runtime_error naming `source` and the line for malformed input.
Manifest manifest_from_text(const std::string& text, const std::string& source);
void write_manifest(const std::string& path, const Manifest& m, const std::string& header);
Manifest read_manifest(const std::string& path);

// Raw f32 values of every tensor, concatenated in list order (little endian,
// as in memory); read back against a manifest's names and counts.
void write_tensor_data(const std::string& path, const TensorList& t);
TensorList read_tensor_data(const std::string& path, const Manifest& m);

// ---- comparisons ---------------------------------------------------------------------------

// |ord(a) - ord(b)| with sign-magnitude bit patterns mapped to ordered
// integers (as first_bit_difference): 0 for +0/-0, 1 between neighbours.
int64_t ulp_distance(float a, float b);

struct TensorDiff {
  std::string tensor;
  int64_t index = -1;  // first differing element (or the first missing one)
  float a = 0, b = 0;  // values there
  int64_t ulp = 0;     // ULP distance there
  int64_t max_ulp = 0; // over the whole tensor
  int64_t n_diff = 0;  // differing elements
  std::string problem; // non-empty: missing tensor or size mismatch
  std::string summary() const;
};

// Every tensor of `a` and `b` that differs bitwise (matched by position and
// name), in order. Empty: identical.
std::vector<TensorDiff> diff_tensor_lists(const TensorList& a, const TensorList& b);
// Names whose count or hash differ (or that only one side has).
std::vector<std::string> diff_manifests(const Manifest& a, const Manifest& b);

// Compares every run with the first (the reference, kept in memory).
class RerunChecker {
 public:
  explicit RerunChecker(std::string what) : what_(std::move(what)) {}
  void add_run(const TensorList& t);

  int runs() const { return runs_; }
  bool identical() const { return first_bad_run_ < 0; }
  uint64_t reference_hash() const { return ref_hash_; }
  int distinct_hashes() const { return int(hashes_.size()); }
  int first_mismatch_run() const { return first_bad_run_; }  // -1 when identical
  // The differing tensors of the first mismatching run vs run 0 (empty when identical).
  const std::vector<TensorDiff>& first_mismatch() const { return first_diffs_; }
  int64_t max_ulp() const { return max_ulp_; }  // over all runs and tensors
  std::string report() const;                  // readable, several lines

 private:
  std::string what_;
  int runs_ = 0;
  TensorList ref_;
  Manifest ref_manifest_;
  uint64_t ref_hash_ = 0;
  std::vector<uint64_t> hashes_;  // distinct combined hashes, in order of appearance
  int first_bad_run_ = -1;
  std::vector<TensorDiff> first_diffs_;
  int64_t max_ulp_ = 0;
};

// ---- validation JSON ("determinism" rows) ---------------------------------------------------

constexpr const char* kDeterminismJsonEnv = "MAMBACHECK_DETERMINISM_JSON";

struct DeterminismRow {
  std::string id;  // unique key in the file: a row with the same id is replaced
  std::string test, dtype, scan;
  int runs = 0;
  uint64_t hash = 0;          // combined hash of the first run
  bool identical = true;
  int64_t first_diff_index = -1;
  int64_t ulp = 0;            // ULP distance at first_diff_index
  bool expected_identical = true;  // false for negative controls
  bool required = true;            // false: measured and reported, not asserted
  std::string tensor;              // first differing tensor (or what was compared)
  int64_t max_ulp = 0;
  int device = -1;
  std::string note;
};

// The row from a RerunChecker.
DeterminismRow row_from(const RerunChecker& c, std::string id, std::string test, std::string dtype,
                        std::string scan, std::string note);

// One line, no trailing comma; encoded with report_json.hpp.
std::string to_json_line(const DeterminismRow& r);

// Adds `rows` to the validation JSON at `path` (created if absent): rows whose
// id is already there are replaced, the others kept; `context_json` (a JSON
// object) replaces the context. Safe against concurrent writers (flock on
// <path>.lock, write to a temporary file, rename). Throws std::runtime_error.
void merge_determinism_json(const std::string& path, const std::string& context_json,
                            const std::vector<DeterminismRow>& rows);

}  // namespace mc::check
