// The reports of a plan (report/report.h): one writer per format for every
// plan, one device or a mesh, checked on what each form must say.
#include "report/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "graph/graph.h"
#include "tests/mutator/mutator_test_util.h"

namespace tessera::report {
namespace {

using nlohmann::json;

mutator::Plan plan_for(const std::string& mesh, const std::vector<std::string>& specs, bool search) {
  mutator::OptimizeOptions o;
  o.device = cost::resolve_device("h100");
  o.mesh = DeviceMesh::parse(mesh);
  o.specs = specs;
  o.shard_search = search;
  o.budget_s = 5;
  return mutator::optimize(mutator::testing::torch_like_mlp(), o);
}

TEST(Reports, AMeshPlanNamesItsShardingsCollectivesAndRanks) {
  mutator::Plan p = plan_for("tp=2", {"*/fc1/MatMul:in1=[S(1)]", "*/fc2/MatMul:in1=[S(0)]"}, false);
  ASSERT_TRUE(p.is_mesh());
  json j = json::parse(plan_json(p));
  EXPECT_EQ(j["format_version"], 5);
  EXPECT_EQ(j["mesh"], "tp=2");
  EXPECT_EQ(j["sharding"]["tensors"]["onnx::MatMul_1144"], "[S(1)]");
  EXPECT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["collectives"].size(), 1u);
  EXPECT_FALSE(j.contains("model"));
  EXPECT_TRUE(j["sharding_search"].is_null());
  EXPECT_TRUE(j["mutations"].is_array());
  std::string text = report_text(p, nullptr);
  EXPECT_NE(text.find("1 x AllReduce over tp"), std::string::npos) << text;
  EXPECT_NE(text.find("mesh tp=2"), std::string::npos) << text;
  json r = json::parse(report_json(p, nullptr));
  EXPECT_EQ(r["collective_counts"]["AllReduce"], 1);
  std::string html = report_html(p, nullptr);
  EXPECT_NE(html.find("rank 1 (rank1.onnx)"), std::string::npos);
  EXPECT_NE(html.find("SPMD lowering"), std::string::npos);
}

TEST(Reports, AOneDevicePlanNamesItsModelAndNoMesh) {
  mutator::Plan p = plan_for("", {}, true);
  ASSERT_FALSE(p.is_mesh());
  json j = json::parse(plan_json(p));
  EXPECT_EQ(j["model"], "model.onnx");
  for (const char* key : {"mesh", "ranks", "collectives", "sharding"}) EXPECT_FALSE(j.contains(key)) << key;
  EXPECT_TRUE(j["sharding_search"].is_null());
  EXPECT_EQ(report_text(p, nullptr).find("sharding search"), std::string::npos);
}

// A mesh offered to a model too small to split: one device is chosen, the
// plan is the single-device one, and every report says why.
TEST(Reports, OneDeviceChosenOnAMeshSaysWhy) {
  mutator::Plan p = plan_for("tp=2", {}, true);
  ASSERT_TRUE(p.shard_searched);
  ASSERT_FALSE(p.is_mesh()) << p.sharding_search.why;
  json j = json::parse(plan_json(p));
  EXPECT_EQ(j["model"], "model.onnx");
  EXPECT_EQ(j["sharding_search"]["chosen_mesh"], "1");
  EXPECT_EQ(j["sharding_search"]["offered_mesh"], "tp=2");
  EXPECT_GE(j["sharding_search"]["degree_curve"].size(), 2u);
  EXPECT_NE(report_text(p, nullptr).find("sharding search: no split"), std::string::npos);
  EXPECT_NE(report_html(p, nullptr).find("Degree curve"), std::string::npos);
}

// The timing-free plan.json of one plan is the same bytes each time.
TEST(Reports, PlanJsonWithoutTimingIsDeterministic) {
  EXPECT_EQ(plan_json(plan_for("tp=2", {}, true), false), plan_json(plan_for("tp=2", {}, true), false));
}

}  // namespace
}  // namespace tessera::report
