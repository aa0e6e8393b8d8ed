// Graph -> ONNX: a ModelProto that onnx.checker accepts and ONNX Runtime runs.
#pragma once

#include <string>

#include "graph/graph.h"

namespace onnx {
class ModelProto;
}

namespace tessera {

struct ExportOptions {
  // Default domain opset of the written model, raised to the oldest one that
  // has every node where that is newer (Resize with antialias: 18).
  int64_t opset = 17;
  std::string producer_name = "tessera";
};

onnx::ModelProto export_onnx(const Graph& g, const ExportOptions& options = {});
// Writes atomically (temporary file in the same folder, then rename), so a
// failure leaves nothing half-written. Throws Error(kIo).
void save_onnx_file(const Graph& g, const std::string& path, const ExportOptions& options = {});

}  // namespace tessera
