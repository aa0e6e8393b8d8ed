// What the fuzz targets share: the one outcome an input may have besides
// success (a tessera::Error a user can cause), and a scratch folder per
// process for the targets that read files.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "graph/error.h"

namespace tessera::fuzz {

// Runs `body`; a user-facing Error is the expected answer to a bad input.
// An internal error (a failed TESSERA_CHECK) or any other exception is a
// bug the input found: it aborts, so libFuzzer keeps the input as a crash.
template <typename F>
void expect_user_errors_only(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInternal) {
      std::fprintf(stderr, "fuzz: internal error on this input: %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: exception other than tessera::Error: %s\n", e.what());
    std::abort();
  }
}

// A fresh folder under TMPDIR, removed at exit; the same for every input of
// one process.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() /
                              ("tessera-fuzz-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return dir;
}

// Writes `size` bytes to `path` (binary, truncating).
void write_file(const std::filesystem::path& path, const uint8_t* data, size_t size);

// Every input is new: a folder emptied of the previous input's files.
void clear_folder(const std::filesystem::path& dir);

}  // namespace tessera::fuzz
