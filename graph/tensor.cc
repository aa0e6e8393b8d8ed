#include "graph/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "graph/error.h"

namespace tessera {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) TESSERA_THROW(ErrorKind::kInvalidGraph, "negative dimension in shape " << shape_str(shape));
    if (d != 0 && n > INT64_MAX / d)
      TESSERA_THROW(ErrorKind::kResource, "shape " << shape_str(shape) << " has too many elements");
    n *= d;
  }
  return n;
}

int64_t TensorType::nbytes() const {
  int64_t n = numel(), size = static_cast<int64_t>(dtype_size(dtype));
  if (n > INT64_MAX / size) TESSERA_THROW(ErrorKind::kResource, "tensor " << type_str(*this) << " has too many bytes");
  return n * size;
}

std::string shape_str(const Shape& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += "x";
    s += std::to_string(shape[i]);
  }
  return s;
}

std::vector<int64_t> shape_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

std::string type_str(const TensorType& type) {
  std::string s = dtype_name(type.dtype);
  s += "[";
  for (size_t i = 0; i < type.shape.size(); ++i) {
    if (i) s += "x";
    s += std::to_string(type.shape[i]);
  }
  return s + "]";
}

namespace {
std::shared_ptr<TensorStorage> allocate(const TensorType& type) {
  int64_t n = type.numel();
  int64_t size = static_cast<int64_t>(dtype_size(type.dtype));
  if (n > kMaxTensorBytes / size)
    TESSERA_THROW(ErrorKind::kResource, "tensor " << type_str(type) << " is too large to allocate");
  try {
    return std::make_shared<TensorStorage>(std::vector<uint8_t>(static_cast<size_t>(n * size)));
  } catch (const std::bad_alloc&) {
    TESSERA_THROW(ErrorKind::kResource, "out of memory allocating tensor " << type_str(type));
  }
}
}  // namespace

Tensor::Tensor(DType dtype, Shape shape) : type_{dtype, std::move(shape)} {
  data_ = allocate(type_);
}

Tensor Tensor::from_bytes(DType dtype, Shape shape, std::vector<uint8_t> bytes) {
  Tensor t;
  t.type_ = {dtype, std::move(shape)};
  if (static_cast<int64_t>(bytes.size()) != t.nbytes())
    TESSERA_THROW(ErrorKind::kInvalidGraph, "tensor " << type_str(t.type_) << " needs " << t.nbytes()
                                                      << " bytes of data but has " << bytes.size());
  t.data_ = std::make_shared<TensorStorage>(std::move(bytes));
  return t;
}

Tensor Tensor::view(DType dtype, Shape shape, const uint8_t* data, std::shared_ptr<const void> owner) {
  Tensor t;
  t.type_ = {dtype, std::move(shape)};
  TESSERA_CHECK(owner && data && reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0,
                "a view of " << type_str(t.type_) << " needs an owner and aligned data");
  t.data_ = std::make_shared<TensorStorage>(data, static_cast<size_t>(t.nbytes()), std::move(owner));
  return t;
}

Tensor Tensor::from_doubles(DType dtype, Shape shape, const std::vector<double>& values) {
  Tensor t(dtype, std::move(shape));
  TESSERA_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "value count " << values.size());
  for (size_t i = 0; i < values.size(); ++i) t.set_double(static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor Tensor::from_ints(DType dtype, Shape shape, const std::vector<int64_t>& values) {
  Tensor t(dtype, std::move(shape));
  TESSERA_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "value count " << values.size());
  for (size_t i = 0; i < values.size(); ++i) t.set_int(static_cast<int64_t>(i), values[i]);
  return t;
}

uint8_t* Tensor::mutable_data() {
  hash_.store(0, std::memory_order_relaxed);
  if (!data_) return nullptr;
  if (data_.use_count() > 1 || data_->is_view()) {
    const uint8_t* p = data_->data();
    data_ = std::make_shared<TensorStorage>(std::vector<uint8_t>(p, p + data_->size()));
  }
  return data_->owned_data();
}

template <class T>
static T load(const uint8_t* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}
template <class T>
static void store(uint8_t* p, int64_t i, T v) {
  std::memcpy(p + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

double Tensor::get_double(int64_t i) const {
  const uint8_t* p = data();
  switch (dtype()) {
    case DType::kF32: return load<float>(p, i);
    case DType::kF16: return half_to_float(load<uint16_t>(p, i));
    case DType::kBF16: return bf16_to_float(load<uint16_t>(p, i));
    case DType::kF64: return load<double>(p, i);
    case DType::kI64: return static_cast<double>(load<int64_t>(p, i));
    case DType::kI32: return load<int32_t>(p, i);
    case DType::kI8: return load<int8_t>(p, i);
    case DType::kU8: return load<uint8_t>(p, i);
    case DType::kBool: return load<uint8_t>(p, i) ? 1.0 : 0.0;
  }
  return 0;
}

int64_t Tensor::get_int(int64_t i) const {
  const uint8_t* p = data();
  switch (dtype()) {
    case DType::kI64: return load<int64_t>(p, i);
    case DType::kI32: return load<int32_t>(p, i);
    case DType::kI8: return load<int8_t>(p, i);
    case DType::kU8: return load<uint8_t>(p, i);
    case DType::kBool: return load<uint8_t>(p, i) ? 1 : 0;
    default: return static_cast<int64_t>(get_double(i));
  }
}

void Tensor::set_double(int64_t i, double v) {
  uint8_t* p = mutable_data();
  switch (dtype()) {
    case DType::kF32: store<float>(p, i, static_cast<float>(v)); break;
    case DType::kF16: store<uint16_t>(p, i, float_to_half(static_cast<float>(v))); break;
    case DType::kBF16: store<uint16_t>(p, i, float_to_bf16(static_cast<float>(v))); break;
    case DType::kF64: store<double>(p, i, v); break;
    case DType::kBool: store<uint8_t>(p, i, v != 0.0); break;
    default: set_int(i, static_cast<int64_t>(v)); break;
  }
}

void Tensor::set_int(int64_t i, int64_t v) {
  uint8_t* p = mutable_data();
  switch (dtype()) {
    case DType::kI64: store<int64_t>(p, i, v); break;
    case DType::kI32: store<int32_t>(p, i, static_cast<int32_t>(v)); break;
    case DType::kI8: store<int8_t>(p, i, static_cast<int8_t>(v)); break;
    case DType::kU8: store<uint8_t>(p, i, static_cast<uint8_t>(v)); break;
    case DType::kBool: store<uint8_t>(p, i, v != 0); break;
    default: set_double(i, static_cast<double>(v)); break;
  }
}

std::vector<double> Tensor::to_doubles() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = get_double(i);
  return out;
}

std::vector<int64_t> Tensor::to_ints() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = get_int(i);
  return out;
}

Tensor Tensor::cast(DType to) const {
  if (to == dtype()) return *this;
  Tensor out(to, shape());
  bool int_path = is_integer(dtype()) && is_integer(to);
  for (int64_t i = 0; i < numel(); ++i) {
    if (int_path) out.set_int(i, get_int(i));
    else out.set_double(i, get_double(i));
  }
  return out;
}

Tensor Tensor::reshaped(Shape shape) const {
  TESSERA_CHECK(shape_numel(shape) == numel(), "reshape " << shape_str(this->shape()) << " to " << shape_str(shape));
  Tensor t = *this;
  t.type_.shape = std::move(shape);
  t.hash_.store(0, std::memory_order_relaxed);  // the shape is hashed
  return t;
}

Tensor Tensor::mapped(DType dtype, Shape shape, std::shared_ptr<const MappedFile> file, int64_t offset) {
  Tensor t;
  t.type_ = {dtype, std::move(shape)};
  auto n = static_cast<uint64_t>(t.nbytes());
  TESSERA_CHECK(file && file->data() && offset >= 0 && static_cast<uint64_t>(offset) <= file->size() &&
                    n <= file->size() - static_cast<uint64_t>(offset) &&
                    offset % static_cast<int64_t>(dtype_size(dtype)) == 0,
                type_str(t.type_) << " at offset " << offset << " of " << (file ? file->path() : "no file"));
  const uint8_t* at = file->data() + offset;
  t.data_ = std::make_shared<TensorStorage>(at, static_cast<size_t>(n), std::move(file), true);
  return t;
}

Tensor Tensor::made(DType dtype, Shape shape, TensorStorage::Fill fill) {
  Tensor t;
  t.type_ = {dtype, std::move(shape)};
  if (t.nbytes() > kMaxTensorBytes)
    TESSERA_THROW(ErrorKind::kResource, "tensor " << type_str(t.type_) << " is too large to allocate");
  t.data_ = std::make_shared<TensorStorage>(static_cast<size_t>(t.nbytes()), std::move(fill));
  return t;
}

const uint8_t* TensorStorage::made() const {
  if (const uint8_t* p = made_data_.load(std::memory_order_acquire)) return p;
  std::lock_guard<std::mutex> lock(made_mutex_);
  if (const uint8_t* p = made_data_.load(std::memory_order_relaxed)) return p;
  try {
    made_bytes_.resize(size_);
  } catch (const std::bad_alloc&) {
    TESSERA_THROW(ErrorKind::kResource, "out of memory making a tensor of " << size_ << " bytes");
  }
  if (size_ > 0) fill_(made_bytes_.data());
  // An empty vector's data() may be null; a made storage of 0 bytes still has data.
  static const uint8_t kNothing = 0;
  const uint8_t* p = size_ > 0 ? made_bytes_.data() : &kNothing;
  made_data_.store(p, std::memory_order_release);
  return p;
}

void TensorStorage::read_once(const std::function<void(const uint8_t*)>& read) const {
  if (!fill_) {
    read(data_);
    drop_pages();
    return;
  }
  std::lock_guard<std::mutex> lock(made_mutex_);
  if (const uint8_t* p = made_data_.load(std::memory_order_relaxed)) {
    read(p);
    return;
  }
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(size_);
  } catch (const std::bad_alloc&) {
    TESSERA_THROW(ErrorKind::kResource, "out of memory making a tensor of " << size_ << " bytes");
  }
  if (size_ > 0) fill_(bytes.data());
  read(bytes.data());
}

void Tensor::read_once(const std::function<void(const uint8_t*)>& read) const {
  if (data_) data_->read_once(read);
  else read(nullptr);
}

void TensorStorage::drop_pages() const {
  if (fill_) {
    std::lock_guard<std::mutex> lock(made_mutex_);
    made_data_.store(nullptr, std::memory_order_release);
    std::vector<uint8_t>().swap(made_bytes_);
    return;
  }
  if (!file_pages_ || size_ == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = (reinterpret_cast<uintptr_t>(data_) + page - 1) / page * page;
  uintptr_t end = (reinterpret_cast<uintptr_t>(data_) + size_) / page * page;
  // Only whole pages inside the view: a page shared with a neighbour is kept.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

Tensor Tensor::view_part(Shape shape, int64_t offset) const {
  Tensor t;
  t.type_ = {dtype(), std::move(shape)};
  TESSERA_CHECK(data_ && offset >= 0 && offset + t.numel() <= numel(),
                "a view of " << type_str(t.type_) << " at element " << offset << " of " << type_str(type_));
  int64_t at_byte = offset * static_cast<int64_t>(dtype_size(dtype()));
  if (data_->is_made()) {
    // A part of bytes made on demand is made on demand too, from them.
    Tensor whole = *this;
    auto n = static_cast<size_t>(t.nbytes());
    t.data_ = std::make_shared<TensorStorage>(n, [whole, at_byte, n](uint8_t* dst) {
      whole.read_once([&](const uint8_t* src) { std::memcpy(dst, src + at_byte, n); });
    });
    return t;
  }
  const uint8_t* at = data() + at_byte;
  // A part of a mapped file's view is one too (its pages may be dropped).
  t.data_ = std::make_shared<TensorStorage>(at, static_cast<size_t>(t.nbytes()), data_, data_->file_pages());
  return t;
}

bool Tensor::identical(const Tensor& other) const {
  if (type_ != other.type_) return false;
  if (data_ == other.data_) return true;
  if (!data_ || !other.data_) return false;
  if (data_->data() == other.data_->data()) return true;  // two views of the same bytes
  return data_->size() == other.data_->size() &&
         (data_->size() == 0 || std::memcmp(data_->data(), other.data_->data(), data_->size()) == 0);
}

uint64_t Tensor::hash() const {
  if (uint64_t cached = hash_.load(std::memory_order_relaxed)) return cached;
  // FNV-1a over type and a hash of the bytes.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(static_cast<uint64_t>(dtype()));
  for (int64_t d : shape()) mix(static_cast<uint64_t>(d));
  // Read once, from start to end: a mapped weight need not stay resident.
  if (data_) data_->read_once([&](const uint8_t* p) { mix(hash_bytes(p, data_->size())); });
  if (h == 0) h = 1;
  hash_.store(h, std::memory_order_relaxed);
  return h;
}

uint64_t hash_bytes(const uint8_t* p, size_t n) {
  // Four independent lanes of 8-byte words, multiply and rotate, then the
  // tail byte by byte: byte-by-byte FNV-1a waits on one multiply a byte.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t lane[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull, 0x082EFA98EC4E6C89ull};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      uint64_t x = (lane[k] ^ w) * kMul;
      lane[k] = (x << 31) | (x >> 33);
    }
  uint64_t h = n * kMul;
  for (int k = 0; k < 4; ++k) h = (h ^ lane[k]) * 1099511628211ull;
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h ^ (h >> 32);
}

}  // namespace tessera
