#include "calibrate/prepare_device.h"

#include <sstream>

#include "calibrate/calibrate.h"
#include "calibrate/host_identity.h"
#include "calibrate/host_profile_cache.h"
#include "graph/error.h"

namespace tessera::calibrate {

namespace {

// The quick calibration's budget: the 10 s on first use, with room
// for the compiles the measured slices leave out.
constexpr double kQuickCalibrationSeconds = 8;

// This host: its cached profile in `dir`; where there is none, with
// `calibrate` a quick calibration written to the cache, without it the
// detected profile. A stale or corrupt cached profile is ignored with a
// one-line note.
cost::DeviceProfile host_profile(const std::string& cache_dir, bool calibrate, std::ostream& log) {
  std::string dir = cache_dir.empty() ? default_profile_cache_dir() : cache_dir;
  cost::CpuIdentity id = read_host_identity();
  CachedProfile cached = load_cached_profile(dir, id);
  if (!cached.note.empty()) log << "tessera: " << cached.note << "\n";
  if (cached.profile) return *cached.profile;
  if (!calibrate) return detect_host_cpu_cached(id, dir);
  log << "tessera: no calibrated profile of this CPU (" << id.summary() << ") in " << dir
      << "; calibrating it once (about " << kQuickCalibrationSeconds
      << " s; --no-calibrate skips this, tessera cost --calibrate measures more)\n";
  CalibrationOptions o;
  o.seconds = kQuickCalibrationSeconds;
  o.quick = true;
  std::ostringstream detail;  // the per-measurement lines stay off a user's screen
  cost::DeviceProfile p;
  try {
    p = calibrate_host(o, detail);
  } catch (const Error& e) {
    // A measurement the fit cannot use (the profile fails its checks): this
    // run prices with the detected profile, and the next one calibrates again.
    log << "tessera: the calibration failed (" << e.message() << "); using the detected profile, not cached\n";
    return detect_host_cpu_cached(id, dir);
  }
  // One line of what was found: the dense rate against the detected peak,
  // and the wall time.
  std::string line;
  for (std::istringstream lines(detail.str()); std::getline(lines, line);)
    if (line.rfind("f32 peak", 0) == 0 || line.rfind("quick calibration", 0) == 0) log << "tessera: " << line << "\n";
  try {
    log << "tessera: wrote " << save_cached_profile(p, dir, id) << "\n";
  } catch (const Error& e) {
    log << "tessera: " << e.message() << " (the calibrated profile is used for this run only)\n";
  }
  return p;
}

}  // namespace

cost::DeviceProfile prepare_device(const std::string& spec, const PrepareOptions& options) {
  if (options.threads < 0) TESSERA_THROW(ErrorKind::kUsage, "--threads must be >= 0, got " << options.threads);
  if (spec != "cpu") return cost::resolve_device(spec);
  std::ostringstream discard;
  cost::DeviceProfile host = host_profile(options.cache_dir, options.calibrate, options.log ? *options.log : discard);
  // Priced on `threads` of the host's cores: each core's rates and private
  // caches, what those cores stream alone from the shared levels.
  if (options.threads > 0 && options.threads < host.units) return cost::thread_share(host, options.threads);
  return host;
}

}  // namespace tessera::calibrate
