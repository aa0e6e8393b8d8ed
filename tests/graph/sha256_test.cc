// SHA-256 against the FIPS 180-4 examples and the NIST byte-oriented test
// vectors, fed whole and in pieces that cross the 64-byte blocks; the
// portable rounds and the SHA extensions' (where the CPU has them) agree.
#include "graph/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "graph/error.h"

namespace tessera {
namespace {

TEST(Sha256, StandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                       "mnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundary (55, 56, 63, 64 bytes) take the one-
// and two-block padding paths.
TEST(Sha256, PaddingBoundaries) {
  EXPECT_EQ(sha256_hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

std::string digest(Sha256::Impl impl, std::string_view data) {
  Sha256 h(impl);
  h.update(data);
  return h.hex_digest();
}

// Both implementations on the same data: the standard vectors above use
// kAuto, so here the portable one meets them too, and random data of every
// length up to a few blocks.
TEST(Sha256, PortableAndAcceleratedAgree) {
  EXPECT_EQ(digest(Sha256::Impl::kPortable, "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest(Sha256::Impl::kPortable, std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  if (!Sha256::accelerated()) {
    std::printf("[ SKIPPED ] the SHA extensions: this CPU has none (the portable rounds are the ones in use)\n");
    return;
  }
  std::string data;
  for (int i = 0; i < 300; ++i) data += static_cast<char>((i * 7919) % 256);
  for (size_t n = 0; n <= data.size(); ++n)
    ASSERT_EQ(digest(Sha256::Impl::kAuto, std::string_view(data).substr(0, n)),
              digest(Sha256::Impl::kPortable, std::string_view(data).substr(0, n)))
        << n << " bytes";
}

TEST(Sha256, PiecesGiveTheSameDigest) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 37 % 251);
  const std::string whole = sha256_hex(data);
  for (size_t piece : {1u, 3u, 63u, 64u, 65u, 200u}) {
    Sha256 h;
    for (size_t at = 0; at < data.size(); at += piece) h.update(std::string_view(data).substr(at, piece));
    EXPECT_EQ(h.hex_digest(), whole) << "pieces of " << piece;
  }
  data[500] ^= 1;
  EXPECT_NE(sha256_hex(data), whole);
}

TEST(Sha256, FilesAndMissingFiles) {
  auto path = std::filesystem::temp_directory_path() / ("tessera_sha256_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_EQ(sha256_file_hex(path.string()), sha256_hex("abc"));
  std::filesystem::remove(path);
  try {
    sha256_file_hex(path.string());
    FAIL() << "a missing file hashed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
