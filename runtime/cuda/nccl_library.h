// NCCL as the CUDA backend calls it: libnccl.so.2 opened with dlopen when a
// GPU plan first needs it, never linked. Only one NCCL can be loaded into a
// process, and the first one loaded is the one every later user gets:
// PyTorch ships its own, newer build, and a process that loaded ours first
// (say, `import tessera` before `import torch`) broke torch's import
// ("undefined symbol ncclCommResume"). Loaded on demand, our calls go to
// whichever libnccl.so.2 the process has, or loads first from the system.
// Only in builds with NCCL's headers (TESSERA_WITH_NCCL).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace tessera::runtime::cuda {

// NCCL's entry points, named without the `nccl` prefix.
struct NcclLibrary {
  int version = 0;  // ncclGetVersion's code, e.g. 22807 for 2.28.7
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRank) CommInitRank = nullptr;
  decltype(&::ncclCommSplit) CommSplit = nullptr;  // NCCL 2.18 and newer
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclCommCount) CommCount = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&::ncclAllGather) AllGather = nullptr;
  decltype(&::ncclSend) Send = nullptr;
  decltype(&::ncclRecv) Recv = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
  // NCCL 2.28 and newer; null before, where all-to-all is a send/recv group.
  ncclResult_t (*AlltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
};

// The library, loaded by the first call (thread-safe; later calls return
// the same answer); nullptr where it cannot be loaded or lacks an entry
// point, with `why` (if given) saying which.
const NcclLibrary* nccl_library(std::string* why = nullptr);

// nccl_library(), or Error(kUsage) saying why it could not be loaded.
const NcclLibrary& nccl();

}  // namespace tessera::runtime::cuda
