// The NCCL entry points of a build without NCCL (or without the CUDA backend).
#include "graph/error.h"
#include "runtime/cuda/nccl_communicator.h"

namespace tessera::runtime {

std::string nccl_unavailable_reason() {
#ifdef TESSERA_WITH_CUDA
  return "this build has no NCCL (nccl.h and libnccl were not found at configure time)";
#else
  return "this build has no CUDA backend (the CUDA toolkit was not found at configure time)";
#endif
}

int cuda_device_count() { return 0; }

NcclId nccl_unique_id() { TESSERA_THROW(ErrorKind::kUsage, nccl_unavailable_reason()); }

std::unique_ptr<Communicator> make_nccl_communicator(const DeviceMesh&, int64_t, int, const NcclId&) {
  TESSERA_THROW(ErrorKind::kUsage, nccl_unavailable_reason());
}

}  // namespace tessera::runtime
