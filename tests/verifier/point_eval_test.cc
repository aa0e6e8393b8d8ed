// The position-wise evaluator against interpret<Zp> on every op case of the
// op table (tests/graph/op_cases.h): each element it computes from a node's
// dim map must be the whole evaluation's, whichever rule the map selects.
#include "verifier/point_eval.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "tests/graph/op_cases.h"
#include "verifier/point_plan.h"
#include "verifier/random.h"

namespace tessera::verifier {
namespace {

// The case's graph with every float input first passed through Neg, so the
// node's operands are computed position by position instead of held whole
// (the evaluator's lookup path rather than its dense one).
Graph through_neg(const Graph& g, NodeId node) {
  Graph h;
  std::map<ValueId, ValueId> to;
  for (ValueId v : g.inputs()) {
    ValueId x = h.add_input(g.value(v).name, g.type(v));
    to[v] = is_float(g.type(v).dtype) ? h.add(OpKind::kNeg, {x}) : x;
  }
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).constant) to[v] = h.add_constant(g.value(v).name, *g.value(v).constant);
  const Node& n = g.node(node);
  std::vector<ValueId> ins;
  for (ValueId v : n.inputs) ins.push_back(v == kNoValue ? kNoValue : to.at(v));
  NodeId m = h.add_node(n.kind, ins, n.attrs, n.name);
  h.set_outputs(h.node(m).outputs);
  return h;
}

// Every position of every output, in a shuffled order (so that a row op's
// slab is sometimes asked for at its middle first).
int check_every_position(const Graph& g, uint64_t seed, const std::string& name) {
  std::vector<TensorType> types;
  for (ValueId v : g.inputs()) types.push_back(g.type(v));
  SplitMix rng(seed);
  std::vector<RefTensor<Zp>> in = random_inputs<Zp>(types, rng);
  std::vector<RefTensor<Zp>> whole;
  try {
    whole = interpret<Zp>(g, in);
  } catch (const Error&) {
    return 0;  // no Z_p kernel (the full path reports it)
  }
  std::vector<std::pair<size_t, int64_t>> order;
  for (size_t j = 0; j < whole.size(); ++j)
    for (int64_t f = 0; f < whole[j].numel(); ++f) order.push_back({j, f});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  int64_t work = 0;
  PointEvaluator pe(g, in, &work, INT64_MAX);
  for (const auto& [j, f] : order) {
    const RefTensor<Zp>& w = whole[j];
    std::vector<int64_t> idx(w.type.shape.size());
    int64_t rem = f;
    for (size_t d = idx.size(); d-- > 0;) {
      idx[d] = rem % w.type.shape[d];
      rem /= w.type.shape[d];
    }
    uint64_t want = w.is_num() ? w.num[static_cast<size_t>(f)].v : static_cast<uint64_t>(w.ints[static_cast<size_t>(f)]);
    uint64_t got = pe.output_at(j, idx);
    EXPECT_EQ(got, want) << name << " output " << j << " at " << f;
    if (got != want) return 0;
  }
  return 1;
}

TEST(PointEvaluator, MatchesInterpretOnEveryOpCase) {
  std::map<PointPlan::Mode, int> by_mode;
  int checked = 0;
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u})
    for (const ::tessera::testing::OpCase& c : ::tessera::testing::op_cases(seed)) {
      checked += check_every_position(c.graph, seed, c.name);
      checked += check_every_position(through_neg(c.graph, c.node), seed + 100, c.name + " (through Neg)");
      ++by_mode[make_point_plan(c.graph, c.node).mode];
    }
  EXPECT_GT(checked, 800);
  // Every rule is exercised.
  for (PointPlan::Mode m : {PointPlan::Mode::kElementwise, PointPlan::Mode::kView, PointPlan::Mode::kCopy,
                            PointPlan::Mode::kProductSum, PointPlan::Mode::kRow, PointPlan::Mode::kWhole})
    EXPECT_GT(by_mode[m], 0) << static_cast<int>(m);
}

// An empty Concat input is a piece with no positions: the pieces around it
// must still be found.
TEST(PointEvaluator, ConcatSkipsEmptyInputs) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {2, 3}}), e = g.add_input("e", {DType::kF32, {0, 3}});
  ValueId b = g.add_input("b", {DType::kF32, {1, 3}});
  Attrs at;
  at.set("axis", int64_t{0});
  g.set_outputs({g.add(OpKind::kConcat, {a, e, b}, at)});
  EXPECT_EQ(check_every_position(g, 9, "Concat"), 1);
}

// The rule each kind gets from its map: nothing that used to run position
// by position falls back to whole evaluation.
TEST(PointEvaluator, RulesReadOffTheMaps) {
  std::map<std::string, PointPlan::Mode> want = {
      {"Transpose", PointPlan::Mode::kCopy},     {"Slice", PointPlan::Mode::kCopy},
      {"Concat", PointPlan::Mode::kCopy},        {"Split", PointPlan::Mode::kCopy},
      {"Expand", PointPlan::Mode::kCopy},        {"Tile", PointPlan::Mode::kCopy},
      {"Reshape", PointPlan::Mode::kView},       {"Flatten", PointPlan::Mode::kView},
      {"MatMul", PointPlan::Mode::kProductSum},  {"Gemm", PointPlan::Mode::kProductSum},
      {"Conv", PointPlan::Mode::kProductSum},    {"Softmax", PointPlan::Mode::kRow},
      {"LogSoftmax", PointPlan::Mode::kRow},     {"CumSum", PointPlan::Mode::kRow},
      {"ReduceSum", PointPlan::Mode::kRow},      {"ReduceMax", PointPlan::Mode::kRow},
      {"ArgMax", PointPlan::Mode::kRow},         {"LayerNormalization", PointPlan::Mode::kRow},
      {"BatchNormalization", PointPlan::Mode::kRow}, {"GlobalAveragePool", PointPlan::Mode::kRow},
      {"Relu", PointPlan::Mode::kElementwise},   {"Gather", PointPlan::Mode::kWhole},
      {"Trilu", PointPlan::Mode::kWhole},        {"MaxPool", PointPlan::Mode::kWhole}};
  for (const ::tessera::testing::OpCase& c : ::tessera::testing::op_cases(1)) {
    std::string kind = op_name(c.graph.node(c.node).kind);
    auto it = want.find(kind);
    if (it == want.end()) continue;
    EXPECT_EQ(static_cast<int>(make_point_plan(c.graph, c.node).mode), static_cast<int>(it->second)) << c.name;
  }
}

}  // namespace
}  // namespace tessera::verifier
