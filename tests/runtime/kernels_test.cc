// Each CPU kernel against the reference interpreter on small random graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using testing::attrs;
using testing::expect_matches_reference;
using testing::Ints;
using testing::kernel_ops;
using testing::random_tensor;

struct ConvCase {
  Shape x;          // N, C, spatial...
  int64_t out_channels;
  Ints kernel, strides, pads, dilations;
  int64_t group;
  bool bias;
};

Graph conv_graph(const ConvCase& c) {
  std::mt19937 rng(3);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, c.x});
  Shape ws = {c.out_channels, c.x[1] / c.group};
  ws.insert(ws.end(), c.kernel.begin(), c.kernel.end());
  std::vector<ValueId> ins = {x, g.add_constant("w", random_tensor(DType::kF32, ws, rng))};
  if (c.bias) ins.push_back(g.add_constant("b", random_tensor(DType::kF32, {c.out_channels}, rng)));
  ValueId y = g.add(OpKind::kConv, ins,
                    attrs({{"kernel_shape", c.kernel}, {"strides", c.strides}, {"pads", c.pads},
                           {"dilations", c.dilations}, {"group", c.group}}));
  g.set_outputs({y});
  return g;
}

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, MatchesReference) { expect_matches_reference(conv_graph(GetParam())); }

INSTANTIATE_TEST_SUITE_P(
    Forms, ConvTest,
    ::testing::Values(ConvCase{{1, 3, 9, 9}, 8, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true},    // plain
                      ConvCase{{2, 4, 10, 7}, 6, {3, 2}, {2, 1}, {0, 1, 1, 0}, {1, 1}, 1, false},  // stride, asym pads
                      ConvCase{{1, 8, 12, 12}, 8, {3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 1, true},  // dilation
                      ConvCase{{1, 8, 8, 8}, 12, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 4, true},   // groups
                      ConvCase{{1, 16, 9, 9}, 16, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 16, true}, // depthwise
                      ConvCase{{1, 32, 7, 7}, 64, {1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, false}, // pointwise
                      ConvCase{{2, 3, 20}, 5, {4}, {3}, {1, 2}, {2}, 1, true},                    // 1-D
                      ConvCase{{1, 2, 5, 6, 7}, 4, {3, 3, 2}, {1, 2, 1}, {1, 0, 1, 1, 1, 0}, {1, 1, 1}, 2,
                               true}));  // 3-D, grouped

// conv + bias + residual add + relu, and conv + relu feeding a conv: fused
// into the convolutions, still matching the reference.
// A 3x3 convolution (pads 1) of x with a random weight and bias, named
// w<tag>/b<tag>: cin -> cout channels.
ValueId conv3x3_bias(Graph& g, ValueId x, int64_t cin, int64_t cout, std::mt19937& rng, const std::string& tag) {
  Attrs a = attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}},
                   {"dilations", Ints{1, 1}}});
  return g.add(OpKind::kConv, {x, g.add_constant("w" + tag, random_tensor(DType::kF32, {cout, cin, 3, 3}, rng)),
                               g.add_constant("b" + tag, random_tensor(DType::kF32, {cout}, rng))}, a);
}

TEST(FusionTest, ConvAddReluIsOneKernel) {
  std::mt19937 rng(5);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 16, 8, 8}});
  ValueId r1 = g.add(OpKind::kRelu, {conv3x3_bias(g, x, 16, 16, rng, "1")});
  ValueId c2 = conv3x3_bias(g, r1, 16, 16, rng, "2");
  ValueId s = g.add(OpKind::kAdd, {c2, x});
  ValueId y = g.add(OpKind::kRelu, {s});
  g.set_outputs({y});
  expect_matches_reference(g);
  std::vector<std::string> ops = kernel_ops(g);
  EXPECT_NE(std::find(ops.begin(), ops.end(), "Conv+Relu"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "Conv+Add+Relu"), ops.end());
  RunOptions unfused;
  unfused.fuse = false;
  expect_matches_reference(g, unfused);
  EXPECT_GT(kernel_ops(g, unfused).size(), ops.size());
}

// y = b + conv(b), b = relu(conv(x)): the residual operand is the second
// convolution's own source, so dst cannot take its buffer (the convolution
// would read what it is overwriting). A ResNet-style block as
// torch.onnx.export writes it with its batch norms folded.
TEST(FusionTest, ConvAddOfItsOwnSourceKeepsTheSource) {
  std::mt19937 rng(8);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3, 8, 8}});
  ValueId b = g.add(OpKind::kRelu, {conv3x3_bias(g, x, 3, 16, rng, "1")});
  ValueId c2 = conv3x3_bias(g, b, 16, 16, rng, "2");
  ValueId y = g.add(OpKind::kAdd, {b, g.add(OpKind::kRelu, {c2})});
  g.set_outputs({y});
  expect_matches_reference(g);
  RunOptions one;
  one.threads = 1;
  expect_matches_reference(g, one);
}

TEST(FusionTest, MatMulBiasGelu) {
  std::mt19937 rng(6);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 5, 32}});
  ValueId m = g.add(OpKind::kMatMul, {x, g.add_constant("w", random_tensor(DType::kF32, {32, 48}, rng))});
  ValueId b = g.add(OpKind::kAdd, {m, g.add_constant("b", random_tensor(DType::kF32, {48}, rng))});
  ValueId y = g.add(OpKind::kGelu, {b});
  g.set_outputs({y});
  expect_matches_reference(g);
  std::vector<std::string> ops = kernel_ops(g);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0], "MatMul+Add+Gelu");
}

// A per-column bias after a product is the primitive's bias argument
// (make_matmul): as the chain's first link in either operand order, of any
// rank that broadcasts to one row, constant or an input; an Add after
// another link, or of a per-row operand, stays a post-op. Each against the
// reference interpreter.
TEST(FusionTest, ColumnBiasAfterAProduct) {
  struct Case {
    Shape x, bias;
    bool bias_first, constant, relu_first;
    bool fused = true;  // oneDNN's matmul has no JIT form for a per-row operand
  };
  for (const Case& c : {Case{{6, 32}, {48}, false, true, false}, Case{{6, 32}, {48}, true, false, false},
                        Case{{2, 5, 32}, {1, 1, 48}, false, false, false}, Case{{2, 5, 32}, {48}, true, true, false},
                        Case{{6, 32}, {48}, false, true, true}, Case{{6, 32}, {6, 1}, false, true, false, false}}) {
    std::mt19937 rng(21);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, c.x});
    ValueId m = g.add(OpKind::kMatMul, {x, g.add_constant("w", random_tensor(DType::kF32, {32, 48}, rng))});
    if (c.relu_first) m = g.add(OpKind::kRelu, {m});
    ValueId b = c.constant ? g.add_constant("b", random_tensor(DType::kF32, c.bias, rng))
                           : g.add_input("b", {DType::kF32, c.bias});
    ValueId y = g.add(OpKind::kAdd, c.bias_first ? std::vector<ValueId>{b, m} : std::vector<ValueId>{m, b});
    g.set_outputs({g.add(OpKind::kSigmoid, {y})});
    expect_matches_reference(g);
    if (c.fused) EXPECT_EQ(kernel_ops(g).size(), 1u) << shape_str(c.x) << " + " << shape_str(c.bias);
  }
}

struct MatMulCase {
  Shape a, b;
  bool b_constant;
};

// PyTorch's export of Gelu (Div, Erf, Add, Mul, Mul) after a matmul and its
// bias is one kernel with oneDNN's gelu_erf post-op; a pattern whose x has a
// third reader is left alone.
TEST(FusionTest, ErfGeluPatternBecomesOnePostOp) {
  std::mt19937 rng(8);
  for (bool extra_reader : {false, true}) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {8, 32}});
    ValueId w = g.add_constant("w", random_tensor(DType::kF32, {32, 48}, rng));
    ValueId b = g.add_constant("b", random_tensor(DType::kF32, {48}, rng));
    ValueId h = g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {x, w}), b});
    auto scalar = [&](const char* name, double v) { return g.add_constant(name, Tensor::from_doubles(DType::kF32, {}, {v})); };
    ValueId e = g.add(OpKind::kErf, {g.add(OpKind::kDiv, {h, scalar("sqrt2", std::sqrt(2.0))})});
    ValueId m = g.add(OpKind::kMul, {h, g.add(OpKind::kAdd, {e, scalar("one", 1.0)})});
    ValueId y = g.add(OpKind::kMul, {m, scalar("half", 0.5)});
    g.set_outputs(extra_reader ? std::vector<ValueId>{y, h} : std::vector<ValueId>{y});
    expect_matches_reference(g);
    std::vector<std::string> ops = kernel_ops(g);
    bool fused = std::find(ops.begin(), ops.end(), "MatMul+Add+Gelu") != ops.end();
    EXPECT_EQ(fused, !extra_reader) << ::testing::PrintToString(ops);
  }
}

class MatMulTest : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(MatMulTest, MatchesReference) {
  const MatMulCase& c = GetParam();
  std::mt19937 rng(8);
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, c.a});
  ValueId b = c.b_constant ? g.add_constant("b", random_tensor(DType::kF32, c.b, rng))
                           : g.add_input("b", {DType::kF32, c.b});
  g.set_outputs({g.add(OpKind::kMatMul, {a, b})});
  expect_matches_reference(g);
}

INSTANTIATE_TEST_SUITE_P(Broadcast, MatMulTest,
                         ::testing::Values(MatMulCase{{4, 5}, {5, 6}, true}, MatMulCase{{2, 3, 4, 5}, {5, 6}, true},
                                           MatMulCase{{5}, {5, 6}, false}, MatMulCase{{3, 4}, {4}, false},
                                           MatMulCase{{2, 1, 4, 5}, {3, 5, 6}, false},
                                           MatMulCase{{3, 4, 5}, {3, 5, 2}, false},
                                           MatMulCase{{6}, {2, 6, 3}, false}));

struct GemmCase {
  int64_t trans_a, trans_b;
  double alpha, beta;
  Shape c;  // empty: no C
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, MatchesReference) {
  const GemmCase& p = GetParam();
  std::mt19937 rng(9);
  int64_t m = 4, k = 6, n = 5;
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, p.trans_a ? Shape{k, m} : Shape{m, k}});
  std::vector<ValueId> ins = {a, g.add_constant("b", random_tensor(DType::kF32, p.trans_b ? Shape{n, k} : Shape{k, n}, rng))};
  if (!p.c.empty() || p.beta != 1.0) ins.push_back(g.add_constant("c", random_tensor(DType::kF32, p.c, rng)));
  g.set_outputs({g.add(OpKind::kGemm, ins,
                       attrs({{"transA", p.trans_a}, {"transB", p.trans_b}, {"alpha", p.alpha}, {"beta", p.beta}}))});
  expect_matches_reference(g);
}

INSTANTIATE_TEST_SUITE_P(Forms, GemmTest,
                         ::testing::Values(GemmCase{0, 0, 1.0, 1.0, {5}}, GemmCase{1, 0, 1.0, 1.0, {4, 5}},
                                           GemmCase{0, 1, 0.5, 1.0, {1, 5}}, GemmCase{1, 1, 2.0, 1.0, {}},
                                           GemmCase{0, 1, 1.0, 0.25, {4, 1}}, GemmCase{0, 0, 1.0, 1.0, {}}));

struct PoolCase {
  OpKind kind;
  Shape x;
  Ints kernel, strides, pads, dilations;
  int64_t ceil_mode, count_include_pad;
};

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, MatchesReference) {
  const PoolCase& p = GetParam();
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, p.x});
  Attrs a = attrs({{"kernel_shape", p.kernel}, {"strides", p.strides}, {"pads", p.pads}, {"dilations", p.dilations},
                   {"ceil_mode", p.ceil_mode}});
  if (p.kind == OpKind::kAveragePool) a.set("count_include_pad", p.count_include_pad);
  g.set_outputs({g.add(p.kind, {x}, a)});
  expect_matches_reference(g);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, PoolTest,
    ::testing::Values(PoolCase{OpKind::kMaxPool, {1, 3, 8, 8}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, 0},
                      PoolCase{OpKind::kMaxPool, {2, 4, 9, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, 0},
                      PoolCase{OpKind::kMaxPool, {1, 2, 10, 10}, {2, 2}, {1, 1}, {0, 0, 0, 0}, {2, 2}, 0, 0},
                      PoolCase{OpKind::kAveragePool, {1, 3, 7, 7}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 0},
                      PoolCase{OpKind::kAveragePool, {1, 3, 7, 7}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 1},
                      PoolCase{OpKind::kAveragePool, {1, 3, 8, 8}, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1, 0},
                      PoolCase{OpKind::kMaxPool, {1, 2, 11}, {3}, {2}, {1, 0}, {1}, 1, 0}));

TEST(PoolTest, GlobalPools) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 5, 6, 7}});
  g.set_outputs({g.add(OpKind::kGlobalAveragePool, {x}), g.add(OpKind::kGlobalMaxPool, {x})});
  expect_matches_reference(g);
}

class SoftmaxTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(SoftmaxTest, BothKindsOnEveryAxis) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {3, 4, 5}});
  g.set_outputs({g.add(OpKind::kSoftmax, {x}, attrs({{"axis", GetParam()}})),
                 g.add(OpKind::kLogSoftmax, {x}, attrs({{"axis", GetParam()}}))});
  expect_matches_reference(g);
}

INSTANTIATE_TEST_SUITE_P(Axes, SoftmaxTest, ::testing::Values(-1, 0, 1, 2));

TEST(NormTest, LayerNormalizationLastAndMiddleAxis) {
  std::mt19937 rng(10);
  for (int64_t axis : {-1, 1}) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {2, 3, 8}});
    Shape ps = axis == -1 ? Shape{8} : Shape{3, 8};
    ValueId y = g.add(OpKind::kLayerNormalization,
                      {x, g.add_constant("s", random_tensor(DType::kF32, ps, rng)),
                       g.add_constant("b", random_tensor(DType::kF32, ps, rng))},
                      attrs({{"axis", axis}, {"epsilon", 1e-5}}));
    g.set_outputs({y});
    expect_matches_reference(g);
  }
}

TEST(NormTest, BatchNormalizationAfterConvKeepsBlockedLayout) {
  std::mt19937 rng(11);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 16, 6, 6}});
  ValueId c = g.add(OpKind::kConv, {x, g.add_constant("w", random_tensor(DType::kF32, {16, 16, 1, 1}, rng))},
                    attrs({{"kernel_shape", Ints{1, 1}}, {"strides", Ints{1, 1}}, {"pads", Ints{0, 0, 0, 0}},
                           {"dilations", Ints{1, 1}}}));
  auto vec = [&](const char* name, double lo) {
    Tensor t = random_tensor(DType::kF32, {16}, rng);
    for (int64_t i = 0; i < 16; ++i) t.set_double(i, std::fabs(t.get_double(i)) + lo);
    return g.add_constant(name, t);
  };
  ValueId bn = g.add(OpKind::kBatchNormalization, {c, vec("s", 0.5), vec("b", 0), vec("m", 0), vec("v", 0.5)});
  ValueId p = g.add(OpKind::kMaxPool, {bn}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}},
                                                  {"pads", Ints{0, 0, 0, 0}}, {"dilations", Ints{1, 1}}}));
  g.set_outputs({g.add(OpKind::kFlatten, {p})});
  expect_matches_reference(g);
}

// DenseNet's pre-activation: a batch normalization of a concatenation (no
// convolution before it to fold into) and its Relu are one kernel, in the
// concatenation's blocked layout; a BN whose result has a second reader
// keeps its Relu apart.
TEST(NormTest, BatchNormalizationReluIsOneKernel) {
  std::mt19937 rng(12);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 16, 6, 6}});
  auto conv = [&](ValueId in, int64_t cin, int64_t cout, const char* name) {
    return g.add(OpKind::kConv, {in, g.add_constant(name, random_tensor(DType::kF32, {cout, cin, 1, 1}, rng))},
                 attrs({{"kernel_shape", Ints{1, 1}}, {"strides", Ints{1, 1}}, {"pads", Ints{0, 0, 0, 0}},
                        {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
  };
  int vectors = 0;
  auto bn_relu = [&](ValueId in, int64_t c) {
    auto vec = [&](double lo) {
      Tensor t = random_tensor(DType::kF32, {c}, rng);
      for (int64_t i = 0; i < c; ++i) t.set_double(i, std::fabs(t.get_double(i)) + lo);
      return g.add_constant("v" + std::to_string(vectors++), t);
    };
    ValueId bn = g.add(OpKind::kBatchNormalization, {in, vec(0.5), vec(-0.5), vec(0), vec(0.5)});
    return std::pair{bn, g.add(OpKind::kRelu, {bn})};
  };
  ValueId cat = g.add(OpKind::kConcat, {x, conv(x, 16, 16, "a")}, attrs({{"axis", int64_t{1}}}));
  ValueId r1 = bn_relu(cat, 32).second;
  auto [bn2, r2] = bn_relu(conv(r1, 32, 16, "b"), 16);
  g.set_outputs({r2, g.add(OpKind::kAdd, {bn2, r2})});
  expect_matches_reference(g);
  std::vector<std::string> ops = kernel_ops(g);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "BatchNormalization+Relu"), 1) << ::testing::PrintToString(ops);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Relu"), 1) << ::testing::PrintToString(ops);
}

// Inception's branches: convolutions in a blocked layout concatenated along
// channels stay blocked (no reorders to row-major and back); the one
// reorder is the graph output's row-major copy.
TEST(NormTest, ChannelConcatOfConvolutionsStaysBlocked) {
  std::mt19937 rng(9);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 16, 10, 10}});
  auto conv = [&](ValueId in, int64_t cin, int64_t cout, const char* name) {
    return g.add(OpKind::kConv, {in, g.add_constant(name, random_tensor(DType::kF32, {cout, cin, 1, 1}, rng))},
                 attrs({{"kernel_shape", Ints{1, 1}}, {"strides", Ints{1, 1}}, {"pads", Ints{0, 0, 0, 0}},
                        {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
  };
  ValueId cat = g.add(OpKind::kConcat, {conv(x, 16, 32, "a"), conv(x, 16, 16, "b"), conv(x, 16, 48, "c")},
                      attrs({{"axis", int64_t{1}}}));
  g.set_outputs({conv(cat, 96, 16, "d")});
  expect_matches_reference(g);
  std::vector<std::string> ops = kernel_ops(g);
  EXPECT_NE(std::find(ops.begin(), ops.end(), "Concat"), ops.end()) << ::testing::PrintToString(ops);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Reorder"), 1) << ::testing::PrintToString(ops);
}

// DenseNet's concatenations: sources in the layout the convolutions wrote
// (channels-last or channel-blocked) are copied as rows of contiguous bytes
// (native:concat_rows), at batch 2 too. A row-major source among them (the
// graph input; ShuffleNet's pass-through half, a Slice) leaves the
// concatenation to oneDNN. All against the reference.
TEST(NormTest, ConcatInConvolutionLayoutCopiesRows) {
  enum Second { kConv, kInput, kSlice };
  for (auto [batch, second] : {std::pair{1, kConv}, {2, kConv}, {1, kInput}, {1, kSlice}}) {
    std::mt19937 rng(10);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {batch, 16, 5, 7}});
    auto conv = [&](ValueId in, int64_t cin, int64_t cout, const char* name) {
      return g.add(OpKind::kConv, {in, g.add_constant(name, random_tensor(DType::kF32, {cout, cin, 1, 1}, rng))},
                   attrs({{"kernel_shape", Ints{1, 1}}, {"strides", Ints{1, 1}}, {"pads", Ints{0, 0, 0, 0}},
                          {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
    };
    ValueId a = conv(x, 16, 32, "a");
    ValueId b = second == kInput ? x
                : second == kSlice
                    ? g.add(OpKind::kSlice, {a}, attrs({{"starts", Ints{8}}, {"ends", Ints{24}}, {"axes", Ints{1}}, {"steps", Ints{1}}}))
                    : conv(x, 16, 16, "b");
    ValueId cat = g.add(OpKind::kConcat, {a, b, conv(a, 32, 48, "c")}, attrs({{"axis", int64_t{1}}}));
    g.set_outputs({conv(cat, 96, 16, "d")});
    expect_matches_reference(g);
    RunOptions options;
    options.profile = true;
    ExecutablePlan plan = ExecutablePlan::compile(g, options);
    plan.run({random_tensor(DType::kF32, {batch, 16, 5, 7}, rng)});
    std::string impl;
    for (const KernelProfile& k : plan.profile().kernels)
      if (k.op == "Concat") impl = k.impl;
    std::string why = impl + ", batch " + std::to_string(batch) + ", second source " + std::to_string(second);
    if (second == kConv) EXPECT_EQ(impl, "native:concat_rows") << why;
    else EXPECT_EQ(impl.rfind("onednn:", 0), 0u) << why;
  }
}

// DenseNet's pre-activation on a concatenation, Concat -> BatchNormalization
// -> Relu, the concatenation read by nothing else: one kernel that
// normalizes each source's rows on their way into the result
// (native:concat_rows+bn_relu), at batch 1 and 2, with and without the
// Relu. A concatenation with a second reader is stored and normalized
// apart. All against the reference.
TEST(NormTest, ConcatBatchNormalizationReluIsOnePass) {
  enum Form { kRelu, kNoRelu, kConcatReadTwice };
  for (auto [batch, form] : {std::pair{1, kRelu}, {2, kRelu}, {1, kNoRelu}, {1, kConcatReadTwice}}) {
    std::mt19937 rng(13);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {batch, 16, 5, 7}});
    auto conv = [&](ValueId in, int64_t cin, int64_t cout, const char* name) {
      return g.add(OpKind::kConv, {in, g.add_constant(name, random_tensor(DType::kF32, {cout, cin, 1, 1}, rng))},
                   attrs({{"kernel_shape", Ints{1, 1}}, {"strides", Ints{1, 1}}, {"pads", Ints{0, 0, 0, 0}},
                          {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
    };
    int vectors = 0;
    auto vec = [&](int64_t c, double lo) {
      Tensor t = random_tensor(DType::kF32, {c}, rng);
      for (int64_t i = 0; i < c; ++i) t.set_double(i, std::fabs(t.get_double(i)) + lo);
      return g.add_constant("v" + std::to_string(vectors++), t);
    };
    ValueId a = conv(x, 16, 32, "a");
    ValueId cat = g.add(OpKind::kConcat, {a, conv(x, 16, 16, "b"), conv(a, 32, 48, "c")}, attrs({{"axis", int64_t{1}}}));
    // A shift of -1.5 and more makes the Relu clip about half the values.
    ValueId bn = g.add(OpKind::kBatchNormalization, {cat, vec(96, 0.5), vec(96, -1.5), vec(96, 0), vec(96, 0.5)});
    ValueId act = form == kNoRelu ? bn : g.add(OpKind::kRelu, {bn});
    ValueId y = conv(act, 96, 16, "d");
    if (form == kConcatReadTwice) y = g.add(OpKind::kAdd, {y, conv(cat, 96, 16, "e")});
    g.set_outputs({y});
    expect_matches_reference(g);
    RunOptions options;
    options.profile = true;
    ExecutablePlan plan = ExecutablePlan::compile(g, options);
    plan.run({random_tensor(DType::kF32, {batch, 16, 5, 7}, rng)});
    std::map<std::string, std::string> impl;  // op -> impl
    for (const KernelProfile& k : plan.profile().kernels) impl[k.op] = k.impl;
    std::string why = ::testing::PrintToString(impl) + ", batch " + std::to_string(batch) + ", form " +
                      std::to_string(form);
    if (form == kRelu) EXPECT_EQ(impl["Concat+BatchNormalization+Relu"], "native:concat_rows+bn_relu") << why;
    if (form == kNoRelu) EXPECT_EQ(impl["Concat+BatchNormalization"], "native:concat_rows+bn") << why;
    EXPECT_EQ(impl.count("Concat"), form == kConcatReadTwice ? 1u : 0u) << why;
    EXPECT_EQ(impl.count("BatchNormalization+Relu"), form == kConcatReadTwice ? 1u : 0u) << why;
  }
}

struct BinaryCase {
  OpKind kind;
  Shape a, b;
};

class BinaryTest : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryTest, Broadcasts) {
  const BinaryCase& p = GetParam();
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, p.a});
  ValueId b = g.add_input("b", {DType::kF32, p.b});
  g.set_outputs({g.add(p.kind, {a, b})});
  expect_matches_reference(g);
}

INSTANTIATE_TEST_SUITE_P(Forms, BinaryTest,
                         ::testing::Values(BinaryCase{OpKind::kAdd, {2, 3, 4}, {4}},
                                           BinaryCase{OpKind::kMul, {3, 1}, {2, 3, 4}},
                                           BinaryCase{OpKind::kSub, {1, 3, 1}, {2, 1, 4}},
                                           BinaryCase{OpKind::kDiv, {2, 3, 4}, {2, 3, 4}},
                                           BinaryCase{OpKind::kMax, {}, {5, 2}},
                                           BinaryCase{OpKind::kMin, {5, 2}, {1, 2}},
                                           BinaryCase{OpKind::kSub, {4}, {3, 4}}));

TEST(ElementwiseTest, UnaryChainRunsInPlace) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 64}});
  ValueId e = g.add(OpKind::kErf, {g.add(OpKind::kAbs, {x})});
  ValueId t = g.add(OpKind::kTanh, {g.add(OpKind::kHardSigmoid, {e})});
  g.set_outputs({g.add(OpKind::kSigmoid, {g.add(OpKind::kSin, {t})})});
  ExecutablePlan plan = expect_matches_reference(g);
  EXPECT_GT(plan.memory().in_place, 0);
}

// Masks and index arithmetic: casts, comparisons and boolean ops run native
// kernels (no reference fallback) and agree with the interpreter.
TEST(LogicTest, CastCompareAndBooleanOps) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {3, 4}});
  ValueId b = g.add_input("b", {DType::kF32, {4}});
  ValueId less = g.add(OpKind::kLess, {a, b});
  ValueId ge = g.add(OpKind::kGreaterOrEqual, {b, a});
  ValueId ai = g.add(OpKind::kCast, {g.add(OpKind::kMul, {a, g.add_constant("k", Tensor::from_doubles(DType::kF32, {}, {3.0}))})},
                     attrs({{"to", std::string("i64")}}));
  ValueId bi = g.add(OpKind::kCast, {g.add(OpKind::kMul, {b, g.add_constant("k2", Tensor::from_doubles(DType::kF32, {}, {3.0}))})},
                     attrs({{"to", std::string("i32")}}));
  ValueId eq = g.add(OpKind::kEqual, {ai, g.add(OpKind::kCast, {bi}, attrs({{"to", std::string("i64")}}))});
  ValueId both = g.add(OpKind::kAnd, {less, g.add(OpKind::kNot, {eq})});
  ValueId any = g.add(OpKind::kXor, {g.add(OpKind::kOr, {both, ge}), eq});
  ValueId half = g.add(OpKind::kCast, {a}, attrs({{"to", std::string("f16")}}));
  g.set_outputs({g.add(OpKind::kCast, {any}, attrs({{"to", std::string("f32")}})),
                 g.add(OpKind::kCast, {half}, attrs({{"to", std::string("f32")}})), ai, any});
  expect_matches_reference(g);
  for (const std::string& op : kernel_ops(g)) EXPECT_EQ(op.find('!'), std::string::npos) << op << " fell back";
}

// Pow by a scalar constant (native products, oneDNN square and sqrt) agrees
// with std::pow, negative bases included.
TEST(ElementwiseTest, PowByScalarConstant) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {8, 33}});
  ValueId cube = g.add(OpKind::kPow, {x, g.add_constant("three", Tensor::from_doubles(DType::kF32, {}, {3.0}))});
  ValueId sq = g.add(OpKind::kPow, {x, g.add_constant("two", Tensor::from_doubles(DType::kF32, {1}, {2.0}))});
  ValueId root = g.add(OpKind::kPow, {g.add(OpKind::kAbs, {x}),
                                      g.add_constant("half", Tensor::from_doubles(DType::kF32, {}, {0.5}))});
  g.set_outputs({cube, sq, root});
  expect_matches_reference(g);
  for (const std::string& op : kernel_ops(g)) EXPECT_EQ(op.find('!'), std::string::npos) << op << " fell back";
}

// A fused element-wise chain whose only oneDNN form is the scalar reference
// implementation is split into JIT-compiled links.
TEST(FusionTest, NoReferenceImplementationForFusedChains) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {16, 64}});
  ValueId u = g.add_input("u", {DType::kF32, {16, 64}});
  ValueId s = g.add(OpKind::kMul, {g.add(OpKind::kSigmoid, {x}), x});
  g.set_outputs({g.add(OpKind::kMul, {s, u})});
  RunOptions o;
  o.profile = true;
  ExecutablePlan plan = expect_matches_reference(g, o);
  for (const KernelProfile& k : plan.profile().kernels) {
    if (k.op.find('+') != std::string::npos) {
      EXPECT_NE(k.impl.rfind("onednn:ref", 0), 0u) << k.op << " " << k.impl;
    }
  }
}

// An f64 graph keeps double precision through the reference fallback.
TEST(ElementwiseTest, F64FallbackKeepsDoublePrecision) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF64, {5, 7}});
  g.set_outputs({g.add(OpKind::kErf, {g.add(OpKind::kMul, {x, x})})});
  ExecutablePlan plan = ExecutablePlan::compile(g);
  std::mt19937 rng(4);
  std::vector<Tensor> in = {random_tensor(DType::kF64, {5, 7}, rng)};
  Tensor want = evaluate(g, in, Precision::kF64)[0];
  Tensor got = plan.run(in)[0];
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) worst = std::max(worst, std::fabs(got.get_double(i) - want.get_double(i)));
  EXPECT_LE(worst, 1e-14);
}

}  // namespace
}  // namespace tessera::runtime

namespace tessera::runtime {
namespace {

// A squeeze-and-excitation block after a grouped convolution (RegNet-Y,
// EfficientNet): the grouped conv writes 8-channel blocks, the scale is a
// row-major [1, C, 1, 1]. The broadcast multiply must match and must not run
// in oneDNN's reference implementation (it did: 3.5 ms of a 3.6 ms RegNet).
TEST(ElementwiseTest, ChannelScaleOfBlockedValueRunsJitted) {
  for (int64_t channels : {48, 104}) {
    std::mt19937 rng(12);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, channels, 14, 14}});
    ValueId c = g.add(OpKind::kConv,
                      {x, g.add_constant("w", random_tensor(DType::kF32, {channels, 8, 3, 3}, rng))},
                      attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}},
                             {"dilations", Ints{1, 1}}, {"group", channels / 8}}));
    ValueId r = g.add(OpKind::kRelu, {c});
    ValueId pooled = g.add(OpKind::kGlobalAveragePool, {r});
    ValueId s = g.add(OpKind::kSigmoid, {pooled});
    ValueId y = g.add(OpKind::kMul, {s, r});
    ValueId z = g.add(OpKind::kConv, {y, g.add_constant("w2", random_tensor(DType::kF32, {16, channels, 1, 1}, rng))},
                      attrs({{"kernel_shape", Ints{1, 1}}, {"strides", Ints{1, 1}}, {"pads", Ints{0, 0, 0, 0}},
                             {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
    g.set_outputs({z});
    RunOptions o;
    o.profile = true;
    ExecutablePlan plan = expect_matches_reference(g, o);
    bool found = false;
    for (const KernelProfile& k : plan.profile().kernels)
      if (k.op == "Mul") {
        found = true;
        EXPECT_EQ(k.impl.find(":ref"), std::string::npos) << channels << " channels: " << k.impl;
      }
    EXPECT_TRUE(found) << channels << " channels";
  }
}

// A weight without batch dims against batched rows (PyTorch's
// MultiheadAttention: [L, 1, E] x [E, 3E]) runs as one product; post-op
// operands that collapse with the rows and ones that do not.
TEST(FusionTest, BatchedRowsTimesOneWeight) {
  struct Case {
    Shape a, operand;
    bool fused;  // oneDNN's matmul has no JIT form for a per-row operand
  };
  for (const Case& c : {Case{{7, 1, 32}, {48}, true}, Case{{7, 1, 32}, {7, 1, 48}, true},
                        Case{{2, 3, 32}, {2, 1, 48}, true}, Case{{2, 3, 32}, {2, 3, 1}, false}}) {
    std::mt19937 rng(13);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, c.a});
    ValueId m = g.add(OpKind::kMatMul, {x, g.add_constant("w", random_tensor(DType::kF32, {32, 48}, rng))});
    ValueId y = g.add(OpKind::kAdd, {m, g.add_input("b", {DType::kF32, c.operand})});
    g.set_outputs({g.add(OpKind::kRelu, {y})});
    RunOptions o;
    o.profile = true;
    ExecutablePlan plan = expect_matches_reference(g, o);
    // One JIT kernel: the operands are given in the product's view (a
    // residual [7, 1, 48] against collapsed rows went to oneDNN's reference
    // form, and the compiler split it).
    for (const KernelProfile& k : plan.profile().kernels) EXPECT_EQ(k.impl.find(":ref"), std::string::npos) << k.impl;
    if (!c.fused) continue;
    ASSERT_EQ(plan.profile().kernels.size(), 1u) << shape_str(c.a) << " + " << shape_str(c.operand);
    EXPECT_EQ(plan.profile().kernels[0].op, "MatMul+Add+Relu");
  }
}

}  // namespace
}  // namespace tessera::runtime

namespace tessera::runtime {
namespace {

// Constant Pad runs natively (the PET pad-to-multiple mutants make them;
// the reference fallback took 0.8 ms for a 7x7 map): growing, cropping with
// negative pads, a non-zero value, after a blocked convolution, and on ints.
TEST(MovementTest, ConstantPadIsNative) {
  struct Case {
    DType dtype;
    Ints pads;
    double value;
    bool after_conv;
  };
  for (const Case& c : {Case{DType::kF32, {0, 0, 0, 1, 0, 0, 1, 1}, 0.0, true},
                        Case{DType::kF32, {0, 1, -1, 2, 0, 0, 1, -2}, 1.5, false},
                        Case{DType::kI64, {0, 0, 2, 0, 1, 0, 0, 3}, 7.0, false}}) {
    std::mt19937 rng(14);
    Graph g;
    ValueId x = g.add_input("x", {c.dtype, {1, 16, 7, 7}});
    if (c.after_conv)
      x = g.add(OpKind::kConv, {x, g.add_constant("w", random_tensor(DType::kF32, {16, 16, 3, 3}, rng))},
                attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}},
                       {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
    ValueId y = g.add(OpKind::kPad, {x}, attrs({{"pads", c.pads}, {"mode", std::string("constant")}, {"value", c.value}}));
    g.set_outputs({y});
    expect_matches_reference(g);
    for (const std::string& op : kernel_ops(g)) EXPECT_EQ(op.find('!'), std::string::npos) << op << " fell back";
  }
}

}  // namespace
}  // namespace tessera::runtime

namespace tessera::runtime {
namespace {

// Resize runs natively (segmentation heads upsample their logits: 4.2 of
// DeepLabV3's 10 ms in the reference fallback): linear, nearest and cubic,
// up and down (antialiased), on the last two axes and on a middle one, after
// a blocked convolution; tf_crop_and_resize stays with the reference.
TEST(MovementTest, ResizeIsNative) {
  struct Case {
    std::string mode, ctm;
    Ints sizes;
    std::vector<double> scales;
    int64_t antialias;
    bool native;
  };
  for (const Case& c : {Case{"linear", "half_pixel", {1, 16, 21, 28}, {1, 1, 3.0, 4.0}, 0, true},
                        Case{"nearest", "asymmetric", {1, 16, 14, 14}, {1, 1, 2.0, 2.0}, 0, true},
                        Case{"cubic", "align_corners", {1, 32, 9, 10}, {1, 2.0, 9.0 / 7, 10.0 / 7}, 0, true},
                        Case{"linear", "pytorch_half_pixel", {1, 16, 3, 4}, {1, 1, 3.0 / 7, 4.0 / 7}, 1, true},
                        Case{"linear", "tf_crop_and_resize", {1, 16, 5, 5}, {1, 1, 5.0 / 7, 5.0 / 7}, 0, false}}) {
    std::mt19937 rng(15);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 16, 7, 7}});
    x = g.add(OpKind::kConv, {x, g.add_constant("w", random_tensor(DType::kF32, {16, 16, 1, 1}, rng))},
              attrs({{"kernel_shape", Ints{1, 1}}, {"strides", Ints{1, 1}}, {"pads", Ints{0, 0, 0, 0}},
                     {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
    Attrs a = attrs({{"sizes", c.sizes}, {"scales", c.scales}, {"mode", c.mode},
                     {"coordinate_transformation_mode", c.ctm}, {"antialias", c.antialias}});
    if (c.ctm == "tf_crop_and_resize") a.set("roi", std::vector<double>{0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8});
    g.set_outputs({g.add(OpKind::kResize, {x}, a)});
    expect_matches_reference(g);
    bool fell_back = false;
    for (const std::string& op : kernel_ops(g)) fell_back = fell_back || op == "Resize!";
    EXPECT_EQ(fell_back, !c.native) << c.mode << " " << c.ctm;
  }
}

}  // namespace
}  // namespace tessera::runtime

namespace tessera::runtime {
namespace {

// A broadcast oneDNN's binary has only its reference form for (Swin's
// shifted-window mask: [1, windows, heads, 49, 49] + [1, windows, 1, 49, 49])
// runs in the native kernel instead (9.9 ms -> 0.19 ms there).
TEST(ElementwiseTest, MiddleAxisBroadcastIsNotReference) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {1, 4, 3, 7, 7}});
  ValueId b = g.add_input("b", {DType::kF32, {1, 4, 1, 7, 7}});
  g.set_outputs({g.add(OpKind::kAdd, {a, b})});
  RunOptions o;
  o.profile = true;
  ExecutablePlan plan = expect_matches_reference(g, o);
  for (const KernelProfile& k : plan.profile().kernels) EXPECT_EQ(k.impl.find(":ref"), std::string::npos) << k.impl;
}

}  // namespace
}  // namespace tessera::runtime

namespace tessera::runtime {
namespace {

// SiLU as PyTorch exports it (x * Sigmoid(x)) after a convolution
// (EfficientNet, YOLO) or a matmul (Llama's MLP, times the up projection)
// is one post-op of the kernel; an x with a third reader is left alone.
TEST(FusionTest, SiluPatternBecomesOnePostOp) {
  std::mt19937 rng(16);
  for (bool extra_reader : {false, true}) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 16, 9, 9}});
    ValueId c = g.add(OpKind::kConv, {x, g.add_constant("w", random_tensor(DType::kF32, {16, 16, 3, 3}, rng))},
                      attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}},
                             {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
    ValueId y = g.add(OpKind::kMul, {c, g.add(OpKind::kSigmoid, {c})});
    g.set_outputs(extra_reader ? std::vector<ValueId>{y, c} : std::vector<ValueId>{y});
    expect_matches_reference(g);
    std::vector<std::string> ops = kernel_ops(g);
    bool fused = std::find(ops.begin(), ops.end(), "Conv+Swish") != ops.end();
    EXPECT_EQ(fused, !extra_reader) << ::testing::PrintToString(ops);
  }
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {8, 32}});
  ValueId up = g.add_input("up", {DType::kF32, {8, 48}});
  ValueId m = g.add(OpKind::kMatMul, {x, g.add_constant("w", random_tensor(DType::kF32, {32, 48}, rng))});
  ValueId s = g.add(OpKind::kMul, {g.add(OpKind::kSigmoid, {m}), m});
  g.set_outputs({g.add(OpKind::kMul, {s, up})});
  expect_matches_reference(g);
  std::vector<std::string> ops = kernel_ops(g);
  ASSERT_EQ(ops.size(), 1u) << ::testing::PrintToString(ops);
  EXPECT_EQ(ops[0], "MatMul+Swish+Mul");
}

// A convolution's SiLU over a result of 16384 elements or more runs as the
// native pass after the convolution (native_swish.h), on AVX-512 hosts; a
// smaller result keeps oneDNN's post-op. Both match the reference, the
// depthwise and the 1x1 forms of EfficientNet's blocks included, over
// inputs wide enough to reach the pass's clamp at +-18.
TEST(FusionTest, LargeConvolutionSiluIsANativePass) {
  std::mt19937 rng(17);
  struct Case {
    int64_t cin, cout, k, group, hw;
  };
  for (const Case& c : {Case{16, 96, 1, 1, 32}, Case{32, 32, 3, 32, 40}, Case{8, 16, 3, 1, 9}}) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, c.cin, c.hw, c.hw}});
    Tensor w = random_tensor(DType::kF32, {c.cout, c.cin / c.group, c.k, c.k}, rng);
    for (int64_t i = 0; i < w.numel(); ++i) w.mutable_data_as<float>()[i] *= 12.0f;
    ValueId conv = g.add(OpKind::kConv, {x, g.add_constant("w", std::move(w))},
                         attrs({{"kernel_shape", Ints{c.k, c.k}}, {"strides", Ints{1, 1}},
                                {"pads", Ints{c.k / 2, c.k / 2, c.k / 2, c.k / 2}}, {"dilations", Ints{1, 1}},
                                {"group", c.group}}));
    g.set_outputs({g.add(OpKind::kMul, {conv, g.add(OpKind::kSigmoid, {conv})})});
    RunOptions o;
    o.profile = true;
    ExecutablePlan plan = expect_matches_reference(g, o);
    bool large = c.cout * c.hw * c.hw >= 16384, native = false;
    for (const KernelProfile& k : plan.profile().kernels) native = native || k.impl.ends_with("+native_swish");
    EXPECT_EQ(native, large && __builtin_cpu_supports("avx512f")) << c.cout << "x" << c.hw << "x" << c.hw;
  }
}

}  // namespace
}  // namespace tessera::runtime
