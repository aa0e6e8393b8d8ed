#include "verifier/multilinear.h"

#include <gtest/gtest.h>

#include "graph/error.h"
#include "tests/verifier/test_graphs.h"
#include "verifier/degree.h"
#include "verifier/plan_check.h"
#include "verifier/random.h"
#include "verifier/shared_eval.h"

namespace tessera::verifier {
namespace {

using testing::concat;
using testing::conv;
using testing::f32;
using testing::Ints;
using testing::make_attrs;

TEST(Degree, MultilinearOpsAddDegreesAndLinearOpsKeepThem) {
  Graph g;
  ValueId a = g.add_input("a", f32({2, 3})), b = g.add_input("b", f32({3, 4})), c = g.add_input("c", f32({4, 5}));
  ValueId ab = g.add(OpKind::kMatMul, {a, b});
  ValueId t = g.add(OpKind::kTranspose, {g.add(OpKind::kMatMul, {ab, c})}, make_attrs({{"perm", Ints{1, 0}}}));
  g.set_outputs({t});
  ProgramAnalysis pa = analyze_program(g);
  EXPECT_EQ(pa.degree, 3);
  EXPECT_TRUE(pa.polynomial());
}

TEST(Degree, NonLinearOpsAreFreshVariables) {
  Graph g;
  ValueId a = g.add_input("a", f32({4}));
  ValueId m = g.add(OpKind::kMul, {a, a});
  ValueId r = g.add(OpKind::kRelu, {m});
  ValueId mx = g.add(OpKind::kMax, {r, a});
  g.set_outputs({mx});
  ProgramAnalysis pa = analyze_program(g);
  EXPECT_EQ(pa.degree, 2);
  EXPECT_EQ(pa.uninterpreted, 2);
  EXPECT_TRUE(pa.order_based);
  EXPECT_FALSE(pa.polynomial());
  EXPECT_EQ(trial_error_bound(pa, pa), 0.5);
  EXPECT_EQ(trials_for(0.5, 1e-9), 30);
}

// MatMul over an added pair, and the distributed form: equal programs.
TEST(Multilinear, DistributivityIsEquivalentWithStatedBound) {
  auto build = [](bool distributed) {
    Graph g;
    ValueId a = g.add_input("a", f32({3, 4})), b = g.add_input("b", f32({3, 4})), w = g.add_input("w", f32({4, 2}));
    if (distributed)
      g.set_outputs({g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {a, w}), g.add(OpKind::kMatMul, {b, w})})});
    else
      g.set_outputs({g.add(OpKind::kMatMul, {g.add(OpKind::kAdd, {a, b}), w})});
    return g;
  };
  Graph x = build(false), y = build(true);
  Verdict v = check_equivalence(x, y);
  EXPECT_EQ(v.kind, Verdict::kEquivalent) << v.summary();
  EXPECT_EQ(v.method, Method::kMultilinear);
  EXPECT_EQ(v.degree, 2);
  EXPECT_LT(v.error_bound, 1e-9);
  EXPECT_GE(v.trials, 1);
  EXPECT_TRUE(v.differing.empty());
}

// Batching two images along H: a 3x3 convolution of the stacked images is
// wrong exactly on the two rows at the seam, for every channel and column.
TEST(Multilinear, BatchAlongHeightDiffersExactlyAtTheSeamRows) {
  const int64_t H = 5, W = 4;
  auto build = [&](bool batched) {
    Graph g;
    ValueId x0 = g.add_input("x0", f32({1, 2, H, W})), x1 = g.add_input("x1", f32({1, 2, H, W}));
    ValueId w = g.add_input("w", f32({3, 2, 3, 3}));
    Ints k = {3, 3}, p = {1, 1, 1, 1};
    if (batched) g.set_outputs({conv(g, concat(g, {x0, x1}, 2), w, k, p)});
    else g.set_outputs({concat(g, {conv(g, x0, w, k, p), conv(g, x1, w, k, p)}, 2)});
    return g;
  };
  Graph orig = build(false), cand = build(true);
  Verdict v = check_equivalence(orig, cand);
  ASSERT_EQ(v.kind, Verdict::kDiffers) << v.summary();
  ASSERT_EQ(v.differing.size(), 1u);
  ASSERT_EQ(v.differing[0].boxes.size(), 1u);
  EXPECT_EQ(v.differing[0].boxes[0], (Box{{0, 0, H - 1, 0}, {1, 3, H + 1, W}}));
}

TEST(Multilinear, SharedNonLinearOpIsUninterpretedFunction) {
  auto build = [](bool split) {
    Graph g;
    ValueId a = g.add_input("a", f32({2, 3})), w1 = g.add_input("w1", f32({3, 2})), w2 = g.add_input("w2", f32({3, 2}));
    if (split) {
      ValueId mm = g.add(OpKind::kMatMul, {a, concat(g, {w1, w2}, 1)});
      NodeId s = g.add_node(OpKind::kSplit, {mm}, make_attrs({{"axis", int64_t{1}}, {"split", Ints{2, 2}}}));
      g.set_outputs({g.add(OpKind::kRelu, {g.node(s).outputs[0]}), g.add(OpKind::kRelu, {g.node(s).outputs[1]})});
    } else {
      g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {a, w1})}),
                     g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {a, w2})})});
    }
    return g;
  };
  Verdict v = check_equivalence(build(false), build(true));
  EXPECT_EQ(v.kind, Verdict::kEquivalent) << v.summary();
  EXPECT_EQ(v.method, Method::kUninterpreted);
  EXPECT_NE(v.reason.find("Relu"), std::string::npos) << v.reason;
}

// relu(relu(x)) = relu(x) holds over the reals but not for an uninterpreted
// function: the verdict must not claim a difference.
TEST(Multilinear, RealIdentityInvisibleToZpIsUnknownNotDiffers) {
  Graph a, b;
  ValueId x = a.add_input("x", f32({6}));
  a.set_outputs({a.add(OpKind::kRelu, {a.add(OpKind::kRelu, {x})})});
  ValueId y = b.add_input("x", f32({6}));
  b.set_outputs({b.add(OpKind::kRelu, {y})});
  Verdict v = check_equivalence(a, b);
  EXPECT_EQ(v.kind, Verdict::kUnknown) << v.summary();
  EXPECT_EQ(v.method, Method::kFloatTest);
}

TEST(Multilinear, NonLinearOpOnDifferentArgumentsIsConfirmedInFloat) {
  Graph a, b;
  ValueId x = a.add_input("x", f32({6}));
  a.set_outputs({a.add(OpKind::kRelu, {x})});
  ValueId y = b.add_input("x", f32({6}));
  b.set_outputs({b.add(OpKind::kRelu, {b.add(OpKind::kNeg, {y})})});
  Verdict v = check_equivalence(a, b);
  EXPECT_EQ(v.kind, Verdict::kDiffers) << v.summary();
}

TEST(Multilinear, OutputTypeMismatchIsStructuralDifference) {
  Graph a, b;
  a.set_outputs({a.add(OpKind::kNeg, {a.add_input("x", f32({2, 3}))})});
  ValueId y = b.add_input("x", f32({2, 3}));
  b.set_outputs({testing::transpose(b, y, {1, 0})});
  Verdict v = check_equivalence(a, b);
  EXPECT_EQ(v.kind, Verdict::kDiffers);
  EXPECT_EQ(v.method, Method::kStructural);
  EXPECT_NE(v.reason.find("f32[2x3]"), std::string::npos) << v.reason;
}

TEST(Multilinear, DifferentInputsAreAUsageError) {
  Graph a, b;
  a.set_outputs({a.add(OpKind::kNeg, {a.add_input("x", f32({2, 3}))})});
  b.set_outputs({b.add(OpKind::kNeg, {b.add_input("x", f32({3, 2}))})});
  EXPECT_THROW(check_equivalence(a, b), Error);
}

// Conv with padding vs explicit Pad then Conv, followed by the same Relu
// and Neg: the shared evaluation reuses the epilogue and gives exactly the
// values of two separate interpreter runs.
TEST(SharedEval, ReusesEqualSuffixAndMatchesSeparateRuns) {
  auto build = [](int64_t pad_begin) {
    Graph g;
    ValueId x = g.add_input("x", f32({1, 2, 5, 5})), w = g.add_input("w", f32({2, 2, 3, 3}));
    ValueId p = g.add(OpKind::kPad, {x}, make_attrs({{"pads", Ints{0, 0, pad_begin, 1, 0, 0, 2 - pad_begin, 1}}}));
    ValueId y = conv(g, p, w, {3, 3}, {0, 0, 0, 0});
    g.set_outputs({g.add(OpKind::kNeg, {g.add(OpKind::kRelu, {y})})});
    return g;
  };
  Graph plain;
  {
    ValueId x = plain.add_input("x", f32({1, 2, 5, 5})), w = plain.add_input("w", f32({2, 2, 3, 3}));
    plain.set_outputs({plain.add(OpKind::kNeg, {plain.add(OpKind::kRelu, {conv(plain, x, w, {3, 3}, {1, 1, 1, 1})})})});
  }
  SplitMix rng(7);
  std::vector<TensorType> types = {f32({1, 2, 5, 5}), f32({2, 2, 3, 3})};
  std::vector<RefTensor<Zp>> in = random_inputs<Zp>(types, rng);
  for (int64_t begin : {1, 2}) {
    Graph cand = build(begin);
    PairOutputs pair = evaluate_pair_zp(plain, cand, in);
    std::vector<RefTensor<Zp>> a = interpret<Zp>(plain, in), b = interpret<Zp>(cand, in);
    EXPECT_EQ(pair.original[0].num, a[0].num);
    EXPECT_EQ(pair.candidate[0].num, b[0].num);
    // Equal pad: Relu and Neg see equal inputs and are reused; wrong pad: nothing is.
    EXPECT_EQ(pair.reused_nodes, begin == 1 ? 2 : 0);
  }
}

// Global MatMul [4x8]x[8x6] against per-rank programs on tp=2.
Graph global_matmul() {
  Graph g;
  ValueId a = g.add_input("a", f32({4, 8})), w = g.add_input("w", f32({8, 6}));
  g.set_outputs({g.add(OpKind::kMatMul, {a, w})});
  return g;
}

ShardedProgram row_parallel(bool with_all_reduce) {
  ShardedProgram p;
  p.mesh = DeviceMesh::parse("tp=2");
  ValueId a = p.local.add_input("a", f32({4, 4})), w = p.local.add_input("w", f32({4, 6}));
  ValueId mm = p.local.add(OpKind::kMatMul, {a, w});
  if (with_all_reduce)
    mm = p.local.add(OpKind::kAllReduce, {mm}, make_attrs({{"mesh_axis", std::string("tp")}, {"group_size", int64_t{2}}}));
  p.local.set_outputs({mm});
  p.input_shardings = {Sharding::parse("[S(1)]"), Sharding::parse("[S(0)]")};
  p.output_shardings = {Sharding::parse("[R]")};
  return p;
}

TEST(Sharded, RowParallelWithAllReduceIsEquivalent) {
  Graph g = global_matmul();
  ShardedProgram p = row_parallel(true);
  Verdict v = check_equivalence(Program(g), Program(p));
  EXPECT_EQ(v.kind, Verdict::kEquivalent) << v.summary();
}

TEST(Sharded, ColumnParallelIsEquivalent) {
  Graph g = global_matmul();
  ShardedProgram p;
  p.mesh = DeviceMesh::parse("tp=2");
  ValueId a = p.local.add_input("a", f32({4, 8})), w = p.local.add_input("w", f32({8, 3}));
  p.local.set_outputs({p.local.add(OpKind::kMatMul, {a, w})});
  p.input_shardings = {Sharding::parse("[R]"), Sharding::parse("[S(1)]")};
  p.output_shardings = {Sharding::parse("[S(1)]")};
  Verdict v = check_equivalence(Program(g), Program(p));
  EXPECT_EQ(v.kind, Verdict::kEquivalent) << v.summary();
}

TEST(Sharded, PartialOutputDeclaredPartialIsEquivalent) {
  Graph g = global_matmul();
  ShardedProgram p = row_parallel(false);
  p.output_shardings = {Sharding::parse("[P]")};
  EXPECT_EQ(check_equivalence(Program(g), Program(p)).kind, Verdict::kEquivalent);
}

TEST(EndToEnd, PassesForCorrectPlanAndFailsForMissingAllReduce) {
  Graph g = global_matmul();
  ShardedProgram good = row_parallel(true), bad = row_parallel(false);
  EndToEndReport ok = check_end_to_end(Program(g), Program(good));
  EXPECT_TRUE(ok.passed) << ok.summary();
  EXPECT_LT(ok.max_abs_error, 1e-4);
  EndToEndReport fail = check_end_to_end(Program(g), Program(bad));
  EXPECT_FALSE(fail.passed);
  EXPECT_GT(fail.mismatches, 0);
  EXPECT_NE(fail.summary().find("FAILED"), std::string::npos);
}

TEST(EndToEnd, SingleGraphWithinTolerance) {
  Graph a, b;
  ValueId x = a.add_input("x", f32({3, 4}));
  a.set_outputs({testing::transpose(a, testing::transpose(a, x, {1, 0}), {1, 0})});
  ValueId y = b.add_input("x", f32({3, 4}));
  b.set_outputs({b.add(OpKind::kIdentity, {y})});
  EndToEndReport r = check_end_to_end(Program(a), Program(b));
  EXPECT_TRUE(r.passed) << r.summary();
  EXPECT_EQ(r.max_abs_error, 0.0);
}

// An error of a small share of the output's largest value passes wherever
// it lands (a different exact summation order rounds at the tensor's
// scale); one of the scale's size does not.
TEST(EndToEnd, ToleranceScalesWithTheOutputsLargestValue) {
  auto program = [](double shift) {
    Graph g;
    ValueId x = g.add_input("x", f32({2, 3}));
    ValueId big = g.add(OpKind::kMul, {x, g.add_constant("m", Tensor::from_doubles(DType::kF32, {}, {1e6}))});
    ValueId small = x;
    if (shift != 0) small = g.add(OpKind::kAdd, {x, g.add_constant("s", Tensor::from_doubles(DType::kF32, {}, {shift}))});
    Attrs cat;
    cat.set("axis", int64_t{0});
    g.set_outputs({g.add(OpKind::kConcat, {big, small}, cat)});
    return g;
  };
  EndToEndReport near = check_end_to_end(Program(program(0)), Program(program(1.0)));
  EXPECT_TRUE(near.passed) << near.summary();
  EndToEndReport far = check_end_to_end(Program(program(0)), Program(program(100.0)));
  EXPECT_FALSE(far.passed) << far.summary();
  EndToEndOptions strict;
  strict.scale_rtol = 0;
  EXPECT_FALSE(check_end_to_end(Program(program(0)), Program(program(1.0)), strict).passed);
}

}  // namespace
}  // namespace tessera::verifier
