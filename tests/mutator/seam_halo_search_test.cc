// The sharding search's halo found by the verifier (mutator/sharding/
// seam_halo_memo.h): the HaloExchange rows the spatial strategy emits are
// the rows the seams of a surrogate window ask for, which equal the dim
// map's formula on the suite's windows; a seam halo one row too thin fails
// its corrected test and the strategy is not offered.
#include "mutator/sharding/seam_halo_memo.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "mutator/sharding/partition.h"
#include "mutator/sharding/propagate.h"
#include "mutator/sharding/spatial.h"
#include "mutator/sharding/spatial_strategy.h"
#include "tests/mutator/mutator_test_util.h"

namespace tessera::mutator {
namespace {

using Ints = std::vector<int64_t>;

struct Window {
  OpKind kind;
  int64_t kernel, stride, dilation, pad_begin, pad_end;
};

// x [1, 4, h, 6] -> the window along H (3 wide across W, padded) -> out.
Graph one_window(Window w, int64_t h) {
  std::mt19937_64 rng(7);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 4, h, 6}});
  Attrs a;
  a.set("kernel_shape", Ints{w.kernel, 3});
  a.set("strides", Ints{w.stride, 1});
  a.set("pads", Ints{w.pad_begin, 1, w.pad_end, 1});
  a.set("dilations", Ints{w.dilation, 1});
  std::vector<ValueId> ins{x};
  if (w.kind == OpKind::kConv) {
    a.set("group", int64_t{1});
    ins.push_back(testing::weight(g, "w", {4, 4, w.kernel, 3}, rng));
  } else {
    a.set("ceil_mode", int64_t{0});
    if (w.kind == OpKind::kAveragePool) a.set("count_include_pad", int64_t{0});
  }
  g.set_outputs({g.add(w.kind, ins, a, "window")});
  return g;
}

// The suite's windows: CSRNet's 3x3 and dilated 3x3, ResNet's 7x7 stride-2
// stem, 3x3 stride-2 and 1x1 stride-2 downsampling, the 2x2 and 3x3 pools.
const Window kSuite[] = {{OpKind::kConv, 3, 1, 1, 1, 1},    {OpKind::kConv, 3, 1, 2, 2, 2},
                         {OpKind::kConv, 7, 2, 1, 3, 3},    {OpKind::kConv, 3, 2, 1, 1, 1},
                         {OpKind::kConv, 1, 2, 1, 0, 0},    {OpKind::kMaxPool, 2, 2, 1, 0, 0},
                         {OpKind::kMaxPool, 3, 2, 1, 1, 1}, {OpKind::kAveragePool, 3, 1, 1, 1, 1}};

std::string name(Window w, int64_t h, int64_t n) {
  return std::string(op_name(w.kind)) + " k" + std::to_string(w.kernel) + " s" + std::to_string(w.stride) + " d" +
         std::to_string(w.dilation) + " p" + std::to_string(w.pad_begin) + "/" + std::to_string(w.pad_end) + " h" +
         std::to_string(h) + " n" + std::to_string(n);
}

// Each rank's HaloExchange (before, after) in the partitioned plan of the
// window with its input and output split along H over n ranks (the window
// offered only its split of H, so that the cost model cannot pick another).
std::vector<std::pair<int64_t, int64_t>> emitted(const Graph& g, int64_t n, bool* checked) {
  DeviceMesh mesh = DeviceMesh::parse("tp=" + std::to_string(n));
  Sharding rows;
  rows.placements = {Placement::shard(2)};
  NodeId op = g.value(g.outputs()[0]).producer;
  StrategyTable table = strategy_table(g, mesh);
  std::vector<Strategy>& offered = table[static_cast<size_t>(op)];
  offered.clear();
  for (Strategy& st : spatial_strategies(g, g.node(op), mesh))
    if (st.inputs[0] == rows) offered.push_back(std::move(st));
  EXPECT_EQ(offered.size(), 1u);
  ShardedGraph s = propagate(g, mesh, {{g.inputs()[0], rows, "test", false}, {g.outputs()[0], rows, "test", false}},
                             testing::h100(), &table);
  EXPECT_TRUE(is_spatial(s.nodes[static_cast<size_t>(op)].axes.at(0)));
  RankPrograms ranks = partition(g, s);
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t r = 0; r < n; ++r) {
    const Graph& local = ranks.ranks[static_cast<size_t>(r)];
    for (NodeId id = 0; id < local.num_nodes(); ++id) {
      const Node& node = local.node(id);
      if (node.kind != OpKind::kHaloExchange) continue;
      out.emplace_back(node.attrs.ints("before").at(static_cast<size_t>(r)),
                       node.attrs.ints("after").at(static_cast<size_t>(r)));
    }
  }
  *checked = testing::check_ranks(g, s, ranks.ranks).passed;
  return out;
}

TEST(SeamHaloSearch, EmittedHaloRowsAreTheSeamsRowsAndTheFormulas) {
  int exchanged = 0;
  for (Window w : kSuite)
    for (int64_t h : {24, 23})
      for (int64_t n : {2, 3}) {
        SCOPED_TRACE(name(w, h, n));
        Graph g = one_window(w, h);
        NodeId op = g.value(g.outputs()[0]).producer;
        std::optional<WindowGeometry> geometry = window_geometry(g, op, 2, n);
        ASSERT_TRUE(geometry);
        std::optional<std::vector<std::pair<int64_t, int64_t>>> seams = seam_halo_rows(*geometry);
        ASSERT_TRUE(seams);
        std::optional<SpatialHalo> formula = spatial_halo(g, {op}, 2, n);
        ASSERT_TRUE(formula);
        ASSERT_EQ(seams->size(), static_cast<size_t>(n));
        bool any = false;
        for (int64_t r = 0; r < n; ++r) {
          EXPECT_EQ((*seams)[r].first, formula->ranks[r].from_prev) << "rank " << r;
          EXPECT_EQ((*seams)[r].second, formula->ranks[r].from_next) << "rank " << r;
          any |= (*seams)[r].first + (*seams)[r].second > 0;
        }
        EXPECT_EQ(spatial_halo_rows(g, op, 2, n), seams);
        bool checked = false;
        std::vector<std::pair<int64_t, int64_t>> rows = emitted(g, n, &checked);
        EXPECT_TRUE(checked);
        if (!any) {
          EXPECT_TRUE(rows.empty());  // no halo: no exchange
          continue;
        }
        EXPECT_EQ(rows, *seams);
        ++exchanged;
      }
  EXPECT_GE(exchanged, 20);
}

// The wrong twin: with every seam halo one row thinner, the corrected split
// differs from the window, so no split of H is offered where a halo is
// needed (a 1x1 window needs none and is still offered).
TEST(SeamHaloSearch, AThinnedSeamHaloIsNotOffered) {
  DeviceMesh tp2 = DeviceMesh::parse("tp=2");
  auto splits_h = [&](const Graph& g) {
    int k = 0;
    for (const Strategy& s : spatial_strategies(g, g.node(g.value(g.outputs()[0]).producer), tp2))
      k += s.inputs[0].placements[0] == Placement::shard(2);
    return k;
  };
  Graph conv3 = one_window({OpKind::kConv, 3, 1, 1, 1, 1}, 24);
  Graph pool3 = one_window({OpKind::kMaxPool, 3, 2, 1, 1, 1}, 24);
  Graph conv1 = one_window({OpKind::kConv, 1, 1, 1, 0, 0}, 24);
  EXPECT_EQ(splits_h(conv3), 1);
  EXPECT_EQ(splits_h(pool3), 1);
  EXPECT_EQ(splits_h(conv1), 1);
  ASSERT_EQ(thin_seam_halo_for_testing(1), 0);
  EXPECT_EQ(splits_h(conv3), 0);
  EXPECT_EQ(splits_h(pool3), 0);
  EXPECT_EQ(splits_h(conv1), 1);
  EXPECT_FALSE(spatial_halo_rows(conv3, conv3.value(conv3.outputs()[0]).producer, 2, 2));
  thin_seam_halo_for_testing(0);
  EXPECT_EQ(splits_h(conv3), 1);
}

// One surrogate per distinct geometry: asking again is a memo hit, and a
// geometry differing in one field (the band count) is tested anew.
TEST(SeamHaloSearch, OneSurrogatePerGeometry) {
  Graph g = one_window({OpKind::kConv, 5, 1, 1, 2, 2}, 31);
  NodeId op = g.value(g.outputs()[0]).producer;
  std::optional<WindowGeometry> w = window_geometry(g, op, 2, 2);
  ASSERT_TRUE(w);
  auto first = seam_halo_rows(*w);
  int64_t tested = seam_halo_surrogates_tested();
  EXPECT_EQ(seam_halo_rows(*w), first);
  EXPECT_EQ(seam_halo_surrogates_tested(), tested);
  w->n = 3;
  ASSERT_TRUE(seam_halo_rows(*w));
  EXPECT_EQ(seam_halo_surrogates_tested(), tested + 1);
  EXPECT_EQ(first, (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 0}}));
}

}  // namespace
}  // namespace tessera::mutator
