// What the mesh-run tests share: running the tessera binary (alone or under
// the mpirun that FindMPI found, TESSERA_MPIEXEC), scratch folders, and the
// comparison of a plan's outputs with the single-device run's.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "graph/tensor.h"
#include "onnx_import/tensor_proto.h"

namespace tessera::test {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

inline const std::string kTessera = std::string(TESSERA_BINARY_DIR) + "/bin/tessera";
inline const std::string kMpirun = std::string(TESSERA_MPIEXEC) + " --allow-run-as-root --oversubscribe -np ";

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tessera_mesh_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// Runs `prefix tessera args` (prefix: "" or an mpirun command line).
inline Result run(const std::string& prefix, const std::string& args) {
  fs::path dir = scratch("io");
  fs::create_directories(dir);
  std::string cmd = prefix + kTessera + " " + args + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  int status = std::system(cmd.c_str());
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(dir / "out"), read_file(dir / "err")};
  fs::remove_all(dir);
  return r;
}

inline Result mpirun(int np, const std::string& args) { return run(kMpirun + std::to_string(np) + " ", args); }

// Every output the single-device run wrote to `want` is in `got`, equal
// within 1e-4.
inline void expect_same_outputs(const fs::path& got, const fs::path& want) {
  ASSERT_TRUE(fs::exists(want / "output_0.pb")) << want;
  for (int i = 0; fs::exists(want / ("output_" + std::to_string(i) + ".pb")); ++i) {
    std::string f = "output_" + std::to_string(i) + ".pb";
    ASSERT_TRUE(fs::exists(got / f)) << got / f;
    Tensor a = read_tensor_file((got / f).string()), b = read_tensor_file((want / f).string());
    ASSERT_EQ(a.type(), b.type()) << f;
    int64_t bad = 0;
    for (int64_t k = 0; k < a.numel(); ++k)
      if (!(std::fabs(a.get_double(k) - b.get_double(k)) <= 1e-4 * (std::fabs(b.get_double(k)) + 1.0))) ++bad;
    EXPECT_EQ(bad, 0) << f << ": " << bad << " of " << a.numel() << " elements differ from the single-device run";
  }
}

inline Tensor ramp(const Shape& shape, double scale) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.7 * static_cast<double>(i) + scale);
  return Tensor::from_doubles(DType::kF32, shape, v);
}

}  // namespace tessera::test
