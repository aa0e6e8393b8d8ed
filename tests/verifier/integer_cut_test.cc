// Programs that read token ids the same way are compared on their float
// parts, where the Z_p test can conclude; anything else stays unknown.
#include <gtest/gtest.h>

#include "verifier/integer_cut.h"
#include "verifier/multilinear.h"

namespace tessera::verifier {
namespace {

constexpr int64_t kRows = 20, kWidth = 6, kTokens = 5, kOut = 4;

Tensor table(double shift = 0) {
  std::vector<double> v(static_cast<size_t>(kRows * kWidth));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * static_cast<double>(i % 11) - 1.0 + shift;
  return Tensor::from_doubles(DType::kF32, {kRows, kWidth}, v);
}

Tensor weight() {
  std::vector<double> v(static_cast<size_t>(kWidth * kOut));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5 * static_cast<double>(i % 7) - 1.5;
  return Tensor::from_doubles(DType::kF32, {kWidth, kOut}, v);
}

Attrs axis0() {
  Attrs a;
  a.set("axis", int64_t{0});
  return a;
}

// Which form of out = table[ids] @ W the program takes.
enum class Form { kPlain, kSplitColumns, kOtherTable, kShiftedIds };

Graph embed_project(Form form) {
  Graph g;
  ValueId ids = g.add_input("input_ids", TensorType{DType::kI64, {kTokens}});
  ValueId ix = ids;
  if (form == Form::kShiftedIds) {
    ix = g.add(OpKind::kAdd, {ids, g.add_constant("one", Tensor::from_ints(DType::kI64, {}, {1}))});
  }
  ValueId rows = g.add(OpKind::kGather, {g.add_constant("wte", table(form == Form::kOtherTable ? 0.5 : 0)), ix},
                       axis0(), "/wte/Gather");
  ValueId w = g.add_constant("w", weight());
  if (form != Form::kSplitColumns) {
    g.set_outputs({g.add(OpKind::kMatMul, {rows, w})});
    return g;
  }
  // The same product as two column blocks, concatenated.
  Tensor full = weight();
  std::vector<double> left, right;
  for (int64_t r = 0; r < kWidth; ++r)
    for (int64_t c = 0; c < kOut; ++c) (c < kOut / 2 ? left : right).push_back(full.get_double(r * kOut + c));
  ValueId a = g.add(OpKind::kMatMul, {rows, g.add_constant("w0", Tensor::from_doubles(DType::kF32, {kWidth, kOut / 2}, left))});
  ValueId b =
      g.add(OpKind::kMatMul, {rows, g.add_constant("w1", Tensor::from_doubles(DType::kF32, {kWidth, kOut / 2}, right))});
  Attrs cat;
  cat.set("axis", int64_t{1});
  g.set_outputs({g.add(OpKind::kConcat, {a, b}, cat)});
  return g;
}

TEST(IntegerCut, TheSameGatherIsCutAndTheRewriteIsProven) {
  Graph a = embed_project(Form::kPlain), b = embed_project(Form::kSplitColumns);
  std::string why;
  std::optional<IntegerCut> cut = cut_integer_inputs(a, b, &why);
  ASSERT_TRUE(cut) << why;
  EXPECT_EQ(cut->frontier, 1);
  EXPECT_EQ(cut->detail, "1 value (1 Gather)");
  ASSERT_EQ(cut->original.inputs().size(), 1u);
  EXPECT_EQ(cut->original.type(cut->original.inputs()[0]), (TensorType{DType::kF32, {kTokens, kWidth}}));
  Verdict v = check_equivalence(Program(a), Program(b));
  EXPECT_TRUE(v.equivalent()) << v.summary();
  EXPECT_NE(v.reason.find("read only through the same 1 value (1 Gather)"), std::string::npos) << v.reason;
}

TEST(IntegerCut, AnotherTableOrOtherIdsAreNotCut) {
  Graph a = embed_project(Form::kPlain);
  for (Form f : {Form::kOtherTable, Form::kShiftedIds}) {
    std::string why;
    EXPECT_FALSE(cut_integer_inputs(a, embed_project(f), &why));
    EXPECT_NE(why.find("the candidate reads its integer inputs through"), std::string::npos) << why;
    EXPECT_FALSE(check_equivalence(Program(a), Program(embed_project(f))).equivalent());
  }
}

TEST(IntegerCut, AWrongFloatPartIsNotEquivalent) {
  Graph a = embed_project(Form::kPlain);
  Graph wrong = embed_project(Form::kPlain);
  // Doubles the product: same integer reading, another float function.
  ValueId out = wrong.outputs()[0];
  wrong.set_outputs({wrong.add(OpKind::kAdd, {out, out})});
  ASSERT_TRUE(cut_integer_inputs(a, wrong, nullptr));
  Verdict v = check_equivalence(Program(a), Program(wrong));
  EXPECT_FALSE(v.equivalent()) << v.summary();
}

}  // namespace
}  // namespace tessera::verifier
