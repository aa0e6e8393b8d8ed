// Device ops that launch our own kernels (kernels.cu), and the host op that
// runs a node the device cannot with the reference kernel (its operands
// copied down and its results copied back up, synchronously).
#pragma once

#include <memory>

#include "runtime/cuda/device_op.h"
#include "runtime/cuda/lowering.h"

namespace tessera::runtime::cuda {

std::unique_ptr<DeviceOp> make_ew_op(const EwLowering& l, ValueId out);

// Optional fill of writes[0] (n elements of `fill_elem`) before the parts.
struct CopyFill {
  bool enabled = false;
  int64_t n = 0;
  Elem elem = Elem::kF32;
  float value = 0;
};
std::unique_ptr<DeviceOp> make_copy_op(std::vector<CopyPart> parts, CopyFill fill, std::vector<ValueId> reads,
                                       std::vector<ValueId> writes);

std::unique_ptr<DeviceOp> make_reduce_op(const ReduceDesc& d, ValueId in, ValueId out);
std::unique_ptr<DeviceOp> make_gather_op(const GatherDesc& d, ValueId data, ValueId indices, ValueId out);
// outputs: Y, and Mean / InvStdDev or kNoValue.
std::unique_ptr<DeviceOp> make_layer_norm_op(const LayerNormDesc& d, ValueId x, ValueId scale, ValueId bias,
                                             const std::vector<ValueId>& outputs);
// Throws Error(kUnsupported) when the op has no reference kernel either.
std::unique_ptr<DeviceOp> make_host_op(const Graph& g, NodeId node);

}  // namespace tessera::runtime::cuda
