#include <gtest/gtest.h>

#include "cost/device_profile.h"
#include "cost/graph_cost.h"
#include "graph/text_form.h"
#include "mutator/rules/rule.h"
#include "mutator/verify_mutation.h"
#include <map>
#include <set>

#include "graph/error.h"
#include "tests/mutator/mutator_test_util.h"
#include "tests/mutator/random_graphs.h"

namespace tessera::mutator {
namespace {

using testing::max_output_diff;

std::vector<Mutation> propose(const Graph& g, const std::string& rule_name) {
  const Rule& rule = find_rule(rule_name);
  auto users = g.users();
  RuleContext ctx{g, users};
  std::vector<Mutation> out;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (std::find(rule.roots.begin(), rule.roots.end(), g.node(n).kind) != rule.roots.end())
      for (Mutation& m : rule.fn(ctx, n)) out.push_back(std::move(m));
  return out;
}

TEST(Rules, MergeMatmulsSharingInputMergesQkvWithBiases) {
  Graph g = testing::qkv_graph(8, 16);
  std::vector<Mutation> ms = propose(g, "merge-matmuls-sharing-input");
  ASSERT_EQ(ms.size(), 1u);
  Graph h = apply_mutation(g, ms[0]);
  int matmuls = 0, splits = 0;
  for (NodeId n = 0; n < h.num_nodes(); ++n) {
    matmuls += h.node(n).kind == OpKind::kMatMul;
    splits += h.node(n).kind == OpKind::kSplit;
  }
  EXPECT_EQ(matmuls, 1);
  EXPECT_EQ(splits, 1);
  EXPECT_LT(max_output_diff(g, h, 3), 1e-9);
  EXPECT_EQ(h.value(h.outputs()[0]).name, g.value(g.outputs()[0]).name);
  MutationVerifier v(7);
  v.verify(ms[0], find_rule("merge-matmuls-sharing-input").obligation);
  EXPECT_TRUE(ms[0].verification.accepted()) << ms[0].verification.detail;
}

}  // namespace
}  // namespace tessera::mutator

namespace tessera::mutator {
namespace {

// Property: on random small graphs, every mutation every rule proposes keeps
// the reference result and passes verification; and every rule fires on
// some graph (so the property is not vacuous). Enumerators propose unverified
// mutants by design; pet_test.cc holds their property.
TEST(RulesProperty, EveryRuleKeepsTheReferenceResult) {
  std::map<std::string, int> fired;
  MutationVerifier verifier(11);
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    Graph g = testing::random_graph(seed);
    for (const Rule& rule : all_rules()) {
      if (rule.enumerator) continue;
      for (Mutation& m : propose(g, rule.name)) {
        ++fired[rule.name];
        Graph h = apply_mutation(g, m);
        h.validate();
        EXPECT_LT(testing::max_output_diff(g, h, seed), 1e-5) << rule.name << " on seed " << seed << "\n" << print_graph(g);
        verifier.verify(m, rule.obligation);
        EXPECT_TRUE(m.verification.accepted()) << rule.name << " seed " << seed << ": " << m.verification.detail;
      }
    }
  }
  for (const Rule& rule : all_rules())
    if (!rule.enumerator) EXPECT_GT(fired[rule.name], 0) << rule.name << " never fired";
}

// A wrong replacement must be caught by verification: swap two Split outputs.
TEST(Rules, VerificationRejectsAWrongMerge) {
  Graph g = testing::qkv_graph(4, 8);
  Mutation m = propose(g, "merge-matmuls-sharing-input").at(0);
  std::vector<ValueId> outs = m.replacement.outputs();
  std::swap(outs[0], outs[1]);
  m.replacement.set_outputs(outs);
  MutationVerifier v(3);
  v.verify(m, kNoObligation);
  EXPECT_FALSE(m.verification.accepted());
}

TEST(RulesGolden, TransposeComposeOfInversesEliminates) {
  Graph g = parse_graph(R"(graph t {
    input x: f32[2x3x4]
    a = Transpose[t1](x) {perm=[0, 2, 1]}
    b = Transpose[t2](a) {perm=[0, 2, 1]}
    y = Relu[r](b)
    output y
  })");
  Graph h = apply_mutation(g, propose(g, "transpose-compose").at(0));
  EXPECT_EQ(print_graph(h), "graph t {\n  input x: f32[2x3x4]\n  y = Relu[r](x)\n  output y\n}\n");
}

TEST(RulesGolden, ReshapeChainCollapses) {
  Graph g = parse_graph(R"(graph t {
    input x: f32[2x3x4]
    a = Reshape[r1](x) {shape=[6, 4]}
    b = Reshape[r2](a) {shape=[2, 12]}
    y = Relu[r](b)
    output y
  })");
  Graph h = apply_mutation(g, propose(g, "reshape-chain").at(0));
  std::string text = print_graph(h);
  EXPECT_NE(text.find("Reshape[reshape-chain_"), std::string::npos) << text;
  EXPECT_NE(text.find("(x) {shape=[2, 12]}"), std::string::npos) << text;
  EXPECT_EQ(text.find("r1"), std::string::npos) << text;
}

TEST(Rules, UnknownRuleNameListsValidNames) {
  try {
    find_rule("no-such-rule");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("merge-matmuls-sharing-input"), std::string::npos);
  }
}

TEST(Rules, RuleNamesAreKebabCaseAndUnique) {
  std::set<std::string> names;
  for (const Rule& r : all_rules()) {
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    for (char c : r.name) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') << r.name;
    EXPECT_FALSE(r.identity.empty());
    EXPECT_FALSE(r.obligation.empty());
  }
}

}  // namespace
}  // namespace tessera::mutator
