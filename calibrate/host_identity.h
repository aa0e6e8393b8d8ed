// This machine as the OS describes it, and its clock as a probe measures
// it: the one place that reads /proc, sysfs and the cores' clock. What the
// identity implies (the microarchitecture table, the detected profile) is
// cost/'s (cpu_identity.h, host_cpu.cc): a pure function of the identity,
// which tests feed recorded identities of other machines.
#pragma once

#include "cost/cpu_identity.h"
#include "cost/device_profile.h"

namespace tessera::calibrate {

// /proc/cpuinfo, sysfs caches and topology, cpufreq, sysconf, and a ~6 ms
// probe of the clock (a VM's "cpu MHz" is its nominal clock, not the one
// the cores run at).
cost::CpuIdentity read_host_identity();

// cost::detect_host_cpu(read_host_identity()): this host as detection alone
// sees it, no cached or calibrated profile (host_profile_cache.h has those).
cost::DeviceProfile detect_this_host();

}  // namespace tessera::calibrate
