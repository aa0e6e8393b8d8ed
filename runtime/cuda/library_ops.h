// Device ops that call NVIDIA's libraries: cuBLASLt for MatMul and Gemm,
// cuDNN for convolution, pooling and softmax. Each is built once at plan
// compile (descriptors made, algorithm chosen) and launched many times.
// Constructors throw Error(kUnsupported) for a form the library rejects;
// the plan compiler then runs the node on the host instead.
#pragma once

#include <memory>

#include "runtime/cuda/device_op.h"
#include "runtime/cuda/lowering.h"

namespace tessera::runtime::cuda {

// D = plan(A, B), with D also read as C when plan.beta != 0 (the compiler
// fills it first). reads = {a, b}, writes = {d}.
std::unique_ptr<DeviceOp> make_matmul_op(const DeviceContext& dc, const GemmPlan& plan, DType dtype, ValueId a,
                                         ValueId b, ValueId d);

// Convolution without bias (the epilogue adds it). The geometry's pads must
// be symmetric. reads = {x, w}, writes = {y}.
std::unique_ptr<DeviceOp> make_conv_op(const DeviceContext& dc, const WindowGeometry& w, DType dtype, ValueId x,
                                       ValueId wt, ValueId y);

std::unique_ptr<DeviceOp> make_pool_op(const DeviceContext& dc, const WindowGeometry& w, DType dtype, bool max,
                                       bool count_include_pad, ValueId x, ValueId y);

std::unique_ptr<DeviceOp> make_softmax_op(const SoftmaxGeometry& s, DType dtype, ValueId x, ValueId y);

}  // namespace tessera::runtime::cuda
