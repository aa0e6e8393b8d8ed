// Reductions and normalizations (graph/ops/reduce.cc): values against numbers
// computed with numpy, integer inputs, attribute handling, shape inference
// errors, and exactness over Z_p.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "graph/error.h"
#include "graph/graph.h"
#include "graph/interpreter.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

using test::add_error;
using test::contains;
using test::expect_ints;
using test::expect_values;
using test::f32;
using test::i64;
using test::run;
using test::run_all;

Attrs axes_attrs(std::vector<int64_t> axes, int64_t keepdims = 1) {
  Attrs a;
  a.set("axes", std::move(axes));
  a.set("keepdims", keepdims);
  return a;
}
Attrs int_attr(const std::string& name, int64_t v, Attrs a = {}) {
  a.set(name, v);
  return a;
}


const Tensor kA = f32({2, 3}, {1, -2, 3, 4, 5, -6});

TEST(Reduce, SumOverAxesWithAndWithoutKeepdims) {
  expect_values(run(OpKind::kReduceSum, {kA}, axes_attrs({1})), DType::kF32, {2, 1}, {2, 3});
  expect_values(run(OpKind::kReduceSum, {kA}, axes_attrs({0}, 0)), DType::kF32, {3}, {5, 3, -3});
  expect_values(run(OpKind::kReduceSum, {kA}, axes_attrs({-1}, 0)), DType::kF32, {2}, {2, 3});
  expect_values(run(OpKind::kReduceSum, {kA}), DType::kF32, {1, 1}, {5});
  expect_values(run(OpKind::kReduceSum, {kA}, axes_attrs({}, 0)), DType::kF32, {}, {5});
}

TEST(Reduce, OtherReductionsMatchNumpy) {
  expect_values(run(OpKind::kReduceMean, {kA}, axes_attrs({0}, 0)), DType::kF32, {3}, {2.5, 1.5, -1.5});
  expect_values(run(OpKind::kReduceMax, {kA}, axes_attrs({1}, 0)), DType::kF32, {2}, {3, 5});
  expect_values(run(OpKind::kReduceMin, {kA}, axes_attrs({1}, 0)), DType::kF32, {2}, {-2, -6});
  expect_values(run(OpKind::kReduceProd, {kA}, axes_attrs({1}, 0)), DType::kF32, {2}, {-6, -120});
  expect_values(run(OpKind::kReduceSumSquare, {kA}, axes_attrs({1}, 0)), DType::kF32, {2}, {14, 77});
  expect_values(run(OpKind::kReduceL2, {kA}, axes_attrs({1}, 0)), DType::kF32, {2}, {3.74165739, 8.77496439});
}

TEST(Reduce, MiddleAxesOfRank3) {
  Tensor x = f32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  expect_values(run(OpKind::kReduceSum, {x}, axes_attrs({0, 2})), DType::kF32, {1, 2, 1}, {10, 18});
  expect_values(run(OpKind::kReduceMax, {x}, axes_attrs({1}, 0)), DType::kF32, {2, 2}, {2, 3, 6, 7});
}

TEST(Reduce, MaxPropagatesNaN) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  expect_values(run(OpKind::kReduceMax, {f32({3}, {1, nan, 2})}, axes_attrs({0}, 0)), DType::kF32, {}, {nan});
  expect_values(run(OpKind::kReduceMin, {f32({3}, {nan, 1, 2})}, axes_attrs({0}, 0)), DType::kF32, {}, {nan});
}

TEST(Reduce, IntegerInputs) {
  Tensor x = i64({2, 3}, {1, -2, 3, 4, 5, -7});
  expect_ints(run(OpKind::kReduceSum, {x}, axes_attrs({1}, 0)), DType::kI64, {2}, {2, 2});
  expect_ints(run(OpKind::kReduceMax, {x}, axes_attrs({1}, 0)), DType::kI64, {2}, {3, 5});
  expect_ints(run(OpKind::kReduceMin, {x}, axes_attrs({0}, 0)), DType::kI64, {3}, {1, -2, -7});
  expect_ints(run(OpKind::kReduceProd, {x}, axes_attrs({1}, 0)), DType::kI64, {2}, {-6, -140});
  // Integer mean truncates toward zero: 2/3 -> 0, -7/2 -> -3.
  expect_ints(run(OpKind::kReduceMean, {x}, axes_attrs({1}, 0)), DType::kI64, {2}, {0, 0});
  expect_ints(run(OpKind::kReduceMean, {i64({2}, {-3, -4})}, axes_attrs({0}, 0)), DType::kI64, {}, {-3});
}

TEST(Reduce, EmptyAxisSumsToZero) {
  Tensor empty(DType::kF32, {2, 0});
  expect_values(run(OpKind::kReduceSum, {empty}, axes_attrs({1}, 0)), DType::kF32, {2}, {0, 0});
  expect_values(run(OpKind::kReduceProd, {empty}, axes_attrs({1}, 0)), DType::kF32, {2}, {1, 1});
}

TEST(ArgMaxMin, FirstOrLastIndex) {
  Tensor x = f32({2, 4}, {1, 7, 7, 2, 5, 0, 0, 5});
  expect_ints(run(OpKind::kArgMax, {x}, int_attr("axis", 1)), DType::kI64, {2, 1}, {1, 0});
  expect_ints(run(OpKind::kArgMax, {x}, int_attr("axis", 1, int_attr("select_last_index", 1))), DType::kI64, {2, 1},
              {2, 3});
  expect_ints(run(OpKind::kArgMin, {x}, int_attr("axis", -1, int_attr("keepdims", 0))), DType::kI64, {2}, {0, 1});
  expect_ints(run(OpKind::kArgMin, {x}, int_attr("axis", 1, int_attr("select_last_index", 1))), DType::kI64, {2, 1},
              {0, 2});
  expect_ints(run(OpKind::kArgMax, {x}, int_attr("keepdims", 0)), DType::kI64, {4}, {1, 0, 0, 1});
  expect_ints(run(OpKind::kArgMax, {i64({3}, {-5, 9, 2})}, int_attr("keepdims", 0)), DType::kI64, {}, {1});
}

TEST(CumSum, ForwardExclusiveReverse) {
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_values(run(OpKind::kCumSum, {x}, int_attr("axis", 1)), DType::kF32, {2, 3}, {1, 3, 6, 4, 9, 15});
  expect_values(run(OpKind::kCumSum, {x}, int_attr("axis", 0)), DType::kF32, {2, 3}, {1, 2, 3, 5, 7, 9});
  expect_values(run(OpKind::kCumSum, {x}, int_attr("axis", 1, int_attr("exclusive", 1))), DType::kF32, {2, 3},
                {0, 1, 3, 0, 4, 9});
  expect_values(run(OpKind::kCumSum, {x}, int_attr("axis", -1, int_attr("reverse", 1))), DType::kF32, {2, 3},
                {6, 5, 3, 15, 11, 6});
  Attrs both = int_attr("axis", 1, int_attr("reverse", 1, int_attr("exclusive", 1)));
  expect_values(run(OpKind::kCumSum, {x}, both), DType::kF32, {2, 3}, {5, 3, 0, 11, 6, 0});
  expect_ints(run(OpKind::kCumSum, {i64({4}, {3, -1, 4, -1})}, int_attr("axis", 0)), DType::kI64, {4},
              {3, 2, 6, 5});
}

TEST(Softmax, MatchesNumpyAndIsStable) {
  expect_values(run(OpKind::kSoftmax, {f32({3}, {1, 2, 3})}), DType::kF32, {3},
                {0.0900305732, 0.244728471, 0.665240956});
  // exp(1000) overflows; the max shift keeps the result finite.
  expect_values(run(OpKind::kSoftmax, {f32({3}, {1000, 1001, 1002})}), DType::kF32, {3},
                {0.0900305732, 0.244728471, 0.665240956});
  expect_values(run(OpKind::kLogSoftmax, {f32({3}, {1000, 1001, 1002})}), DType::kF32, {3},
                {-2.40760596, -1.40760596, -0.407605964});
  expect_values(run(OpKind::kSoftmax, {f32({2, 2}, {1, 2, 3, 5})}, int_attr("axis", 0)), DType::kF32, {2, 2},
                {0.119202922, 0.0474258732, 0.880797078, 0.952574127});
}

TEST(LayerNormalization, ValuesAndStatistics) {
  Tensor x = f32({2, 3}, {1, 2, 4, -1, 0, 3});
  Tensor scale = f32({3}, {1, 2, 0.5});
  Tensor bias = f32({3}, {0, 1, -1});
  std::vector<Tensor> out = run_all(OpKind::kLayerNormalization, {x, scale, bias});
  ASSERT_EQ(out.size(), 3u);
  expect_values(out[0], DType::kF32, {2, 3},
                {-1.06904153, 0.465479234, -0.331849043, -0.980578979, 0.215536817, -0.313594715}, 1e-5);
  expect_values(out[1], DType::kF32, {2, 1}, {2.33333333, 0.666666667});
  expect_values(out[2], DType::kF32, {2, 1}, {0.801781149, 0.588347387}, 1e-5);
}

TEST(LayerNormalization, AxisOneOfRank3WithoutBias) {
  Tensor x = f32({2, 2, 2}, {0, 1, 2, 3, 16, 25, 36, 49});
  std::vector<Tensor> out = run_all(OpKind::kLayerNormalization, {x, f32({1}, {1})}, int_attr("axis", 1));
  expect_values(out[0], DType::kF32, {2, 2, 2},
                {-1.34163542, -0.447211807, 0.447211807, 1.34163542, -1.25618335, -0.526786567, 0.364698392,
                 1.41827153},
                1e-5);
  expect_values(out[1], DType::kF32, {2, 1, 1}, {1.5, 31.5});
  expect_values(out[2], DType::kF32, {2, 1, 1}, {0.894423613, 0.0810440872}, 1e-5);
}

TEST(BatchNormalization, InferenceForm) {
  Tensor x = f32({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor scale = f32({2}, {1, 2}), bias = f32({2}, {0.5, -1}), mean = f32({2}, {2, 5}), var = f32({2}, {4, 0.25});
  expect_values(run(OpKind::kBatchNormalization, {x, scale, bias, mean, var}), DType::kF32, {1, 2, 2, 2},
                {6.24998828e-07, 0.5, 0.999999375, 1.49999875, -1, 2.99992, 6.99984, 10.99976}, 1e-5);
}

TEST(ReduceFamily, ShapeInferenceErrors) {
  TensorType f23{DType::kF32, {2, 3}}, i23{DType::kI64, {2, 3}}, b23{DType::kBool, {2, 3}};
  std::string e = add_error(OpKind::kReduceSum, {f23}, axes_attrs({1, -1}));
  EXPECT_TRUE(contains(e, "axis -1 appears twice in 'axes'")) << e;
  e = add_error(OpKind::kReduceMean, {f23}, axes_attrs({2}));
  EXPECT_TRUE(contains(e, "axis 2 is out of range for rank 2")) << e;
  EXPECT_TRUE(contains(add_error(OpKind::kReduceMax, {{DType::kF32, {2, 0}}}, axes_attrs({1})),
                       "cannot reduce over dimension 1 of f32[2x0]: it is empty"));
  EXPECT_TRUE(contains(add_error(OpKind::kReduceL2, {i23}), "input must have a floating-point dtype, got i64"));
  EXPECT_TRUE(contains(add_error(OpKind::kArgMax, {b23}), "input must be numeric, got bool"));
  EXPECT_TRUE(contains(add_error(OpKind::kSoftmax, {i23}), "floating-point"));
  EXPECT_TRUE(contains(add_error(OpKind::kSoftmax, {f23}, int_attr("axis", -3)), "axis -3 is out of range"));
  EXPECT_TRUE(contains(add_error(OpKind::kCumSum, {f23}), "required attribute 'axis' is missing"));
  e = add_error(OpKind::kLayerNormalization, {f23, {DType::kF32, {2}}});
  EXPECT_TRUE(contains(e, "Scale of shape 2 does not broadcast to the normalized shape 3")) << e;
  e = add_error(OpKind::kLayerNormalization, {f23, {DType::kF32, {2, 3}}}, int_attr("axis", 1));
  EXPECT_TRUE(contains(e, "Scale of shape 2x3 does not broadcast")) << e;
  e = add_error(OpKind::kLayerNormalization, {f23, {DType::kF32, {3}}}, int_attr("stash_type", 7));
  EXPECT_TRUE(contains(e, "'stash_type' must be a floating-point ONNX type code")) << e;
  TensorType c2{DType::kF32, {2}}, c3{DType::kF32, {3}};
  e = add_error(OpKind::kBatchNormalization, {{DType::kF32, {1, 2, 4, 4}}, c2, c2, c3, c2});
  EXPECT_TRUE(contains(e, "input_mean must have shape 2 (the channels of X), got 3")) << e;
  EXPECT_TRUE(contains(add_error(OpKind::kBatchNormalization, {c2, c2, c2, c2, c2}), "X must have rank 2 or more"));
  EXPECT_EQ(add_error(OpKind::kReduceSum, {i23}, axes_attrs({-2})), "");
}

RefTensor<Zp> zp_tensor(Shape s, std::vector<int64_t> v) {
  RefTensor<Zp> t;
  t.type = {DType::kF32, std::move(s)};
  for (int64_t x : v) t.num.push_back(Zp::from_i64(x));
  return t;
}

TEST(ReduceZp, SumMeanAndSoftmaxAreExact) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3}});
  ValueId sum = g.add(OpKind::kReduceSum, {x}, axes_attrs({1}, 0));
  ValueId mean = g.add(OpKind::kReduceMean, {x}, axes_attrs({1}, 0));
  ValueId sm = g.add(OpKind::kSoftmax, {x});
  ValueId sm_sum = g.add(OpKind::kReduceSum, {sm}, axes_attrs({1}, 0));
  g.set_outputs({sum, mean, sm_sum});
  int64_t big = int64_t{1} << 59;
  std::vector<int64_t> v = {big, big, 5, -1, 2, 7};
  std::vector<RefTensor<Zp>> out = interpret<Zp>(g, {zp_tensor({2, 3}, v)});
  Zp s0 = Zp::from_i64(big) + Zp::from_i64(big) + Zp::from_i64(5);
  EXPECT_EQ(out[0].num[0].v, s0.v);
  EXPECT_EQ(out[0].num[1].v, Zp::from_i64(8).v);
  // mean * 3 == sum exactly, although 8 / 3 is not an integer.
  EXPECT_EQ((out[1].num[1] * Zp::from_i64(3)).v, Zp::from_i64(8).v);
  EXPECT_EQ((out[1].num[0] * Zp::from_i64(3)).v, s0.v);
  // Softmax is u(x_i) * inverse(sum_j u(x_j)): its rows sum to exactly 1.
  EXPECT_EQ(out[2].num[0].v, 1u);
  EXPECT_EQ(out[2].num[1].v, 1u);
}

TEST(ReduceFamily, LinearityAndKernels) {
  Node n{OpKind::kReduceSum, "r", {}, {0}, {1}};
  EXPECT_EQ(op_def(OpKind::kReduceSum).linearity(n).inputs_mask, 1u);
  EXPECT_EQ(op_def(OpKind::kReduceMean).linearity(n).inputs_mask, 1u);
  EXPECT_EQ(op_def(OpKind::kCumSum).linearity(n).inputs_mask, 1u);
  EXPECT_EQ(op_def(OpKind::kReduceMax).linearity, nullptr);
  EXPECT_EQ(op_def(OpKind::kSoftmax).linearity, nullptr);
  EXPECT_EQ(op_def(OpKind::kLayerNormalization).linearity, nullptr);
  for (int k = static_cast<int>(OpKind::kReduceSum); k <= static_cast<int>(OpKind::kBatchNormalization); ++k) {
    const OpDef& d = op_def(static_cast<OpKind>(k));
    SCOPED_TRACE(op_name(d.kind));
    EXPECT_FALSE(d.elementwise());
    EXPECT_NE(d.infer, nullptr);
    EXPECT_NE(d.eval_f32, nullptr);
    EXPECT_NE(d.eval_f64, nullptr);
    EXPECT_NE(d.eval_zp, nullptr);
  }
}

}  // namespace
}  // namespace tessera
