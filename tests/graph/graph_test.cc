// Graph construction, ordering and surgery: add_node's errors carry the node
// and op, topo_order finds cycles, remove_dead / extract / replace_all_uses
// keep the graph consistent, validate catches broken invariants.
#include "graph/graph.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "graph/error.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

using test::f32;

Attrs gather_attrs(int64_t axis) {
  Attrs a;
  a.set("mesh_axis", std::string("tp"));
  a.set("group_size", int64_t{2});
  a.set("axis", axis);
  return a;
}

using test::error_of;

TEST(GraphTest, AddNodeInfersTypesAndNamesOutputs) {
  Graph g;
  ValueId x = g.add_input("x", f32({2, 3}));
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {3, 4}));
  NodeId mm = g.add_node(OpKind::kMatMul, {x, w}, {}, "mm");
  ValueId y = g.node(mm).outputs[0];
  EXPECT_EQ(g.type(y), f32({2, 4}));
  EXPECT_EQ(g.value(y).name, "mm:0");
  EXPECT_EQ(g.value(y).producer, mm);
  EXPECT_EQ(g.find_value("mm:0"), y);
  EXPECT_FALSE(g.find_value("nope").has_value());
  // Defaults are filled in by schema validation.
  ValueId lr = g.add(OpKind::kLeakyRelu, {y});
  EXPECT_DOUBLE_EQ(g.node(g.value(lr).producer).attrs.f("alpha"), 0.01);
  EXPECT_EQ(g.parameter_count(), 12);
  EXPECT_EQ(g.parameter_bytes(), 48);
}

TEST(GraphTest, ShapeErrorNamesNodeAndOp) {
  Graph g;
  ValueId a = g.add_input("a", f32({2, 3}));
  ValueId b = g.add_input("b", f32({4}));
  Error e = error_of([&] { g.add_node(OpKind::kAdd, {a, b}, {}, "bad_add"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_EQ(e.context().node, "bad_add");
  EXPECT_EQ(e.context().op, "Add");
  EXPECT_NE(std::string(e.what()).find("node 'bad_add' (Add)"), std::string::npos) << e.what();
  EXPECT_EQ(g.num_nodes(), 0);  // nothing half-added
}

TEST(GraphTest, AttributeErrorsNameNodeAndAttribute) {
  Graph g;
  ValueId x = g.add_input("x", f32({4, 2}));
  Attrs unknown = gather_attrs(0);
  unknown.set("colour", int64_t{1});
  Error e1 = error_of([&] { g.add_node(OpKind::kAllGather, {x}, unknown, "ag"); });
  EXPECT_EQ(e1.context().node, "ag");
  EXPECT_NE(e1.message().find("unknown attribute 'colour'"), std::string::npos) << e1.what();

  Attrs missing = gather_attrs(0);
  missing.erase("axis");
  Error e2 = error_of([&] { g.add_node(OpKind::kAllGather, {x}, missing, "ag"); });
  EXPECT_NE(e2.message().find("required attribute 'axis' is missing"), std::string::npos) << e2.what();

  Attrs wrong = gather_attrs(0);
  wrong.set("axis", 1.5);
  Error e3 = error_of([&] { g.add_node(OpKind::kAllGather, {x}, wrong, "ag"); });
  EXPECT_NE(e3.message().find("attribute 'axis' must be int, got float"), std::string::npos) << e3.what();
}

TEST(GraphTest, InputCountAndMissingRequiredInput) {
  Graph g;
  ValueId x = g.add_input("x", f32({2}));
  Error e1 = error_of([&] { g.add_node(OpKind::kRelu, {x, x}, {}, "r"); });
  EXPECT_EQ(e1.context().op, "Relu");
  EXPECT_NE(e1.message().find("takes 1 inputs, got 2"), std::string::npos) << e1.what();
  Error e2 = error_of([&] { g.add_node(OpKind::kAdd, {x, kNoValue}, {}, "a"); });
  EXPECT_NE(e2.message().find("required input 1 is missing"), std::string::npos) << e2.what();
}

TEST(GraphTest, DuplicateNamesAreRejected) {
  Graph g;
  g.add_input("x", f32({2}));
  Error e = error_of([&] { g.add_input("x", f32({3})); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_NE(e.message().find("'x' is defined twice"), std::string::npos);
  ValueId y = g.add_input("y", f32({2}));
  EXPECT_THROW(g.rename_value(y, "x"), Error);
  g.rename_value(y, "z");
  EXPECT_EQ(g.find_value("z"), y);
  EXPECT_FALSE(g.find_value("y").has_value());
}

TEST(GraphTest, TopoOrderPutsProducersFirst) {
  Graph g;
  ValueId x = g.add_input("x", f32({2}));
  ValueId r0 = g.add(OpKind::kRelu, {x}, {}, "first");
  ValueId r1 = g.add(OpKind::kNeg, {x}, {}, "second");
  ValueId sum = g.add(OpKind::kAdd, {r0, r1}, {}, "sum");
  g.set_outputs({sum});
  EXPECT_EQ(g.topo_order(), (std::vector<NodeId>{0, 1, 2}));
  // Make node 0 read node 1's output: node 1 must now come first.
  g.mutable_node(0).inputs[0] = r1;
  EXPECT_EQ(g.topo_order(), (std::vector<NodeId>{1, 0, 2}));
}

TEST(GraphTest, TopoOrderReportsCycle) {
  Graph g;
  ValueId x = g.add_input("x", f32({2}));
  ValueId a = g.add(OpKind::kRelu, {x}, {}, "a");
  ValueId b = g.add(OpKind::kNeg, {a}, {}, "b");
  g.add(OpKind::kAbs, {b}, {}, "c");
  g.mutable_node(0).inputs[0] = b;  // a <- b <- a
  Error e = error_of([&] { g.topo_order(); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_NE(e.message().find("cycle"), std::string::npos);
  EXPECT_TRUE(e.context().node == "a" || e.context().node == "b") << e.what();
  EXPECT_THROW(g.validate(), Error);
}

TEST(GraphTest, RemoveDeadKeepsOnlyWhatReachesOutputs) {
  Graph g;
  ValueId x = g.add_input("x", f32({2}));
  ValueId unused_in = g.add_input("unused", f32({3}));
  ValueId c = g.add_constant("c", Tensor::from_doubles(DType::kF32, {2}, {1, 2}));
  g.add_constant("dead_const", Tensor(DType::kF32, {5}));
  ValueId dead = g.add(OpKind::kExp, {x}, {}, "dead");
  g.add(OpKind::kNeg, {dead}, {}, "dead2");
  ValueId y = g.add(OpKind::kAdd, {x, c}, {}, "live");
  g.set_outputs({y});
  ASSERT_EQ(g.num_nodes(), 3);

  EXPECT_TRUE(g.remove_dead());
  EXPECT_EQ(g.num_nodes(), 1);
  EXPECT_EQ(g.node(0).name, "live");
  EXPECT_EQ(g.inputs().size(), 2u);  // unused graph inputs stay
  EXPECT_EQ(g.value(g.inputs()[1]).name, "unused");
  EXPECT_FALSE(g.find_value("dead_const").has_value());
  EXPECT_FALSE(g.find_value("dead:0").has_value());
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.value(g.outputs()[0]).name, "live:0");
  EXPECT_EQ(g.value(g.outputs()[0]).producer, 0);
  EXPECT_EQ(g.find_value("c"), g.node(0).inputs[1]);
  g.validate();
  EXPECT_FALSE(g.remove_dead());
  (void)unused_in;
}

TEST(GraphTest, RemoveDeadKeepsSiblingOutputsOfLiveNodes) {
  Graph g;
  ValueId x = g.add_input("x", f32({4, 2}));
  Attrs split;
  split.set("axis", int64_t{0});
  split.set("split", std::vector<int64_t>{1, 3});
  NodeId s = g.add_node(OpKind::kSplit, {x}, split, "s");
  g.set_outputs({g.node(s).outputs[1]});
  g.remove_dead();
  ASSERT_EQ(g.num_nodes(), 1);
  EXPECT_EQ(g.node(0).outputs.size(), 2u);
  g.validate();
}

TEST(GraphTest, ReplaceAllUsesRewiresNodesAndOutputs) {
  Graph g;
  ValueId x = g.add_input("x", f32({2}));
  ValueId a = g.add(OpKind::kRelu, {x}, {}, "a");
  ValueId b = g.add(OpKind::kNeg, {a}, {}, "b");
  ValueId c = g.add(OpKind::kAdd, {a, b}, {}, "c");
  g.set_outputs({a, c});
  ValueId z = g.add(OpKind::kAbs, {x}, {}, "z");
  g.replace_all_uses(a, z);
  EXPECT_EQ(g.node(1).inputs[0], z);
  EXPECT_EQ(g.node(2).inputs[0], z);
  EXPECT_EQ(g.outputs()[0], z);
  EXPECT_EQ(g.outputs()[1], c);
  EXPECT_EQ(g.users()[a].size(), 0u);
  EXPECT_EQ(g.users()[z].size(), 2u);
  // The consumer now comes before its new producer in insertion order.
  std::vector<NodeId> order = g.topo_order();
  auto pos = [&](NodeId n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  EXPECT_LT(pos(3), pos(1));
  g.validate();
}

TEST(GraphTest, ExtractTakesBoundaryValuesAsInputsAndOutputs) {
  Graph g;
  ValueId x = g.add_input("x", f32({2, 3}));
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {3, 3}));
  ValueId a = g.add(OpKind::kRelu, {x}, {}, "a");
  ValueId m = g.add(OpKind::kMatMul, {a, w}, {}, "m");
  ValueId n = g.add(OpKind::kNeg, {m}, {}, "n");
  ValueId s = g.add(OpKind::kAdd, {n, a}, {}, "s");
  g.set_outputs({s});
  // Extract {m, n}: reads a (becomes an input) and w (stays a constant);
  // n's output is read outside; m's is not.
  Graph sub = g.extract({g.value(n).producer, g.value(m).producer});
  ASSERT_EQ(sub.inputs().size(), 1u);
  EXPECT_EQ(sub.value(sub.inputs()[0]).name, "a:0");
  EXPECT_EQ(sub.type(sub.inputs()[0]), f32({2, 3}));
  ASSERT_TRUE(sub.find_value("w").has_value());
  EXPECT_TRUE(sub.value(*sub.find_value("w")).is_constant());
  ASSERT_EQ(sub.num_nodes(), 2);
  EXPECT_EQ(sub.node(0).name, "m");  // topological order, not the order asked
  ASSERT_EQ(sub.outputs().size(), 1u);
  EXPECT_EQ(sub.value(sub.outputs()[0]).name, "n:0");
  sub.validate();
}

TEST(GraphTest, ValidateCatchesTypeDisagreement) {
  Graph g;
  ValueId x = g.add_input("x", f32({4, 2}));
  NodeId ag = g.add_node(OpKind::kAllGather, {x}, gather_attrs(0), "ag");
  g.set_outputs({g.node(ag).outputs[0]});
  g.validate();
  // Changing the gather axis changes the inferred type; the stored one is stale.
  g.mutable_node(ag).attrs.set("axis", int64_t{1});
  Error e = error_of([&] { g.validate(); });
  EXPECT_NE(e.message().find("infers f32[4x4]"), std::string::npos) << e.what();
}

TEST(GraphTest, ValidateCatchesBadInputId) {
  Graph g;
  ValueId x = g.add_input("x", f32({2}));
  g.add(OpKind::kRelu, {x}, {}, "r");
  g.mutable_node(0).inputs[0] = 99;
  EXPECT_THROW(g.validate(), Error);
}

}  // namespace
}  // namespace tessera
