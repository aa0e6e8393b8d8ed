// ONNX TensorProto <-> Tensor, and TensorProto .pb files (input_0.pb,
// output_0.pb, as in ONNX's test data sets).
#pragma once

#include <string>

#include "graph/tensor.h"

namespace onnx {
class TensorProto;
}

namespace tessera {

// `model_dir` resolves external data; paths that leave it are refused.
// `context` names the tensor in errors ("initializer 'w'").
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
