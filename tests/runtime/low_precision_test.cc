// bf16 and fp16 graphs on the CPU backend: every kernel runs a compiled path
// (oneDNN in bf16, oneDNN over f32 copies for fp16, native kernels widening
// inside), none the reference fallback, and the results match the reference
// interpreter within a few 16-bit roundings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/cpu/half_convert.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using testing::attrs;
using testing::Ints;
using testing::random_tensor;

// A Llama-style block in small: embedding Gather, LayerNorm, a SiLU MLP with
// a bias, attention (head split by Reshape/Transpose, a KV-cache Concat, a
// causal mask by Where, Softmax), an RMSNorm (Pow, ReduceMean, Sqrt, Div) and
// a rotary-style Cos/Erf element-wise tail.
Graph lp_decoder_graph(DType dt) {
  std::mt19937 rng(11);
  Graph g;
  auto c = [&](const std::string& name, const Shape& s) { return g.add_constant(name, random_tensor(dt, s, rng)); };
  ValueId ids = g.add_input("ids", {DType::kI64, {1, 6}});
  ValueId past = g.add_input("past_k", {dt, {1, 2, 3, 8}});
  ValueId mask = g.add_input("mask", {DType::kBool, {1, 1, 6, 9}});
  ValueId x = g.add(OpKind::kGather, {c("embed", {32, 16}), ids}, attrs({{"axis", int64_t{0}}}));
  ValueId ln = g.add(OpKind::kLayerNormalization, {x, c("ln_w", {16}), c("ln_b", {16})},
                     attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-5}}));
  ValueId up = g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {ln, c("w_up", {16, 32})}), c("b_up", {32})});
  ValueId silu = g.add(OpKind::kMul, {up, g.add(OpKind::kSigmoid, {up})});
  ValueId down = g.add(OpKind::kMatMul, {silu, c("w_down", {32, 16})});
  ValueId h = g.add(OpKind::kAdd, {x, down});
  auto heads = [&](ValueId v) {
    ValueId r = g.add(OpKind::kReshape, {v}, attrs({{"shape", Ints{1, 6, 2, 8}}}));
    return g.add(OpKind::kTranspose, {r}, attrs({{"perm", Ints{0, 2, 1, 3}}}));
  };
  ValueId q = heads(g.add(OpKind::kMatMul, {h, c("w_q", {16, 16})}));
  ValueId k = g.add(OpKind::kConcat, {past, heads(g.add(OpKind::kMatMul, {h, c("w_k", {16, 16})}))},
                    attrs({{"axis", int64_t{2}}}));  // [1, 2, 9, 8]
  ValueId kt = g.add(OpKind::kTranspose, {k}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId scores = g.add(OpKind::kDiv, {g.add(OpKind::kMatMul, {q, kt}),
                                        g.add_constant("scale", Tensor::from_doubles(dt, {}, {2.8}))});
  ValueId masked = g.add(OpKind::kWhere, {mask, scores, g.add_constant("neg", Tensor::from_doubles(dt, {}, {-1e4}))});
  ValueId p = g.add(OpKind::kSoftmax, {masked}, attrs({{"axis", int64_t{-1}}}));
  ValueId att = g.add(OpKind::kMatMul, {p, k});  // [1, 2, 6, 8]
  ValueId merged = g.add(OpKind::kReshape, {g.add(OpKind::kTranspose, {att}, attrs({{"perm", Ints{0, 2, 1, 3}}}))},
                         attrs({{"shape", Ints{1, 6, 16}}}));
  ValueId sq = g.add(OpKind::kPow, {merged, g.add_constant("two", Tensor::from_doubles(dt, {}, {2.0}))});
  ValueId ms = g.add(OpKind::kReduceMean, {sq}, attrs({{"axes", Ints{-1}}, {"keepdims", int64_t{1}}}));
  ValueId rms = g.add(OpKind::kSqrt, {g.add(OpKind::kAdd, {ms, g.add_constant("eps", Tensor::from_doubles(dt, {}, {1e-5}))})});
  ValueId normed = g.add(OpKind::kMul, {g.add(OpKind::kDiv, {merged, rms}), c("rms_w", {16})});
  ValueId tail = g.add(OpKind::kAdd, {g.add(OpKind::kCos, {normed}), g.add(OpKind::kErf, {h})});
  g.set_outputs({tail, k});
  return g;
}

// A ResNet-style CNN in small: convolutions with bias, a residual Add + Relu,
// MaxPool, a depthwise convolution, BatchNormalization, GlobalAveragePool,
// Flatten and a Gemm classifier with Softmax.
Graph lp_cnn_graph(DType dt) {
  std::mt19937 rng(12);
  Graph g;
  auto c = [&](const std::string& name, const Shape& s) { return g.add_constant(name, random_tensor(dt, s, rng)); };
  auto conv = [&](ValueId x, int64_t cin, int64_t cout, int64_t group, const std::string& tag) {
    Attrs a = attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}},
                     {"dilations", Ints{1, 1}}, {"group", group}});
    return g.add(OpKind::kConv, {x, c("w" + tag, {cout, cin / group, 3, 3}), c("b" + tag, {cout})}, a);
  };
  ValueId x = g.add_input("x", {dt, {1, 8, 12, 12}});
  ValueId a = g.add(OpKind::kRelu, {conv(x, 8, 16, 1, "1")});
  ValueId r = g.add(OpKind::kRelu, {g.add(OpKind::kAdd, {conv(a, 16, 16, 1, "2"), a})});
  ValueId pool = g.add(OpKind::kMaxPool, {r}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{0, 0, 0, 0}}, {"dilations", Ints{1, 1}}}));
  ValueId dw = conv(pool, 16, 16, 16, "3");
  Tensor var = random_tensor(dt, {16}, rng);
  for (int64_t i = 0; i < 16; ++i) var.set_double(i, 0.5 + std::fabs(var.get_double(i)));
  ValueId bn = g.add(OpKind::kBatchNormalization,
                     {dw, c("bn_s", {16}), c("bn_b", {16}), c("bn_m", {16}), g.add_constant("bn_v", var)},
                     attrs({{"epsilon", 1e-5}}));
  ValueId gap = g.add(OpKind::kGlobalAveragePool, {g.add(OpKind::kRelu, {bn})});
  ValueId flat = g.add(OpKind::kFlatten, {gap}, attrs({{"axis", int64_t{1}}}));
  ValueId logits = g.add(OpKind::kGemm, {flat, c("fc_w", {10, 16}), c("fc_b", {10})}, attrs({{"transB", int64_t{1}}}));
  ValueId y = g.add(OpKind::kSoftmax, {logits}, attrs({{"axis", int64_t{-1}}}));
  g.set_outputs({y, r});
  return g;
}

Tensor lp_random_input(const TensorType& t, std::mt19937& rng) {
  if (t.dtype == DType::kI64) {
    std::vector<int64_t> v(static_cast<size_t>(t.numel()));
    for (int64_t& i : v) i = static_cast<int64_t>(rng() % 32);
    return Tensor::from_ints(DType::kI64, t.shape, v);
  }
  if (t.dtype == DType::kBool) {
    std::vector<int64_t> v(static_cast<size_t>(t.numel()));
    for (int64_t& i : v) i = (rng() % 4) != 0;
    return Tensor::from_ints(DType::kBool, t.shape, v);
  }
  return random_tensor(t.dtype, t.shape, rng);
}

// Compiles g with --profile on, runs it on random inputs and compares each
// output with the reference interpreter: |got - want| <= tol * (|want| + 1),
// tol a few dozen unit roundoffs of the type (the plan fuses chains the
// interpreter rounds link by link, and sums in another order).
Profile lp_run_and_compare(const Graph& g, double tol) {
  RunOptions options;
  options.profile = true;
  ExecutablePlan plan = ExecutablePlan::compile(g, options);
  std::mt19937 rng(5);
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs()) inputs.push_back(lp_random_input(g.type(v), rng));
  std::vector<Tensor> want = evaluate(g, inputs, Precision::kF64);
  std::vector<Tensor> got = plan.run(inputs);
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    EXPECT_EQ(got[i].type(), want[i].type()) << "output " << i;
    if (got[i].type() != want[i].type()) continue;
    int64_t bad = 0;
    std::string first;
    for (int64_t j = 0; j < got[i].numel(); ++j) {
      double a = got[i].get_double(j), b = want[i].get_double(j);
      if (!(std::fabs(a - b) <= tol * (std::fabs(b) + 1.0)) && bad++ == 0)
        first = "at " + std::to_string(j) + ": " + std::to_string(a) + " vs " + std::to_string(b);
    }
    EXPECT_EQ(bad, 0) << "output " << i << ": " << bad << " of " << got[i].numel() << " differ, first " << first;
  }
  return plan.profile();
}

// 48 unit roundoffs: bf16 0.19, f16 0.023 (against values near 1 and a
// reference that rounds every node).
double lp_tolerance(DType dt) { return 48.0 * (dt == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11)); }

struct LpCase {
  const char* name;
  Graph (*build)(DType);
  DType dtype;
};

class LowPrecisionTest : public ::testing::TestWithParam<LpCase> {};

// The check `tessera run --profile` shows: no [FALLBACK] row.
TEST_P(LowPrecisionTest, NoFallbackAndMatchesReference) {
  const LpCase& c = GetParam();
  Graph g = c.build(c.dtype);
  Profile p = lp_run_and_compare(g, lp_tolerance(c.dtype));
  ASSERT_FALSE(p.kernels.empty());
  for (const KernelProfile& k : p.kernels) EXPECT_FALSE(k.fallback) << k.op << " at " << k.node << ": " << k.impl;
  EXPECT_EQ(p.table().find("[FALLBACK]"), std::string::npos) << p.table();
  // Which path ran is in the profile: oneDNN kernels of an f16 graph compute
  // over f32 copies and say so; a bf16 graph's run in bf16.
  int onednn = 0, via_f32 = 0;
  for (const KernelProfile& k : p.kernels) {
    if (k.impl.rfind("onednn:", 0) != 0 || k.op == "Reorder") continue;
    ++onednn;
    if (k.impl.find("(f16 via f32)") != std::string::npos) ++via_f32;
  }
  EXPECT_GT(onednn, 2);
  EXPECT_EQ(via_f32, c.dtype == DType::kF16 ? onednn : 0) << p.table();
}

INSTANTIATE_TEST_SUITE_P(Models, LowPrecisionTest,
                         ::testing::Values(LpCase{"decoder_bf16", lp_decoder_graph, DType::kBF16},
                                           LpCase{"decoder_f16", lp_decoder_graph, DType::kF16},
                                           LpCase{"cnn_bf16", lp_cnn_graph, DType::kBF16},
                                           LpCase{"cnn_f16", lp_cnn_graph, DType::kF16}),
                         [](const ::testing::TestParamInfo<LpCase>& i) { return std::string(i.param.name); });

// An fp16 CNN converts at its edges only: its graph input widened once,
// each output narrowed once; between the oneDNN kernels the f32 results
// are handed on (cpu_compiler.cc), not narrowed and widened per kernel.
TEST(LowPrecisionCheckTest, F16ConvNetConvertsOnlyAtItsEdges) {
  Graph g = lp_cnn_graph(DType::kF16);
  Profile p = lp_run_and_compare(g, lp_tolerance(DType::kF16));
  int converts = 0;
  for (const KernelProfile& k : p.kernels) converts += k.op.rfind("Convert", 0) == 0;
  EXPECT_EQ(converts, static_cast<int>(g.inputs().size() + g.outputs().size())) << p.table();
}

// The tolerance above is not so loose that a wrong kernel passes: the same
// check fails when the plan computes something else (a weight changed by one
// part in 8 after compile would be caught; here, a graph with one weight
// perturbed compared against the original's reference).
TEST(LowPrecisionCheckTest, ComparisonCatchesAWrongResult) {
  Graph g = lp_cnn_graph(DType::kBF16);
  RunOptions options;
  ExecutablePlan plan = ExecutablePlan::compile(g, options);
  Graph wrong = lp_cnn_graph(DType::kBF16);
  std::mt19937 rng(5);
  Tensor x = lp_random_input(g.type(g.inputs()[0]), rng);
  std::vector<Tensor> want = evaluate(g, {x}, Precision::kF64);
  // A residual branch dropped: r = relu(conv2(a)) instead of relu(conv2(a) + a).
  ValueId r = wrong.outputs()[1];
  NodeId add = wrong.value(wrong.node(wrong.value(r).producer).inputs[0]).producer;
  wrong.mutable_node(add).inputs[1] = wrong.node(add).inputs[0];
  ExecutablePlan wrong_plan = ExecutablePlan::compile(wrong, options);
  std::vector<Tensor> got = wrong_plan.run({x});
  int64_t bad = 0;
  for (int64_t j = 0; j < got[1].numel(); ++j) {
    double a = got[1].get_double(j), b = want[1].get_double(j);
    if (!(std::fabs(a - b) <= lp_tolerance(DType::kBF16) * (std::fabs(b) + 1.0))) ++bad;
  }
  EXPECT_GT(bad, 0);
}

// Widening is exact and narrowing rounds to nearest even, as the
// interpreter's conversions (graph/dtype.h) do, on every 16-bit pattern.
TEST(HalfConvertTest, AgreesWithScalarConversionsOnEveryPattern) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> all(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    std::vector<float> wide(all.size());
    cpu::widen_to_f32(dt, all.data(), wide.data(), static_cast<int64_t>(all.size()));
    int64_t wrong = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      float want = dt == DType::kF16 ? half_to_float(all[i]) : bf16_to_float(all[i]);
      if (!(wide[i] == want || (std::isnan(wide[i]) && std::isnan(want)))) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << dtype_name(dt) << " widening";
    // Narrowing: values between neighbours, ties, overflow and NaN.
    std::mt19937 rng(3);
    std::vector<float> f(100003);
    for (float& v : f) {
      uint32_t u = static_cast<uint32_t>(rng());
      std::memcpy(&v, &u, 4);
    }
    f[0] = 1.0f + std::ldexp(1.0f, -9);  // a bf16 tie
    f[1] = 70000.0f;                     // f16 overflow
    f[2] = std::numeric_limits<float>::quiet_NaN();
    std::vector<uint16_t> narrow(f.size());
    cpu::narrow_from_f32(dt, f.data(), narrow.data(), static_cast<int64_t>(f.size()));
    wrong = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      uint16_t want = dt == DType::kF16 ? float_to_half(f[i]) : float_to_bf16(f[i]);
      bool both_nan = std::isnan(f[i]);
      if (narrow[i] != want && !both_nan) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << dtype_name(dt) << " narrowing";
  }
}

}  // namespace
}  // namespace tessera::runtime
