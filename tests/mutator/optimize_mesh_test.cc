// The one driver on a mesh (mutator/optimize.h): the sharding search runs
// over the rewrite search's plan, so a mesh never predicts worse than no
// mesh, tp=1 is no mesh, a rewrite the single-device plan made stays on
// the ranks, and every flag means the same with and without a mesh.
#include <gtest/gtest.h>

#include <random>

#include "graph/error.h"
#include "graph/hash.h"
#include "mutator/optimize.h"
#include "report/report.h"
#include "tests/mutator/mutator_test_util.h"
#include "tools/api/tessera.h"

namespace tessera::mutator {
namespace {

const std::string kMeshExamples = std::string(TESSERA_SOURCE_DIR) + "/examples";
// The reference host's profile, not this machine's: what the search
// chooses must not depend on where the test runs.
const std::string kReferenceCpu = std::string(TESSERA_SOURCE_DIR) + "/cost/profiles/cpu.json";

// 3x3 convolutions with their Relus, as a VGG or CSRNet stage.
Graph mesh_conv_stack(int64_t channels = 64, int64_t size = 56, int layers = 3) {
  std::mt19937_64 rng(5);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, channels, size, size}});
  for (int i = 0; i < layers; ++i) {
    Attrs a = testing::conv_attrs(3, 1);
    a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    std::string n = "/layer" + std::to_string(i);
    ValueId w = testing::weight(g, n + ".w", {channels, channels, 3, 3}, rng);
    ValueId b = testing::weight(g, n + ".b", {channels}, rng);
    x = g.add(OpKind::kRelu, {g.add(OpKind::kConv, {x, w, b}, a, n + "/Conv")}, {}, n + "/Relu");
  }
  g.set_outputs({x});
  return g;
}

OptimizeOptions mesh_options(const std::string& device, const std::string& mesh) {
  OptimizeOptions o;
  o.device = device;
  o.mesh = DeviceMesh::parse(mesh);
  o.budget_s = 8;
  o.threads = 2;
  return o;
}

int convs_3x3(const Graph& g) {
  int n = 0;
  for (NodeId k = 0; k < g.num_nodes(); ++k)
    n += g.node(k).kind == OpKind::kConv && g.node(k).attrs.ints("kernel_shape") == std::vector<int64_t>{3, 3};
  return n;
}

int applied_count(const SearchResult& s, const std::string& rule) {
  int n = 0;
  for (const AppliedMutation& a : s.applied) n += a.rule == rule;
  return n;
}

TEST(OptimizeMesh, AMeshNeverPredictsWorseThanNoMesh) {
  std::vector<std::pair<std::string, Graph>> models = {
      {"tiny_cnn", api::load(kMeshExamples + "/tiny_cnn.onnx")},
      {"tiny_transformer", api::load(kMeshExamples + "/tiny_transformer.onnx")},
      {"conv_stack", mesh_conv_stack()}};
  for (const auto& [name, g] : models)
    for (const std::string& device : {kReferenceCpu, std::string("h100")}) {
      Plan single = optimize(g, mesh_options(device, ""));
      for (const char* mesh : {"tp=2", "tp=4"}) {
        Plan p = optimize(g, mesh_options(device, mesh));
        EXPECT_LE(p.cost_after_s, single.cost_after_s * (1 + 1e-9))
            << name << " on " << device << " " << mesh << ": " << p.sharding_search.why;
        // The degree curve's one device is the single-device plan.
        EXPECT_NEAR(p.cost_single_s, single.cost_after_s, 1e-12) << name << " " << mesh;
        const DegreePoint& one = p.sharding_search.curve[0];
        ASSERT_EQ(one.mesh.num_devices(), 1);
        EXPECT_NEAR(one.predicted_s, single.cost_after_s, 1e-12 + 1e-9 * single.cost_after_s) << name << " " << mesh;
        EXPECT_TRUE(p.check.passed) << p.check.summary();
      }
    }
}

TEST(OptimizeMesh, TpOneIsNoMesh) {
  Graph g = api::load(kMeshExamples + "/tiny_cnn.onnx");
  Plan none = optimize(g, mesh_options(kReferenceCpu, ""));
  Plan one = optimize(g, mesh_options(kReferenceCpu, "tp=1"));
  EXPECT_FALSE(one.is_mesh());
  EXPECT_TRUE(structurally_equal(none.optimized, one.optimized));
  EXPECT_EQ(report::plan_json(none, false), report::plan_json(one, false));
}

// Winograd pays on the whole convolution and on each rank's share of its
// output channels: the ranks keep what the single-device plan found (512
// channels at 28x28 on the H100 profile: Winograd halves the one-device
// time, and the split of its batched products over 4 devices pays).
// The budget is one the searches end well within (5.7 s in all on 2 cores
// at -O2), so that what they find does not depend on the build's speed (a
// sanitizer build ran out of 8 s before verifying Winograd).
TEST(OptimizeMesh, ARankKeepsTheSingleDeviceRewrites) {
  Graph g = mesh_conv_stack(512, 28, 2);
  auto options = [](const std::string& mesh) {
    OptimizeOptions o = mesh_options("h100", mesh);
    o.budget_s = 300;
    return o;
  };
  Plan single = optimize(g, options(""));
  ASSERT_GT(applied_count(single.search, "conv-winograd"), 0) << report::report_text(single, nullptr);
  ASSERT_FALSE(single.search.stats.budget_exhausted);
  Plan p = optimize(g, options("tp=4"));
  ASSERT_TRUE(p.is_mesh()) << p.sharding_search.why;
  EXPECT_EQ(applied_count(p.search, "conv-winograd"), applied_count(single.search, "conv-winograd"));
  // Winograd's form has no 3x3 convolution left (its input transform is a
  // 6x6 one of stride 4 on every channel) and a batched product per layer.
  for (const Graph& rank : p.ranks) {
    EXPECT_EQ(convs_3x3(rank), 0);
    EXPECT_GE(testing::count(rank, OpKind::kMatMul), 2);
  }
  EXPECT_TRUE(p.check.passed) << p.check.summary();
}

TEST(OptimizeMesh, FlagsMeanTheSameOnAMesh) {
  Graph g = mesh_conv_stack();
  OptimizeOptions o = mesh_options(kReferenceCpu, "tp=2");
  o.disabled_rules = {"conv-winograd"};
  Plan p = optimize(g, o);
  EXPECT_EQ(applied_count(p.search, "conv-winograd"), 0);
  EXPECT_EQ(applied_count(p.rank_search, "conv-winograd"), 0);
  for (const Graph& rank : p.ranks) EXPECT_GT(convs_3x3(rank), 0);

  auto usage = [&](OptimizeOptions bad, const std::string& says) {
    try {
      optimize(g, bad);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  OptimizeOptions bad = mesh_options(kReferenceCpu, "");
  bad.shard_rewrite = "none";
  usage(bad, "--shard-rewrite needs a mesh");
  bad = mesh_options(kReferenceCpu, "tp=1");
  bad.specs = {"x=[R]"};
  usage(bad, "--shard and --shard-file need a mesh");
  bad = mesh_options(kReferenceCpu, "tp=2");
  bad.disabled_rules = {"no-such-rule"};
  usage(bad, "unknown rule 'no-such-rule'");
}

}  // namespace
}  // namespace tessera::mutator
