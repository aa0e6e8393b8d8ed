#include "graph/memory_limit.h"

#include <atomic>
#include <cstdio>
#include <unistd.h>

#include "graph/error.h"

namespace tessera {

namespace {

std::atomic<int64_t> g_limit{0};  // 0: not set, the default applies

}  // namespace

int64_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return int64_t{1} << 34;  // unknown: 16 GiB
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page);
}

int64_t memory_limit() {
  int64_t l = g_limit.load();
  return l > 0 ? l : physical_memory_bytes() / 4 * 3;
}

void set_memory_limit(int64_t bytes) {
  if (bytes <= 0) TESSERA_THROW(ErrorKind::kUsage, "--memory-limit must be > 0 bytes, got " << bytes);
  g_limit.store(bytes);
}

std::string bytes_str(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

void check_memory(int64_t bytes, const std::string& what) {
  int64_t limit = memory_limit();
  if (bytes > limit)
    TESSERA_THROW(ErrorKind::kResource, what << " needs " << bytes_str(bytes) << ", over the memory limit of "
                                             << bytes_str(limit) << " (--memory-limit)");
}

int64_t parse_bytes(const std::string& text) {
  size_t used = 0;
  long double v = 0;
  try {
    v = std::stold(text, &used);
  } catch (const std::exception&) {
    TESSERA_THROW(ErrorKind::kUsage, "'" << text << "' is not a size in bytes (e.g. 8G, 512M, 1000000)");
  }
  std::string unit = text.substr(used);
  long double scale = 1;
  if (unit == "K" || unit == "KiB" || unit == "k") scale = 1024.0L;
  else if (unit == "M" || unit == "MiB") scale = 1024.0L * 1024;
  else if (unit == "G" || unit == "GiB") scale = 1024.0L * 1024 * 1024;
  else if (unit == "T" || unit == "TiB") scale = 1024.0L * 1024 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    TESSERA_THROW(ErrorKind::kUsage, "'" << text << "': unknown size unit '" << unit << "' (K, M, G, T)");
  long double bytes = v * scale;
  if (!(bytes >= 1) || bytes > 9.0e18L)
    TESSERA_THROW(ErrorKind::kUsage, "'" << text << "' is not a size between 1 byte and 8 EiB");
  return static_cast<int64_t>(bytes);
}

}  // namespace tessera
