// The reference interpreter: 16-bit float rounding, input checking, and
// agreement between its float, double and Z_p evaluations.
#include "graph/interpreter.h"

#include <gtest/gtest.h>

#include <cmath>

#include "graph/error.h"
#include "graph/memory_limit.h"
#include "graph/number.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

Graph add_graph(DType dtype, Shape shape) {
  Graph g;
  ValueId x = g.add_input("x", {dtype, shape});
  ValueId y = g.add_input("y", {dtype, shape});
  g.set_outputs({g.add(OpKind::kAdd, {x, y}, {}, "add")});
  return g;
}

TEST(InterpreterTest, F16ResultsRoundToNearestEven) {
  const double ulp = std::ldexp(1.0, -10);  // f16 spacing at 1.0
  Graph g = add_graph(DType::kF16, {4});
  Tensor x = Tensor::from_doubles(DType::kF16, {4}, {1, 1, 1, 65504});
  Tensor y = Tensor::from_doubles(DType::kF16, {4}, {ulp / 2, 1.5 * ulp, ulp / 4, 65504});
  for (Precision p : {Precision::kF32, Precision::kF64}) {
    std::vector<Tensor> out = evaluate(g, {x, y}, p);
    ASSERT_EQ(out[0].dtype(), DType::kF16);
    EXPECT_EQ(out[0].get_double(0), 1.0);            // tie: stays on the even 1.0
    EXPECT_EQ(out[0].get_double(1), 1.0 + 2 * ulp);  // tie: goes up to the even neighbour
    EXPECT_EQ(out[0].get_double(2), 1.0);
    EXPECT_TRUE(std::isinf(out[0].get_double(3)));  // overflows f16
  }
}

TEST(InterpreterTest, BF16ResultsRoundToNearestEven) {
  const double ulp = std::ldexp(1.0, -7);  // bf16 spacing at 1.0
  Graph g = add_graph(DType::kBF16, {3});
  Tensor x = Tensor::from_doubles(DType::kBF16, {3}, {1, 1, 256});
  Tensor y = Tensor::from_doubles(DType::kBF16, {3}, {ulp / 2, 1.5 * ulp, 1});
  std::vector<Tensor> out = evaluate(g, {x, y});
  EXPECT_EQ(out[0].get_double(0), 1.0);
  EXPECT_EQ(out[0].get_double(1), 1.0 + 2 * ulp);
  EXPECT_EQ(out[0].get_double(2), 256.0);  // 257 is not a bf16; ties to even 256
}

TEST(InterpreterTest, F32GraphInDoubleRoundsEachResultToFloat) {
  Graph g = add_graph(DType::kF32, {1});
  Tensor x = Tensor::from_doubles(DType::kF32, {1}, {1});
  Tensor y = Tensor::from_doubles(DType::kF32, {1}, {std::ldexp(1.0, -30)});
  // 1 + 2^-30 exists in double but not in float: the f32 graph must not see it.
  EXPECT_EQ(evaluate(g, {x, y}, Precision::kF64)[0].get_double(0), 1.0);
  Graph d = add_graph(DType::kF64, {1});
  EXPECT_EQ(evaluate(d, {x.cast(DType::kF64), y.cast(DType::kF64)}, Precision::kF64)[0].get_double(0),
            1.0 + std::ldexp(1.0, -30));
}

using test::error_of;

TEST(InterpreterTest, InputMismatchesAreUsageErrors) {
  Graph g = add_graph(DType::kF32, {2, 2});
  Tensor good(DType::kF32, {2, 2});
  Error count = error_of([&] { evaluate(g, {good}); });
  EXPECT_EQ(count.kind(), ErrorKind::kUsage);
  EXPECT_NE(count.message().find("graph takes 2 inputs, got 1"), std::string::npos) << count.what();

  Error dtype = error_of([&] { evaluate(g, {good, Tensor(DType::kF16, {2, 2})}); });
  EXPECT_EQ(dtype.kind(), ErrorKind::kUsage);
  EXPECT_NE(dtype.message().find("input 'y' must be f32[2x2], got f16[2x2]"), std::string::npos) << dtype.what();

  Error shape = error_of([&] { evaluate(g, {Tensor(DType::kF32, {4}), good}); });
  EXPECT_NE(shape.message().find("input 'x' must be f32[2x2], got f32[4]"), std::string::npos) << shape.what();

  RefTensor<float> short_data;
  short_data.type = {DType::kF32, {2, 2}};
  short_data.num = {1, 2, 3};
  RefTensor<float> ok = to_ref<float>(good);
  Error data = error_of([&] { interpret<float>(g, {ok, short_data}); });
  EXPECT_NE(data.message().find("input 'y' has the wrong amount of data"), std::string::npos) << data.what();
}

// y = Tanh(x @ w + b) ; z = Sigmoid(y) * x2
Graph small_net() {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3}});
  std::vector<double> wv, bv = {0.25, -0.5, 0.125, 1.0};
  for (int i = 0; i < 12; ++i) wv.push_back(std::sin(i * 1.3) * 0.7);
  ValueId w = g.add_constant("w", Tensor::from_doubles(DType::kF32, {3, 4}, wv));
  ValueId b = g.add_constant("b", Tensor::from_doubles(DType::kF32, {4}, bv));
  ValueId h = g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {x, w}), b});
  ValueId y = g.add(OpKind::kTanh, {h});
  ValueId s = g.add(OpKind::kSigmoid, {y});
  ValueId x2 = g.add_input("x2", {DType::kF32, {2, 4}});
  g.set_outputs({y, g.add(OpKind::kMul, {s, x2})});
  return g;
}

TEST(InterpreterTest, FloatAndDoubleEvaluationsAgree) {
  Graph g = small_net();
  Tensor x = Tensor::from_doubles(DType::kF32, {2, 3}, {0.1, -0.7, 1.3, 2.0, -1.1, 0.4});
  Tensor x2 = Tensor::from_doubles(DType::kF32, {2, 4}, {1, -2, 3, -4, 0.5, 0.25, -0.125, 8});
  std::vector<Tensor> f = evaluate(g, {x, x2}, Precision::kF32);
  std::vector<Tensor> d = evaluate(g, {x, x2}, Precision::kF64);
  ASSERT_EQ(f.size(), 2u);
  for (size_t o = 0; o < f.size(); ++o) {
    ASSERT_EQ(f[o].type(), d[o].type());
    for (int64_t i = 0; i < f[o].numel(); ++i) EXPECT_NEAR(f[o].get_double(i), d[o].get_double(i), 1e-6) << o;
  }
  // And both match a hand computation of one element: y[0][0].
  double h = 0.25;
  for (int k = 0; k < 3; ++k) h += x.get_double(k) * std::sin(k * 4 * 1.3) * 0.7;
  EXPECT_NEAR(d[0].get_double(0), std::tanh(h), 1e-6);
}

TEST(InterpreterTest, ZpEvaluationIsExactOnIntegers) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 2}});
  ValueId w = g.add_constant("w", Tensor::from_doubles(DType::kF32, {2, 2}, {1, -2, 3, 4}));
  g.set_outputs({g.add(OpKind::kSub, {g.add(OpKind::kMatMul, {x, w}), x})});
  Tensor in = Tensor::from_doubles(DType::kF32, {2, 2}, {5, 6, -7, 8});
  std::vector<RefTensor<Zp>> out = interpret<Zp>(g, {to_ref<Zp>(in)});
  // [[5,6],[-7,8]] @ [[1,-2],[3,4]] - x = [[23,14],[17,46]] - x
  std::vector<double> expected = {18, 8, 24, 38};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(num_to_double(out[0].num[i]), expected[i]) << i;
}

TEST(InterpreterTest, InputsAndConstantsCanBeOutputs) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kI64, {2}});
  ValueId c = g.add_constant("c", Tensor::vector_i64({7, 8}));
  ValueId s = g.add(OpKind::kAdd, {x, c});
  g.set_outputs({x, c, s, x});
  std::vector<Tensor> out = evaluate(g, {Tensor::vector_i64({1, 2})});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].to_ints(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(out[1].to_ints(), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(out[2].to_ints(), (std::vector<int64_t>{8, 10}));
  EXPECT_EQ(out[3].to_ints(), (std::vector<int64_t>{1, 2}));
}

TEST(InterpreterTest, ValuesReadByLaterNodesSurviveEarlyReaders) {
  // x is read by the first and the last node; the interpreter frees values
  // after their last use, so this catches freeing too early.
  Graph g;
  ValueId x = g.add_input("x", {DType::kF64, {3}});
  ValueId a = g.add(OpKind::kNeg, {x});
  ValueId b = g.add(OpKind::kAbs, {a});
  ValueId c = g.add(OpKind::kMul, {b, x});
  g.set_outputs({c});
  std::vector<Tensor> out =
      evaluate(g, {Tensor::from_doubles(DType::kF64, {3}, {-2, 3, 0.5})}, Precision::kF64);
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{-4, 9, 0.25}));
}

// A weight is converted when its first reader runs and freed after its last:
// a chain of layers needs one layer's weights at a time, not the model's (the
// end-to-end check of a 4 GB model held them all, twice). The memory limit,
// checked against the interpreter's own peak estimate, tells which.
TEST(InterpreterTest, WeightsLiveFromTheirFirstReaderToTheirLast) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 256}});
  std::vector<double> eye(256 * 256, 0.0);
  for (int i = 0; i < 256; ++i) eye[static_cast<size_t>(i * 257)] = 1;
  ValueId h = x;
  for (int layer = 0; layer < 4; ++layer) {
    Tensor w = Tensor::from_doubles(DType::kF32, {256, 256}, eye);
    w.set_double(0, 2);  // each layer doubles element 0
    h = g.add(OpKind::kMatMul, {h, g.add_constant("w" + std::to_string(layer), w)}, {}, "mm" + std::to_string(layer));
  }
  g.set_outputs({h});
  std::vector<double> in(256, 1.0);
  Tensor xt = Tensor::from_doubles(DType::kF32, {1, 256}, in);
  int64_t before = memory_limit();
  set_memory_limit(400 << 10);  // one weight (256 KiB) fits, four (1 MiB) do not
  std::vector<Tensor> out;
  try {
    out = evaluate(g, {xt});
  } catch (...) {
    set_memory_limit(before);
    throw;
  }
  set_memory_limit(before);
  EXPECT_EQ(out[0].get_double(0), 16);
  EXPECT_EQ(out[0].get_double(255), 1);
}

}  // namespace
}  // namespace tessera
