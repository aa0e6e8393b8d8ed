// cost/ restates the runtime's fusion rule (it cannot link the runtime);
// these graphs check that both cut them into the same kernels.
#include "cost/graph_cost.h"

#include <gtest/gtest.h>

#include "runtime/fusion.h"

namespace tessera::cost {
namespace {

std::vector<std::vector<NodeId>> runtime_groups(const Graph& g) {
  std::vector<std::vector<NodeId>> out;
  for (const runtime::FusedGroup& grp : runtime::form_groups(g, g.topo_order(), true)) {
    std::vector<NodeId> nodes = {grp.root};
    for (const runtime::PostOp& p : grp.post) nodes.push_back(p.node);
    out.push_back(nodes);
  }
  return out;
}

Attrs conv3x3() {
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{3, 3});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  a.set("dilations", std::vector<int64_t>{1, 1});
  return a;
}

TEST(GraphCost, FusionMatchesTheRuntime) {
  std::vector<Graph> graphs;
  {  // residual block: Relu(Add(Conv(Relu(Conv(x))), x))
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 8, 6, 6}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {8, 8, 3, 3}));
    ValueId a = g.add(OpKind::kRelu, {g.add(OpKind::kConv, {x, w}, conv3x3(), "c1")}, {}, "r1");
    ValueId b = g.add(OpKind::kConv, {a, w}, conv3x3(), "c2");
    g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kAdd, {b, x}, {}, "add")}, {}, "r2")});
    graphs.push_back(std::move(g));
  }
  {  // MLP: bias and Gelu fuse; a non-commutative link with the chain
     // second, and a value with two readers, end chains
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {4, 16}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {16, 16}));
    ValueId bias = g.add_constant("bias", Tensor(DType::kF32, {16}));
    ValueId h = g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {x, w}, {}, "mm1"), bias}, {}, "b1");
    ValueId gl = g.add(OpKind::kGelu, {h}, {}, "gelu");
    ValueId s = g.add(OpKind::kSub, {bias, g.add(OpKind::kMatMul, {gl, w}, {}, "mm2")}, {}, "sub");
    ValueId t = g.add(OpKind::kTanh, {gl}, {}, "tanh");  // gl now has two readers
    g.set_outputs({g.add(OpKind::kMul, {s, t}, {}, "mul")});
    graphs.push_back(std::move(g));
  }
  for (const Graph& g : graphs) EXPECT_EQ(kernel_groups(g), runtime_groups(g));
}

TEST(GraphCost, SumsKernels) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {64, 64}});
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {64, 64}));
  g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {x, w}, {}, "mm")}, {}, "relu")});
  DeviceProfile d = builtin_profile("a100");
  GraphCost fused = graph_cost(g, d), unfused = graph_cost(g, d, {}, false);
  EXPECT_EQ(fused.kernels.size(), 1u);
  EXPECT_EQ(unfused.kernels.size(), 2u);
  EXPECT_NEAR(unfused.time_s, unfused.kernels[0].time_s + unfused.kernels[1].time_s, 1e-15);
  EXPECT_LT(fused.time_s, unfused.time_s);  // one launch and no intermediate
  EXPECT_EQ(fused.flops, unfused.flops);
}

}  // namespace
}  // namespace tessera::cost
