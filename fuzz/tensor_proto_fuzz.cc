// Fuzz target: TensorProto .pb files (read_tensor_file, as `tessera run
// --input x.pb` reads them). A tensor read back from the proto it is
// written as has the same type and bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fuzz/fuzz_util.h"
#include "onnx/onnx_pb.h"
#include "onnx_import/tensor_proto.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fz = tessera::fuzz;
  const auto& dir = fz::scratch_dir();
  fz::clear_folder(dir);
  // A second file in the folder, for external data to find.
  fz::write_file(dir / "weights.bin", data, size);
  fz::write_file(dir / "input_0.pb", data, size);
  fz::expect_user_errors_only([&] {
    std::string name;
    tessera::Tensor t = tessera::read_tensor_file((dir / "input_0.pb").string(), &name);
    tessera::Tensor back = tessera::tensor_from_proto(tessera::tensor_to_proto(t, name), dir.string(), "written");
    bool same = back.dtype() == t.dtype() && back.shape() == t.shape() && back.defined() == t.defined() &&
                (!t.defined() || t.nbytes() == 0 ||
                 std::memcmp(back.data(), t.data(), static_cast<size_t>(t.nbytes())) == 0);
    if (!same) {
      std::fprintf(stderr, "fuzz: the tensor read back from its own proto differs\n");
      std::abort();
    }
  });
  return 0;
}
