// The communication model: nccl-tests bus-bandwidth factors, tiers per mesh
// axis, and a hand-computed all-reduce on H100 NVLink.
#include "cost/collective_model.h"

#include <gtest/gtest.h>

#include "cost/kernel_model.h"
#include "graph/error.h"

namespace tessera::cost {
namespace {

TEST(CollectiveModel, AllReduceGrowsAsTwoNMinusOneOverN) {
  Interconnect tier{"link", 0, 0.0, 100e9};
  double bytes = 1e9;
  double two = collective_time(CollectiveKind::kAllReduce, bytes, 2, tier).transfer_s;
  EXPECT_DOUBLE_EQ(two, bytes / 100e9);  // factor 2(2-1)/2 = 1
  double previous = two;
  for (int64_t n = 3; n <= 64; ++n) {
    double t = collective_time(CollectiveKind::kAllReduce, bytes, n, tier).transfer_s;
    EXPECT_NEAR(t / two, 2.0 * (n - 1) / n, 1e-12) << n;
    EXPECT_GT(t, previous);
    previous = t;
  }
  EXPECT_LT(previous, 2 * two);  // bounded by twice the 2-rank time
}

TEST(CollectiveModel, FactorsAndSteps) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllReduce, 8), 1.75);
  EXPECT_EQ(latency_steps(CollectiveKind::kAllReduce, 8), 14);
  EXPECT_EQ(latency_steps(CollectiveKind::kAllGather, 8), 7);
  Interconnect tier{"link", 0, 1e-6, 1e9};
  EXPECT_EQ(collective_time(CollectiveKind::kAllReduce, 1e9, 1, tier).time_s, 0.0);
  // All-reduce = reduce-scatter + all-gather of the same buffer.
  double ar = collective_time(CollectiveKind::kAllReduce, 1e8, 8, tier).time_s;
  double rs = collective_time(CollectiveKind::kReduceScatter, 1e8, 8, tier).time_s;
  double ag = collective_time(CollectiveKind::kAllGather, 1e8, 8, tier).time_s;
  EXPECT_NEAR(ar, rs + ag, 1e-12);
}

TEST(CollectiveModel, TiersFollowTheMesh) {
  DeviceProfile d = builtin_profile("h100");
  DeviceMesh mesh = DeviceMesh::parse("dp=2,tp=8");
  EXPECT_EQ(tier_for_axis(d, mesh, "tp").name, "nvlink");   // 8 consecutive GPUs: one node
  EXPECT_EQ(tier_for_axis(d, mesh, "dp").name, "network");  // 8 apart: two nodes
  DeviceMesh square = DeviceMesh::parse("dp=4,tp=4");
  EXPECT_EQ(tier_for_axis(d, square, "tp").name, "nvlink");
  EXPECT_EQ(tier_for_axis(d, square, "dp").name, "network");  // spans 16 ranks
  DeviceMesh small = DeviceMesh::parse("dp=2,tp=4");
  EXPECT_EQ(tier_for_axis(d, small, "dp").name, "nvlink");  // 8 ranks: still one node
}

TEST(CollectiveModel, GoldenAllReduceOnH100NvLink) {
  DeviceProfile d = builtin_profile("h100");
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {int64_t{1} << 26}});
  Attrs a;
  a.set("mesh_axis", std::string("tp"));
  a.set("group_size", int64_t{8});
  g.set_outputs({g.add(OpKind::kAllReduce, {x}, a, "ar")});
  DeviceMesh mesh = DeviceMesh::parse("tp=8");
  CostOptions o;
  o.mesh = &mesh;
  KernelCost c = node_cost(g, 0, d, o);
  // 256 MiB over NVLink at 450 GB/s with factor 2 x 7/8, 14 steps of 1.5 us.
  double expected = 14 * 1.5e-6 + 268435456.0 * 1.75 / 450e9;
  EXPECT_NEAR(c.comm_s, expected, 1e-9);
  EXPECT_NEAR(c.comm_s, 1.0649e-3, 0.001e-3);
  EXPECT_EQ(c.bound, "nvlink");
  // The same buffer across nodes takes the network.
  DeviceMesh wide = DeviceMesh::parse("tp=8,x=2");
  o.mesh = &wide;
  EXPECT_EQ(node_cost(g, 0, d, o).bound, "network");
}

TEST(CollectiveModel, GroupSizeMustMatchTheMesh) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {16}});
  Attrs a;
  a.set("mesh_axis", std::string("tp"));
  a.set("group_size", int64_t{4});
  g.set_outputs({g.add(OpKind::kAllReduce, {x}, a, "ar")});
  DeviceMesh mesh = DeviceMesh::parse("tp=8");
  CostOptions o;
  o.mesh = &mesh;
  EXPECT_THROW(node_cost(g, 0, builtin_profile("h100"), o), Error);
}

// A rank's HaloExchange: the rows it receives (before + after, from the
// halo table) are the bytes, whatever its own band holds.
TEST(CollectiveModel, HaloExchangeSendsTheRowsTheBandReceives) {
  DeviceProfile d = builtin_profile("h100");
  DeviceMesh mesh = DeviceMesh::parse("tp=3");
  for (int64_t me : {0, 1, 2}) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 64, 40, 96}});
    Attrs a;
    a.set("mesh_axis", std::string("tp"));
    a.set("group_size", int64_t{3});
    a.set("axis", int64_t{2});
    a.set("coordinate", me);
    a.set("before", std::vector<int64_t>{0, 2, 1});
    a.set("after", std::vector<int64_t>{1, 2, 0});
    g.set_outputs({g.add(OpKind::kHaloExchange, {x}, a, "halo")});
    CollectiveCost c = collective_node_cost(g, g.node(0), d, &mesh);
    int64_t rows = std::vector<int64_t>{1, 4, 1}[static_cast<size_t>(me)];
    double bytes = static_cast<double>(rows) * 64 * 96 * 4;
    const Interconnect& tier = tier_for_axis(d, mesh, "tp");
    EXPECT_NEAR(c.transfer_s, bytes / tier.bandwidth, 1e-12) << "rank " << me;
    EXPECT_NEAR(c.latency_s, tier.latency_s, 1e-12);  // one step, both neighbours at once
  }
}

// Overlapped, the exchange hides behind the window op only up to the op's
// time; the edge rows are paid again either way.
TEST(CollectiveModel, HaloOverlapHidesTheExchangeOnlyUpToTheOp) {
  WindowRows w{3, 1, 1, 0, 0};  // a seam band: one halo row each way
  HaloBand band{1, 30, 1};      // 30 output rows, 2 of them edges
  HaloOverlapCost small = halo_overlap_time(1e-3, 3e-3, w, band);
  EXPECT_EQ(small.out_rows, 30);
  EXPECT_EQ(small.edge_rows, 2);
  EXPECT_NEAR(small.edges_s, 3e-3 * 2 / 30, 1e-15);
  EXPECT_NEAR(small.time_s, 3e-3 + 2e-4, 1e-15);  // the exchange is hidden
  EXPECT_LT(small.time_s, 1e-3 + 3e-3);           // and it beats exchange-then-op
  HaloOverlapCost big = halo_overlap_time(5e-3, 3e-3, w, band);
  EXPECT_NEAR(big.time_s, 5e-3 + 2e-4, 1e-15);  // only the op's time of it is
  // A band with no halo below (the last rank) has one edge.
  EXPECT_EQ(halo_overlap_time(1e-3, 3e-3, w, {1, 30, 0}).edge_rows, 1);
  // A dilated 3x3 over a 2-row halo: 2 edge rows each way.
  EXPECT_EQ(halo_overlap_time(1e-3, 3e-3, WindowRows{3, 1, 2, 0, 0}, {2, 30, 2}).edge_rows, 4);
}

}  // namespace
}  // namespace tessera::cost
