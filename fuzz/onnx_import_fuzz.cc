// Fuzz target: ONNX import and shape inference from the bytes of a
// ModelProto (what `tessera inspect model.onnx` does after reading the
// file). An imported graph must also survive the text form: print, parse,
// print gives the same text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "graph/text_form.h"
#include "onnx/onnx_pb.h"
#include "onnx_import/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  onnx::ModelProto model;
  if (size == 0 || !model.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (!model.has_graph() || model.opset_import_size() == 0) return 0;  // refused before import
  tessera::fuzz::expect_user_errors_only([&] {
    // External data resolves inside an empty folder: a reference finds no
    // file, or is refused for leaving the folder.
    tessera::Graph g = tessera::import_onnx_model(model, {}, tessera::fuzz::scratch_dir().string(), "fuzz.onnx");
    std::string text = tessera::print_graph(g);
    std::string again = tessera::print_graph(tessera::parse_graph(text, "printed"));
    if (again != text) {
      std::fprintf(stderr, "fuzz: the imported graph's text form does not parse back to itself\n");
      std::abort();
    }
  });
  return 0;
}
