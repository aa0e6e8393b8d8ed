// conv-winograd: F(2x2,3x3) and F(4x4,3x3) rewrites of 3x3 convolutions,
// against the reference result, through the multilinear test, and refused
// where the identity does not hold.
#include <gtest/gtest.h>

#include "mutator/rules/rule.h"
#include "mutator/verify_mutation.h"
#include "tests/mutator/mutator_test_util.h"

namespace tessera::mutator {
namespace {

using testing::max_output_diff;

std::vector<Mutation> winograd(const Graph& g) {
  auto users = g.users();
  RuleContext ctx{g, users};
  std::vector<Mutation> out;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (g.node(n).kind == OpKind::kConv)
      for (Mutation& m : find_rule("conv-winograd").fn(ctx, n)) out.push_back(std::move(m));
  return out;
}

Graph conv_graph(Shape x, int64_t out_channels, std::vector<int64_t> pads, bool bias, uint64_t seed = 3,
                 int64_t stride = 1, int64_t kernel = 3) {
  std::mt19937_64 rng(seed);
  Graph g;
  ValueId in = g.add_input("x", {DType::kF32, x});
  std::vector<ValueId> ins = {in, testing::weight(g, "w", {out_channels, x[1], kernel, kernel}, rng)};
  if (bias) ins.push_back(testing::weight(g, "b", {out_channels}, rng));
  Attrs a = testing::conv_attrs(kernel, stride);
  a.set("pads", std::move(pads));
  g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kConv, ins, a, "conv")}, {}, "relu")});
  return g;
}

struct Case {
  Shape x;
  int64_t out_channels;
  std::vector<int64_t> pads;
  bool bias;
};

TEST(Winograd, BothFormsMatchTheConvolutionAndPassTheMultilinearTest) {
  // Square and odd sizes (the last tiles are sliced), uneven pads, a batch.
  const Case cases[] = {
      {{1, 8, 14, 14}, 16, {1, 1, 1, 1}, true},
      {{2, 5, 9, 7}, 6, {1, 0, 2, 1}, false},
      {{1, 4, 8, 8}, 4, {0, 0, 0, 0}, true},
  };
  MutationVerifier v(17);
  for (const Case& c : cases) {
    Graph g = conv_graph(c.x, c.out_channels, c.pads, c.bias);
    std::vector<Mutation> ms = winograd(g);
    ASSERT_EQ(ms.size(), 2u) << shape_str(c.x);
    for (Mutation& m : ms) {
      Graph h = apply_mutation(g, m);
      EXPECT_EQ(h.type(h.outputs()[0]), g.type(g.outputs()[0]));
      // Exact up to the transformed weights' rounding to f32 (outputs are
      // of order 10; F(4,3)'s larger transform entries lose a few more bits).
      EXPECT_LT(max_output_diff(g, h, 5), 3e-5) << m.description;
      ASSERT_GT(m.unfolded.num_nodes(), m.replacement.num_nodes());
      v.verify(m, covering_obligation(find_rule("conv-winograd"), m));
      EXPECT_TRUE(m.verification.accepted()) << m.description << ": " << m.verification.detail;
    }
  }
}

TEST(Winograd, AWrongTransformIsRejected) {
  Graph g = conv_graph({1, 4, 8, 8}, 4, {1, 1, 1, 1}, false);
  std::vector<Mutation> ms = winograd(g);
  ASSERT_FALSE(ms.empty());
  Mutation m = ms[0];
  // Swap the two in-tile axes of the output in the form verification reads
  // (the applied form is built the same way).
  bool swapped = false;
  for (NodeId n = 0; n < m.unfolded.num_nodes(); ++n) {
    Node& node = m.unfolded.mutable_node(n);
    if (node.kind == OpKind::kTranspose && node.attrs.ints("perm") == std::vector<int64_t>{3, 2, 4, 0, 5, 1}) {
      node.attrs.set("perm", std::vector<int64_t>{3, 2, 4, 1, 5, 0});
      swapped = true;
    }
  }
  ASSERT_TRUE(swapped);
  MutationVerifier v(19);
  v.verify(m, kNoObligation);
  EXPECT_FALSE(m.verification.accepted());
}

// Both forms' instances meet the obligations' preconditions and are proven
// without a test; an instance whose transformed weights are not G g G^T
// (one entry changed) is outside them, tested, and rejected.
TEST(Winograd, InstancesAreProvenAndATamperedOneIsTested) {
  Graph g = conv_graph({1, 8, 14, 14}, 16, {1, 1, 1, 1}, true);
  std::vector<Mutation> ms = winograd(g);
  ASSERT_EQ(ms.size(), 2u);
  const Rule& rule = find_rule("conv-winograd");
  EXPECT_EQ(covering_obligation(rule, ms[0]), "conv-winograd-f2");
  EXPECT_EQ(covering_obligation(rule, ms[1]), "conv-winograd-f4");
  MutationVerifier v(23);
  for (Mutation& m : ms) {
    v.verify(m, covering_obligation(rule, m));
    EXPECT_EQ(m.verification.status, Verification::kProven) << m.verification.detail;
    EXPECT_EQ(m.verification.method, "z3:" + covering_obligation(rule, m));
  }
  EXPECT_EQ(v.tested(), 0);
  Mutation bad = ms[0];
  bool tampered = false;
  for (NodeId n = 0; n < bad.replacement.num_nodes() && !tampered; ++n)
    for (size_t i = 0; i < bad.replacement.node(n).inputs.size() && !tampered; ++i) {
      ValueId in = bad.replacement.node(n).inputs[i];
      if (in == kNoValue || !bad.replacement.value(in).is_constant() || bad.replacement.type(in).shape != Shape{16, 16, 8})
        continue;
      Tensor u = bad.replacement.value(in).constant->reshaped({16, 16, 8});
      Tensor changed(u.dtype(), u.shape());
      for (int64_t k = 0; k < u.numel(); ++k) changed.set_double(k, u.get_double(k) + (k == 5 ? 1.0 : 0.0));
      ValueId c = bad.replacement.add_constant("tampered_u", changed);
      bad.replacement.mutable_node(n).inputs[i] = c;
      tampered = true;
    }
  ASSERT_TRUE(tampered);
  bad.unfolded = Graph{};  // the test reads the tampered form
  EXPECT_EQ(covering_obligation(rule, bad), "");
  v.verify(bad, covering_obligation(rule, bad));
  EXPECT_EQ(v.tested(), 1);
  EXPECT_FALSE(bad.verification.accepted());
}

TEST(Winograd, RefusesOtherConvolutions) {
  EXPECT_TRUE(winograd(conv_graph({1, 4, 8, 8}, 4, {1, 1, 1, 1}, false, 3, 2)).empty());  // stride 2
  EXPECT_TRUE(winograd(conv_graph({1, 4, 8, 8}, 4, {2, 2, 2, 2}, false, 3, 1, 5)).empty());  // 5x5
  // Grouped.
  Graph g = conv_graph({1, 4, 8, 8}, 4, {1, 1, 1, 1}, false);
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (g.node(n).kind == OpKind::kConv) {
      std::mt19937_64 rng(1);
      g.mutable_node(n).attrs.set("group", int64_t{2});
      g.mutable_node(n).inputs[1] = testing::weight(g, "w2", {4, 2, 3, 3}, rng);
    }
  EXPECT_TRUE(winograd(g).empty());
  // Too small for one m x m tile of F(4,3): only F(2,3).
  EXPECT_EQ(winograd(conv_graph({1, 4, 3, 3}, 4, {1, 1, 1, 1}, false)).size(), 1u);
}

}  // namespace
}  // namespace tessera::mutator
