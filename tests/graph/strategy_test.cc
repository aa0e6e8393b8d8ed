// Sharding strategies against the global op: for random shapes and every
// strategy an op offers, on 2, 3 and 4 ranks and on a 2x2 mesh, the local
// programs (reference interpreter) followed by the collectives the output
// placements name (gather the shards, sum the partials, replicas must
// agree) equal the global op. And a catalogue of wrong strategies that the
// same check rejects and the op table does not offer.
#include "graph/strategy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "tests/graph/op_cases.h"
#include "tests/graph/shard_check.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

using testing::OpCase;
using testing::op_cases;
using testing::random_inputs;

struct Check {
  bool ok = true;
  std::string why;
};

// Runs node `n` of `g` under `s` on every rank of `mesh` and compares with
// the global op on `inputs` (one per graph input).
Check run_strategy(const Graph& g, NodeId id, const Strategy& s, const DeviceMesh& mesh,
                   const std::vector<Tensor>& inputs) {
  const Node& n = g.node(id);
  std::vector<Tensor> global = evaluate(g, inputs, Precision::kF64);
  std::map<ValueId, Tensor> value_of;
  for (size_t i = 0; i < g.inputs().size(); ++i) value_of.emplace(g.inputs()[i], inputs[i]);
  for (ValueId v : n.inputs)
    if (v != kNoValue && g.value(v).constant) value_of.emplace(v, *g.value(v).constant);
  std::vector<std::vector<Tensor>> per_rank(n.outputs.size());
  for (int64_t r = 0; r < mesh.num_devices(); ++r) {
    Graph local;
    std::vector<ValueId> ins;
    std::vector<Tensor> feeds;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      ValueId v = n.inputs[i];
      if (v == kNoValue) {
        ins.push_back(kNoValue);
        continue;
      }
      Tensor block = shard_of(value_of.at(v), s.inputs[i], mesh, r);
      if (g.value(v).constant) {
        ins.push_back(local.add_constant(g.value(v).name, block));
      } else {
        ins.push_back(local.add_input(g.value(v).name, block.type()));
        feeds.push_back(block);
      }
    }
    std::vector<ValueId> outs;
    try {
      outs = emit_local(g, n, s, mesh, r, local, ins);
      local.set_outputs(outs);
      std::vector<Tensor> got = evaluate(local, feeds, Precision::kF64);
      for (size_t o = 0; o < got.size(); ++o) per_rank[o].push_back(got[o]);
    } catch (const Error& e) {
      return {false, std::string("rank ") + std::to_string(r) + " failed: " + e.what()};
    }
  }
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    testing::Assembled a = testing::assemble(per_rank[o], s.outputs[o], mesh, g.type(n.outputs[o]));
    if (!a.replicas_agree) return {false, "replicas of output " + std::to_string(o) + " disagree"};
    double err = testing::relative_error(a.value, global[o]);
    if (!(err <= 1e-5)) return {false, "output " + std::to_string(o) + " differs from the global op's by " + std::to_string(err)};
  }
  return {};
}

std::vector<DeviceMesh> meshes() {
  return {DeviceMesh::parse("tp=2"), DeviceMesh::parse("tp=3"), DeviceMesh::parse("tp=4"),
          DeviceMesh::parse("dp=2,tp=2")};
}

TEST(Strategies, CasesCoverEveryKindButCollectives) {
  std::set<OpKind> seen;
  for (const OpCase& c : op_cases(1)) seen.insert(c.graph.node(c.node).kind);
  for (int k = 0; k < kNumOpKinds; ++k) {
    auto kind = static_cast<OpKind>(k);
    if (op_def(kind).is_collective()) continue;
    EXPECT_TRUE(seen.count(kind)) << op_name(kind) << " has no case";
  }
}

TEST(Strategies, ReplicatingIsAlwaysFirst) {
  for (const OpCase& c : op_cases(1))
    for (const DeviceMesh& mesh : meshes()) {
      std::vector<Strategy> all = strategies(c.graph, c.graph.node(c.node), mesh);
      ASSERT_FALSE(all.empty()) << c.name;
      for (const Sharding& s : all[0].inputs) EXPECT_EQ(s, Sharding::replicated(mesh)) << c.name;
      for (const Sharding& s : all[0].outputs) EXPECT_EQ(s, Sharding::replicated(mesh)) << c.name;
    }
}

// A strategy is a value with equality and a hash (what the sharding cost's
// memo keys by, confirming a hash match by equality): the strategies of
// one node are pairwise unequal, each equal to its copy with the same hash.
TEST(Strategies, AreValuesWithEqualityAndHash) {
  for (const OpCase& c : op_cases(1))
    for (const DeviceMesh& mesh : meshes()) {
      std::vector<Strategy> all = strategies(c.graph, c.graph.node(c.node), mesh);
      for (size_t i = 0; i < all.size(); ++i) {
        Strategy copy = all[i];
        EXPECT_TRUE(copy == all[i]) << c.name;
        EXPECT_EQ(copy.hash(), all[i].hash()) << c.name;
        for (size_t j = i + 1; j < all.size(); ++j) EXPECT_FALSE(all[i] == all[j]) << c.name << " " << all[i].str();
      }
    }
}

// The property test of the issue, over every op kind and every strategy.
TEST(Strategies, LocalProgramsComputeTheGlobalOp) {
  std::map<std::string, int> per_family;
  int checked = 0;
  for (uint64_t seed : {1u, 2u, 3u})
    for (const OpCase& c : op_cases(seed)) {
      const Node& n = c.graph.node(c.node);
      std::vector<Tensor> inputs = random_inputs(c.graph, seed);
      for (const DeviceMesh& mesh : meshes())
        for (const Strategy& s : strategies(c.graph, n, mesh)) {
          Check r = run_strategy(c.graph, c.node, s, mesh, inputs);
          EXPECT_TRUE(r.ok) << c.name << " on " << mesh.str() << ", " << s.str() << ": " << r.why;
          ++checked;
          bool sharded = std::any_of(s.axes.begin(), s.axes.end(),
                                     [](const AxisStrategy& a) { return a.kind != AxisStrategy::Kind::kReplicate; });
          if (sharded) ++per_family[op_family_name(op_def(n.kind).family)];
        }
    }
  EXPECT_GT(checked, 2000);
  for (const char* f : {"elementwise", "reduce", "nn", "movement"}) EXPECT_GT(per_family[f], 50) << f;
  std::string counts;
  for (const auto& [f, k] : per_family) counts += " " + f + ":" + std::to_string(k);
  std::printf("%d strategies checked; sharded ones per family:%s\n", checked, counts.c_str());
}

// Helpers that build one node and look up its strategies.
struct OneNode {
  Graph g;
  NodeId node = 0;
  std::vector<Strategy> on(const std::string& mesh) const {
    return strategies(g, g.node(node), DeviceMesh::parse(mesh));
  }
  bool offers(const std::string& mesh, const std::string& text) const {
    for (const Strategy& s : on(mesh))
      if (s.str().rfind(text, 0) == 0) return true;
    return false;
  }
  std::string all(const std::string& mesh) const {
    std::string out;
    for (const Strategy& s : on(mesh)) out += "\n  " + s.str();
    return out;
  }
};

OneNode one(OpKind k, std::vector<TensorType> in, Attrs a = {}) {
  OneNode o;
  std::vector<ValueId> ins;
  for (size_t i = 0; i < in.size(); ++i) ins.push_back(o.g.add_input("in" + std::to_string(i), in[i]));
  o.node = o.g.add_node(k, ins, a, "node");
  o.g.set_outputs(o.g.node(o.node).outputs);
  return o;
}

using test::f32;

TEST(Strategies, MatMulIsColumnRowAndBatchParallel) {
  OneNode mm = one(OpKind::kMatMul, {f32({4, 6}), f32({6, 8})});
  EXPECT_TRUE(mm.offers("tp=2", "[R] x [S(1)] -> [S(1)]")) << mm.all("tp=2");  // column parallel
  EXPECT_TRUE(mm.offers("tp=2", "[S(1)] x [S(0)] -> [P]")) << mm.all("tp=2");  // row parallel
  EXPECT_TRUE(mm.offers("tp=2", "[S(0)] x [R] -> [S(0)]")) << mm.all("tp=2");  // rows of A
  EXPECT_TRUE(mm.offers("tp=2", "[P] x [R] -> [P]")) << mm.all("tp=2");
  EXPECT_TRUE(mm.offers("dp=2,tp=2", "[S(0),S(1)] x [R,S(0)] -> [S(0),P]")) << mm.all("dp=2,tp=2");
  EXPECT_TRUE(mm.offers("tp=4", "[R] x [S(1)] -> [S(1)]"));
  EXPECT_TRUE(mm.offers("tp=3", "[S(1)] x [S(0)] -> [P]"));
  // K = 6 over 4 ranks: uneven blocks (2, 2, 1, 1) of a whole dim of both
  // inputs; over 8 ranks two would hold nothing: not offered.
  EXPECT_TRUE(mm.offers("tp=4", "[S(1)] x [S(0)] -> [P]")) << mm.all("tp=4");
  EXPECT_FALSE(mm.offers("tp=8", "[S(1)] x [S(0)]")) << "K = 6 < 8 ranks";
}

TEST(Strategies, SoftmaxAndLayerNormNeverSplitTheirReducedAxes) {
  Attrs sm;
  sm.set("axis", int64_t{-1});
  OneNode s = one(OpKind::kSoftmax, {f32({4, 6})}, sm);
  EXPECT_TRUE(s.offers("tp=2", "[S(0)] -> [S(0)]"));
  EXPECT_FALSE(s.offers("tp=2", "[S(1)]")) << s.all("tp=2");
  Attrs ln;
  ln.set("axis", int64_t{1});
  OneNode l = one(OpKind::kLayerNormalization, {f32({4, 6, 8}), f32({6, 8}), f32({6, 8})}, ln);
  EXPECT_TRUE(l.offers("tp=2", "[S(0)] x [R] x [R] -> [S(0)], [S(0)], [S(0)]")) << l.all("tp=2");
  for (const Strategy& st : l.on("tp=2"))
    EXPECT_FALSE(st.inputs[0].placements[0] == Placement::shard(1) || st.inputs[0].placements[0] == Placement::shard(2))
        << st.str();
}

TEST(Strategies, ConvSplitsBatchChannelsInputChannelsAndGroups) {
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{3});
  a.set("strides", std::vector<int64_t>{1});
  a.set("pads", std::vector<int64_t>{1, 1});
  a.set("dilations", std::vector<int64_t>{1});
  OneNode c = one(OpKind::kConv, {f32({2, 4, 9}), f32({6, 4, 3}), f32({6})}, a);
  EXPECT_TRUE(c.offers("tp=2", "[S(0)] x [R] x [R] -> [S(0)]")) << c.all("tp=2");        // batch
  EXPECT_TRUE(c.offers("tp=2", "[R] x [S(0)] x [S(0)] -> [S(1)]")) << c.all("tp=2");     // output channels
  EXPECT_TRUE(c.offers("tp=2", "[S(1)] x [S(1)] x [P] -> [P]")) << c.all("tp=2");        // input channels
  EXPECT_FALSE(c.offers("tp=2", "[R] x [R] x [R] -> [S(2)]")) << "spatial needs a halo";
  a.set("group", int64_t{2});
  OneNode g = one(OpKind::kConv, {f32({2, 4, 9}), f32({6, 2, 3})}, a);
  EXPECT_TRUE(g.offers("tp=2", "[S(1)] x [S(0)] -> [S(1)]")) << g.all("tp=2");           // groups
}

TEST(Strategies, GatherIsVocabParallel) {
  Attrs a;
  a.set("axis", int64_t{0});
  OneNode g = one(OpKind::kGather, {f32({8, 6}), {DType::kI64, {2, 3}}}, a);
  EXPECT_TRUE(g.offers("tp=2", "[S(0)] x [R] -> [P] (vocab-parallel)")) << g.all("tp=2");
  EXPECT_TRUE(g.offers("tp=2", "[S(1)] x [R] -> [S(2)]")) << g.all("tp=2");  // embedding columns
  EXPECT_TRUE(g.offers("tp=3", "[R] x [S(1)] -> [S(1)]")) << g.all("tp=3");  // index positions
}

// A KV cache [batch, heads, len, head_dim] written along len at one
// position: a split of the heads (or of head_dim) passes through data,
// indices and updates; len, which the indices address, is never split.
TEST(Strategies, ScatterElementsKeepsASplitOfTheDimsItDoesNotWrite) {
  Attrs a;
  a.set("axis", int64_t{2});
  OneNode kv = one(OpKind::kScatterElements, {f32({1, 2, 4, 2}), {DType::kI64, {1, 2, 1, 2}}, f32({1, 2, 1, 2})}, a);
  EXPECT_TRUE(kv.offers("tp=2", "[S(1)] x [S(1)] x [S(1)] -> [S(1)]")) << kv.all("tp=2");  // KV heads
  EXPECT_TRUE(kv.offers("tp=2", "[S(3)] x [S(3)] x [S(3)] -> [S(3)]")) << kv.all("tp=2");
  EXPECT_TRUE(kv.offers("tp=2", "[P] x [R] x [P] -> [P]")) << kv.all("tp=2");  // linear in data and updates
  for (const Strategy& s : kv.on("tp=2")) EXPECT_NE(s.inputs[0].placements[0], Placement::shard(2)) << s.str();
  // Indices that cover the first head only: a split of the heads is no
  // block split of the indices, so it is not offered.
  OneNode part = one(OpKind::kScatterElements, {f32({1, 2, 4, 2}), {DType::kI64, {1, 1, 1, 2}}, f32({1, 1, 1, 2})}, a);
  EXPECT_FALSE(part.offers("tp=2", "[S(1)]")) << part.all("tp=2");
  // Max is not linear: no Partial.
  a.set("reduction", std::string("max"));
  OneNode mx = one(OpKind::kScatterElements, {f32({1, 2, 4, 2}), {DType::kI64, {1, 2, 1, 2}}, f32({1, 2, 1, 2})}, a);
  EXPECT_FALSE(mx.offers("tp=2", "[P]")) << mx.all("tp=2");
  EXPECT_TRUE(mx.offers("tp=2", "[S(1)] x [S(1)] x [S(1)] -> [S(1)]")) << mx.all("tp=2");
}

// The case that shards attention heads: [S, H*D] -> [S, H, D] carries a
// split of the merged dim to H, and back; a split of D is not a split of
// the merged dim.
TEST(Strategies, ReshapeCarriesAShardThroughItsMajorFactor) {
  Attrs split;
  split.set("shape", std::vector<int64_t>{5, 4, 6});
  OneNode r = one(OpKind::kReshape, {f32({5, 24})}, split);
  EXPECT_TRUE(r.offers("tp=4", "[S(1)] -> [S(1)]")) << r.all("tp=4");
  EXPECT_FALSE(r.offers("tp=3", "[S(1)]")) << "3 divides 24 but not the 4 heads";
  Attrs merge;
  merge.set("shape", std::vector<int64_t>{5, 24});
  OneNode m = one(OpKind::kReshape, {f32({5, 4, 6})}, merge);
  EXPECT_TRUE(m.offers("tp=2", "[S(1)] -> [S(1)]")) << m.all("tp=2");
  EXPECT_FALSE(m.offers("tp=2", "[S(2)]")) << m.all("tp=2");
}

// A merged QKV projection is followed by a Split along the projected dim:
// a column split of that dim does not pass through the Split (each rank
// would not hold whole parts), so propagation must reshard there.
TEST(Strategies, SplitDoesNotPassAShardOfItsAxis) {
  Attrs a;
  a.set("axis", int64_t{1});
  a.set("split", std::vector<int64_t>{8, 8, 8});
  OneNode s = one(OpKind::kSplit, {f32({4, 24})}, a);
  EXPECT_TRUE(s.offers("tp=2", "[S(0)] -> [S(0)], [S(0)], [S(0)]"));
  EXPECT_TRUE(strategies_for(s.g, s.g.node(s.node), DeviceMesh::parse("tp=2"), {Sharding::parse("[S(1)]")}).empty());
}

TEST(Strategies, PoolingAndResizeSplitBatchAndChannels) {
  Attrs p;
  p.set("kernel_shape", std::vector<int64_t>{2, 2});
  p.set("strides", std::vector<int64_t>{2, 2});
  p.set("pads", std::vector<int64_t>{0, 0, 0, 0});
  p.set("dilations", std::vector<int64_t>{1, 1});
  OneNode mp = one(OpKind::kMaxPool, {f32({2, 4, 6, 6})}, p);
  EXPECT_TRUE(mp.offers("tp=2", "[S(0)] -> [S(0)]"));
  EXPECT_TRUE(mp.offers("tp=2", "[S(1)] -> [S(1)]"));
  EXPECT_FALSE(mp.offers("tp=2", "[S(2)]"));
  Attrs r;
  r.set("sizes", std::vector<int64_t>{2, 4, 12, 12});
  r.set("scales", std::vector<double>{1, 1, 2, 2});
  OneNode rs = one(OpKind::kResize, {f32({2, 4, 6, 6})}, r);
  EXPECT_TRUE(rs.offers("tp=2", "[S(1)] -> [S(1)]")) << rs.all("tp=2");
  EXPECT_FALSE(rs.offers("tp=2", "[S(2)]")) << rs.all("tp=2");
}

TEST(Strategies, ImpossibleShardingsAreErrorsNamingTheTensor) {
  OneNode mm = one(OpKind::kMatMul, {f32({1, 6}), f32({6, 8})});
  DeviceMesh tp2 = DeviceMesh::parse("tp=2");
  try {
    strategies_for(mm.g, mm.g.node(mm.node), tp2, {Sharding::parse("[S(0)]"), Sharding::parse("[R]")});
    ADD_FAILURE() << "a dim of 1 split over 2 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not divisible"), std::string::npos) << e.what();
  }
  EXPECT_THROW(strategies_for(mm.g, mm.g.node(mm.node), tp2, {Sharding::parse("[S(2)]"), Sharding::parse("[R]")}),
               Error);
  EXPECT_THROW(strategies_for(mm.g, mm.g.node(mm.node), tp2, {Sharding::parse("[R,R]"), Sharding::parse("[R]")}),
               Error);
}

// The soundness catalogue of strategies: each is a real mistake; the
// property check rejects it and the op table does not offer it.
Strategy by_hand(const OneNode& o, const DeviceMesh& mesh, std::vector<std::string> in, std::vector<std::string> out) {
  Strategy s;
  s.axes.resize(mesh.axes().size());
  for (AxisStrategy& a : s.axes) a.kind = AxisStrategy::Kind::kShardFactor;
  for (const std::string& t : in) s.inputs.push_back(Sharding::parse(t));
  for (const std::string& t : out) s.outputs.push_back(Sharding::parse(t));
  (void)o;
  return s;
}

// `placements_offered`: the mistake is in the local op, not the placements
// (the op offers the same placements with the right local op).
void expect_rejected(const OneNode& o, const Strategy& s, const DeviceMesh& mesh, const char* what,
                     bool placements_offered = false) {
  std::vector<Tensor> inputs = random_inputs(o.g, 7);
  Check c = run_strategy(o.g, o.node, s, mesh, inputs);
  EXPECT_FALSE(c.ok) << what << " was accepted by the check";
  if (placements_offered) return;
  for (const Strategy& offered : strategies(o.g, o.g.node(o.node), mesh))
    EXPECT_FALSE(offered.inputs == s.inputs && offered.outputs == s.outputs) << what << " is offered: " << offered.str();
}

// Forgets the mask: shifts and clamps the indices into the local block but
// keeps the rows looked up for indices of other ranks.
std::vector<ValueId> gather_without_mask(const LocalOp& op, int) {
  Graph& l = op.local;
  std::vector<int64_t> off;
  Shape block;
  local_block(op.mesh, op.strategy.inputs[0], op.global.type(op.node.inputs[0]).shape, op.rank, off, block);
  ValueId start = l.add_constant("start", Tensor::from_ints(DType::kI64, {}, {off[0]}));
  ValueId zero = l.add_constant("zero", Tensor::from_ints(DType::kI64, {}, {0}));
  ValueId last = l.add_constant("last", Tensor::from_ints(DType::kI64, {}, {block[0] - 1}));
  ValueId shifted = l.add(OpKind::kSub, {op.inputs[1], start});
  ValueId safe = l.add(OpKind::kMin, {l.add(OpKind::kMax, {shifted, zero}), last});
  return {l.add(OpKind::kGather, {op.inputs[0], safe}, op.node.attrs)};
}

TEST(Strategies, WrongStrategiesAreRejected) {
  DeviceMesh tp2 = DeviceMesh::parse("tp=2");
  OneNode mm = one(OpKind::kMatMul, {f32({4, 6}), f32({6, 8})});
  expect_rejected(mm, by_hand(mm, tp2, {"[S(1)]", "[S(0)]"}, {"[R]"}), tp2, "row parallel without the AllReduce");

  Attrs sm;
  sm.set("axis", int64_t{1});
  OneNode s = one(OpKind::kSoftmax, {f32({4, 6})}, sm);
  expect_rejected(s, by_hand(s, tp2, {"[S(1)]"}, {"[S(1)]"}), tp2, "Softmax sharded on its reduced axis");

  Attrs flat;
  flat.set("shape", std::vector<int64_t>{24});
  OneNode r = one(OpKind::kReshape, {f32({4, 6})}, flat);
  expect_rejected(r, by_hand(r, tp2, {"[S(1)]"}, {"[S(0)]"}), tp2, "a Reshape that merges the minor shard as a major one");

  Attrs ga;
  ga.set("axis", int64_t{0});
  OneNode g;
  ValueId table = g.g.add_input("table", f32({8, 6}));
  ValueId ids = g.g.add_constant("ids", Tensor::from_ints(DType::kI64, {5}, {0, 7, 3, 4, 1}));
  g.node = g.g.add_node(OpKind::kGather, {table, ids}, ga, "embed");
  g.g.set_outputs(g.g.node(g.node).outputs);
  Strategy nomask = by_hand(g, tp2, {"[S(0)]", "[R]"}, {"[P]"});
  nomask.axes[0].kind = AxisStrategy::Kind::kExplicit;
  nomask.axes[0].emit = gather_without_mask;
  expect_rejected(g, nomask, tp2, "a Gather that forgets its mask", true);

  Attrs ca;
  ca.set("kernel_shape", std::vector<int64_t>{3});
  ca.set("strides", std::vector<int64_t>{1});
  ca.set("pads", std::vector<int64_t>{1, 1});
  ca.set("dilations", std::vector<int64_t>{1});
  OneNode c = one(OpKind::kConv, {f32({1, 4, 7}), f32({3, 4, 3})}, ca);
  expect_rejected(c, by_hand(c, tp2, {"[S(1)]", "[S(1)]"}, {"[R]"}), tp2,
                  "a Conv sharded on input channels without the reduction");

  OneNode gemm = one(OpKind::kGemm, {f32({4, 6}), f32({6, 8}), f32({8})});
  expect_rejected(gemm, by_hand(gemm, tp2, {"[S(1)]", "[S(0)]", "[R]"}, {"[P]"}), tp2,
                  "a bias added on every rank of a contraction");

  // A KV cache split along the axis it is written on, each rank reading the
  // indices as positions in its own block: every rank writes position 1 of
  // its block, rank 1 at global 3 where nothing is written.
  Attrs sa;
  sa.set("axis", int64_t{2});
  OneNode sc;
  ValueId cache = sc.g.add_input("cache", f32({1, 2, 4, 2}));
  ValueId pos = sc.g.add_constant("pos", Tensor::from_ints(DType::kI64, {1, 2, 1, 2}, {1, 1, 1, 1}));
  ValueId kv = sc.g.add_input("kv", f32({1, 2, 1, 2}));
  sc.node = sc.g.add_node(OpKind::kScatterElements, {cache, pos, kv}, sa, "cache_write");
  sc.g.set_outputs(sc.g.node(sc.node).outputs);
  expect_rejected(sc, by_hand(sc, tp2, {"[S(2)]", "[R]", "[R]"}, {"[S(2)]"}), tp2,
                  "a ScatterElements split along its written axis with the indices read as local");

  OneNode exp = one(OpKind::kExp, {f32({4, 6})});
  expect_rejected(exp, by_hand(exp, tp2, {"[P]"}, {"[P]"}), tp2, "a non-linear op on a Partial input");

  OneNode add = one(OpKind::kAdd, {f32({4, 6}), f32({4, 6})});
  expect_rejected(add, by_hand(add, tp2, {"[P]", "[R]"}, {"[P]"}), tp2, "a replicated addend counted on every rank");
}

// The exported RMSNorm pattern (x / sqrt(mean(x^2) + eps) * w) keeps a split
// of every axis but the normalized one through each of its ops; splitting
// the normalized axis leaves the mean Partial, which Add(P, eps) refuses.
// A Transpose that moves only dims of size 1 keeps the data in order. On a
// rank it becomes a Reshape only where the split made the moved dims 1: one
// that is already so in the whole tensor stays a Transpose, as on one
// device, so that replicating it costs what the unsplit program costs.
TEST(Strategies, ATransposeBecomesAReshapeOnlyWhereTheSplitLeftItsDimsOfSizeOne) {
  Attrs perm;
  perm.set("perm", std::vector<int64_t>{0, 2, 1, 3});
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  auto local_kind = [&](const OneNode& o, const std::string& strategy) {
    for (const Strategy& s : o.on("tp=2")) {
      if (s.str().rfind(strategy, 0) != 0) continue;
      Graph local;
      ValueId in = local.add_input("x", TensorType{DType::kF32, s.inputs[0].local_shape(mesh, o.g.type(o.g.inputs()[0]).shape)});
      std::vector<ValueId> outs = emit_local(o.g, o.g.node(o.node), s, mesh, 0, local, {in});
      return local.node(local.value(outs[0]).producer).kind;
    }
    ADD_FAILURE() << "no strategy " << strategy << " in" << o.all("tp=2");
    return OpKind::kIdentity;
  };
  OneNode split = one(OpKind::kTranspose, {f32({1, 2, 3, 4})}, perm);
  EXPECT_EQ(local_kind(split, "[S(1)] -> [S(2)]"), OpKind::kReshape) << split.all("tp=2");
  EXPECT_EQ(local_kind(split, "[R] -> [R]"), OpKind::kTranspose);
  OneNode unit = one(OpKind::kTranspose, {f32({1, 1, 3, 4})}, perm);
  EXPECT_EQ(local_kind(unit, "[R] -> [R]"), OpKind::kTranspose);
}

TEST(Strategies, RmsNormPatternKeepsRowsSplit) {
  Graph g;
  ValueId x = g.add_input("x", f32({4, 8}));
  ValueId two = g.add_constant("two", Tensor::from_doubles(DType::kF32, {}, {2.0}));
  ValueId eps = g.add_constant("eps", Tensor::from_doubles(DType::kF32, {}, {1e-6}));
  ValueId w = g.add_constant("w", Tensor::from_doubles(DType::kF32, {8}, std::vector<double>(8, 1.5)));
  Attrs mean;
  mean.set("axes", std::vector<int64_t>{-1});
  ValueId sq = g.add(OpKind::kPow, {x, two}, {}, "pow");
  ValueId m = g.add(OpKind::kReduceMean, {sq}, mean, "mean");
  ValueId a = g.add(OpKind::kAdd, {m, eps}, {}, "add");
  ValueId r = g.add(OpKind::kSqrt, {a}, {}, "sqrt");
  ValueId d = g.add(OpKind::kDiv, {x, r}, {}, "div");
  ValueId y = g.add(OpKind::kMul, {d, w}, {}, "mul");
  g.set_outputs({y});
  DeviceMesh tp2 = DeviceMesh::parse("tp=2");
  Sharding rows = Sharding::parse("[S(0)]"), cols = Sharding::parse("[S(1)]"), rep = Sharding::parse("[R]");
  auto node = [&](ValueId v) -> const Node& { return g.node(g.value(v).producer); };
  auto outputs = [&](ValueId v, std::vector<Sharding> in) {
    std::vector<Strategy> s = strategies_for(g, node(v), tp2, in);
    return s.empty() ? std::string("none") : s[0].outputs[0].str();
  };
  EXPECT_EQ(outputs(sq, {rows, rep}), "[S(0)]");
  EXPECT_EQ(outputs(m, {rows}), "[S(0)]");
  EXPECT_EQ(outputs(a, {rows, rep}), "[S(0)]");
  EXPECT_EQ(outputs(d, {rows, rows}), "[S(0)]");
  EXPECT_EQ(outputs(y, {rows, rep}), "[S(0)]");
  EXPECT_EQ(outputs(m, {cols}), "[P]");
  EXPECT_EQ(outputs(a, {Sharding::parse("[P]"), rep}), "none");
}

// A rank's block that is the whole tensor or one run of its elements shares
// the global tensor's storage (a mapped weight stays mapped on every rank);
// a block of strided rows is a copy. Either way it holds the block's values.
TEST(ShardOf, ContiguousBlocksAreViewsOfTheGlobalTensor) {
  std::vector<double> values(4 * 6);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  Tensor w = Tensor::from_doubles(DType::kF32, {4, 6}, values);
  DeviceMesh tp2 = DeviceMesh::parse("tp=2");
  Tensor rep = shard_of(w, Sharding::parse("[R]"), tp2, 1);
  EXPECT_EQ(rep.data(), w.data());
  Tensor rows = shard_of(w, Sharding::parse("[S(0)]"), tp2, 1);
  EXPECT_TRUE(rows.is_view());
  EXPECT_EQ(rows.data(), w.data() + 12 * 4);
  EXPECT_EQ(rows.shape(), (Shape{2, 6}));
  EXPECT_EQ(rows.get_double(0), 12);
  Tensor cols = shard_of(w, Sharding::parse("[S(1)]"), tp2, 1);
  EXPECT_FALSE(cols.is_view());
  EXPECT_EQ(cols.to_doubles(), (std::vector<double>{3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23}));
  // [1, 4, 6] split on its 4: after a dim of 1 the run still starts at the block.
  Tensor w3 = w.reshaped({1, 4, 6});
  Tensor inner = shard_of(w3, Sharding::parse("[S(1)]"), tp2, 1);
  EXPECT_TRUE(inner.is_view());
  EXPECT_TRUE(inner.identical(rows.reshaped({1, 2, 6})));
  // A partial's other ranks hold zeros, never the data.
  Tensor zeros = shard_of(w, Sharding::parse("[P]"), tp2, 1);
  EXPECT_FALSE(zeros.is_view());
  EXPECT_EQ(zeros.get_double(23), 0);
  // Writing to a rank's view leaves the model's tensor as it was.
  rows.set_double(0, -1);
  EXPECT_EQ(w.get_double(12), 12);
}

// A strided block of a view (a column split of a mapped weight) is made
// when read and freed again when dropped, so that every rank's blocks of a
// model larger than memory are never held at once; its values are the
// block's, read once (made for the reader alone), kept, or made again.
TEST(ShardOf, StridedBlocksOfAViewAreMadeWhenRead) {
  auto values = std::make_shared<std::vector<float>>(4 * 6);
  for (size_t i = 0; i < values->size(); ++i) (*values)[i] = static_cast<float>(i);
  Tensor w = Tensor::view(DType::kF32, {4, 6}, reinterpret_cast<const uint8_t*>(values->data()), values);
  DeviceMesh tp2 = DeviceMesh::parse("tp=2");
  Tensor cols = shard_of(w, Sharding::parse("[S(1)]"), tp2, 1);
  EXPECT_TRUE(cols.is_made());
  const std::vector<double> want{3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23};
  std::vector<float> once;
  cols.read_once([&](const uint8_t* p) {
    once.assign(reinterpret_cast<const float*>(p), reinterpret_cast<const float*>(p) + 12);
  });
  EXPECT_EQ(std::vector<double>(once.begin(), once.end()), want);
  EXPECT_EQ(cols.to_doubles(), want);
  const uint8_t* made = cols.data();
  EXPECT_EQ(cols.data(), made);  // kept until dropped
  Tensor copy = cols;
  EXPECT_TRUE(copy.identical(cols));
  cols.drop_mapped_pages();
  EXPECT_EQ(copy.to_doubles(), want);  // made again
  // The hash of a made block is the hash of the same bytes owned.
  Tensor owned = Tensor::from_doubles(DType::kF32, {4, 3}, want);
  EXPECT_EQ(cols.hash(), owned.hash());
  EXPECT_TRUE(cols.identical(owned));
  // A row split of a made block is made too, from it; writing copies it.
  Tensor part = shard_of(cols, Sharding::parse("[S(0)]"), tp2, 1);
  EXPECT_TRUE(part.is_made());
  EXPECT_EQ(part.to_doubles(), (std::vector<double>{15, 16, 17, 21, 22, 23}));
  part.set_double(0, -1);
  EXPECT_FALSE(part.is_made());
  EXPECT_EQ(cols.get_double(6), 15);
}

}  // namespace
}  // namespace tessera
