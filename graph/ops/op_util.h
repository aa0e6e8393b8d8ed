// Helpers shared by the op family files: broadcasting, axis handling, index
// arithmetic, and the error that shape inference throws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/graph.h"
#include "graph/op.h"

namespace tessera::ops {

// Shape inference errors: the caller adds the node and op context.
#define TESSERA_SHAPE_ERROR(msg) TESSERA_THROW(::tessera::ErrorKind::kInvalidGraph, msg)

// Points an OpDef's three reference kernels at instances of one function
// template `template <class T> void fn(const EvalArgs<T>&)`.
#define TESSERA_SET_KERNELS(def, fn) \
  do {                               \
    (def).eval_f32 = &fn<float>;     \
    (def).eval_f64 = &fn<double>;    \
    (def).eval_zp = &fn<::tessera::Zp>; \
  } while (0)

// Numpy broadcast of two shapes; throws on incompatible dims.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Maps axis in [-rank, rank) to [0, rank); throws otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank);
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank);

// For each output flat index, the flat index into an input of shape `in`
// broadcast to `out` (precomputed once per kernel call).
std::vector<int64_t> broadcast_index_map(const Shape& in, const Shape& out);

// Unravels flat index i of `shape` into `idx` (resized to rank).
void unravel(int64_t i, const Shape& shape, std::vector<int64_t>& idx);
int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides);

// The linearity of an op linear in its first input alone (pools, collectives).
inline Linearity linear_in_input0(const Node&) { return {1u, false}; }

// Output types with the input's dtype.
inline std::vector<TensorType> one(DType dtype, Shape shape) { return {TensorType{dtype, std::move(shape)}}; }

// Allocates the storage of a reference tensor for its (already set) type.
template <class T>
void alloc(RefTensor<T>& t) {
  if (t.is_num()) t.num.assign(static_cast<size_t>(t.numel()), T{});
  else t.ints.assign(static_cast<size_t>(t.numel()), 0);
}

}  // namespace tessera::ops
