// Launchers of the CUDA backend's own kernels (kernels.cu), callable from
// host C++. Each enqueues on `stream` and returns without waiting; launch
// errors surface through cuda_check (cuda_util.h) at the call site.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/cuda/device_desc.h"

namespace tessera::runtime::cuda {

struct EwInputs {
  const void* p[kEwMaxInputs] = {};
};

void launch_ew(const EwProgram& p, const EwInputs& in, void* out, cudaStream_t stream);
void launch_copy(const CopyDesc& d, const void* src, void* dst, cudaStream_t stream);
// Sets n elements of type e to value.
void launch_fill(void* dst, int64_t n, Elem e, float value, cudaStream_t stream);
void launch_reduce(const ReduceDesc& d, const void* in, void* out, cudaStream_t stream);
void launch_gather(const GatherDesc& d, const void* data, const void* indices, void* out, cudaStream_t stream);
// mean and inv_std may be null.
void launch_layer_norm(const LayerNormDesc& d, const void* x, const void* scale, const void* bias, void* y,
                       void* mean, void* inv_std, cudaStream_t stream);

}  // namespace tessera::runtime::cuda
