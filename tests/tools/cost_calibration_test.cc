// `--device cpu` and the host profile cache, through the CLI: the first use
// on a host without a profile calibrates once and caches it, the next run
// uses the cache, --no-calibrate keeps the detected profile, and a stale or
// corrupt cached profile is ignored with one line. Each test has its own
// cache folder (--profile-cache); none reads the user's. Only the structure
// is checked (what was written, what was said), never a measured value.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "calibrate/host_identity.h"
#include "calibrate/host_profile_cache.h"
#include "cost/device_profile.h"
#include "tests/tools/cli_run.h"
#include "tools/api/tessera.h"

namespace {

namespace fs = std::filesystem;
using namespace tessera;

using Result = tessera::testing::CliResult;
using tessera::testing::kTessera;
using tessera::testing::read_file;

const std::string kModel = std::string(TESSERA_SOURCE_DIR) + "/examples/tiny_cnn.onnx";


class HostProfileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera_calib_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    cache_ = root_ / "cache";
  }
  void TearDown() override { fs::remove_all(root_); }

  Result run(const std::string& args) {
    std::string cmd = kTessera + " " + args + " >" + (root_ / "out").string() + " 2>" + (root_ / "err").string();
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_file(root_ / "out");
    r.err = read_file(root_ / "err");
    return r;
  }
  std::string cost_args() { return "cost " + kModel + " --json --profile-cache " + cache_.string(); }
  fs::path cached() { return calibrate::cached_profile_path(cache_.string(), calibrate::read_host_identity()); }
  fs::path clock_file() { return calibrate::cached_clock_path(cache_.string(), calibrate::read_host_identity()); }
  static nlohmann::json device_of(const Result& r) { return nlohmann::json::parse(r.out)["device"]; }

  fs::path root_, cache_;
};

// --no-calibrate: the detected profile, silently; the cache gets no
// profile, only the probed clock, so that a second run prices alike.
TEST_F(HostProfileCli, NoCalibrateUsesTheDetectedProfileAndKeepsOnlyItsClock) {
  Result r = run(cost_args() + " --no-calibrate");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(device_of(r)["calibrated"].get<bool>());
  std::string described = device_of(r)["description"].get<std::string>();
  EXPECT_NE(described.find("detected"), std::string::npos);
  EXPECT_FALSE(fs::exists(cached()));
  EXPECT_TRUE(fs::exists(clock_file()));
  Result again = run(cost_args() + " --no-calibrate");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(device_of(again)["description"].get<std::string>(), described);
  EXPECT_EQ(again.out, r.out);
}

// The first-use path: one quick calibration (said on stderr),
// cached under the host's key; the second run is silent and uses it.
TEST_F(HostProfileCli, FirstUseCalibratesOnceThenTheCacheIsUsed) {
  Result first = run(cost_args());
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.err.find("calibrating it once"), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("wrote " + cached().string()), std::string::npos) << first.err;
  ASSERT_TRUE(fs::exists(cached()));
  EXPECT_TRUE(device_of(first)["calibrated"].get<bool>());
  cost::DeviceProfile p = cost::load_profile(cached().string());
  EXPECT_TRUE(p.calibrated);
  EXPECT_NE(p.source.find("quick calibration"), std::string::npos);
  // The convolution efficiency by reduction length: a 1x1 convolution of
  // 64 channels, 3x3 ones of 64 and 256.
  ASSERT_EQ(p.conv_efficiency_by_k.size(), 3u);
  EXPECT_EQ(p.conv_efficiency_by_k[0].first, 64);
  EXPECT_EQ(p.conv_efficiency_by_k[1].first, 576);
  EXPECT_EQ(p.conv_efficiency_by_k[2].first, 2304);
  // Softmax's cost per element and per row, or the note that it kept the
  // formula.
  if (p.softmax_ops > 0) {
    EXPECT_GE(p.softmax_ops, 4.0);
    EXPECT_GE(p.softmax_row_ops, 0.0);
    EXPECT_NE(p.source.find("softmax "), std::string::npos) << p.source;
  } else {
    EXPECT_NE(p.source.find("softmax not fitted"), std::string::npos) << p.source;
  }
  // The shared levels measured on every core, one core's rate kept apart;
  // on a busy machine (this suite runs two tests at once) they are one
  // core's rate scaled, and the source says so.
  for (const cost::MemoryLevel& m : p.memory) {
    if (m.per_unit || p.units <= 1) {
      EXPECT_EQ(m.core_bandwidth, 0.0) << m.name;
    } else if (m.core_bandwidth > 0) {
      EXPECT_GE(m.effective_bandwidth(), m.core_bandwidth * (1 - 1e-9)) << m.name;
      EXPECT_LE(m.effective_bandwidth(), m.core_bandwidth * static_cast<double>(p.units) * (1 + 1e-9)) << m.name;
      EXPECT_NE(p.source.find(m.name + " " ), std::string::npos) << p.source;
    } else {
      EXPECT_NE(p.source.find("shared levels scaled from one core"), std::string::npos) << p.source;
    }
  }
  EXPECT_EQ(p.host_key.substr(0, p.host_key.rfind('/')), calibrate::read_host_identity().cache_key());

  Result second = run(cost_args());
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_EQ(second.err, "");
  EXPECT_TRUE(device_of(second)["calibrated"].get<bool>());
  double a = nlohmann::json::parse(first.out)["total_us"], b = nlohmann::json::parse(second.out)["total_us"];
  EXPECT_NEAR(a, b, 1e-9 * a);  // the same profile, through its file
}

TEST_F(HostProfileCli, CorruptCachedProfileIsIgnoredWithOneLine) {
  fs::create_directories(cache_);
  std::ofstream(cached()) << "{\"format\": \"tessera-device-profile\", \"version\": 1, \"na";
  Result r = run(cost_args() + " --no-calibrate");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("ignoring cached CPU profile " + cached().string()), std::string::npos) << r.err;
  EXPECT_FALSE(device_of(r)["calibrated"].get<bool>());
}

TEST_F(HostProfileCli, AnotherHostsProfileIsStaleAndSaysWhy) {
  fs::create_directories(cache_);
  cost::DeviceProfile p = cost::builtin_profile("cpu");
  p.calibrated = true;
  p.host_key = "AuthenticAMD-25-17-1-AMD_EPYC_9R14_96_Core_Processor-2c/v2";
  p.host_summary = "AMD EPYC 9R14 96-Core Processor (family 25 model 17, 2 cores)";
  cost::save_profile(p, cached().string());
  Result r = run(cost_args() + " --no-calibrate");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("measured on AMD EPYC 9R14"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("this host is " + calibrate::read_host_identity().summary()), std::string::npos) << r.err;
  EXPECT_FALSE(device_of(r)["calibrated"].get<bool>());
}

TEST_F(HostProfileCli, CalibrateWritesTheCacheAndOtherDevicesSkipIt) {
  // A device other than cpu never looks at the host.
  Result gpu = run(cost_args() + " --device h100");
  ASSERT_EQ(gpu.code, 0) << gpu.err;
  EXPECT_EQ(gpu.err, "");
  EXPECT_FALSE(fs::exists(cache_));
  // --calibrate --threads 1 on a host of more cores is not the host's profile.
  if (calibrate::read_host_identity().cores() > 1) {
    Result part = run("cost --calibrate --threads 1 --profile-cache " + cache_.string());
    EXPECT_EQ(part.code, 2);
    EXPECT_NE(part.err.find("--output"), std::string::npos) << part.err;
  }
}

// A model that cannot be read fails at once, naming the file, without the
// first use's calibration (seconds spent, a profile written, for nothing).
TEST_F(HostProfileCli, AMissingModelFailsBeforeCalibrating) {
  std::string missing = (root_ / "missing.onnx").string();
  for (const std::string& cmd : {"cost " + missing, "optimize " + missing + " -o " + (root_ / "plan").string()}) {
    Result r = run(cmd + " --device cpu --profile-cache " + cache_.string());
    EXPECT_EQ(r.code, 1) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("calibrating"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(cached())) << cmd;
    EXPECT_FALSE(fs::exists(root_ / "plan")) << cmd;
  }
}

TEST_F(HostProfileCli, OptimizeTakesTheSameFlags) {
  Result r = run("optimize " + kModel + " -o " + (root_ / "plan").string() +
                 " --budget 3 --no-measure --no-calibrate --profile-cache " + cache_.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(cached()));
  EXPECT_TRUE(fs::exists(clock_file()));
  EXPECT_TRUE(fs::exists(root_ / "plan" / "plan.json"));
}

// The device is resolved once, at the API boundary, by the same function
// (calibrate::prepare_device) for the C++ API, the CLI and the Python
// module: on a fresh cache the first of them to run (the C++ API here)
// calibrates and caches the profile, and all three write the same plan.
// Before, only the CLI calibrated: the API planned on the detected profile.
TEST_F(HostProfileCli, CliApiAndPythonPlanAlike) {
  // XDG_CACHE_HOME=root_: the default cache folder, which the Python module
  // uses, is the one given to the CLI and the C++ API.
  const fs::path cache = root_ / "tessera";
  const std::string flags = " --budget 60 --no-measure --seed 0";
  api::OptimizeConfig config;
  config.profile_cache = cache.string();
  config.budget_s = 60;
  config.measure = false;
  config.seed = 0;
  api::optimize(api::load(kModel), (root_ / "api").string(), config);
  const fs::path profile = calibrate::cached_profile_path(cache.string(), calibrate::read_host_identity());
  ASSERT_TRUE(fs::exists(profile)) << "the C++ API did not calibrate on first use";
  auto profile_time = fs::last_write_time(profile);

  Result cli = run("optimize " + kModel + " -o " + (root_ / "cli").string() + flags + " --profile-cache " +
                   cache.string());
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_EQ(cli.err.find("calibrating"), std::string::npos) << cli.err;  // the API's profile, from the cache
  EXPECT_EQ(fs::last_write_time(profile), profile_time);
  const std::string api_model = read_file(root_ / "api" / "model.onnx");
  ASSERT_FALSE(api_model.empty());
  EXPECT_EQ(read_file(root_ / "cli" / "model.onnx"), api_model);
  // The plan's predicted times are the profile's: tiny_cnn's model.onnx is
  // the same on a detected profile (no rewrite pays on either), its
  // predictions are not. The CLI on the detected profile (an empty cache,
  // no calibration) is the twin that must differ.
  auto predicted = [](const fs::path& dir) {
    return nlohmann::json::parse(read_file(dir / "plan.json")).at("predicted_cost").dump();
  };
  const std::string api_predicted = predicted(root_ / "api");
  EXPECT_EQ(predicted(root_ / "cli"), api_predicted);
  Result detected = run("optimize " + kModel + " -o " + (root_ / "detected").string() + flags +
                        " --no-calibrate --profile-cache " + (root_ / "empty").string());
  ASSERT_EQ(detected.code, 0) << detected.err;
  EXPECT_NE(predicted(root_ / "detected"), api_predicted);

  const std::string python_dir = std::string(TESSERA_BINARY_DIR) + "/python";
  // The module is built where pybind11 is found (python/CMakeLists.txt).
  if (!fs::exists(fs::path(python_dir) / "tessera" / "__init__.py")) GTEST_SKIP() << "no Python module in this build";
  std::string py = "XDG_CACHE_HOME=" + root_.string() + " PYTHONPATH=" + python_dir +
                   " python3 -c \"import tessera; tessera.optimize('" + kModel +
                   "', budget=60, seed=0, measure=False).save('" + (root_ / "python").string() + "')\" >" +
                   (root_ / "out").string() + " 2>" + (root_ / "err").string();
  int status = std::system(py.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0 &&
      read_file(root_ / "err").find("No module named") != std::string::npos)
    GTEST_SKIP() << read_file(root_ / "err");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(root_ / "err");
  EXPECT_EQ(read_file(root_ / "python" / "model.onnx"), api_model);
  EXPECT_EQ(predicted(root_ / "python"), api_predicted);
}

}  // namespace
