// Host CPU detection: the machine's cores, clock, SIMD width and caches,
// with per-cycle rates taken from the reference host profile (cpu.json).
// Measured rates come from calibration, which overwrites the cached file.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "cost/device_profile.h"
#include "graph/error.h"

namespace tessera::cost {

namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_text(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  std::string t = s.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// "48K", "1024K", "32M" -> bytes.
int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  int64_t v = std::atoll(s.c_str());
  switch (s.back()) {
    case 'K': return v << 10;
    case 'M': return v << 20;
    case 'G': return v << 30;
    default: return v;
  }
}

// Number of CPUs in a sysfs list such as "0-3,8-11".
int64_t count_cpu_list(const std::string& list) {
  int64_t n = 0;
  std::stringstream ss(list);
  std::string part;
  while (std::getline(ss, part, ',')) {
    auto dash = part.find('-');
    if (dash == std::string::npos) n += 1;
    else n += std::atoll(part.substr(dash + 1).c_str()) - std::atoll(part.substr(0, dash).c_str()) + 1;
  }
  return n;
}

struct CacheInfo {
  int level = 0;
  int64_t size = 0;
  int64_t shared_cpus = 1;
};

std::vector<CacheInfo> detect_caches() {
  std::vector<CacheInfo> caches;
  fs::path base = "/sys/devices/system/cpu/cpu0/cache";
  for (int i = 0; i < 8; ++i) {
    fs::path dir = base / ("index" + std::to_string(i));
    auto type = read_text(dir / "type");
    if (!type) break;
    if (*type == "Instruction") continue;
    CacheInfo c;
    c.level = std::atoi(read_text(dir / "level").value_or("0").c_str());
    c.size = parse_size(read_text(dir / "size").value_or(""));
    c.shared_cpus = std::max<int64_t>(1, count_cpu_list(read_text(dir / "shared_cpu_list").value_or("0")));
    if (c.level > 0 && c.size > 0) caches.push_back(c);
  }
  std::sort(caches.begin(), caches.end(), [](const CacheInfo& a, const CacheInfo& b) { return a.level < b.level; });
  return caches;
}

struct CpuInfo {
  double mhz = 0;
  int64_t simd_bytes = 16;
};

CpuInfo detect_cpuinfo() {
  CpuInfo info;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = line.substr(colon + 1);
    if (key == "cpu MHz" && info.mhz == 0) info.mhz = std::atof(value.c_str());
    if (key == "flags" && flags.empty()) {
      std::stringstream ss(value);
      std::string f;
      while (ss >> f) flags.insert(f);
    }
  }
  if (flags.count("avx512f")) info.simd_bytes = 64;
  else if (flags.count("avx2") || flags.count("avx")) info.simd_bytes = 32;
  // The nominal maximum is a better steady-state estimate than the
  // instantaneous "cpu MHz" where cpufreq exposes it.
  if (auto max_khz = read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
    info.mhz = std::atof(max_khz->c_str()) / 1000.0;
  return info;
}

constexpr int64_t kReferenceSimdBytes = 64;  // the reference host has AVX-512

}  // namespace

DeviceProfile detect_host_cpu() {
  DeviceProfile ref = builtin_profile("cpu");
  DeviceProfile p = ref;
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  int64_t threads_per_core = std::max<int64_t>(
      1, count_cpu_list(read_text("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list").value_or("0")));
  p.units = std::max<int64_t>(1, online / threads_per_core);
  CpuInfo info = detect_cpuinfo();
  if (info.mhz > 0) p.clock_hz = info.mhz * 1e6;
  // Compute scales with cores x clock x SIMD width; cache bandwidth with
  // cores x clock (bytes per cycle per core are a property of the core).
  double core_cycles = static_cast<double>(p.units) * p.clock_hz / (static_cast<double>(ref.units) * ref.clock_hz);
  double simd = static_cast<double>(info.simd_bytes) / kReferenceSimdBytes;
  for (auto* peaks : {&p.matrix_flops, &p.vector_flops})
    for (auto& [t, v] : *peaks) v *= core_cycles * simd;
  std::vector<CacheInfo> caches = detect_caches();
  if (!caches.empty()) {
    std::vector<MemoryLevel> levels;
    for (const CacheInfo& c : caches) {
      // The reference level with the same depth gives the per-cycle rate.
      size_t ri = std::min(static_cast<size_t>(c.level - 1), ref.memory.size() - 2);
      MemoryLevel m = ref.memory[ri];
      m.name = std::to_string(c.level).insert(0, 1, 'l');
      m.per_unit = c.shared_cpus < online;
      m.capacity_bytes = c.size;
      m.bandwidth = ref.memory[ri].bandwidth * core_cycles;
      levels.push_back(m);
    }
    MemoryLevel dram = ref.main_memory();
    long pages = ::sysconf(_SC_PHYS_PAGES);
    long page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) dram.capacity_bytes = static_cast<int64_t>(pages) * page;
    levels.push_back(dram);
    p.memory = levels;
  }
  p.calibrated = false;
  p.description = "host CPU (" + std::to_string(p.units) + " cores, " + std::to_string(info.simd_bytes * 8) +
                  "-bit SIMD), detected";
  p.source = "detected from sysfs and /proc/cpuinfo; rates scaled from the reference host (cost/profiles/cpu.json); "
             "run tessera cost --calibrate to measure them";
  p.validate();
  return p;
}

std::string host_profile_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path dir;
  if (xdg && *xdg) dir = xdg;
  else if (home && *home) dir = fs::path(home) / ".cache";
  else dir = fs::temp_directory_path();
  return (dir / "tessera" / "cpu.json").string();
}

DeviceProfile host_cpu_profile() {
  static std::mutex mu;
  static std::optional<DeviceProfile> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (cached) return *cached;
  // A profile `tessera cost --calibrate` measured on this machine wins;
  // otherwise detection (a few sysfs reads) runs each time, so that it
  // follows the reference profile shipped with the build.
  std::string path = host_profile_cache_path();
  if (fs::exists(path)) {
    DeviceProfile p = load_profile(path);
    if (p.calibrated) {
      cached = p;
      return *cached;
    }
  }
  cached = detect_host_cpu();
  return *cached;
}

}  // namespace tessera::cost
