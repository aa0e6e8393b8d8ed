// One step of a device program: a kernel launch (or a library call) over
// values that live in device memory. The program (cuda_compiler.cc) places
// values in one device arena with the liveness planner and captures the
// launches in a CUDA graph, so launch() must only enqueue work on the
// context's stream with the pointers it is given (no host synchronization),
// except for ops that run on the host (on_host()) or are not capturable(),
// which disable capture.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::runtime::cuda {

struct DeviceContext {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;
  void* lt_workspace = nullptr;  // shared by all cuBLASLt calls (one stream)
  size_t lt_workspace_bytes = 0;
  bool allow_tf32 = false;
};

class DeviceOp {
 public:
  virtual ~DeviceOp() = default;
  // ptr: per value, its device address in this program; workspace: this
  // op's workspace_bytes() of device scratch.
  virtual void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t* workspace) = 0;
  virtual std::string impl() const = 0;
  virtual int64_t workspace_bytes() const { return 0; }
  virtual bool on_host() const { return false; }
  // Whether the program may record it in its CUDA graph.
  virtual bool capturable() const { return !on_host(); }

  std::vector<ValueId> reads, writes;  // kNoValue entries are skipped
  // Position in `reads` whose buffer writes[0] may take over when that value
  // dies here (element-wise ops).
  int in_place_read = -1;
  std::string node, op;
};

}  // namespace tessera::runtime::cuda
