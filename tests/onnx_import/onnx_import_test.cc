// Import of ONNX's opset-dependent forms into the IR conventions, folding of
// shape arithmetic, Identity/Dropout removal, external data and input shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "onnx_import/onnx_import.h"
#include "tests/onnx_import/model_builder.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::ModelBuilder;

Graph import(ModelBuilder& b, ImportOptions options = {}, const std::string& dir = ".") {
  return import_onnx_model(b.model(), options, dir, "test.onnx");
}

// The one node of kind `kind` in g (fails the test if there is not exactly one).
const Node& only(const Graph& g, OpKind kind) {
  const Node* found = nullptr;
  int count = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (g.node(n).kind == kind) found = &g.node(n), ++count;
  EXPECT_EQ(count, 1) << "nodes of kind " << op_name(kind);
  if (!found) throw std::runtime_error("missing node");
  return *found;
}

TEST(OnnxImport, SqueezeAxesAttributeBeforeOpset13AndInputFrom13) {
  ModelBuilder b11(11);
  b11.input("x", {2, 1, 3, 1}).output("y");
  ModelBuilder::attr(b11.node("Squeeze", {"x"}, {"y"}), "axes", std::vector<int64_t>{-1, 1});
  Graph g11 = import(b11);
  EXPECT_EQ(only(g11, OpKind::kSqueeze).attrs.ints("axes"), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(g11.type(g11.outputs()[0]).shape, (Shape{2, 3}));

  ModelBuilder b13(13);
  b13.input("x", {2, 1, 3, 1}).output("y");
  b13.init_i64("axes", {1});
  b13.node("Squeeze", {"x", "axes"}, {"y"});
  Graph g13 = import(b13);
  EXPECT_EQ(only(g13, OpKind::kSqueeze).attrs.ints("axes"), (std::vector<int64_t>{1}));
  EXPECT_EQ(g13.type(g13.outputs()[0]).shape, (Shape{2, 3, 1}));
  EXPECT_EQ(g13.num_values(), 2) << "the axes constant is dropped once it became an attribute";
}

TEST(OnnxImport, ReduceMeanAxesAttributeAtOpset13AndInputAt18) {
  ModelBuilder b13(13);
  b13.input("x", {2, 3, 4}).output("y");
  auto& n13 = b13.node("ReduceMean", {"x"}, {"y"});
  ModelBuilder::attr(n13, "axes", std::vector<int64_t>{1});
  ModelBuilder::attr(n13, "keepdims", int64_t{0});
  Graph g13 = import(b13);
  EXPECT_EQ(only(g13, OpKind::kReduceMean).attrs.ints("axes"), (std::vector<int64_t>{1}));
  EXPECT_EQ(g13.type(g13.outputs()[0]).shape, (Shape{2, 4}));

  ModelBuilder b18(18);
  b18.input("x", {2, 3, 4}).output("y");
  b18.init_i64("axes", {-1});
  b18.node("ReduceMean", {"x", "axes"}, {"y"});
  Graph g18 = import(b18);
  EXPECT_EQ(only(g18, OpKind::kReduceMean).attrs.ints("axes"), (std::vector<int64_t>{-1}));
  EXPECT_EQ(g18.type(g18.outputs()[0]).shape, (Shape{2, 3, 1}));
}

TEST(OnnxImport, ReduceSumNoopWithEmptyAxesIsAnAlias) {
  ModelBuilder b(13);
  b.input("x", {2, 3}).output("y");
  ModelBuilder::attr(b.node("ReduceSum", {"x"}, {"r"}), "noop_with_empty_axes", int64_t{1});
  b.node("Relu", {"r"}, {"y"});
  Graph g = import(b);
  EXPECT_EQ(g.num_nodes(), 1);
  EXPECT_EQ(g.node(0).kind, OpKind::kRelu);
}

TEST(OnnxImport, SplitSizesInputAtOpset13AndNumOutputsAt18) {
  ModelBuilder b13(13);
  b13.input("x", {7, 2}).output("a").output("b");
  b13.init_i64("split", {5, 2});
  b13.node("Split", {"x", "split"}, {"a", "b"});
  Graph g13 = import(b13);
  EXPECT_EQ(only(g13, OpKind::kSplit).attrs.ints("split"), (std::vector<int64_t>{5, 2}));

  ModelBuilder b18(18);
  b18.input("x", {7, 2}).output("a").output("b").output("c");
  ModelBuilder::attr(b18.node("Split", {"x"}, {"a", "b", "c"}), "num_outputs", int64_t{3});
  Graph g18 = import(b18);
  EXPECT_EQ(only(g18, OpKind::kSplit).attrs.ints("split"), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(g18.type(g18.outputs()[2]).shape, (Shape{1, 2}));
}

TEST(OnnxImport, PadInputsAtOpset13AndAxesAt18) {
  ModelBuilder b13(13);
  b13.input("x", {2, 3}).output("y");
  b13.init_i64("pads", {0, 1, 0, 2});
  b13.init_f32("v", {}, {1.5f});
  b13.node("Pad", {"x", "pads", "v"}, {"y"});
  Graph g13 = import(b13);
  const Node& p13 = only(g13, OpKind::kPad);
  EXPECT_EQ(p13.attrs.ints("pads"), (std::vector<int64_t>{0, 1, 0, 2}));
  EXPECT_DOUBLE_EQ(p13.attrs.f("value"), 1.5);
  EXPECT_EQ(g13.type(g13.outputs()[0]).shape, (Shape{2, 6}));

  ModelBuilder b18(18);
  b18.input("x", {2, 3, 4}).output("y");
  b18.init_i64("pads", {1, 2, 3, 4});  // begins then ends for axes (-1, 0)
  b18.node("Pad", {"x", "pads", "", "axes"}, {"y"});
  b18.init_i64("axes", {-1, 0});
  Graph g18 = import(b18);
  EXPECT_EQ(only(g18, OpKind::kPad).attrs.ints("pads"), (std::vector<int64_t>{2, 0, 1, 4, 0, 3}));
  EXPECT_EQ(g18.type(g18.outputs()[0]).shape, (Shape{8, 3, 8}));
}

// torch.onnx's F.interpolate(size=...): sizes from Shape -> Slice -> Concat
// (folded at import), roi and scales omitted.
TEST(OnnxImport, ResizeSizesFromShapeArithmetic) {
  ModelBuilder b(17);
  b.input("x", {1, 2, 3, 5}).output("y");
  b.init_i64("st", {0});
  b.init_i64("en", {2});
  b.init_i64("hw", {6, 10});
  b.node("Shape", {"x"}, {"s"});
  b.node("Slice", {"s", "st", "en"}, {"nc"});
  ModelBuilder::attr(b.node("Concat", {"nc", "hw"}, {"sizes"}), "axis", int64_t{0});
  auto& r = b.node("Resize", {"x", "", "", "sizes"}, {"y"});
  ModelBuilder::attr(r, "mode", std::string("linear"));
  ModelBuilder::attr(r, "coordinate_transformation_mode", std::string("half_pixel"));
  ModelBuilder::attr(r, "nearest_mode", std::string("floor"));
  ModelBuilder::attr(r, "cubic_coeff_a", -0.75f);
  Graph g = import(b);
  ASSERT_EQ(g.num_nodes(), 1);
  const Node& n = only(g, OpKind::kResize);
  EXPECT_EQ(n.attrs.ints("sizes"), (std::vector<int64_t>{1, 2, 6, 10}));
  EXPECT_EQ(n.attrs.floats("scales"), (std::vector<double>{1, 1, 2, 2}));
  EXPECT_TRUE(n.attrs.floats("roi").empty());
  EXPECT_EQ(n.attrs.s("mode"), "linear");
  EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{1, 2, 6, 10}));
}

// nn.Upsample(scale_factor=...): scales given, sizes floor(in x scale); older
// exporters write empty constants for the operands they do not use.
TEST(OnnxImport, ResizeScalesAndEmptyOperands) {
  ModelBuilder b(13);
  b.input("x", {1, 2, 3, 5}).output("y").output("z");
  b.init_f32("scales", {4}, {1, 1, 1.5f, 1.5f});
  b.init_f32("empty", {0}, {});
  b.init_i64("sizes", {1, 2, 4, 4});
  b.node("Resize", {"x", "", "scales"}, {"y"});
  b.node("Resize", {"x", "empty", "empty", "sizes"}, {"z"});
  Graph g = import(b);
  ASSERT_EQ(g.num_nodes(), 2);
  EXPECT_EQ(g.node(0).attrs.ints("sizes"), (std::vector<int64_t>{1, 2, 4, 7}));
  EXPECT_EQ(g.node(0).attrs.floats("scales"), (std::vector<double>{1, 1, 1.5, 1.5}));
  EXPECT_EQ(g.node(1).attrs.ints("sizes"), (std::vector<int64_t>{1, 2, 4, 4}));
  EXPECT_EQ(g.node(1).attrs.floats("scales"), (std::vector<double>{1, 1, 4.0 / 3, 0.8}));
}

// Opset 18: sizes for a subset of the axes (in any order) under a
// keep_aspect_ratio_policy, and a roi for those axes.
TEST(OnnxImport, ResizeAxesAndKeepAspectRatioAt18) {
  auto resize = [](const std::string& policy, const std::string& ctm) {
    ModelBuilder b(18);
    b.input("x", {1, 1, 4, 6}).output("y");
    b.init_i64("sizes", {9, 8});  // axis 3: 9/6 = 1.5, axis 2: 8/4 = 2
    b.init_f32("roi", {4}, {0.25f, 0.5f, 0.75f, 1.0f});
    auto& n = b.node("Resize", {"x", ctm.empty() ? "" : "roi", "", "sizes"}, {"y"});
    ModelBuilder::attr(n, "axes", std::vector<int64_t>{3, -2});
    ModelBuilder::attr(n, "keep_aspect_ratio_policy", policy);
    if (!ctm.empty()) ModelBuilder::attr(n, "coordinate_transformation_mode", ctm);
    Graph g = import(b);
    return g.node(0).attrs;
  };
  Attrs smaller = resize("not_larger", "");
  EXPECT_EQ(smaller.ints("sizes"), (std::vector<int64_t>{1, 1, 6, 9}));
  EXPECT_EQ(smaller.floats("scales"), (std::vector<double>{1, 1, 1.5, 1.5}));
  Attrs larger = resize("not_smaller", "");
  EXPECT_EQ(larger.ints("sizes"), (std::vector<int64_t>{1, 1, 8, 12}));
  EXPECT_EQ(larger.floats("scales"), (std::vector<double>{1, 1, 2, 2}));
  Attrs crop = resize("stretch", "tf_crop_and_resize");
  EXPECT_EQ(crop.ints("sizes"), (std::vector<int64_t>{1, 1, 8, 9}));
  // Starts then ends per axis; the roi lists axis 3 first, as `axes` does.
  EXPECT_EQ(crop.floats("roi"), (std::vector<double>{0, 0, 0.5, 0.25, 1, 1, 1.0, 0.75}));
}

TEST(OnnxImport, ClipBoundsFromAttributesAtOpset6AndInputsFrom11) {
  ModelBuilder b6(6);
  b6.input("x", {4}).output("y");
  auto& n6 = b6.node("Clip", {"x"}, {"y"});
  ModelBuilder::attr(n6, "min", -1.0f);
  ModelBuilder::attr(n6, "max", 2.0f);
  Graph g6 = import(b6);
  EXPECT_DOUBLE_EQ(only(g6, OpKind::kClip).attrs.f("min"), -1.0);
  EXPECT_DOUBLE_EQ(only(g6, OpKind::kClip).attrs.f("max"), 2.0);

  ModelBuilder b11(11);
  b11.input("x", {4}).output("y");
  b11.init_f32("hi", {}, {6.0f});
  b11.node("Clip", {"x", "", "hi"}, {"y"});
  Graph g11 = import(b11);
  EXPECT_TRUE(std::isinf(only(g11, OpKind::kClip).attrs.f("min")));
  EXPECT_DOUBLE_EQ(only(g11, OpKind::kClip).attrs.f("max"), 6.0);
}

TEST(OnnxImport, ReshapeResolvesZeroAndMinusOne) {
  ModelBuilder b(14);
  b.input("x", {2, 3, 4}).output("y");
  b.init_i64("shape", {0, -1});
  b.node("Reshape", {"x", "shape"}, {"y"});
  Graph g = import(b);
  EXPECT_EQ(only(g, OpKind::kReshape).attrs.ints("shape"), (std::vector<int64_t>{2, 12}));
}

TEST(OnnxImport, ConvAutoPadSameUpperBecomesExplicitPads) {
  ModelBuilder b(17);
  b.input("x", {1, 2, 5, 6}).output("y");
  std::vector<float> w(3 * 2 * 3 * 3, 0.5f);
  b.init_f32("w", {3, 2, 3, 3}, w);
  auto& n = b.node("Conv", {"x", "w"}, {"y"});
  ModelBuilder::attr(n, "auto_pad", std::string("SAME_UPPER"));
  ModelBuilder::attr(n, "strides", std::vector<int64_t>{2, 2});
  Graph g = import(b);
  const Node& conv = only(g, OpKind::kConv);
  // H: out 3, total pad (3-1)*2+3-5 = 2 -> 1,1. W: out 3, total (3-1)*2+3-6 = 1 -> 0 before, 1 after.
  EXPECT_EQ(conv.attrs.ints("pads"), (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_EQ(conv.attrs.ints("kernel_shape"), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(conv.attrs.ints("dilations"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{1, 3, 3, 3}));
}

TEST(OnnxImport, ShapeArithmeticFoldsIntoOneReshape) {
  // y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): what
  // torch.onnx writes for x.view(x.size(0), -1).
  ModelBuilder b(13);
  b.input("x", {2, 3, 4}).output("y");
  b.init_i64("zero", {0}, /*scalar=*/true);
  b.init_i64("ax0", {0});
  b.init_i64("minus1", {-1});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "zero"}, {"d0"});
  b.node("Unsqueeze", {"d0", "ax0"}, {"d0v"});
  ModelBuilder::attr(b.node("Concat", {"d0v", "minus1"}, {"shape"}), "axis", int64_t{0});
  b.node("Reshape", {"x", "shape"}, {"y"});
  Graph g = import(b);
  ASSERT_EQ(g.num_nodes(), 1);
  EXPECT_EQ(g.node(0).kind, OpKind::kReshape);
  EXPECT_EQ(g.node(0).attrs.ints("shape"), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(g.value(g.outputs()[0]).name, "y");
}

TEST(OnnxImport, ConstantOfShapeAndRangeFold) {
  ModelBuilder b(17);
  b.input("x", {3}).output("y");
  b.init_i64("n", {3});
  b.node("ConstantOfShape", {"n"}, {"ones"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("value");
    a.set_type(onnx::AttributeProto::TENSOR);
    a.mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a.mutable_t()->add_dims(1);
    a.mutable_t()->add_float_data(2.0f);
    return a;
  }());
  b.init_f32("start", {}, {0.0f});
  b.init_f32("limit", {}, {3.0f});
  b.init_f32("delta", {}, {1.0f});
  b.node("Range", {"start", "limit", "delta"}, {"r"});
  b.node("Mul", {"ones", "r"}, {"c"});
  b.node("Add", {"x", "c"}, {"y"});
  Graph g = import(b);
  ASSERT_EQ(g.num_nodes(), 1);
  const Node& add = only(g, OpKind::kAdd);
  const Value& c = g.value(add.inputs[1]);
  ASSERT_TRUE(c.constant.has_value());
  EXPECT_EQ(c.constant->to_doubles(), (std::vector<double>{0.0, 2.0, 4.0}));
}

TEST(OnnxImport, IdentityAndDropoutAreRemovedAndOutputNamesKept) {
  ModelBuilder b(13);
  b.input("x", {2, 2}).output("y");
  b.node("Relu", {"x"}, {"r"});
  b.node("Dropout", {"r"}, {"d", "unused_mask"});
  b.node("Identity", {"d"}, {"y"});
  Graph g = import(b);
  ASSERT_EQ(g.num_nodes(), 1);
  EXPECT_EQ(g.node(0).kind, OpKind::kRelu);
  EXPECT_EQ(g.value(g.outputs()[0]).name, "y");
  EXPECT_EQ(g.value(g.inputs()[0]).name, "x");
}

TEST(OnnxImport, NodesInAnyOrderAreSorted) {
  ModelBuilder b(13);
  b.input("x", {2}).output("y");
  b.node("Neg", {"t"}, {"y"});
  b.node("Relu", {"x"}, {"t"});
  Graph g = import(b);
  ASSERT_EQ(g.num_nodes(), 2);
  std::vector<Tensor> out = evaluate(g, {Tensor::from_doubles(DType::kF32, {2}, {-1.0, 2.0})});
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{0.0, -2.0}));
}

TEST(OnnxImport, VariadicSumAndMeanAreChainedBinaryOps) {
  ModelBuilder b(13);
  b.input("a", {2}).input("b", {2}).input("c", {2}).output("s").output("m");
  b.node("Sum", {"a", "b", "c"}, {"s"});
  b.node("Mean", {"a", "b", "c"}, {"m"});
  Graph g = import(b);
  std::vector<Tensor> out = evaluate(g, {Tensor::from_doubles(DType::kF32, {2}, {1, 2}),
                                         Tensor::from_doubles(DType::kF32, {2}, {3, 4}),
                                         Tensor::from_doubles(DType::kF32, {2}, {5, 9})});
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{9, 15}));
  EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{3, 5}));
}

TEST(OnnxImport, InputShapeOverridesDynamicDim) {
  ModelBuilder b(13);
  b.input("x", {-1, 3}).output("y");
  b.node("Relu", {"x"}, {"y"});
  ImportOptions options;
  parse_input_shape_flag("x=5x3", options);
  Graph g = import(b, options);
  EXPECT_EQ(g.type(g.inputs()[0]).shape, (Shape{5, 3}));
  EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{5, 3}));
}

TEST(OnnxImport, ParseInputShapeFlag) {
  ImportOptions o;
  parse_input_shape_flag("input_ids=1x128", o);
  EXPECT_EQ(o.input_shapes.at("input_ids"), (Shape{1, 128}));
  parse_input_shape_flag("s=scalar", o);
  EXPECT_EQ(o.input_shapes.at("s"), Shape{});
  for (const char* bad : {"x", "=1x2", "x=", "x=1xx2", "x=1x-2", "x=ax3", "x=1x2x"}) {
    try {
      parse_input_shape_flag(bad, o);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << bad;
    }
  }
}

class ExternalDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: ctest runs the tests of this fixture in parallel
    // processes, and one's remove_all must not delete the other's files.
    dir_ = fs::path(TESSERA_BINARY_DIR) /
           ("onnx_import_external_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    std::vector<float> w = {1, 2, 3, 4, 5, 6};
    std::ofstream out(dir_ / "model" / "weights.bin", std::ios::binary);
    out.write("PAD!", 4);  // the tensor starts at offset 4
    out.write(reinterpret_cast<const char*>(w.data()), 24);
  }

  ModelBuilder model(const std::string& location) {
    ModelBuilder b(13);
    b.input("x", {2, 3}).output("y");
    auto* t = b.model().mutable_graph()->add_initializer();
    t->set_name("w");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->add_dims(3);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    for (auto [k, v] : {std::pair<const char*, std::string>{"location", location}, {"offset", "4"}, {"length", "24"}}) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    b.node("Add", {"x", "w"}, {"y"});
    return b;
  }

  fs::path dir_;
};

TEST_F(ExternalDataTest, ReadsRelativeToTheModelFolder) {
  ModelBuilder b = model("weights.bin");
  std::string path = (dir_ / "model" / "m.onnx").string();
  std::ofstream(path, std::ios::binary) << b.model().SerializeAsString();
  Graph g = import_onnx_file(path);
  const Node& add = only(g, OpKind::kAdd);
  ASSERT_TRUE(g.value(add.inputs[1]).constant);
  EXPECT_EQ(g.value(add.inputs[1]).constant->to_doubles(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

// The weights are views into one mapping of the file, at their offsets: the
// import copies none of them.
TEST_F(ExternalDataTest, WeightsViewOneMappingOfTheFile) {
  ModelBuilder b = model("weights.bin");
  auto* u = b.model().mutable_graph()->add_initializer();
  *u = b.model().graph().initializer(0);
  u->set_name("u");
  u->clear_dims();
  u->add_dims(4);
  u->mutable_external_data(1)->set_value("12");  // offset: the last four floats
  u->mutable_external_data(2)->set_value("16");
  b.node("Identity", {"u"}, {"z"});
  b.output("z");
  Graph g = import_onnx_model(b.model(), {}, (dir_ / "model").string(), "m.onnx");
  ASSERT_EQ(g.outputs().size(), 2u);
  const auto& wc = g.value(only(g, OpKind::kAdd).inputs[1]).constant;
  const auto& uc = g.value(g.outputs()[1]).constant;
  const Tensor* w = wc ? &*wc : nullptr;
  const Tensor* v = uc ? &*uc : nullptr;
  ASSERT_TRUE(w && v);
  EXPECT_TRUE(w->is_view());
  EXPECT_TRUE(v->is_view());
  EXPECT_EQ(v->data() - w->data(), 8);  // offsets 12 and 4 of the same mapping
  EXPECT_EQ(v->to_doubles(), (std::vector<double>{3, 4, 5, 6}));
}

// An offset not aligned for the element type is read as a copy (a view of a
// float at an odd address would be undefined behaviour for the kernels).
TEST_F(ExternalDataTest, UnalignedOffsetIsCopied) {
  {
    std::vector<float> w = {1, 2, 3, 4, 5, 6};
    std::ofstream out(dir_ / "model" / "odd.bin", std::ios::binary);
    out.write("PA", 2);
    out.write(reinterpret_cast<const char*>(w.data()), 24);
  }
  ModelBuilder b = model("odd.bin");
  b.model().mutable_graph()->mutable_initializer(0)->mutable_external_data(1)->set_value("2");
  Graph g = import_onnx_model(b.model(), {}, (dir_ / "model").string(), "m.onnx");
  const Node& add = only(g, OpKind::kAdd);
  const Tensor& w = *g.value(add.inputs[1]).constant;
  EXPECT_FALSE(w.is_view());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % alignof(float), 0u);
  EXPECT_EQ(w.to_doubles(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

// A file shorter than a tensor's bytes is refused in one line naming both.
TEST_F(ExternalDataTest, TruncatedFileIsOneLineNamingTensorAndFile) {
  fs::resize_file(dir_ / "model" / "weights.bin", 20);
  try {
    import_onnx_model(model("weights.bin").model(), {}, (dir_ / "model").string(), "m.onnx");
    ADD_FAILURE() << "read 24 bytes at offset 4 of a 20-byte file";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph) << what;
    EXPECT_NE(what.find("initializer 'w'"), std::string::npos) << what;
    EXPECT_NE(what.find("weights.bin' is too short"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST_F(ExternalDataTest, RefusesPathsThatLeaveTheFolder) {
  fs::copy_file(dir_ / "model" / "weights.bin", dir_ / "outside.bin");
  for (std::string location : {std::string("../outside.bin"), std::string("sub/../../outside.bin"),
                               (dir_ / "outside.bin").string()}) {
    ModelBuilder b = model(location);
    try {
      import_onnx_model(b.model(), {}, (dir_ / "model").string(), "m.onnx");
      ADD_FAILURE() << "accepted " << location;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph) << e.what();
      EXPECT_NE(std::string(e.what()).find("initializer 'w'"), std::string::npos) << e.what();
    }
  }
}

TEST(OnnxImport, GraphOutputThatIsAnInputOrConstantStillWorks) {
  ModelBuilder b(13);
  b.input("x", {2}).output("y").output("k");
  b.init_f32("c", {2}, {7, 8});
  b.node("Identity", {"x"}, {"y"});
  b.node("Identity", {"c"}, {"k"});
  Graph g = import(b);
  ASSERT_EQ(g.outputs().size(), 2u);
  EXPECT_EQ(g.value(g.outputs()[0]).name, "y");
  EXPECT_EQ(g.value(g.outputs()[1]).name, "k");
  std::vector<Tensor> out = evaluate(g, {Tensor::from_doubles(DType::kF32, {2}, {1, 2})});
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{1, 2}));
  EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{7, 8}));
}

// torch.onnx's form of a static KV cache written with index_copy_: the
// position expanded over the new entry's shape, ScatterElements along the
// sequence axis (opset 17, reduction none: no attribute). The old name
// Scatter (opset 10) is the same op.
TEST(OnnxImport, ScatterElementsWritesAStaticKvCache) {
  ModelBuilder b(17);
  b.input("cache", {1, 2, 4, 2}).input("pos", {1}, onnx::TensorProto::INT64).input("kv", {1, 2, 1, 2});
  b.output("present");
  b.init_i64("one_shape", {1, 1, 1, 1});
  b.init_i64("kv_shape", {1, 2, 1, 2});
  b.node("Reshape", {"pos", "one_shape"}, {"pos4"});
  b.node("Expand", {"pos4", "kv_shape"}, {"idx"});
  ModelBuilder::attr(b.node("ScatterElements", {"cache", "idx", "kv"}, {"present"}, "write"), "axis", int64_t{2});
  Graph g = import(b);
  const Node& n = only(g, OpKind::kScatterElements);
  EXPECT_EQ(n.name, "write");
  EXPECT_EQ(n.attrs.i("axis"), 2);
  EXPECT_EQ(n.attrs.s("reduction"), "none");
  EXPECT_EQ(g.type(g.outputs()[0]), (TensorType{DType::kF32, {1, 2, 4, 2}}));
  std::vector<double> cache(16);
  for (size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<double>(i);
  std::vector<Tensor> out = evaluate(g, {Tensor::from_doubles(DType::kF32, {1, 2, 4, 2}, cache),
                                         Tensor::from_ints(DType::kI64, {1}, {-2}),
                                         Tensor::from_doubles(DType::kF32, {1, 2, 1, 2}, {-1, -2, -3, -4})});
  std::vector<double> want = cache;
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 2; ++d) want[static_cast<size_t>(h * 8 + 2 * 2 + d)] = -(1 + 2 * h + d);  // position 4 - 2
  EXPECT_EQ(out[0].to_doubles(), want);

  ModelBuilder old(10);
  old.input("x", {2, 3}).output("y");
  old.init_i64("i", {2, 0}).add_dims(1);  // [2, 1]
  old.init_f32("u", {2, 1}, {7, 8});
  ModelBuilder::attr(old.node("Scatter", {"x", "i", "u"}, {"y"}, "old"), "axis", int64_t{1});
  Graph g10 = import(old);
  EXPECT_EQ(only(g10, OpKind::kScatterElements).attrs.i("axis"), 1);
  out = evaluate(g10, {Tensor::from_doubles(DType::kF32, {2, 3}, {0, 1, 2, 3, 4, 5})});
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{0, 1, 7, 8, 4, 5}));
}

// In inference Dropout is the identity and its mask keeps every element.
TEST(OnnxImport, InferenceDropoutMaskIsAllTrue) {
  ModelBuilder b(13);
  b.input("x", {2, 3}).output("y").output("mask");
  b.node("Dropout", {"x"}, {"y", "mask"}, "drop");
  Graph g = import(b);
  ASSERT_EQ(g.outputs().size(), 2u);
  Tensor x = Tensor::from_doubles(DType::kF32, {2, 3}, {1, -2, 3, -4, 5, -6});
  std::vector<Tensor> out = evaluate(g, {x});
  EXPECT_TRUE(out[0].identical(x));
  const Value& mask = g.value(g.outputs()[1]);
  ASSERT_TRUE(mask.is_constant());
  EXPECT_EQ(mask.type, (TensorType{DType::kBool, {2, 3}}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(mask.constant->get_int(i), 1);
}

}  // namespace
}  // namespace tessera
