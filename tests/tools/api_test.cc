// The embedding API's in-memory plans (tools/api/optimize.cc): optimize
// writes nothing, Plan::save writes exactly what the plan holds, and a mesh
// plan runs from memory as it does from its folder.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "graph/sha256.h"
#include "mutator/plan_files.h"
#include "onnx_import/onnx_export.h"
#include "mutator/rules/rule.h"
#include "tools/api/tessera.h"

namespace tessera::api {
namespace {

namespace fs = std::filesystem;
const std::string kExamples = std::string(TESSERA_SOURCE_DIR) + "/examples";

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tessera_api_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].shape(), b[i].shape());
    for (int64_t k = 0; k < a[i].numel(); ++k) d = std::max(d, std::abs(a[i].get_double(k) - b[i].get_double(k)));
  }
  return d;
}

OptimizeConfig quick() {
  OptimizeConfig c;
  c.budget_s = 10;
  c.measure = false;
  return c;
}

TEST(ApiPlan, SaveWritesExactlyWhatThePlanHolds) {
  Graph g = load(kExamples + "/tiny_cnn.onnx");
  Plan plan = optimize(g, quick());
  EXPECT_FALSE(plan.is_mesh());
  EXPECT_FALSE(plan.mutations.empty()) << "BatchNorm folds into Conv at least";
  EXPECT_TRUE(plan.summary.out_dir.empty());
  std::vector<Tensor> inputs = random_inputs(g, 7);
  EXPECT_LT(max_diff(run(plan, inputs).outputs, run(g, inputs)), 1e-4);

  fs::path dir = scratch("save");
  plan.save(dir.string());
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  std::vector<std::string> want = plan.files();
  std::sort(want.begin(), want.end());
  EXPECT_EQ(files, want);
  // plan.json as the plan holds it, with the digests of the files written.
  EXPECT_EQ(read_file(dir / "plan.json"),
            mutator::with_plan_files(plan.plan_json, mutator::describe_plan_files(dir.string(), {"model.onnx"})));
  EXPECT_EQ(read_file(dir / "report.json"), plan.report_json);
  EXPECT_EQ(read_file(dir / "report.txt"), plan.report_text);
  EXPECT_EQ(read_file(dir / "report.html"), plan.report_html);
  EXPECT_EQ(read_file(dir / "model.onnx"), onnx_bytes(plan.model));
  // Saving again replaces the plan folder; a folder of something else is refused untouched.
  plan.save(dir.string());
  fs::path other = scratch("other");
  fs::create_directories(other);
  std::ofstream(other / "keep.txt") << "mine";
  try {
    plan.save(other.string());
    ADD_FAILURE() << "saved over a folder that is not a plan";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("is not a Tessera plan folder"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(other), fs::directory_iterator()), 1);
  fs::remove_all(dir);
  fs::remove_all(other);
}

// A program with external data: its .data file's digest is taken as it is
// written, plan.json lists it, and a truncated or edited .data file is
// refused in one line naming it, before anything is loaded.
TEST(ApiPlan, ExternalDataIsRecordedAndACutDataFileIsRefusedInOneLine) {
  Graph g = load(kExamples + "/tiny_cnn.onnx");
  fs::path dir = scratch("external");
  fs::create_directories(dir);
  ExportOptions options;
  options.external_data_above = 0;  // every initializer of 1 KiB or more to model.onnx.data
  std::vector<mutator::PlanFile> files;
  options.digest = [&](const std::string& f, const std::string& sha, int64_t bytes) { files.push_back({f, sha, bytes}); };
  save_onnx_file(g, (dir / "model.onnx").string(), options);
  const fs::path data = dir / "model.onnx.data";
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].name, "model.onnx.data");
  EXPECT_EQ(files[1].name, "model.onnx");
  for (const mutator::PlanFile& f : files) {
    EXPECT_EQ(f.sha256, sha256_file_hex((dir / f.name).string())) << f.name << ": hashed as written";
    EXPECT_EQ(f.bytes, static_cast<int64_t>(fs::file_size(dir / f.name))) << f.name;
  }
  ASSERT_GT(files[0].bytes, 1024);
  std::ofstream(dir / "plan.json") << mutator::with_plan_files(
      "{\"format_version\": " + std::to_string(mutator::kPlanFormatVersion) + "}", files);
  mutator::check_plan_folder(dir.string());
  std::vector<Tensor> inputs = random_inputs(g, 3);
  EXPECT_EQ(max_diff(run(load(dir.string()), inputs), run(g, inputs)), 0.0);

  auto refusal = [&] {
    try {
      load(dir.string());
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kParse);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // One byte changed in place: the digest differs.
  std::string bytes = read_file(data);
  bytes[bytes.size() / 2] ^= 1;
  std::ofstream(data, std::ios::binary | std::ios::trunc) << bytes;
  std::string edited = refusal();
  EXPECT_NE(edited.find("model.onnx.data"), std::string::npos) << edited;
  EXPECT_NE(edited.find("does not match the plan"), std::string::npos) << edited;
  EXPECT_EQ(edited.find('\n'), std::string::npos) << edited;
  // Cut short: named by its size, without hashing it.
  fs::resize_file(data, fs::file_size(data) - 100);
  std::string cut = refusal();
  EXPECT_NE(cut.find("model.onnx.data"), std::string::npos) << cut;
  EXPECT_NE(cut.find("truncated"), std::string::npos) << cut;
  EXPECT_EQ(cut.find('\n'), std::string::npos) << cut;
  fs::remove_all(dir);
}

TEST(ApiPlan, OptimizeToAFolderRefusesABadOneBeforeSearching) {
  fs::path other = scratch("refuse");
  fs::create_directories(other);
  std::ofstream(other / "keep.txt") << "mine";
  OptimizeConfig c = quick();
  c.budget_s = -1;  // would be refused by the search: the folder is refused first
  try {
    optimize(load(kExamples + "/tiny_cnn.onnx"), other.string(), c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a Tessera plan folder"), std::string::npos) << e.what();
  }
  fs::remove_all(other);
}

// tiny_transformer split as Megatron-LM splits a layer, from annotations.
Plan annotated_mesh_plan(const Graph& g) {
  OptimizeConfig c = quick();
  c.mesh = "tp=2";
  c.shard_search = false;
  c.shards = {"qkv_w_5=[S(1)]", "fc1_w_131=[S(1)]", "fc2_w_150=[S(0)]", "proj_w_101=[S(0)]"};
  return optimize(g, c);
}

TEST(ApiPlan, MeshPlanRunsFromMemoryAsFromItsFolder) {
  Graph g = load(kExamples + "/tiny_transformer.onnx");
  Plan plan = annotated_mesh_plan(g);
  ASSERT_TRUE(plan.is_mesh());
  EXPECT_EQ(plan.mesh, "tp=2");
  ASSERT_EQ(plan.ranks.size(), 2u);
  std::vector<Tensor> inputs = random_inputs(g, 3);
  RunConfig rc;
  rc.threads = 1;
  std::vector<Tensor> memory = run(plan, inputs, rc).outputs;
  EXPECT_LT(max_diff(memory, run(g, inputs)), 1e-4);

  fs::path dir = scratch("mesh");
  plan.save(dir.string());
  EXPECT_TRUE(is_sharded_plan_folder(dir.string()));
  EXPECT_EQ(read_file(dir / "rank1.onnx"), onnx_bytes(plan.ranks[1]));
  MeshRunResult folder = run_mesh(read_mesh_plan(dir.string()), [&](const Graph&) { return inputs; }, rc);
  EXPECT_EQ(max_diff(memory, folder.outputs), 0.0) << "the same programs, the same kernels";
  fs::remove_all(dir);
}

// Rows split over the ranks, so both hold the whole weights (2 MiB): the
// folder holds them once, in shared.data, which both rank files point at and
// plan.json lists with its digest; an edited byte of it is refused.
TEST(ApiPlan, WeightsTheRanksReplicateAreWrittenOnce) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 256}});
  std::vector<double> a(256 * 1024), b(1024 * 256);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(static_cast<int>(i % 31) - 15) / 64;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<double>(static_cast<int>(i % 17) - 8) / 64;
  ValueId h = g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {x, g.add_constant("w1", Tensor::from_doubles(DType::kF32, {256, 1024}, a))}, {}, "mm1")}, {}, "relu");
  g.set_outputs({g.add(OpKind::kMatMul, {h, g.add_constant("w2", Tensor::from_doubles(DType::kF32, {1024, 256}, b))}, {}, "mm2")});
  OptimizeConfig c = quick();
  c.mesh = "tp=2";
  c.shard_search = false;
  c.shards = {"x=[S(0)]"};
  Plan plan = optimize(g, c);
  ASSERT_TRUE(plan.is_mesh());
  fs::path dir = scratch("shared");
  plan.save(dir.string());
  ASSERT_TRUE(fs::exists(dir / "shared.data"));
  EXPECT_GE(fs::file_size(dir / "shared.data"), 2u << 20);
  for (const char* rank : {"rank0.onnx", "rank1.onnx"}) EXPECT_LT(fs::file_size(dir / rank), 64u << 10) << rank;
  nlohmann::json j = nlohmann::json::parse(read_file(dir / "plan.json"));
  EXPECT_TRUE(j["files"].contains("shared.data"));
  std::vector<Tensor> inputs = random_inputs(g, 5);
  RunConfig rc;
  rc.threads = 1;
  MeshRunResult folder = run_mesh(read_mesh_plan(dir.string()), [&](const Graph&) { return inputs; }, rc);
  EXPECT_LT(max_diff(folder.outputs, run(g, inputs)), 1e-4);
  std::string bytes = read_file(dir / "shared.data");
  bytes[bytes.size() / 3] ^= 1;
  std::ofstream(dir / "shared.data", std::ios::binary | std::ios::trunc) << bytes;
  try {
    read_mesh_plan(dir.string());
    ADD_FAILURE() << "an edited shared.data was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared.data"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// A mesh plan compiles its ranks on its first run only, as a one-device
// plan's Executable does; another RunConfig compiles them again.
TEST(ApiPlan, AMeshPlanCompilesItsRanksOnce) {
  Graph g = load(kExamples + "/tiny_transformer.onnx");
  Plan plan = annotated_mesh_plan(g);
  ASSERT_TRUE(plan.is_mesh());
  std::vector<Tensor> inputs = random_inputs(g, 3);
  RunConfig rc;
  rc.threads = 1;
  int64_t before = MeshExecutable::rank_programs_compiled();
  std::vector<Tensor> first = run(plan, inputs, rc).outputs;
  EXPECT_EQ(MeshExecutable::rank_programs_compiled(), before + 2);
  std::vector<Tensor> second = run(plan, random_inputs(g, 4), rc).outputs;
  EXPECT_EQ(MeshExecutable::rank_programs_compiled(), before + 2) << "the second run compiled again";
  EXPECT_GT(max_diff(first, second), 0.0) << "the second run read its own inputs";
  EXPECT_EQ(max_diff(run(plan, inputs, rc).outputs, first), 0.0);
  rc.threads = 2;
  run(plan, inputs, rc);
  EXPECT_EQ(MeshExecutable::rank_programs_compiled(), before + 4);
}

// One device is the mesh of one: --mesh tp=1 writes the plan no mesh
// writes, model.onnx byte for byte.
TEST(ApiPlan, TpOneWritesTheSameModelAsNoMesh) {
  Graph g = load(kExamples + "/tiny_cnn.onnx");
  OptimizeConfig c = quick();
  c.device = std::string(TESSERA_SOURCE_DIR) + "/cost/profiles/cpu.json";
  fs::path none = scratch("none"), one = scratch("tp1");
  optimize(g, none.string(), c);
  c.mesh = "tp=1";
  optimize(g, one.string(), c);
  EXPECT_FALSE(fs::exists(one / "rank0.onnx"));
  ASSERT_TRUE(fs::exists(one / "model.onnx"));
  EXPECT_EQ(read_file(none / "model.onnx"), read_file(one / "model.onnx"));
  fs::remove_all(none);
  fs::remove_all(one);
}

// Flags that need a mesh are refused without one, never silently dropped.
TEST(ApiPlan, MeshFlagsWithoutAMeshAreUsageErrors) {
  Graph g = load(kExamples + "/tiny_cnn.onnx");
  auto refused = [&](OptimizeConfig c, const std::string& says) {
    try {
      optimize(g, c);
      ADD_FAILURE() << "accepted without a mesh: " << says;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  OptimizeConfig c = quick();
  c.shard_search = false;
  refused(c, "--no-shard-search needs a mesh");
  c = quick();
  c.device_memory = 1 << 30;
  refused(c, "--device-memory needs a mesh");
  c = quick();
  c.shard_rewrite = "none";
  refused(c, "--shard-rewrite needs a mesh");
  c = quick();
  c.mesh = "tp=1";
  c.shards = {"*=[R]"};
  refused(c, "--shard and --shard-file need a mesh");
}

TEST(ApiPlan, LoadBytesReadsWhatOnnxBytesWrites) {
  Graph g = load(kExamples + "/tiny_cnn.onnx");
  Graph h = load_bytes(onnx_bytes(g), "in memory");
  std::vector<Tensor> inputs = random_inputs(g, 1);
  EXPECT_EQ(max_diff(run(g, inputs), run(h, inputs)), 0.0);
  try {
    load_bytes("not a model", "junk");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kParse);
    EXPECT_NE(std::string(e.what()).find("junk"), std::string::npos) << e.what();
  }
}

// A 3x3 convolution and ReLU; `bump` is added to one weight element.
Graph conv_relu(double bump) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 8, 16, 16}});
  Tensor w(DType::kF32, {8, 8, 3, 3}), b(DType::kF32, {8});
  for (int64_t i = 0; i < w.numel(); ++i) w.set_double(i, std::sin(0.37 * static_cast<double>(i)));
  for (int64_t i = 0; i < b.numel(); ++i) b.set_double(i, 0.1 * static_cast<double>(i) - 0.3);
  w.set_double(5, w.get_double(5) + bump);
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{3, 3});
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("dilations", std::vector<int64_t>{1, 1});
  a.set("group", int64_t{1});
  ValueId c = g.add(OpKind::kConv, {x, g.add_constant("/conv/weight", w), g.add_constant("/conv/bias", b)}, a, "/conv/Conv");
  g.set_outputs({g.add(OpKind::kRelu, {c}, {}, "/relu/Relu")});
  return g;
}

// g with conv-winograd's F(4x4, 3x3) form of its Conv, written to ONNX and
// read back as a plan folder's model.onnx is.
Graph winograd_plan(const Graph& g) {
  auto users = g.users();
  mutator::RuleContext ctx{g, users};
  std::vector<mutator::Mutation> ms = mutator::find_rule("conv-winograd").fn(ctx, 0);
  EXPECT_EQ(ms.size(), 2u);
  return load_bytes(onnx_bytes(mutator::apply_mutation(g, ms.at(1))), "plan");
}

// The Z_p test reads a Winograd plan's transformed weights as unrelated
// residues; verify rederives the plan by the rule and its proven
// obligation instead, through the DepthToSpace the ONNX form writes. The
// wrong twin, the transform of another weight, is not confirmed.
TEST(ApiVerify, ConfirmsAWinogradPlanByItsRule) {
  Graph g = conv_relu(0);
  Verdict v = verify(g, winograd_plan(g));
  EXPECT_EQ(v.kind, "equivalent") << v.summary;
  EXPECT_EQ(v.method, "rules") << v.summary;
  EXPECT_EQ(v.error_bound, 0.0);
  EXPECT_NE(v.summary.find("conv-winograd [z3:conv-winograd-f4]"), std::string::npos) << v.summary;
  Verdict wrong = verify(g, winograd_plan(conv_relu(0.25)));
  EXPECT_NE(wrong.kind, "equivalent") << wrong.summary;
  EXPECT_NE(wrong.method, "rules") << wrong.summary;
}

// Compiled once, run many times, from several threads at once: every run
// gives what a fresh compile gives.
TEST(ApiExecutable, RunsAgainAndFromThreadsAsACompileDoes) {
  Graph g = load(kExamples + "/tiny_cnn.onnx");
  std::vector<Tensor> inputs = random_inputs(g, 5);
  RunConfig rc;
  rc.threads = 1;
  std::vector<Tensor> want = run(g, inputs, rc).outputs;
  Executable e(g, rc);
  EXPECT_EQ(max_diff(e.run(inputs).outputs, want), 0.0);
  std::vector<double> worst(4, -1);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < worst.size(); ++t)
    threads.emplace_back([&, t] {
      double d = 0;
      for (int i = 0; i < 50; ++i) d = std::max(d, max_diff(e.run(inputs).outputs, want));
      worst[t] = d;
    });
  for (std::thread& t : threads) t.join();
  for (double d : worst) EXPECT_EQ(d, 0.0);
  RunConfig bad;
  bad.backend = "abacus";
  EXPECT_THROW(Executable(g, bad), Error);
}

TEST(ApiRules, ListsPassesAndRules) {
  std::vector<RuleInfo> rs = rules();
  bool canonical = false, rule = false;
  for (const RuleInfo& r : rs) {
    canonical = canonical || r.kind == "canonical";
    rule = rule || (r.kind == "rule" && r.name == "conv-winograd" && !r.obligation.empty());
  }
  EXPECT_TRUE(canonical && rule);
}

}  // namespace
}  // namespace tessera::api
