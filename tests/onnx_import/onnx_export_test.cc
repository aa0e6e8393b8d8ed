// Graph -> ONNX: the opset-dependent forms written for each IR attribute, the
// tessera domain for collectives, and the round trip import -> export -> ONNX
// Runtime against the original model.
#include "onnx_import/onnx_export.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph/error.h"
#include "onnx/onnx_pb.h"
#include "onnx_import/onnx_import.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

const onnx::NodeProto& find_node(const onnx::ModelProto& m, const std::string& op) {
  for (const auto& n : m.graph().node())
    if (n.op_type() == op) return n;
  throw std::runtime_error("no node " + op);
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::vector<int64_t> initializer_ints(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& t : m.graph().initializer())
    if (t.name() == name) {
      std::vector<int64_t> v(t.raw_data().size() / 8);
      std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
      return v;
    }
  throw std::runtime_error("no initializer " + name);
}

Attrs attrs(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attrs a;
  for (auto& [k, v] : kv) a.set(k, v);
  return a;
}

TEST(OnnxExport, AttributesBecomeInputsWhereTheOpsetSaysSo) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3, 4}});
  ValueId r = g.add(OpKind::kReshape, {x}, attrs({{"shape", std::vector<int64_t>{6, 4}}}), "reshape");
  ValueId m = g.add(OpKind::kReduceMean, {r}, attrs({{"axes", std::vector<int64_t>{1}}}), "mean");
  ValueId s = g.add(OpKind::kReduceSum, {m}, attrs({{"axes", std::vector<int64_t>{0}}}), "sum");
  g.set_outputs({s});

  onnx::ModelProto m17 = export_onnx(g, {17});
  const auto& reshape = find_node(m17, "Reshape");
  ASSERT_EQ(reshape.input_size(), 2);
  EXPECT_EQ(initializer_ints(m17, reshape.input(1)), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(find_attr(reshape, "shape"), nullptr);
  const auto& mean17 = find_node(m17, "ReduceMean");
  EXPECT_EQ(mean17.input_size(), 1);
  ASSERT_NE(find_attr(mean17, "axes"), nullptr);
  const auto& sum17 = find_node(m17, "ReduceSum");
  ASSERT_EQ(sum17.input_size(), 2);
  EXPECT_EQ(initializer_ints(m17, sum17.input(1)), (std::vector<int64_t>{0}));

  onnx::ModelProto m18 = export_onnx(g, {18});
  const auto& mean18 = find_node(m18, "ReduceMean");
  ASSERT_EQ(mean18.input_size(), 2);
  EXPECT_EQ(find_attr(mean18, "axes"), nullptr);
  EXPECT_EQ(m18.opset_import(0).version(), 18);
}

TEST(OnnxExport, CollectivesUseTheTesseraDomainOnlyWhenPresent) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4}});
  ValueId y = g.add(OpKind::kAllReduce, {x}, attrs({{"mesh_axis", std::string("tp")}, {"group_size", int64_t{2}}}));
  g.set_outputs({y});
  onnx::ModelProto m = export_onnx(g);
  const auto& ar = find_node(m, "AllReduce");
  EXPECT_EQ(ar.domain(), "tessera");
  ASSERT_NE(find_attr(ar, "mesh_axis"), nullptr);
  EXPECT_EQ(find_attr(ar, "mesh_axis")->s(), "tp");
  bool has_tessera = false;
  for (const auto& op : m.opset_import()) has_tessera = has_tessera || (op.domain() == "tessera" && op.version() == 1);
  EXPECT_TRUE(has_tessera);

  Graph plain;
  ValueId a = plain.add_input("a", {DType::kF32, {4}});
  plain.set_outputs({plain.add(OpKind::kRelu, {a})});
  EXPECT_EQ(export_onnx(plain).opset_import_size(), 1);

  // The per-rank program reads back with its collective.
  Graph back = import_onnx_model(m, {}, ".", "rank0.onnx");
  ASSERT_EQ(back.num_nodes(), 1);
  EXPECT_EQ(back.node(0).kind, OpKind::kAllReduce);
  EXPECT_EQ(back.node(0).attrs.i("group_size"), 2);
}

TEST(OnnxExport, OutputsThatAreInputsOrConstantsGoThroughIdentity) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2}});
  ValueId c = g.add_constant("c", Tensor::from_doubles(DType::kF32, {2}, {1, 2}));
  g.set_outputs({x, c, x});
  onnx::ModelProto m = export_onnx(g);
  ASSERT_EQ(m.graph().output_size(), 3);
  std::set<std::string> names;
  for (const auto& o : m.graph().output()) names.insert(o.name());
  EXPECT_EQ(names.size(), 3u) << "outputs must be distinct";
  EXPECT_FALSE(names.count("x")) << "an output may not reuse the input's name";
  EXPECT_TRUE(names.count("c"));
  EXPECT_EQ(m.graph().node_size(), 3);
}

TEST(OnnxExport, SaveIsAtomicAndReadable) {
  fs::path dir = fs::path(TESSERA_BINARY_DIR) / "onnx_export_test";
  fs::create_directories(dir);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 2}});
  g.set_outputs({g.add(OpKind::kTranspose, {x}, attrs({{"perm", std::vector<int64_t>{1, 0}}}), "t")});
  std::string path = (dir / "t.onnx").string();
  save_onnx_file(g, path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  Graph back = import_onnx_file(path);
  ASSERT_EQ(back.num_nodes(), 1);
  EXPECT_EQ(back.node(0).attrs.ints("perm"), (std::vector<int64_t>{1, 0}));
  try {
    save_onnx_file(g, (dir / "missing_dir" / "t.onnx").string());
    ADD_FAILURE() << "saved into a missing folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
  }
}

// A model over the external-data threshold keeps its initializers of 1 KiB
// or more in PATH.data, 64-byte aligned, streamed from the constants; read
// back, they are views into that file holding the same bytes, and the small
// ones stay in the proto.
TEST(OnnxExport, LargeInitializersGoToAlignedExternalData) {
  fs::path dir = fs::path(TESSERA_BINARY_DIR) / "onnx_export_external";
  fs::remove_all(dir);
  fs::create_directories(dir);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 300}});
  std::vector<double> big(300 * 5), small(5);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i % 97) - 40;
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<double>(i);
  Tensor w = Tensor::from_doubles(DType::kF32, {300, 5}, big);
  Tensor b = Tensor::from_doubles(DType::kF32, {5}, small);
  ValueId wv = g.add_constant("w", w), bv = g.add_constant("b", b);
  ValueId y = g.add(OpKind::kMatMul, {x, wv}, {}, "mm");
  g.set_outputs({g.add(OpKind::kAdd, {y, bv}, {}, "add")});
  std::string path = (dir / "m.onnx").string();
  ExportOptions options;
  options.external_data_above = 0;
  save_onnx_file(g, path, options);
  ASSERT_TRUE(fs::exists(path + ".data"));
  EXPECT_EQ(fs::file_size(path + ".data"), 6000u);
  EXPECT_FALSE(fs::exists(path + ".data.tmp"));
  onnx::ModelProto m;
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(m.ParseFromIstream(&in));
  int external = 0;
  for (const auto& t : m.graph().initializer())
    external += t.data_location() == onnx::TensorProto::EXTERNAL;
  EXPECT_EQ(external, 1);  // w; b's 20 bytes stay inline
  Graph back = import_onnx_file(path);
  int views = 0;
  for (ValueId v = 0; v < back.num_values(); ++v) {
    if (!back.value(v).constant) continue;
    const Tensor& t = *back.value(v).constant;
    views += t.is_view();
    EXPECT_TRUE(t.identical(t.nbytes() == w.nbytes() ? w : b)) << back.value(v).name;
  }
  EXPECT_EQ(views, 1);
  // Under the threshold (the default) nothing goes outside.
  fs::remove(path + ".data");
  save_onnx_file(g, path);
  EXPECT_FALSE(fs::exists(path + ".data"));
  EXPECT_TRUE(import_onnx_file(path).value(*import_onnx_file(path).find_value("w")).constant->identical(w));
}

// Two models of one folder that hold the same weight (a mesh plan's ranks):
// its bytes are written once to a shared file both point at, and each
// model's other large weights go to its own PATH.data.
TEST(OnnxExport, SharedWeightsAreWrittenOnceForTheModelsThatHoldThem) {
  fs::path dir = fs::path(TESSERA_BINARY_DIR) / "onnx_export_shared";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<double> big(300 * 5);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i % 89) - 30;
  Tensor w = Tensor::from_doubles(DType::kF32, {300, 5}, big);
  auto model = [&](int rank) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 300}});
    std::vector<double> own(5 * 400);
    for (size_t i = 0; i < own.size(); ++i) own[i] = static_cast<double>(rank * 7 + static_cast<int>(i % 13));
    ValueId y = g.add(OpKind::kMatMul, {x, g.add_constant("w", w)}, {}, "mm");
    ValueId o = g.add_constant("own", Tensor::from_doubles(DType::kF32, {5, 400}, own));
    g.set_outputs({g.add(OpKind::kMatMul, {y, o}, {}, "mm2")});
    return g;
  };
  std::vector<std::string> digested;
  ExportOptions options;
  options.digest = [&](const std::string& file, const std::string&, int64_t) { digested.push_back(file); };
  std::vector<ExternalBytes> where = save_shared_data({w}, (dir / "shared.data").string(), options);
  ASSERT_EQ(where.size(), 1u);
  EXPECT_EQ(where[0].location, "shared.data");
  EXPECT_EQ(where[0].offset, 0);
  EXPECT_EQ(where[0].length, w.nbytes());
  EXPECT_EQ(fs::file_size(dir / "shared.data"), static_cast<uintmax_t>(w.nbytes()));
  options.shared = [&](const Tensor& t) -> const ExternalBytes* {
    return t.bytes_identity() == w.bytes_identity() && t.nbytes() == w.nbytes() ? &where[0] : nullptr;
  };
  for (int rank = 0; rank < 2; ++rank) {
    Graph g = model(rank);
    std::string path = (dir / ("rank" + std::to_string(rank) + ".onnx")).string();
    save_onnx_file(g, path, options);  // far below external_data_above: `shared` decides
    ASSERT_TRUE(fs::exists(path + ".data"));
    EXPECT_EQ(fs::file_size(path + ".data"), 5u * 400 * 4);  // its own weight only
    Graph back = import_onnx_file(path);
    const Tensor& bw = *back.value(*back.find_value("w")).constant;
    const Tensor& bo = *back.value(*back.find_value("own")).constant;
    EXPECT_TRUE(bw.is_view());
    EXPECT_TRUE(bw.identical(w));
    EXPECT_TRUE(bo.identical(*g.value(*g.find_value("own")).constant));
  }
  EXPECT_EQ(digested, (std::vector<std::string>{"shared.data", "rank0.onnx.data", "rank0.onnx", "rank1.onnx.data",
                                                "rank1.onnx"}));
  // A tensor of the same bytes at another address is not the shared one.
  Tensor copy = Tensor::from_doubles(DType::kF32, {300, 5}, big);
  EXPECT_NE(copy.bytes_identity(), w.bytes_identity());
  EXPECT_EQ(Tensor(w).bytes_identity(), w.bytes_identity());
}

// Reshape -> Transpose -> Reshape chains that move elements as DepthToSpace
// or SpaceToDepth are written as those ops; others stay as they are.
TEST(OnnxExport, DepthToSpaceChainsBecomeTheOp) {
  auto chain = [](Shape in, std::vector<int64_t> six, std::vector<int64_t> perm, std::vector<int64_t> out) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, std::move(in)});
    ValueId r = g.add(OpKind::kReshape, {x}, attrs({{"shape", six}}), "r6");
    ValueId t = g.add(OpKind::kTranspose, {r}, attrs({{"perm", perm}}), "t");
    g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kReshape, {t}, attrs({{"shape", out}}), "r4")}, {}, "relu")});
    return export_onnx(g, {17});
  };
  auto ops = [](const onnx::ModelProto& m) {
    std::vector<std::string> v;
    for (const auto& n : m.graph().node()) v.push_back(n.op_type());
    return v;
  };
  // A Winograd output: [m, m, C, N=1, th, tw] tiles into [1, C, th*m, tw*m],
  // read from a 2-D MatMul result (so a Reshape to the op's 4-D input first).
  onnx::ModelProto w = chain({16, 8 * 3 * 3}, {4, 4, 8, 1, 3, 3}, {3, 2, 4, 0, 5, 1}, {1, 8, 12, 12});
  EXPECT_EQ(ops(w), (std::vector<std::string>{"Reshape", "DepthToSpace", "Relu"}));
  EXPECT_EQ(find_attr(find_node(w, "DepthToSpace"), "blocksize")->i(), 4);
  EXPECT_EQ(find_attr(find_node(w, "DepthToSpace"), "mode")->s(), "DCR");
  // PyTorch's pixel shuffle, already 4-D: CRD, no Reshape in front.
  onnx::ModelProto crd = chain({1, 8, 3, 5}, {1, 2, 2, 2, 3, 5}, {0, 1, 4, 2, 5, 3}, {1, 2, 6, 10});
  EXPECT_EQ(ops(crd), (std::vector<std::string>{"DepthToSpace", "Relu"}));
  EXPECT_EQ(find_attr(find_node(crd, "DepthToSpace"), "mode")->s(), "CRD");
  onnx::ModelProto s2d = chain({1, 2, 6, 10}, {1, 2, 3, 2, 5, 2}, {0, 3, 5, 1, 2, 4}, {1, 8, 3, 5});
  EXPECT_EQ(ops(s2d), (std::vector<std::string>{"SpaceToDepth", "Relu"}));
  // A dilated Winograd's phase split: SpaceToDepth with the result read as
  // [phases * C, 1, h, w] (channels as batch), so a Reshape back after it.
  onnx::ModelProto phases = chain({1, 3, 8, 10}, {1, 3, 4, 2, 5, 2}, {3, 5, 0, 1, 2, 4}, {12, 1, 4, 5});
  EXPECT_EQ(ops(phases), (std::vector<std::string>{"SpaceToDepth", "Reshape", "Relu"}));
  // The same shapes with the in-block axes swapped: no such op.
  onnx::ModelProto other = chain({1, 8, 3, 5}, {1, 2, 2, 2, 3, 5}, {0, 1, 4, 3, 5, 2}, {1, 2, 6, 10});
  EXPECT_EQ(ops(other), (std::vector<std::string>{"Reshape", "Transpose", "Reshape", "Relu"}));
}

// Resize is written with sizes when its scales are sizes / input, with
// scales when its sizes are floor(input x scales), and as axes + a
// keep_aspect_ratio_policy when one scale gave rounded sizes; a node that
// ONNX has only in a newer opset raises the written opset.
TEST(OnnxExport, ResizeOperandsAndTheOpsetTheyNeed) {
  auto resize = [](Shape in, std::vector<int64_t> sizes, std::vector<double> scales, Attrs more = {}) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, std::move(in)});
    more.set("sizes", sizes);
    more.set("scales", scales);
    if (!more.has("mode")) more.set("mode", std::string("linear"));
    g.set_outputs({g.add(OpKind::kResize, {x}, more, "resize")});
    return export_onnx(g);
  };
  onnx::ModelProto by_sizes = resize({1, 1, 4, 6}, {1, 1, 6, 9}, {1, 1, 1.5, 1.5});
  const auto& n1 = find_node(by_sizes, "Resize");
  ASSERT_EQ(n1.input_size(), 4);
  EXPECT_EQ(n1.input(1), "");
  EXPECT_EQ(n1.input(2), "");
  EXPECT_EQ(initializer_ints(by_sizes, n1.input(3)), (std::vector<int64_t>{1, 1, 6, 9}));
  EXPECT_EQ(find_attr(n1, "sizes"), nullptr);
  EXPECT_EQ(find_attr(n1, "mode")->s(), "linear");
  EXPECT_EQ(by_sizes.opset_import(0).version(), 17);

  onnx::ModelProto by_scales = resize({1, 1, 4, 6}, {1, 1, 2, 4}, {1, 1, 0.625, 0.75});  // 2.5 -> 2, 4.5 -> 4
  const auto& n2 = find_node(by_scales, "Resize");
  ASSERT_EQ(n2.input_size(), 3);
  EXPECT_NE(n2.input(2), "");

  // not_larger of sizes (5, 20) on 3x7: scale 5/3 and sizes (5, 12).
  onnx::ModelProto aspect = resize({1, 1, 3, 7}, {1, 1, 5, 12}, {1, 1, 5.0 / 3, 5.0 / 3});
  const auto& n3 = find_node(aspect, "Resize");
  EXPECT_EQ(aspect.opset_import(0).version(), 18);
  EXPECT_EQ(find_attr(n3, "keep_aspect_ratio_policy")->s(), "not_larger");
  ASSERT_EQ(n3.input_size(), 4);
  std::vector<int64_t> aspect_sizes = initializer_ints(aspect, n3.input(3));
  ASSERT_EQ(aspect_sizes.size(), 2u);
  EXPECT_EQ(aspect_sizes[0], 5);
  EXPECT_GE(aspect_sizes[1] * 3, 7 * 5);  // a ratio not below 5/3, so that 5/3 is the smallest

  onnx::ModelProto antialias = resize({1, 1, 4, 6}, {1, 1, 2, 3}, {1, 1, 0.5, 0.5}, attrs({{"antialias", int64_t{1}}}));
  EXPECT_EQ(antialias.opset_import(0).version(), 18);
  EXPECT_EQ(find_attr(find_node(antialias, "Resize"), "antialias")->i(), 1);
  // Upscaling: antialias changes nothing and is not written.
  onnx::ModelProto up = resize({1, 1, 4, 6}, {1, 1, 8, 12}, {1, 1, 2, 2}, attrs({{"antialias", int64_t{1}}}));
  EXPECT_EQ(up.opset_import(0).version(), 17);
  EXPECT_EQ(find_attr(find_node(up, "Resize"), "antialias"), nullptr);

  // A nearest_mode of opset 11 only has no later form.
  try {
    resize({1, 1, 4, 6}, {1, 1, 8, 12}, {1, 1, 2, 2},
           attrs({{"mode", std::string("nearest")},
                  {"coordinate_transformation_mode", std::string("tf_half_pixel_for_nn")}}));
    ADD_FAILURE() << "exported tf_half_pixel_for_nn";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("tf_half_pixel_for_nn (opset 11 only)"), std::string::npos) << e.what();
  }

  Graph g;
  ValueId d = g.add_input("d", {DType::kF32, {4}});
  ValueId i = g.add_constant("i", Tensor::from_ints(DType::kI64, {1, 1}, {2}));
  ValueId u = g.add_input("u", {DType::kF32, {1}});
  g.set_outputs({g.add(OpKind::kScatterND, {d, i, u}, attrs({{"reduction", std::string("max")}}), "scatter")});
  onnx::ModelProto scatter = export_onnx(g);
  EXPECT_EQ(scatter.opset_import(0).version(), 18);
  EXPECT_EQ(find_attr(find_node(scatter, "ScatterND"), "reduction")->s(), "max");

  // ScatterElements: reduction none is no attribute (any opset); mul and add
  // raise the written opset to 16, max and min to 18.
  struct Want {
    std::string reduction;
    int64_t from13, from17;
  };
  for (const Want& want : {Want{"none", 13, 17}, Want{"mul", 16, 17}, Want{"min", 18, 18}}) {
    Graph e;
    ValueId data = e.add_input("d", {DType::kF32, {2, 4}});
    ValueId idx = e.add_constant("i", Tensor::from_ints(DType::kI64, {2, 1}, {3, -1}));
    ValueId upd = e.add_input("u", {DType::kF32, {2, 1}});
    e.set_outputs({e.add(OpKind::kScatterElements, {data, idx, upd},
                         attrs({{"axis", int64_t{-1}}, {"reduction", want.reduction}}), "write")});
    EXPECT_EQ(export_onnx(e, {13}).opset_import(0).version(), want.from13) << want.reduction;
    onnx::ModelProto m = export_onnx(e);
    EXPECT_EQ(m.opset_import(0).version(), want.from17) << want.reduction;
    const onnx::NodeProto& w = find_node(m, "ScatterElements");
    EXPECT_EQ(find_attr(w, "axis")->i(), -1) << want.reduction;
    if (want.reduction == "none") EXPECT_EQ(find_attr(w, "reduction"), nullptr);
    else EXPECT_EQ(find_attr(w, "reduction")->s(), want.reduction);
  }
}

int run(const std::string& cmd, std::string* output) {
  fs::path log = fs::path(TESSERA_BINARY_DIR) / "onnx_roundtrip_cmd.log";
  int rc = std::system((cmd + " > '" + log.string() + "' 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  if (output) *output = ss.str();
  return rc;
}

class RoundTripTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(TESSERA_BINARY_DIR) / "onnx_roundtrip");
    available_ = run("python3 -c 'import onnx, onnxruntime'", nullptr) == 0;
    if (!available_) return;
    std::string out;
    generated_ = run("python3 '" + script("make_roundtrip_models.py") + "' '" + dir_->string() + "'", &out) == 0;
    if (!generated_) std::cerr << out;
  }
  static std::string script(const std::string& name) {
    return std::string(TESSERA_SOURCE_DIR) + "/tests/onnx_import/data/" + name;
  }
  static inline fs::path* dir_ = nullptr;
  static inline bool available_ = false, generated_ = false;
};

TEST_P(RoundTripTest, ExportedModelMatchesOriginalInOnnxRuntime) {
  if (!available_) GTEST_SKIP() << "python3 with onnx and onnxruntime is not available";
  ASSERT_TRUE(generated_) << "make_roundtrip_models.py failed";
  std::string original = (*dir_ / (GetParam() + ".onnx")).string();
  std::string exported = (*dir_ / (GetParam() + ".tessera.onnx")).string();
  Graph g = import_onnx_file(original);
  save_onnx_file(g, exported);
  std::string out;
  int rc = run("python3 '" + script("compare_with_ort.py") + "' '" + original + "' '" + exported + "'", &out);
  EXPECT_EQ(rc, 0) << out;
}

INSTANTIATE_TEST_SUITE_P(Models, RoundTripTest,
                         ::testing::Values("conv_pool", "attention", "movement", "opset13_forms", "gelu_opset20",
                                           "depth_space", "resize_scatter", "resize_opset19", "static_cache"));

}  // namespace
}  // namespace tessera
