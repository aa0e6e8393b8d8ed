// The search's bookkeeping of subprograms (mutator/search.h): which
// subprogram each applied mutation came from, and the splice of each
// subprogram's best program back into the host.
#include "mutator/search.h"

#include <gtest/gtest.h>

#include <random>

#include "cost/device_profile.h"
#include "graph/error.h"
#include "graph/hash.h"
#include "tests/mutator/mutator_test_util.h"

namespace tessera::mutator {
namespace {

// x -> first (MatMul) -> relu -> second (MatMul) -> y: two subprograms of one
// MatMul each, cut at the Relu.
Graph two_matmuls() {
  std::mt19937_64 rng(7);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 4}});
  ValueId a = g.add(OpKind::kMatMul, {x, testing::weight(g, "w1", {4, 4}, rng)}, {}, "first");
  ValueId r = g.add(OpKind::kRelu, {a}, {}, "relu");
  g.set_outputs({g.add(OpKind::kMatMul, {r, testing::weight(g, "w2", {4, 4}, rng)}, {}, "second")});
  return g;
}

ValueId output_of(const Graph& g, const std::string& node) {
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (g.node(n).name == node) return g.node(n).outputs[0];
  return kNoValue;
}

// The splice of subprogram `index` (one MatMul) by a MatMul of host value
// `from` by the same weight.
Mutation splice_reading(const Graph& g, const std::vector<NodeId>& nodes, ValueId from, int index) {
  const Node& mm = g.node(nodes.at(0));
  MutationBuilder b(g, "unused", nodes);
  b.replace(mm.outputs[0], b.add(OpKind::kMatMul, {b.in(from), b.in(mm.inputs[1])}));
  Mutation m = b.finish("");
  m.id = MutationId::splice(index);
  return m;
}

TEST(MutationId, SpliceKeepsItsSubprogramAsAnIntAndNamesNodesAfterIt) {
  MutationId id = MutationId::splice(12);
  EXPECT_EQ(id.kind, MutationId::Kind::kSplice);
  EXPECT_EQ(id.subprogram, 12);
  EXPECT_EQ(id.name(), "subprogram-12");
  EXPECT_EQ(id, MutationId::splice(12));
  EXPECT_FALSE(id == MutationId::splice(1));
  Graph g = two_matmuls();
  Mutation m = MutationBuilder(g, "some-rule", {0}).finish("");
  EXPECT_EQ(m.id, (MutationId{MutationId::Kind::kRule, "some-rule", -1}));
  EXPECT_EQ(m.id.name(), "some-rule");
}

// Subprogram 0's splice reads the Relu that reads its own output: spliced,
// the host would be cyclic. It is left out (subprogram 0 keeps its MatMul),
// and subprogram 1's splice, in either order, still goes in.
TEST(SpliceSubprograms, AFailingSpliceKeepsTheOriginalSubprogram) {
  Graph g = two_matmuls();
  std::vector<std::vector<NodeId>> parts = partition_subprograms(g);
  ASSERT_EQ(parts.size(), 2u);
  ValueId r = output_of(g, "relu");
  Mutation cyclic = splice_reading(g, parts[0], r, 0);
  Mutation fine = splice_reading(g, parts[1], r, 1);
  EXPECT_THROW(apply_mutation(g, cyclic).topo_order(), Error);

  for (bool cyclic_first : {true, false}) {
    std::vector<Mutation> splices = cyclic_first ? std::vector<Mutation>{cyclic, fine} : std::vector<Mutation>{fine, cyclic};
    SpliceResult res = splice_subprograms(g, splices);
    EXPECT_EQ(res.kept, std::vector<int>{1});
    EXPECT_TRUE(structurally_equal(res.graph, apply_mutation(g, fine)));
    // Subprogram 0 is still the host's MatMul of x; subprogram 1's new node
    // is named after its splice.
    bool first_kept = false, spliced = false;
    for (NodeId n = 0; n < res.graph.num_nodes(); ++n) {
      const Node& node = res.graph.node(n);
      first_kept = first_kept || (node.name == "first" && node.inputs[0] == *res.graph.find_value("x"));
      spliced = spliced || node.name.rfind("subprogram-1_", 0) == 0;
    }
    EXPECT_TRUE(first_kept);
    EXPECT_TRUE(spliced);
    EXPECT_LT(testing::max_output_diff(g, res.graph, 3), 1e-9);
  }

  SpliceResult none = splice_subprograms(g, {cyclic});
  EXPECT_TRUE(none.kept.empty());
  EXPECT_TRUE(structurally_equal(none.graph, g));
}

TEST(SpliceSubprograms, TakesOnlySplices) {
  Graph g = two_matmuls();
  Mutation m = splice_reading(g, partition_subprograms(g)[1], output_of(g, "relu"), 1);
  m.id = MutationId{MutationId::Kind::kRule, "some-rule", -1};
  EXPECT_THROW(splice_subprograms(g, {m}), Error);
}

// Two Transpose pairs that cancel, cut apart by a Relu: one rewrite in each
// subprogram, each recorded with the index of the subprogram it rewrote.
TEST(Search, AppliedMutationsRecordTheirSubprogram) {
  Graph g;
  ValueId h = g.add_input("x", {DType::kF32, {2, 3, 4}});
  Attrs swap;
  swap.set("perm", std::vector<int64_t>{0, 2, 1});
  for (int k = 0; k < 2; ++k) {
    std::string s = std::to_string(k);
    h = g.add(OpKind::kTranspose, {g.add(OpKind::kTranspose, {h}, swap, "t" + s + "a")}, swap, "t" + s + "b");
    h = g.add(OpKind::kRelu, {h}, {}, "relu" + s);
  }
  g.set_outputs({h});
  std::vector<std::vector<NodeId>> parts = partition_subprograms(g);
  ASSERT_EQ(parts.size(), 2u);
  SearchOptions o;
  o.device = cost::resolve_device("h100");
  o.budget_s = 60;
  o.threads = 2;
  SearchResult res = search(g, o);
  ASSERT_EQ(res.applied.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(res.applied[i].rule, "transpose-compose");
    EXPECT_EQ(res.applied[i].subprogram, i);
  }
  EXPECT_LT(testing::max_output_diff(g, res.graph, 1), 1e-9);
}

}  // namespace
}  // namespace tessera::mutator
