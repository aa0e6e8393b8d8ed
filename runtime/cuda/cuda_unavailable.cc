// The CUDA entry points of a build without the CUDA toolkit.
#include "graph/error.h"
#include "runtime/cuda/cuda_backend.h"

namespace tessera::runtime {

std::string cuda_unavailable_reason() { return "this build has no CUDA backend"; }

void compile_cuda(const Graph&, const RunOptions&, PlanSpec&) {
  TESSERA_THROW(ErrorKind::kUsage, "this build has no CUDA backend (the CUDA toolkit was not found at configure time)");
}

}  // namespace tessera::runtime
