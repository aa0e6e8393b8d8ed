// Imports an ONNX model and exports it again (bench/models/check_suite.py
// runs both through ONNX Runtime and compares): the import -> export round
// trip on real exported models.
#include <cstdio>

#include "graph/error.h"
#include "onnx_import/onnx_export.h"
#include "onnx_import/onnx_import.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.onnx OUT.onnx\n", argv[0]);
    return 2;
  }
  try {
    tessera::save_onnx_file(tessera::import_onnx_file(argv[1]), argv[2]);
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
