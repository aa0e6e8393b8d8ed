// Typed attribute views (graph/attr_views.h): each view reads what the op
// table's schema says, applies its defaults, rejects wrong types, and every
// kind with attributes has exactly one view whose schema is the kind's.
#include "graph/attr_views.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "graph/error.h"
#include "graph/graph.h"

namespace tessera {
namespace {

bool same_schema(const std::vector<AttrSpec>& a, const std::vector<AttrSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].type != b[i].type) return false;
    if (a[i].default_value.has_value() != b[i].default_value.has_value()) return false;
    if (a[i].default_value && !attr_equal(*a[i].default_value, *b[i].default_value)) return false;
  }
  return true;
}

TEST(AttrViews, EveryKindWithAttributesHasOneExactView) {
  for (int k = 0; k < kNumOpKinds; ++k) {
    OpKind kind = static_cast<OpKind>(k);
    const OpDef& def = op_def(kind);
    int exact = 0;
    for (const AttrViewInfo& v : attr_views()) {
      if (v.family || !v.covers(kind)) continue;
      ++exact;
      EXPECT_TRUE(same_schema(v.schema(), def.attrs)) << v.name << " vs the schema of " << op_name(kind);
    }
    EXPECT_EQ(exact, def.attrs.empty() ? 0 : 1) << op_name(kind);
  }
}

TEST(AttrViews, FamilyViewsAreAPartOfEachCoveredKind) {
  int families = 0;
  for (const AttrViewInfo& v : attr_views()) {
    if (!v.family) continue;
    ++families;
    int covered = 0;
    for (int k = 0; k < kNumOpKinds; ++k) {
      OpKind kind = static_cast<OpKind>(k);
      if (!v.covers(kind)) continue;
      ++covered;
      for (const AttrSpec& s : v.schema()) {
        bool found = false;
        for (const AttrSpec& t : op_def(kind).attrs)
          found |= t.name == s.name && t.type == s.type && same_schema({s}, {t});
        EXPECT_TRUE(found) << v.name << "." << s.name << " is not an attribute of " << op_name(kind);
      }
    }
    EXPECT_GE(covered, 2) << v.name << " is a family view of fewer than two kinds";
  }
  EXPECT_GE(families, 2);
}

TEST(AttrViews, ViewNamesAreUnique) {
  std::set<std::string> names;
  for (const AttrViewInfo& v : attr_views()) EXPECT_TRUE(names.insert(v.name).second) << v.name;
}

TEST(AttrViews, DefaultsApplyWhereTheAttributeIsAbsent) {
  Attrs none;
  EXPECT_EQ(GeluAttrs::from(none).approximate, "none");
  EXPECT_FALSE(gelu_tanh_form(GeluAttrs::from(none)));
  EXPECT_EQ(SoftmaxAttrs::from(none).axis, -1);
  GemmAttrs g = GemmAttrs::from(none);
  EXPECT_EQ(g.alpha, 1.0);
  EXPECT_EQ(g.transB, 0);
  EXPECT_TRUE(std::isinf(ClipAttrs::from(none).min) && ClipAttrs::from(none).min < 0);
  EXPECT_TRUE(ReduceAttrs::from(none).axes.empty());
  EXPECT_EQ(ReduceAttrs::from(none).keepdims, 1);
  EXPECT_EQ(ConstantOfShapeAttrs::from(none).value.numel(), 1);
}

TEST(AttrViews, ReadsTheNodesValues) {
  Graph g;
  ValueId x = g.add_input("x", TensorType{DType::kF32, {2, 3}});
  Attrs a;
  a.set("approximate", std::string("tanh"));
  ValueId y = g.add(OpKind::kGelu, {x}, a);
  const Node& gelu = g.node(g.value(y).producer);
  EXPECT_TRUE(gelu_tanh_form(GeluAttrs::of(gelu)));

  Attrs t;
  t.set("perm", std::vector<int64_t>{1, 0});
  ValueId z = g.add(OpKind::kTranspose, {x}, t);
  EXPECT_EQ(TransposeAttrs::of(g.node(g.value(z).producer)).perm, (std::vector<int64_t>{1, 0}));
}

TEST(AttrViews, WrongTypeAndMissingRequiredAreRejected) {
  Attrs wrong;
  wrong.set("axis", std::string("one"));
  EXPECT_ANY_THROW(SoftmaxAttrs::from(wrong));
  Attrs missing;
  EXPECT_ANY_THROW(TransposeAttrs::from(missing));
  EXPECT_ANY_THROW(CastAttrs::from(missing));
}

TEST(AttrViews, OfRejectsAKindTheViewDoesNotCover) {
  Graph g;
  ValueId x = g.add_input("x", TensorType{DType::kF32, {2, 3}});
  ValueId y = g.add(OpKind::kRelu, {x});
  EXPECT_ANY_THROW(GeluAttrs::of(g.node(g.value(y).producer)));
  EXPECT_TRUE(WindowAttrs::covers(OpKind::kMaxPool));
  EXPECT_FALSE(WindowAttrs::covers(OpKind::kGemm));
  EXPECT_TRUE(CollectiveAttrs::covers(OpKind::kHaloExchange));
}

}  // namespace
}  // namespace tessera
