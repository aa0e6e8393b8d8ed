// Running the tessera binary from the CLI tests: exit code, stdout, stderr.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace tessera::testing {

struct CliResult {
  int code = -1;     // exit code; -1 when ended by a signal
  std::string out;  // stdout
  std::string err;  // stderr
};

inline const std::string kTessera = std::string(TESSERA_BINARY_DIR) + "/bin/tessera";
inline const std::string kExamples = std::string(TESSERA_SOURCE_DIR) + "/examples";

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs `tessera ARGS` through the shell.
inline CliResult run_cli(const std::string& args) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("tessera_cli_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string cmd = kTessera + " " + args + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(dir / "out");
  r.err = read_file(dir / "err");
  fs::remove_all(dir);
  return r;
}

// A fresh path under the temporary folder (removed if it exists).
inline std::filesystem::path scratch_path(const std::string& name) {
  std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("tessera_cli_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

}  // namespace tessera::testing
