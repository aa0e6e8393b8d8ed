#include "runtime/cuda/nccl_library.h"

#include <dlfcn.h>

#include <mutex>

#include "graph/error.h"

namespace tessera::runtime::cuda {

namespace {

struct NcclLoaded {
  NcclLibrary lib;
  bool ok = false;
  std::string why;
};

// The soname first: a process that already has an NCCL (PyTorch's) gets
// that one, and the loader's search path decides otherwise; then the file
// CMake found at configure time, for a toolkit outside that path.
void* open_nccl(std::string& why) {
  const char* candidates[] = {"libnccl.so.2", TESSERA_NCCL_CONFIGURED_PATH};
  for (const char* name : candidates) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      why.clear();
      return h;
    }
    if (why.empty()) {
      const char* err = dlerror();
      why = std::string("libnccl.so.2 could not be loaded (") + (err ? err : name) + ")";
    }
  }
  return nullptr;
}

template <class F>
bool resolve_nccl_symbol(void* handle, const char* symbol, F& out, std::string& why) {
  out = reinterpret_cast<F>(dlsym(handle, symbol));
  if (!out && why.empty()) why = std::string("the loaded NCCL has no ") + symbol + " (NCCL 2.18 or newer is needed)";
  return out != nullptr;
}

NcclLoaded load_nccl() {
  NcclLoaded l;
  void* h = open_nccl(l.why);
  if (!h) return l;
  NcclLibrary& n = l.lib;
  std::string& w = l.why;
  decltype(&::ncclGetVersion) get_version = nullptr;
  auto need = [&](const char* symbol, auto& out) { return resolve_nccl_symbol(h, symbol, out, w); };
  bool ok = need("ncclGetVersion", get_version) & need("ncclGetErrorString", n.GetErrorString) &
            need("ncclGetUniqueId", n.GetUniqueId) & need("ncclCommInitRank", n.CommInitRank) &
            need("ncclCommSplit", n.CommSplit) & need("ncclCommDestroy", n.CommDestroy) &
            need("ncclCommCount", n.CommCount) & need("ncclAllReduce", n.AllReduce) &
            need("ncclReduceScatter", n.ReduceScatter) & need("ncclAllGather", n.AllGather) &
            need("ncclSend", n.Send) & need("ncclRecv", n.Recv) & need("ncclGroupStart", n.GroupStart) &
            need("ncclGroupEnd", n.GroupEnd);
  if (!ok) return l;  // the handle stays open: dlclose of a library another user may share gains nothing
  n.AlltoAll = reinterpret_cast<decltype(n.AlltoAll)>(dlsym(h, "ncclAlltoAll"));
  if (get_version(&n.version) != ncclSuccess) {
    w = "ncclGetVersion failed";
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

const NcclLibrary* nccl_library(std::string* why) {
  static const NcclLoaded loaded = load_nccl();  // once, on first use
  if (why) *why = loaded.why;
  return loaded.ok ? &loaded.lib : nullptr;
}

const NcclLibrary& nccl() {
  std::string why;
  const NcclLibrary* lib = nccl_library(&why);
  if (!lib) TESSERA_THROW(ErrorKind::kUsage, why);
  return *lib;
}

}  // namespace tessera::runtime::cuda
