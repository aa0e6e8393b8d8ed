// The device, resolved once at the API boundary into a profile value that
// every later stage takes as an argument (DESIGN.md, "Cost model"): the CLI,
// the C++ API and the Python module all call prepare_device, so on one host
// they plan alike.
#pragma once

#include <ostream>
#include <string>

#include "cost/device_profile.h"

namespace tessera::calibrate {

struct PrepareOptions {
  // Folder of cached host profiles (host_profile_cache.h); empty: the
  // default ($XDG_CACHE_HOME/tessera or ~/.cache/tessera).
  std::string cache_dir;
  // --device cpu without a cached profile of this host: a quick
  // calibration (about 8 s), written to the cache; false: the detected one.
  bool calibrate = true;
  // > 0 and below the host's cores: the host as a process on that many of
  // its threads sees it (cost::thread_share).
  int threads = 0;
  // Notes (a stale cache file, the calibration's one-line summary); nullptr:
  // none.
  std::ostream* log = nullptr;
};

// `spec`: "cpu" (this host: its cached profile, else calibrated or
// detected as `options` say), a builtin name (a100, h100, h200) or a
// profile JSON file. Throws Error(kUsage) for an unknown device.
cost::DeviceProfile prepare_device(const std::string& spec, const PrepareOptions& options = {});

}  // namespace tessera::calibrate
