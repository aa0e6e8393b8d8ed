// Collectives on a mesh through the reference interpreter, and the two
// Megatron identities they exist for: column-parallel MatMul + AllGather and
// row-parallel MatMul + AllReduce both equal the global MatMul.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "graph/number.h"

namespace tessera {
namespace {

using Ref = RefTensor<double>;

Ref ref(Shape shape, std::vector<double> values) {
  return to_ref<double>(Tensor::from_doubles(DType::kF64, std::move(shape), values));
}

Attrs collective(const std::string& axis_name, int64_t group, std::vector<std::pair<std::string, int64_t>> ints = {}) {
  Attrs a;
  a.set("mesh_axis", axis_name);
  a.set("group_size", group);
  for (auto& [k, v] : ints) a.set(k, v);
  return a;
}

// One-op program: y = op(x).
Graph one_op(OpKind kind, TensorType in, Attrs attrs) {
  Graph g;
  ValueId x = g.add_input("x", std::move(in));
  g.set_outputs({g.add(kind, {x}, std::move(attrs), "c")});
  return g;
}

std::vector<std::vector<Ref>> run(const Graph& g, const DeviceMesh& mesh, const std::vector<Ref>& per_rank) {
  std::vector<std::vector<Ref>> inputs;
  for (const Ref& r : per_rank) inputs.push_back({r});
  return interpret_on_mesh<double>(g, mesh, inputs);
}

TEST(CollectiveTest, AllReduceSumsOverTheGroup) {
  DeviceMesh mesh = DeviceMesh::parse("tp=4");
  Graph g = one_op(OpKind::kAllReduce, {DType::kF64, {2}}, collective("tp", 4));
  std::vector<Ref> in;
  for (int r = 0; r < 4; ++r) in.push_back(ref({2}, {r * 10.0, r + 1.0}));
  auto out = run(g, mesh, in);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(out[r][0].type, (TensorType{DType::kF64, {2}}));
    EXPECT_EQ(out[r][0].num, (std::vector<double>{60, 10})) << "rank " << r;
  }
}

TEST(CollectiveTest, AllReduceOnIntegersUsesIntStorage) {
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  Graph g = one_op(OpKind::kAllReduce, {DType::kI64, {3}}, collective("tp", 2));
  std::vector<Ref> in = {to_ref<double>(Tensor::vector_i64({1, 2, 3})),
                         to_ref<double>(Tensor::vector_i64({10, 20, -30}))};
  auto out = run(g, mesh, in);
  EXPECT_EQ(out[0][0].ints, (std::vector<int64_t>{11, 22, -27}));
  EXPECT_EQ(out[1][0].ints, (std::vector<int64_t>{11, 22, -27}));
}

TEST(CollectiveTest, AllGatherConcatenatesInRankOrder) {
  DeviceMesh mesh = DeviceMesh::parse("tp=4");
  Graph g = one_op(OpKind::kAllGather, {DType::kF64, {2, 1}}, collective("tp", 4, {{"axis", 1}}));
  std::vector<Ref> in;
  for (int r = 0; r < 4; ++r) in.push_back(ref({2, 1}, {r * 1.0, 10.0 + r}));
  auto out = run(g, mesh, in);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(out[r][0].type.shape, (Shape{2, 4}));
    EXPECT_EQ(out[r][0].num, (std::vector<double>{0, 1, 2, 3, 10, 11, 12, 13})) << "rank " << r;
  }
}

TEST(CollectiveTest, ReduceScatterGivesEachRankItsSliceOfTheSum) {
  DeviceMesh mesh = DeviceMesh::parse("tp=4");
  Graph g = one_op(OpKind::kReduceScatter, {DType::kF64, {4, 2}}, collective("tp", 4, {{"axis", 0}}));
  std::vector<Ref> in;
  // Rank r holds row i = [i + r, 100 * i]; the sum has row i = [4i + 6, 400 i].
  for (int r = 0; r < 4; ++r) {
    std::vector<double> v;
    for (int i = 0; i < 4; ++i) v.insert(v.end(), {double(i + r), 100.0 * i});
    in.push_back(ref({4, 2}, v));
  }
  auto out = run(g, mesh, in);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(out[r][0].type.shape, (Shape{1, 2}));
    EXPECT_EQ(out[r][0].num, (std::vector<double>{4.0 * r + 6, 400.0 * r})) << "rank " << r;
  }
}

TEST(CollectiveTest, AllToAllSendsChunkJToRankJ) {
  DeviceMesh mesh = DeviceMesh::parse("tp=4");
  Graph g = one_op(OpKind::kAllToAll, {DType::kF64, {4, 1}},
                   collective("tp", 4, {{"split_axis", 0}, {"concat_axis", 1}}));
  std::vector<Ref> in;
  for (int r = 0; r < 4; ++r) in.push_back(ref({4, 1}, {r * 10.0, r * 10.0 + 1, r * 10.0 + 2, r * 10.0 + 3}));
  auto out = run(g, mesh, in);
  // Rank r receives chunk r of every rank k, placed as block k.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(out[r][0].type.shape, (Shape{1, 4}));
    EXPECT_EQ(out[r][0].num, (std::vector<double>{0.0 + r, 10.0 + r, 20.0 + r, 30.0 + r})) << "rank " << r;
  }
}

TEST(CollectiveTest, TwoAxisMeshGroupsAlongTheNamedAxis) {
  DeviceMesh mesh = DeviceMesh::parse("dp=2,tp=2");
  std::vector<Ref> in;
  for (int r = 0; r < 4; ++r) in.push_back(ref({1}, {std::pow(10.0, r)}));  // 1, 10, 100, 1000
  auto over_tp = run(one_op(OpKind::kAllReduce, {DType::kF64, {1}}, collective("tp", 2)), mesh, in);
  EXPECT_EQ(over_tp[0][0].num[0], 11);
  EXPECT_EQ(over_tp[1][0].num[0], 11);
  EXPECT_EQ(over_tp[2][0].num[0], 1100);
  EXPECT_EQ(over_tp[3][0].num[0], 1100);
  auto over_dp = run(one_op(OpKind::kAllReduce, {DType::kF64, {1}}, collective("dp", 2)), mesh, in);
  EXPECT_EQ(over_dp[0][0].num[0], 101);
  EXPECT_EQ(over_dp[1][0].num[0], 1010);
  EXPECT_EQ(over_dp[2][0].num[0], 101);
  EXPECT_EQ(over_dp[3][0].num[0], 1010);
  auto gather_dp =
      run(one_op(OpKind::kAllGather, {DType::kF64, {1}}, collective("dp", 2, {{"axis", 0}})), mesh, in);
  EXPECT_EQ(gather_dp[1][0].num, (std::vector<double>{10, 1000}));
  EXPECT_EQ(gather_dp[2][0].num, (std::vector<double>{1, 100}));
}

TEST(CollectiveTest, ReduceScatterThenAllGatherEqualsAllReduce) {
  DeviceMesh mesh = DeviceMesh::parse("dp=2,tp=2");
  Graph g;
  ValueId x = g.add_input("x", {DType::kF64, {4, 3}});
  ValueId rs = g.add(OpKind::kReduceScatter, {x}, collective("tp", 2, {{"axis", 0}}), "rs");
  ValueId ag = g.add(OpKind::kAllGather, {rs}, collective("tp", 2, {{"axis", 0}}), "ag");
  ValueId ar = g.add(OpKind::kAllReduce, {x}, collective("tp", 2), "ar");
  g.set_outputs({ag, ar});
  std::vector<Ref> in;
  for (int r = 0; r < 4; ++r) {
    std::vector<double> v;
    for (int i = 0; i < 12; ++i) v.push_back((i * 7 + r * 13) % 11 - 5.0);
    in.push_back(ref({4, 3}, v));
  }
  auto out = run(g, mesh, in);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(out[r][0].type, out[r][1].type);
    EXPECT_EQ(out[r][0].num, out[r][1].num) << "rank " << r;
  }
  EXPECT_NE(out[0][1].num, out[2][1].num);  // the dp groups really differ
}

// Blocks of a row-major [rows x cols] matrix.
std::vector<double> column_block(const std::vector<double>& m, int64_t rows, int64_t cols, int64_t k, int64_t n) {
  int64_t w = cols / n;
  std::vector<double> out;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = k * w; j < (k + 1) * w; ++j) out.push_back(m[i * cols + j]);
  return out;
}
std::vector<double> row_block(const std::vector<double>& m, int64_t rows, int64_t cols, int64_t k, int64_t n) {
  int64_t h = rows / n;
  return std::vector<double>(m.begin() + k * h * cols, m.begin() + (k + 1) * h * cols);
}

std::vector<double> sample(int64_t count, int seed) {
  std::vector<double> v;
  for (int64_t i = 0; i < count; ++i) v.push_back(static_cast<double>((i * 31 + seed * 17) % 19) - 9.0);
  return v;
}

// Global reference: Y = X @ W.
std::vector<double> global_matmul(const std::vector<double>& x, const std::vector<double>& w, int64_t m, int64_t k,
                                  int64_t n) {
  Graph g;
  ValueId gx = g.add_input("x", {DType::kF64, {m, k}});
  ValueId gw = g.add_input("w", {DType::kF64, {k, n}});
  g.set_outputs({g.add(OpKind::kMatMul, {gx, gw})});
  return interpret<double>(g, {ref({m, k}, x), ref({k, n}, w)})[0].num;
}

TEST(CollectiveTest, ColumnParallelMatMulPlusAllGatherEqualsGlobal) {
  const int64_t m = 3, k = 5, n = 8, tp = 4;
  std::vector<double> x = sample(m * k, 1), w = sample(k * n, 2);
  // Per-rank program: X replicated, W split by columns, Y gathered along dim 1.
  Graph local;
  ValueId lx = local.add_input("x", {DType::kF64, {m, k}});
  ValueId lw = local.add_input("w_cols", {DType::kF64, {k, n / tp}});
  ValueId y = local.add(OpKind::kMatMul, {lx, lw}, {}, "mm");
  local.set_outputs({local.add(OpKind::kAllGather, {y}, collective("tp", tp, {{"axis", 1}}), "gather")});
  std::vector<std::vector<Ref>> inputs;
  for (int64_t r = 0; r < tp; ++r) inputs.push_back({ref({m, k}, x), ref({k, n / tp}, column_block(w, k, n, r, tp))});
  auto out = interpret_on_mesh<double>(local, DeviceMesh::parse("tp=4"), inputs);
  std::vector<double> expected = global_matmul(x, w, m, k, n);
  for (int64_t r = 0; r < tp; ++r) EXPECT_EQ(out[r][0].num, expected) << "rank " << r;
}

TEST(CollectiveTest, RowParallelMatMulPlusAllReduceEqualsGlobal) {
  const int64_t m = 3, k = 8, n = 5, tp = 4;
  std::vector<double> x = sample(m * k, 3), w = sample(k * n, 4);
  // Per-rank program: X split by columns, W by rows; partial sums all-reduced.
  Graph local;
  ValueId lx = local.add_input("x_cols", {DType::kF64, {m, k / tp}});
  ValueId lw = local.add_input("w_rows", {DType::kF64, {k / tp, n}});
  ValueId partial = local.add(OpKind::kMatMul, {lx, lw}, {}, "mm");
  local.set_outputs({local.add(OpKind::kAllReduce, {partial}, collective("tp", tp), "reduce")});
  std::vector<std::vector<Ref>> inputs;
  for (int64_t r = 0; r < tp; ++r)
    inputs.push_back({ref({m, k / tp}, column_block(x, m, k, r, tp)), ref({k / tp, n}, row_block(w, k, n, r, tp))});
  auto out = interpret_on_mesh<double>(local, DeviceMesh::parse("tp=4"), inputs);
  std::vector<double> expected = global_matmul(x, w, m, k, n);
  for (int64_t r = 0; r < tp; ++r) EXPECT_EQ(out[r][0].num, expected) << "rank " << r;
}

TEST(CollectiveTest, RowParallelIdentityHoldsOverZp) {
  // The verifier's number type: the identity is exact over Z_p as well.
  const int64_t m = 2, k = 4, n = 3, tp = 2;
  std::vector<double> x = sample(m * k, 5), w = sample(k * n, 6);
  Graph local;
  ValueId lx = local.add_input("x_cols", {DType::kF64, {m, k / tp}});
  ValueId lw = local.add_input("w_rows", {DType::kF64, {k / tp, n}});
  ValueId partial = local.add(OpKind::kMatMul, {lx, lw});
  local.set_outputs({local.add(OpKind::kAllReduce, {partial}, collective("tp", tp))});
  auto zp = [](Shape s, const std::vector<double>& v) {
    return to_ref<Zp>(Tensor::from_doubles(DType::kF64, std::move(s), v));
  };
  std::vector<std::vector<RefTensor<Zp>>> inputs;
  for (int64_t r = 0; r < tp; ++r)
    inputs.push_back({zp({m, k / tp}, column_block(x, m, k, r, tp)), zp({k / tp, n}, row_block(w, k, n, r, tp))});
  auto out = interpret_on_mesh<Zp>(local, DeviceMesh::parse("tp=2"), inputs);
  std::vector<double> expected = global_matmul(x, w, m, k, n);
  ASSERT_EQ(out[1][0].num.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(num_to_double(out[1][0].num[i]), expected[i]) << i;
}

TEST(CollectiveTest, Errors) {
  Graph g = one_op(OpKind::kAllReduce, {DType::kF64, {2}}, collective("tp", 4));
  // Without a mesh.
  try {
    interpret<double>(g, {ref({2}, {1, 2})});
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_EQ(e.context().node, "c");
    EXPECT_NE(e.message().find("needs a device mesh"), std::string::npos) << e.what();
  }
  // group_size disagrees with the mesh axis.
  std::vector<Ref> two = {ref({2}, {1, 2}), ref({2}, {3, 4})};
  try {
    run(g, DeviceMesh::parse("tp=2"), two);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("group_size 4 does not match mesh axis 'tp' of size 2"), std::string::npos) << e.what();
  }
  // Wrong number of ranks' inputs, and an axis the mesh lacks.
  EXPECT_THROW(run(g, DeviceMesh::parse("tp=4"), two), Error);
  EXPECT_THROW(run(g, DeviceMesh::parse("dp=2"), two), Error);
  // Shape inference rejects a ReduceScatter that does not divide.
  Graph bad;
  ValueId x = bad.add_input("x", {DType::kF64, {3}});
  EXPECT_THROW(bad.add(OpKind::kReduceScatter, {x}, collective("tp", 2, {{"axis", 0}})), Error);
}

// Ranks that hold their blocks of a weight as constants (what partitioning
// writes), run on three input sets at once: each set's outputs are those of
// running it alone, and the collectives exchange within a set only.
TEST(CollectiveTest, InputSetsRunTogetherGiveEachSetsOwnResult) {
  const int64_t m = 2, k = 8, n = 3, tp = 2;
  std::vector<double> w = sample(k * n, 7), shared_bias = sample(m * n, 8);
  Tensor bias = Tensor::from_doubles(DType::kF64, {m, n}, shared_bias);  // one storage, on both ranks
  std::vector<Graph> ranks(tp);
  std::vector<const Graph*> programs;
  for (int64_t r = 0; r < tp; ++r) {
    Graph& g = ranks[static_cast<size_t>(r)];
    ValueId x = g.add_input("x_cols", {DType::kF64, {m, k / tp}});
    ValueId wr = g.add_constant("w_rows", Tensor::from_doubles(DType::kF64, {k / tp, n}, row_block(w, k, n, r, tp)));
    ValueId sum = g.add(OpKind::kAllReduce, {g.add(OpKind::kMatMul, {x, wr}, {}, "mm")}, collective("tp", tp), "reduce");
    g.set_outputs({g.add(OpKind::kAdd, {sum, g.add_constant("bias", bias)}, {}, "add")});
    programs.push_back(&g);
  }
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  std::vector<std::vector<Ref>> together;
  std::vector<std::vector<double>> expected;
  for (int set = 0; set < 3; ++set) {
    std::vector<double> x = sample(m * k, 20 + set);
    std::vector<std::vector<Ref>> alone;
    for (int64_t r = 0; r < tp; ++r) {
      alone.push_back({ref({m, k / tp}, column_block(x, m, k, r, tp))});
      together.push_back(alone.back());
    }
    std::vector<double> want = global_matmul(x, w, m, k, n);
    for (size_t i = 0; i < want.size(); ++i) want[i] += shared_bias[i];
    expected.push_back(want);
    auto out = interpret_ranks<double>(programs, mesh, alone);
    for (int64_t r = 0; r < tp; ++r) EXPECT_EQ(out[r][0].num, want) << "set " << set << " rank " << r << " alone";
  }
  auto out = interpret_ranks_sets<double>(programs, mesh, together);
  ASSERT_EQ(out.size(), 6u);
  for (size_t set = 0; set < 3; ++set)
    for (size_t r = 0; r < tp; ++r)
      EXPECT_EQ(out[set * tp + r][0].num, expected[set]) << "set " << set << " rank " << r;
  // One graph on several sets: interpret_sets, each set as interpret gives it.
  Graph one;
  ValueId x = one.add_input("x", {DType::kF64, {m, k}});
  ValueId wv = one.add_constant("w", Tensor::from_doubles(DType::kF64, {k, n}, w));
  one.set_outputs({one.add(OpKind::kMatMul, {x, wv}, {}, "mm")});
  std::vector<std::vector<Ref>> sets;
  for (int set = 0; set < 3; ++set) sets.push_back({ref({m, k}, sample(m * k, 20 + set))});
  auto each = interpret_sets<double>(one, sets);
  ASSERT_EQ(each.size(), 3u);
  for (size_t set = 0; set < 3; ++set) EXPECT_EQ(each[set][0].num, interpret<double>(one, sets[set])[0].num);
  // A program of a mesh needs one: interpret_sets refuses its collectives.
  EXPECT_THROW(interpret_sets<double>(ranks[0], {{ref({m, k / tp}, sample(m * k / tp, 1))}}), Error);
  // Inputs that are not a whole number of sets.
  EXPECT_THROW(interpret_ranks_sets<double>(programs, mesh, {together[0]}), Error);
}

// HaloExchange: rank c's rows with the previous rank's last before[c] rows
// above and the next rank's first after[c] rows below; bands of 3, 2, 2 rows.
TEST(CollectiveTest, HaloExchangeBringsTheNeighboursRows) {
  DeviceMesh mesh = DeviceMesh::parse("tp=3");
  std::vector<Graph> graphs;
  std::vector<std::vector<Ref>> in;
  const int64_t rows[] = {3, 2, 2};
  for (int64_t c = 0; c < 3; ++c) {
    Attrs a = collective("tp", 3, {{"axis", 0}, {"coordinate", c}});
    a.set("before", std::vector<int64_t>{0, 1, 2});
    a.set("after", std::vector<int64_t>{2, 1, 0});
    graphs.push_back(one_op(OpKind::kHaloExchange, {DType::kF64, {rows[c], 1}}, a));
    std::vector<double> v;
    for (int64_t i = 0; i < rows[c]; ++i) v.push_back(10.0 * c + i);
    in.push_back({ref({rows[c], 1}, v)});
  }
  std::vector<const Graph*> programs{&graphs[0], &graphs[1], &graphs[2]};
  auto out = interpret_ranks<double>(programs, mesh, in);
  EXPECT_EQ(out[0][0].num, (std::vector<double>{0, 1, 2, 10, 11}));
  EXPECT_EQ(out[1][0].num, (std::vector<double>{2, 10, 11, 20}));
  EXPECT_EQ(out[2][0].num, (std::vector<double>{10, 11, 20, 21}));
  // A halo deeper than the neighbour's band is a shape error naming it.
  Attrs deep = collective("tp", 3, {{"axis", 0}, {"coordinate", 1}});
  deep.set("before", std::vector<int64_t>{0, 1, 3});
  deep.set("after", std::vector<int64_t>{2, 1, 0});
  EXPECT_THROW(one_op(OpKind::kHaloExchange, {DType::kF64, {2, 1}}, deep), Error);
}

}  // namespace
}  // namespace tessera
