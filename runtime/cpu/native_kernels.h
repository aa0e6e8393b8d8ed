// Kernels of our own for what oneDNN has no primitive for: data movement
// (transpose, slice, concat, split, expand, gather, where, copies) and a few
// element-wise functions. Row-major buffers only; OpenMP across the outer
// dimensions, contiguous inner runs as memcpy or vectorizable loops. The
// strided copies take their offsets and strides from the ops' dim maps
// (graph/dim_map.h's strided_reads), not from their attributes.
#pragma once

#include <memory>

#include "graph/graph.h"
#include "runtime/kernel.h"

namespace tessera::runtime::cpu {

// Gives a kernel made for node `n` its wiring and names; returns it.
std::unique_ptr<Kernel> finish_node_kernel(std::unique_ptr<Kernel> k, const Node& n);

// nullptr when the node's kind or dtypes are not handled here.
std::unique_ptr<Kernel> make_native_kernel(const Graph& g, NodeId node);

// A node over f16 / bf16 tensors run by its f32 native kernel on widened
// copies (native_widened.cc); nullptr when the node has no 16-bit float
// tensor or no native f32 kernel.
std::unique_ptr<Kernel> make_widened_kernel(const Graph& g, NodeId node);

// The native kernel of a node of f16 / bf16 tensors built as if they were
// f32 (the node's inputs and outputs, which the caller points at f32 copies);
// nullptr when the node reads constants or has no native f32 kernel.
std::unique_ptr<Kernel> make_native_kernel_as_f32(const Graph& g, NodeId node);

// Cast, comparisons, And / Or / Xor / Not (native_logic.cc); nullptr when the
// dtypes are not ones it handles.
std::unique_ptr<Kernel> make_logic_kernel(const Graph& g, NodeId node);

// Element i of an index tensor of dtype i64 or i32 (Gather, the scatters).
inline int64_t read_index(const uint8_t* p, DType dtype, int64_t i) {
  return dtype == DType::kI64 ? reinterpret_cast<const int64_t*>(p)[i] : reinterpret_cast<const int32_t*>(p)[i];
}

// ScatterElements and ScatterND without a reduction (native_scatter.cc), in
// place where the plan lets the output take over data's buffer; nullptr for
// a reduction or indices other than i32 / i64.
std::unique_ptr<Kernel> make_scatter_kernel(const Graph& g, NodeId node);

// A plain copy of `from` into `to` (same bytes), e.g. a reshape whose result
// is a graph output.
std::unique_ptr<Kernel> make_copy_kernel(ValueId from, ValueId to, int64_t bytes);

}  // namespace tessera::runtime::cpu
