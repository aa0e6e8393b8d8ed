// Resharding, propagation and SPMD partitioning: golden tests on small
// graphs in the text form, and the property that the ranks' programs, run
// in lockstep, compute the single-device graph.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cost/device_profile.h"
#include "graph/error.h"
#include "graph/interpreter.h"
#include "graph/strategy.h"
#include "graph/text_form.h"
#include "mutator/sharding/annotations.h"
#include "mutator/sharding/partition.h"
#include "mutator/sharding/propagate.h"
#include "mutator/sharding/reshard.h"
#include "mutator/optimize.h"
#include "tests/graph/shard_check.h"
#include "tests/mutator/mutator_test_util.h"

namespace tessera::mutator {
namespace {

using testing::h100;
using testing::cpu;

Tensor ramp(const TensorType& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (double& x : v) x = std::uniform_real_distribution<double>(-1, 1)(rng);
  return Tensor::from_doubles(t.dtype, t.shape, v);
}

std::vector<std::vector<Tensor>> run_ranks(const RankPrograms& p, const std::vector<Tensor>& inputs) {
  std::vector<const Graph*> graphs;
  std::vector<std::vector<RefTensor<double>>> ins;
  for (const Graph& g : p.ranks) {
    graphs.push_back(&g);
    std::vector<RefTensor<double>> mine;
    for (const Tensor& t : inputs) mine.push_back(to_ref<double>(t));
    ins.push_back(std::move(mine));
  }
  std::vector<std::vector<RefTensor<double>>> outs = interpret_ranks<double>(graphs, p.mesh, ins);
  std::vector<std::vector<Tensor>> result;
  for (const auto& rank : outs) {
    std::vector<Tensor> mine;
    for (const RefTensor<double>& t : rank) mine.push_back(from_ref<double>(t));
    result.push_back(std::move(mine));
  }
  return result;
}

// Every rank's outputs equal the single-device graph's.
void expect_partition_matches(const Graph& g, const ShardedGraph& s, uint64_t seed = 1) {
  RankPrograms p = partition(g, s);
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs()) inputs.push_back(ramp(g.type(v), seed + static_cast<uint64_t>(v)));
  std::vector<Tensor> want = evaluate(g, inputs, Precision::kF64);
  std::vector<std::vector<Tensor>> got = run_ranks(p, inputs);
  for (size_t r = 0; r < got.size(); ++r)
    for (size_t o = 0; o < want.size(); ++o)
      EXPECT_LE(tessera::testing::relative_error(got[r][o], want[o]), 1e-5) << "rank " << r << " output " << o;
}

std::vector<ShardConstraint> fix(const Graph& g, std::vector<std::pair<std::string, std::string>> pairs) {
  std::vector<ShardConstraint> out;
  for (auto& [name, sharding] : pairs) out.push_back({*g.find_value(name), Sharding::parse(sharding), name});
  return out;
}

int count_kind(const RankPrograms& p, OpKind k) {
  int n = 0;
  for (NodeId i = 0; i < p.ranks[0].num_nodes(); ++i) n += p.ranks[0].node(i).kind == k;
  return n;
}

std::string steps_str(const Sharding& from, const Sharding& to, const DeviceMesh& mesh) {
  std::string s;
  for (const ReshardStep& st : reshard_steps(from, to, mesh)) {
    if (!s.empty()) s += ", ";
    s += reshard_step_name(st.kind);
    s += "@" + mesh.axes()[static_cast<size_t>(st.axis)].name;
  }
  return s;
}

TEST(Reshard, StepsAsThePlacementsSay) {
  DeviceMesh tp = DeviceMesh::parse("tp=2"), dt = DeviceMesh::parse("dp=2,tp=2");
  auto s = [](const char* t) { return Sharding::parse(t); };
  EXPECT_EQ(steps_str(s("[S(0)]"), s("[R]"), tp), "all-gather@tp");
  EXPECT_EQ(steps_str(s("[P]"), s("[R]"), tp), "all-reduce@tp");
  EXPECT_EQ(steps_str(s("[P]"), s("[S(1)]"), tp), "reduce-scatter@tp");
  EXPECT_EQ(steps_str(s("[S(0)]"), s("[S(1)]"), tp), "all-to-all@tp");
  EXPECT_EQ(steps_str(s("[R]"), s("[S(1)]"), tp), "slice@tp");
  EXPECT_EQ(steps_str(s("[R]"), s("[P]"), tp), "keep-on-first@tp");
  EXPECT_EQ(steps_str(s("[S(0)]"), s("[S(0)]"), tp), "");
  // Gathers minor axes first, splits major axes first.
  EXPECT_EQ(steps_str(s("[S(0),S(1)]"), s("[R,R]"), dt), "all-gather@tp, all-gather@dp");
  EXPECT_EQ(steps_str(s("[R,R]"), s("[S(0),S(1)]"), dt), "slice@dp, slice@tp");
  // A dim split over both axes, the major split added: the minor one is redone under it.
  EXPECT_EQ(steps_str(s("[R,S(0)]"), s("[S(0),S(0)]"), dt), "all-gather@tp, slice@dp, slice@tp");
  EXPECT_EQ(steps_str(s("[S(0),R]"), s("[S(0),S(0)]"), dt), "slice@tp");
}

// Every pair of shardings of a tensor, on 1-D and 2-D meshes: the ranks'
// reshard programs leave each rank holding the target's block.
TEST(Reshard, EveryPairMovesTheData) {
  int pairs = 0;
  for (const char* m : {"tp=2", "tp=3", "dp=2,tp=2"}) {
    DeviceMesh mesh = DeviceMesh::parse(m);
    TensorType t{DType::kF32, {12, 6}};
    std::vector<Placement> one{Placement::replicate(), Placement::partial(), Placement::shard(0), Placement::shard(1)};
    std::vector<Sharding> all;
    size_t axes = mesh.axes().size();
    for (size_t code = 0; code < (axes == 1 ? 4u : 16u); ++code) {
      Sharding s;
      for (size_t a = 0; a < axes; ++a) s.placements.push_back(one[(code >> (2 * a)) & 3]);
      try {
        s.validate(mesh, t);
        all.push_back(s);
      } catch (const Error&) {
        // 6 columns do not split 4 ways
      }
    }
    Tensor x = ramp(t, 3);
    for (const Sharding& from : all)
      for (const Sharding& to : all) {
        RankPrograms p{mesh, {}};
        std::vector<std::vector<Tensor>> feeds;
        for (int64_t r = 0; r < mesh.num_devices(); ++r) {
          Graph g;
          Tensor mine = shard_of(x, from, mesh, r);
          ValueId in = g.add_input("x", mine.type());
          g.set_outputs({emit_reshard(g, in, from, to, t, mesh, r, "x")});
          if (g.outputs()[0] == in) g.set_outputs({g.add(OpKind::kIdentity, {in})});
          p.ranks.push_back(std::move(g));
          feeds.push_back({mine});
        }
        std::vector<const Graph*> graphs;
        std::vector<std::vector<RefTensor<double>>> ins;
        for (int64_t r = 0; r < mesh.num_devices(); ++r) {
          graphs.push_back(&p.ranks[static_cast<size_t>(r)]);
          ins.push_back({to_ref<double>(feeds[static_cast<size_t>(r)][0])});
        }
        auto outs = interpret_ranks<double>(graphs, mesh, ins);
        std::vector<Tensor> locals;
        for (auto& o : outs) locals.push_back(from_ref<double>(o[0]));
        tessera::testing::Assembled a = tessera::testing::assemble(locals, to, mesh, t);
        EXPECT_TRUE(a.replicas_agree) << m << " " << from.str() << " -> " << to.str();
        EXPECT_LE(tessera::testing::relative_error(a.value, x), 1e-6) << m << " " << from.str() << " -> " << to.str();
        ++pairs;
      }
  }
  EXPECT_EQ(pairs, 16 + 16 + 15 * 15);
}

// Shards in groups on tp=4 (2 blocks, each on 2 ranks): every move to and
// from them, refined by a local slice or gathered with one copy of each
// block kept, gives each rank its block.
TEST(Reshard, ShardsInGroupsMoveTheData) {
  DeviceMesh mesh = DeviceMesh::parse("tp=4");
  TensorType t{DType::kF32, {12, 6}};
  std::vector<Sharding> all;
  for (const char* s : {"[R]", "[P]", "[S(0)]", "[S(0/2)]", "[S(1/2)]"}) all.push_back(Sharding::parse(s));
  Tensor x = ramp(t, 3);
  int gathers = 0;
  for (const Sharding& from : all)
    for (const Sharding& to : all) {
      std::vector<Graph> ranks;
      std::vector<std::vector<RefTensor<double>>> ins;
      for (int64_t r = 0; r < mesh.num_devices(); ++r) {
        Graph g;
        Tensor mine = shard_of(x, from, mesh, r);
        ValueId in = g.add_input("x", mine.type());
        g.set_outputs({emit_reshard(g, in, from, to, t, mesh, r, "x")});
        if (g.outputs()[0] == in) g.set_outputs({g.add(OpKind::kIdentity, {in})});
        for (NodeId n = 0; n < g.num_nodes(); ++n) gathers += g.node(n).kind == OpKind::kAllGather && r == 0;
        ranks.push_back(std::move(g));
        ins.push_back({to_ref<double>(mine)});
      }
      std::vector<const Graph*> graphs;
      for (const Graph& g : ranks) graphs.push_back(&g);
      std::vector<Tensor> locals;
      for (auto& o : interpret_ranks<double>(graphs, mesh, ins)) locals.push_back(from_ref<double>(o[0]));
      tessera::testing::Assembled a = tessera::testing::assemble(locals, to, mesh, t);
      EXPECT_TRUE(a.replicas_agree) << from.str() << " -> " << to.str();
      EXPECT_LE(tessera::testing::relative_error(a.value, x), 1e-6) << from.str() << " -> " << to.str();
    }
  // A refinement (S(0/2) -> S(0)) and a cut (R -> S(0/2)) are local.
  EXPECT_EQ(reshard_steps(Sharding::parse("[S(0/2)]"), Sharding::parse("[S(0)]"), mesh).size(), 1u);
  EXPECT_EQ(reshard_steps(Sharding::parse("[S(0/2)]"), Sharding::parse("[S(0)]"), mesh)[0].kind,
            ReshardStep::Kind::kSlice);
  EXPECT_EQ(reshard_steps(Sharding::parse("[R]"), Sharding::parse("[S(0/2)]"), mesh)[0].kind,
            ReshardStep::Kind::kSlice);
  EXPECT_GT(gathers, 0);
}

TEST(Reshard, CollectivesArePricedConstantsAreFree) {
  DeviceMesh tp = DeviceMesh::parse("tp=4");
  TensorType t{DType::kF32, {1024, 1024}};
  double ag = reshard_seconds(Sharding::parse("[S(0)]"), Sharding::parse("[R]"), t, tp, h100());
  double ar = reshard_seconds(Sharding::parse("[P]"), Sharding::parse("[R]"), t, tp, h100());
  double rs = reshard_seconds(Sharding::parse("[P]"), Sharding::parse("[S(0)]"), t, tp, h100());
  EXPECT_GT(ag, 0);
  EXPECT_GT(ar, ag);  // an all-reduce moves twice the bytes of the all-gather of the same tensor
  EXPECT_LT(rs, ar);
  Graph g;
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {1024, 1024}));
  ReshardPrices price(g, tp, h100());
  EXPECT_EQ(price(w, Sharding::parse("[R]"), Sharding::parse("[S(1)]")), 0);
}

const char* kMlp = R"(graph mlp {
  input x: f32[4x8]
  input w1: f32[8x16]
  input w2: f32[16x8]
  h = MatMul[fc1](x, w1)
  a = Relu[act](h)
  y = MatMul[fc2](a, w2)
  output y
})";

// Megatron's MLP from two annotations: column then row parallel, one
// all-reduce at the end.
TEST(Propagate, MegatronMlp) {
  Graph g = parse_graph(kMlp);
  DeviceMesh tp = DeviceMesh::parse("tp=2");
  ShardedGraph s = propagate(g, tp, fix(g, {{"w1", "[S(1)]"}, {"w2", "[S(0)]"}}), h100());
  EXPECT_EQ(describe(g, s),
            "fc1: [R] x [S(1)] -> [S(1)] (shard pass factor of size 16)\n"
            "act: [S(1)] -> [S(1)] (shard pass factor of size 16)\n"
            "fc2: [S(1)] x [S(0)] -> [P] (contract sum factor of size 16)\n"
            "  reshard y: [P] -> [R] (all-reduce over tp)\n");
  RankPrograms p = partition(g, s);
  EXPECT_EQ(count_kind(p, OpKind::kAllReduce), 1);
  EXPECT_EQ(count_kind(p, OpKind::kAllGather), 0);
  EXPECT_EQ(p.ranks[0].type(*p.ranks[0].find_value("h")).shape, (Shape{4, 8}));
  expect_partition_matches(g, s);
}

// The partitioned MLP, rank 1's program in the text form: its inputs whole,
// its blocks of the weights sliced by the program (they are graph inputs
// here), the local products, one AllReduce for the Partial output.
TEST(Spmd, MegatronMlpRankProgram) {
  Graph g = parse_graph(kMlp);
  ShardedGraph s = propagate(g, DeviceMesh::parse("tp=2"), fix(g, {{"w1", "[S(1)]"}, {"w2", "[S(0)]"}}), h100());
  RankPrograms p = partition(g, s);
  EXPECT_EQ(print_graph(p.ranks[1]),
            "graph mlp_rank1 {\n"
            "  input x: f32[4x8]\n"
            "  input w1: f32[8x16]\n"
            "  input w2: f32[16x8]\n"
            "  w1/slice0:0 = Slice[w1/slice0](w1) {axes=[1], ends=[16], starts=[8], steps=[1]}\n"
            "  w2/slice0:0 = Slice[w2/slice0](w2) {axes=[0], ends=[16], starts=[8], steps=[1]}\n"
            "  h = MatMul[fc1](x, w1/slice0:0)\n"
            "  a = Relu[act](h)\n"
            "  y/local = MatMul[fc2](a, w2/slice0:0)\n"
            "  y = AllReduce[y/all_reduce0](y/local) {group_size=2, mesh_axis=\"tp\"}\n"
            "  output y\n"
            "}\n");
}

// Only the first weight annotated: the second, a constant, is split for free
// to keep the hidden activation split, which costs less than gathering it
// (the shipped CPU profile: 5 GB/s between ranks).
TEST(Propagate, ConstantWeightsFollowTheirReaders) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {256, 64}}), w1 = g.add_input("w1", {DType::kF32, {64, 256}});
  ValueId w2 = g.add_constant("w2", ramp({DType::kF32, {256, 64}}, 5));
  ValueId a = g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {x, w1}, {}, "fc1")}, {}, "act");
  g.set_outputs({g.add(OpKind::kMatMul, {a, w2}, {}, "fc2")});
  ShardedGraph s = propagate(g, DeviceMesh::parse("tp=2"), fix(g, {{"w1", "[S(1)]"}}), cpu());
  EXPECT_EQ(s.nodes[2].str(), "[S(1)] x [S(0)] -> [P] (contract sum factor of size 256)") << describe(g, s);
  RankPrograms p = partition(g, s);
  const Tensor& half = *p.ranks[1].value(*p.ranks[1].find_value("w2")).constant;
  EXPECT_EQ(half.shape(), (Shape{128, 64}));
  EXPECT_EQ(half.get_double(0), g.value(w2).constant->get_double(128 * 64));
  expect_partition_matches(g, s);
}

// Heads split through Reshape and Transpose; Softmax along the keys keeps
// the head split; the output projection (a constant) becomes row parallel.
TEST(Propagate, AttentionHeadsSplitThroughReshape) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {64, 512}}), wq = g.add_input("wq", {DType::kF32, {512, 512}});
  ValueId wo = g.add_constant("wo", ramp({DType::kF32, {512, 512}}, 9));
  Attrs split, to, soft, merge;
  split.set("shape", std::vector<int64_t>{64, 4, 128});
  to.set("perm", std::vector<int64_t>{1, 0, 2});
  soft.set("axis", int64_t{-1});
  merge.set("shape", std::vector<int64_t>{64, 512});
  ValueId q = g.add(OpKind::kMatMul, {x, wq}, {}, "q_proj");
  ValueId h = g.add(OpKind::kReshape, {q}, split, "split_heads");
  ValueId t = g.add(OpKind::kTranspose, {h}, to, "to_heads");
  ValueId sm = g.add(OpKind::kSoftmax, {t}, soft, "attn");
  ValueId b = g.add(OpKind::kTranspose, {sm}, to, "from_heads");
  ValueId m = g.add(OpKind::kReshape, {b}, merge, "merge_heads");
  g.set_outputs({g.add(OpKind::kMatMul, {m, wo}, {}, "o_proj")});
  ShardedGraph s = propagate(g, DeviceMesh::parse("tp=2"), fix(g, {{"wq", "[S(1)]"}}), cpu());
  std::string d = describe(g, s);
  EXPECT_NE(d.find("split_heads: [S(1)] -> [S(1)]"), std::string::npos) << d;
  EXPECT_NE(d.find("to_heads: [S(1)] -> [S(0)]"), std::string::npos) << d;
  EXPECT_NE(d.find("attn: [S(0)] -> [S(0)]"), std::string::npos) << d;
  EXPECT_NE(d.find("o_proj: [S(1)] x [S(0)] -> [P]"), std::string::npos) << d;
  RankPrograms p = partition(g, s);
  EXPECT_EQ(count_kind(p, OpKind::kAllReduce), 1);
  EXPECT_EQ(count_kind(p, OpKind::kAllGather) + count_kind(p, OpKind::kAllToAll), 0);
  expect_partition_matches(g, s);
}

TEST(Propagate, MergedQkvSplitIsResharded) {
  Graph g = parse_graph(R"(graph qkv {
  input x: f32[4x8]
  input w: f32[8x24]
  qkv = MatMul[qkv_proj](x, w)
  q, k, v = Split[split_qkv](qkv) {axis=1, split=[8, 8, 8]}
  a = Add[qk](q, k)
  y = Mul[qkv_mul](a, v)
  output y
})");
  ShardedGraph s = propagate(g, DeviceMesh::parse("tp=2"), fix(g, {{"w", "[S(1)]"}}), h100());
  const Strategy& split = s.nodes[1];
  EXPECT_NE(split.inputs[0], Sharding::parse("[S(1)]")) << describe(g, s);
  EXPECT_NE(describe(g, s).find("reshard qkv: [S(1)] -> "), std::string::npos) << describe(g, s);
  expect_partition_matches(g, s);
}

TEST(Propagate, BatchSplitOnATwoAxisMesh) {
  Graph g = parse_graph(kMlp);
  DeviceMesh mesh = DeviceMesh::parse("dp=2,tp=2");
  ShardedGraph s = propagate(g, mesh, fix(g, {{"x", "[S(0),R]"}, {"w1", "[R,S(1)]"}, {"w2", "[R,S(0)]"}}), h100());
  EXPECT_EQ(s.nodes[2].str().rfind("[S(0),S(1)] x [R,S(0)] -> [S(0),P]", 0), 0u) << describe(g, s);
  expect_partition_matches(g, s);
}

TEST(Propagate, BadConstraintsNameTheTensor) {
  Graph g = parse_graph(kMlp);
  DeviceMesh tp3 = DeviceMesh::parse("tp=3");
  // 8 rows in 3 uneven blocks (3, 3, 2) inside the program are a sharding;
  // in 16 they would leave ranks without rows.
  propagate(g, tp3, fix(g, {{"w1", "[S(0)]"}}), h100());
  try {
    propagate(g, DeviceMesh::parse("tp=16"), fix(g, {{"w1", "[S(0)]"}}), h100());
    ADD_FAILURE() << "8 rows split 16 ways were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w1'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(propagate(g, tp3, fix(g, {{"w1", "[S(2)]"}}), h100()), Error);
  EXPECT_THROW(propagate(g, tp3, fix(g, {{"w1", "[R,R]"}}), h100()), Error);
}

// Propagation of nothing splits nothing.
TEST(Propagate, NoAnnotationsNoSplit) {
  Graph g = parse_graph(kMlp);
  ShardedGraph s = propagate(g, DeviceMesh::parse("tp=2"), {}, h100());
  for (const Sharding& v : s.values) EXPECT_EQ(v, Sharding::parse("[R]"));
  EXPECT_EQ(s.reshard_seconds, 0);
}

}  // namespace
}  // namespace tessera::mutator

namespace tessera::mutator {
namespace {

using testing::torch_like_mlp;

TEST(Annotations, NodePathsNameTheirTensors) {
  Graph g = torch_like_mlp();
  DeviceMesh tp = DeviceMesh::parse("tp=2");
  std::vector<ShardConstraint> c =
      resolve_annotations(g, tp, {"*/fc1/MatMul:in1=[S(1)]", "*/fc2/MatMul:in1=[S(0)]", "*/act/Relu:out0=[S(1)]"});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(g.value(c[0].value).name, "onnx::MatMul_1144");
  EXPECT_EQ(c[0].sharding, Sharding::parse("[S(1)]"));
  EXPECT_EQ(g.value(c[1].value).name, "onnx::MatMul_1145");
  EXPECT_EQ(c[2].value, g.node(1).outputs[0]);
  // A value glob, and the same tensor twice with the same sharding.
  EXPECT_EQ(resolve_annotations(g, tp, {"onnx::MatMul_114?=[R]", "onnx::MatMul_1144=[R]"}).size(), 2u);
  ShardedGraph s = propagate(g, tp, c, cpu());
  expect_partition_matches(g, s);
}

TEST(Annotations, ErrorsNameTheSpecOrTheTensor) {
  Graph g = torch_like_mlp();
  DeviceMesh tp = DeviceMesh::parse("tp=3");
  auto message = [&](std::vector<std::string> specs) {
    try {
      resolve_annotations(g, tp, specs);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"*/fc9/*:in1=[S(0)]"}).find("matches no tensor"), std::string::npos);
  EXPECT_NE(message({"*/fc1/MatMul:in1=[S(1)]"}).find("onnx::MatMul_1144"), std::string::npos);  // 16 % 3
  EXPECT_NE(message({"*/fc1/MatMul:in1=[S(1)]"}).find("not divisible"), std::string::npos);
  EXPECT_NE(message({"*/fc1/MatMul:in1=[S(2)]"}).find("onnx::MatMul_1144"), std::string::npos);  // no dim 2
  EXPECT_NE(message({"*/fc1/MatMul:in1=[R,R]"}).find("2 placements"), std::string::npos);
  EXPECT_NE(message({"*/fc1/MatMul:in7=[R]"}).find("has no input 7"), std::string::npos);
  EXPECT_NE(message({"*/fc1/MatMul:in1"}).find("expected GLOB"), std::string::npos);
  EXPECT_NE(message({"*/fc1/MatMul:in1=[Q]"}).find("bad placement"), std::string::npos);
  EXPECT_NE(message({"input=[P]", "input=[R]"}).find("is given"), std::string::npos);
}

TEST(Annotations, ShardFileKeepsItsOrder) {
  std::string path = ::testing::TempDir() + "/tessera_shard_file.json";
  {
    std::ofstream f(path);
    f << R"({"*/fc2/MatMul:in1": "[S(0)]", "*/fc1/MatMul:in1": "[S(1)]"})";
  }
  EXPECT_EQ(read_shard_file(path), (std::vector<std::string>{"*/fc2/MatMul:in1=[S(0)]", "*/fc1/MatMul:in1=[S(1)]"}));
  {
    std::ofstream f(path);
    f << R"(["*/fc2/MatMul:in1"])";
  }
  EXPECT_THROW(read_shard_file(path), Error);
  EXPECT_THROW(read_shard_file(path + ".missing"), Error);
}

}  // namespace
}  // namespace tessera::mutator

namespace tessera::mutator {
namespace {

// The one driver on a mesh with annotations and no search: the ranks'
// programs are checked, and the plan records each collective and rank.
TEST(MeshPlan, ChecksAndDescribesTheRanks) {
  Graph g = torch_like_mlp();
  OptimizeOptions o;
  o.mesh = DeviceMesh::parse("tp=2");
  o.specs = {"*/fc1/MatMul:in1=[S(1)]", "*/fc2/MatMul:in1=[S(0)]"};
  o.shard_search = false;
  o.budget_s = 5;
  Plan p = optimize(g, o);
  EXPECT_TRUE(p.check.passed) << p.check.summary();
  ASSERT_TRUE(p.is_mesh());
  ASSERT_EQ(p.ranks.size(), 2u);
  ASSERT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(p.collectives[0].kind, "AllReduce");
  EXPECT_EQ(p.collectives[0].bytes, 4 * 8 * 4);
  EXPECT_EQ(p.rank_records[0].weight_bytes, (8 * 16 + 16 * 8) * 4 / 2);
  EXPECT_EQ(p.mesh.str(), "tp=2");
  EXPECT_FALSE(p.shard_searched);
}

// An annotated graph input and output cross the plan's boundary as each
// rank's block: the rank program takes rows of x and gives back rows of y,
// with no collective, and the blocks assembled are the single-device y.
TEST(BoundaryShardingTest, AnnotatedInputAndOutputAreRankBlocks) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 8}});
  ValueId w = g.add_constant("w", ramp({DType::kF32, {8, 6}}, 7));
  NodeId mm = g.add_node(OpKind::kMatMul, {x, w}, {}, "mm", {"y"});
  g.set_outputs({g.node(mm).outputs[0]});
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  std::vector<ShardConstraint> c = resolve_annotations(g, mesh, {"x=[S(0)]", "y=[S(0)]"});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_TRUE(c[0].boundary && c[1].boundary);
  ShardedGraph s = propagate(g, mesh, c, cpu());
  EXPECT_EQ(s.inputs, std::vector<Sharding>{Sharding::parse("[S(0)]")});
  EXPECT_EQ(s.outputs, std::vector<Sharding>{Sharding::parse("[S(0)]")});
  RankPrograms p = partition(g, s);
  EXPECT_EQ(p.ranks[0].type(p.ranks[0].inputs()[0]).shape, (Shape{2, 8}));
  EXPECT_EQ(p.ranks[0].type(p.ranks[0].outputs()[0]).shape, (Shape{2, 6}));
  for (NodeId n = 0; n < p.ranks[0].num_nodes(); ++n) EXPECT_FALSE(op_def(p.ranks[0].node(n).kind).is_collective());
  Tensor xv = ramp(g.type(x), 3);
  std::vector<const Graph*> graphs;
  std::vector<std::vector<RefTensor<double>>> ins;
  for (int64_t r = 0; r < 2; ++r) {
    graphs.push_back(&p.ranks[static_cast<size_t>(r)]);
    ins.push_back({to_ref<double>(shard_of(xv, s.inputs[0], mesh, r))});
  }
  std::vector<Tensor> blocks;
  for (const auto& outs : interpret_ranks<double>(graphs, mesh, ins)) blocks.push_back(from_ref<double>(outs[0]));
  Tensor y = unshard(blocks, s.outputs[0], mesh, {4, 6});
  EXPECT_LE(tessera::testing::relative_error(y, evaluate(g, {xv}, Precision::kF64)[0]), 1e-9);
  // Without the annotation on y, y is gathered whole at the boundary.
  RankPrograms whole = partition(g, propagate(g, mesh, resolve_annotations(g, mesh, {"x=[S(0)]"}), cpu()));
  EXPECT_EQ(whole.ranks[0].type(whole.ranks[0].outputs()[0]).shape, (Shape{4, 6}));
  EXPECT_EQ(count_kind(whole, OpKind::kAllGather), 1);
}

// Partial sums do not cross the boundary: a one-line error naming the tensor.
TEST(BoundaryShardingTest, PartialAtTheBoundaryIsAnError) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 8}});
  NodeId n = g.add_node(OpKind::kRelu, {x}, {}, "relu", {"y"});
  g.set_outputs({g.node(n).outputs[0]});
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  try {
    propagate(g, mesh, resolve_annotations(g, mesh, {"y=[P]"}), cpu());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'y'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("partial sums"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::mutator
