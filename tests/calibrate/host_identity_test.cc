// This host as the OS describes it and detection sees it: the reads and the
// clock probe that calibrate/host_identity.cc owns (cost/ holds only the
// pure mapping from an identity to a profile, tests/cost/cpu_identity_test.cc).
#include "calibrate/host_identity.h"

#include <gtest/gtest.h>

namespace tessera::calibrate {
namespace {

using cost::CpuIdentity;
using cost::DeviceKind;
using cost::DeviceProfile;

// Read, probed and detected: a profile that passes its checks, with caches
// from sysfs (the first level small and private) and main memory from
// sysconf, not calibrated.
TEST(HostIdentity, ThisHostReadsAndDetects) {
  CpuIdentity id = read_host_identity();
  EXPECT_GE(id.logical_cpus, 1);
  EXPECT_GE(id.cores(), 1);
  for (const DeviceProfile& p : {cost::detect_host_cpu(id), detect_this_host()}) {
    EXPECT_EQ(p.kind, DeviceKind::kCpu);
    EXPECT_EQ(p.units, id.cores());
    EXPECT_GT(p.clock_hz, 1e8);
    EXPECT_NO_THROW(p.validate());
    EXPECT_FALSE(p.calibrated);
    EXPECT_LE(p.memory[0].capacity_bytes, 4 << 20);
    EXPECT_GE(p.main_memory().capacity_bytes, int64_t{1} << 28);
  }
}

}  // namespace
}  // namespace tessera::calibrate
