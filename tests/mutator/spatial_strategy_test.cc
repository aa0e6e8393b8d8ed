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
  return testing::check_ranks(g, s, partition(g, s).ranks);
}

TEST(SpatialStrategy, OfferedForWindowOpsEvenAndUneven) {
  Graph g = residual_cnn(4, 16, 6, 1);
  DeviceMesh tp2 = DeviceMesh::parse("tp=2");
  // Rows (dim 2) and columns (dim 3) of each 3x3 convolution.
  EXPECT_EQ(spatial_strategies(g, g.node(named(g, "stem")), tp2).size(), 2u);
  for (const Strategy& s : spatial_strategies(g, g.node(named(g, "stem")), tp2)) EXPECT_FALSE(s.axes[0].uneven);
  // The pool: 8x3 -> 4x1: rows in 2 bands; one column cannot be cut in 2.
  EXPECT_EQ(spatial_strategies(g, g.node(named(g, "pool")), tp2).size(), 1u);
  EXPECT_TRUE(spatial_strategies(g, g.node(named(g, "block/add")), tp2).empty());
  // 18 rows in 4 uneven bands (5, 5, 4, 4), 6 columns in 4 (2, 2, 1, 1).
  Graph odd = residual_cnn(4, 18, 6, 1);
  std::vector<Strategy> uneven = spatial_strategies(odd, odd.node(named(odd, "stem")), DeviceMesh::parse("tp=4"));
  ASSERT_EQ(uneven.size(), 2u);
  EXPECT_EQ(uneven[0].inputs[0].placements[0], Placement::shard(2));
  EXPECT_TRUE(uneven[0].axes[0].uneven);
  // 2 rows of 3 ranks' bands of 3 rows each: every rank holds rows; 2 rows
  // on 4 ranks leave two without: not offered.
  Graph tiny = residual_cnn(4, 3, 8, 1);
  auto row_splits = [&](const char* mesh) {
    int k = 0;
    for (const Strategy& s : spatial_strategies(tiny, tiny.node(named(tiny, "stem")), DeviceMesh::parse(mesh)))
      k += s.inputs[0].placements[0] == Placement::shard(2);
    return k;
  };
  EXPECT_EQ(row_splits("tp=3"), 1);
  EXPECT_EQ(row_splits("tp=4"), 0);
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
    for (const char* op : {"stem", "down", "pool"}) {
      bool offered = false;
      for (const Strategy& st : spatial_strategies(g, g.node(named(g, op)), m))
        offered |= st.inputs[0] == rows;
      EXPECT_TRUE(offered) << op;
    }
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

// Where the rows do not divide, the bands are uneven (the first ranks one
// row more) and stay split: through the strided convolution that leaves 9
// rows on 2 ranks, the pool, the residual Add, and the global pool, whose
// ranks' means are weighed by their rows. Each rank's program has its own
// shapes; the ranks check against the model.
TEST(SpatialStrategy, UnevenBandsStaySplitAndCheck) {
  struct Case {
    const char* mesh;
    int64_t dim, h, w;
  };
  // Images large enough that splitting pays on the host profile (on a few
  // rows the cost model gathers rather than exchange, a choice, not a limit).
  for (Case c : {Case{"tp=2", 2, 90, 20}, Case{"tp=3", 2, 90, 20}, Case{"tp=4", 2, 90, 20}, Case{"tp=3", 2, 61, 20},
                 Case{"tp=4", 3, 20, 70}}) {
    SCOPED_TRACE(std::string(c.mesh) + " dim " + std::to_string(c.dim) + " " + std::to_string(c.h) + "x" +
                 std::to_string(c.w));
    Graph g = residual_cnn(8, c.h, c.w, 3);
    DeviceMesh m = DeviceMesh::parse(c.mesh);
    Sharding rows;
    rows.placements = {Placement::shard(c.dim)};
    for (const char* op : {"stem", "down", "pool"}) {
      bool offered = false;
      for (const Strategy& st : spatial_strategies(g, g.node(named(g, op)), m))
        offered |= st.inputs[0] == rows;
      EXPECT_TRUE(offered) << op;
    }
    ShardedGraph s = propagate(g, m, {{g.inputs()[0], rows, "test", false}}, testing::h100());
    // Four convolutions and the pool run on bands; the residual Add and the
    // pool's output keep them (whether the global pool reduces the bands or
    // reads them gathered is the cost model's choice).
    EXPECT_EQ(count_spatial(g, s), 5) << describe(g, s);
    EXPECT_EQ(s.nodes[static_cast<size_t>(named(g, "pool"))].outputs[0], rows) << describe(g, s);
    RankPrograms ranks = partition(g, s);
    EXPECT_GE(testing::count(ranks.ranks[0], OpKind::kHaloExchange), 4);  // the pool's too where a band's rows are odd
    EXPECT_LE(testing::count(ranks.ranks[0], OpKind::kAllGather), 1);
    // The global pool over uneven bands: each rank's mean weighed by its
    // rows (not 1/n), summed by the AllReduce.
    ShardedGraph reduced = propagate(
        g, m, {{g.inputs()[0], rows, "test", false}, {g.node(named(g, "gap")).outputs[0], Sharding::parse("[P]"), "test", false}},
        testing::h100());
    EXPECT_EQ(reduced.nodes[static_cast<size_t>(named(g, "gap"))].inputs[0], rows) << describe(g, reduced);
    verifier::EndToEndReport rr = check(g, reduced);
    EXPECT_TRUE(rr.passed) << rr.summary();
    // The last rank holds fewer rows of the pool's output than the first.
    auto pool_rows = [&](const Graph& r) {
      for (NodeId n = 0; n < r.num_nodes(); ++n)
        if (r.node(n).name == "pool") return r.type(r.node(n).outputs[0]).shape[static_cast<size_t>(c.dim)];
      return int64_t{-1};
    };
    int64_t whole = g.type(g.node(named(g, "pool")).outputs[0]).shape[static_cast<size_t>(c.dim)];
    int64_t n = m.num_devices();
    EXPECT_EQ(pool_rows(ranks.ranks[0]), (whole + n - 1) / n);
    EXPECT_EQ(pool_rows(ranks.ranks.back()), whole / n);
    verifier::EndToEndReport r = check(g, s);
    EXPECT_TRUE(r.passed) << r.summary();
  }
}

// An uneven band gathered whole (a Flatten reads every row): each rank pads
// its band to the largest, the AllGather brings equal blocks, and slices
// drop the padding; the ranks check against the model.
TEST(SpatialStrategy, UnevenBandsAreGatheredWhole) {
  std::mt19937_64 rng(5);
  Graph g;
  ValueId x = g.add_input("image", {DType::kF32, {1, 2, 7, 3}});
  ValueId w = weight(g, "conv/w", {3, 2, 3, 3}, rng);
  ValueId y = g.add(OpKind::kRelu, {g.add(OpKind::kConv, {x, w}, conv_attrs(3, 1, 1), "conv")}, {}, "relu");
  Attrs flat;
  flat.set("axis", int64_t{1});
  ValueId f = g.add(OpKind::kFlatten, {y}, flat, "flatten");
  Attrs gemm;
  gemm.set("transB", int64_t{1});
  g.set_outputs({g.add(OpKind::kGemm, {f, weight(g, "fc/w", {4, 63}, rng)}, gemm, "fc"), y});
  for (const char* mesh : {"tp=2", "tp=3", "tp=4"}) {
    SCOPED_TRACE(mesh);
    DeviceMesh m = DeviceMesh::parse(mesh);
    Sharding rows;
    rows.placements = {Placement::shard(2)};
    // The Relu's output pinned to bands: the convolution runs on them
    // whatever the cost model would pick on so small an image.
    ShardedGraph s = propagate(g, m, {{g.inputs()[0], rows, "test", false}, {y, rows, "test", false}}, testing::cpu());
    ASSERT_EQ(count_spatial(g, s), 1) << describe(g, s);
    RankPrograms ranks = partition(g, s);
    EXPECT_GE(testing::count(ranks.ranks[0], OpKind::kAllGather), 1);
    EXPECT_GE(testing::count(ranks.ranks[0], OpKind::kPad), 1);
    verifier::EndToEndReport r = check(g, s);
    EXPECT_TRUE(r.passed) << r.summary();
  }
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
