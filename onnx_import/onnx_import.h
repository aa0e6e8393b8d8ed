// ONNX -> Graph. Reads a ModelProto with the ONNX protobuf classes and builds a
// statically shaped Graph: dynamic dims fixed from the model or the user's
// --input-shape, shape arithmetic folded, Identity/Dropout dropped, ONNX's
// opset-dependent input forms turned into the IR's attributes.
#pragma once

#include <map>
#include <string>

#include "graph/graph.h"
#include "graph/progress.h"

namespace onnx {
class ModelProto;
}

namespace tessera {

struct ImportOptions {
  // Fixes the shape of graph inputs by name (--input-shape name=1x3x224x224).
  std::map<std::string, Shape> input_shapes;
  // Value for dynamic dims the model leaves unnamed and the user did not fix;
  // -1 means "no default: report an error".
  int64_t default_dim = -1;
  // A graph input that no node reads is refused unless allowed (it stays an
  // input of the plan, which ignores it). Models Tessera wrote are accepted:
  // a plan keeps the original's inputs even where it no longer reads one.
  bool allow_unused_inputs = false;
  // A graph input that is also an initializer is a default value that ONNX
  // lets a caller override; it is refused unless the user asks for it to be
  // folded as a constant.
  bool initializers_as_constants = false;
  // import_onnx_file: called as the file is read ("loading", bytes).
  ProgressFn progress;
};

// Parses "name=1x3x224x224" into options.input_shapes; throws Error(kUsage).
void parse_input_shape_flag(const std::string& flag, ImportOptions& options);

// Reads and imports a model file. Errors are Error with the file, node and op.
Graph import_onnx_file(const std::string& path, const ImportOptions& options = {});
// Imports an already-parsed model; `model_dir` resolves external data and
// `display_name` names the model in errors.
Graph import_onnx_model(const onnx::ModelProto& model, const ImportOptions& options,
                        const std::string& model_dir, const std::string& display_name);

}  // namespace tessera
