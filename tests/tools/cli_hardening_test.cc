// What a user can throw at the CLI and still trust what it leaves: bad
// inputs refused in one line, interruption leaving nothing half-written,
// byte-identical plans for a seed, and plans Tessera itself confirms.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "tests/onnx_import/model_builder.h"
#include "tests/tools/cli_run.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::kExamples;
using testing::kTessera;
using testing::ModelBuilder;
using testing::read_file;
using testing::run_cli;
using testing::scratch_path;

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// 1 x 16 x 32 x 32 through `depth` 3x3 convolutions with ReLU, each with
// its own channel count (16, 24, 32, ...) so that no two layers are the same
// subprogram: tens of seconds of CPU to search and check, so that a signal
// sent once the process has used half a second lands before the plan is
// written.
fs::path conv_chain(const fs::path& dir, int depth) {
  ModelBuilder b(17);
  b.input("x", {1, 16, 32, 32}).output("y");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  std::string in = "x";
  for (int i = 0; i < depth; ++i) {
    int64_t cin = 16 + 8 * i, cout = 16 + 8 * (i + 1);
    std::vector<float> w(static_cast<size_t>(cout * cin * 9));
    for (float& v : w) v = u(rng);
    std::string wn = "blocks." + std::to_string(i) + ".conv.weight";
    b.init_f32(wn, {cout, cin, 3, 3}, w);
    std::string c = "/blocks." + std::to_string(i) + "/conv/Conv_output_0";
    auto& conv = b.node("Conv", {in, wn}, {c}, "/blocks." + std::to_string(i) + "/conv/Conv");
    ModelBuilder::attr(conv, "pads", std::vector<int64_t>{1, 1, 1, 1});
    std::string r = i + 1 == depth ? "y" : "/blocks." + std::to_string(i) + "/Relu_output_0";
    b.node("Relu", {c}, {r}, "/blocks." + std::to_string(i) + "/Relu");
    in = r;
  }
  fs::create_directories(dir);
  fs::path p = dir / "chain.onnx";
  std::ofstream(p, std::ios::binary) << b.model().SerializeAsString();
  return p;
}

// CPU seconds a running process has used (utime + stime), -1 once it is gone.
double cpu_seconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  long ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stol(field);
  return static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Starts `tessera optimize MODEL -o OUT --budget 120`, sends `sig` once it has
// used half a second of CPU, and returns its wait status.
int optimize_and_interrupt(const fs::path& model, const fs::path& out, int sig) {
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(kTessera.c_str(), kTessera.c_str(), "optimize", model.c_str(), "-o", out.c_str(), "--budget", "120",
          "--no-measure", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  for (int i = 0; i < 600; ++i) {  // 60 s at most: the search has its budget to use
    if (waitpid(pid, &status, WNOHANG) == pid) return status;  // ended before the signal
    double used = cpu_seconds(pid);
    if (used >= 0.5) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, sig);
  waitpid(pid, &status, 0);
  return status;
}

// Nothing the interrupted run made is left beside OUT_DIR.
void expect_no_leftovers(const fs::path& out) {
  for (const fs::directory_entry& e : fs::directory_iterator(out.parent_path())) {
    std::string name = e.path().filename().string();
    EXPECT_NE(name.rfind(out.filename().string() + ".tmp-", 0), 0u) << name;
    EXPECT_NE(name.rfind(out.filename().string() + ".old-", 0), 0u) << name;
  }
}

TEST(CliInterrupt, SigintMidSearchLeavesNoPlanFolder) {
  fs::path dir = scratch_path("sigint");
  fs::path model = conv_chain(dir, 20), out = dir / "plan";
  int status = optimize_and_interrupt(model, out, SIGINT);
  ASSERT_TRUE(WIFSIGNALED(status)) << "optimize ended by itself (status " << status << ") before the signal";
  EXPECT_EQ(WTERMSIG(status), SIGINT);
  EXPECT_FALSE(fs::exists(out));
  expect_no_leftovers(out);
  fs::remove_all(dir);
}

TEST(CliInterrupt, SigtermMidSearchKeepsTheOldPlanIntact) {
  fs::path dir = scratch_path("sigterm");
  fs::path model = conv_chain(dir, 20), out = dir / "plan";
  ASSERT_EQ(run_cli("optimize " + kExamples + "/tiny_cnn.onnx -o " + out.string() + " --budget 5 --no-measure").code, 0);
  std::string plan = read_file(out / "plan.json"), onnx = read_file(out / "model.onnx");
  int status = optimize_and_interrupt(model, out, SIGTERM);
  ASSERT_TRUE(WIFSIGNALED(status)) << "optimize ended by itself (status " << status << ") before the signal";
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(read_file(out / "plan.json"), plan);
  EXPECT_EQ(read_file(out / "model.onnx"), onnx);
  expect_no_leftovers(out);
  fs::remove_all(dir);
}

TEST(CliOutput, OptimizeRefusesAFolderThatIsNotAPlan) {
  fs::path dir = scratch_path("not_a_plan");
  fs::create_directories(dir);
  std::ofstream(dir / "notes.txt") << "mine";
  CliResult r = run_cli("optimize " + kExamples + "/tiny_cnn.onnx -o " + dir.string());
  EXPECT_EQ(r.code, 2) << r.err;  // a usage error: the user names another folder
  EXPECT_NE(r.err.find("is not a Tessera plan folder"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(dir / "notes.txt"), "mine");
  EXPECT_FALSE(fs::exists(dir / "plan.json"));
  fs::remove_all(dir);
}

// plan.json without what a clock decides.
nlohmann::json without_timings(nlohmann::json j) {
  j.erase("total_seconds");
  j.erase("check_seconds");
  if (j.contains("search") && j["search"].is_object()) j["search"].erase("seconds");
  return j;
}

// The runs price on one host profile: a profile cache of the test's own (the
// suite's shared one may be rewritten meanwhile by a test that calibrates),
// with the detected profile, whose probed clock the first run keeps there.
TEST(CliDeterminism, SameSeedSamePlanBytesOnOneThreadOrTwo) {
  fs::path cache = scratch_path("determinism_cache");
  fs::remove_all(cache);
  for (const char* model : {"tiny_cnn.onnx", "tiny_transformer.onnx"}) {
    std::string first_onnx;
    nlohmann::json first_plan;
    int k = 0;
    for (const char* threads : {"1", "2", "2"}) {
      fs::path out = scratch_path(std::string("determinism_") + std::to_string(k++));
      CliResult r = run_cli("optimize " + kExamples + "/" + model + " -o " + out.string() +
                            " --budget 20 --no-measure --seed 3 --no-calibrate --profile-cache " + cache.string() +
                            " --threads " + threads);
      ASSERT_EQ(r.code, 0) << model << ": " << r.err;
      std::string onnx = read_file(out / "model.onnx");
      nlohmann::json plan = without_timings(nlohmann::json::parse(read_file(out / "plan.json")));
      ASSERT_FALSE(plan["search"]["budget_exhausted"].get<bool>()) << model << ": the budget decided the plan";
      if (first_onnx.empty()) {
        first_onnx = onnx;
        first_plan = plan;
      } else {
        EXPECT_EQ(onnx, first_onnx) << model << " --threads " << threads;
        EXPECT_EQ(plan.dump(1), first_plan.dump(1)) << model << " --threads " << threads;
      }
      fs::remove_all(out);
    }
  }
  EXPECT_TRUE(fs::exists(cache)) << "the detected clock is kept";
  fs::remove_all(cache);
}

TEST(CliVerify, TesseraConfirmsItsOwnPlans) {
  for (const char* model : {"tiny_cnn.onnx", "tiny_transformer.onnx"}) {
    fs::path out = scratch_path(std::string("own_plan_") + model);
    ASSERT_EQ(run_cli("optimize " + kExamples + "/" + model + " -o " + out.string() + " --no-measure").code, 0);
    nlohmann::json plan = nlohmann::json::parse(read_file(out / "plan.json"));
    // tiny_cnn's plan folds its BatchNorm: a float rewrite the Z_p test
    // alone cannot decide.
    if (std::string(model) == "tiny_cnn.onnx") ASSERT_FALSE(plan["mutations"].empty());
    CliResult r = run_cli("verify " + kExamples + "/" + model + " " + (out / "model.onnx").string());
    EXPECT_EQ(r.code, 0) << model << ": " << r.out << r.err;
    EXPECT_EQ(r.out.rfind("equivalent", 0), 0u) << model << ": " << r.out;
    fs::remove_all(out);
  }
}

// Bad models: one line naming the file and what is wrong, exit 1, nothing written.
TEST(CliBadInput, OddInputsAndTensorsOverTheMemoryLimit) {
  fs::path dir = scratch_path("bad_inputs");
  fs::create_directories(dir);
  auto write = [&](ModelBuilder& b, const std::string& name) {
    fs::path p = dir / name;
    std::ofstream(p, std::ios::binary) << b.model().SerializeAsString();
    return p.string();
  };
  ModelBuilder unused(17);
  unused.input("x", {2, 3}).input("unused", {4}).output("y");
  unused.node("Relu", {"x"}, {"y"}, "relu");
  ModelBuilder init_input(17);
  init_input.input("x", {2}).input("w", {2}).output("y");
  init_input.init_f32("w", {2}, {1, 1});
  init_input.node("Add", {"x", "w"}, {"y"}, "add");
  ModelBuilder big(17);
  big.input("x", {1}).output("y");
  big.init_i64("shape", {4096, 4096});
  big.node("Expand", {"x", "shape"}, {"y"}, "/embed/Expand");
  struct Case {
    std::string model, flags, message;
  };
  for (const Case& c : {Case{write(unused, "unused.onnx"), "", "graph input 'unused' is read by no node"},
                        Case{write(init_input, "init_input.onnx"), "", "graph input 'w' is also an initializer"},
                        Case{write(big, "big.onnx"), "--memory-limit 16M",
                             "node '/embed/Expand' (Expand): output 'y' (f32[4096x4096]) needs 64.00 MiB, over the "
                             "memory limit of 16.00 MiB"}}) {
    fs::path out = dir / "out";
    CliResult r = run_cli("optimize " + c.model + " -o " + out.string() + " " + c.flags);
    EXPECT_EQ(r.code, 1) << c.model << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(c.model), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
  // The ways out the messages name.
  EXPECT_EQ(run_cli("optimize " + (dir / "unused.onnx").string() + " -o " + (dir / "a").string() +
                    " --allow-unused-inputs --no-measure").code, 0);
  EXPECT_EQ(run_cli("optimize " + (dir / "init_input.onnx").string() + " -o " + (dir / "b").string() +
                    " --initializers-as-constants --no-measure").code, 0);
  EXPECT_EQ(run_cli("run " + (dir / "big.onnx").string() + " --memory-limit 1G").code, 0);
  CliResult bad_limit = run_cli("run " + (dir / "big.onnx").string() + " --memory-limit lots");
  EXPECT_EQ(bad_limit.code, 2) << bad_limit.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
