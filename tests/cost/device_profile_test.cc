// Device profiles: the shipped ones load and carry the public numbers, and
// bad files fail with a message naming the field.
#include "cost/device_profile.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "graph/error.h"

namespace tessera::cost {
namespace {

std::string error_of(const std::string& text) {
  try {
    profile_from_json(text, "bad.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kParse);
    return e.what();
  }
  return "no error";
}

// The H100 profile as JSON, edited by the tests to break one field.
std::string h100_text() { return profile_to_json(builtin_profile("h100")); }

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

TEST(DeviceProfile, BuiltinsLoadAndValidate) {
  for (std::string name : {"cpu", "a100", "h100", "h200"}) {
    DeviceProfile p = builtin_profile(name);
    EXPECT_EQ(p.name, name);
    EXPECT_NO_THROW(p.validate());
    EXPECT_GE(p.memory.size(), 2u) << name;
    EXPECT_FALSE(p.interconnect.empty()) << name;
  }
}

TEST(DeviceProfile, PublicSpecNumbers) {
  DeviceProfile h100 = builtin_profile("h100");
  EXPECT_EQ(h100.kind, DeviceKind::kGpu);
  EXPECT_EQ(h100.units, 132);
  EXPECT_DOUBLE_EQ(h100.main_memory().bandwidth, 3350e9);
  EXPECT_DOUBLE_EQ(h100.peak_flops(DType::kBF16, true), 989.4e12);
  EXPECT_EQ(h100.memory[1].capacity_bytes, 50 << 20);
  EXPECT_DOUBLE_EQ(h100.interconnect[0].bandwidth, 450e9);  // NVLink 4: 900 GB/s both ways
  DeviceProfile h200 = builtin_profile("h200");
  EXPECT_DOUBLE_EQ(h200.main_memory().bandwidth, 4800e9);
  EXPECT_GT(h200.main_memory().capacity_bytes, 140'000'000'000);
  EXPECT_DOUBLE_EQ(h200.peak_flops(DType::kBF16, true), h100.peak_flops(DType::kBF16, true));
  DeviceProfile a100 = builtin_profile("a100");
  EXPECT_DOUBLE_EQ(a100.main_memory().bandwidth, 2039e9);
  EXPECT_DOUBLE_EQ(a100.peak_flops(DType::kBF16, true), 312e12);
  EXPECT_EQ(a100.units, 108);
}

TEST(DeviceProfile, PeakFallsBackToVectorThenF32) {
  DeviceProfile h100 = builtin_profile("h100");
  // No i64 matrix peak: the vector unit's i64 rate.
  EXPECT_DOUBLE_EQ(h100.peak_flops(DType::kI64, true), h100.vector_flops.at(DType::kI64));
  // u8 is listed nowhere: the f32 vector rate.
  EXPECT_DOUBLE_EQ(h100.peak_flops(DType::kU8, false), h100.vector_flops.at(DType::kF32));
}

TEST(DeviceProfile, JsonRoundTrip) {
  DeviceProfile a = builtin_profile("a100");
  a.parallel_overhead_s = 2.5e-6;
  a.gemm_overhead_s = 4e-6;
  a.spin_window_s = 226e-6;
  a.wake_overhead_s = 52e-6;
  a.epilogue_ops_scale = 1.75;
  a.epilogue_operand_ops = 6.5;
  a.cold_launch_s = 4.25e-6;
  a.conv_efficiency_by_k = {{64, 0.75}, {576, 0.93}, {2304, 1.07}};
  a.memory.back().core_bandwidth = 61.5e9;
  a.softmax_ops = 20.5;
  a.softmax_row_ops = 1225;
  DeviceProfile b = profile_from_json(profile_to_json(a), "roundtrip");
  EXPECT_DOUBLE_EQ(b.softmax_ops, 20.5);
  EXPECT_DOUBLE_EQ(b.softmax_row_ops, 1225);
  EXPECT_NEAR(b.memory.back().core_bandwidth, 61.5e9, 1e-3);
  EXPECT_EQ(b.memory[0].core_bandwidth, 0.0);  // not measured: left out, reads back 0
  EXPECT_EQ(b.conv_efficiency_by_k, a.conv_efficiency_by_k);
  // Without points the field is left out, and reads back empty.
  EXPECT_TRUE(profile_from_json(profile_to_json(builtin_profile("a100")), "none").conv_efficiency_by_k.empty());
  EXPECT_DOUBLE_EQ(b.epilogue_ops_scale, 1.75);
  EXPECT_DOUBLE_EQ(b.epilogue_operand_ops, 6.5);
  EXPECT_NEAR(b.cold_launch_s, 4.25e-6, 1e-12);
  EXPECT_NEAR(b.parallel_overhead_s, 2.5e-6, 1e-12);
  EXPECT_NEAR(b.spin_window_s, 226e-6, 1e-12);
  EXPECT_NEAR(b.wake_overhead_s, 52e-6, 1e-12);
  EXPECT_NEAR(b.gemm_overhead_s, 4e-6, 1e-12);
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.units, a.units);
  EXPECT_EQ(b.memory.size(), a.memory.size());
  for (size_t i = 0; i < a.memory.size(); ++i) {
    EXPECT_EQ(b.memory[i].capacity_bytes, a.memory[i].capacity_bytes);
    EXPECT_NEAR(b.memory[i].bandwidth, a.memory[i].bandwidth, 1e-3);
  }
  EXPECT_NEAR(b.launch_overhead_s, a.launch_overhead_s, 1e-12);
  EXPECT_EQ(b.register_tile, a.register_tile);
}

// The fitted factors are rows of one table: each is written, read back,
// defaulted when absent and checked by it (transcendental_ops and
// launch_overhead_us are required; epilogue_ops_scale defaults to 1 and
// must be at least 1).
TEST(DeviceProfile, FactorRowsReadWriteAndCheckAlike) {
  DeviceProfile a = builtin_profile("h100");
  a.reorder_bandwidth = 12.5e9;
  a.conv_call_s = 3.25e-9;
  nlohmann::json j = nlohmann::json::parse(profile_to_json(a));
  EXPECT_DOUBLE_EQ(j["reorder_gbps"].get<double>(), 12.5);
  EXPECT_DOUBLE_EQ(j["conv_call_ns"].get<double>(), 3.25);
  j.erase("epilogue_ops_scale");
  EXPECT_DOUBLE_EQ(profile_from_json(j.dump(), "t").epilogue_ops_scale, 1.0);
  nlohmann::json no_launch = j;
  no_launch.erase("launch_overhead_us");
  EXPECT_NE(error_of(no_launch.dump()).find("'launch_overhead_us' is missing"), std::string::npos);
  j["epilogue_ops_scale"] = 0.5;
  EXPECT_NE(error_of(j.dump()).find("'epilogue_ops_scale' must be at least 1"), std::string::npos);
}

TEST(DeviceProfile, SaveAndLoadFile) {
  auto path = std::filesystem::temp_directory_path() / ("tessera_profile_" + std::to_string(::getpid()) + ".json");
  DeviceProfile p = builtin_profile("h200");
  p.gemm_efficiency = 0.5;
  p.calibrated = true;
  save_profile(p, path.string());
  DeviceProfile q = resolve_device(path.string());
  EXPECT_DOUBLE_EQ(q.gemm_efficiency, 0.5);
  EXPECT_TRUE(q.calibrated);
  std::filesystem::remove(path);
}

TEST(DeviceProfile, BadJsonFailsClearly) {
  EXPECT_NE(error_of("{ not json").find("bad.json: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{}").find("profile field 'format' is missing"), std::string::npos);
  std::string t = h100_text();
  EXPECT_NE(error_of(replace(t, "\"units\": 132", "\"units\": 0")).find("'units' must be at least 1"),
            std::string::npos);
  EXPECT_NE(error_of(replace(t, "\"bandwidth_gbps\": 3350.0", "\"bandwidth_gbps\": -1"))
                .find("'memory[2].bandwidth_gbps' must be positive"),
            std::string::npos);
  EXPECT_NE(error_of(replace(t, "\"bandwidth_gbps\": 3350.0", "\"bandwidth_gbps\": 3350.0, \"core_bandwidth_gbps\": -5"))
                .find("'memory[2].core_bandwidth_gbps' must be positive or absent"),
            std::string::npos);
  EXPECT_NE(error_of(replace(t, "\"transcendental_ops\"", "\"softmax_row_ops\": -1, \"transcendental_ops\""))
                .find("'softmax_row_ops' must not be negative"),
            std::string::npos);
  EXPECT_NE(error_of(replace(t, "\"bf16\"", "\"bf17\"")).find("is not a dtype name"), std::string::npos);
  EXPECT_NE(error_of(replace(t, "\"kind\": \"gpu\"", "\"kind\": \"tpu\"")).find("'kind' must be"),
            std::string::npos);
  EXPECT_NE(error_of(replace(t, "\"units\": 132", "\"units\": \"many\"")).find("'units' must be an integer"),
            std::string::npos);
  std::string by_k = "\"efficiency\": {\n    \"conv_by_k\": ";
  EXPECT_NE(error_of(replace(t, "\"efficiency\": {", by_k + "[[576, 0.9], [64, 0.8]],")).find("'efficiency.conv_by_k[1]' must come after"),
            std::string::npos);
  EXPECT_NE(error_of(replace(t, "\"efficiency\": {", by_k + "[[576, 3.0]],")).find("'efficiency.conv_by_k[0]' must have an efficiency"),
            std::string::npos);
  EXPECT_NE(error_of(replace(t, "\"efficiency\": {", by_k + "[576, 0.9],")).find("'efficiency.conv_by_k[0]' must be [K, efficiency]"),
            std::string::npos);
  // Levels out of order (main memory smaller than L2).
  EXPECT_NE(error_of(replace(t, "\"capacity_bytes\": 85899345920", "\"capacity_bytes\": 1024"))
                .find("memory[2].capacity_bytes"),
            std::string::npos);
}

// The error resolve_device(spec) throws: its kind and message (a test
// failure, and kInternal, where it throws none).
std::pair<ErrorKind, std::string> resolve_error(const std::string& spec) {
  try {
    resolve_device(spec);
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  ADD_FAILURE() << "resolve_device(\"" << spec << "\") threw nothing";
  return {ErrorKind::kInternal, ""};
}

TEST(DeviceProfile, UnknownDeviceAndMissingFile) {
  auto [kind, what] = resolve_error("tpu9");
  EXPECT_EQ(kind, ErrorKind::kUsage);
  EXPECT_NE(what.find("h100"), std::string::npos) << what;  // lists the known names
  EXPECT_EQ(resolve_error("/nonexistent/profile.json").first, ErrorKind::kIo);
}

// "cpu" is this host, which cost/ does not read (no process-wide profile):
// calibrate::prepare_device resolves it; a named or file profile resolves here.
TEST(DeviceProfile, ThisHostIsNotResolvedInCost) {
  auto [kind, what] = resolve_error("cpu");
  EXPECT_EQ(kind, ErrorKind::kUsage);
  EXPECT_NE(what.find("prepare_device"), std::string::npos) << what;
  EXPECT_EQ(resolve_device("h100").name, builtin_profile("h100").name);
  EXPECT_EQ(resolve_device(std::string(TESSERA_SOURCE_DIR) + "/cost/profiles/cpu.json").name,
            builtin_profile("cpu").name);
}

}  // namespace
}  // namespace tessera::cost

namespace tessera::cost {
namespace {

// Ranks that share a CPU host share its cores, FLOP/s and bandwidth; GPU
// ranks each have their own device.
TEST(DeviceProfile, RanksSharingACpuHostGetTheirShare) {
  DeviceProfile host = builtin_profile("cpu");
  EXPECT_EQ(ranks_per_node(host, 4), host.interconnect[0].devices_per_node);
  DeviceProfile one = rank_share(host, 2);
  EXPECT_EQ(one.units, host.units / 2);
  EXPECT_DOUBLE_EQ(one.peak_flops(DType::kF32, true), host.peak_flops(DType::kF32, true) / 2);
  EXPECT_DOUBLE_EQ(one.main_memory().bandwidth, host.main_memory().bandwidth / 2);
  EXPECT_EQ(one.main_memory().capacity_bytes, host.main_memory().capacity_bytes / 2);
  EXPECT_EQ(one.memory[0].capacity_bytes, host.memory[0].capacity_bytes);  // per core: kept
  one.validate();
  // No core_bandwidth: one thread of a process alone gets an even share of
  // a shared level, as a rank does.
  DeviceProfile t1 = thread_share(host, 1);
  EXPECT_EQ(t1.units, 1);
  EXPECT_DOUBLE_EQ(t1.main_memory().bandwidth, host.main_memory().bandwidth / static_cast<double>(host.units));
  EXPECT_DOUBLE_EQ(host.core_bandwidth(host.memory.size() - 1),
                   host.main_memory().effective_bandwidth() / static_cast<double>(host.units));
  DeviceProfile gpu = builtin_profile("h100");
  EXPECT_EQ(ranks_per_node(gpu, 16), 8);
  DeviceProfile g8 = rank_share(gpu, 8);
  EXPECT_EQ(g8.units, gpu.units);
  EXPECT_DOUBLE_EQ(g8.peak_flops(DType::kF32, true), gpu.peak_flops(DType::kF32, true));
}

// A shared level that does not scale with the cores (core_bandwidth: what one
// core alone streams): one thread of a process alone streams that much;
// ranks streaming at once still split the whole level's bandwidth; the core's
// figure never exceeds the level's, nor falls below an even share.
TEST(DeviceProfile, OneCoreAloneStreamsItsOwnRateFromASharedLevel) {
  DeviceProfile host = builtin_profile("cpu");
  host.units = 4;
  MemoryLevel& dram = host.memory.back();
  ASSERT_FALSE(dram.per_unit);
  dram.bandwidth = 100e9;
  dram.efficiency = 1.0;
  dram.core_bandwidth = 40e9;  // four cores stream 2.5x one core, not 4x
  host.validate();
  EXPECT_DOUBLE_EQ(host.core_bandwidth(host.memory.size() - 1), 40e9);
  DeviceProfile t1 = thread_share(host, 1);
  EXPECT_DOUBLE_EQ(t1.main_memory().effective_bandwidth(), 40e9);
  DeviceProfile t2 = thread_share(host, 2);
  EXPECT_DOUBLE_EQ(t2.main_memory().effective_bandwidth(), 80e9);
  EXPECT_EQ(t2.units, 2);
  DeviceProfile r4 = rank_share(host, 4);  // four ranks at once: a quarter each
  EXPECT_DOUBLE_EQ(r4.main_memory().effective_bandwidth(), 25e9);
  EXPECT_DOUBLE_EQ(r4.core_bandwidth(r4.memory.size() - 1), 25e9);
  dram.core_bandwidth = 10e9;  // below an even share (noise): the even share
  EXPECT_DOUBLE_EQ(host.core_bandwidth(host.memory.size() - 1), 25e9);
  // The private levels scale with the cores as before.
  ASSERT_TRUE(host.memory[0].per_unit);
  EXPECT_DOUBLE_EQ(t1.memory[0].bandwidth, host.memory[0].bandwidth / 4);
}

// One scaling for ranks, threads and the calibration (scale_to_cores): a
// process alone on some cores keeps the shared caches whole, ranks split
// them; scaled up, main memory stops at a socket's bandwidth.
TEST(DeviceProfile, ScaleToCoresSplitsSharedCapacityOnlyBetweenRanks) {
  DeviceProfile host = builtin_profile("cpu");
  host.units = 4;
  const size_t llc = host.memory.size() - 2;
  ASSERT_FALSE(host.memory[llc].per_unit);
  DeviceProfile alone = scale_to_cores(host, 1, CoreSharing::kAlone);
  DeviceProfile rank = scale_to_cores(host, 1, CoreSharing::kRanks);
  EXPECT_EQ(alone.units, 1);
  EXPECT_EQ(alone.memory[llc].capacity_bytes, host.memory[llc].capacity_bytes);
  EXPECT_EQ(rank.memory[llc].capacity_bytes, host.memory[llc].capacity_bytes / 4);
  EXPECT_DOUBLE_EQ(alone.peak_flops(DType::kF32, false), host.peak_flops(DType::kF32, false) / 4);
  EXPECT_EQ(thread_share(host, 1).memory[llc].capacity_bytes, host.memory[llc].capacity_bytes);
  EXPECT_EQ(rank_share(host, 4).memory[llc].capacity_bytes, host.memory[llc].capacity_bytes / 4);
  // Fitted on one core, scaled to 256: FLOP/s 256x, main memory capped.
  DeviceProfile big = scale_to_cores(alone, 256, CoreSharing::kAlone);
  EXPECT_EQ(big.units, 256);
  EXPECT_DOUBLE_EQ(big.peak_flops(DType::kF32, false), alone.peak_flops(DType::kF32, false) * 256);
  EXPECT_DOUBLE_EQ(big.main_memory().bandwidth, std::max(307.2e9, alone.main_memory().bandwidth));
  EXPECT_EQ(scale_to_cores(builtin_profile("h100"), 1, CoreSharing::kRanks).units, builtin_profile("h100").units);
}

}  // namespace
}  // namespace tessera::cost
