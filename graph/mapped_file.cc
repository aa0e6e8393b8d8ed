#include "graph/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "graph/error.h"

namespace tessera {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const std::string& what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) TESSERA_THROW(ErrorKind::kIo, what << ": cannot open external data file '" << path << "': " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TESSERA_THROW(ErrorKind::kIo, what << ": external data file '" << path << "' is not a regular file");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  void* p = nullptr;
  if (size > 0) {
    // MAP_PRIVATE and PROT_READ: the pages are the page cache's, shared with
    // every other reader and dropped under memory pressure instead of swapped.
    p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED)
      TESSERA_THROW(ErrorKind::kIo, what << ": cannot map external data file '" << path << "': " << std::strerror(err));
  } else {
    ::close(fd);
  }
  return std::shared_ptr<const MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(p), size));
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace tessera
