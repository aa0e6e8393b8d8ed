// The host CPU profile as cached, and the folder where calibrated profiles
// of hosts are kept.
//
// A cached profile is one file per host, cpu-<CpuIdentity::cache_key()>.json,
// in $XDG_CACHE_HOME/tessera, else ~/.cache/tessera (the CLI's
// --profile-cache DIR overrides it). It is used only if it is what it says:
// a calibrated profile of this CPU model and core count, written by this
// version of the calibration. Anything else (another host's profile copied
// over, a corrupt file, an older calibration) is ignored with a note that
// says why; nothing here throws for a bad cache file. prepare_device
// (prepare_device.h) is what reads it: no cost or mutator code does.
#pragma once

#include <optional>
#include <string>

#include "cost/cpu_identity.h"
#include "cost/device_profile.h"

namespace tessera::calibrate {

// Bumped when a fitted factor changes meaning (the calibration or the model
// it fits changes): profiles of an older version are recalibrated.
// 3: the quick calibration fits reorders, transcendentals and permutes, and
// profiles carry register_vector; 4: reorder_gbps is the whole device's;
// 5: the pool's spin window and wake-up cost; 6: the quick calibration
// fits conv_call_ns; 7: the convolution efficiency by reduction length
// (efficiency.conv_by_k); 8: the shared levels' bandwidth with every core
// streaming, and one core's alone (core_bandwidth_gbps); 9: Softmax's
// cost per element and per row (softmax_ops, softmax_row_ops).
inline constexpr int kHostProfileVersion = 9;

std::string default_profile_cache_dir();
std::string cached_profile_path(const std::string& dir, const cost::CpuIdentity& id);

struct CachedProfile {
  std::optional<cost::DeviceProfile> profile;
  // Why there is none although a file was there (one line, for stderr);
  // empty when there was no file.
  std::string note;
};

// The cached profile of host `id` in `dir`, checked against it.
CachedProfile load_cached_profile(const std::string& dir, const cost::CpuIdentity& id);
// Writes `p` (calibrated, with its host_key) as the cached profile of `id`;
// returns the path. Throws Error(kIo) where it cannot write.
std::string save_cached_profile(const cost::DeviceProfile& p, const std::string& dir, const cost::CpuIdentity& id);
// Marks `p` as a profile of host `id` at this calibration version.
void stamp_host(cost::DeviceProfile& p, const cost::CpuIdentity& id);

// Host `id` with the clock its first detection in `dir` probed
// (cpu-<key>.clock, written then): the probe varies by a few percent from
// process to process, so a detected profile read fresh each time would
// price, and plan, differently from run to run. Where the file cannot be
// read or written, `id` as it is.
cost::CpuIdentity with_cached_clock(const cost::CpuIdentity& id, const std::string& dir);
std::string cached_clock_path(const std::string& dir, const cost::CpuIdentity& id);
// cost::detect_host_cpu of with_cached_clock(id, dir).
cost::DeviceProfile detect_host_cpu_cached(const cost::CpuIdentity& id, const std::string& dir);

}  // namespace tessera::calibrate
