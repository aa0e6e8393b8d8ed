// Tests of the nn op family (graph/ops/nn.cc, graph/ops/conv.cc): exact values
// (computed with ONNX Runtime 1.32 when the tests were written), shape
// inference errors, linearity, and exactness over Z_p.
#include <gtest/gtest.h>

#include <random>

#include "graph/error.h"
#include "graph/graph.h"
#include "graph/interpreter.h"
#include "graph/number.h"
#include "graph/op.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

using test::expect_infer_error;
using test::f32;
using test::make_attrs;

// 0, 1, 2, ... in `shape`, shifted by `offset` and optionally taken mod `mod`.
Tensor iota(Shape shape, double offset = 0, int64_t mod = 0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (mod ? static_cast<double>(static_cast<int64_t>(i) % mod) : i) + offset;
  return f32(std::move(shape), v);
}


using Ints = std::vector<int64_t>;

// Builds a one-node graph over `inputs` (graph inputs; nullopt = omitted) and
// evaluates it in double.
Tensor run_op(OpKind kind, const std::vector<Tensor>& inputs, Attrs attrs) {
  Graph g;
  std::vector<ValueId> ids;
  for (size_t i = 0; i < inputs.size(); ++i) ids.push_back(g.add_input("in" + std::to_string(i), inputs[i].type()));
  g.set_outputs({g.add(kind, ids, std::move(attrs))});
  return evaluate(g, inputs, Precision::kF64).at(0);
}

void expect_values(const Tensor& t, const Shape& shape, const std::vector<double>& want) {
  ASSERT_EQ(t.shape(), shape);
  std::vector<double> got = t.to_doubles();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "at flat index " << i;
}


Attrs conv_attrs(Ints k, Ints s, Ints p, Ints d, int64_t group = 1) {
  return make_attrs({{"kernel_shape", k}, {"strides", s}, {"pads", p}, {"dilations", d}, {"group", group}});
}

TEST(MatMulTest, BatchBroadcast) {
  Tensor y = run_op(OpKind::kMatMul, {iota({2, 1, 2, 3}), iota({2, 3, 2}, -5)}, {});
  expect_values(y, {2, 2, 2, 2}, {-5, -2, -32, -20, 13, 16, 40, 52, -59, -38, -86, -56, 67, 88, 94, 124});
}

TEST(MatMulTest, OneDimensionalOperands) {
  expect_values(run_op(OpKind::kMatMul, {iota({3}, -1), iota({2, 3, 2})}, {}), {2, 2}, {4, 4, 4, 4});
  expect_values(run_op(OpKind::kMatMul, {iota({2, 3}), iota({3}, 1)}, {}), {2}, {8, 26});
  expect_values(run_op(OpKind::kMatMul, {iota({3}, 1), iota({3}, 1)}, {}), {}, {14});
}

TEST(MatMulTest, IntegerStorage) {
  Tensor a = Tensor::from_ints(DType::kI64, {2, 2}, {1, -2, 3, 4});
  Tensor b = Tensor::from_ints(DType::kI64, {2, 1}, {5, 6});
  Tensor y = run_op(OpKind::kMatMul, {a, b}, {});
  EXPECT_EQ(y.dtype(), DType::kI64);
  EXPECT_EQ(y.to_ints(), (Ints{-7, 39}));
}

TEST(MatMulTest, Errors) {
  expect_infer_error(OpKind::kMatMul, {{DType::kF32, {2, 3}}, {DType::kF32, {4, 5}}}, {}, "inner dimensions differ");
  expect_infer_error(OpKind::kMatMul, {{DType::kF32, {2, 2, 3}}, {DType::kF32, {3, 3, 5}}}, {},
                     "batch dimensions of 2x2x3 and 3x3x5 do not broadcast");
  expect_infer_error(OpKind::kMatMul, {{DType::kF32, {}}, {DType::kF32, {3}}}, {}, "rank >= 1");
}

TEST(GemmTest, TransposedWithBroadcastBias) {
  Attrs a = make_attrs({{"alpha", 0.5}, {"beta", 2.0}, {"transA", int64_t{1}}, {"transB", int64_t{1}}});
  Tensor y = run_op(OpKind::kGemm, {iota({3, 2}), iota({4, 3}, -6), f32({4}, {1, 2, 3, 4})}, a);
  expect_values(y, {2, 4}, {-11, 0, 11, 22, -18.5, -3, 12.5, 28});
}

TEST(GemmTest, Errors) {
  expect_infer_error(OpKind::kGemm, {{DType::kF32, {2, 3}}, {DType::kF32, {2, 4}}}, {}, "inner dimensions differ");
  expect_infer_error(OpKind::kGemm, {{DType::kF32, {2, 3}}, {DType::kF32, {3, 4}}, {DType::kF32, {3}}}, {},
                     "does not broadcast to 2x4");
}

TEST(ConvTest, GroupedAndDilated) {
  Tensor y = run_op(OpKind::kConv, {iota({1, 4, 4, 4}, -3, 7), iota({2, 2, 2, 2}, -2, 5)},
                    conv_attrs({2, 2}, {1, 1}, {1, 1, 1, 1}, {2, 2}, 2));
  expect_values(y, {1, 2, 4, 4}, {2, 0, 0, 2, 1, 3, 0, 2, 7, 5, -5, -9, -1, 0, -3, 4,
                                  -1, 0, -3, 4, 2, 0, -13, 7, -5, -3, 12, 4, 4, -5, -1, -3});
}

TEST(ConvTest, StridedWithAsymmetricPadsAndBias) {
  Tensor y = run_op(OpKind::kConv, {iota({1, 1, 5, 4}), iota({1, 1, 3, 3}, -1, 4), f32({1}, {10})},
                    conv_attrs({3, 3}, {2, 2}, {1, 0, 0, 1}, {1, 1}));
  expect_values(y, {1, 1, 2, 2}, {17, 31, 43, 57});
}

TEST(ConvTest, Depthwise) {
  Tensor y = run_op(OpKind::kConv, {iota({1, 3, 3, 3}), iota({3, 1, 2, 2}, -6)},
                    conv_attrs({2, 2}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 3));
  expect_values(y, {1, 3, 2, 2}, {-29, -47, -83, -101, -15, -17, -21, -23, 287, 301, 329, 343});
}

TEST(ConvTest, OneDimensional) {
  Tensor y = run_op(OpKind::kConv, {iota({2, 1, 5}), f32({1, 1, 3}, {1, 0, -1})}, conv_attrs({3}, {1}, {1, 1}, {1}));
  expect_values(y, {2, 1, 5}, {-1, -2, -2, -2, 3, -6, -2, -2, -2, 8});
}

TEST(ConvTest, ThreeDimensionalMatchesSumOfTaps) {
  // A 2x2x2 kernel of ones over a 3x3x3 ramp: each output is the sum of a 2x2x2 cube.
  Tensor y = run_op(OpKind::kConv, {iota({1, 1, 3, 3, 3}), f32({1, 1, 2, 2, 2}, std::vector<double>(8, 1))},
                    conv_attrs({2, 2, 2}, {1, 1, 1}, {0, 0, 0, 0, 0, 0}, {1, 1, 1}));
  // The cube at (a,b,c) sums 8*(9a+3b+c) + 4*(9+3+1).
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) want.push_back(8.0 * (9 * a + 3 * b + c) + 4.0 * (9 + 3 + 1));
  expect_values(y, {1, 1, 2, 2, 2}, want);
}

TEST(ConvTest, Errors) {
  TensorType x{DType::kF32, {1, 4, 5, 5}};
  Attrs a = conv_attrs({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  expect_infer_error(OpKind::kConv, {x, {DType::kF32, {2, 3, 3, 3}}}, a,
                     "X has 4 channels but W 2x3x3x3 with group 1 expects 3");
  expect_infer_error(OpKind::kConv, {x, {DType::kF32, {3, 4, 3, 3}}}, conv_attrs({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 3),
                     "group 3 does not divide the 4 input channels");
  expect_infer_error(OpKind::kConv, {x, {DType::kF32, {2, 4, 3, 2}}}, a, "kernel_shape[1] is 3 but W 2x4x3x2 has 2");
  expect_infer_error(OpKind::kConv, {x, {DType::kF32, {2, 4, 3, 3}}},
                     conv_attrs({3, 3}, {1, 1}, {0, 0, 0, 0}, {3, 3}), "smaller than the dilated kernel 7");
  expect_infer_error(OpKind::kConv, {x, {DType::kF32, {2, 4, 3, 3}}}, conv_attrs({3, 3}, {1, 1}, {0, 0}, {1, 1}),
                     "attribute 'pads' has 2 values, expected 4");
  expect_infer_error(OpKind::kConv, {x, {DType::kF32, {2, 4, 3, 3}}}, conv_attrs({3, 3}, {0, 1}, {0, 0, 0, 0}, {1, 1}),
                     "'strides'[0] is 0, must be >= 1");
  expect_infer_error(OpKind::kConv, {x, {DType::kF32, {2, 4, 3, 3}}, {DType::kF32, {3}}}, a, "bias must be f32[2]");
  expect_infer_error(OpKind::kConv, {{DType::kI64, {1, 4, 5, 5}}, {DType::kI64, {2, 4, 3, 3}}}, a,
                     "must have a floating dtype");
}

TEST(ConvTransposeTest, StrideTwoWithOutputPadding) {
  Attrs a = conv_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1});
  a.set("output_padding", Ints{1, 1});
  Tensor y = run_op(OpKind::kConvTranspose, {iota({1, 1, 2, 2}, 1), iota({1, 2, 3, 3}, -9), f32({2}, {1, -1})}, a);
  expect_values(y, {1, 2, 4, 4}, {-4, -15, -9, -7, -25, -63, -35, -29, -14, -35, -19, -15, -5, -14, -7, -3,
                                  3, 10, 7, 9, 9, 25, 17, 23, 11, 26, 15, 19, 20, 47, 27, 31});
}

TEST(ConvTransposeTest, GroupedDilated) {
  Attrs a = conv_attrs({2}, {1}, {0, 0}, {2}, 2);
  a.set("output_padding", Ints{0});
  Tensor y = run_op(OpKind::kConvTranspose, {iota({1, 2, 3}, 1), iota({2, 1, 2}, -1)}, a);
  expect_values(y, {1, 2, 5}, {-1, -2, -3, 0, 0, 4, 5, 14, 10, 12});
}

TEST(ConvTransposeTest, Errors) {
  Attrs a = conv_attrs({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  a.set("output_padding", Ints{1, 0});
  expect_infer_error(OpKind::kConvTranspose, {{DType::kF32, {1, 2, 4, 4}}, {DType::kF32, {2, 3, 3, 3}}}, a,
                     "output_padding[0] is 1, must be smaller than stride 1 or dilation 1");
  a.set("output_padding", Ints{0, 0});
  expect_infer_error(OpKind::kConvTranspose, {{DType::kF32, {1, 3, 4, 4}}, {DType::kF32, {2, 3, 3, 3}}}, a,
                     "X has 3 channels but W 2x3x3x3 expects 2");
  a.set("pads", Ints{4, 4, 0, 0});
  expect_infer_error(OpKind::kConvTranspose, {{DType::kF32, {1, 2, 2, 2}}, {DType::kF32, {2, 3, 3, 3}}}, a,
                     "output spatial dim 0 would have size 0");
}

Attrs pool_attrs(Ints k, Ints s, Ints p, Ints d, int64_t ceil_mode = 0) {
  return make_attrs({{"kernel_shape", k}, {"strides", s}, {"pads", p}, {"dilations", d}, {"ceil_mode", ceil_mode}});
}

TEST(PoolTest, MaxPoolCeilMode) {
  Tensor y = run_op(OpKind::kMaxPool, {iota({1, 1, 5, 5}, 0, 9)}, pool_attrs({2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1));
  expect_values(y, {1, 1, 3, 3}, {6, 8, 4, 7, 8, 5, 3, 5, 6});
}

TEST(PoolTest, MaxPoolPadsIgnorePadding) {
  // All inputs are <= 0: a padded zero would win if padding took part.
  Tensor x = iota({1, 1, 4, 4});
  std::vector<double> neg = x.to_doubles();
  for (double& v : neg) v = -v;
  Tensor y = run_op(OpKind::kMaxPool, {f32({1, 1, 4, 4}, neg)}, pool_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}));
  expect_values(y, {1, 1, 2, 2}, {0, -1, -4, -5});
}

TEST(PoolTest, CeilModeDropsWindowStartingInRightPadding) {
  // in 5, k 2, s 2, pads 1+1: ceil gives 4 windows, but the 4th starts at 6 >= 5 + 1.
  Tensor y = run_op(OpKind::kMaxPool, {iota({1, 1, 5}, 1)}, pool_attrs({2}, {2}, {1, 1}, {1}, 1));
  expect_values(y, {1, 1, 3}, {1, 3, 5});
}

TEST(PoolTest, AveragePoolCountIncludePad) {
  Attrs a = pool_attrs({2, 2}, {2, 2}, {1, 1, 1, 1}, {1, 1});
  a.set("count_include_pad", int64_t{1});
  expect_values(run_op(OpKind::kAveragePool, {iota({1, 1, 3, 3})}, a), {1, 1, 2, 2}, {0, 0.75, 2.25, 6});
  a.set("count_include_pad", int64_t{0});
  expect_values(run_op(OpKind::kAveragePool, {iota({1, 1, 3, 3})}, a), {1, 1, 2, 2}, {0, 1.5, 4.5, 6});
}

TEST(PoolTest, AveragePoolCeilModeCountsOnlyExplicitPadding) {
  Attrs a = pool_attrs({3}, {2}, {0, 0}, {1}, 1);
  a.set("count_include_pad", int64_t{1});
  expect_values(run_op(OpKind::kAveragePool, {iota({1, 1, 6}, 1)}, a), {1, 1, 3}, {2, 4, 5.5});
  a.set("pads", Ints{1, 1});
  expect_values(run_op(OpKind::kAveragePool, {iota({1, 1, 6}, 1)}, a), {1, 1, 4}, {1, 3, 5, 3});
}

TEST(PoolTest, GlobalPools) {
  expect_values(run_op(OpKind::kGlobalAveragePool, {iota({1, 2, 2, 2})}, {}), {1, 2, 1, 1}, {1.5, 5.5});
  expect_values(run_op(OpKind::kGlobalMaxPool, {iota({1, 2, 2, 2}, 0, 5)}, {}), {1, 2, 1, 1}, {3, 4});
}

TEST(PoolTest, Errors) {
  expect_infer_error(OpKind::kMaxPool, {{DType::kF32, {1, 1, 2, 2}}}, pool_attrs({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}),
                     "smaller than the window 3");
  expect_infer_error(OpKind::kMaxPool, {{DType::kF32, {1, 1, 4}}}, pool_attrs({2}, {1}, {2, 0}, {1}),
                     "covers only padding");
  expect_infer_error(OpKind::kAveragePool, {{DType::kF32, {1, 1, 4}}}, pool_attrs({2, 2}, {1}, {0, 0}, {1}),
                     "attribute 'kernel_shape' has 2 values, expected 1");
  expect_infer_error(OpKind::kGlobalAveragePool, {{DType::kF32, {4, 4}}}, {}, "[N, C, spatial...]");
}

TEST(NnLinearityTest, FollowsBiasAndKind) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 2, 4, 4}});
  ValueId w = g.add_input("w", {DType::kF32, {3, 2, 3, 3}});
  ValueId b = g.add_input("b", {DType::kF32, {3}});
  Attrs a = conv_attrs({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1});
  const Node& plain = g.node(g.add_node(OpKind::kConv, {x, w}, a));
  Linearity lin = op_def(OpKind::kConv).linearity(plain);
  EXPECT_TRUE(lin.separately);
  EXPECT_TRUE(lin.linear_in(0) && lin.linear_in(1));
  const Node& biased = g.node(g.add_node(OpKind::kConv, {x, w, b}, a));
  EXPECT_FALSE(op_def(OpKind::kConv).linearity(biased).any());
  EXPECT_EQ(op_def(OpKind::kMaxPool).linearity, nullptr);
  ValueId m = g.add_input("m", {DType::kF32, {4, 4}});
  const Node& gemm_c = g.node(g.add_node(OpKind::kGemm, {m, m, m}));
  EXPECT_FALSE(op_def(OpKind::kGemm).linearity(gemm_c).any());
  const Node& gemm = g.node(g.add_node(OpKind::kGemm, {m, m}));
  EXPECT_EQ(op_def(OpKind::kGemm).linearity(gemm).inputs_mask, 0b11u);
}

// Random residues spread over all of Z_p, so a wrong index or a lost term
// shows up as a mismatch with overwhelming probability.
RefTensor<Zp> random_zp(Shape shape, std::mt19937_64& rng) {
  RefTensor<Zp> t;
  t.type = {DType::kF32, std::move(shape)};
  for (int64_t i = 0; i < t.numel(); ++i) t.num.push_back(Zp::from_u64(rng()));
  return t;
}

TEST(NnZpTest, MatMulIsExact) {
  std::mt19937_64 rng(7);
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {2, 3, 4}});
  ValueId b = g.add_input("b", {DType::kF32, {4, 5}});
  g.set_outputs({g.add(OpKind::kMatMul, {a, b})});
  RefTensor<Zp> ta = random_zp({2, 3, 4}, rng), tb = random_zp({4, 5}, rng);
  RefTensor<Zp> y = interpret<Zp>(g, {ta, tb}).at(0);
  ASSERT_EQ(y.type.shape, (Shape{2, 3, 5}));
  for (int64_t bt = 0; bt < 2; ++bt)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        Zp want;
        for (int64_t k = 0; k < 4; ++k) want += ta.num[(bt * 3 + i) * 4 + k] * tb.num[k * 5 + j];
        EXPECT_EQ(y.num[(bt * 3 + i) * 5 + j], want);
      }
}

TEST(NnZpTest, ConvIsBilinearAndMatchesIntegers) {
  std::mt19937_64 rng(11);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 4, 5, 5}});
  ValueId w = g.add_input("w", {DType::kF32, {2, 2, 3, 3}});
  g.set_outputs({g.add(OpKind::kConv, {x, w}, conv_attrs({3, 3}, {2, 1}, {1, 0, 1, 2}, {1, 2}, 2))});
  // Linear in x: conv(s*x1 + x2) = s*conv(x1) + conv(x2), exactly.
  RefTensor<Zp> x1 = random_zp({1, 4, 5, 5}, rng), x2 = random_zp({1, 4, 5, 5}, rng), wt = random_zp({2, 2, 3, 3}, rng);
  Zp s = Zp::from_u64(rng());
  RefTensor<Zp> mix = x1;
  for (size_t i = 0; i < mix.num.size(); ++i) mix.num[i] = s * x1.num[i] + x2.num[i];
  RefTensor<Zp> y1 = interpret<Zp>(g, {x1, wt}).at(0), y2 = interpret<Zp>(g, {x2, wt}).at(0);
  RefTensor<Zp> ym = interpret<Zp>(g, {mix, wt}).at(0);
  for (size_t i = 0; i < ym.num.size(); ++i) EXPECT_EQ(ym.num[i], s * y1.num[i] + y2.num[i]);
  // Small signed integers: Z_p agrees with double arithmetic.
  Tensor xi = iota({1, 4, 5, 5}, -40), wi = iota({2, 2, 3, 3}, -17);
  Tensor want = evaluate(g, {xi, wi}, Precision::kF64).at(0);
  RefTensor<Zp> got = interpret<Zp>(g, {to_ref<Zp>(xi), to_ref<Zp>(wi)}).at(0);
  ASSERT_EQ(got.num.size(), static_cast<size_t>(want.numel()));
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_EQ(num_to_int(got.num[i]), want.get_int(i)) << i;
}

}  // namespace
}  // namespace tessera
