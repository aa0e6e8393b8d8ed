// The op table's contract: every kind listed in ops.def has a name that maps
// back to it, a sane schema, shape inference and all three reference kernels,
// and the elementwise flag and linearity the rest of Tessera relies on.
#include "graph/op.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "graph/error.h"
#include "graph/graph.h"
#include "tests/graph/op_cases.h"

namespace tessera {
namespace {

std::vector<OpKind> all_kinds() {
  std::vector<OpKind> kinds;
  for (int i = 0; i < kNumOpKinds; ++i) kinds.push_back(static_cast<OpKind>(i));
  return kinds;
}

// Kinds whose ops.def family is Elementwise.
std::set<OpKind> elementwise_family() {
  std::set<OpKind> s;
#define TESSERA_OP(name, family) \
  if (std::string(#family) == "Elementwise") s.insert(OpKind::k##name);
#include "graph/ops.def"
#undef TESSERA_OP
  return s;
}

TEST(OpTest, NamesRoundTrip) {
  std::set<std::string> names;
  for (OpKind k : all_kinds()) {
    std::string name = op_name(k);
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    ASSERT_TRUE(op_from_name(name).has_value()) << name;
    EXPECT_EQ(*op_from_name(name), k) << name;
    EXPECT_EQ(op_def(k).kind, k) << name;
  }
  EXPECT_EQ(op_name(OpKind::kConv), std::string("Conv"));
  EXPECT_FALSE(op_from_name("conv").has_value());  // names are case-sensitive, as in ONNX
  EXPECT_FALSE(op_from_name("").has_value());
  EXPECT_FALSE(op_from_name("NotAnOp").has_value());
}

// The kinds missing a piece, by name, so the failure says which are unfinished.
TEST(OpTest, EveryKindIsImplemented) {
  std::vector<std::string> missing;
  for (OpKind k : all_kinds()) {
    const OpDef& d = op_def(k);
    std::string what;
    if (!d.infer) what += " infer";
    if (!d.eval_f32) what += " eval_f32";
    if (!d.eval_f64) what += " eval_f64";
    if (!d.eval_zp) what += " eval_zp";
    if (!what.empty()) missing.push_back(std::string(op_name(k)) + ":" + what);
  }
  std::string list;
  for (const std::string& m : missing) list += "\n  " + m;
  EXPECT_TRUE(missing.empty()) << missing.size() << " op kinds are incomplete:" << list;
}

TEST(OpTest, SchemasAreWellFormed) {
  for (OpKind k : all_kinds()) {
    const OpDef& d = op_def(k);
    const char* name = op_name(k);
    EXPECT_GE(d.min_inputs, 0) << name;
    EXPECT_TRUE(d.max_inputs == -1 || d.max_inputs >= d.min_inputs) << name;
    EXPECT_GE(d.min_outputs, 1) << name;
    EXPECT_TRUE(d.max_outputs == -1 || d.max_outputs >= d.min_outputs) << name;
    std::set<std::string> attr_names;
    for (const AttrSpec& spec : d.attrs) {
      EXPECT_FALSE(spec.name.empty()) << name;
      EXPECT_TRUE(attr_names.insert(spec.name).second) << name << " declares '" << spec.name << "' twice";
      if (!spec.default_value) continue;
      EXPECT_EQ(attr_type_of(*spec.default_value), spec.type)
          << name << "." << spec.name << " default has type " << attr_type_name(attr_type_of(*spec.default_value));
    }
  }
}

TEST(OpTest, FamilyIsTheOpsDefColumn) {
  std::set<OpKind> family = elementwise_family();
  EXPECT_TRUE(family.count(OpKind::kAdd) && family.count(OpKind::kRelu) && family.count(OpKind::kWhere));
  for (OpKind k : all_kinds()) {
    EXPECT_EQ(op_def(k).elementwise(), family.count(k) == 1) << op_name(k);
    EXPECT_EQ(op_def(k).is_collective(), std::string(op_family_name(op_def(k).family)) == "collective") << op_name(k);
  }
  EXPECT_TRUE(op_def(OpKind::kAllReduce).is_collective());
  EXPECT_FALSE(op_def(OpKind::kMatMul).is_collective());
  EXPECT_EQ(op_def(OpKind::kMatMul).family, OpFamily::kNn);
  EXPECT_EQ(op_def(OpKind::kGather).family, OpFamily::kMovement);
}

// What the element-wise family promises: each output element reads its
// inputs at its own position (numpy broadcasting), nothing else.
TEST(OpTest, ElementwiseFamilyReadsOneToOne) {
  int seen = 0;
  for (const testing::OpCase& c : testing::op_cases(1)) {
    const Node& n = c.graph.node(c.node);
    if (!op_def(n.kind).elementwise()) continue;
    ++seen;
    DimMap m = dim_map(c.graph, n);
    for (const Factor& f : m.factors) EXPECT_EQ(f.kind, FactorKind::kPass) << c.name;
    ASSERT_EQ(m.outputs.size(), 1u) << c.name;
    ASSERT_EQ(m.outputs[0].size(), 1u) << c.name;
    const Piece& p = m.outputs[0][0];
    for (const Read& r : p.reads)
      for (const DimExpr& e : r.dims) {
        EXPECT_EQ(e.form, DimForm::kAffine) << c.name;
        EXPECT_LE(e.terms.size(), 1u) << c.name;
        EXPECT_EQ(e.offset, 0) << c.name;
        EXPECT_FALSE(e.guarded) << c.name;
        if (!e.terms.empty())
          EXPECT_NE(std::find(p.dims.begin(), p.dims.end(), e), p.dims.end()) << c.name << " reads a dim it does not write";
      }
  }
  EXPECT_GT(seen, 40);
}

TEST(OpTest, ViewsAreTheReshapeFamilyAndIdentity) {
  std::set<OpKind> views;
  for (OpKind k : all_kinds())
    if (op_def(k).is_view) views.insert(k);
  EXPECT_EQ(views, (std::set<OpKind>{OpKind::kIdentity, OpKind::kReshape, OpKind::kFlatten, OpKind::kSqueeze,
                                     OpKind::kUnsqueeze}));
}

TEST(OpTest, ValidateAttrsFillsDefaultsAndRejectsStrangers) {
  Attrs a;
  validate_attrs(OpKind::kLeakyRelu, a);
  EXPECT_DOUBLE_EQ(a.f("alpha"), 0.01);
  Attrs b;
  b.set("alpha", int64_t{1});
  EXPECT_THROW(validate_attrs(OpKind::kLeakyRelu, b), Error);
  Attrs c;
  c.set("beta", 1.0);
  EXPECT_THROW(validate_attrs(OpKind::kLeakyRelu, c), Error);
  Attrs d;
  EXPECT_THROW(validate_attrs(OpKind::kTranspose, d), Error);  // perm is required
}

// Linearity of a node built in a small graph.
Linearity linearity_of(OpKind kind, std::vector<TensorType> inputs, Attrs attrs = {}) {
  Graph g;
  std::vector<ValueId> ins;
  for (size_t i = 0; i < inputs.size(); ++i) ins.push_back(g.add_input("in" + std::to_string(i), inputs[i]));
  NodeId n = g.add_node(kind, ins, std::move(attrs));
  const OpDef& d = op_def(kind);
  return d.linearity ? d.linearity(g.node(n)) : Linearity{};
}

TEST(OpTest, LinearityOfRepresentativeOps) {
  TensorType m{DType::kF32, {2, 2}};
  Linearity mm = linearity_of(OpKind::kMatMul, {m, m});
  EXPECT_EQ(mm.inputs_mask, 3u);
  EXPECT_TRUE(mm.separately);
  Linearity mul = linearity_of(OpKind::kMul, {m, m});
  EXPECT_EQ(mul.inputs_mask, 3u);
  EXPECT_TRUE(mul.separately);
  Linearity add = linearity_of(OpKind::kAdd, {m, m});
  EXPECT_EQ(add.inputs_mask, 3u);
  EXPECT_FALSE(add.separately);
  EXPECT_FALSE(linearity_of(OpKind::kRelu, {m}).any());
  EXPECT_FALSE(linearity_of(OpKind::kExp, {m}).any());
  Attrs perm;
  perm.set("perm", std::vector<int64_t>{1, 0});
  EXPECT_EQ(linearity_of(OpKind::kTranspose, {m}, perm).inputs_mask, 1u);
  Attrs ar;
  ar.set("mesh_axis", std::string("tp"));
  ar.set("group_size", int64_t{2});
  EXPECT_EQ(linearity_of(OpKind::kAllReduce, {m}, ar).inputs_mask, 1u);
}

// The rows the cost model and the verifier read (op_flops, the value-range
// transfer, orders_values), on small graphs whose counts are worked by hand.
TEST(OpTest, FlopsRowsCountByHand) {
  Graph g;
  ValueId a = g.add_input("a", TensorType{DType::kF32, {2, 3}});
  ValueId b = g.add_input("b", TensorType{DType::kF32, {3, 4}});
  // (Looked up after the adds: adding a node may move the others.)
  auto node_of = [&](ValueId v) -> const Node& { return g.node(g.value(v).producer); };
  ValueId mm = g.add(OpKind::kMatMul, {a, b});
  EXPECT_EQ(op_flops(g, node_of(mm)), 2 * 8 * 3);  // a multiply-add per output element and k
  ValueId sm = g.add(OpKind::kSoftmax, {mm});
  EXPECT_EQ(op_flops(g, node_of(sm)), 5 * 8);
  ValueId rs = g.add(OpKind::kReduceSum, {mm});
  EXPECT_EQ(op_flops(g, node_of(rs)), 8);
  ValueId am = g.add(OpKind::kArgMax, {mm});
  EXPECT_EQ(op_flops(g, node_of(am)), 2 * 8);  // a compare and an index select per element read
  ValueId gelu = g.add(OpKind::kGelu, {mm});
  EXPECT_EQ(op_flops(g, node_of(gelu)), 5 * 8);  // 4 operations and one erf per element
  Attrs t;
  t.set("perm", std::vector<int64_t>{1, 0});
  ValueId tr = g.add(OpKind::kTranspose, {mm}, t);
  EXPECT_EQ(op_flops(g, node_of(tr)), 0);
}

TEST(OpTest, ValueRangeRowsOfRepresentativeOps) {
  EXPECT_EQ(op_def(OpKind::kReshape).copies_inputs, 1u);
  EXPECT_EQ(op_def(OpKind::kConcat).copies_inputs, ~0u);
  EXPECT_EQ(op_def(OpKind::kPad).copies_inputs, 0u);  // the pad value is new
  EXPECT_EQ(op_def(OpKind::kAdd).copies_inputs, 0u);
  EXPECT_NE(op_def(OpKind::kGather).indexed_axis, nullptr);
  EXPECT_EQ(op_def(OpKind::kScatterND).indexed_axis, nullptr);

  Graph g;
  ValueId x = g.add_input("x", TensorType{DType::kF32, {4, 3}});
  ValueId i = g.add_input("i", TensorType{DType::kI64, {4, 1}});
  ValueId u = g.add_input("u", TensorType{DType::kF32, {4, 3}});
  Attrs add;
  add.set("reduction", std::string("add"));
  NodeId summed = g.value(g.add(OpKind::kScatterND, {x, i, u}, add)).producer;
  NodeId copied = g.value(g.add(OpKind::kScatterND, {x, i, u})).producer;
  const OpDef& scatter = op_def(OpKind::kScatterND);
  ASSERT_NE(scatter.copies_if, nullptr);
  EXPECT_FALSE(scatter.copies_if(g, g.node(summed)));
  EXPECT_TRUE(scatter.copies_if(g, g.node(copied)));
}

TEST(OpTest, OrdersValuesMarksComparisons) {
  for (OpKind k : {OpKind::kMax, OpKind::kLess, OpKind::kArgMax, OpKind::kMaxPool, OpKind::kClip})
    EXPECT_TRUE(op_def(k).orders_values) << op_name(k);
  for (OpKind k : {OpKind::kAdd, OpKind::kMatMul, OpKind::kReduceSum, OpKind::kAveragePool, OpKind::kRelu})
    EXPECT_FALSE(op_def(k).orders_values) << op_name(k);
}

}  // namespace
}  // namespace tessera
