// Status checks for the CUDA runtime, cuBLASLt and cuDNN: a failing call
// throws tessera::Error naming the call (kResource for out of memory,
// kInternal otherwise), so a plan never continues past a device error.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace tessera::runtime::cuda {

[[noreturn]] void throw_cuda(cudaError_t e, const char* call);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call);
[[noreturn]] void throw_cudnn(cudnnStatus_t s, const char* call);

}  // namespace tessera::runtime::cuda

#define TESSERA_CUDA(call)                                                          \
  do {                                                                              \
    cudaError_t tessera_e_ = (call);                                                \
    if (tessera_e_ != cudaSuccess) ::tessera::runtime::cuda::throw_cuda(tessera_e_, #call); \
  } while (0)
#define TESSERA_CUBLAS(call)                                                        \
  do {                                                                              \
    cublasStatus_t tessera_s_ = (call);                                             \
    if (tessera_s_ != CUBLAS_STATUS_SUCCESS) ::tessera::runtime::cuda::throw_cublas(tessera_s_, #call); \
  } while (0)
#define TESSERA_CUDNN(call)                                                         \
  do {                                                                              \
    cudnnStatus_t tessera_s_ = (call);                                              \
    if (tessera_s_ != CUDNN_STATUS_SUCCESS) ::tessera::runtime::cuda::throw_cudnn(tessera_s_, #call); \
  } while (0)
