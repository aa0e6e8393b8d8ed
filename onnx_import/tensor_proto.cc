// TensorProto <-> Tensor. Data may sit in raw_data (little-endian), in the
// typed repeated fields, or in an external file next to the model; all three
// forms are read, and raw_data is the only form written.
#include "onnx_import/tensor_proto.h"

#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "graph/memory_limit.h"
#include "onnx/onnx_pb.h"

namespace tessera {

namespace fs = std::filesystem;

DType dtype_from_onnx(int elem_type) {
  switch (elem_type) {
    case onnx::TensorProto::FLOAT: return DType::kF32;
    case onnx::TensorProto::FLOAT16: return DType::kF16;
    case onnx::TensorProto::BFLOAT16: return DType::kBF16;
    case onnx::TensorProto::DOUBLE: return DType::kF64;
    case onnx::TensorProto::INT64: return DType::kI64;
    case onnx::TensorProto::INT32: return DType::kI32;
    case onnx::TensorProto::INT8: return DType::kI8;
    case onnx::TensorProto::UINT8: return DType::kU8;
    case onnx::TensorProto::BOOL: return DType::kBool;
    default: break;
  }
  const char* name = "unknown";
  if (onnx::TensorProto_DataType_IsValid(elem_type))
    name = onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(elem_type)).c_str();
  else if (elem_type >= 17 && elem_type <= 20)
    name = "FLOAT8";  // newer than the protobuf classes we build against
  else if (elem_type == 21 || elem_type == 22)
    name = "INT4";
  TESSERA_THROW(ErrorKind::kUnsupported, "element type " << name << " (" << elem_type << ") is not supported");
}

int dtype_to_onnx(DType t) {
  switch (t) {
    case DType::kF32: return onnx::TensorProto::FLOAT;
    case DType::kF16: return onnx::TensorProto::FLOAT16;
    case DType::kBF16: return onnx::TensorProto::BFLOAT16;
    case DType::kF64: return onnx::TensorProto::DOUBLE;
    case DType::kI64: return onnx::TensorProto::INT64;
    case DType::kI32: return onnx::TensorProto::INT32;
    case DType::kI8: return onnx::TensorProto::INT8;
    case DType::kU8: return onnx::TensorProto::UINT8;
    case DType::kBool: return onnx::TensorProto::BOOL;
  }
  TESSERA_CHECK(false, "unhandled dtype " << static_cast<int>(t));
  return 0;
}

namespace {

// Resolves an external-data location inside `model_dir`; anything that could
// read outside the model's folder is refused, since model files are untrusted.
fs::path external_path(const std::string& location, const std::string& model_dir, const std::string& context) {
  fs::path rel(location);
  if (location.empty() || rel.is_absolute() || rel.has_root_name() || rel.has_root_directory())
    TESSERA_THROW(ErrorKind::kInvalidGraph,
                  context << ": external data location '" << location << "' must be a relative path inside the model's folder");
  for (const fs::path& part : rel.lexically_normal())
    if (part == "..")
      TESSERA_THROW(ErrorKind::kInvalidGraph,
                    context << ": external data location '" << location << "' leaves the model's folder");
  return fs::path(model_dir.empty() ? "." : model_dir) / rel;
}

// The tensor at the proto's external location: a view into the file's
// mapping, or a copy where the offset is not aligned for the element type
// (the mapping starts on a page, so the offset decides).
Tensor read_external(const onnx::TensorProto& proto, ExternalData& external, const std::string& context,
                     const TensorType& type) {
  std::string location;
  int64_t offset = 0, length = -1, nbytes = type.nbytes();
  for (const auto& kv : proto.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = std::stoll(kv.value());
      else if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      TESSERA_THROW(ErrorKind::kParse, context << ": bad external data " << kv.key() << " '" << kv.value() << "'");
    }
  }
  fs::path path = external_path(location, external.model_dir(), context);
  if (offset < 0) TESSERA_THROW(ErrorKind::kParse, context << ": negative external data offset");
  if (length >= 0 && length != nbytes)
    TESSERA_THROW(ErrorKind::kInvalidGraph,
                  context << ": external data length " << length << " does not match the " << nbytes << " bytes its type needs");
  std::shared_ptr<const MappedFile> file = external.file(path.string(), context);
  uint64_t file_bytes = file->size();
  if (file_bytes < static_cast<uint64_t>(offset) || file_bytes - static_cast<uint64_t>(offset) < static_cast<uint64_t>(nbytes))
    TESSERA_THROW(ErrorKind::kInvalidGraph, context << ": external data file '" << path.string() << "' is too short ("
                                                    << nbytes << " bytes needed at offset " << offset << ")");
  if (nbytes == 0) return Tensor(type.dtype, type.shape);
  if (offset % static_cast<int64_t>(dtype_size(type.dtype)) == 0) return Tensor::mapped(type.dtype, type.shape, file, offset);
  const uint8_t* bytes = file->data() + offset;
  check_memory(nbytes, std::to_string(nbytes) + " bytes of unaligned external data");
  return Tensor::from_bytes(type.dtype, type.shape, std::vector<uint8_t>(bytes, bytes + nbytes));
}

template <class Field>
void check_count(const Field& field, int64_t numel, const std::string& context, const char* field_name) {
  if (static_cast<int64_t>(field.size()) != numel)
    TESSERA_THROW(ErrorKind::kInvalidGraph, context << ": " << field_name << " has " << field.size()
                                                    << " values, its shape needs " << numel);
}

Tensor from_typed_fields(const onnx::TensorProto& proto, DType dtype, const Shape& shape, const std::string& context) {
  // The count is checked before the tensor is allocated: a proto of a few
  // bytes whose dims claim gigabytes must not allocate them (found by
  // fuzz/tensor_proto_fuzz: 12 bytes, 12.6 GB).
  int64_t n = shape_numel(shape);
  switch (proto.data_type()) {
    case onnx::TensorProto::FLOAT: check_count(proto.float_data(), n, context, "float_data"); break;
    case onnx::TensorProto::DOUBLE: check_count(proto.double_data(), n, context, "double_data"); break;
    case onnx::TensorProto::INT64: check_count(proto.int64_data(), n, context, "int64_data"); break;
    default: check_count(proto.int32_data(), n, context, "int32_data"); break;
  }
  check_memory(TensorType{dtype, shape}.nbytes(), type_str(TensorType{dtype, shape}));  // data present: the limit decides
  Tensor t(dtype, shape);
  if (n == 0) return t;  // no data to copy: the fields' and the tensor's pointers may be null (memcpy's UB)
  switch (proto.data_type()) {
    case onnx::TensorProto::FLOAT:
      std::memcpy(t.mutable_data(), proto.float_data().data(), static_cast<size_t>(n) * 4);
      break;
    case onnx::TensorProto::DOUBLE:
      std::memcpy(t.mutable_data(), proto.double_data().data(), static_cast<size_t>(n) * 8);
      break;
    case onnx::TensorProto::INT64:
      std::memcpy(t.mutable_data(), proto.int64_data().data(), static_cast<size_t>(n) * 8);
      break;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: {
      // 16-bit floats travel as their bit patterns in int32_data.
      uint16_t* p = t.mutable_data_as<uint16_t>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint16_t>(proto.int32_data(static_cast<int>(i)));
      break;
    }
    default:  // i32, i8, u8, bool: values in int32_data
      for (int64_t i = 0; i < n; ++i) t.set_int(i, proto.int32_data(static_cast<int>(i)));
      break;
  }
  return t;
}

}  // namespace

std::shared_ptr<const MappedFile> ExternalData::file(const std::string& path, const std::string& context) {
  auto it = files_.find(path);
  if (it == files_.end()) it = files_.emplace(path, MappedFile::open(path, context)).first;
  return it->second;
}

Tensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& model_dir, const std::string& context) {
  ExternalData external(model_dir);
  return tensor_from_proto(proto, external, context);
}

Tensor tensor_from_proto(const onnx::TensorProto& proto, ExternalData& external, const std::string& context) {
  if (proto.has_segment()) TESSERA_THROW(ErrorKind::kUnsupported, context << ": segmented tensors are not supported");
  DType dtype;
  try {
    dtype = dtype_from_onnx(proto.data_type());
  } catch (const Error& e) {
    throw Error(e.kind(), context + ": " + e.message());
  }
  Shape shape(proto.dims().begin(), proto.dims().end());
  for (int64_t d : shape)
    if (d < 0) TESSERA_THROW(ErrorKind::kInvalidGraph, context << ": negative dimension " << d);
  TensorType type{dtype, shape};
  int64_t nbytes = 0;
  try {
    int64_t n = type.numel();
    if (n > kMaxTensorBytes / static_cast<int64_t>(dtype_size(dtype))) throw Error(ErrorKind::kResource, "");
    nbytes = type.nbytes();
  } catch (const Error&) {
    TESSERA_THROW(ErrorKind::kResource, context << ": tensor " << type_str(type) << " is too large (limit "
                                                << (kMaxTensorBytes >> 30) << " GiB)");
  }
  try {
    if (proto.data_location() == onnx::TensorProto::EXTERNAL)
      return read_external(proto, external, context, type);
    if (proto.has_raw_data()) {
      const std::string& raw = proto.raw_data();
      if (static_cast<int64_t>(raw.size()) != nbytes)
        TESSERA_THROW(ErrorKind::kInvalidGraph, context << ": raw_data has " << raw.size() << " bytes, "
                                                        << type_str(type) << " needs " << nbytes);
      check_memory(nbytes, type_str(type));
      return Tensor::from_bytes(dtype, shape, std::vector<uint8_t>(raw.begin(), raw.end()));
    }
    return from_typed_fields(proto, dtype, shape, context);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kResource) throw Error(e.kind(), context + ": " + e.message());
    throw;
  }
}

onnx::TensorProto tensor_to_proto(const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(dtype_to_onnx(t.dtype()));
  for (int64_t d : t.shape()) p.add_dims(d);
  if (t.defined()) p.set_raw_data(reinterpret_cast<const char*>(t.data()), static_cast<size_t>(t.nbytes()));
  return p;
}

Tensor read_tensor_file(const std::string& path, std::string* name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TESSERA_THROW(ErrorKind::kIo, path << ": cannot open tensor file");
  onnx::TensorProto proto;
  if (!proto.ParseFromIstream(&in))
    TESSERA_THROW(ErrorKind::kParse, path << ": not a valid TensorProto file");
  if (name) *name = proto.name();
  fs::path dir = fs::path(path).parent_path();
  return tensor_from_proto(proto, dir.string(), path);
}

void write_tensor_file(const Tensor& t, const std::string& name, const std::string& path) {
  std::string bytes;
  if (!tensor_to_proto(t, name).SerializeToString(&bytes))
    TESSERA_THROW(ErrorKind::kInternal, path << ": cannot serialize tensor '" << name << "'");
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) TESSERA_THROW(ErrorKind::kIo, path << ": cannot write");
    errno = 0;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) {
      std::string why = errno ? std::string(": ") + std::strerror(errno) : std::string();
      out.close();
      std::remove(tmp.c_str());
      TESSERA_THROW(ErrorKind::kIo, path << ": write failed" << why);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    TESSERA_THROW(ErrorKind::kIo, path << ": cannot rename temporary file: " << ec.message());
  }
}

}  // namespace tessera
