// An If whose condition is a constant at import becomes the branch it
// selects (onnx_import/if_branch.cc); --input-value and --input-shape globs
// (onnx_import.cc), with the errors each gives.
#include <gtest/gtest.h>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "onnx_import/onnx_import.h"
#include "tests/onnx_import/model_builder.h"

namespace tessera {
namespace if_branch_test {

using testing::ModelBuilder;

Error import_error(ModelBuilder& b, const ImportOptions& options) {
  try {
    import_onnx_model(b.model(), options, ".", "if.onnx");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "import succeeded";
  return Error(ErrorKind::kInternal, "no error");
}

bool has(const Error& e, const std::string& s) { return std::string(e.what()).find(s) != std::string::npos; }

onnx::GraphProto& branch(onnx::NodeProto& node, const std::string& attr) {
  auto* a = node.add_attribute();
  a->set_name(attr);
  a->set_type(onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name(attr);
  return *a->mutable_g();
}

onnx::NodeProto& add_node(onnx::GraphProto& g, const std::string& op, std::vector<std::string> ins,
                          std::vector<std::string> outs, const std::string& name) {
  auto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& s : ins) n->add_input(s);
  for (auto& s : outs) n->add_output(s);
  return *n;
}

// y = If(c) then (x + w) * 2 else x - w, where w = Relu(x0) is computed by
// an outer node that comes after the If in the file, and each branch names
// its result as the If's output `y` (as optimum's merged decoder does),
// with an initializer of its own named alike in both branches.
ModelBuilder if_model(bool cond_is_input = true) {
  ModelBuilder b(17);
  b.input("x", {2, 3}).input("x0", {2, 3});
  if (cond_is_input) b.input("c", {1}, onnx::TensorProto::BOOL);
  b.output("y");
  onnx::NodeProto& node = b.node("If", {"c"}, {"y"}, "optimum::if");
  onnx::GraphProto& then_g = branch(node, "then_branch");
  auto* two = then_g.add_initializer();
  two->set_name("k");
  two->set_data_type(onnx::TensorProto::FLOAT);
  two->add_float_data(2.0f);
  add_node(then_g, "Add", {"x", "w"}, {"sum"}, "then/add");
  add_node(then_g, "Mul", {"sum", "k"}, {"y"}, "then/mul");
  then_g.add_output()->set_name("y");
  onnx::GraphProto& else_g = branch(node, "else_branch");
  auto* one = else_g.add_initializer();
  one->set_name("k");
  one->set_data_type(onnx::TensorProto::FLOAT);
  one->add_float_data(1.0f);
  add_node(else_g, "Sub", {"x", "w"}, {"diff"}, "else/sub");
  add_node(else_g, "Mul", {"diff", "k"}, {"y"}, "else/mul");
  else_g.add_output()->set_name("y");
  b.node("Relu", {"x0"}, {"w"}, "relu");
  return b;
}

std::vector<float> run(const Graph& g) {
  Tensor x = Tensor::from_doubles(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor x0 = Tensor::from_doubles(DType::kF32, {2, 3}, {-1, 1, -2, 2, -3, 3});
  std::vector<Tensor> out = evaluate(g, {x, x0}, Precision::kF32);
  std::vector<float> v;
  for (double d : out.at(0).to_doubles()) v.push_back(static_cast<float>(d));
  return v;
}

TEST(IfBranch, InputValueSelectsTheBranch) {
  for (const char* value : {"1", "true", "0", "false"}) {
    ModelBuilder b = if_model();
    ImportOptions o;
    o.input_values["c"] = value;
    Graph g = import_onnx_model(b.model(), o, ".", "if.onnx");
    ASSERT_EQ(g.inputs().size(), 2u) << "c is no longer an input";
    bool then = std::string(value) == "1" || std::string(value) == "true";
    // relu(x0) = {0, 1, 0, 2, 0, 3}
    std::vector<float> want = then ? std::vector<float>{2, 6, 6, 12, 10, 18} : std::vector<float>{1, 1, 3, 2, 5, 3};
    EXPECT_EQ(run(g), want) << value;
    EXPECT_EQ(g.value(g.outputs()[0]).name, "y");
    // The branch's nodes keep their names.
    bool found = false;
    for (NodeId n = 0; n < g.num_nodes(); ++n) found = found || g.node(n).name == (then ? "then/add" : "else/sub");
    EXPECT_TRUE(found);
  }
}

TEST(IfBranch, ConditionFoldedFromConstants) {
  ModelBuilder b = if_model(false);
  b.init_f32("a", {}, {3.0f});
  b.init_f32("b", {}, {2.0f});
  b.node("Greater", {"a", "b"}, {"c"}, "cond");
  Graph g = import_onnx_model(b.model(), {}, ".", "if.onnx");
  EXPECT_EQ(run(g), (std::vector<float>{2, 6, 6, 12, 10, 18}));
}

TEST(IfBranch, ConditionNotConstantIsOneLine) {
  ModelBuilder b = if_model();
  Error e = import_error(b, {});
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(e.context().file, "if.onnx");
  EXPECT_EQ(e.context().node, "optimum::if");
  EXPECT_EQ(e.context().op, "If");
  EXPECT_TRUE(has(e, "the condition 'c' is not a constant at import")) << e.what();
  EXPECT_TRUE(has(e, "fix it with --input-value c=0 or =1")) << e.what();
  EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);

  // Computed at run time from an input: the way out names the flag.
  ModelBuilder computed = if_model(false);
  computed.input("n", {1});
  computed.init_f32("zero", {1}, {0.0f});
  computed.node("Greater", {"n", "zero"}, {"c"}, "cond");
  Error e2 = import_error(computed, {});
  EXPECT_TRUE(has(e2, "fix the inputs it is computed from with --input-value")) << e2.what();
}

TEST(IfBranch, BranchErrorsNameTheBranchNode) {
  ModelBuilder b = if_model();
  b.model().mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g()->mutable_node(0)->set_op_type("Frob");
  ImportOptions o;
  o.input_values["c"] = "1";
  Error e = import_error(b, o);
  EXPECT_EQ(e.context().node, "then/add");
  EXPECT_TRUE(has(e, "unknown op 'Frob'")) << e.what();
}

TEST(InputValue, Errors) {
  struct Case {
    std::string name, value, words;
  } cases[] = {
      {"nope", "1", "--input-value names 'nope', which is not an input of the model"},
      {"c", "maybe", "--input-value c=maybe: input 'c' is bool[1]: give 0, 1, true or false"},
      {"c", "2", "give 0, 1, true or false"},
      {"i", "1.5", "--input-value i=1.5: input 'i' is i64[1]: give an integer"},
      {"x", "abc", "--input-value x=abc: 'abc' is not a number"},
      {"s", "300", "300 does not fit input 's' (i8[1])"},
  };
  for (const Case& c : cases) {
    ModelBuilder b = if_model();
    b.input("i", {1}, onnx::TensorProto::INT64).input("s", {1}, onnx::TensorProto::INT8);
    b.node("Identity", {"i"}, {"i_out"}, "id_i");
    b.node("Identity", {"s"}, {"s_out"}, "id_s");
    b.output("i_out").output("s_out");
    ImportOptions o;
    if (c.name != "c") o.input_values["c"] = "1";
    o.input_values[c.name] = c.value;
    Error e = import_error(b, o);
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    EXPECT_TRUE(has(e, c.words)) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  ImportOptions o;
  EXPECT_THROW(parse_input_value_flag("use_cache_branch", o), Error);
  parse_input_value_flag("use_cache_branch=1", o);
  EXPECT_EQ(o.input_values.at("use_cache_branch"), "1");
}

TEST(InputValue, FillsAFloatInput) {
  ModelBuilder b(17);
  b.input("x", {2}).input("scale", {2}).output("y");
  b.node("Mul", {"x", "scale"}, {"y"}, "mul");
  ImportOptions o;
  o.input_values["scale"] = "-0.5";
  Graph g = import_onnx_model(b.model(), o, ".", "mul.onnx");
  ASSERT_EQ(g.inputs().size(), 1u);
  std::vector<Tensor> out = evaluate(g, {Tensor::from_doubles(DType::kF32, {2}, {2, 4})}, Precision::kF32);
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{-1, -2}));
}

TEST(InputShapeGlob, FixesEveryInputItMatches) {
  ModelBuilder b(17);
  b.input("past.0.key", {1, -1}, onnx::TensorProto::FLOAT, "past").input("past.0.value", {1, -1}, onnx::TensorProto::FLOAT, "past");
  b.output("y");
  b.node("Add", {"past.0.key", "past.0.value"}, {"y"}, "add");
  ImportOptions o;
  parse_input_shape_flag("past.*=1x5", o);
  Graph g = import_onnx_model(b.model(), o, ".", "glob.onnx");
  EXPECT_EQ(g.type(g.inputs()[0]).shape, (Shape{1, 5}));
  EXPECT_EQ(g.type(g.inputs()[1]).shape, (Shape{1, 5}));
  // An exact name wins over a glob (both give the same shape here: the
  // Add needs it).
  o.input_shapes["past.0.key"] = {1, 5};
  EXPECT_NO_THROW(import_onnx_model(b.model(), o, ".", "glob.onnx"));

  ImportOptions none;
  parse_input_shape_flag("cache.*=1x5", none);
  Error e = import_error(b, none);
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_TRUE(has(e, "--input-shape 'cache.*' matches no input of the model")) << e.what();

  ImportOptions two;
  parse_input_shape_flag("past.*=1x5", two);
  parse_input_shape_flag("*.key=1x5", two);
  Error e2 = import_error(b, two);
  EXPECT_TRUE(has(e2, "input 'past.0.key' matches both")) << e2.what();
}

TEST(InputShapeGlob, Match) {
  EXPECT_TRUE(glob_match("past_key_values.*", "past_key_values.0.key"));
  EXPECT_TRUE(glob_match("*.key", "past_key_values.11.key"));
  EXPECT_TRUE(glob_match("p*s.*.v*", "past_key_values.3.value"));
  EXPECT_FALSE(glob_match("past_key_values.*", "present.0.key"));
  EXPECT_FALSE(glob_match("*.key", "past_key_values.0.value"));
  EXPECT_TRUE(glob_match("*", ""));
}

}  // namespace if_branch_test
}  // namespace tessera
