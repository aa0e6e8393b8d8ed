#include "calibrate/host_profile_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "graph/cache_dir.h"
#include "graph/error.h"

namespace tessera::calibrate {

using cost::CpuIdentity;
using cost::DeviceProfile;

namespace {

namespace fs = std::filesystem;

std::string version_tag() { return "v" + std::to_string(kHostProfileVersion); }

// host_key is "<CpuIdentity::cache_key()>/v<version>".
std::string stamped_key(const CpuIdentity& id) { return id.cache_key() + "/" + version_tag(); }

}  // namespace

std::string default_profile_cache_dir() { return user_cache_dir(); }

std::string cached_profile_path(const std::string& dir, const CpuIdentity& id) {
  return (fs::path(dir) / ("cpu-" + id.cache_key() + ".json")).string();
}

void stamp_host(DeviceProfile& p, const CpuIdentity& id) {
  p.host_key = stamped_key(id);
  p.host_summary = id.summary();
}

CachedProfile load_cached_profile(const std::string& dir, const CpuIdentity& id) {
  CachedProfile out;
  std::string path = cached_profile_path(dir, id);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    // What `tessera cost --calibrate` wrote before profiles were keyed by
    // host: it says nothing of the machine it measured.
    fs::path legacy = fs::path(dir) / "cpu.json";
    if (fs::exists(legacy, ec))
      out.note = "ignoring cached CPU profile " + legacy.string() +
                 ": it does not record the host it was measured on (an older tessera wrote it)";
    return out;
  }
  DeviceProfile p;
  try {
    p = cost::load_profile(path);
  } catch (const Error& e) {
    out.note = "ignoring cached CPU profile " + path + ": " + e.message();
    return out;
  }
  std::string why;
  std::string key = p.host_key.substr(0, p.host_key.rfind('/'));
  if (p.kind != cost::DeviceKind::kCpu) why = "it is not a CPU profile";
  else if (p.host_key.empty()) why = "it does not record the host it was measured on";
  else if (key != id.cache_key())
    why = "it was measured on " + (p.host_summary.empty() ? key : p.host_summary) + ", this host is " + id.summary();
  else if (p.host_key != stamped_key(id)) why = "an older calibration wrote it";
  else if (!p.calibrated) why = "it is not calibrated";
  if (!why.empty()) {
    out.note = "ignoring cached CPU profile " + path + ": " + why;
    return out;
  }
  out.profile = std::move(p);
  return out;
}

std::string save_cached_profile(const DeviceProfile& p, const std::string& dir, const CpuIdentity& id) {
  DeviceProfile q = p;
  stamp_host(q, id);
  std::string path = cached_profile_path(dir, id);
  cost::save_profile(q, path);
  return path;
}

std::string cached_clock_path(const std::string& dir, const CpuIdentity& id) {
  return (fs::path(dir) / ("cpu-" + id.cache_key() + ".clock")).string();
}

CpuIdentity with_cached_clock(const CpuIdentity& id, const std::string& dir) {
  CpuIdentity out = id;
  fs::path path = cached_clock_path(dir, id);
  double mhz = 0;
  if (std::ifstream in(path); in >> mhz && mhz > 100 && mhz < 20000) {
    out.mhz = mhz;
    return out;
  }
  if (id.mhz <= 0) return out;
  // Written whole or not at all: a temporary file, then renamed.
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::path tmp = path;
  tmp += ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    f.precision(17);
    f << id.mhz << "\n";
    if (!f) return out;
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return out;
}

DeviceProfile detect_host_cpu_cached(const CpuIdentity& id, const std::string& dir) {
  return cost::detect_host_cpu(with_cached_clock(id, dir));
}

}  // namespace tessera::calibrate
