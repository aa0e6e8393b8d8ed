#include "mutator/optimize.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cost/device_profile.h"
#include "graph/error.h"
#include "graph/interpreter.h"
#include "mutator/rules/rule.h"
#include "mutator/search.h"
#include "report/report.h"
#include "tests/mutator/mutator_test_util.h"
#include "tests/mutator/random_graphs.h"
#include "tests/plan_schema.h"
#include "tools/api/tessera.h"

namespace tessera::mutator {
namespace {

namespace fs = std::filesystem;
const std::string kTessera = std::string(TESSERA_BINARY_DIR) + "/bin/tessera";
const std::string kExamples = std::string(TESSERA_SOURCE_DIR) + "/examples";

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tessera_mutator_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// Runs the CLI; returns the exit code, stdout+stderr in *out.
int run_cli(const std::string& args, std::string* out) {
  fs::path log = temp_dir("log");
  int status = std::system((kTessera + " " + args + " > " + log.string() + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  fs::remove(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

OptimizeOptions quick(uint64_t seed, int threads) {
  OptimizeOptions o;
  o.device = cost::resolve_device("h100");
  o.budget_s = 60;  // generous: these graphs finish far earlier, so timing never cuts the search
  o.seed = seed;
  o.threads = threads;
  return o;
}

TEST(Search, SameSeedGivesTheSamePlanWhateverTheThreads) {
  for (uint64_t seed : {3u, 8u, 21u}) {
    Graph g = testing::random_graph(seed);
    Plan a = optimize(g, quick(seed, 1));
    Plan b = optimize(g, quick(seed, 4));
    EXPECT_EQ(report::plan_json(a, false), report::plan_json(b, false)) << "seed " << seed;
    EXPECT_LT(testing::max_output_diff(g, b.optimized, 9), 1e-4);
  }
}

TEST(Search, AppliesOnlyVerifiedMutationsAndNeverRaisesPredictedCost) {
  int applied = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    Graph g = testing::random_graph(seed);
    Plan p = optimize(g, quick(seed, 2));
    EXPECT_LE(p.cost_after_s, p.cost_before_s);
    EXPECT_TRUE(p.check.passed);
    for (const AppliedMutation& m : p.search.applied) {
      EXPECT_TRUE(m.verification.accepted()) << m.rule;
      ++applied;
    }
  }
  EXPECT_GT(applied, 0) << "the search never applied anything on 12 random graphs";
}

TEST(Search, DisabledRuleIsNeverApplied) {
  Graph g = testing::random_graph(3);
  OptimizeOptions o = quick(3, 2);
  for (const Rule& r : all_rules()) o.disabled_rules.push_back(r.name);
  Plan p = optimize(g, o);
  EXPECT_TRUE(p.search.applied.empty());
  EXPECT_EQ(p.search.stats.generated, 0);
}

TEST(SearchErrors, ImpossibleBudgetAndUnknownRuleAreUsageErrors) {
  Graph g = testing::random_graph(1);
  OptimizeOptions o = quick(1, 1);
  o.budget_s = 0;
  EXPECT_THROW(
      {
        try {
          optimize(g, o);
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kUsage);
          EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos);
          throw;
        }
      },
      Error);
  o = quick(1, 1);
  o.disabled_rules = {"merge-everything"};
  try {
    optimize(g, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("reshape-chain"), std::string::npos) << e.what();
  }
}

TEST(Partition, SubprogramsStopAtNonLinearOps) {
  Graph g = testing::qkv_graph(2, 4);
  ValueId r = g.add(OpKind::kRelu, {g.outputs()[0]}, {}, "relu");
  ValueId t = g.add(OpKind::kMatMul, {r, g.add_constant("w2", Tensor(DType::kF32, {4, 4}))}, {}, "after");
  g.set_outputs({t});
  auto parts = partition_subprograms(g);
  ASSERT_EQ(parts.size(), 2u);
  for (NodeId n : parts[0]) EXPECT_NE(g.node(n).kind, OpKind::kRelu);
  EXPECT_EQ(parts[1].size(), 1u);
}

// A value made outside every subprogram and read by element-wise ops in
// several places (an attention mask read by each layer) does not glue those
// places into one subprogram; MatMuls sharing an input still join.
TEST(Partition, SharedMaskDoesNotGlueLayersButSharedInputMatMulsJoin) {
  std::mt19937_64 rng(9);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 4}});
  ValueId mask = g.add(OpKind::kRelu, {g.add_input("m", {DType::kF32, {4, 4}})}, {}, "mask");
  ValueId h = x;
  for (int layer = 0; layer < 2; ++layer) {
    std::string l = std::to_string(layer);
    ValueId a = g.add(OpKind::kMatMul, {h, testing::weight(g, "wa" + l, {4, 4}, rng)}, {}, "a" + l);
    ValueId b = g.add(OpKind::kMatMul, {h, testing::weight(g, "wb" + l, {4, 4}, rng)}, {}, "b" + l);
    h = g.add(OpKind::kTanh, {g.add(OpKind::kAdd, {g.add(OpKind::kAdd, {a, b}), mask}, {}, "mask_add" + l)});
  }
  g.set_outputs({h});
  auto parts = partition_subprograms(g);
  ASSERT_EQ(parts.size(), 2u);
  for (const auto& part : parts) EXPECT_EQ(part.size(), 4u);  // two MatMuls and two Adds per layer
}

// A long linear chain (a residual stream) is cut into bounded subprograms
// that together hold every node once.
TEST(Partition, LongLinearChainsAreCutIntoBoundedSubprograms) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 2}});
  ValueId h = x;
  for (int i = 0; i < 150; ++i) h = g.add(OpKind::kAdd, {h, x});
  g.set_outputs({h});
  auto parts = partition_subprograms(g);
  EXPECT_GT(parts.size(), 2u);
  size_t total = 0;
  for (const auto& part : parts) {
    EXPECT_LE(part.size(), 64u);
    total += part.size();
  }
  EXPECT_EQ(total, 150u);
  Plan p = optimize(g, quick(1, 2));  // the pieces splice back into a valid graph
  EXPECT_LT(testing::max_output_diff(g, p.optimized, 2), 1e-6);
}

// A residual block with a Conv shortcut: conv1 and conv2 look parallel
// inside their subprogram (same geometry, independent inputs), but conv2
// reads conv1 through a Relu outside it, so merging them into one grouped
// Conv would close a cycle. The search must refuse that candidate and keep
// the rest of the subprogram's mutations (here the Transpose pair after the
// Add, which cancels).
TEST(Search, RefusesCandidatesThatCloseACycleAndKeepsTheOthers) {
  std::mt19937_64 rng(5);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 4, 6, 6}});
  ValueId c1 = g.add(OpKind::kConv, {x, testing::weight(g, "w1", {4, 4, 3, 3}, rng)}, testing::conv_attrs(3, 1, 1), "conv1");
  ValueId r = g.add(OpKind::kRelu, {c1}, {}, "relu");
  ValueId c2 = g.add(OpKind::kConv, {r, testing::weight(g, "w2", {4, 4, 3, 3}, rng)}, testing::conv_attrs(3, 1, 1), "conv2");
  ValueId c3 = g.add(OpKind::kConv, {x, testing::weight(g, "w3", {4, 4, 3, 3}, rng)}, testing::conv_attrs(3, 1, 1), "shortcut");
  ValueId sum = g.add(OpKind::kAdd, {c2, c3}, {}, "residual");
  Attrs swap;
  swap.set("perm", std::vector<int64_t>{0, 1, 3, 2});
  ValueId y = g.add(OpKind::kTranspose, {g.add(OpKind::kTranspose, {sum}, swap, "t1")}, swap, "t2");
  g.set_outputs({y});
  SearchOptions so;
  so.device = cost::resolve_device("h100");
  so.budget_s = 60;
  so.threads = 1;
  SearchResult res = search(g, so);
  EXPECT_GT(res.stats.cyclic, 0) << "the grouped-Conv merge across the Relu was never proposed";
  res.graph.validate();
  EXPECT_NO_THROW(res.graph.topo_order());
  bool chain = false;
  for (const AppliedMutation& a : res.applied) {
    EXPECT_NE(a.rule, "merge-parallel-convs-into-group");
    chain = chain || a.rule == "transpose-compose";
  }
  EXPECT_TRUE(chain) << "the subprogram's other mutation was lost";
  EXPECT_LT(testing::max_output_diff(g, res.graph, 4), 1e-9);
}

// End to end on the bundled models: the written model, imported back, computes
// what the original does (reference interpreter; ONNX Runtime when present).
TEST(OptimizeEndToEnd, BundledModelsKeepTheirOutputs) {
  for (const char* name : {"tiny_transformer", "tiny_cnn"}) {
    Graph g = api::load(kExamples + "/" + name + ".onnx");
    fs::path out = temp_dir(name);
    api::OptimizeConfig config;
    config.budget_s = 20;
    config.measure = false;
    api::optimize(g, out.string(), config);
    for (const char* f : {"model.onnx", "plan.json", "report.txt", "report.json", "report.html"})
      EXPECT_TRUE(fs::exists(out / f)) << name << ": " << f;
    EXPECT_TRUE(api::is_plan_folder(out.string()));
    EXPECT_PLAN_MATCHES_SCHEMA(out);
    Graph h = api::load(out.string());
    EXPECT_LT(testing::max_output_diff(g, h, 4), 1e-4) << name;
    std::string py = "python3 -c 'import onnxruntime' > /dev/null 2>&1";
    if (std::system(py.c_str()) != 0) {
      std::printf("[ SKIPPED ] ONNX Runtime check for %s: python3 onnxruntime not available\n", name);
    } else {
      std::string script =
          "import onnxruntime as ort, numpy as np, sys\n"
          "a = ort.InferenceSession(sys.argv[1]); b = ort.InferenceSession(sys.argv[2])\n"
          "rng = np.random.default_rng(0); feeds = {}\n"
          "for i in a.get_inputs():\n"
          "  shp = [d if isinstance(d, int) else 1 for d in i.shape]\n"
          "  feeds[i.name] = rng.random(shp).astype(np.float32) if 'float' in i.type else np.ones(shp, np.int64)\n"
          "for x, y in zip(a.run(None, feeds), b.run(None, feeds)):\n"
          "  assert np.allclose(x, y, rtol=1e-3, atol=1e-4), float(np.abs(x - y).max())\n";
      fs::path sp = out.string() + ".py";
      std::ofstream(sp) << script;
      std::string cmd = "python3 " + sp.string() + " " + kExamples + "/" + name + ".onnx " + (out / "model.onnx").string();
      EXPECT_EQ(std::system(cmd.c_str()), 0) << name << " differs in ONNX Runtime";
      fs::remove(sp);
    }
    fs::remove_all(out);
  }
}

TEST(OptimizeCli, UsageErrorsExitTwoAndWriteNothing) {
  fs::path out = temp_dir("cli");
  std::string model = kExamples + "/tiny_cnn.onnx", text;
  EXPECT_EQ(run_cli("optimize " + model + " -o " + out.string() + " --budget 0", &text), 2);
  EXPECT_NE(text.find("--budget must be > 0"), std::string::npos) << text;
  EXPECT_EQ(run_cli("optimize " + model + " -o " + out.string() + " --budget -3", &text), 2);
  EXPECT_EQ(run_cli("optimize " + model + " -o " + out.string() + " --disable-rule nope --no-calibrate", &text), 2);
  EXPECT_NE(text.find("unknown rule 'nope'"), std::string::npos) << text;
  EXPECT_NE(text.find("merge-convs-sharing-input"), std::string::npos) << text;
  EXPECT_EQ(run_cli("optimize " + model + " -o " + out.string() + " --no-such-flag", &text), 2);
  EXPECT_EQ(run_cli("optimize " + model, &text), 2);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(run_cli("optimize --list-rules", &text), 0);
  EXPECT_NE(text.find("fold-batchnorm-into-conv"), std::string::npos);
  EXPECT_NE(text.find("transpose-compose"), std::string::npos);
}

TEST(OptimizeCli, WritesAPlanThatTesseraRunRuns) {
  fs::path out = temp_dir("run");
  std::string text;
  ASSERT_EQ(run_cli("optimize " + kExamples + "/tiny_cnn.onnx -o " + out.string() + " --budget 10 --seed 4 --no-calibrate", &text), 0)
      << text;
  std::ifstream plan(out / "plan.json");
  std::stringstream ss;
  ss << plan.rdbuf();
  EXPECT_NE(ss.str().find("\"format_version\": 5"), std::string::npos);
  EXPECT_PLAN_MATCHES_SCHEMA(out);
  EXPECT_NE(ss.str().find("fold-batchnorm-into-conv"), std::string::npos);
  std::string a, b;
  ASSERT_EQ(run_cli("run " + out.string() + " --seed 2", &a), 0) << a;
  ASSERT_EQ(run_cli("run " + kExamples + "/tiny_cnn.onnx --seed 2", &b), 0) << b;
  EXPECT_NE(a.find("sum="), std::string::npos);
  fs::remove_all(out);
}

}  // namespace
}  // namespace tessera::mutator
