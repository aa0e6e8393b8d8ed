// TensorProto <-> Tensor: every storage form ONNX writers use, and the
// errors for data that does not match its type.
#include "onnx_import/tensor_proto.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "onnx/onnx_pb.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

onnx::TensorProto proto(int type, std::vector<int64_t> dims) {
  onnx::TensorProto p;
  p.set_name("t");
  p.set_data_type(type);
  for (int64_t d : dims) p.add_dims(d);
  return p;
}

ErrorKind error_kind(const onnx::TensorProto& p, std::string* what = nullptr) {
  try {
    tensor_from_proto(p, ".", "initializer 't'");
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.kind();
  }
  return ErrorKind::kInternal;
}

TEST(TensorProto, RawDataRoundTripsForEveryDtype) {
  for (DType dt : kAllDTypes) {
    Tensor t = Tensor::from_doubles(dt, {2, 2}, {0, 1, 1, 0});
    onnx::TensorProto p = tensor_to_proto(t, "x");
    EXPECT_EQ(p.name(), "x");
    EXPECT_EQ(dtype_from_onnx(p.data_type()), dt);
    Tensor back = tensor_from_proto(p, ".", "x");
    EXPECT_TRUE(back.identical(t)) << dtype_name(dt);
  }
}

TEST(TensorProto, TypedFields) {
  onnx::TensorProto f = proto(onnx::TensorProto::FLOAT, {3});
  for (float v : {1.5f, -2.0f, 3.25f}) f.add_float_data(v);
  EXPECT_EQ(tensor_from_proto(f, ".", "f").to_doubles(), (std::vector<double>{1.5, -2.0, 3.25}));

  onnx::TensorProto h = proto(onnx::TensorProto::FLOAT16, {2});
  h.add_int32_data(float_to_half(0.5f));
  h.add_int32_data(float_to_half(-4.0f));
  EXPECT_EQ(tensor_from_proto(h, ".", "h").to_doubles(), (std::vector<double>{0.5, -4.0}));

  onnx::TensorProto i = proto(onnx::TensorProto::INT64, {2});
  i.add_int64_data(int64_t{1} << 40);
  i.add_int64_data(-7);
  EXPECT_EQ(tensor_from_proto(i, ".", "i").to_ints(), (std::vector<int64_t>{int64_t{1} << 40, -7}));

  onnx::TensorProto b = proto(onnx::TensorProto::BOOL, {3});
  for (int v : {1, 0, 1}) b.add_int32_data(v);
  Tensor bt = tensor_from_proto(b, ".", "b");
  EXPECT_EQ(bt.dtype(), DType::kBool);
  EXPECT_EQ(bt.to_ints(), (std::vector<int64_t>{1, 0, 1}));

  onnx::TensorProto d = proto(onnx::TensorProto::DOUBLE, {});
  d.add_double_data(0.1);
  Tensor dt = tensor_from_proto(d, ".", "d");
  EXPECT_EQ(dt.rank(), 0);
  EXPECT_EQ(dt.get_double(0), 0.1);

  onnx::TensorProto i8 = proto(onnx::TensorProto::INT8, {2});
  i8.add_int32_data(-128);
  i8.add_int32_data(127);
  EXPECT_EQ(tensor_from_proto(i8, ".", "i8").to_ints(), (std::vector<int64_t>{-128, 127}));
}

TEST(TensorProto, ShortDataIsAnErrorNamingTheTensor) {
  onnx::TensorProto raw = proto(onnx::TensorProto::FLOAT, {4});
  raw.set_raw_data(std::string(12, '\0'));
  std::string what;
  EXPECT_EQ(error_kind(raw, &what), ErrorKind::kInvalidGraph);
  EXPECT_NE(what.find("initializer 't'"), std::string::npos) << what;

  onnx::TensorProto typed = proto(onnx::TensorProto::INT64, {3});
  typed.add_int64_data(1);
  EXPECT_EQ(error_kind(typed), ErrorKind::kInvalidGraph);
}

TEST(TensorProto, TooLargeIsAResourceError) {
  onnx::TensorProto p = proto(onnx::TensorProto::FLOAT, {int64_t{1} << 31, int64_t{1} << 31});
  EXPECT_EQ(error_kind(p), ErrorKind::kResource);
}

// Dims that claim 48 GiB (more than the test machines have, less than
// kMaxTensorBytes) and data that cannot fill them: the data is checked
// before anything is allocated, so the error is the missing data's, never
// an allocation's (kResource) nor the process killed for memory.
TEST(TensorProto, DimsWithoutTheirDataAllocateNothing) {
  for (auto [type, dims] : std::vector<std::pair<int, std::vector<int64_t>>>{
           {onnx::TensorProto::FLOAT, {3, int64_t{1} << 32}},
           {onnx::TensorProto::UINT8, {3, int64_t{1} << 34}},
           {onnx::TensorProto::INT64, {3, int64_t{1} << 31}},
           {onnx::TensorProto::FLOAT16, {3, int64_t{1} << 33}}}) {
    std::string what;
    EXPECT_EQ(error_kind(proto(type, dims), &what), ErrorKind::kInvalidGraph) << type;
    EXPECT_NE(what.find("values, its shape needs"), std::string::npos) << what;
  }
  fs::path dir = fs::path(TESSERA_BINARY_DIR) / "tensor_proto_test";
  fs::create_directories(dir);
  {
    std::ofstream(dir / "four_bytes.bin", std::ios::binary) << "abcd";
  }
  onnx::TensorProto ext = proto(onnx::TensorProto::UINT8, {3, int64_t{1} << 34});
  ext.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* location = ext.add_external_data();
  location->set_key("location");
  location->set_value("four_bytes.bin");
  try {
    tensor_from_proto(ext, dir.string(), "initializer 't'");
    ADD_FAILURE() << "read 48 GiB from a 4-byte file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph) << e.what();
    EXPECT_NE(std::string(e.what()).find("is too short"), std::string::npos) << e.what();
  }
}

// What fuzz/tensor_proto_fuzz found: a 12-byte file whose dims claim 12.6 GB
// of uint8 with no values (it allocated them, then refused the file).
TEST(TensorProto, FuzzTypedDimsWithoutValues) {
  try {
    read_tensor_file(std::string(TESSERA_SOURCE_DIR) + "/fuzz/regressions/tensor_proto/typed_dims_without_values");
    ADD_FAILURE() << "read a tensor from 12 bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph) << e.what();
    EXPECT_NE(std::string(e.what()).find("int32_data has 0 values"), std::string::npos) << e.what();
  }
}

// A tensor with a zero dim has no values: its typed field is empty, and
// reading it copies nothing (memcpy from the empty field's null pointer was
// undefined behaviour: fuzz/regressions/tensor_proto/empty_typed_*, which
// UBSan reports in the sanitizer run).
TEST(TensorProto, EmptyTypedFieldsReadAsEmptyTensors) {
  for (int type : {onnx::TensorProto::FLOAT, onnx::TensorProto::DOUBLE, onnx::TensorProto::INT64}) {
    Tensor t = tensor_from_proto(proto(type, {2, 0, 3}), ".", "initializer 't'");
    EXPECT_EQ(t.shape(), (Shape{2, 0, 3})) << type;
    EXPECT_EQ(t.numel(), 0) << type;
  }
  for (const char* name : {"empty_typed_float", "empty_typed_double", "empty_typed_int64"}) {
    Tensor t = read_tensor_file(std::string(TESSERA_SOURCE_DIR) + "/fuzz/regressions/tensor_proto/" + name);
    EXPECT_EQ(t.numel(), 0) << name;
  }
}

TEST(TensorProto, UnsupportedDtypes) {
  for (int type : std::vector<int>{onnx::TensorProto::STRING, onnx::TensorProto::COMPLEX64, onnx::TensorProto::UINT16, 17}) {
    std::string what;
    EXPECT_EQ(error_kind(proto(type, {1}), &what), ErrorKind::kUnsupported) << type;
    EXPECT_NE(what.find("initializer 't'"), std::string::npos) << what;
  }
  EXPECT_THROW(dtype_from_onnx(onnx::TensorProto::UINT64), Error);
}

TEST(TensorProto, FilesRoundTrip) {
  fs::path dir = fs::path(TESSERA_BINARY_DIR) / "tensor_proto_test";
  fs::create_directories(dir);
  std::string path = (dir / "input_0.pb").string();
  Tensor t = Tensor::from_doubles(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  write_tensor_file(t, "x", path);
  std::string name;
  Tensor back = read_tensor_file(path, &name);
  EXPECT_EQ(name, "x");
  EXPECT_TRUE(back.identical(t));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  try {
    read_tensor_file((dir / "missing.pb").string());
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
  }
  EXPECT_THROW(write_tensor_file(t, "x", (dir / "no_such_dir" / "a.pb").string()), Error);
}

}  // namespace
}  // namespace tessera
