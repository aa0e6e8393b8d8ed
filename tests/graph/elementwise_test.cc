// Elementwise ops (graph/ops/elementwise.cc, elementwise_binary.cc): values
// against numbers computed with numpy, broadcasting, integer semantics, shape
// inference errors, exactness over Z_p, and the linearity each op declares.
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

Tensor boolean(Shape s, std::vector<int64_t> v) { return Tensor::from_ints(DType::kBool, std::move(s), v); }


const Tensor kX = f32({5}, {-2, -0.5, 0, 0.5, 2});

TEST(ElementwiseUnary, SmoothFunctionsMatchNumpy) {
  struct Case {
    OpKind kind;
    std::vector<double> want;
  };
  const Case cases[] = {
      {OpKind::kIdentity, {-2, -0.5, 0, 0.5, 2}},
      {OpKind::kRelu, {0, 0, 0, 0.5, 2}},
      {OpKind::kNeg, {2, 0.5, 0, -0.5, -2}},
      {OpKind::kAbs, {2, 0.5, 0, 0.5, 2}},
      {OpKind::kSign, {-1, -1, 0, 1, 1}},
      {OpKind::kSigmoid, {0.119202922, 0.377540669, 0.5, 0.622459331, 0.880797078}},
      {OpKind::kSoftplus, {0.126928011, 0.474076984, 0.693147181, 0.974076984, 2.12692801}},
      {OpKind::kTanh, {-0.96402758, -0.462117157, 0, 0.462117157, 0.96402758}},
      {OpKind::kErf, {-0.995322265, -0.520499878, 0, 0.520499878, 0.995322265}},
      {OpKind::kGelu, {-0.0455002639, -0.154268769, 0, 0.345731231, 1.95449974}},
      {OpKind::kElu, {-0.864664717, -0.39346934, 0, 0.5, 2}},
      {OpKind::kHardSigmoid, {0.1, 0.4, 0.5, 0.6, 0.9}},
      {OpKind::kHardSwish, {-0.333333333, -0.208333333, 0, 0.291666667, 1.66666667}},
      {OpKind::kExp, {0.135335283, 0.60653066, 1, 1.64872127, 7.3890561}},
      {OpKind::kSin, {-0.909297427, -0.479425539, 0, 0.479425539, 0.909297427}},
      {OpKind::kCos, {-0.416146837, 0.877582562, 1, 0.877582562, -0.416146837}},
      {OpKind::kFloor, {-2, -1, 0, 0, 2}},
      {OpKind::kCeil, {-2, -0, 0, 1, 2}},
      {OpKind::kLeakyRelu, {-0.02, -0.005, 0, 0.5, 2}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(op_name(c.kind));
    expect_values(run(c.kind, {kX}), DType::kF32, {5}, c.want);
  }
}

TEST(ElementwiseUnary, PositiveDomainFunctions) {
  Tensor p = f32({4}, {0.25, 1, 2, 4});
  expect_values(run(OpKind::kSqrt, {p}), DType::kF32, {4}, {0.5, 1, 1.41421356, 2});
  expect_values(run(OpKind::kLog, {p}), DType::kF32, {4}, {-1.38629436, 0, 0.693147181, 1.38629436});
  expect_values(run(OpKind::kReciprocal, {p}), DType::kF32, {4}, {4, 1, 0.5, 0.25});
}

TEST(ElementwiseUnary, AttributesChangeTheResult) {
  Attrs leaky;
  leaky.set("alpha", 0.5);
  expect_values(run(OpKind::kLeakyRelu, {kX}, leaky), DType::kF32, {5}, {-1, -0.25, 0, 0.5, 2});
  Attrs tanh_gelu;
  tanh_gelu.set("approximate", std::string("tanh"));
  expect_values(run(OpKind::kGelu, {kX}, tanh_gelu), DType::kF32, {5},
                {-0.0454023059, -0.15428599, 0, 0.34571401, 1.95459769});
  Attrs hs;
  hs.set("alpha", 0.5);
  hs.set("beta", 0.25);
  expect_values(run(OpKind::kHardSigmoid, {kX}, hs), DType::kF32, {5}, {0, 0, 0.25, 0.5, 1});
  Attrs elu;
  elu.set("alpha", 2.0);
  expect_values(run(OpKind::kElu, {kX}, elu), DType::kF32, {5}, {-1.72932943, -0.78693868, 0, 0.5, 2});
}

TEST(ElementwiseUnary, RoundIsHalfToEven) {
  expect_values(run(OpKind::kRound, {f32({6}, {0.5, 1.5, 2.5, -0.5, -1.5, 2.4})}), DType::kF32, {6},
                {0, 2, 2, -0, -2, 2});
}

TEST(ElementwiseUnary, ClipClampsAndKeepsNaN) {
  Attrs a;
  a.set("min", -1.0);
  a.set("max", 1.5);
  double nan = std::numeric_limits<double>::quiet_NaN();
  expect_values(run(OpKind::kClip, {f32({4}, {-3, 0.5, 7, nan})}, a), DType::kF32, {4}, {-1, 0.5, 1.5, nan});
  // Only max given: no lower bound.
  Attrs only_max;
  only_max.set("max", 0.0);
  expect_values(run(OpKind::kClip, {kX}, only_max), DType::kF32, {5}, {-2, -0.5, 0, 0, 0});
  // min > max: everything becomes max (numpy / ONNX).
  Attrs crossed;
  crossed.set("min", 2.0);
  crossed.set("max", 1.0);
  expect_values(run(OpKind::kClip, {kX}, crossed), DType::kF32, {5}, {1, 1, 1, 1, 1});
  expect_ints(run(OpKind::kClip, {i64({4}, {-9, 0, 3, 9})}, a), DType::kI64, {4}, {-1, 0, 1, 1});
}

TEST(ElementwiseUnary, IsNaNAndIsInfGiveBool) {
  double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = f32({4}, {1, nan, inf, -inf});
  expect_ints(run(OpKind::kIsNaN, {x}), DType::kBool, {4}, {0, 1, 0, 0});
  expect_ints(run(OpKind::kIsInf, {x}), DType::kBool, {4}, {0, 0, 1, 1});
  Attrs neg_only;
  neg_only.set("detect_positive", int64_t{0});
  expect_ints(run(OpKind::kIsInf, {x}, neg_only), DType::kBool, {4}, {0, 0, 0, 1});
}

TEST(ElementwiseUnary, IntegerInputs) {
  Tensor x = i64({5}, {-7, -1, 0, 1, 7});
  expect_ints(run(OpKind::kNeg, {x}), DType::kI64, {5}, {7, 1, 0, -1, -7});
  expect_ints(run(OpKind::kAbs, {x}), DType::kI64, {5}, {7, 1, 0, 1, 7});
  expect_ints(run(OpKind::kRelu, {x}), DType::kI64, {5}, {0, 0, 0, 1, 7});
  expect_ints(run(OpKind::kSign, {x}), DType::kI64, {5}, {-1, -1, 0, 1, 1});
  expect_ints(run(OpKind::kIdentity, {x}), DType::kI64, {5}, {-7, -1, 0, 1, 7});
  // -(-128) does not fit in i8 and wraps, as two's complement does.
  Tensor i8 = Tensor::from_ints(DType::kI8, {2}, {-128, 5});
  expect_ints(run(OpKind::kNeg, {i8}), DType::kI8, {2}, {-128, -5});
  expect_ints(run(OpKind::kNot, {boolean({3}, {1, 0, 1})}), DType::kBool, {3}, {0, 1, 0});
}

TEST(ElementwiseUnary, CastBetweenDtypes) {
  Attrs to_i64;
  to_i64.set("to", std::string("i64"));
  expect_ints(run(OpKind::kCast, {f32({4}, {-1.7, 2.9, 0.2, -0.2})}, to_i64), DType::kI64, {4}, {-1, 2, 0, 0});
  Attrs to_f32;
  to_f32.set("to", std::string("f32"));
  expect_values(run(OpKind::kCast, {i64({2}, {-3, 1 << 20})}, to_f32), DType::kF32, {2}, {-3, 1048576});
  Attrs to_bool;
  to_bool.set("to", std::string("bool"));
  expect_ints(run(OpKind::kCast, {f32({3}, {0, -0.5, 3})}, to_bool), DType::kBool, {3}, {0, 1, 1});
  Attrs to_u8;
  to_u8.set("to", std::string("u8"));
  expect_ints(run(OpKind::kCast, {i64({3}, {300, -1, 7})}, to_u8), DType::kU8, {3}, {44, 255, 7});
  // f64 -> f32 rounds to the nearest float.
  Tensor d = Tensor::from_doubles(DType::kF64, {1}, {1.0 + 1e-12});
  EXPECT_EQ(run(OpKind::kCast, {d}, to_f32).get_double(0), 1.0);
}

TEST(ElementwiseUnary, ShapeInferenceErrors) {
  TensorType f{DType::kF32, {2}}, i{DType::kI64, {2}}, b{DType::kBool, {2}};
  EXPECT_TRUE(contains(add_error(OpKind::kExp, {i}), "input must have a floating-point dtype, got i64"));
  EXPECT_TRUE(contains(add_error(OpKind::kExp, {i}), "node 'n' (Exp)"));
  EXPECT_TRUE(contains(add_error(OpKind::kRelu, {b}), "input must be numeric, got bool"));
  EXPECT_TRUE(contains(add_error(OpKind::kNot, {f}), "input must be bool, got f32"));
  Attrs bad_gelu;
  bad_gelu.set("approximate", std::string("fast"));
  EXPECT_TRUE(contains(add_error(OpKind::kGelu, {f}, bad_gelu), "'approximate' must be \"none\" or \"tanh\""));
  Attrs bad_cast;
  bad_cast.set("to", std::string("float128"));
  EXPECT_TRUE(contains(add_error(OpKind::kCast, {f}, bad_cast), "unknown dtype 'float128'"));
  EXPECT_TRUE(contains(add_error(OpKind::kCast, {f}), "required attribute 'to' is missing"));
  EXPECT_TRUE(contains(add_error(OpKind::kRelu, {f, f}), "takes 1 inputs, got 2"));
  EXPECT_EQ(add_error(OpKind::kRelu, {f}), "");
}

TEST(ElementwiseBinary, BroadcastArithmetic) {
  Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor row = f32({3}, {10, 20, 30});
  expect_values(run(OpKind::kAdd, {a, row}), DType::kF32, {2, 3}, {11, 22, 33, 14, 25, 36});
  expect_values(run(OpKind::kMul, {a, row}), DType::kF32, {2, 3}, {10, 40, 90, 40, 100, 180});
  Tensor col = f32({2, 1}, {1, 2});
  expect_values(run(OpKind::kSub, {col, row}), DType::kF32, {2, 3}, {-9, -19, -29, -8, -18, -28});
  expect_values(run(OpKind::kDiv, {a, col}), DType::kF32, {2, 3}, {1, 2, 3, 2, 2.5, 3});
  expect_values(run(OpKind::kPow, {a, f32({}, {2})}), DType::kF32, {2, 3}, {1, 4, 9, 16, 25, 36});
  expect_values(run(OpKind::kMax, {a, f32({1, 3}, {2, 2, 7})}), DType::kF32, {2, 3}, {2, 2, 7, 4, 5, 7});
  expect_values(run(OpKind::kMin, {a, f32({1, 3}, {2, 2, 7})}), DType::kF32, {2, 3}, {1, 2, 3, 2, 2, 6});
}

TEST(ElementwiseBinary, MaxMinPropagateNaN) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = f32({2}, {nan, 1}), b = f32({2}, {1, nan});
  expect_values(run(OpKind::kMax, {a, b}), DType::kF32, {2}, {nan, nan});
  expect_values(run(OpKind::kMin, {a, b}), DType::kF32, {2}, {nan, nan});
}

TEST(ElementwiseBinary, PowWithIntegerExponent) {
  expect_values(run(OpKind::kPow, {f32({3}, {2, 3, 0.5}), i64({3}, {3, 2, -1})}), DType::kF32, {3}, {8, 9, 2});
  expect_ints(run(OpKind::kPow, {i64({4}, {2, -3, 1, 5}), i64({4}, {10, 3, -4, -1})}), DType::kI64, {4},
              {1024, -27, 1, 0});
}

TEST(ElementwiseBinary, IntegerDivisionTruncatesTowardZero) {
  Tensor a = i64({4}, {7, -7, 7, -7}), b = i64({4}, {2, 2, -2, -2});
  expect_ints(run(OpKind::kDiv, {a, b}), DType::kI64, {4}, {3, -3, -3, 3});
}

TEST(ElementwiseBinary, ModFollowsDivisorUnlessFmod) {
  Tensor a = i64({4}, {7, -7, 7, -7}), b = i64({4}, {3, 3, -3, -3});
  expect_ints(run(OpKind::kMod, {a, b}), DType::kI64, {4}, {1, 2, -2, -1});
  Attrs fmod;
  fmod.set("fmod", int64_t{1});
  expect_ints(run(OpKind::kMod, {a, b}, fmod), DType::kI64, {4}, {1, -1, 1, -1});
  expect_values(run(OpKind::kMod, {f32({2}, {5.5, -5.5}), f32({2}, {2, 2})}, fmod), DType::kF32, {2}, {1.5, -1.5});
  // fmod=0 on floats is floor modulo: the result takes the divisor's sign.
  expect_values(run(OpKind::kMod, {f32({4}, {5.5, -5.5, 5.5, -5.5}), f32({4}, {2, 2, -2, -2})}), DType::kF32, {4},
                {1.5, 0.5, -0.5, -1.5});
}

TEST(ElementwiseBinary, IntegerArithmeticWrapsToDtype) {
  Tensor a = Tensor::from_ints(DType::kI8, {2}, {100, -100});
  expect_ints(run(OpKind::kAdd, {a, a}), DType::kI8, {2}, {-56, 56});
  Tensor big = i64({1}, {std::numeric_limits<int64_t>::max()});
  expect_ints(run(OpKind::kAdd, {big, i64({1}, {1})}), DType::kI64, {1}, {std::numeric_limits<int64_t>::min()});
  expect_ints(run(OpKind::kMax, {i64({3}, {1, 5, -2}), i64({1}, {2})}), DType::kI64, {3}, {2, 5, 2});
  expect_ints(run(OpKind::kSub, {i64({2}, {1, 5}), i64({2}, {3, 3})}), DType::kI64, {2}, {-2, 2});
  expect_ints(run(OpKind::kMul, {i64({2}, {-4, 5}), i64({2}, {3, 3})}), DType::kI64, {2}, {-12, 15});
}

TEST(ElementwiseBinary, IntegerDivisionByZeroIsAnError) {
  try {
    run(OpKind::kDiv, {i64({2}, {1, 2}), i64({2}, {1, 0})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "integer division by zero")) << e.what();
    EXPECT_TRUE(contains(e.what(), "(Div)")) << e.what();
  }
  EXPECT_THROW(run(OpKind::kMod, {i64({1}, {1}), i64({1}, {0})}), Error);
}

TEST(ElementwiseBinary, ComparisonsGiveBool) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = f32({4}, {1, 2, 3, nan}), b = f32({1}, {2});
  expect_ints(run(OpKind::kEqual, {a, b}), DType::kBool, {4}, {0, 1, 0, 0});
  expect_ints(run(OpKind::kLess, {a, b}), DType::kBool, {4}, {1, 0, 0, 0});
  expect_ints(run(OpKind::kLessOrEqual, {a, b}), DType::kBool, {4}, {1, 1, 0, 0});
  expect_ints(run(OpKind::kGreater, {a, b}), DType::kBool, {4}, {0, 0, 1, 0});
  expect_ints(run(OpKind::kGreaterOrEqual, {a, b}), DType::kBool, {4}, {0, 1, 1, 0});
  Tensor ia = i64({3}, {-1, 4, 9}), ib = i64({3}, {4, 4, 4});
  expect_ints(run(OpKind::kLess, {ia, ib}), DType::kBool, {3}, {1, 0, 0});
  expect_ints(run(OpKind::kGreaterOrEqual, {ia, ib}), DType::kBool, {3}, {0, 1, 1});
  expect_ints(run(OpKind::kEqual, {ia, ib}), DType::kBool, {3}, {0, 1, 0});
}

TEST(ElementwiseBinary, LogicOnBool) {
  Tensor a = boolean({2, 2}, {0, 0, 1, 1}), b = boolean({2}, {0, 1});
  expect_ints(run(OpKind::kAnd, {a, b}), DType::kBool, {2, 2}, {0, 0, 0, 1});
  expect_ints(run(OpKind::kOr, {a, b}), DType::kBool, {2, 2}, {0, 1, 1, 1});
  expect_ints(run(OpKind::kXor, {a, b}), DType::kBool, {2, 2}, {0, 1, 1, 0});
}

TEST(ElementwiseBinary, WhereBroadcastsAllThree) {
  Tensor cond = boolean({2, 1}, {1, 0});
  Tensor x = f32({3}, {1, 2, 3});
  Tensor y = f32({}, {-1});
  expect_values(run(OpKind::kWhere, {cond, x, y}), DType::kF32, {2, 3}, {1, 2, 3, -1, -1, -1});
  expect_ints(run(OpKind::kWhere, {boolean({2}, {0, 1}), i64({2}, {5, 6}), i64({2}, {7, 8})}), DType::kI64, {2},
              {7, 6});
}

TEST(ElementwiseBinary, ShapeInferenceErrors) {
  TensorType f23{DType::kF32, {2, 3}}, f4{DType::kF32, {4}}, i23{DType::kI64, {2, 3}}, b23{DType::kBool, {2, 3}};
  std::string e = add_error(OpKind::kAdd, {f23, f4});
  EXPECT_TRUE(contains(e, "shapes 2x3 and 4 do not broadcast")) << e;
  e = add_error(OpKind::kMul, {f23, i23});
  EXPECT_TRUE(contains(e, "inputs have different dtypes f32 and i64")) << e;
  EXPECT_TRUE(contains(add_error(OpKind::kAnd, {f23, f23}), "inputs must be bool, got f32"));
  EXPECT_TRUE(contains(add_error(OpKind::kAdd, {b23, b23}), "inputs must be numeric, got bool"));
  EXPECT_TRUE(contains(add_error(OpKind::kWhere, {f23, f23, f23}), "condition must be bool, got f32"));
  EXPECT_TRUE(contains(add_error(OpKind::kWhere, {b23, f23, i23}), "different dtypes f32 and i64"));
  EXPECT_TRUE(contains(add_error(OpKind::kAdd, {f23}), "takes 2 inputs, got 1"));
  EXPECT_EQ(add_error(OpKind::kEqual, {i23, i23}), "");
}

RefTensor<Zp> zp_tensor(Shape s, std::vector<int64_t> v) {
  RefTensor<Zp> t;
  t.type = {DType::kF32, std::move(s)};
  for (int64_t x : v) t.num.push_back(Zp::from_i64(x));
  return t;
}

TEST(ElementwiseZp, FieldOpsAreExact) {
  // a * b + a - b and ((a * b + a - b) / b) * b over Z_p; (2^40 + 3)(2^40 - 1)
  // needs 81 bits, so only modular arithmetic gets it exactly.
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {3}});
  ValueId b = g.add_input("b", {DType::kF32, {3}});
  ValueId ab = g.add(OpKind::kMul, {a, b});
  ValueId sum = g.add(OpKind::kSub, {g.add(OpKind::kAdd, {ab, a}), b});
  ValueId q = g.add(OpKind::kDiv, {sum, b});
  ValueId back = g.add(OpKind::kMul, {q, b});
  ValueId neg = g.add(OpKind::kNeg, {a});
  g.set_outputs({sum, back, neg});
  int64_t big = int64_t{1} << 40;
  std::vector<int64_t> av = {big + 3, -5, 7}, bv = {big - 1, 11, -13};
  std::vector<RefTensor<Zp>> out = interpret<Zp>(g, {zp_tensor({3}, av), zp_tensor({3}, bv)});
  for (size_t i = 0; i < 3; ++i) {
    Zp za = Zp::from_i64(av[i]), zb = Zp::from_i64(bv[i]);
    Zp want = za * zb + za - zb;
    EXPECT_EQ(out[0].num[i].v, want.v);
    EXPECT_EQ(out[1].num[i].v, want.v) << "division is exact: (s / b) * b == s";
    EXPECT_EQ(out[2].num[i].v, (-za).v);
  }
}

TEST(ElementwiseZp, NonPolynomialOpsAreDeterministicFunctions) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {3}});
  Attrs leaky;
  leaky.set("alpha", 0.1);
  Attrs leaky2;
  leaky2.set("alpha", 0.2);
  g.set_outputs({g.add(OpKind::kTanh, {x}), g.add(OpKind::kLeakyRelu, {x}, leaky),
                 g.add(OpKind::kLeakyRelu, {x}, leaky2)});
  std::vector<RefTensor<Zp>> out = interpret<Zp>(g, {zp_tensor({3}, {4, 9, 4})});
  // Equal arguments give equal results; different attributes differ.
  EXPECT_EQ(out[0].num[0].v, out[0].num[2].v);
  EXPECT_NE(out[0].num[0].v, out[0].num[1].v);
  EXPECT_EQ(out[1].num[0].v, out[1].num[2].v);
  EXPECT_NE(out[1].num[0].v, out[2].num[0].v);
}

TEST(ElementwiseOps, LinearityAndFlags) {
  Node add{OpKind::kAdd, "add", {}, {0, 1}, {2}};
  Linearity l = op_def(OpKind::kAdd).linearity(add);
  EXPECT_EQ(l.inputs_mask, 0b11u);
  EXPECT_FALSE(l.separately);
  Node mul{OpKind::kMul, "mul", {}, {0, 1}, {2}};
  l = op_def(OpKind::kMul).linearity(mul);
  EXPECT_EQ(l.inputs_mask, 0b11u);
  EXPECT_TRUE(l.separately);
  Node div{OpKind::kDiv, "div", {}, {0, 1}, {2}};
  EXPECT_EQ(op_def(OpKind::kDiv).linearity(div).inputs_mask, 0b01u);
  Node where{OpKind::kWhere, "w", {}, {0, 1, 2}, {3}};
  EXPECT_EQ(op_def(OpKind::kWhere).linearity(where).inputs_mask, 0b110u);
  EXPECT_EQ(op_def(OpKind::kRelu).linearity, nullptr);
  EXPECT_EQ(op_def(OpKind::kMax).linearity, nullptr);
  Node cast{OpKind::kCast, "c", {}, {0}, {1}};
  cast.attrs.set("to", std::string("f64"));
  EXPECT_TRUE(op_def(OpKind::kCast).linearity(cast).linear_in(0));
  cast.attrs.set("to", std::string("i32"));
  EXPECT_FALSE(op_def(OpKind::kCast).linearity(cast).any());
  for (int k = static_cast<int>(OpKind::kIdentity); k <= static_cast<int>(OpKind::kWhere); ++k) {
    const OpDef& d = op_def(static_cast<OpKind>(k));
    SCOPED_TRACE(op_name(d.kind));
    EXPECT_TRUE(d.elementwise());
    EXPECT_NE(d.infer, nullptr);
    EXPECT_NE(d.eval_f32, nullptr);
    EXPECT_NE(d.eval_f64, nullptr);
    EXPECT_NE(d.eval_zp, nullptr);
  }
}

}  // namespace
}  // namespace tessera
