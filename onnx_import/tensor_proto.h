// ONNX TensorProto <-> Tensor, and TensorProto .pb files (input_0.pb,
// output_0.pb, as in ONNX's test data sets).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "graph/mapped_file.h"
#include "graph/tensor.h"

namespace onnx {
class TensorProto;
}

namespace tessera {

// The external data of one model: the folder that resolves its locations
// (paths that leave it are refused), and each file mapped once, on first
// use, for every tensor that reads it. The tensors view their bytes in the
// mapping (copied only where an offset is not aligned for the element type)
// and keep it alive after this object is gone.
class ExternalData {
 public:
  ExternalData() = default;
  explicit ExternalData(std::string model_dir) : model_dir_(std::move(model_dir)) {}
  const std::string& model_dir() const { return model_dir_; }
  // The file at `path` (resolved), mapped; `context` names the tensor in errors.
  std::shared_ptr<const MappedFile> file(const std::string& path, const std::string& context);

 private:
  std::string model_dir_;
  std::map<std::string, std::shared_ptr<const MappedFile>> files_;
};

// `context` names the tensor in errors ("initializer 'w'").
Tensor tensor_from_proto(const onnx::TensorProto& proto, ExternalData& external, const std::string& context);
// As above, with external data resolved in `model_dir` for this tensor alone.
Tensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& model_dir,
                         const std::string& context);
onnx::TensorProto tensor_to_proto(const Tensor& t, const std::string& name);

// ONNX elem_type <-> DType; throws Error(kUnsupported) for other types.
DType dtype_from_onnx(int elem_type);
int dtype_to_onnx(DType t);

// Reads a serialized TensorProto; returns the tensor and stores its name.
Tensor read_tensor_file(const std::string& path, std::string* name = nullptr);
// Writes atomically; throws Error(kIo).
void write_tensor_file(const Tensor& t, const std::string& name, const std::string& path);

}  // namespace tessera
