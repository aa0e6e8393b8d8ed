#include "calibrate/host_identity.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "cost/device_profile.h"

namespace tessera::calibrate {

namespace {

namespace fs = std::filesystem;

// A sysfs or procfs file's text, without the whitespace around it.
std::optional<std::string> read_text(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  std::string t = s.str();
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!t.empty() && space(t.back())) t.pop_back();
  return t.substr(static_cast<size_t>(std::find_if_not(t.begin(), t.end(), space) - t.begin()));
}

// The clock the cores run at, in MHz: the best of 40 chains of dependent
// adds (one a cycle); 0 where the probe cannot run.
double probe_clock_mhz() {
#if defined(__x86_64__) || defined(__aarch64__)
  constexpr long kAdds = 400000;
  double best = 0;
  for (int w = 0; w < 40; ++w) {
    long x = 0, one = 1, n = kAdds;
    auto t0 = std::chrono::steady_clock::now();
#if defined(__x86_64__)
    __asm__ volatile("1:\n add %2, %0\n add %2, %0\n add %2, %0\n add %2, %0\n sub $4, %1\n jnz 1b\n"
                     : "+r"(x), "+r"(n)
                     : "r"(one)
                     : "cc");
#else
    __asm__ volatile("1:\n add %0, %0, %2\n add %0, %0, %2\n add %0, %0, %2\n add %0, %0, %2\n"
                     " subs %1, %1, #4\n b.ne 1b\n"
                     : "+r"(x), "+r"(n)
                     : "r"(one)
                     : "cc");
#endif
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0 && x == kAdds) best = std::max(best, static_cast<double>(kAdds) / s);
  }
  return best / 1e6;
#else
  return 0;
#endif
}

}  // namespace

cost::CpuIdentity read_host_identity() {
  cost::CpuIdentity id = cost::parse_cpuinfo(read_text("/proc/cpuinfo").value_or(""));
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (online > 0) id.logical_cpus = online;
  id.threads_per_core = std::max<int64_t>(
      1, cost::count_cpu_list(read_text("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list").value_or("0")));
  // The clock the cores run at: a VM's "cpu MHz" is the nominal (TSC)
  // clock, 2.1 GHz on this Emerald Rapids host whose cores run at 2.7, and
  // cpufreq's maximum (where exposed) is the one-core turbo. The probe
  // measures it; they are the fallback.
  if (auto max_khz = read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
    id.mhz = std::atof(max_khz->c_str()) / 1000.0;
  id.nominal_mhz = id.mhz;
  if (double probed = probe_clock_mhz(); probed > 100) id.mhz = probed;
  fs::path base = "/sys/devices/system/cpu/cpu0/cache";
  for (int i = 0; i < 8; ++i) {
    fs::path dir = base / ("index" + std::to_string(i));
    auto type = read_text(dir / "type");
    if (!type) break;
    cost::add_sysfs_cache(id, read_text(dir / "level").value_or("0"), *type, read_text(dir / "size").value_or(""),
                    read_text(dir / "shared_cpu_list").value_or("0"));
  }
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) id.memory_bytes = static_cast<int64_t>(pages) * page;
  return id;
}

cost::DeviceProfile detect_this_host() { return cost::detect_host_cpu(read_host_identity()); }

}  // namespace tessera::calibrate
