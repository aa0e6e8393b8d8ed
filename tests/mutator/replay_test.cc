// replay_rules: a plan rederived from its original by rule instances that
// proven obligations cover, and refused where no proven rule reproduces it.
#include <gtest/gtest.h>

#include "graph/hash.h"
#include "graph/text_form.h"
#include "mutator/replay.h"
#include "mutator/rules/rule.h"
#include "tests/mutator/mutator_test_util.h"

namespace tessera::mutator {
namespace {

// Two 3x3 convolutions in a row (ReLU between), both rewritable by
// conv-winograd.
// `bump` is added to one element of the first Conv's weight.
Graph two_convs(uint64_t seed = 5, double bump = 0) {
  std::mt19937_64 rng(seed);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 6, 12, 12}});
  Attrs a = testing::conv_attrs(3, 1, 1);
  Tensor w1 = testing::random_tensor(DType::kF32, {8, 6, 3, 3}, rng);
  w1.set_double(7, w1.get_double(7) + bump);
  ValueId c1 = g.add(OpKind::kConv, {x, g.add_constant("w1", w1), testing::weight(g, "b1", {8}, rng)}, a, "conv1");
  ValueId r1 = g.add(OpKind::kRelu, {c1}, {}, "relu1");
  ValueId c2 = g.add(OpKind::kConv, {r1, testing::weight(g, "w2", {4, 8, 3, 3}, rng)}, a, "conv2");
  g.set_outputs({g.add(OpKind::kRelu, {c2}, {}, "relu2")});
  return g;
}

// g with conv-winograd's `form`-th proposal (0: F(2x2,3x3), 1: F(4x4,3x3))
// applied to the Conv named `conv`.
Graph winograd_at(const Graph& g, const std::string& conv, size_t form) {
  auto users = g.users();
  RuleContext ctx{g, users};
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (g.node(n).name == conv) {
      std::vector<Mutation> ms = find_rule("conv-winograd").fn(ctx, n);
      EXPECT_GT(ms.size(), form);
      return apply_mutation(g, ms.at(form));
    }
  ADD_FAILURE() << "no node " << conv;
  return g;
}

TEST(Replay, RederivesWinogradRewritesWithTheirObligations) {
  Graph g = two_convs();
  Graph plan = winograd_at(winograd_at(g, "conv1", 1), "conv2", 0);
  ReplayResult r = replay_rules(g, plan);
  EXPECT_TRUE(r.equal);
  // The two rewrites, and the layout normal form both sides share.
  std::vector<std::string> obligations;
  for (const ReplayStep& s : r.steps) {
    if (s.rule == "conv-winograd") obligations.push_back(s.obligation);
    else EXPECT_EQ(s.rule, "layout-normal-form");
  }
  std::sort(obligations.begin(), obligations.end());
  EXPECT_EQ(obligations, (std::vector<std::string>{"conv-winograd-f2", "conv-winograd-f4"}));
  EXPECT_TRUE(structurally_equal(r.rederived, r.target));
  EXPECT_FALSE(structurally_equal(r.rederived, g));
  std::string summary = replay_summary(r.steps);
  EXPECT_NE(summary.find("conv-winograd [z3:conv-winograd-f4]"), std::string::npos) << summary;
  EXPECT_NE(summary.find("conv-winograd [z3:conv-winograd-f2]"), std::string::npos) << summary;
}

TEST(Replay, TheSameProgramNeedsNoStep) {
  Graph g = two_convs();
  ReplayResult r = replay_rules(g, g);
  EXPECT_TRUE(r.equal);
  EXPECT_TRUE(r.steps.empty());
}

// A planted wrong rewrite: the Winograd form of the first Conv with one
// weight element off, so its transformed weights are not those of the
// original's weight. No proven rule instance gives them.
TEST(Replay, ATamperedTransformIsNotRederived) {
  Graph g = two_convs();
  Graph plan = winograd_at(two_convs(5, 0.5), "conv1", 1);
  ReplayResult r = replay_rules(g, plan);
  EXPECT_FALSE(r.equal);
  EXPECT_FALSE(structurally_equal(r.rederived, r.target));
  for (const ReplayStep& s : r.steps) EXPECT_NE(s.rule, "conv-winograd");
}

// A program with other weights is no rewrite of the original: the replay
// finds no step.
TEST(Replay, ARewriteNoRuleMakesIsNotRederived) {
  Graph g = two_convs();
  Graph other = two_convs(6);  // other weights, same structure
  ReplayResult r = replay_rules(g, other);
  EXPECT_FALSE(r.equal);
  EXPECT_TRUE(r.steps.empty());
}

// x [2, 3, 4] -> Reshape(first) -> Transpose(perm) -> Reshape [4, 6].
Graph moved(const Shape& first, const std::vector<int64_t>& perm) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3, 4}});
  Attrs r1, t, r2;
  r1.set("shape", std::vector<int64_t>(first.begin(), first.end()));
  t.set("perm", perm);
  r2.set("shape", std::vector<int64_t>{4, 6});
  g.set_outputs({g.add(OpKind::kReshape, {g.add(OpKind::kTranspose, {g.add(OpKind::kReshape, {x}, r1)}, t)}, r2)});
  return g;
}

// Two chains that move the elements alike share one normal form; a chain
// of the same shapes that moves them otherwise (the wrong twin) does not.
TEST(Replay, LayoutChainsThatMoveAlikeShareANormalForm) {
  Graph a = moved({6, 4}, {1, 0});
  ReplayResult same = replay_rules(a, moved({2, 3, 4}, {2, 0, 1}));
  EXPECT_TRUE(same.equal) << print_graph(same.rederived) << "\nvs\n" << print_graph(same.target);
  ReplayResult other = replay_rules(a, moved({2, 3, 4}, {2, 1, 0}));
  EXPECT_FALSE(other.equal);
}

}  // namespace
}  // namespace tessera::mutator
