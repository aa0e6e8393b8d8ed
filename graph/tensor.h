// Tensor types (dtype + static shape) and tensors with data. Data is shared
// between copies and copied on first write; it is the tensor's own bytes or a
// read-only view into memory another object keeps alive (a mapped
// external-data file: weights are read where they are mapped, never copied
// whole, so a model larger than memory can be imported).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/mapped_file.h"

namespace tessera {

using Shape = std::vector<int64_t>;

// Product of dims; 1 for a scalar. Throws Error(kResource) on overflow.
int64_t shape_numel(const Shape& shape);
// "1x3x224x224"; "scalar" for rank 0.
std::string shape_str(const Shape& shape);
// Row-major strides of `shape`.
std::vector<int64_t> shape_strides(const Shape& shape);

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const { return shape_numel(shape); }
  // numel() times the element size. Throws Error(kResource) on overflow.
  int64_t nbytes() const;
  bool operator==(const TensorType&) const = default;
};

// A 64-bit hash of `n` bytes (not a cryptographic one: equal hashes are
// confirmed by comparing the bytes).
uint64_t hash_bytes(const uint8_t* p, size_t n);

// "f32[1x3x224x224]"
std::string type_str(const TensorType& type);

// Largest tensor Tessera allocates (bytes); larger requests raise kResource.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 36;  // 64 GiB

// The bytes of a tensor: owned, a view of `size` bytes at `data` that
// `owner` keeps valid (a mapped file), or made on demand from other
// tensors' bytes (a rank's strided block of a mapped weight, a join of
// mapped weights: see Tensor::made). Never written once a Tensor shares it:
// Tensor::mutable_data() copies a shared, viewed or made storage first.
class TensorStorage {
 public:
  using Fill = std::function<void(uint8_t*)>;
  explicit TensorStorage(std::vector<uint8_t> bytes)
      : owned_(std::move(bytes)), data_(owned_.data()), size_(owned_.size()) {}
  // `file_pages`: the view is of a read-only file mapping, whose pages this
  // process may drop and read again (drop_pages).
  TensorStorage(const uint8_t* data, size_t size, std::shared_ptr<const void> owner, bool file_pages = false)
      : data_(data), size_(size), owner_(std::move(owner)), file_pages_(file_pages) {}
  // Bytes that `fill` writes (all `size` of them) when first read, and that
  // drop_pages() frees again.
  TensorStorage(size_t size, Fill fill) : size_(size), fill_(std::move(fill)) {}
  TensorStorage(const TensorStorage&) = delete;  // data_ may point into owned_
  TensorStorage& operator=(const TensorStorage&) = delete;

  // A made storage makes its bytes here and keeps them until drop_pages().
  const uint8_t* data() const { return fill_ ? made() : data_; }
  size_t size() const { return size_; }
  bool is_view() const { return owner_ != nullptr || fill_ != nullptr; }
  bool is_made() const { return fill_ != nullptr; }
  bool file_pages() const { return file_pages_; }
  // Owned storage only.
  uint8_t* owned_data() { return owned_.data(); }
  // For a view of a file mapping: the whole pages of [data, data + size)
  // leave this process's resident memory (the kernel reads them again from
  // the page cache or the file if they are read later). For a made
  // storage: its bytes are freed (made again if read later); the caller
  // holds the tensor alone (no other thread reads it). Nothing otherwise.
  void drop_pages() const;
  // Calls `read` with the bytes, then drops a mapping's pages; a made
  // storage's bytes are made for the call alone unless they already are,
  // so a reader that streams the tensor once (a hash, a file write, the
  // interpreter's conversion) never leaves it resident. Safe beside other
  // threads' reads.
  void read_once(const std::function<void(const uint8_t*)>& read) const;

 private:
  const uint8_t* made() const;

  std::vector<uint8_t> owned_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> owner_;
  bool file_pages_ = false;
  Fill fill_;
  mutable std::mutex made_mutex_;
  mutable std::vector<uint8_t> made_bytes_;
  mutable std::atomic<const uint8_t*> made_data_{nullptr};
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor& o) : type_(o.type_), data_(o.data_), hash_(o.hash_.load(std::memory_order_relaxed)) {}
  Tensor(Tensor&& o) noexcept
      : type_(std::move(o.type_)), data_(std::move(o.data_)), hash_(o.hash_.load(std::memory_order_relaxed)) {}
  Tensor& operator=(const Tensor& o) {
    type_ = o.type_;
    data_ = o.data_;
    hash_.store(o.hash_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    type_ = std::move(o.type_);
    data_ = std::move(o.data_);
    hash_.store(o.hash_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
  // Zero-filled tensor.
  Tensor(DType dtype, Shape shape);
  // Takes ownership of raw little-endian bytes; size must match the type.
  static Tensor from_bytes(DType dtype, Shape shape, std::vector<uint8_t> bytes);
  // A read-only view of the type's bytes at `data`, which `owner` keeps
  // valid; `data` must be aligned for the element type.
  static Tensor view(DType dtype, Shape shape, const uint8_t* data, std::shared_ptr<const void> owner);
  // A view of the type's bytes at byte `offset` of a mapped file (inside
  // it, aligned for the element type).
  static Tensor mapped(DType dtype, Shape shape, std::shared_ptr<const MappedFile> file, int64_t offset);
  // A tensor whose bytes `fill` writes from other tensors' (which it keeps
  // alive) when first read; drop_mapped_pages() frees them again. A rank's
  // block of a mapped weight that is not one run of it (a column split) is
  // one: a copy of 27 GB of weights spread over the ranks of a plan would
  // not fit in memory, one tensor at a time does (the check reads them and
  // the rank files are written so).
  static Tensor made(DType dtype, Shape shape, TensorStorage::Fill fill);
  // Converts each value to `dtype` (rounding for f16/bf16, truncation for ints).
  static Tensor from_doubles(DType dtype, Shape shape, const std::vector<double>& values);
  static Tensor from_ints(DType dtype, Shape shape, const std::vector<int64_t>& values);
  static Tensor scalar_f32(float v) { return from_doubles(DType::kF32, {}, {v}); }
  static Tensor vector_i64(const std::vector<int64_t>& v) {
    return from_ints(DType::kI64, {static_cast<int64_t>(v.size())}, v);
  }

  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t rank() const { return type_.rank(); }
  int64_t numel() const { return type_.numel(); }
  int64_t nbytes() const { return type_.nbytes(); }
  bool defined() const { return data_ != nullptr; }
  // Whether another tensor holds this one's data too (a copy of it).
  bool data_shared() const { return data_ && data_.use_count() > 1; }
  // Whether the data is a view into memory the tensor does not own (a
  // mapped file); mutable_data() makes it the tensor's own.
  bool is_view() const { return data_ && data_->is_view(); }
  // Whether the bytes are made on demand (Tensor::made).
  bool is_made() const { return data_ && data_->is_made(); }
  // Calls `read` with the bytes once (TensorStorage::read_once): what a
  // reader that streams a tensor of a model larger than memory uses.
  void read_once(const std::function<void(const uint8_t*)>& read) const;

  const uint8_t* data() const { return data_ ? data_->data() : nullptr; }
  // Where the data is a view of a mapped file: its pages leave the process's
  // resident memory until read again (from the page cache, or the file);
  // where it is made (Tensor::made), it is freed until read again. For
  // a reader that has just streamed the whole tensor (hash, conversion for
  // the interpreter, a file write) or packed its own copy of it (a kernel:
  // the copy then replaces the mapped weight instead of adding to it), so
  // that a model larger than memory is never resident whole.
  void drop_mapped_pages() const {
    if (data_) data_->drop_pages();
  }
  uint8_t* mutable_data();  // copies shared or viewed data first; forgets the cached hash
  template <class T>
  const T* data_as() const { return reinterpret_cast<const T*>(data()); }
  template <class T>
  T* mutable_data_as() { return reinterpret_cast<T*>(mutable_data()); }

  // Element access with conversion; index is the flat row-major offset.
  double get_double(int64_t i) const;
  int64_t get_int(int64_t i) const;
  void set_double(int64_t i, double v);
  void set_int(int64_t i, int64_t v);
  std::vector<double> to_doubles() const;
  std::vector<int64_t> to_ints() const;

  Tensor cast(DType dtype) const;
  Tensor reshaped(Shape shape) const;  // same data, new shape of equal numel
  // A view of `shape` at element `offset` of this tensor's data, which it
  // keeps alive (a contiguous block of a weight, without copying it).
  Tensor view_part(Shape shape, int64_t offset) const;

  // Where the bytes live: two tensors of one identity and byte size hold the
  // same bytes (copies of one tensor, or views of the same memory); an
  // identity, not a hash, though different identities may hold equal bytes.
  // Null for an undefined tensor. A made tensor's is its storage's (its
  // bytes are not made for this).
  const void* bytes_identity() const {
    if (!data_) return nullptr;
    return data_->is_made() ? static_cast<const void*>(data_.get()) : static_cast<const void*>(data_->data());
  }

  // Bitwise equality of type and data.
  bool identical(const Tensor& other) const;
  // Of type and data; computed once and kept with the tensor (copies share
  // it with the data) until mutable_data() is called. Drops a mapped
  // tensor's pages after reading them. Write through a
  // pointer from mutable_data() before hashing, not after.
  uint64_t hash() const;

 private:
  TensorType type_;
  std::shared_ptr<TensorStorage> data_;
  // The cached hash, 0 until computed (a hash that is 0 is recomputed):
  // atomic, since threads of the search hash shared constants.
  mutable std::atomic<uint64_t> hash_{0};
};

}  // namespace tessera
