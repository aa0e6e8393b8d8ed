// Test helper: how much of a mapped file this process holds resident.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera::testing {

// Resident bytes of this process's mapping of `path` (/proc/self/smaps: a
// mapping's header line "lo-hi perms offset dev inode path", then its
// "Key: value kB" lines).
inline int64_t resident_bytes_of(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  int64_t kb = 0;
  while (std::getline(smaps, line)) {
    if (line.find('-') < line.find(' ') && line.find(' ') != std::string::npos && line.find(':') > line.find(' ')) {
      in = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
      continue;
    }
    if (in && line.rfind("Rss:", 0) == 0) {
      std::istringstream(line.substr(4)) >> kb;
      return kb * 1024;
    }
  }
  return -1;
}

}  // namespace tessera::testing
