// ctest-labels: cpu;determinism
// test_determinism_tools.cpp — device-free checks of the determinism machinery
// that test_determinism (GPU) relies on: the rerun checker, the manifest files,
// the JSON writer, the sample selection, the CTest GPU-allocation parser and
// the child runner (with determinism_probe, which exits before any CUDA call on
// a bad command line). They need no GPU and no CUDA toolkit, so `ctest -L cpu`
// runs them on every machine.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "check/determinism.hpp"
#include "check/gpu_allocation.hpp"
#include "check/problem.hpp"
#include "validation/support/child_process.hpp"
#include "validation/support/determinism_cases.hpp"

namespace mc::testing {
namespace {

using check::DeterminismRow;
using check::RerunChecker;
using check::TensorDiff;
using check::TensorList;

TensorList sample_list() {
  TensorList t;
  t.push_back({"a", {1.f, -2.f, 3.5f}});
  t.push_back({"b", std::vector<float>(100, 0.25f)});
  for (int i = 0; i < 100; ++i) t[1].values[size_t(i)] = float(i) * 0.125f - 3.f;
  return t;
}

float next_up(float x) { return std::nextafter(x, INFINITY); }

TEST(DeterminismChecker, IdenticalRunsAreIdentical) {
  RerunChecker c("synthetic");
  for (int i = 0; i < 5; ++i) c.add_run(sample_list());
  EXPECT_TRUE(c.identical()) << c.report();
  EXPECT_EQ(c.runs(), 5);
  EXPECT_EQ(c.distinct_hashes(), 1);
  EXPECT_EQ(c.first_mismatch_run(), -1);
}

TEST(DeterminismChecker, NamesRunTensorIndexAndUlpOfAOneUlpChange) {
  RerunChecker c("synthetic");
  c.add_run(sample_list());
  c.add_run(sample_list());
  TensorList bad = sample_list();
  bad[1].values[37] = next_up(bad[1].values[37]);  // one ulp, one element
  bad[1].values[90] = -bad[1].values[90];          // and a sign flip further on
  c.add_run(bad);
  c.add_run(sample_list());
  ASSERT_FALSE(c.identical());
  EXPECT_EQ(c.first_mismatch_run(), 2);
  EXPECT_EQ(c.distinct_hashes(), 2);
  ASSERT_EQ(c.first_mismatch().size(), 1u);
  const TensorDiff& d = c.first_mismatch()[0];
  EXPECT_EQ(d.tensor, "b");
  EXPECT_EQ(d.index, 37);
  EXPECT_EQ(d.ulp, 1);
  EXPECT_EQ(d.n_diff, 2);
  const float v90 = sample_list()[1].values[90];
  EXPECT_EQ(d.max_ulp, check::ulp_distance(v90, -v90));
  EXPECT_NE(c.report().find("run 2"), std::string::npos) << c.report();
  EXPECT_NE(c.report().find("index 37"), std::string::npos) << c.report();

  const DeterminismRow row = check::row_from(c, "x", "t", "f32", "parallel", "");
  EXPECT_FALSE(row.identical);
  EXPECT_EQ(row.first_diff_index, 37);
  EXPECT_EQ(row.ulp, 1);
  EXPECT_EQ(row.tensor, "b");
}

TEST(DeterminismChecker, SignedZeroIsABitDifferenceAtZeroUlp) {
  TensorList a{{"z", {0.f, 1.f}}}, b{{"z", {-0.f, 1.f}}};
  const auto d = check::diff_tensor_lists(a, b);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].index, 0);
  EXPECT_EQ(d[0].ulp, 0);
}

TEST(DeterminismChecker, MissingAndResizedTensorsAreReported) {
  TensorList a = sample_list(), b = sample_list();
  b[0].values.push_back(7.f);
  b.push_back({"extra", {1.f}});
  const auto d = check::diff_tensor_lists(a, b);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NE(d[0].problem.find("sizes differ"), std::string::npos) << d[0].summary();
  EXPECT_EQ(d[1].tensor, "extra");
  EXPECT_NE(d[1].problem.find("only in the second"), std::string::npos) << d[1].summary();
}

TEST(DeterminismChecker, UlpDistanceAgreesWithFirstBitDifference) {
  check::SplitMix64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const float a = float(rng.normal() * std::ldexp(1.0, int(rng.next() % 40) - 20));
    float b = a;
    const int steps = int(rng.next() % 5);
    for (int s = 0; s < steps; ++s) b = next_up(b);
    if (rng.next() % 7 == 0) b = -b;
    const check::BitDiff bd = check::first_bit_difference(&a, &b, 1);
    EXPECT_EQ(check::ulp_distance(a, b), bd.index < 0 ? 0 : bd.ulp) << a << " vs " << b;
  }
  EXPECT_EQ(check::ulp_distance(1.f, next_up(1.f)), 1);
  EXPECT_EQ(check::ulp_distance(-std::ldexp(1.f, -149), std::ldexp(1.f, -149)), 2);
}

TEST(DeterminismChecker, ManifestTextRoundTripsAndRejectsMalformedLines) {
  const check::Manifest m = check::make_manifest(sample_list());
  const std::string text = check::manifest_to_text(m, "header line 1\nheader line 2");
  EXPECT_EQ(text.rfind("# header line 1\n# header line 2\n", 0), 0u) << text;
  const check::Manifest back = check::manifest_from_text(text, "mem");
  ASSERT_EQ(back.size(), m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(back[i].name, m[i].name);
    EXPECT_EQ(back[i].count, m[i].count);
    EXPECT_EQ(back[i].hash, m[i].hash);
  }
  EXPECT_TRUE(check::diff_manifests(m, back).empty());
  try {
    check::manifest_from_text("# h\na 3 0x0123\n", "bad.manifest");
    FAIL() << "a short hash was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.manifest:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check::manifest_from_text("a 3 0x0123456789abcdef extra\n", "x"), std::runtime_error);
  check::Manifest changed = m;
  changed[0].hash ^= 1;
  const auto names = check::diff_manifests(m, changed);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0], "a");
}

TEST(DeterminismChecker, CombinedHashIsTheHashOfTheConcatenation) {
  const TensorList t = sample_list();
  std::vector<float> all;
  for (const auto& x : t) all.insert(all.end(), x.values.begin(), x.values.end());
  EXPECT_EQ(check::combined_hash(t), check::fnv1a64(all.data(), all.size() * sizeof(float)));
}

TEST(DeterminismChecker, TensorDataFilesRoundTrip) {
  TempDir dir;
  const TensorList t = sample_list();
  const std::string mf = dir.file("t.manifest"), df = dir.file("t.data");
  check::write_manifest(mf, check::make_manifest(t), "test");
  check::write_tensor_data(df, t);
  const check::Manifest m = check::read_manifest(mf);
  const TensorList back = check::read_tensor_data(df, m);
  EXPECT_TRUE(check::diff_tensor_lists(t, back).empty());
  check::Manifest longer = m;
  longer[0].count += 1;
  EXPECT_THROW(check::read_tensor_data(df, longer), std::runtime_error);
}

TEST(DeterminismChecker, JsonRowsAreMergedByIdAndNothingElseIsOverwritten) {
  TempDir dir;
  const std::string path = dir.file("det.json");
  dir.file("det.json.lock");
  DeterminismRow a, b, a2, c;
  a.id = "t/a";
  a.test = "in_process_rerun_forward";
  a.dtype = "f32";
  a.scan = "parallel ds16";
  a.runs = 10;
  a.hash = 0x1234;
  b = a;
  b.id = "t/b";
  b.note = "quote \" and backslash \\ and newline \n";
  a2 = a;
  a2.identical = false;
  a2.first_diff_index = 5;
  a2.ulp = 3;
  c = a;
  c.id = "t/c";
  check::merge_determinism_json(path, "{\"gpu_name\": \"first\"}", {a, b});
  check::merge_determinism_json(path, "{\"gpu_name\": \"second\"}", {a2, c});
  // read back as JSON (the file is parsed and written with nlohmann-json, not by lines)
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(path));
  EXPECT_EQ(doc["schema"], "mambacheck-validation/1");
  EXPECT_EQ(doc["context"]["gpu_name"], "second");
  // a replaced in place (identical false now), b kept, c appended: 3 rows in order a, b, c
  const nlohmann::json& rows = doc["determinism"];
  ASSERT_EQ(rows.size(), 3u) << doc.dump(2);
  EXPECT_EQ(rows[0]["id"], "t/a");
  EXPECT_EQ(rows[1]["id"], "t/b");
  EXPECT_EQ(rows[2]["id"], "t/c");
  EXPECT_EQ(rows[0]["identical"], false);
  EXPECT_EQ(rows[0]["first_diff_index"], 5);
  EXPECT_EQ(rows[0]["ulp"], 3);
  EXPECT_EQ(rows[1]["note"], "quote \" and backslash \\ and newline \n");
  EXPECT_EQ(rows[2]["hash"], "0x0000000000001234");
  // a foreign file is never overwritten
  const std::string foreign = dir.file("foreign.json");
  dir.file("foreign.json.lock");
  { std::ofstream(foreign) << "{\"precision\": []}\n"; }
  EXPECT_THROW(check::merge_determinism_json(foreign, "{}", {a}), std::runtime_error);
}

TEST(DeterminismChecker, SamplesAreSelectedAndSlicedConsistently) {
  ModelConfig cfg = det::config(16);
  const check::ModelInputs pool = check::make_model_inputs(cfg, 3, 5, 11);
  const check::ModelInputs same = check::select_samples(pool, {0, 1, 2});
  EXPECT_EQ(same.X, pool.X);
  EXPECT_EQ(same.conv0, pool.conv0);
  EXPECT_EQ(same.ssm0, pool.ssm0);
  EXPECT_EQ(same.d_out, pool.d_out);
  // fake outputs whose every element encodes (tensor, position): slicing sample
  // 2 of the pool must give what sample 0 of the 1-sample selection gives
  const Dims d = Dims::from(cfg);
  auto fake = [&](const check::ModelInputs& in) {
    check::ModelOutputs<float> o;
    o.out = in.d_out;  // rows follow the samples like out's
    o.dX = in.X;
    o.conv_final = in.conv0;
    o.ssm_final = in.ssm0;
    o.d_conv0 = in.conv0;
    o.d_ssm0 = in.ssm0;
    o.grads = in.params;
    return o;
  };
  const check::ModelInputs one = check::select_samples(pool, {2});
  EXPECT_EQ(one.B, 1);
  EXPECT_EQ(int64_t(one.X.size()), 5 * d.mid);
  const auto a = check::sample_tensors(pool, fake(pool), 2);
  const auto b = check::sample_tensors(one, fake(one), 0);
  EXPECT_TRUE(check::diff_tensor_lists(a, b).empty());
  EXPECT_FALSE(check::diff_tensor_lists(a, check::sample_tensors(pool, fake(pool), 1)).empty());
  EXPECT_THROW(check::select_samples(pool, {3}), std::out_of_range);
}

TEST(GpuAllocation, ParsesCtestResourceVariables) {
  const GpuAllocation off = parse_gpu_allocation(nullptr, nullptr);
  EXPECT_FALSE(off.active);
  EXPECT_EQ(off.device, 0);
  const GpuAllocation one = parse_gpu_allocation("1", "id:1,slots:1");
  EXPECT_TRUE(one.active);
  EXPECT_TRUE(one.error.empty()) << one.error;
  EXPECT_EQ(one.device, 1);
  EXPECT_EQ(parse_gpu_allocation("1", "id:3,slots:2;id:0,slots:1").device, 3);
  const GpuAllocation bad = parse_gpu_allocation("1", "id:gpu0,slots:1");
  EXPECT_NE(bad.error.find("CTEST_RESOURCE_GROUP_0_GPUS"), std::string::npos) << bad.error;
  EXPECT_NE(bad.error.find("id:gpu0,slots:1"), std::string::npos) << bad.error;
  EXPECT_NE(parse_gpu_allocation("1", nullptr).error.find("RESOURCE_GROUPS"), std::string::npos);
  EXPECT_NE(parse_gpu_allocation("x", "id:0,slots:1").error.find("CTEST_RESOURCE_GROUP_COUNT"),
            std::string::npos);
  // what CTest sets for a test without RESOURCE_GROUPS under a spec file
  EXPECT_NE(parse_gpu_allocation("0", nullptr).error.find("RESOURCE_GROUPS"), std::string::npos);
  // spread mode (no RESOURCE_LOCK) without a spec file is refused, with one it is fine
  EXPECT_NE(parse_gpu_allocation(nullptr, nullptr, "1").error.find("--resource-spec-file"),
            std::string::npos);
  EXPECT_TRUE(parse_gpu_allocation(nullptr, nullptr, "0").error.empty());
  EXPECT_TRUE(parse_gpu_allocation("1", "id:1,slots:1", "1").error.empty());
}

TEST(ChildProcess, OutputGoesToTheLogAndVerdictLinesAreNeutralised) {
  const std::string probe = probe_path();
  ASSERT_EQ(access(probe.c_str(), X_OK), 0) << probe << " missing (target determinism_probe)";
  TempDir dir;
  const std::string log = dir.file("usage.log");
  const ChildResult c = run_child(probe, {"--no-such-flag", "x"}, log, 60);
  ASSERT_TRUE(c.exited) << c.describe();
  EXPECT_EQ(c.exit_code, 2) << c.log;
  EXPECT_NE(c.log.find("usage: determinism_probe"), std::string::npos) << c.log;
  const std::string q = quote_child_log("[  SKIPPED ] X.Y\n[       OK ] A.B\n");
  EXPECT_EQ(q.find("[  SKIPPED ]"), std::string::npos) << q;
  EXPECT_EQ(q.find("[       OK ]"), std::string::npos) << q;
  EXPECT_NE(q.find("child> |  SKIPPED | X.Y"), std::string::npos) << q;
}

}  // namespace
}  // namespace mc::testing
