#include "graph/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

#include "graph/error.h"

namespace tessera {

namespace {

// A read of a mapped page past the end of a file that shrank after it was
// mapped (rewritten or truncated by another process) raises SIGBUS, which
// would kill the process without a word. The live mappings are listed here
// so that the handler can name the file in a one-line error and exit 1.
// Fixed slots and atomics: the handler may read nothing else.
constexpr int kWatchSlots = 256;
constexpr size_t kWatchPath = 480;
struct WatchSlot {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0};
  uintptr_t end = 0;
  char path[kWatchPath] = {};
};
WatchSlot g_watch[kWatchSlots];
struct sigaction g_previous_sigbus;

void write_err(const char* s) {
  ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  auto at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (WatchSlot& w : g_watch) {
    uintptr_t begin = w.begin.load(std::memory_order_acquire);
    if (begin != 0 && at >= begin && at < w.end) {
      write_err("tessera: error: ");
      write_err(w.path);
      write_err(": external data file is shorter than when it was mapped (truncated or rewritten while in use)\n");
      ::_exit(1);
    }
  }
  // Not a mapping of ours: what was there before.
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) && g_previous_sigbus.sa_sigaction) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
  } else {
    ::signal(SIGBUS, SIG_DFL);
    ::raise(SIGBUS);
  }
}

// The slot watching [data, data + size), or -1 when every slot is taken
// (the mapping then works, unwatched).
int watch(const std::string& path, const uint8_t* data, uint64_t size) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
  for (int i = 0; i < kWatchSlots; ++i) {
    bool expected = false;
    if (!g_watch[i].used.compare_exchange_strong(expected, true)) continue;
    std::strncpy(g_watch[i].path, path.c_str(), kWatchPath - 1);
    g_watch[i].end = reinterpret_cast<uintptr_t>(data) + size;
    g_watch[i].begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return i;
  }
  return -1;
}

void unwatch(int slot) {
  if (slot < 0) return;
  g_watch[slot].begin.store(0, std::memory_order_release);
  g_watch[slot].used.store(false, std::memory_order_release);
}

}  // namespace

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
  auto* f = new MappedFile(path, static_cast<const uint8_t*>(p), size);
  if (p) f->watch_slot_ = watch(path, f->data_, size);
  return std::shared_ptr<const MappedFile>(f);
}

MappedFile::~MappedFile() {
  unwatch(watch_slot_);
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace tessera
