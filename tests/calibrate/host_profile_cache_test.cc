// The host profile cache: one file per host key, used only when it is this
// host's calibrated profile at this calibration version; anything else is
// ignored with a note saying why, never an exception.
#include "calibrate/host_profile_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "graph/error.h"

namespace tessera::calibrate {
namespace {

using namespace cost;  // identities and profiles are cost/'s values

namespace fs = std::filesystem;

CpuIdentity host(const std::string& name, int cpus) {
  std::string text;
  for (int i = 0; i < cpus; ++i)
    text += "processor\t: " + std::to_string(i) +
            "\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\nmodel name\t: " + name +
            "\nstepping\t: 2\ncpu MHz\t\t: 2100.000\nflags\t\t: fma avx2 avx512f amx_tile amx_bf16 hypervisor\n\n";
  CpuIdentity id = parse_cpuinfo(text);
  add_sysfs_cache(id, "1", "Data", "48K", "0");
  add_sysfs_cache(id, "2", "Unified", "2048K", "0");
  add_sysfs_cache(id, "3", "Unified", "307200K", "0-" + std::to_string(cpus - 1));
  return id;
}

DeviceProfile calibrated(const CpuIdentity& id) {
  DeviceProfile p = detect_host_cpu(id);
  p.calibrated = true;
  p.gemm_efficiency = 0.77;  // a fitted value the test can recognize
  return p;
}

class HostProfileCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-profile-cache-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(HostProfileCache, AbsentIsSilent) {
  CachedProfile c = load_cached_profile(dir_.string(), host("Intel(R) Xeon(R) Processor", 2));
  EXPECT_FALSE(c.profile);
  EXPECT_EQ(c.note, "");
}

TEST_F(HostProfileCache, SavedProfileIsFoundByItsHost) {
  CpuIdentity id = host("Intel(R) Xeon(R) Processor", 2);
  std::string path = save_cached_profile(calibrated(id), dir_.string(), id);
  EXPECT_EQ(path, cached_profile_path(dir_.string(), id));
  EXPECT_NE(path.find(id.cache_key()), std::string::npos);
  CachedProfile c = load_cached_profile(dir_.string(), id);
  ASSERT_TRUE(c.profile) << c.note;
  EXPECT_EQ(c.note, "");
  EXPECT_DOUBLE_EQ(c.profile->gemm_efficiency, 0.77);
  EXPECT_EQ(c.profile->host_summary, id.summary());
  // Another core count is another key, so another file: not found.
  CachedProfile other = load_cached_profile(dir_.string(), host("Intel(R) Xeon(R) Processor", 4));
  EXPECT_FALSE(other.profile);
  EXPECT_EQ(other.note, "");
}

// A profile copied from another host to this host's file name.
TEST_F(HostProfileCache, AnotherHostsProfileIsStale) {
  CpuIdentity here = host("Intel(R) Xeon(R) Processor", 2), there = host("Intel(R) Xeon(R) Processor", 8);
  DeviceProfile p = calibrated(there);
  stamp_host(p, there);
  save_profile(p, cached_profile_path(dir_.string(), here));
  CachedProfile c = load_cached_profile(dir_.string(), here);
  EXPECT_FALSE(c.profile);
  EXPECT_NE(c.note.find("ignoring cached CPU profile"), std::string::npos) << c.note;
  EXPECT_NE(c.note.find("measured on " + there.summary()), std::string::npos) << c.note;
  EXPECT_NE(c.note.find("this host is " + here.summary()), std::string::npos) << c.note;
  EXPECT_EQ(c.note.find('\n'), std::string::npos);
}

TEST_F(HostProfileCache, OlderCalibrationAndUncalibratedAreStale) {
  CpuIdentity id = host("Intel(R) Xeon(R) Processor", 2);
  DeviceProfile old = calibrated(id);
  old.host_key = id.cache_key() + "/v1";
  save_profile(old, cached_profile_path(dir_.string(), id));
  CachedProfile c = load_cached_profile(dir_.string(), id);
  EXPECT_FALSE(c.profile);
  EXPECT_NE(c.note.find("older calibration"), std::string::npos) << c.note;
  DeviceProfile detected = detect_host_cpu(id);
  stamp_host(detected, id);
  save_profile(detected, cached_profile_path(dir_.string(), id));
  c = load_cached_profile(dir_.string(), id);
  EXPECT_FALSE(c.profile);
  EXPECT_NE(c.note.find("not calibrated"), std::string::npos) << c.note;
}

TEST_F(HostProfileCache, CorruptFilesAreIgnoredWithOneLine) {
  CpuIdentity id = host("Intel(R) Xeon(R) Processor", 2);
  fs::create_directories(dir_);
  for (const std::string text : {std::string("{\"format\": \"tessera-device-profile\", \"vers"), std::string(""),
                                 std::string("[1, 2, 3]"), std::string("\x00\xff garbage", 10)}) {
    std::ofstream(cached_profile_path(dir_.string(), id)) << text;
    CachedProfile c;
    EXPECT_NO_THROW(c = load_cached_profile(dir_.string(), id));
    EXPECT_FALSE(c.profile);
    EXPECT_NE(c.note.find("ignoring cached CPU profile " + cached_profile_path(dir_.string(), id)), std::string::npos)
        << c.note;
    EXPECT_EQ(c.note.find('\n'), std::string::npos) << c.note;
  }
  // A profile a user edited into an invalid one.
  std::string valid = profile_to_json(calibrated(id));
  valid.replace(valid.find("\"units\": 2"), 10, "\"units\": 0");
  std::ofstream(cached_profile_path(dir_.string(), id)) << valid;
  CachedProfile c = load_cached_profile(dir_.string(), id);
  EXPECT_FALSE(c.profile);
  EXPECT_NE(c.note.find("units"), std::string::npos) << c.note;
}

// What `tessera cost --calibrate` wrote before profiles were keyed by host.
TEST_F(HostProfileCache, UnkeyedLegacyFileIsNamed) {
  CpuIdentity id = host("Intel(R) Xeon(R) Processor", 2);
  fs::create_directories(dir_);
  save_profile(calibrated(id), (dir_ / "cpu.json").string());
  CachedProfile c = load_cached_profile(dir_.string(), id);
  EXPECT_FALSE(c.profile);
  EXPECT_NE(c.note.find("cpu.json"), std::string::npos) << c.note;
  EXPECT_NE(c.note.find("does not record the host"), std::string::npos) << c.note;
}

// The first detection's probed clock is kept: a later detection of the
// host, whose probe gives another value, prices with the first one, so that
// runs without a calibrated profile plan alike. Another host probes its own.
TEST_F(HostProfileCache, DetectedClockIsKeptPerHost) {
  CpuIdentity id = host("Intel(R) Xeon(R) Processor", 2);
  id.mhz = 2543.5;
  EXPECT_EQ(detect_host_cpu_cached(id, dir_.string()).clock_hz, 2543.5e6);
  CpuIdentity again = id;
  again.mhz = 2611.0;
  EXPECT_EQ(with_cached_clock(again, dir_.string()).mhz, 2543.5);
  EXPECT_EQ(detect_host_cpu_cached(again, dir_.string()).clock_hz, 2543.5e6);
  CpuIdentity other = host("Intel(R) Xeon(R) Platinum 8488C", 2);
  other.mhz = 3000;
  EXPECT_EQ(with_cached_clock(other, dir_.string()).mhz, 3000);
  // A corrupt file is probed over, and rewritten.
  std::ofstream(cached_clock_path(dir_.string(), id)) << "fast\n";
  EXPECT_EQ(with_cached_clock(again, dir_.string()).mhz, 2611.0);
  EXPECT_EQ(with_cached_clock(id, dir_.string()).mhz, 2611.0);
}

TEST(HostProfile, DefaultCacheDirIsUnderTheUsersCache) {
  std::string dir = default_profile_cache_dir();
  EXPECT_TRUE(dir.ends_with("/tessera")) << dir;
}

}  // namespace
}  // namespace tessera::calibrate
