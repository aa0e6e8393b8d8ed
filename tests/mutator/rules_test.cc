#include <gtest/gtest.h>

#include "cost/device_profile.h"
#include "cost/graph_cost.h"
#include "graph/text_form.h"
#include "mutator/rules/rule.h"
#include "mutator/verify_mutation.h"
#include <map>
#include <set>

#include "graph/error.h"
#include "verifier/proofs.h"
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
      for (Mutation& m : mutator::propose(rule, ctx, n, /*ways=*/2)) out.push_back(std::move(m));
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
  v.verify(ms[0], covering_obligation(find_rule("merge-matmuls-sharing-input"), ms[0]));
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
  std::map<std::string, int> fired, covered;
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
        std::string ob = covering_obligation(rule, m);
        covered[rule.name] += !ob.empty();
        verifier.verify(m, ob);
        EXPECT_TRUE(m.verification.accepted()) << rule.name << " seed " << seed << ": " << m.verification.detail;
        EXPECT_EQ(m.verification.status == Verification::kProven, !ob.empty()) << rule.name;
      }
    }
  }
  for (const Rule& rule : all_rules()) {
    // Mesh-only rules need a merged projection: their own tests below.
    if (!rule.enumerator && !rule.mesh_only) {
      EXPECT_GT(fired[rule.name], 0) << rule.name << " never fired";
      // The preconditions a rule checks are not vacuous: the instances the
      // random graphs give it meet them.
      if (rule.covered_by) EXPECT_GT(covered[rule.name], 0) << rule.name << ": no instance covered by its proof";
    }
  }
}

// GPT-2's attention: one Gemm makes Q, K and V, a Split on the last axis
// takes them apart, and the scores Q@K^T are scaled by 1/sqrt(d). The scale
// folds into Q's columns of the Gemm's weight and bias, and the Mul goes.
TEST(Rules, FoldScaleIntoWeightsThroughASplitSection) {
  std::mt19937_64 rng(2);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 6}});
  ValueId qkv = g.add(OpKind::kGemm, {x, testing::weight(g, "w", {6, 12}, rng), testing::weight(g, "b", {12}, rng)});
  Attrs r3, split, perm, perm_k;
  r3.set("shape", std::vector<int64_t>{1, 4, 12});
  split.set("axis", int64_t{2});
  split.set("split", std::vector<int64_t>{4, 4, 4});
  ValueId y = g.add(OpKind::kReshape, {qkv}, r3);
  NodeId sp = g.add_node(OpKind::kSplit, {y}, split, "split");
  Attrs heads;
  heads.set("shape", std::vector<int64_t>{1, 4, 2, 2});
  perm.set("perm", std::vector<int64_t>{0, 2, 1, 3});
  perm_k.set("perm", std::vector<int64_t>{0, 2, 3, 1});
  ValueId q = g.add(OpKind::kTranspose, {g.add(OpKind::kReshape, {g.node(sp).outputs[0]}, heads)}, perm);
  ValueId k = g.add(OpKind::kTranspose, {g.add(OpKind::kReshape, {g.node(sp).outputs[1]}, heads)}, perm_k);
  Tensor c(DType::kF32, {});
  c.set_double(0, 0.5);
  ValueId scores = g.add(OpKind::kMul, {g.add(OpKind::kMatMul, {q, k}), g.add_constant("scale", c)}, {}, "scale_mul");
  g.set_outputs({scores, g.node(sp).outputs[2]});
  std::vector<Mutation> ms = propose(g, "fold-scale-into-weights");
  ASSERT_EQ(ms.size(), 1u);
  Graph h = apply_mutation(g, ms[0]);
  h.validate();
  for (NodeId n = 0; n < h.num_nodes(); ++n) EXPECT_NE(h.node(n).kind, OpKind::kMul);
  EXPECT_LT(max_output_diff(g, h, 5), 1e-9);
  MutationVerifier v(5);
  v.verify(ms[0], covering_obligation(find_rule("fold-scale-into-weights"), ms[0]));
  EXPECT_TRUE(ms[0].verification.accepted()) << ms[0].verification.detail;
  EXPECT_LT(cost::graph_cost(h, cost::resolve_device("h100")).time_s,
            cost::graph_cost(g, cost::resolve_device("h100")).time_s);
}

// Verification tests the unfolded form, so that form must carry the factor:
// one made with another factor is caught.
TEST(Rules, FoldScaleIntoWeightsWithTheWrongFactorIsRejected) {
  auto make = [](double factor) {
    std::mt19937_64 rng(4);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {3, 5}});
    ValueId m = g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {x, testing::weight(g, "w", {5, 4}, rng)}),
                                     testing::weight(g, "b", {4}, rng)});
    Tensor c(DType::kF32, {});
    c.set_double(0, factor);
    g.set_outputs({g.add(OpKind::kDiv, {m, g.add_constant("c", c)})});
    return g;
  };
  Graph g = make(3.0), wrong = make(5.0);
  Mutation m = propose(g, "fold-scale-into-weights").at(0);
  MutationVerifier v(9);
  Mutation right = m;
  v.verify(right, kNoObligation);
  EXPECT_TRUE(right.verification.accepted()) << right.verification.detail;
  m.unfolded = propose(wrong, "fold-scale-into-weights").at(0).unfolded;
  v.verify(m, kNoObligation);
  EXPECT_FALSE(m.verification.accepted());
}

// The scale may not fold where the chain's value is read elsewhere, nor into
// a weight through a Split on another axis than the product's columns.
TEST(Rules, FoldScaleIntoWeightsRefusesSharedValuesAndOtherSplitAxes) {
  std::mt19937_64 rng(3);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 6}});
  ValueId m = g.add(OpKind::kMatMul, {x, testing::weight(g, "w", {6, 4}, rng)});
  Tensor c(DType::kF32, {});
  c.set_double(0, 2.0);
  ValueId s = g.add(OpKind::kDiv, {m, g.add_constant("c", c)});
  g.set_outputs({s, m});  // m is read twice
  EXPECT_TRUE(propose(g, "fold-scale-into-weights").empty());
  g.set_outputs({s});
  EXPECT_EQ(propose(g, "fold-scale-into-weights").size(), 1u);

  Graph h;
  ValueId hx = h.add_input("x", {DType::kF32, {4, 6}});
  ValueId hm = h.add(OpKind::kMatMul, {hx, testing::weight(h, "w", {6, 4}, rng)});
  Attrs rows;
  rows.set("axis", int64_t{0});
  rows.set("split", std::vector<int64_t>{2, 2});
  NodeId sp = h.add_node(OpKind::kSplit, {hm}, rows, "rows");
  ValueId hs = h.add(OpKind::kMul, {h.node(sp).outputs[0], h.add_constant("c", c)});
  h.set_outputs({hs, h.node(sp).outputs[1]});
  EXPECT_TRUE(propose(h, "fold-scale-into-weights").empty());
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
  }
}

// Every rule either names Z3 obligations that exist and checks its
// instances against them, or says why its instances are each tested.
TEST(Rules, EveryRuleIsProvenOrSaysWhyNot) {
  std::set<std::string> obligations;
  for (const verifier::ObligationInfo& o : verifier::proof_obligations()) obligations.insert(o.name);
  int proven = 0;
  for (const Rule& r : all_rules()) {
    // Proven with its instances checked, or it says why they are tested.
    EXPECT_NE(r.covered_by != nullptr && !r.obligations.empty(), !r.per_instance.empty()) << r.name;
    for (const std::string& ob : r.obligations) EXPECT_TRUE(obligations.count(ob)) << r.name << ": " << ob;
    // A mesh-only rule may name its identity's obligation and still test
    // every instance (split-merged-projection: the Reshape it keeps).
    if (!r.mesh_only) EXPECT_EQ(r.covered_by != nullptr, !r.obligations.empty()) << r.name;
    proven += r.covered_by != nullptr;
    EXPECT_NE(check_text(r).find(r.obligations.empty() ? "[per instance: " : "[proof: "), std::string::npos);
    if (!r.per_instance.empty()) EXPECT_NE(check_text(r).find(r.per_instance), std::string::npos) << r.name;
  }
  EXPECT_GE(proven, 11);
}

}  // namespace
}  // namespace tessera::mutator
