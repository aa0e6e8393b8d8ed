// The bands and halos of a spatial plan in its reports (report/spatial_bands.h):
// a small CNN with its 27 rows split over 3 ranks, where the strided layer
// leaves uneven bands, lists and draws every rank's rows and the halo rows
// it receives, with the numbers the plan's sharding and its HaloExchange
// nodes give; a plan without spatial splits shows none.
#include "report/spatial_bands.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "report/report.h"
#include "tests/mutator/mutator_test_util.h"

namespace tessera::report {
namespace {

using mutator::testing::conv_attrs;
using mutator::testing::weight;

// image [1, 2, 27, 8] -> stem Conv 3x3 pad 1 (4 channels) -> Relu -> down
// Conv 3x3 stride 2 pad 1 (14 rows) -> MaxPool 2x2 stride 2 (7 rows) -> Relu
// (the output, whole).
Graph strided_cnn() {
  std::mt19937_64 rng(3);
  Graph g;
  ValueId x = g.add_input("image", {DType::kF32, {1, 2, 27, 8}});
  auto conv = [&](ValueId in, int64_t stride, const std::string& name) {
    ValueId w = weight(g, name + "_w", {4, g.type(in).shape[1], 3, 3}, rng);
    ValueId b = weight(g, name + "_b", {4}, rng);
    return g.add(OpKind::kConv, {in, w, b}, conv_attrs(3, stride, 1), name);
  };
  ValueId stem = g.add(OpKind::kRelu, {conv(x, 1, "stem")}, {}, "stem_relu");
  ValueId down = conv(stem, 2, "down");
  ValueId pool = g.add(OpKind::kMaxPool, {down}, conv_attrs(2, 2, 0), "pool");
  g.set_outputs({g.add(OpKind::kRelu, {pool}, {}, "out")});
  return g;
}

mutator::Plan spatial_plan() {
  mutator::OptimizeOptions o;
  o.device = cost::resolve_device("h100");
  o.mesh = DeviceMesh::parse("tp=3");
  // The image in bands of 9 rows; the strided layer's and the pool's
  // outputs kept in bands (14 rows: 5, 5, 4; 7 rows: 3, 2, 2), whatever
  // the cost model would pick on so small an image.
  o.specs = {"image=[S(2)]", "down:out0=[S(2)]", "pool:out0=[S(2)]"};
  o.shard_search = false;
  o.budget_s = 5;
  return mutator::optimize(strided_cnn(), o);
}

const SpatialExchange* find_layer(const std::vector<SpatialExchange>& ex, const std::string& layer) {
  for (const SpatialExchange& e : ex)
    if (e.layer == layer) return &e;
  ADD_FAILURE() << "no exchange before " << layer;
  return nullptr;
}

TEST(SpatialBands, BandsFromTheShardingHalosFromTheExchanges) {
  mutator::Plan p = spatial_plan();
  ASSERT_TRUE(p.is_mesh());
  ASSERT_TRUE(p.check.passed) << p.check.summary();
  std::vector<SpatialExchange> ex = spatial_exchanges(p);
  ASSERT_EQ(ex.size(), 3u);
  // stem: rows 0-27 of the image in 9s, one row each way at a seam; a row
  // is 2 channels x 8 columns of f32 (64 B).
  const SpatialExchange* stem = find_layer(ex, "stem");
  ASSERT_NE(stem, nullptr);
  EXPECT_EQ(stem->tensor, "image");
  EXPECT_EQ(stem->rows, 27);
  EXPECT_EQ(stem->dim, 2);
  ASSERT_EQ(stem->bands.size(), 3u);
  EXPECT_EQ(stem->bands[0].band, (RowRange{0, 9}));
  EXPECT_TRUE(stem->bands[0].above.empty());
  EXPECT_EQ(stem->bands[0].below, (RowRange{9, 10}));
  EXPECT_EQ(stem->bands[1].band, (RowRange{9, 18}));
  EXPECT_EQ(stem->bands[1].above, (RowRange{8, 9}));
  EXPECT_EQ(stem->bands[1].below, (RowRange{18, 19}));
  EXPECT_EQ(stem->bands[2].above, (RowRange{17, 18}));
  EXPECT_TRUE(stem->bands[2].below.empty());
  EXPECT_EQ(stem->bands[1].bytes, 2 * 64);
  EXPECT_EQ(stem->total_bytes(), 4 * 64);
  // down (stride 2): output bands [0,5) [5,10) [10,14) read input rows
  // [0,10) [9,20) [19,27): the first two ranks take rows from below (rank 1
  // two of them), rank 2 none; a row is 4 channels x 8 columns (128 B).
  const SpatialExchange* down = find_layer(ex, "down");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->rows, 27);
  EXPECT_EQ(down->bands[0].below, (RowRange{9, 10}));
  EXPECT_TRUE(down->bands[1].above.empty());
  EXPECT_EQ(down->bands[1].below, (RowRange{18, 20}));
  EXPECT_TRUE(down->bands[2].above.empty() && down->bands[2].below.empty());
  EXPECT_EQ(down->bands[1].bytes, 2 * 128);
  EXPECT_EQ(down->total_bytes(), 3 * 128);
  // pool: 14 rows in uneven bands [0,5) [5,10) [10,14) (block_start);
  // rank 0's output rows [0,3) read [0,6): row 5 from rank 1; a row is
  // 4 channels x 4 columns (64 B).
  const SpatialExchange* pool = find_layer(ex, "pool");
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->rows, 14);
  EXPECT_EQ(pool->bands[0].band, (RowRange{0, 5}));
  EXPECT_EQ(pool->bands[1].band, (RowRange{5, 10}));
  EXPECT_EQ(pool->bands[2].band, (RowRange{10, 14}));
  EXPECT_EQ(pool->bands[0].below, (RowRange{5, 6}));
  EXPECT_EQ(pool->total_bytes(), 64);
  // Every rank's program holds the band the report gives it.
  for (const SpatialExchange& e : ex)
    for (const RankBand& b : e.bands) {
      const Graph& rank = p.ranks[static_cast<size_t>(b.coordinate)];
      bool found = false;
      for (NodeId n = 0; n < rank.num_nodes(); ++n)
        if (rank.node(n).name == e.name) {
          found = true;
          EXPECT_EQ(rank.type(rank.node(n).inputs[0]).shape[2], b.band.size()) << e.name << " rank " << b.coordinate;
        }
      EXPECT_TRUE(found) << e.name;
    }
}

TEST(SpatialBands, TheReportsListAndDrawThem) {
  mutator::Plan p = spatial_plan();
  std::string text = report_text(p, nullptr);
  EXPECT_NE(text.find("spatial splits: bands and halos (3 HaloExchange"), std::string::npos) << text;
  EXPECT_NE(text.find("stem reads image: 27 rows of dim 2 in 3 bands over tp"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 rows [9,18), halo [8,9) from rank 0, halo [18,19) from rank 2, receives 128 B"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 1 rows [9,18), halo [18,20) from rank 2, receives 256 B"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 2 rows [10,14), receives 0 B"), std::string::npos) << text;
  std::string html = report_html(p, nullptr);
  EXPECT_NE(html.find("Spatial splits: bands and halos"), std::string::npos);
  EXPECT_NE(html.find("rank 1: rows [9,18)"), std::string::npos);
  EXPECT_NE(html.find("+ [8,9) from rank 0"), std::string::npos);
  EXPECT_NE(html.find("+ [18,20) from rank 2"), std::string::npos);
  EXPECT_NE(html.find("rank 2: rows [10,14)"), std::string::npos);
  EXPECT_NE(html.find("<pattern id=\"halo2\""), std::string::npos);
  EXPECT_NE(html.find("fill=\"url(#halo1)\""), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(report_json(p, nullptr));
  ASSERT_EQ(j["spatial_splits"].size(), 3u);
  int64_t bytes = 0;
  for (const auto& e : j["spatial_splits"]) bytes += e["bytes"].get<int64_t>();
  EXPECT_EQ(bytes, 4 * 64 + 3 * 128 + 64);
}

TEST(SpatialBands, APlanWithoutSpatialSplitsHasNone) {
  mutator::OptimizeOptions o;
  o.device = cost::resolve_device("h100");
  o.mesh = DeviceMesh::parse("tp=2");
  o.specs = {"*/fc1/MatMul:in1=[S(1)]", "*/fc2/MatMul:in1=[S(0)]"};
  o.shard_search = false;
  o.budget_s = 5;
  mutator::Plan p = mutator::optimize(mutator::testing::torch_like_mlp(), o);
  ASSERT_TRUE(p.is_mesh());
  EXPECT_TRUE(spatial_exchanges(p).empty());
  EXPECT_EQ(report_text(p, nullptr).find("spatial splits"), std::string::npos);
  EXPECT_EQ(report_html(p, nullptr).find("Spatial splits"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(report_json(p, nullptr))["spatial_splits"].empty());
}

}  // namespace
}  // namespace tessera::report
