// The fallback: a node run by the reference interpreter's float kernel, over
// the plan's buffers (converted to and from the interpreter's representation
// on every run). Slow, always correct; --profile marks it [FALLBACK].
#pragma once

#include <memory>

#include "graph/graph.h"
#include "runtime/kernel.h"

namespace tessera::runtime {

// Throws Error(kUnsupported) when the op has no reference kernel.
std::unique_ptr<Kernel> make_reference_kernel(const Graph& g, NodeId node);

}  // namespace tessera::runtime
