// Helpers shared by the data-movement family files (movement.cc,
// movement_index.cc, scatter.cc): most of those ops are "output element i is
// input element src[i]", so one copy loop serves both storages of RefTensor;
// the index ops check their indices alike.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/number.h"
#include "graph/op.h"
#include "graph/ops/op_util.h"

namespace tessera::ops {

// out[i] = in[src[i]], or `fill` where src[i] < 0 (padding, masked entries).
// Works for number (`num`) and integer (`ints`) storage alike.
template <class T>
void copy_by_map(const RefTensor<T>& in, RefTensor<T>& out, const std::vector<int64_t>& src, double fill = 0) {
  if (out.is_num()) {
    out.num.resize(src.size());
    T f = num_from_double<T>(fill);
    for (size_t i = 0; i < src.size(); ++i) out.num[i] = src[i] < 0 ? f : in.num[src[i]];
  } else {
    out.ints.resize(src.size());
    int64_t f = static_cast<int64_t>(fill);
    for (size_t i = 0; i < src.size(); ++i) out.ints[i] = src[i] < 0 ? f : in.ints[src[i]];
  }
}

// The index input of Gather, GatherElements and the scatters: an integer dtype.
inline void require_indices(const TensorType& t, const char* op) {
  if (!is_integer(t.dtype) || t.dtype == DType::kBool)
    TESSERA_SHAPE_ERROR(op << " indices must be integer, got " << type_str(t));
}

// An index read from data into an axis of size `dim`, negative counting from
// the end (ONNX's [-dim, dim - 1]); anything else is an error.
inline int64_t checked_index(int64_t idx, int64_t dim, int64_t axis) {
  int64_t i = idx < 0 ? idx + dim : idx;
  if (i < 0 || i >= dim)
    TESSERA_THROW(ErrorKind::kInvalidGraph,
                  "index " << idx << " is out of range for axis " << axis << " of size " << dim);
  return i;
}

// Movement ops are linear in their data input (input 0).
inline Linearity linear_in_data(const Node&) { return {1u, false}; }

}  // namespace tessera::ops
