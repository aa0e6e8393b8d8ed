// Linked into the tessera CLI of an ASan build only (cmake/sanitize.cmake):
// a process that mpirun started unwinds the stacks of its allocations fully
// (fast_unwind_on_malloc=0).
//
// Why: Open MPI leaves what MPI_Init_thread, MPI_Finalize and its progress
// thread allocate for the process's exit, and the Debian libraries have no
// frame pointers, so the fast unwinder stops after one frame, often in an MCA
// plugin unloaded by then (a frame without a module name). Fully unwound,
// every such stack goes through libmpi, libopen-pal, libopen-rte, libevent or
// hwloc, which lsan.supp names; an allocation of ours that leaks is still
// reported. Only ranks pay for the slower unwinding (a mesh test's ranks are
// short runs); every other process keeps the fast one.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

// ASan asks for its options while it starts, before its shadow memory and
// libc's getenv can be used: this code is not instrumented, calls no
// intercepted function (system calls directly) and reads the environment
// from /proc.
#define TESSERA_BEFORE_ASAN __attribute__((no_sanitize("address", "undefined", "coverage")))

namespace {

// Whether this process's environment has NAME=.
TESSERA_BEFORE_ASAN bool has_variable(const char* env, long n, const char* name) {
  for (long at = 0; at < n;) {
    long i = 0;
    while (name[i] != '\0' && at + i < n && env[at + i] == name[i]) ++i;
    if (name[i] == '\0' && at + i < n && env[at + i] == '=') return true;
    while (at < n && env[at] != '\0') ++at;  // the next NAME=VALUE
    ++at;
  }
  return false;
}

}  // namespace

extern "C" TESSERA_BEFORE_ASAN const char* __asan_default_options() {
  static char env[1 << 16];
  long n = 0;
  long fd = ::syscall(SYS_openat, AT_FDCWD, "/proc/self/environ", O_RDONLY);
  if (fd >= 0) {
    n = ::syscall(SYS_read, fd, env, sizeof(env));
    ::syscall(SYS_close, fd);
  }
  // The variables Open MPI's and MPICH's launchers give every rank (what
  // MpiSession::launched reads).
  bool rank = has_variable(env, n, "OMPI_COMM_WORLD_SIZE") || has_variable(env, n, "PMI_SIZE");
  return rank ? "fast_unwind_on_malloc=0" : "";
}
