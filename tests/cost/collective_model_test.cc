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

}  // namespace
}  // namespace tessera::cost
