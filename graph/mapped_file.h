// A file mapped read-only into memory, whole, for as long as the object
// lives: tensors view their bytes in it (Tensor::view, with the mapping as
// owner) instead of copying them, and the kernel pages them in and out as
// they are read, so weights larger than memory can be imported and planned.
// A read past the end of a file that shrank while mapped (SIGBUS) ends the
// process with a one-line error naming the file and exit status 1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace tessera {

class MappedFile {
 public:
  // Throws Error(kIo) "<path>: cannot open|map ..." naming `what` (the
  // tensor that asked for it) when the file cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, uint64_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;  // null for an empty file
  uint64_t size_;
  int watch_slot_ = -1;  // where a SIGBUS handler finds the path (mapped_file.cc)
};

}  // namespace tessera
