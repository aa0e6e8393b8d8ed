// Structural hashing and equality: independent of names and insertion order,
// sensitive to every attribute, constant byte, input position and output order.
#include "graph/hash.h"

#include <gtest/gtest.h>

#include <cmath>

#include "graph/error.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

using test::f32;

struct Options {
  bool reverse_insertion = false;
  std::string prefix = "";
  double alpha = 0.1;
  float bias0 = 1.0f;
  bool swap_outputs = false;
  bool swap_add_operands = false;
};

// y = LeakyRelu(x @ w, alpha) + b ; z = Neg(x @ w). Outputs (y, z).
Graph build(const Options& o) {
  Graph g;
  g.name = o.prefix + "net";
  ValueId x = g.add_input(o.prefix + "x", f32({2, 3}));
  ValueId w = g.add_constant(o.prefix + "w", Tensor::from_doubles(DType::kF32, {3, 4},
                                                                   {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  ValueId b = g.add_constant(o.prefix + "b", Tensor::from_doubles(DType::kF32, {4}, {o.bias0, 2, 3, 4}));
  Attrs lrelu;
  lrelu.set("alpha", o.alpha);
  ValueId y, z;
  if (!o.reverse_insertion) {
    ValueId m = g.add(OpKind::kMatMul, {x, w}, {}, o.prefix + "mm");
    ValueId l = g.add(OpKind::kLeakyRelu, {m}, lrelu, o.prefix + "lrelu");
    y = o.swap_add_operands ? g.add(OpKind::kAdd, {b, l}, {}, o.prefix + "add")
                            : g.add(OpKind::kAdd, {l, b}, {}, o.prefix + "add");
    z = g.add(OpKind::kNeg, {m}, {}, o.prefix + "neg");
  } else {
    // Same computation, nodes appended in another order (then rewired).
    ValueId m = g.add(OpKind::kMatMul, {x, w}, {}, o.prefix + "mm");
    z = g.add(OpKind::kNeg, {m}, {}, o.prefix + "neg");
    ValueId l = g.add(OpKind::kLeakyRelu, {m}, lrelu, o.prefix + "lrelu");
    y = o.swap_add_operands ? g.add(OpKind::kAdd, {b, l}, {}, o.prefix + "add")
                            : g.add(OpKind::kAdd, {l, b}, {}, o.prefix + "add");
  }
  g.set_outputs(o.swap_outputs ? std::vector<ValueId>{z, y} : std::vector<ValueId>{y, z});
  return g;
}

void expect_same(const Graph& a, const Graph& b) {
  EXPECT_EQ(structural_hash(a), structural_hash(b));
  EXPECT_TRUE(structurally_equal(a, b));
  EXPECT_TRUE(structurally_equal(b, a));
}

void expect_different(const Graph& a, const Graph& b) {
  EXPECT_NE(structural_hash(a), structural_hash(b));
  EXPECT_FALSE(structurally_equal(a, b));
  EXPECT_FALSE(structurally_equal(b, a));
}

TEST(HashTest, IndependentOfNamesAndInsertionOrder) {
  Graph a = build({});
  Graph b = build({.reverse_insertion = true, .prefix = "other_"});
  expect_same(a, b);
  expect_same(a, a);
}

TEST(HashTest, ValueHashesMatchAcrossEqualGraphs) {
  Graph a = build({});
  Graph b = build({.reverse_insertion = true, .prefix = "p_"});
  std::vector<uint64_t> ha = value_hashes(a), hb = value_hashes(b);
  for (const char* name : {"x", "w", "b", "mm:0", "lrelu:0", "add:0", "neg:0"})
    EXPECT_EQ(ha[*a.find_value(name)], hb[*b.find_value(std::string("p_") + name)]) << name;
  // Different computations get different hashes within one graph.
  EXPECT_NE(ha[*a.find_value("add:0")], ha[*a.find_value("neg:0")]);
  EXPECT_NE(ha[*a.find_value("w")], ha[*a.find_value("b")]);
}

TEST(HashTest, ChangingOneAttributeDiffers) { expect_different(build({}), build({.alpha = 0.2})); }

TEST(HashTest, ChangingOneConstantByteDiffers) {
  Graph a = build({});
  // 1.0f and nextafter(1.0f) differ in the lowest mantissa byte only.
  Graph b = build({.bias0 = std::nextafter(1.0f, 2.0f)});
  expect_different(a, b);
}

TEST(HashTest, OutputOrderMatters) { expect_different(build({}), build({.swap_outputs = true})); }

TEST(HashTest, OperandOrderMatters) { expect_different(build({}), build({.swap_add_operands = true})); }

TEST(HashTest, InputOrderMatters) {
  auto make = [](bool swap) {
    Graph g;
    ValueId p = g.add_input(swap ? "q" : "p", f32({2}));
    ValueId q = g.add_input(swap ? "p" : "q", f32({2}));
    // Sub(first input, second input) vs Sub(second input, first input).
    g.set_outputs({swap ? g.add(OpKind::kSub, {q, p}) : g.add(OpKind::kSub, {p, q})});
    return g;
  };
  expect_different(make(false), make(true));
}

TEST(HashTest, InputTypesArePartOfTheSignature) {
  auto make = [](Shape unused_shape) {
    Graph g;
    ValueId x = g.add_input("x", f32({2}));
    g.add_input("unused", f32(std::move(unused_shape)));
    g.set_outputs({g.add(OpKind::kRelu, {x})});
    return g;
  };
  expect_same(make({3}), make({3}));
  expect_different(make({3}), make({4}));
}

TEST(HashTest, DeadCodeIsIgnored) {
  Graph a = build({});
  Graph b = build({});
  ValueId x = *b.find_value("x");
  b.add(OpKind::kExp, {b.add(OpKind::kSin, {x}, {}, "dead1")}, {}, "dead2");
  b.add_constant("dead_const", Tensor(DType::kF32, {7}));
  expect_same(a, b);
  b.remove_dead();
  expect_same(a, b);
}

TEST(HashTest, SharingIsPartOfEquality) {
  // Relu(x) computed once and read twice vs computed twice: same values, same
  // hash, but not isomorphic; equality is the tie-breaker for the hash.
  Graph shared;
  {
    ValueId x = shared.add_input("x", f32({2}));
    ValueId r = shared.add(OpKind::kRelu, {x});
    shared.set_outputs({shared.add(OpKind::kAdd, {r, r})});
  }
  Graph twice;
  {
    ValueId x = twice.add_input("x", f32({2}));
    ValueId r1 = twice.add(OpKind::kRelu, {x});
    ValueId r2 = twice.add(OpKind::kRelu, {x});
    twice.set_outputs({twice.add(OpKind::kAdd, {r1, r2})});
  }
  EXPECT_EQ(structural_hash(shared), structural_hash(twice));
  EXPECT_FALSE(structurally_equal(shared, twice));
  EXPECT_FALSE(structurally_equal(twice, shared));
}

TEST(HashTest, SplitOutputsAreDistinguished) {
  auto make = [](int which) {
    Graph g;
    ValueId x = g.add_input("x", f32({4}));
    Attrs s;
    s.set("axis", int64_t{0});
    s.set("split", std::vector<int64_t>{2, 2});
    NodeId n = g.add_node(OpKind::kSplit, {x}, s, "split");
    g.set_outputs({g.node(n).outputs[which]});
    return g;
  };
  // Both outputs have type f32[2]: only the output index tells them apart.
  expect_different(make(0), make(1));
  expect_same(make(1), make(1));
}

TEST(HashTest, ConstantsCompareByTypeAndBytes) {
  auto make = [](Tensor c) {
    Graph g;
    ValueId x = g.add_input("x", f32({2}));
    ValueId k = g.add_constant("k", std::move(c));
    g.set_outputs({g.add(OpKind::kMul, {x, k})});
    return g;
  };
  Tensor one = Tensor::from_doubles(DType::kF32, {2}, {1, 1});
  expect_same(make(one), make(Tensor::from_doubles(DType::kF32, {2}, {1, 1})));
  expect_different(make(one), make(Tensor::from_doubles(DType::kF32, {1, 2}, {1, 1})));
  // -0.0 and 0.0 compare equal as numbers but are different constants.
  expect_different(make(Tensor::from_doubles(DType::kF32, {2}, {0, 0})),
                   make(Tensor::from_doubles(DType::kF32, {2}, {-0.0, 0})));
}

TEST(HashTest, DifferentInputCountsDiffer) {
  Graph a;
  ValueId x = a.add_input("x", f32({2}));
  a.set_outputs({x});
  Graph b = a;
  b.add_input("y", f32({2}));
  expect_different(a, b);
  Graph c = a;
  c.set_outputs({x, x});
  expect_different(a, c);
}

TEST(HashTest, InputAndConstantAreNotEqual) {
  Graph a;
  a.set_outputs({a.add_input("x", f32({2}))});
  Graph b;
  b.add_input("x", f32({2}));
  b.set_outputs({b.add_constant("c", Tensor(DType::kF32, {2}))});
  EXPECT_FALSE(structurally_equal(a, b));
  EXPECT_NE(structural_hash(a), structural_hash(b));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A tensor's hash is kept once computed: a write through mutable_data()
// (set_double) and a reshape forget it; a copy shares it with the data.
TEST(TensorHash, KeptUntilTheDataOrShapeChanges) {
  Tensor t = Tensor::from_doubles(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  uint64_t h = t.hash();
  Tensor copy = t;
  EXPECT_EQ(copy.hash(), h);
  t.set_double(4, 7);
  EXPECT_NE(t.hash(), h);
  EXPECT_EQ(t.hash(), Tensor::from_doubles(DType::kF32, {2, 3}, {1, 2, 3, 4, 7, 6}).hash());
  EXPECT_EQ(copy.hash(), h);  // the copy kept its own data
  Tensor r = copy.reshaped({3, 2});
  EXPECT_NE(r.hash(), h);
  EXPECT_EQ(r.hash(), Tensor::from_doubles(DType::kF32, {3, 2}, {1, 2, 3, 4, 5, 6}).hash());
}

}  // namespace
}  // namespace tessera
