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
  // A name with `*` is a glob over the input names (`past_key_values.*`,
  // `*` matching any run of characters); an exact name wins over a glob,
  // and an input two globs match is an error.
  std::map<std::string, Shape> input_shapes;
  // Fixes graph inputs to a constant (--input-value use_cache_branch=1): the
  // input is no longer an input, every element of it holds the value, and
  // what it decides at import is decided (an If on it is replaced by the
  // branch it selects). The text is checked against the input's type at
  // import: 0, 1, true or false for bool, an integer for integer types, a
  // number for float types.
  std::map<std::string, std::string> input_values;
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

// Parses "name=VALUE" into options.input_values; throws Error(kUsage). The
// value is checked against the input's type when the model is imported.
void parse_input_value_flag(const std::string& flag, ImportOptions& options);

// Whether `name` matches `pattern`, whose only wildcard is `*` (any run of
// characters, `.` and `/` included).
bool glob_match(const std::string& pattern, const std::string& name);

// Reads and imports a model file. Errors are Error with the file, node and op.
Graph import_onnx_file(const std::string& path, const ImportOptions& options = {});
// Imports an already-parsed model; `model_dir` resolves external data and
// `display_name` names the model in errors.
Graph import_onnx_model(const onnx::ModelProto& model, const ImportOptions& options,
                        const std::string& model_dir, const std::string& display_name);

}  // namespace tessera
