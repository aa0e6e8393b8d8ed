// Deeper halos inside the sharding search (mutator/sharding/deep_halo.h):
// a chain of window layers in bands exchanges once every k window layers
// where that is predicted cheaper (a profile with a high collective
// latency), once per layer where exchanges are cheap; the plan the search
// writes checks end to end. Also the runtime's halo overlap in the search's
// price (cost::runtime_cost_options) and the strategy's halo rows from
// graph/halo_rows.h against the dimension map's.
#include "mutator/sharding/deep_halo.h"

#include <gtest/gtest.h>

#include <random>

#include "cost/plan_cost.h"
#include "mutator/sharding/annotations.h"
#include "mutator/sharding/partition.h"
#include "mutator/sharding/shard_plan.h"
#include "mutator/sharding/spatial.h"
#include "mutator/sharding/spatial_strategy.h"
#include "tests/mutator/mutator_test_util.h"
#include "verifier/plan_check.h"
#include "verifier/program.h"

namespace tessera::mutator {
namespace {

using testing::conv_attrs;
using testing::count;
using testing::weight;

// image [1, 3, H, 16] -> 4 x (Conv 3x3 pad 1 -> Relu), a 2x2 MaxPool after
// the second -> Conv 1x1 (a window of one row: no halo) -> output.
Graph conv_chain(int64_t h, uint64_t seed, int64_t channels = 8) {
  std::mt19937_64 rng(seed);
  Graph g;
  ValueId x = g.add_input("image", {DType::kF32, {1, 3, h, 16}});
  auto conv = [&](ValueId in, int64_t k, int64_t pad, const std::string& name) {
    int64_t cin = g.type(in).shape[1];
    ValueId wt = weight(g, name + "/w", {channels, cin, k, k}, rng);
    ValueId b = weight(g, name + "/b", {channels}, rng);
    return g.add(OpKind::kRelu, {g.add(OpKind::kConv, {in, wt, b}, conv_attrs(k, 1, pad), name)}, {}, name + "/relu");
  };
  ValueId y = conv(conv(x, 3, 1, "conv1"), 3, 1, "conv2");
  y = g.add(OpKind::kMaxPool, {y}, conv_attrs(2, 2, 0), "pool");
  y = conv(conv(y, 3, 1, "conv3"), 3, 1, "conv4");
  g.set_outputs({conv(y, 1, 0, "head")});
  return g;
}

// The profile with the innermost tier's latency and bandwidth replaced.
cost::DeviceProfile with_links(cost::DeviceProfile p, double latency_s, double bandwidth) {
  for (cost::Interconnect& t : p.interconnect) {
    t.latency_s = latency_s;
    t.bandwidth = bandwidth;
  }
  return p;
}

ShardedGraph rows_in_bands(const Graph& g, const DeviceMesh& mesh, const cost::DeviceProfile& device) {
  return propagate(g, mesh, resolve_annotations(g, mesh, {"image=[S(2)]"}), device);
}

// Each HaloExchange replaced by zeros in the rows it would receive.
void zero_halos(Graph& rank) {
  std::vector<NodeId> halos;
  for (NodeId id = 0; id < rank.num_nodes(); ++id)
    if (rank.node(id).kind == OpKind::kHaloExchange) halos.push_back(id);
  for (NodeId id : halos) {
    const Node& h = rank.node(id);
    auto c = static_cast<size_t>(h.attrs.i("coordinate"));
    int64_t axis = h.attrs.i("axis");
    size_t dims = rank.type(h.inputs[0]).shape.size();
    std::vector<int64_t> pads(2 * dims, 0);
    pads[static_cast<size_t>(axis)] = h.attrs.ints("before")[c];
    pads[dims + static_cast<size_t>(axis)] = h.attrs.ints("after")[c];
    Attrs a;
    a.set("pads", pads);
    ValueId out = h.outputs[0];
    ValueId zeros = rank.add(OpKind::kPad, {h.inputs[0]}, a, h.name + "/zeros");
    rank.replace_all_uses(out, zeros);
  }
  rank.remove_dead();
}

verifier::EndToEndReport check(const Graph& g, const ShardedGraph& s, std::vector<Graph> ranks) {
  return testing::check_ranks(g, s, std::move(ranks));
}

TEST(DeepHalo, ChainsOfWindowLayersInBands) {
  Graph g = conv_chain(40, 1);
  ShardedGraph s = rows_in_bands(g, DeviceMesh::parse("tp=2"), testing::h100());
  std::vector<SpatialChain> chains = spatial_chains(g, s);
  ASSERT_EQ(chains.size(), 1u) << describe(g, s);
  // conv1 .. conv4 (or the 1x1 head, a window without halo, where it too
  // keeps the rows by its spatial strategy), Relus and the pool inside; it
  // ends at a window layer.
  EXPECT_EQ(g.node(chains[0].nodes.front()).name, "conv1");
  EXPECT_TRUE(is_window_layer(g.node(chains[0].nodes.back()).kind));
  EXPECT_GE(window_layers(g, chains[0].nodes), 5);
  EXPECT_EQ(chains[0].dim, 2);
  // Replicated rows: no chain.
  ShardedGraph whole = propagate(g, DeviceMesh::parse("tp=2"), {}, testing::h100());
  EXPECT_TRUE(spatial_chains(g, whole).empty());
}

TEST(DeepHalo, HighLatencyExchangesLessOftenAndTheRanksCheck) {
  for (int64_t n : {2, 3}) {
    SCOPED_TRACE("tp=" + std::to_string(n));
    Graph g = conv_chain(42, 2);  // after the pool 21 rows: uneven bands on 2 ranks
    DeviceMesh mesh = DeviceMesh::parse("tp=" + std::to_string(n));
    cost::DeviceProfile slow = with_links(testing::cpu(), 1e-3, 1e9);
    ShardedGraph s = rows_in_bands(g, mesh, slow);
    std::vector<DeepHalo> deep = choose_deep_halos(g, s, slow, {});
    ASSERT_EQ(deep.size(), 1u);
    EXPECT_GT(deep[0].every, 1) << deep[0].str(g);
    EXPECT_LT(deep[0].time_s, deep[0].every_layer_s);
    std::vector<Graph> ranks;
    for (int64_t r = 0; r < n; ++r) {
      ranks.push_back(partition_rank(g, s, r));
      int before = count(ranks.back(), OpKind::kHaloExchange);
      apply_deep_halos(g, deep, mesh, r, ranks.back());
      ranks.back().validate();
      EXPECT_LT(count(ranks.back(), OpKind::kHaloExchange), before);
      EXPECT_EQ(count(ranks.back(), OpKind::kConv), 5);  // conv1-4 and the head, each once
    }
    verifier::EndToEndReport rep = check(g, s, ranks);
    EXPECT_TRUE(rep.passed) << rep.detail;
    // The same programs with every halo read as zeros (a Pad of the rows
    // the exchange would bring): the shapes hold, the seams do not.
    std::vector<Graph> thin = ranks;
    for (Graph& rank : thin) zero_halos(rank);
    EXPECT_FALSE(check(g, s, thin).passed);
  }
}

// Free links, and layers whose recomputed rows cost (64 channels, bands of
// 8 rows on the CPU profile): one exchange per window layer stays cheapest.
TEST(DeepHalo, CheapExchangesKeepOnePerLayer) {
  Graph g = conv_chain(16, 3, 64);
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  cost::DeviceProfile fast = with_links(testing::cpu(), 0, 1e15);
  ShardedGraph s = rows_in_bands(g, mesh, fast);
  ASSERT_EQ(spatial_chains(g, s).size(), 1u);
  EXPECT_TRUE(choose_deep_halos(g, s, fast, {}).empty());
}

TEST(DeepHalo, TheSearchWritesTheDeeperHaloAndItChecks) {
  // Layers that pay for their split (24 channels, 64 rows), on links of
  // 10 us a message: the search keeps the bands and exchanges less often.
  Graph g = conv_chain(64, 4, 24);
  cost::DeviceProfile slow = with_links(testing::cpu(), 1e-5, 1e10);
  ShardSearchOptions o;
  o.mesh = DeviceMesh::parse("tp=2");
  o.specs = {"image=[S(2)]"};
  o.constraints = resolve_annotations(g, o.mesh, o.specs);
  o.budget_s = 20;
  o.threads = 1;
  ShardSearchResult r = search_shardings(g, slow, o);
  ASSERT_EQ(r.mesh.num_devices(), 2) << r.why;
  const DegreePoint& p = r.curve[r.chosen];
  bool deep = false;
  for (const std::string& m : p.moves) deep |= m.rfind("deeper halo: conv1..", 0) == 0;
  EXPECT_TRUE(deep) << describe(r.graph, r.sharding) << ::testing::PrintToString(p.moves);
  ASSERT_EQ(r.ranks.size(), 2u);
  for (const Graph& rank : r.ranks) EXPECT_LT(count(rank, OpKind::kHaloExchange), 5);
  verifier::EndToEndReport rep = check(r.graph, r.sharding, r.ranks);
  EXPECT_TRUE(rep.passed) << rep.detail;
  // The reported cost is the written rank 0's, priced as the runtime runs
  // it, on each rank's share of the host.
  cost::DeviceProfile share = cost::rank_share(slow, cost::ranks_per_node(slow, 2));
  cost::PlanCost again = cost::plan_cost(
      cost::spmd_rank_programs(r.ranks[0], r.mesh, share, cost::runtime_cost_options(share)));
  EXPECT_DOUBLE_EQ(r.plan_cost.time_s, again.time_s);
}

// The CPU runtime overlaps a HaloExchange with its window op; the search
// prices rank programs so on CPUs (and not on GPUs), and the overlapped
// price is no more than the unoverlapped one.
TEST(DeepHalo, TheSearchPricesTheRuntimesHaloOverlap) {
  EXPECT_TRUE(cost::runtime_cost_options(testing::cpu()).halo_overlap);
  EXPECT_FALSE(cost::runtime_cost_options(testing::h100()).halo_overlap);
  Graph g = conv_chain(64, 5);
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  const cost::DeviceProfile& cpu = testing::cpu();
  ShardedGraph s = rows_in_bands(g, mesh, cpu);
  Graph rank0 = partition_rank(g, s, 0);
  double plain = cost::plan_cost(cost::spmd_rank_programs(rank0, mesh, cpu)).time_s;
  double overlapped =
      cost::plan_cost(cost::spmd_rank_programs(rank0, mesh, cpu, cost::runtime_cost_options(cpu))).time_s;
  EXPECT_LT(overlapped, plain);
  // price_partitioned (the search's price of a point) uses it.
  DegreePoint p;
  PricedPlan priced = price_partitioned(g, mesh, cpu, cpu, resolve_annotations(g, mesh, {"image=[S(2)]"}), p);
  Graph written = written_ranks(g, priced)[0];
  EXPECT_DOUBLE_EQ(p.predicted_s,
                   cost::plan_cost(cost::spmd_rank_programs(written, mesh, cpu, cost::runtime_cost_options(cpu))).time_s);
  if (priced.deep.empty()) EXPECT_DOUBLE_EQ(p.predicted_s, overlapped);
}

// The strategy's halo rows (graph/halo_rows.h) are the dimension map's
// (spatial.h, rows_read) for every window K <= 4, stride <= 3, dilation
// <= 3, pads <= 2, odd and even heights, 2 to 4 ranks.
TEST(DeepHalo, StrategyHaloRowsAreTheDimensionMapsRows) {
  int compared = 0;
  for (OpKind kind : {OpKind::kConv, OpKind::kMaxPool})
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t d = 1; d <= (kind == OpKind::kConv ? 3 : 1); ++d)
          for (int64_t pb = 0; pb <= 2; ++pb)
            for (int64_t pe = 0; pe <= 2; ++pe)
              for (int64_t h : {23, 24}) {
                if (pb >= d * (k - 1) + 1 || pe >= d * (k - 1) + 1) continue;  // a window of padding only
                Graph g;
                ValueId x = g.add_input("x", {DType::kF32, {1, 2, h, 5}});
                Attrs a = conv_attrs(k, s, 0);
                a.set("pads", std::vector<int64_t>{pb, 0, pe, 0});
                a.set("dilations", std::vector<int64_t>{d, 1});
                std::mt19937_64 rng(7);
                std::vector<ValueId> ins{x};
                if (kind == OpKind::kConv) ins.push_back(weight(g, "w", {3, 2, k, k}, rng));
                ValueId y = g.add(kind, ins, a, "op");
                g.set_outputs({y});
                NodeId id = g.value(y).producer;
                for (int64_t n = 2; n <= 4; ++n) {
                  std::optional<std::vector<std::pair<int64_t, int64_t>>> got = spatial_halo_rows(g, id, 2, n);
                  int64_t hin = h, hout = g.type(y).shape[2];
                  if (hout < n) continue;
                  std::vector<std::pair<int64_t, int64_t>> want;
                  for (int64_t c = 0; c < n; ++c) {
                    int64_t dim = -1;
                    Band out{block_start(hout, n, c), block_start(hout, n, c + 1)};
                    std::optional<Band> read = rows_read(g, id, 2, out, 0, &dim);
                    ASSERT_TRUE(read);
                    Band own{block_start(hin, n, c), block_start(hin, n, c + 1)};
                    want.emplace_back(std::max<int64_t>(0, own.lo - read->lo), std::max<int64_t>(0, read->hi - own.hi));
                  }
                  bool neighbours = true;
                  for (int64_t c = 0; c < n; ++c) {
                    int64_t prev = c > 0 ? block_start(hin, n, c) - block_start(hin, n, c - 1) : 0;
                    int64_t next = c + 1 < n ? block_start(hin, n, c + 2) - block_start(hin, n, c + 1) : 0;
                    neighbours &= want[static_cast<size_t>(c)].first <= prev && want[static_cast<size_t>(c)].second <= next;
                  }
                  if (!neighbours) {
                    EXPECT_FALSE(got);
                    continue;
                  }
                  ASSERT_TRUE(got) << "K" << k << " s" << s << " d" << d << " p" << pb << "/" << pe << " h" << h
                                   << " n" << n;
                  EXPECT_EQ(*got, want);
                  ++compared;
                }
              }
  EXPECT_GT(compared, 500);
}

}  // namespace
}  // namespace tessera::mutator
