// Plan cost: critical path over ranks that meet at collectives, with and
// without overlap of communication and computation.
#include "cost/plan_cost.h"

#include <gtest/gtest.h>

#include "cost/device_profile.h"
#include "cost/graph_cost.h"
#include "graph/error.h"

namespace tessera::cost {
namespace {

PlanStep compute(double t, std::vector<int> deps = {}) { return {"k", t, false, {}, std::move(deps)}; }
PlanStep collective(double t, std::vector<int64_t> group, std::vector<int> deps = {}) {
  return {"c", t, true, std::move(group), std::move(deps)};
}

TEST(PlanCost, SlowestRankHoldsTheCollective) {
  RankProgram fast{{compute(10), collective(5, {0, 1}), compute(10)}};
  RankProgram slow{{compute(20), collective(5, {0, 1}), compute(10)}};
  PlanCost c = plan_cost({fast, slow});
  EXPECT_DOUBLE_EQ(c.time_s, 35);
  EXPECT_DOUBLE_EQ(c.finish_s[0], 35);  // rank 0 waited 10 for rank 1
  EXPECT_DOUBLE_EQ(c.compute_s[0], 20);
  EXPECT_DOUBLE_EQ(c.comm_s[0], 5);
  EXPECT_DOUBLE_EQ(c.step_finish_s[0][1], 25);
}

TEST(PlanCost, OverlapHidesIndependentCommunication) {
  // A, all-reduce of A, B (independent), C reads the all-reduce.
  RankProgram r{{compute(10), collective(5, {0, 1}, {0}), compute(10), compute(2, {1})}};
  EXPECT_DOUBLE_EQ(plan_cost({r, r}).time_s, 27);
  PlanCostOptions overlap;
  overlap.overlap = true;
  EXPECT_DOUBLE_EQ(plan_cost({r, r}, overlap).time_s, 22);
  // Communication that everything waits on cannot hide.
  RankProgram chain{{compute(10), collective(5, {0, 1}, {0}), compute(10, {1})}};
  EXPECT_DOUBLE_EQ(plan_cost({chain, chain}, overlap).time_s, 25);
}

TEST(PlanCost, MissingPartnerIsAnError) {
  RankProgram a{{collective(1, {0, 1})}};
  RankProgram b{{compute(1)}};
  try {
    plan_cost({a, b});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reached by 1 of its 2 ranks"), std::string::npos) << e.what();
  }
  RankProgram outside{{collective(1, {0, 5})}};
  EXPECT_THROW(plan_cost({outside, b}), Error);
}

TEST(PlanCost, CrossedOrdersDeadlock) {
  RankProgram r0{{collective(1, {0, 1}), collective(1, {0, 2})}};
  RankProgram r1{{collective(1, {1, 2}), collective(1, {0, 1})}};
  RankProgram r2{{collective(1, {0, 2}), collective(1, {1, 2})}};
  try {
    plan_cost({r0, r1, r2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos);
  }
  // The same collectives in a consistent order run in 3 rounds.
  RankProgram s0{{collective(1, {0, 1}), collective(1, {0, 2})}};
  RankProgram s1{{collective(1, {0, 1}), collective(1, {1, 2})}};
  RankProgram s2{{collective(1, {0, 2}), collective(1, {1, 2})}};
  EXPECT_DOUBLE_EQ(plan_cost({s0, s1, s2}).time_s, 3);
}

// Row-parallel MatMul on tp=2: local MatMul then all-reduce of the partial sums.
Graph row_parallel_rank() {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {64, 512}});
  ValueId w = g.add_input("w", {DType::kF32, {512, 1024}});
  ValueId y = g.add(OpKind::kMatMul, {x, w}, {}, "mm");
  Attrs a;
  a.set("mesh_axis", std::string("tp"));
  a.set("group_size", int64_t{2});
  ValueId s = g.add(OpKind::kAllReduce, {y}, a, "ar");
  g.set_outputs({g.add(OpKind::kRelu, {s}, {}, "relu")});
  return g;
}

TEST(PlanCost, RankProgramsFromGraphs) {
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  DeviceProfile d = builtin_profile("h100");
  std::vector<Graph> ranks = {row_parallel_rank(), row_parallel_rank()};
  std::vector<RankProgram> progs = rank_programs(ranks, mesh, d);
  ASSERT_EQ(progs.size(), 2u);
  ASSERT_EQ(progs[0].steps.size(), 3u);
  EXPECT_TRUE(progs[0].steps[1].collective);
  EXPECT_EQ(progs[1].steps[1].group, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(progs[0].steps[2].deps, (std::vector<int>{1}));
  CostOptions o;
  o.mesh = &mesh;
  double single = graph_cost(ranks[0], d, o).time_s;
  PlanCost c = plan_cost(progs);
  EXPECT_NEAR(c.time_s, single, 1e-12);  // symmetric ranks: no waiting
  EXPECT_THROW(rank_programs({row_parallel_rank()}, mesh, d), Error);
}

// CostOptions::halo_overlap prices a HaloExchange read by a Conv as the
// runtime's overlapped lowering: the Conv's step takes max(conv, exchange)
// plus its edge rows again, the exchange's step only meets the neighbour.
TEST(PlanCost, HaloOverlapMovesTheExchangeIntoItsConv) {
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  std::vector<Graph> ranks;
  for (int64_t me : {0, 1}) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 64, 48, 96}});
    Attrs h;
    h.set("mesh_axis", std::string("tp"));
    h.set("group_size", int64_t{2});
    h.set("axis", int64_t{2});
    h.set("coordinate", me);
    h.set("before", std::vector<int64_t>{0, 1});
    h.set("after", std::vector<int64_t>{1, 0});
    ValueId xp = g.add(OpKind::kHaloExchange, {x}, h, "halo");
    Tensor w(DType::kF32, {64, 64, 3, 3});
    ValueId wv = g.add_constant("w", w);
    Attrs c;
    c.set("kernel_shape", std::vector<int64_t>{3, 3});
    c.set("strides", std::vector<int64_t>{1, 1});
    c.set("dilations", std::vector<int64_t>{1, 1});
    c.set("pads", me == 0 ? std::vector<int64_t>{1, 1, 0, 1} : std::vector<int64_t>{0, 1, 1, 1});
    c.set("group", int64_t{1});
    g.set_outputs({g.add(OpKind::kConv, {xp, wv}, c, "conv")});
    ranks.push_back(std::move(g));
  }
  DeviceProfile d = builtin_profile("h100");
  CostOptions off, on;
  on.halo_overlap = true;
  std::vector<RankProgram> a = rank_programs(ranks, mesh, d, off), b = rank_programs(ranks, mesh, d, on);
  ASSERT_EQ(a[0].steps.size(), 2u);
  ASSERT_TRUE(a[0].steps[0].collective);
  double exchange = a[0].steps[0].time_s, conv = a[0].steps[1].time_s;
  ASSERT_GT(exchange, 0);
  EXPECT_DOUBLE_EQ(b[0].steps[0].time_s, 0);
  // Rank 0's band: 48 rows and 1 below; 48 output rows, the last an edge.
  double want = std::max(conv, exchange) + conv / 48;
  EXPECT_NEAR(b[0].steps[1].time_s, want, 1e-12);
  EXPECT_LT(plan_cost(b).time_s, plan_cost(a).time_s);
}

}  // namespace
}  // namespace tessera::cost
