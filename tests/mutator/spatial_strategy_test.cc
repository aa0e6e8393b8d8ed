// Spatial splits inside the sharding search (mutator/sharding/
// spatial_strategy.h): an image's rows split in bands stay split through
// convolutions (with a halo exchange), pooling and residual additions, are
// reduced by a global pool, and the partitioned ranks equal the model.
#include "mutator/sharding/spatial_strategy.h"

#include <gtest/gtest.h>

#include <random>

#include "mutator/sharding/partition.h"
#include "mutator/sharding/propagate.h"
#include "mutator/sharding/shard_search.h"
#include "tests/mutator/mutator_test_util.h"
#include "verifier/plan_check.h"
#include "verifier/program.h"

namespace tessera::mutator {
namespace {

using testing::conv_attrs;
using testing::weight;

// x [1, C, H, W] -> stem Conv 3x3 -> Relu -> (Conv 3x3 -> Relu -> Conv 3x3)
// + stem -> Relu -> Conv 3x3 stride 2 -> MaxPool 2x2 -> GlobalAveragePool
// -> Flatten -> Gemm: a ResNet block in small.
Graph residual_cnn(int64_t c, int64_t h, int64_t w, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Graph g;
  ValueId x = g.add_input("image", {DType::kF32, {1, 3, h, w}});
  auto conv = [&](ValueId in, int64_t k, int64_t stride, int64_t pad, const std::string& name) {
    int64_t cin = g.type(in).shape[1];
    ValueId wt = weight(g, name + "/w", {c, cin, k, k}, rng);
    ValueId b = weight(g, name + "/b", {c}, rng);
    return g.add(OpKind::kConv, {in, wt, b}, conv_attrs(k, stride, pad), name);
  };
  ValueId stem = g.add(OpKind::kRelu, {conv(x, 3, 1, 1, "stem")}, {}, "stem/relu");
  ValueId a = g.add(OpKind::kRelu, {conv(stem, 3, 1, 1, "block/conv1")}, {}, "block/relu1");
  ValueId sum = g.add(OpKind::kAdd, {conv(a, 3, 1, 1, "block/conv2"), stem}, {}, "block/add");
  ValueId r = g.add(OpKind::kRelu, {sum}, {}, "block/relu2");
  ValueId down = conv(r, 3, 2, 1, "down");
  Attrs pool = conv_attrs(2, 2, 0);
  ValueId p = g.add(OpKind::kMaxPool, {down}, pool, "pool");
  ValueId gap = g.add(OpKind::kGlobalAveragePool, {p}, {}, "gap");
  Attrs flat;
  flat.set("axis", int64_t{1});
  ValueId f = g.add(OpKind::kFlatten, {gap}, flat, "flatten");
  Attrs gemm;
  gemm.set("transB", int64_t{1});
  ValueId fc = weight(g, "fc/w", {10, c}, rng);
  g.set_outputs({g.add(OpKind::kGemm, {f, fc}, gemm, "fc")});
  return g;
}

bool spatial(const Strategy& s) {
  return std::any_of(s.axes.begin(), s.axes.end(), [](const AxisStrategy& a) { return is_spatial(a); });
}

int count_spatial(const Graph& g, const ShardedGraph& s) {
  int k = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) k += spatial(s.nodes[static_cast<size_t>(n)]);
  return k;
}

NodeId named(const Graph& g, const std::string& name) {
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (g.node(n).name == name) return n;
  ADD_FAILURE() << "no node " << name;
  return 0;
}

verifier::EndToEndReport check(const Graph& g, const ShardedGraph& s) {
  verifier::ShardedProgram sp;
  sp.mesh = s.mesh;
  sp.per_rank = partition(g, s).ranks;
  sp.input_shardings = s.inputs;
  sp.output_shardings = s.outputs;
  return verifier::check_end_to_end(verifier::Program(g), verifier::Program(sp));
}

TEST(SpatialStrategy, OfferedForWindowOpsWhereTheBandsDivide) {
  Graph g = residual_cnn(4, 16, 6, 1);
  DeviceMesh tp2 = DeviceMesh::parse("tp=2");
  // Rows (dim 2) and columns (dim 3) of each 3x3 convolution.
  EXPECT_EQ(spatial_strategies(g, g.node(named(g, "stem")), tp2).size(), 2u);
  EXPECT_EQ(spatial_strategies(g, g.node(named(g, "pool")), tp2).size(), 1u);  // 8x3 -> 4x1: 1 column
  EXPECT_TRUE(spatial_strategies(g, g.node(named(g, "block/add")), tp2).empty());
  // 18 rows do not cut into 4 even bands.
  Graph odd = residual_cnn(4, 18, 6, 1);
  for (const Strategy& s : spatial_strategies(odd, odd.node(named(odd, "stem")), DeviceMesh::parse("tp=4")))
    EXPECT_NE(s.inputs[0].placements[0], Placement::shard(2));
  // The deepest halo of a 3x3 pad-1 convolution: one row each way (a
  // middle rank), 3 channels x 6 columns of f32.
  std::vector<Strategy> st = spatial_strategies(g, g.node(named(g, "stem")), DeviceMesh::parse("tp=4"));
  ASSERT_FALSE(st.empty());
  EXPECT_EQ(st[0].axes[0].halo_bytes, 2 * 3 * 6 * 4);
}

TEST(SpatialStrategy, BandsSpreadThroughAResidualBlockAndTheRanksCheck) {
  Graph g = residual_cnn(4, 16, 6, 2);
  for (const char* mesh : {"tp=2", "tp=4"}) {
    DeviceMesh m = DeviceMesh::parse(mesh);
    Sharding rows;
    rows.placements = {Placement::shard(2)};
    ShardedGraph s = propagate(g, m, {{g.inputs()[0], rows, "test", false}}, testing::cpu());
    // Four convolutions and the pool run on bands; the residual Add keeps them.
    EXPECT_EQ(count_spatial(g, s), 5) << mesh << "\n" << describe(g, s);
    EXPECT_EQ(s.nodes[static_cast<size_t>(named(g, "block/add"))].outputs[0], rows) << mesh;
    RankPrograms ranks = partition(g, s);
    EXPECT_EQ(testing::count(ranks.ranks[0], OpKind::kHaloExchange), 4) << mesh;  // the 3x3 convolutions
    verifier::EndToEndReport r = check(g, s);
    EXPECT_TRUE(r.passed) << mesh << ": " << r.summary();
  }
}

// Where the rows do not divide, nothing is split on them: the bands the
// windowed ops would need are uneven, and the plan gathers (still correct).
TEST(SpatialStrategy, UnevenRowsAreGatheredAndStillCheck) {
  Graph g = residual_cnn(4, 18, 6, 3);
  DeviceMesh m = DeviceMesh::parse("tp=4");
  Sharding rows;
  rows.placements = {Placement::shard(3)};  // 6 columns do not divide by 4 either: the pin itself fails
  EXPECT_THROW(propagate(g, m, {{g.inputs()[0], rows, "test", false}}, testing::cpu()), Error);
  DeviceMesh m2 = DeviceMesh::parse("tp=2");
  rows.placements = {Placement::shard(2)};
  ShardedGraph s = propagate(g, m2, {{g.inputs()[0], rows, "test", false}}, testing::cpu());
  // 18 rows in 2 bands of 9; after the stride-2 convolution, 9 rows: odd.
  EXPECT_EQ(count_spatial(g, s), 3) << describe(g, s);
  EXPECT_TRUE(check(g, s).passed);
}

// The search offers the image's rows as a move and takes it where it pays:
// an H100 pair on a large image of a residual CNN.
TEST(SpatialStrategy, SearchSplitsALargeImageInBands) {
  Graph g = residual_cnn(64, 1024, 1024, 4);
  ShardSearchOptions o;
  o.mesh = DeviceMesh::parse("tp=2");
  o.budget_s = 30;
  ShardSearchResult r = search_shardings(g, testing::h100(), o);
  ASSERT_EQ(r.mesh.num_devices(), 2) << r.why;
  EXPECT_GE(count_spatial(r.graph, r.sharding), 5) << describe(r.graph, r.sharding);
  bool moved = false;
  for (const DegreePoint& p : r.curve)
    for (const std::string& m : p.moves) moved |= m.rfind("split rows of image", 0) == 0;
  EXPECT_TRUE(moved);
}

}  // namespace
}  // namespace tessera::mutator
