// The one-kernel graphs the calibrations measure (measure.cc
// defines them; host_calibration.cc and the GPU calibration use them).
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace tessera::calibrate::detail {

Graph binary_graph(OpKind kind, int64_t n);  // inputs a, b of n f32; node "op"
Graph unary_graph(OpKind kind, int64_t n);
// [m, k] input times a constant [k, n] (prepacked weights), in `dtype`.
Graph weight_matmul_graph(int64_t m, int64_t k, int64_t n, DType dtype = DType::kF32);
Attrs conv_attrs(int64_t k);  // k x k, stride 1, same padding
// A k x k convolution as in a ResNet stage (node "op"). consumed: a 1x1
// convolution reads its result, so that "op" writes the blocked layout it
// does inside a network rather than a row-major graph output.
Graph conv_graph(int64_t channels, int64_t size, int64_t k = 3, bool consumed = true);

}  // namespace tessera::calibrate::detail
