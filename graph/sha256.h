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
  // kAuto: the x86 SHA extensions where the CPU has them, else portable C++.
  // Measured on this project's 2-core host, hashing a 495 MB rank file of
  // GPT-2: portable 4.6 s, SHA extensions 0.8 s (what every `tessera run`
  // of a plan folder pays before it loads the model).
  enum class Impl { kAuto, kPortable };
  explicit Sha256(Impl impl = Impl::kAuto);
  // Whether kAuto uses the SHA extensions on this CPU.
  static bool accelerated();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex_digest();

 private:
  void blocks(const uint8_t* p, size_t n);
  bool fast_ = false;
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
