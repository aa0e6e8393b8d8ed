// SHA-256 (FIPS 180-4), for the file digests a plan folder records: none of
// the project's dependencies provides one, and a plan must name the exact
// bytes of its model files (a structural hash would not see edited weights).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;  // bytes
};

std::string sha256_hex(std::string_view data);
// The digest of a file's bytes. Throws Error(kIo) naming the file when it
// cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace tessera
