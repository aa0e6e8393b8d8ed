// Resize's interpolation as per-axis taps, for runtimes that compute it
// natively: for each output coordinate of an axis, `taps` (input index,
// weight) pairs, indices clamped to the input, exactly as the reference
// kernel (graph/ops/resize.cc) reads them. Axes are applied one at a time
// in axis order; an identity axis is skipped.
#pragma once

#include <optional>
#include <vector>

#include "graph/graph.h"

namespace tessera::ops {

struct ResizeAxis {
  int64_t in = 0, out = 0, taps = 1;
  std::vector<int64_t> index;  // out * taps
  std::vector<double> weight;  // out * taps
  bool identity = true;
};

// The taps of each axis of Resize node `n` reading a tensor of shape `in`;
// none for tf_crop_and_resize (its outputs outside the crop are a fill value,
// not taps).
std::optional<std::vector<ResizeAxis>> resize_axes(const Node& n, const Shape& in);

}  // namespace tessera::ops
