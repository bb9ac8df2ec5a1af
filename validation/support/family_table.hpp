// family_table.hpp — the per-family summary the mixed-precision suites print
// (test_precision.cpp, test_precision_model.cpp through precision_harness.hpp): one
// line per tensor family (layer index dropped), with the worst tensor's k and metrics
// and the family's largest headroom, and a last line that states the rule, so that a
// k above 2 on a passing test reads as what it is (a pass through the rule's atol
// term), not as a failure. Header only (it records through GoogleTest); unit-tested on
// the CPU in validation/cpu/test_compare.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "check/model_check.hpp"

namespace mc::testing {

// "layers.3.conv_final" -> "conv_final", "grad.layers.0.in_proj_w" -> "grad.in_proj_w",
// "out" / "grad.input_proj_w" unchanged. A setup note in parentheses is dropped.
inline std::string tensor_family(const std::string& tensor) {
  std::string s = tensor.substr(0, tensor.find(" ("));
  const std::string key = "layers.";
  const size_t p = s.find(key);
  if (p == std::string::npos) return s;
  size_t q = p + key.size();
  while (q < s.size() && std::isdigit(static_cast<unsigned char>(s[q]))) ++q;
  if (q < s.size() && s[q] == '.' && q > p + key.size()) s.erase(p, q + 1 - p);
  return s;
}

// Per family over every comparison added (cases, scan modes): the tensor with the largest
// k (a failing or non-finite one always wins), the largest headroom (max|K-O| / bound,
// <= 1 passes: the rule's own margin), and how many tensors passed only through atol.
class FamilyTable {
 public:
  void add(const check::Comparison& c, const std::string& scan) {
    for (const check::KRuleResult& r : c.tensors) {
      const std::string fam = tensor_family(r.tensor);
      const double hr = std::isnan(r.headroom) ? std::numeric_limits<double>::infinity()
                                               : r.headroom;
      if (r.passes_through_atol()) ++passed_through_atol_;
      auto it = rows_.find(fam);
      if (it == rows_.end()) {
        order_.push_back(fam);
        rows_[fam] = Row{r, scan, c.label, 1, hr};
        continue;
      }
      Row& w = it->second;
      ++w.count;
      w.max_headroom = std::max(w.max_headroom, hr);
      const bool worse =
          (!r.verdict() && w.r.verdict()) || (r.verdict() == w.r.verdict() && !(r.k <= w.r.k));
      if (worse) {
        w.r = r;
        w.scan = scan;
        w.label = c.label;
      }
    }
  }
  bool empty() const { return rows_.empty(); }
  // The largest finite k of any family (the ratio; a tensor may pass above the limit
  // through atol, so this is not the verdict).
  double max_k() const {
    double k = 0;
    for (const auto& [f, w] : rows_)
      if (std::isfinite(w.r.k)) k = std::max(k, w.r.k);
    return k;
  }
  // The largest headroom of any tensor (<= 1 when every tensor passes the k-rule).
  double max_headroom() const {
    double h = 0;
    for (const auto& [f, w] : rows_) h = std::max(h, w.max_headroom);
    return h;
  }
  // Tensors that passed with k over the limit, through the atol term alone.
  int passed_through_atol() const { return passed_through_atol_; }
  bool all_pass() const {
    for (const auto& [f, w] : rows_)
      if (!w.r.verdict()) return false;
    return !rows_.empty();
  }
  // One line per family: the worst tensor's k and metrics, where it was, and the family's
  // largest headroom; then the rule, the maxima and the count of passes through atol.
  std::string str(const std::string& title, bool with_case) const {
    std::ostringstream os;
    char buf[480];
    os << title << "\n";
    std::snprintf(buf, sizeof buf, "  %-22s %5s %8s %8s  %-26s %10s %10s %9s %9s %6s %-10s%s\n",
                  "family", "n", "max k", "headroom", "tensor (worst k)", "max|K-O|", "max|P-O|",
                  "max rel", "nmse", "ulp", "scan", with_case ? "  case" : "");
    os << buf;
    double k_limit = 0;
    for (const std::string& f : order_) {
      const Row& w = rows_.at(f);
      k_limit = std::max(k_limit, w.r.k_limit);
      std::snprintf(buf, sizeof buf,
                    "  %-22s %5d %8.3g %8.3g  %-26s %10.3g %10.3g %9.3g %9.3g %6.0f %-10s%s%s%s%s\n",
                    f.c_str(), w.count, w.r.k, w.max_headroom, w.r.tensor.substr(0, 26).c_str(),
                    w.r.kernel.max_abs, w.r.baseline.max_abs, w.r.kernel.max_rel, w.r.kernel.nmse,
                    w.r.kernel.max_ulp, w.scan.c_str(), w.r.verdict() ? "" : " FAIL",
                    w.r.passes_through_atol() ? " (k over the limit: passes through atol)" : "",
                    with_case ? "  " : "", with_case ? w.label.c_str() : "");
      os << buf;
    }
    std::snprintf(buf, sizeof buf,
                  "  the rule: max|K-O| <= %.3g * e_P + atol (2 ulp at max|O|), i.e. headroom <= 1;"
                  " k = max|K-O| / e_P may pass above %.3g through atol\n"
                  "  max k over all families: %.3g; largest headroom: %.3g (%s); %d tensor(s)"
                  " passed through atol with k over %.3g\n",
                  k_limit, k_limit, max_k(), max_headroom(),
                  max_headroom() <= 1 ? "<= 1" : "over 1", passed_through_atol(), k_limit);
    os << buf;
    return os.str();
  }
  // RecordProperty("<prefix>kmax.<family>", k) and "<prefix>headroom_max.<family>" for every
  // family.
  void record(const std::string& prefix) const {
    for (const std::string& f : order_) {
      ::testing::Test::RecordProperty(prefix + "kmax." + f, std::to_string(rows_.at(f).r.k));
      ::testing::Test::RecordProperty(prefix + "headroom_max." + f,
                                      std::to_string(rows_.at(f).max_headroom));
    }
  }

 private:
  struct Row {
    check::KRuleResult r;
    std::string scan, label;
    int count = 0;
    double max_headroom = 0;
  };
  std::vector<std::string> order_;
  std::map<std::string, Row> rows_;
  int passed_through_atol_ = 0;
};

}  // namespace mc::testing
