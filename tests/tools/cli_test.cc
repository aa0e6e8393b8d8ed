// End-to-end tests of the tessera CLI: exit codes, messages, outputs.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "onnx_import/tensor_proto.h"
#include "tests/plan_schema.h"
#include "tests/tools/cli_run.h"

namespace {

namespace fs = std::filesystem;

using Result = tessera::testing::CliResult;
using tessera::testing::kExamples;
using tessera::testing::read_file;

Result run(const std::string& args) { return tessera::testing::run_cli(args); }
fs::path scratch(const std::string& name) { return tessera::testing::scratch_path(name); }

TEST(Cli, HelpOnEveryVerb) {
  for (const char* verb : {"", "inspect ", "run "}) {
    Result r = run(std::string(verb) + "--help");
    EXPECT_EQ(r.code, 0) << verb;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << verb << r.out;
  }
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(run("").code, 2);
  EXPECT_EQ(run("frobnicate").code, 2);
  EXPECT_EQ(run("inspect").code, 2);  // missing model
  EXPECT_EQ(run("inspect " + kExamples + "/tiny_cnn.onnx --no-such-flag").code, 2);
  Result r = run("inspect " + kExamples + "/tiny_cnn.onnx --input-shape nonsense");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nonsense"), std::string::npos) << r.err;
}

TEST(Cli, MissingModelFileIsOneLineError) {
  Result r = run("inspect /nonexistent/model.onnx");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.onnx"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(Cli, TruncatedModelIsErrorAndWritesNothing) {
  fs::path dir = scratch("trunc");
  fs::create_directories(dir);
  std::string bytes = read_file(kExamples + "/tiny_cnn.onnx");
  ASSERT_GT(bytes.size(), 1000u);
  {
    std::ofstream out(dir / "cut.onnx", std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  Result r = run("run " + (dir / "cut.onnx").string() + " --output-dir " + (dir / "out").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cut.onnx"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
  fs::remove_all(dir);
}

TEST(Cli, InspectDescribesModel) {
  Result r = run("inspect " + kExamples + "/tiny_cnn.onnx");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Conv"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters:"), std::string::npos);
  EXPECT_NE(r.out.find("flops:"), std::string::npos);

  Result j = run("inspect --json " + kExamples + "/tiny_cnn.onnx");
  ASSERT_EQ(j.code, 0) << j.err;
  nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_GT(doc["flops"].get<int64_t>(), 0);
  EXPECT_GT(doc["parameters"].get<int64_t>(), 0);
  EXPECT_GE(doc["ops"]["Conv"].get<int64_t>(), 1);
  ASSERT_EQ(doc["inputs"].size(), 1u);
  EXPECT_EQ(doc["inputs"][0]["dtype"], "f32");
}

TEST(Cli, RunIsDeterministicForASeed) {
  std::string model = kExamples + "/tiny_cnn.onnx";
  Result a = run("run " + model + " --seed 7");
  Result b = run("run " + model + " --seed 7");
  Result c = run("run " + model + " --seed 8");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  EXPECT_NE(a.out.find("sum="), std::string::npos);
}

// The bundled reference input/output were produced by ONNX Runtime.
TEST(Cli, RunMatchesOnnxRuntimeReference) {
  for (const char* name : {"tiny_cnn", "tiny_transformer"}) {
    fs::path ref = fs::path(kExamples) / name;
    fs::path out = scratch(std::string("run_") + name);
    Result r = run("run " + kExamples + "/" + name + ".onnx --input " + (ref / "input_0.pb").string() +
                   " --output-dir " + out.string());
    ASSERT_EQ(r.code, 0) << name << ": " << r.err;
    tessera::Tensor got = tessera::read_tensor_file((out / "output_0.pb").string());
    tessera::Tensor want = tessera::read_tensor_file((ref / "output_0.pb").string());
    ASSERT_EQ(got.type(), want.type()) << name;
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      max_err = std::max(max_err, std::fabs(got.get_double(i) - want.get_double(i)));
      max_ref = std::max(max_ref, std::fabs(want.get_double(i)));
    }
    EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_ref)) << name;
    fs::remove_all(out);
  }
}

TEST(Cli, RunRejectsWrongInputType) {
  fs::path dir = scratch("badinput");
  fs::create_directories(dir);
  tessera::write_tensor_file(tessera::Tensor(tessera::DType::kF32, {2, 2}), "x", (dir / "x.pb").string());
  Result r = run("run " + kExamples + "/tiny_cnn.onnx --input " + (dir / "x.pb").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("f32[2x2]"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

tessera::Tensor run_to_tensor(const std::string& model, const std::string& flags, const std::string& tag) {
  fs::path out = scratch(tag);
  Result r = run("run " + model + " --seed 3 --output-dir " + out.string() + " " + flags);
  EXPECT_EQ(r.code, 0) << flags << ": " << r.err;
  tessera::Tensor t = r.code == 0 ? tessera::read_tensor_file((out / "output_0.pb").string()) : tessera::Tensor();
  fs::remove_all(out);
  return t;
}

TEST(Cli, CpuAndReferenceBackendsAgree) {
  for (const char* name : {"tiny_cnn", "tiny_transformer"}) {
    std::string model = kExamples + "/" + name + ".onnx";
    tessera::Tensor cpu = run_to_tensor(model, "--backend cpu --threads 1", std::string("cpu_") + name);
    tessera::Tensor ref = run_to_tensor(model, "--backend reference", std::string("ref_") + name);
    ASSERT_EQ(cpu.type(), ref.type()) << name;
    ASSERT_GT(cpu.numel(), 0) << name;
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < cpu.numel(); ++i) {
      max_err = std::max(max_err, std::fabs(cpu.get_double(i) - ref.get_double(i)));
      max_ref = std::max(max_ref, std::fabs(ref.get_double(i)));
    }
    EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_ref)) << name;
  }
}

TEST(Cli, ProfilePrintsKernelTable) {
  Result r = run("run " + kExamples + "/tiny_cnn.onnx --profile");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ms/run"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Conv"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over 1 runs"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("median latency"), std::string::npos) << r.out;
  // The memory line: the arena never exceeds the sum of the intermediates.
  double arena = 0, intermediates = 0;
  size_t at = r.out.find("memory: arena ");
  ASSERT_NE(at, std::string::npos) << r.out;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "memory: arena %lf MiB for %lf MiB", &arena, &intermediates), 2) << r.out;
  EXPECT_GT(intermediates, 0.0);
  EXPECT_LE(arena, intermediates);
}

TEST(Cli, RepeatPrintsMedianLatency) {
  Result r = run("run " + kExamples + "/tiny_transformer.onnx --repeat 3 --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("median latency: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over 3 runs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("threads 1"), std::string::npos) << r.out;
}

TEST(Cli, BadRunFlagsAreUsageErrors) {
  std::string model = kExamples + "/tiny_cnn.onnx";
  Result bad_backend = run("run " + model + " --backend tpu");
  EXPECT_EQ(bad_backend.code, 2);
  EXPECT_NE(bad_backend.err.find("tpu"), std::string::npos) << bad_backend.err;
  EXPECT_EQ(run("run " + model + " --threads -1").code, 2);
  EXPECT_EQ(run("run " + model + " --repeat x").code, 2);
}

// --device-memory takes sizes as --memory-limit does; a bad one is a usage
// error naming the flag, before anything is written.
TEST(Cli, DeviceMemoryTakesSizes) {
  std::string model = kExamples + "/tiny_cnn.onnx";
  fs::path out = fs::temp_directory_path() / ("tessera_cli_device_memory_" + std::to_string(::getpid()));
  fs::remove_all(out);
  Result bad = run("optimize " + model + " -o " + out.string() + " --device h100 --mesh tp=2 --device-memory 2Q");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--device-memory"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(out));
  Result ok = run("optimize " + model + " -o " + out.string() + " --device h100 --mesh tp=2 --device-memory 16G --budget 5 --no-measure");
  EXPECT_EQ(ok.code, 0) << ok.err;
  fs::remove_all(out);
}

// `tessera run PLAN_DIR` checks the folder against plan.json first
// (mutator/plan_files.h): an edited model.onnx, a missing one, an unknown
// format version or an old plan without file digests are refused in one
// line with exit code 1, before anything is loaded.
TEST(Cli, RunRefusesAPlanWhoseFilesOrVersionDoNotMatch) {
  fs::path plan = scratch("plan_check");
  ASSERT_EQ(run("optimize " + kExamples + "/tiny_cnn.onnx -o " + plan.string() + " --budget 5 --no-calibrate").code, 0);
  EXPECT_PLAN_MATCHES_SCHEMA(plan);
  ASSERT_EQ(run("run " + plan.string()).code, 0);
  const std::string original = read_file(plan / "plan.json");
  auto expect_refused = [&](const std::string& what, const std::string& message) {
    Result r = run("run " + plan.string());
    EXPECT_EQ(r.code, 1) << what << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
  };
  // Another valid model in place of the plan's (the original model).
  fs::copy_file(plan / "model.onnx", plan / "kept.onnx");
  fs::copy_file(kExamples + "/tiny_cnn.onnx", plan / "model.onnx", fs::copy_options::overwrite_existing);
  expect_refused("edited model", (plan / "model.onnx").string() + ": does not match the plan");
  fs::rename(plan / "kept.onnx", plan / "model.onnx");
  ASSERT_EQ(run("run " + plan.string()).code, 0);

  nlohmann::json j = nlohmann::json::parse(original);
  j["format_version"] = 7;
  std::ofstream(plan / "plan.json") << j.dump();
  expect_refused("version 7", "plan format version 7 is not one this Tessera reads");
  j["format_version"] = 1;
  j.erase("files");
  std::ofstream(plan / "plan.json") << j.dump();
  expect_refused("version 1", "plan format version 1 is not one this Tessera reads");
  j["format_version"] = 4;
  std::ofstream(plan / "plan.json") << j.dump();
  expect_refused("no files", "the plan lists no \"files\"");
  std::ofstream(plan / "plan.json") << "{\"format_version\": ";
  expect_refused("truncated plan.json", "not a plan");
  std::ofstream(plan / "plan.json") << original;
  fs::remove(plan / "model.onnx");
  std::ofstream(plan / "rank0.onnx") << "x";  // neither form's files: a folder that only looks like a mesh plan
  expect_refused("missing model", "missing; plan.json lists it");
  fs::remove_all(plan);
}

}  // namespace
