// The CUDA backend's entry points for the generic plan (plan.cc). Declared
// in every build; a build without the CUDA toolkit defines them in
// cuda_unavailable.cc, where compiling for kCuda throws Error(kUsage).
#pragma once

#include <string>

#include "runtime/plan_spec.h"

namespace tessera::runtime {

// Fills `spec` with one kernel that runs the whole graph on the GPU: inputs
// copied to the device, every node on the device (cuBLASLt, cuDNN, our
// kernels; the reference kernel on the host for the rest), outputs copied
// back. Throws Error(kUsage) when the build or the machine has no GPU.
void compile_cuda(const Graph& g, const RunOptions& options, PlanSpec& spec);

// Empty when this build has the CUDA backend and a device is present;
// otherwise why not (for skipping tests and for error messages).
std::string cuda_unavailable_reason();

}  // namespace tessera::runtime
