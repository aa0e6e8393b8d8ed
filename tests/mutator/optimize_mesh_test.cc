// The one driver on a mesh (mutator/optimize.h): the sharding search runs
// over the rewrite search's plan, so a mesh never predicts worse than no
// mesh, tp=1 is no mesh, a rewrite the single-device plan made stays on
// the ranks, and every flag means the same with and without a mesh.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "graph/error.h"
#include "graph/hash.h"
#include "graph/mapped_file.h"
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
  o.device = cost::resolve_device(device);
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

// Weights mapped from a file stay views of it through the optimizer: the
// plan's original and optimized graphs hold them as they were imported, and
// a rank's block of a row-split weight is a view at its offset, and a
// column-split weight's strided block is made when read (a Megatron MLP on
// tp=2): after the check read it, it holds no bytes until read again.
TEST(OptimizeMesh, MappedWeightsStayViewsThroughThePlan) {
  std::filesystem::path dir = std::filesystem::path(TESSERA_BINARY_DIR) / "optimize_mesh_mapped";
  std::filesystem::create_directories(dir);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<float> bytes(2 * 64 * 256);
  for (float& v : bytes) v = normal(rng);
  std::string path = (dir / "w.bin").string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() * 4));
  }
  auto file = MappedFile::open(path, "test");
  Tensor w1 = Tensor::mapped(DType::kF32, {64, 256}, file, 0);
  Tensor w2 = Tensor::mapped(DType::kF32, {256, 64}, file, 64 * 256 * 4);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 64}});
  ValueId h = g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {x, g.add_constant("fc1_w", w1)}, {}, "fc1")}, {}, "act");
  g.set_outputs({g.add(OpKind::kMatMul, {h, g.add_constant("fc2_w", w2)}, {}, "fc2")});
  OptimizeOptions o = mesh_options("h100", "tp=2");
  o.specs = {"fc1_w=[S(1)]", "fc2_w=[S(0)]"};
  o.shard_search = false;
  Plan plan = optimize(g, o);
  ASSERT_TRUE(plan.is_mesh());
  ASSERT_TRUE(plan.check.passed) << plan.check.summary();
  auto constants = [](const Graph& graph) {
    std::vector<const Tensor*> out;
    for (ValueId v = 0; v < graph.num_values(); ++v)
      if (graph.value(v).constant && graph.value(v).constant->numel() >= 64 * 64) out.push_back(&*graph.value(v).constant);
    return out;
  };
  for (const Graph* whole : {&plan.original, &plan.optimized}) {
    std::vector<const Tensor*> ws = constants(*whole);
    ASSERT_EQ(ws.size(), 2u);
    for (const Tensor* t : ws) EXPECT_TRUE(t->data() == w1.data() || t->data() == w2.data());
  }
  for (int64_t r = 0; r < 2; ++r) {
    int views = 0, made = 0;
    for (const Tensor* t : constants(plan.ranks[static_cast<size_t>(r)])) {
      if (t->shape() == Shape{128, 64}) {
        EXPECT_TRUE(t->is_view());
        EXPECT_FALSE(t->is_made());
        EXPECT_EQ(t->data(), w2.data() + r * 128 * 64 * 4);
        ++views;
      } else {
        EXPECT_EQ(t->shape(), (Shape{64, 128}));
        EXPECT_TRUE(t->is_made());
        EXPECT_EQ(t->get_double(128 + 1), w1.get_double(256 + r * 128 + 1));  // row 1, column 1 of its block
        ++made;
      }
    }
    EXPECT_EQ(views, 1) << "rank " << r;
    EXPECT_EQ(made, 1) << "rank " << r;
  }
}

}  // namespace
}  // namespace tessera::mutator
