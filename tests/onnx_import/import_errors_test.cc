// Models the importer must refuse, with the kind and message of each error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "graph/memory_limit.h"
#include "onnx_import/onnx_import.h"
#include "tests/onnx_import/model_builder.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::ModelBuilder;

// Imports and returns the error; fails the test if the import succeeds.
Error import_error(ModelBuilder& b, ImportOptions options = {}) {
  try {
    import_onnx_model(b.model(), options, ".", "bad.onnx");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "import succeeded";
  return Error(ErrorKind::kInternal, "no error");
}

Error file_error(const std::string& path) {
  try {
    import_onnx_file(path);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "import of " << path << " succeeded";
  return Error(ErrorKind::kInternal, "no error");
}

bool has(const Error& e, const std::string& s) { return std::string(e.what()).find(s) != std::string::npos; }

fs::path temp_dir() {
  fs::path d = fs::path(TESSERA_BINARY_DIR) / "onnx_import_errors";
  fs::create_directories(d);
  return d;
}

ModelBuilder relu_model() {
  ModelBuilder b(17);
  b.input("x", {2, 3}).output("y");
  b.node("Relu", {"x"}, {"y"}, "relu");
  return b;
}

TEST(ImportErrors, MissingFile) {
  Error e = file_error((temp_dir() / "does_not_exist.onnx").string());
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_TRUE(has(e, "does_not_exist.onnx")) << e.what();
}

TEST(ImportErrors, TruncatedFile) {
  std::string bytes = relu_model().model().SerializeAsString();
  fs::path path = temp_dir() / "truncated.onnx";
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  Error e = file_error(path.string());
  EXPECT_EQ(e.kind(), ErrorKind::kParse);
  EXPECT_TRUE(has(e, "truncated.onnx: not a valid ONNX model (")) << e.what();
}

TEST(ImportErrors, NotAnOnnxFile) {
  fs::path path = temp_dir() / "text.onnx";
  std::ofstream(path) << "this is a text file, not a model\n";
  Error e = file_error(path.string());
  EXPECT_EQ(e.kind(), ErrorKind::kParse);
  EXPECT_TRUE(has(e, "not a valid ONNX model")) << e.what();
}

TEST(ImportErrors, UnknownOp) {
  ModelBuilder b(17);
  b.input("x", {2}).output("y");
  b.node("FancyOp", {"x"}, {"y"}, "fancy");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(e.context().node, "fancy");
  EXPECT_TRUE(has(e, "unknown op 'FancyOp' (domain '', opset 17)")) << e.what();
}

TEST(ImportErrors, OtherDomain) {
  ModelBuilder b(17);
  b.input("x", {2}).output("y");
  auto& n = b.node("Gelu", {"x"}, {"y"}, "g");
  n.set_domain("com.microsoft");
  auto* op = b.model().add_opset_import();
  op->set_domain("com.microsoft");
  op->set_version(1);
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(e, "'com.microsoft'") && has(e, "opset 1") && has(e, "node 'g'")) << e.what();
}

TEST(ImportErrors, MissingInput) {
  ModelBuilder b(17);
  b.input("x", {2}).output("y");
  b.node("Add", {"x", "ghost"}, {"y"}, "add");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_EQ(e.context().node, "add");
  EXPECT_TRUE(has(e, "'ghost'")) << e.what();
}

TEST(ImportErrors, NoOutputs) {
  ModelBuilder b(17);
  b.input("x", {2});
  b.node("Relu", {"x"}, {"y"}, "relu");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_TRUE(has(e, "no outputs")) << e.what();
  EXPECT_EQ(e.context().file, "bad.onnx");
}

// A part count that is not the node's output count is refused before any
// part or output is made (a fuzzed num_outputs of 2^40 once ran the
// importer out of memory).
TEST(ImportErrors, SplitPartsThatAreNotTheOutputs) {
  ModelBuilder b18(18);
  b18.input("x", {7, 2}).output("a");
  ModelBuilder::attr(b18.node("Split", {"x"}, {"a"}, "split"), "num_outputs", int64_t{1} << 40);
  Error e = import_error(b18);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_EQ(e.context().node, "split");
  EXPECT_TRUE(has(e, "Split makes 1099511627776 parts but the node has 1 outputs")) << e.what();

  ModelBuilder b13(13);
  b13.input("x", {0, 2}).output("a").output("b");
  b13.init_i64("sizes", {0, 0, 0});
  b13.node("Split", {"x", "sizes"}, {"a", "b"}, "split");
  e = import_error(b13);
  EXPECT_TRUE(has(e, "Split makes 3 parts but the node has 2 outputs")) << e.what();
}

// Elements that fit int64 but bytes that do not (a fuzzed input).
TEST(ImportErrors, InputWhoseBytesOverflow) {
  ModelBuilder b(13);
  b.input("x", {int64_t{1} << 62}).output("y");
  b.node("Relu", {"x"}, {"y"}, "relu");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kResource);
  EXPECT_TRUE(has(e, "graph input 'x' (f32[4611686018427387904]): tensor f32[4611686018427387904] has too many bytes")) << e.what();
  EXPECT_EQ(e.context().file, "bad.onnx");
}

TEST(ImportErrors, InputThatIsAlsoAnInitializer) {
  ModelBuilder b(13);
  b.input("x", {2}).input("w", {2}).output("y");
  b.init_f32("w", {2}, {1, 1});
  b.node("Add", {"x", "w"}, {"y"}, "add");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_TRUE(has(e, "graph input 'w' is also an initializer")) << e.what();
  EXPECT_TRUE(has(e, "--initializers-as-constants")) << e.what();
  EXPECT_EQ(e.context().file, "bad.onnx");
  ImportOptions fold;
  fold.initializers_as_constants = true;
  Graph g = import_onnx_model(b.model(), fold, ".", "ok.onnx");
  ASSERT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(g.value(g.inputs()[0]).name, "x");
}

TEST(ImportErrors, InputThatNothingReads) {
  ModelBuilder b(17);
  b.input("x", {2, 3}).input("unused", {4}).output("y");
  b.node("Relu", {"x"}, {"y"}, "relu");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_TRUE(has(e, "graph input 'unused' is read by no node")) << e.what();
  EXPECT_TRUE(has(e, "--allow-unused-inputs")) << e.what();
  ImportOptions allow;
  allow.allow_unused_inputs = true;
  Graph g = import_onnx_model(b.model(), allow, ".", "ok.onnx");
  EXPECT_EQ(g.inputs().size(), 2u);  // kept: callers' feeds still match
}

// Restores the process's memory limit when a test is done with it.
struct MemoryLimitFor {
  int64_t saved = memory_limit();
  explicit MemoryLimitFor(int64_t bytes) { set_memory_limit(bytes); }
  ~MemoryLimitFor() { set_memory_limit(saved); }
};

TEST(ImportErrors, TensorOverTheMemoryLimitIsRefusedBeforeItIsMade) {
  ModelBuilder b(17);
  b.input("x", {1}).output("y");
  b.init_i64("shape", {512, 512});
  b.node("Expand", {"x", "shape"}, {"y"}, "/blocks.0/Expand");
  MemoryLimitFor limit(64 * 1024);
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kResource);
  EXPECT_EQ(e.context().node, "/blocks.0/Expand");
  EXPECT_EQ(e.context().op, "Expand");
  EXPECT_TRUE(has(e, "f32[512x512]")) << e.what();
  EXPECT_TRUE(has(e, "memory limit of 64.00 KiB")) << e.what();
}

TEST(ImportErrors, InitializerOverTheMemoryLimit) {
  ModelBuilder b(17);
  b.input("x", {1}).output("y");
  b.init_f32("w", {64, 64}, std::vector<float>(64 * 64, 1.0f));
  b.node("Add", {"x", "w"}, {"y"}, "add");
  MemoryLimitFor limit(8 * 1024);
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kResource);
  EXPECT_TRUE(has(e, "initializer 'w'")) << e.what();
  EXPECT_TRUE(has(e, "--memory-limit")) << e.what();
}

TEST(ImportErrors, Cycle) {
  ModelBuilder b(17);
  b.input("x", {2}).output("y");
  b.node("Add", {"x", "b"}, {"a"}, "first");
  b.node("Relu", {"a"}, {"b"}, "second");
  b.node("Relu", {"a"}, {"y"}, "third");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_TRUE(has(e, "cycle")) << e.what();
  EXPECT_TRUE(e.context().node == "first" || e.context().node == "second") << e.what();
}

TEST(ImportErrors, ShapeMismatch) {
  ModelBuilder b(17);
  b.input("x", {2, 3}).input("z", {4, 5}).output("y");
  b.node("Add", {"x", "z"}, {"y"}, "add");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_EQ(e.context().node, "add");
  EXPECT_EQ(e.context().op, "Add");
  EXPECT_EQ(e.context().file, "bad.onnx");
}

TEST(ImportErrors, BadAttributeType) {
  ModelBuilder b(17);
  b.input("x", {2, 3}).output("y");
  ModelBuilder::attr(b.node("Transpose", {"x"}, {"y"}, "t"), "perm", int64_t{1});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_EQ(e.context().node, "t");
  EXPECT_TRUE(has(e, "attribute 'perm' must be INTS")) << e.what();
}

// A scatter that ONNX's checker would refuse: one line naming the node and
// the op, whether the shapes or the reduction are wrong.
TEST(ImportErrors, ScatterElementsShapesAndReduction) {
  ModelBuilder b(18);
  b.input("cache", {1, 2, 4, 2}).input("idx", {1, 2, 1, 2}, onnx::TensorProto::INT64).input("kv", {1, 2, 2, 2});
  b.output("y");
  ModelBuilder::attr(b.node("ScatterElements", {"cache", "idx", "kv"}, {"y"}, "write"), "axis", int64_t{2});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_EQ(e.context().node, "write");
  EXPECT_EQ(e.context().op, "ScatterElements");
  EXPECT_TRUE(has(e, "ScatterElements updates 1x2x2x2 must have the shape of indices 1x2x1x2")) << e.what();
  EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();

  ModelBuilder r(18);
  r.input("x", {2, 3}).input("i", {2, 3}, onnx::TensorProto::INT64).input("u", {2, 3}).output("y");
  ModelBuilder::attr(r.node("ScatterElements", {"x", "i", "u"}, {"y"}, "s"), "reduction", std::string("sub"));
  Error re = import_error(r);
  EXPECT_EQ(re.context().node, "s");
  EXPECT_TRUE(has(re, "ScatterElements reduction 'sub' is not one of none, add, mul, max, min")) << re.what();

  // Scatter, the old name, has no reduction.
  ModelBuilder old(10);
  old.input("x", {2, 3}).input("i", {2, 3}, onnx::TensorProto::INT64).input("u", {2, 3}).output("y");
  ModelBuilder::attr(old.node("Scatter", {"x", "i", "u"}, {"y"}, "old"), "reduction", std::string("add"));
  Error oe = import_error(old);
  EXPECT_EQ(oe.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(oe, "attribute 'reduction' of Scatter is not supported")) << oe.what();
}

TEST(ImportErrors, UnknownAttribute) {
  ModelBuilder b(17);
  b.input("x", {2, 3}).output("y");
  ModelBuilder::attr(b.node("Relu", {"x"}, {"y"}, "r"), "flavour", int64_t{1});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(e, "attribute 'flavour'")) << e.what();
}

TEST(ImportErrors, ShortInitializer) {
  ModelBuilder b(17);
  b.input("x", {2, 3}).output("y");
  b.init_f32("w", {2, 3}, {1, 2, 3});
  b.node("Add", {"x", "w"}, {"y"});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_TRUE(has(e, "initializer 'w'")) << e.what();
}

TEST(ImportErrors, TooLargeTensor) {
  ModelBuilder b(17);
  b.input("x", {2}).output("y");
  auto& t = b.init_f32("huge", {int64_t{1} << 20, int64_t{1} << 20}, {});
  t.set_raw_data("abcd");
  b.node("Add", {"x", "huge"}, {"y"});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kResource);
  EXPECT_TRUE(has(e, "initializer 'huge'")) << e.what();
}

TEST(ImportErrors, UnsupportedDtype) {
  ModelBuilder b(17);
  b.input("x", {2}, onnx::TensorProto::STRING).output("y");
  b.node("Identity", {"x"}, {"y"});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(e, "input 'x'") && has(e, "STRING")) << e.what();
}

TEST(ImportErrors, DynamicDimNotFixed) {
  ModelBuilder b(17);
  b.input("x", {-1, 3}).output("y");
  b.node("Relu", {"x"}, {"y"});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_TRUE(has(e, "input 'x' dim 0 ('batch') is dynamic: fix it with --input-shape x=...")) << e.what();
  EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
}

TEST(ImportErrors, InputShapeForUnknownInput) {
  ModelBuilder b = relu_model();
  ImportOptions o;
  o.input_shapes["nope"] = {1};
  EXPECT_EQ(import_error(b, o).kind(), ErrorKind::kUsage);
}

TEST(ImportErrors, ReshapeShapeMustBeConstant) {
  ModelBuilder b(17);
  b.input("x", {2, 3}).input("s", {2}, onnx::TensorProto::INT64).output("y");
  b.node("Reshape", {"x", "s"}, {"y"}, "reshape");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(e.context().node, "reshape");
  EXPECT_TRUE(has(e, "input 'shape' of Reshape must be a constant")) << e.what();
}

// Dims whose product passes 2^63 are refused as such, not multiplied with
// signed overflow (which wrapped to 0 here and reported "product 0").
// fuzz/regressions/onnx_import/reshape_dims_overflow is what the fuzzer found.
TEST(ImportErrors, ReshapeDimsOverflow) {
  ModelBuilder b(17);
  b.input("x", {2}).output("y");
  b.init_i64("s", {int64_t{1} << 32, int64_t{1} << 32, -1});
  b.node("Reshape", {"x", "s"}, {"y"}, "reshape");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
  EXPECT_EQ(e.context().node, "reshape");
  EXPECT_TRUE(has(e, "multiply past 2^63")) << e.what();

  e = file_error(std::string(TESSERA_SOURCE_DIR) + "/fuzz/regressions/onnx_import/reshape_dims_overflow.onnx");
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph) << e.what();
  EXPECT_TRUE(has(e, "multiply past 2^63")) << e.what();
}

// The output shape may not depend on data: sizes computed from an input.
TEST(ImportErrors, ResizeSizesMustBeConstant) {
  ModelBuilder b(17);
  b.input("x", {1, 1, 2, 2}).input("s", {4}, onnx::TensorProto::INT64).output("y");
  b.node("Resize", {"x", "", "", "s"}, {"y"}, "resize");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(e.context().node, "resize");
  EXPECT_TRUE(has(e, "input 'sizes' of Resize must be a constant (it is computed at run time from 's')")) << e.what();
}

TEST(ImportErrors, ResizeOperands) {
  auto error = [](int64_t opset, std::vector<std::string> inputs) {
    ModelBuilder b(opset);
    b.input("x", {1, 1, 2, 2}).output("y");
    b.init_f32("scales", {4}, {1, 1, 2, 2});
    b.init_f32("short", {2}, {2, 2});
    b.init_i64("sizes", {1, 1, 4, 4});
    b.node("Resize", std::move(inputs), {"y"}, "resize");
    return import_error(b);
  };
  EXPECT_TRUE(has(error(17, {"x", "", "scales", "sizes"}), "only one of the inputs 'scales' and 'sizes'"));
  EXPECT_TRUE(has(error(17, {"x", ""}), "one of the inputs 'scales' and 'sizes' must be given"));
  EXPECT_TRUE(has(error(17, {"x", "", "short"}), "input 'scales' has 2 values, expected 4"));
  Error old = error(10, {"x", "scales"});
  EXPECT_EQ(old.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(old, "Resize at opset 10")) << old.what();
}

TEST(ImportErrors, BatchNormTrainingMode) {
  ModelBuilder b(15);
  b.input("x", {1, 2, 2, 2}).output("y");
  for (const char* p : {"s", "bias", "m", "v"}) b.init_f32(p, {2}, {1, 1});
  ModelBuilder::attr(b.node("BatchNormalization", {"x", "s", "bias", "m", "v"}, {"y"}, "bn"), "training_mode",
                     int64_t{1});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(e, "training_mode")) << e.what();
}

TEST(ImportErrors, MaxPoolIndices) {
  ModelBuilder b(12);
  b.input("x", {1, 1, 4, 4}).output("y").output("i");
  ModelBuilder::attr(b.node("MaxPool", {"x"}, {"y", "i"}, "pool"), "kernel_shape", std::vector<int64_t>{2, 2});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(e, "Indices")) << e.what();
}

TEST(ImportErrors, OldSoftmaxOnInnerAxis) {
  ModelBuilder b(11);
  b.input("x", {2, 3, 4}).output("y");
  ModelBuilder::attr(b.node("Softmax", {"x"}, {"y"}, "sm"), "axis", int64_t{1});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(e, "last dim")) << e.what();
}

TEST(ImportErrors, TrainingDropoutIsRefused) {
  ModelBuilder b(13);
  b.input("x", {2}).input("training", {}, onnx::TensorProto::BOOL).output("y");
  b.node("Dropout", {"x", "", "training"}, {"y"}, "drop");
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(e, "training_mode")) << e.what();
}

// With a ratio of 0 the mask keeps every element in either mode: an
// identity, whatever training_mode says.
TEST(ImportErrors, TrainingDropoutOfRatioZeroIsAnIdentity) {
  ModelBuilder b(13);
  b.input("x", {2}).input("training", {}, onnx::TensorProto::BOOL).output("y");
  b.init_f32("ratio", {}, {0.0f});
  b.node("Dropout", {"x", "ratio", "training"}, {"d"}, "drop");
  b.node("Neg", {"d"}, {"y"}, "neg");
  ImportOptions options;
  options.allow_unused_inputs = true;  // training is read by nothing once the Dropout goes
  Graph g = import_onnx_model(b.model(), options, ".", "m.onnx");
  ASSERT_EQ(g.num_nodes(), 1);
  EXPECT_EQ(g.node(0).kind, OpKind::kNeg);
  ModelBuilder c(13);
  c.input("x", {2}).input("training", {}, onnx::TensorProto::BOOL).output("y");
  c.init_f32("ratio", {}, {0.1f});
  c.node("Dropout", {"x", "ratio", "training"}, {"y"}, "drop");
  EXPECT_EQ(import_error(c).kind(), ErrorKind::kUnsupported);
}

TEST(ImportErrors, CastToUnsupportedType) {
  ModelBuilder b(13);
  b.input("x", {2}).output("y");
  ModelBuilder::attr(b.node("Cast", {"x"}, {"y"}, "c"), "to", int64_t{onnx::TensorProto::STRING});
  Error e = import_error(b);
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_TRUE(has(e, "STRING")) << e.what();
}

// A node without outputs (invalid ONNX) is refused naming it, whatever its
// op: Cast's and Constant's converters read output 0 to name what they make.
TEST(ImportErrors, NodeWithoutOutputs) {
  for (std::string op : {"Cast", "Constant", "Relu"}) {
    ModelBuilder b(17);
    b.input("x", {2}).output("x");
    onnx::NodeProto& n = b.node(op, op == "Constant" ? std::vector<std::string>{} : std::vector<std::string>{"x"}, {}, "n");
    if (op == "Cast") ModelBuilder::attr(n, "to", int64_t{17});  // FLOAT8E4M3FN, which Tessera does not read
    Error e = import_error(b);
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph) << op << ": " << e.what();
    EXPECT_EQ(e.context().node, "n") << op;
    EXPECT_TRUE(has(e, "no outputs")) << e.what();
  }
}

// What fuzz/onnx_import_fuzz found: a Cast to an unsupported type with no
// inputs and no outputs; its error message read output 0, out of range.
TEST(ImportErrors, FuzzCastWithoutOutputs) {
  Error e = file_error(std::string(TESSERA_SOURCE_DIR) + "/fuzz/regressions/onnx_import/cast_without_outputs.onnx");
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph) << e.what();
  EXPECT_TRUE(has(e, "no outputs")) << e.what();
  EXPECT_EQ(e.context().op, "Cast");
}

}  // namespace
}  // namespace tessera
