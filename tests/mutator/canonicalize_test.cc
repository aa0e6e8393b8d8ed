#include "mutator/canonicalize.h"

#include <gtest/gtest.h>

#include "graph/text_form.h"
#include "tests/mutator/mutator_test_util.h"
#include "verifier/proofs.h"

namespace tessera::mutator {
namespace {

using testing::max_output_diff;
using testing::weight;

using testing::count;

Graph conv_bn_graph(bool conv_bias) {
  std::mt19937_64 rng(5);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 3, 8, 8}});
  std::vector<ValueId> ins = {x, weight(g, "w", {4, 3, 3, 3}, rng)};
  if (conv_bias) ins.push_back(weight(g, "b", {4}, rng));
  ValueId c = g.add(OpKind::kConv, ins, testing::conv_attrs(3, 1, 1), "conv");
  Tensor var = testing::random_tensor(DType::kF32, {4}, rng);
  for (int i = 0; i < 4; ++i) var.set_double(i, 0.5 + std::abs(var.get_double(i)));
  ValueId bn = g.add(OpKind::kBatchNormalization,
                     {c, weight(g, "gamma", {4}, rng), weight(g, "beta", {4}, rng), weight(g, "mean", {4}, rng),
                      g.add_constant("var", var)},
                     {}, "bn");
  g.set_outputs({g.add(OpKind::kRelu, {bn}, {}, "relu")});
  return g;
}

TEST(Canonicalize, FoldsBatchNormIntoConv) {
  for (bool bias : {false, true}) {
    Graph g = conv_bn_graph(bias);
    Graph h = g;
    EXPECT_TRUE(fold_batchnorm_into_conv(h));
    h.validate();
    EXPECT_EQ(count(h, OpKind::kBatchNormalization), 0);
    EXPECT_EQ(count(h, OpKind::kConv), 1);
    EXPECT_LT(max_output_diff(g, h, 1), 1e-5);
    EXPECT_FALSE(fold_batchnorm_into_conv(h)) << "a second run must report no change";
  }
}

TEST(Canonicalize, ConvBatchNormObligationIsProven) {
  verifier::ProofResult r = verifier::prove("conv-batchnorm-fold");
  EXPECT_EQ(r.status, verifier::ProofStatus::kProven) << r.detail;
}

TEST(Canonicalize, FoldsChannelBiasIntoConvButNotOtherBroadcasts) {
  std::mt19937_64 rng(2);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 3, 6, 6}});
  ValueId c = g.add(OpKind::kConv, {x, weight(g, "w", {4, 3, 1, 1}, rng)}, testing::conv_attrs(1), "conv");
  ValueId y = g.add(OpKind::kAdd, {c, weight(g, "bias", {1, 4, 1, 1}, rng)}, {}, "add");
  ValueId c2 = g.add(OpKind::kConv, {x, weight(g, "w2", {4, 3, 1, 1}, rng)}, testing::conv_attrs(1), "conv2");
  ValueId y2 = g.add(OpKind::kAdd, {c2, weight(g, "row", {6}, rng)}, {}, "add2");  // along W, not channels
  g.set_outputs({y, y2});
  Graph h = g;
  EXPECT_TRUE(fold_bias_into_conv(h));
  EXPECT_EQ(count(h, OpKind::kAdd), 1);
  EXPECT_EQ(h.value(h.outputs()[0]).name, "add:0");
  EXPECT_LT(max_output_diff(g, h, 1), 1e-6);
}

TEST(CanonicalizeGolden, FoldsConstantsRemovesIdentityAndDeadCode) {
  Graph g = parse_graph(R"(graph t {
    input x: f32[2x3]
    const a: f32[3] = hex"0000803f0000004000004040"
    const b: f32[3] = hex"0000803f0000803f0000803f"
    s = Add[sum](a, b)
    i = Identity[id](x)
    y = Add[out](i, s)
    d = Relu[dead](x)
    output y
  })");
  Graph h = g;
  std::vector<PassRecord> records = canonicalize(h);
  EXPECT_EQ(print_graph(h),
            "graph t {\n  input x: f32[2x3]\n  const s.folded_7: f32[3] = hex\"000000400000404000008040\"\n"
            "  y = Add[out](x, s.folded_7)\n  output y\n}\n");
  EXPECT_LT(max_output_diff(g, h, 1), 1e-9);
  int changed = 0;
  for (const PassRecord& r : records) changed += r.times > 0;
  EXPECT_GE(changed, 2);
}

TEST(Canonicalize, MatMulWithBiasBecomesGemmOnlyIn2D) {
  std::mt19937_64 rng(3);
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {4, 5}});
  ValueId a3 = g.add_input("a3", {DType::kF32, {2, 4, 5}});
  ValueId w = weight(g, "w", {5, 6}, rng), b = weight(g, "b", {6}, rng);
  ValueId y = g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {a, w}), b}, {}, "y");
  ValueId y3 = g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {a3, w}), b}, {}, "y3");
  g.set_outputs({y, y3});
  Graph h = g;
  canonicalize(h);
  EXPECT_EQ(count(h, OpKind::kGemm), 1);
  EXPECT_EQ(count(h, OpKind::kMatMul), 1);
  EXPECT_EQ(h.value(h.outputs()[0]).name, "y:0");
  EXPECT_LT(max_output_diff(g, h, 1), 1e-6);
}

TEST(Canonicalize, GraphOutputThatIsAnIdentityOfAnInputKeepsItsName) {
  Graph g = parse_graph(R"(graph t {
    input x: f32[2]
    y = Identity[id](x)
    output y
  })");
  Graph h = g;
  canonicalize(h);
  EXPECT_EQ(h.value(h.outputs()[0]).name, "y");
  EXPECT_LT(max_output_diff(g, h, 1), 1e-9);
}

}  // namespace
}  // namespace tessera::mutator
