// Graph -> ONNX: a ModelProto that onnx.checker accepts and ONNX Runtime runs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace onnx {
class ModelProto;
}

namespace tessera {

// Where an initializer's bytes are, in external data beside the model.
struct ExternalBytes {
  std::string location;  // a file name in the model's folder
  int64_t offset = 0;
  int64_t length = 0;
};

struct ExportOptions {
  // Default domain opset of the written model, raised to the oldest one that
  // has every node where that is newer (Resize with antialias: 18).
  int64_t opset = 17;
  std::string producer_name = "tessera";
  // save_onnx_file: a model of more bytes than this (protobuf refuses 2 GiB)
  // is written with its initializers of 1 KiB or more in `PATH.data` beside
  // it, streamed one tensor at a time from the graph's constants.
  int64_t external_data_above = int64_t{1800} << 20;
  // save_onnx_file: called as the weights are written (bytes done, bytes in
  // all), for a progress bar.
  std::function<void(int64_t, int64_t)> written;
  // save_onnx_file: called once per file written (the model, and PATH.data
  // where there is one) with its name in the folder, the SHA-256 of its
  // bytes, hashed as they were written, and its size: what plan.json records
  // without reading the files again.
  std::function<void(const std::string& file, const std::string& sha256, int64_t bytes)> digest;
  // save_onnx_file: where bytes that several models of one folder share
  // already are (save_shared_data; a mesh plan's weights replicated over its
  // ranks): an initializer of 1 KiB or more it places points there, and the
  // others of 1 KiB or more go to PATH.data, whatever the model's size.
  // Null (the default): nothing is shared.
  std::function<const ExternalBytes*(const Tensor&)> shared;
};

onnx::ModelProto export_onnx(const Graph& g, const ExportOptions& options = {});
// Writes atomically (temporary file in the same folder, then rename), so a
// failure leaves nothing half-written. Throws Error(kIo).
void save_onnx_file(const Graph& g, const std::string& path, const ExportOptions& options = {});

// Writes `tensors`' bytes once to `path` (each aligned for mmap, streamed one
// tensor at a time from its storage, atomically), for the models of its
// folder to point at (ExportOptions::shared); returns where each tensor's
// bytes are, in order. Reports progress and the file's digest through
// `options.written` and `options.digest`. Throws Error(kIo).
std::vector<ExternalBytes> save_shared_data(const std::vector<Tensor>& tensors, const std::string& path,
                                            const ExportOptions& options = {});

}  // namespace tessera
