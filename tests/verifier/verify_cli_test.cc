// End-to-end tests of `tessera verify`: exit codes, the verdict line, the
// differing boxes (text and JSON), on small models written by the exporter.
#include <gtest/gtest.h>

#include "verifier/proofs.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "onnx_import/onnx_export.h"
#include "tests/verifier/test_graphs.h"

namespace tessera::verifier {
namespace {

namespace fs = std::filesystem;
using testing::concat;
using testing::f32;
using testing::slice;

const std::string kTessera = std::string(TESSERA_BINARY_DIR) + "/bin/tessera";

struct Result {
  int code = -1;
  std::string out, err;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class VerifyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_verify_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string save(const Graph& g, const std::string& name) {
    std::string path = (dir_ / name).string();
    save_onnx_file(g, path);
    return path;
  }

  Result verify(const std::string& args) {
    std::string cmd = kTessera + " verify " + args + " >" + (dir_ / "out").string() + " 2>" + (dir_ / "err").string();
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(dir_ / "out");
    r.err = read_file(dir_ / "err");
    return r;
  }

  fs::path dir_;
};

// (a + b) @ w against a @ w + b @ w.
Graph distributivity(bool distributed) {
  Graph g;
  ValueId a = g.add_input("a", f32({3, 4})), b = g.add_input("b", f32({3, 4})), w = g.add_input("w", f32({4, 2}));
  ValueId y = distributed ? g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {a, w}), g.add(OpKind::kMatMul, {b, w})})
                          : g.add(OpKind::kMatMul, {g.add(OpKind::kAdd, {a, b}), w});
  g.set_outputs({y});
  g.rename_value(y, "y");
  return g;
}

// Rows [start, start + 2) of concat(x, y) along rows; start 3 gives y's
// first two rows back, start 2 is off by one.
Graph window(bool sliced, int64_t start) {
  Graph g;
  ValueId x = g.add_input("x", f32({3, 4})), y = g.add_input("y", f32({5, 4}));
  ValueId out = sliced ? slice(g, concat(g, {x, y}, 0), {start}, {start + 2}, {0}) : slice(g, y, {0}, {2}, {0});
  g.set_outputs({out});
  g.rename_value(out, "out");
  return g;
}

// relu(relu(x)) = relu(x) over the reals, but the Z_p reading (relu as an
// uninterpreted function) cannot see it: the verdict is unknown.
Graph relus(int count) {
  Graph g;
  ValueId v = g.add_input("x", f32({2, 3}));
  for (int i = 0; i < count; ++i) v = g.add(OpKind::kRelu, {v});
  g.set_outputs({v});
  g.rename_value(v, "r");
  return g;
}

TEST_F(VerifyCli, EquivalentExitsZero) {
  Result r = verify(save(distributivity(false), "a.onnx") + " " + save(distributivity(true), "b.onnx"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("equivalent (multilinear", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("error bound"), std::string::npos) << r.out;
}

TEST_F(VerifyCli, DifferingExitsOneAndPrintsTheBoxes) {
  std::string a = save(window(false, 0), "a.onnx"), b = save(window(true, 2), "b.onnx");
  Result r = verify(a + " " + b);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("differs", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("output 0 (out): [0:2, 0:4]"), std::string::npos) << r.out;

  Result j = verify(a + " " + b + " --json");
  EXPECT_EQ(j.code, 1) << j.err;
  nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["verdict"], "differs");
  ASSERT_EQ(doc["differing"].size(), 1u);
  EXPECT_EQ(doc["differing"][0]["name"], "out");
  EXPECT_EQ(doc["differing"][0]["boxes"][0]["lo"], (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(doc["differing"][0]["boxes"][0]["hi"], (std::vector<int64_t>{2, 4}));

  // The right window is equivalent: the boxes above come from the slice.
  EXPECT_EQ(verify(a + " " + save(window(true, 3), "c.onnx")).code, 0);
}

TEST_F(VerifyCli, UnknownExitsThreeWithTheReason) {
  Result r = verify(save(relus(1), "a.onnx") + " " + save(relus(2), "b.onnx"));
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("unknown", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("floats agree"), std::string::npos) << r.out;
}

TEST_F(VerifyCli, UsageErrorsExitTwo) {
  std::string a = save(relus(1), "a.onnx");
  Result missing = verify(a);
  EXPECT_EQ(missing.code, 2) << missing.out << missing.err;
  EXPECT_EQ(verify(a + " " + a + " --no-such-flag").code, 2);
  // Models whose inputs do not match cannot be compared.
  Result mismatch = verify(a + " " + save(distributivity(false), "b.onnx"));
  EXPECT_EQ(mismatch.code, 2) << mismatch.out << mismatch.err;
  EXPECT_NE(mismatch.err.find("inputs"), std::string::npos) << mismatch.err;
  Result help = verify("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("candidate"), std::string::npos) << help.out;
}

TEST_F(VerifyCli, ProveRulesProvesEveryObligation) {
  Result r = verify("--prove-rules --json");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc.size(), proof_obligations().size());
  for (const auto& entry : doc) EXPECT_EQ(entry["status"], "proven") << entry.dump();
  EXPECT_EQ(verify("--prove-rules " + save(relus(1), "a.onnx")).code, 2);
}

}  // namespace
}  // namespace tessera::verifier
