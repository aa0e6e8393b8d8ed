// The text form: a golden print, round trips that keep names, attributes and
// constant bytes exactly, and parse errors with their location and message.
#include "graph/text_form.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "graph/error.h"
#include "graph/hash.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

using test::f32;

Attrs conv1x1() {
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{1, 1});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("pads", std::vector<int64_t>{0, 0, 0, 0});
  a.set("dilations", std::vector<int64_t>{1, 1});
  return a;
}

Graph tiny() {
  Graph g;
  g.name = "tiny";
  ValueId x = g.add_input("x", f32({1, 2, 3, 3}));
  ValueId w = g.add_constant("w", Tensor::from_doubles(DType::kF32, {2, 2, 1, 1}, {1, 0, 0, 2}));
  g.add_constant("idx", Tensor::vector_i64({1, -1}));
  NodeId conv = g.add_node(OpKind::kConv, {x, w, kNoValue}, conv1x1(), "conv1", {"y"});
  Attrs split;
  split.set("axis", int64_t{1});
  split.set("split", std::vector<int64_t>{1, 1});
  NodeId s = g.add_node(OpKind::kSplit, {g.node(conv).outputs[0]}, split, "split0", {"a", "b"});
  Attrs lrelu;
  lrelu.set("alpha", 0.5);
  NodeId act = g.add_node(OpKind::kLeakyRelu, {g.node(s).outputs[0]}, lrelu, "act", {"output"});
  g.set_outputs({g.node(act).outputs[0], g.node(s).outputs[1]});
  return g;
}

// The text form's promise: same names, same structure, same text again.
Graph expect_round_trip(const Graph& g) {
  std::string text = print_graph(g);
  Graph back = parse_graph(text);
  EXPECT_EQ(print_graph(back), text);
  EXPECT_TRUE(structurally_equal(g, back)) << text;
  EXPECT_EQ(back.name, g.name);
  EXPECT_EQ(back.num_values(), g.num_values());
  EXPECT_EQ(back.num_nodes(), g.num_nodes());
  for (ValueId v = 0; v < g.num_values(); ++v) {
    std::optional<ValueId> b = back.find_value(g.value(v).name);
    EXPECT_TRUE(b.has_value()) << "lost value " << g.value(v).name;
    if (!b) continue;
    EXPECT_EQ(back.type(*b), g.type(v));
    if (g.value(v).is_constant()) {
      if (!back.value(*b).is_constant()) {
        ADD_FAILURE() << g.value(v).name << " is no longer a constant";
        continue;
      }
      EXPECT_TRUE(back.value(*b).constant->identical(*g.value(v).constant)) << g.value(v).name;
    }
  }
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    bool found = false;
    for (NodeId m = 0; m < back.num_nodes(); ++m)
      if (back.node(m).name == g.node(n).name) {
        found = true;
        EXPECT_TRUE(back.node(m).attrs == g.node(n).attrs) << g.node(n).name;
      }
    EXPECT_TRUE(found) << "lost node " << g.node(n).name;
  }
  return back;
}

using test::error_of;

TEST(TextFormTest, GoldenPrint) {
  const char* expected =
      "graph tiny {\n"
      "  input x: f32[1x2x3x3]\n"
      "  const w: f32[2x2x1x1] = hex\"0000803f000000000000000000000040\"\n"
      "  const idx: i64[2] = [1, -1]\n"
      "  y = Conv[conv1](x, w, _) {dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], "
      "strides=[1, 1]}\n"
      "  a, b = Split[split0](y) {axis=1, split=[1, 1]}\n"
      "  \"output\" = LeakyRelu[act](a) {alpha=0.5}\n"
      "  output \"output\", b\n"
      "}\n";
  EXPECT_EQ(print_graph(tiny()), expected);
}

TEST(TextFormTest, GoldenParsesBackEqual) {
  Graph back = expect_round_trip(tiny());
  EXPECT_EQ(back.node(0).inputs.size(), 3u);
  EXPECT_EQ(back.node(0).inputs[2], kNoValue);
}

TEST(TextFormTest, HandWrittenTextWithCommentsAndDefaults) {
  Graph g = parse_graph(R"(# a comment line
graph "my net" {
  input x: f32[2x3]   # trailing comment
  const k: f32[3] = [0.5, -1, 2e3]
  y = Mul(x, k)
  z = LeakyRelu[lr](y)
  output z, y
})");
  EXPECT_EQ(g.name, "my net");
  ASSERT_EQ(g.num_nodes(), 2);
  EXPECT_EQ(g.node(1).name, "lr");
  EXPECT_DOUBLE_EQ(g.node(1).attrs.f("alpha"), 0.01);  // default filled in
  EXPECT_EQ(g.value(*g.find_value("k")).constant->to_doubles(), (std::vector<double>{0.5, -1, 2000}));
  EXPECT_EQ(g.type(g.outputs()[0]), f32({2, 3}));
  expect_round_trip(g);
}

TEST(TextFormTest, RoundTripsAwkwardNames) {
  Graph g;
  g.name = "graph";
  ValueId a = g.add_input("input", f32({2}));
  ValueId b = g.add_input("with space", f32({2}));
  ValueId c = g.add_input("quote\"back\\slash\nnewline\x01", f32({2}));
  ValueId d = g.add_input("trailing:", f32({2}));
  ValueId e = g.add_input("_", f32({2}));
  ValueId f = g.add_input("/model/layer.0/attn:0", f32({2}));
  ValueId s1 = g.add(OpKind::kAdd, {a, b}, {}, "const");
  ValueId s2 = g.add(OpKind::kAdd, {c, d}, {}, "node with \"quotes\"");
  ValueId s3 = g.add(OpKind::kAdd, {e, f}, {}, "output");
  g.set_outputs({s1, s2, s3});
  std::string text = print_graph(g);
  EXPECT_NE(text.find("input /model/layer.0/attn:0: f32[2]"), std::string::npos) << text;
  EXPECT_NE(text.find("input \"trailing:\": f32[2]"), std::string::npos) << text;
  EXPECT_NE(text.find("\\x01"), std::string::npos) << text;
  expect_round_trip(g);
}

TEST(TextFormTest, RoundTripsSpecialFloatsBitExact) {
  Graph g;
  ValueId x = g.add_input("x", f32({3}));
  double payload_nan;
  uint64_t bits = 0x7ff0000000000123ull;
  std::memcpy(&payload_nan, &bits, 8);
  std::vector<double> alphas = {std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN(),
                                payload_nan, -0.0, 0.1, 1e-300, 5e-324, 1e300, 3.0, -7.25, 1.0 / 3.0};
  ValueId v = x;
  for (double alpha : alphas) {
    Attrs a;
    a.set("alpha", alpha);
    v = g.add(OpKind::kLeakyRelu, {v}, a);
  }
  Attrs clip;  // infinities
  clip.set("min", -INFINITY);
  clip.set("max", INFINITY);
  v = g.add(OpKind::kClip, {v}, clip);
  g.set_outputs({v});
  std::string text = print_graph(g);
  EXPECT_NE(text.find("alpha=nan}"), std::string::npos) << text;
  EXPECT_NE(text.find("alpha=-nan}"), std::string::npos) << text;
  EXPECT_NE(text.find("alpha=nan:0x7ff0000000000123}"), std::string::npos) << text;
  EXPECT_NE(text.find("alpha=-0.0}"), std::string::npos) << text;
  EXPECT_NE(text.find("alpha=3.0}"), std::string::npos) << text;
  EXPECT_NE(text.find("alpha=0.1}"), std::string::npos) << text;
  EXPECT_NE(text.find("{max=inf, min=-inf}"), std::string::npos) << text;
  Graph back = expect_round_trip(g);
  for (NodeId n = 0; n < static_cast<NodeId>(alphas.size()); ++n) {
    double got = back.node(n).attrs.f("alpha");
    EXPECT_EQ(std::memcmp(&got, &alphas[n], 8), 0) << "alpha " << n;
  }
}

TEST(TextFormTest, RoundTripsConstantsOfEveryDType) {
  Graph g;
  g.add_constant("f16", Tensor::from_doubles(DType::kF16, {3}, {1.0, -65504.0, 1e-7}));
  g.add_constant("bf16", Tensor::from_doubles(DType::kBF16, {2}, {3.14159, -1e30}));
  g.add_constant("f64", Tensor::from_doubles(DType::kF64, {2}, {0.1, -INFINITY}));
  g.add_constant("f32nan", Tensor::from_doubles(DType::kF32, {1}, {NAN}));
  g.add_constant("bool", Tensor::from_ints(DType::kBool, {2, 2}, {1, 0, 0, 1}));
  g.add_constant("i32", Tensor::from_ints(DType::kI32, {2}, {-2147483648LL, 7}));
  g.add_constant("i8", Tensor::from_ints(DType::kI8, {2}, {-128, 127}));
  g.add_constant("u8", Tensor::from_ints(DType::kU8, {1}, {255}));
  g.add_constant("i64", Tensor::from_ints(DType::kI64, {}, {INT64_MIN}));
  g.add_constant("empty", Tensor(DType::kF32, {0, 3}));
  std::vector<int64_t> many(100);
  for (int i = 0; i < 100; ++i) many[i] = i * 1000003;
  g.add_constant("long", Tensor::from_ints(DType::kI64, {100}, many));  // too long for a list
  std::vector<uint8_t> odd_bool = {0, 1, 2};
  g.add_constant("odd_bool", Tensor::from_bytes(DType::kBool, {3}, odd_bool));  // non-0/1 byte survives
  std::string text = print_graph(g);
  EXPECT_NE(text.find("const bool: bool[2x2] = [1, 0, 0, 1]"), std::string::npos) << text;
  EXPECT_NE(text.find("const i64: i64[] = [-9223372036854775808]"), std::string::npos) << text;
  EXPECT_NE(text.find("const odd_bool: bool[3] = hex\"000102\""), std::string::npos) << text;
  EXPECT_NE(text.find("const long: i64[100] = hex\""), std::string::npos) << text;
  EXPECT_NE(text.find("const empty: f32[0x3] = hex\"\""), std::string::npos) << text;
  expect_round_trip(g);
}

TEST(TextFormTest, RoundTripsStringAndIntsAttributes) {
  Graph g;
  ValueId x = g.add_input("x", f32({2, 4}));
  Attrs ag;
  ag.set("mesh_axis", std::string("t\"p\\\n"));
  ag.set("group_size", int64_t{2});
  ag.set("axis", int64_t{-1});
  ValueId y = g.add(OpKind::kAllGather, {x}, ag, "gather");
  Attrs gelu;
  gelu.set("approximate", std::string("tanh"));
  ValueId z = g.add(OpKind::kGelu, {y}, gelu, "gelu");
  Attrs perm;
  perm.set("perm", std::vector<int64_t>{1, 0});
  ValueId t = g.add(OpKind::kTranspose, {z}, perm, "t");
  g.set_outputs({t});
  std::string text = print_graph(g);
  EXPECT_NE(text.find("mesh_axis=\"t\\\"p\\\\\\n\""), std::string::npos) << text;
  expect_round_trip(g);
}

TEST(TextFormTest, RoundTripsTensorAttributeAndEmptyList) {
  Graph g;
  ValueId shape = g.add_constant("shape", Tensor::vector_i64({2, 3}));
  Attrs fill;
  fill.set("value", Tensor::from_doubles(DType::kF16, {1}, {1.5}));
  ValueId c = g.add(OpKind::kConstantOfShape, {shape}, fill, "fill");
  Attrs sum;
  sum.set("axes", std::vector<int64_t>{});
  ValueId s = g.add(OpKind::kReduceSum, {c}, sum, "sum");
  g.set_outputs({s});
  std::string text = print_graph(g);
  EXPECT_NE(text.find("value=f16[1] hex\"003e\""), std::string::npos) << text;
  EXPECT_NE(text.find("axes=[]"), std::string::npos) << text;
  expect_round_trip(g);
}

TEST(TextFormTest, RoundTripsMultiOutputNodesAndDeadCode) {
  Graph g;
  ValueId x = g.add_input("x", f32({2, 6}));
  ValueId scale = g.add_constant("scale", Tensor::from_doubles(DType::kF32, {6}, {1, 1, 1, 1, 1, 1}));
  NodeId ln = g.add_node(OpKind::kLayerNormalization, {x, scale}, {}, "ln", {"y", "mean", "inv_std"});
  ASSERT_EQ(g.node(ln).outputs.size(), 3u);
  g.add(OpKind::kExp, {g.node(ln).outputs[1]}, {}, "unused_exp");
  g.set_outputs({g.node(ln).outputs[2], g.node(ln).outputs[0]});
  std::string text = print_graph(g);
  EXPECT_NE(text.find("y, mean, inv_std = LayerNormalization[ln](x, scale)"), std::string::npos) << text;
  expect_round_trip(g);
}

TEST(TextFormTest, RoundTripsGraphWithoutOutputs) {
  Graph g;
  g.name = "empty";
  expect_round_trip(g);
  EXPECT_EQ(print_graph(g), "graph empty {\n  output\n}\n");
}

// ---- errors

struct ParseCase {
  const char* text;
  const char* where;    // "<text>:line:column"
  const char* message;  // a substring of the message
};

TEST(TextFormTest, ParseErrorsNameLocationAndExpectation) {
  const ParseCase cases[] = {
      {"", "<text>:1:1", "expected 'graph', got end of input"},
      {"graf g {}", "<text>:1:1", "expected 'graph', got 'graf'"},
      {"graph g {\n  input x f32[2]\n}", "<text>:2:11", "expected ':' after the input name, got 'f32'"},
      {"graph g {\n  input x: f33[2]\n}", "<text>:2:12", "expected a data type (f32, i64, ...), got 'f33'"},
      {"graph g {\n  input x: f32[2y3]\n}", "<text>:2:17", "expected 'x' or ']' in the shape, got 'y3'"},
      {"graph g {\n  input x: f32[2]\n  y = Foo(x)\n}", "<text>:3:7", "unknown op 'Foo'"},
      {"graph g {\n  input x: f32[2]\n  y = Relu(q)\n}", "<text>:3:12", "unknown value 'q'"},
      {"graph g {\n  input x: f32[2]\n  y = Relu(x\n}", "<text>:4:1", "expected ')' after the node's inputs, got '}'"},
      {"graph g {\n  input x: f32[2]\n  y = Relu(x)\n", "<text>:4:1", "expected a statement or '}', got end of input"},
      {"graph g {\n  const c: f32[2] = hex\"0000\"\n}", "<text>:2:21",
       "constant 'c' of type f32[2] needs 8 bytes, the hex string has 2"},
      {"graph g {\n  const c: i64[3] = [1, 2]\n}", "<text>:2:21",
       "constant 'c' of type i64[3] needs 3 elements, the list has 2"},
      {"graph g {\n  const c: i64[1] = [1.5]\n}", "<text>:2:22", "expected integer elements for constant 'c'"},
      {"graph g {\n  const c: i64[1] = [99999999999999999999]\n}", "<text>:2:22", "out of range"},
      {"graph \"g {}", "<text>:1:7", "unterminated string"},
      {"graph g {\n  input x: f32[2]\n  y = LeakyRelu(x) {alpha=0.1, alpha=0.2}\n}", "<text>:3:32",
       "attribute 'alpha' is given twice"},
      {"graph g {\n  input x: f32[2]\n  output x\n  y = Relu(x)\n}", "<text>:4:3",
       "expected ',' or '}' after the output list, got 'y'"},
      {"graph g {\n}\nextra", "<text>:3:1", "expected end of input after '}', got 'extra'"},
  };
  for (const ParseCase& c : cases) {
    Error e = error_of([&] { parse_graph(c.text); });
    EXPECT_EQ(e.kind(), ErrorKind::kParse) << c.text;
    EXPECT_EQ(e.context().file, c.where) << c.text << "\n" << e.what();
    EXPECT_NE(e.message().find(c.message), std::string::npos) << c.text << "\n" << e.what();
  }
}

TEST(TextFormTest, ErrorNamesTheSource) {
  Error e = error_of([] { parse_graph("graph g {\n  input x: f32[2]\n  y = Relu(\n}", "model.tsr"); });
  EXPECT_EQ(std::string(e.what()).rfind("model.tsr:4:1: expected an input value or '_', got '}'", 0), 0u)
      << e.what();
}

TEST(TextFormTest, ShapeErrorNamesTheNodeAndLocation) {
  Error e = error_of([] {
    parse_graph("graph g {\n  input a: f32[2x3]\n  input b: f32[4]\n  c = Add[bad_add](a, b)\n  output c\n}",
                "net.txt");
  });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_EQ(e.context().node, "bad_add");
  EXPECT_EQ(e.context().op, "Add");
  EXPECT_EQ(e.context().file, "net.txt:4:3");
  EXPECT_NE(std::string(e.what()).find("do not broadcast"), std::string::npos) << e.what();
}

TEST(TextFormTest, AttributeErrorsComeFromTheSchema) {
  Error unknown = error_of([] { parse_graph("graph g {\n  input x: f32[2]\n  y = Relu[r](x) {beta=1}\n}"); });
  EXPECT_EQ(unknown.context().node, "r");
  EXPECT_NE(unknown.message().find("unknown attribute 'beta'"), std::string::npos) << unknown.what();
  Error typed = error_of([] { parse_graph("graph g {\n  input x: f32[2]\n  y = LeakyRelu(x) {alpha=\"big\"}\n}"); });
  EXPECT_NE(typed.message().find("attribute 'alpha' must be float, got string"), std::string::npos) << typed.what();
  // An integer where the schema wants a float is read as that float.
  Graph g = parse_graph("graph g {\n  input x: f32[2]\n  y = LeakyRelu(x) {alpha=2}\n  output y\n}");
  EXPECT_EQ(g.node(0).attrs.f("alpha"), 2.0);
}

TEST(TextFormTest, OutputCountMustMatchTheOp) {
  Error e = error_of([] { parse_graph("graph g {\n  input x: f32[2]\n  y, z = Relu(x)\n}"); });
  EXPECT_EQ(e.kind(), ErrorKind::kParse);
  EXPECT_NE(e.message().find("Relu produces 1 outputs but the statement names 2"), std::string::npos) << e.what();
}

TEST(TextFormTest, DuplicateValueNameIsRejectedWithLocation) {
  Error e = error_of([] { parse_graph("graph g {\n  input x: f32[2]\n  x = Relu(x)\n}"); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_EQ(e.context().file, "<text>:3:3");
  EXPECT_NE(e.message().find("'x' is defined twice"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace tessera
