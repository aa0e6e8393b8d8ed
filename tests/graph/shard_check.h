// Test support for sharded programs: the global tensor that the ranks' local
// tensors stand for under a sharding (shards placed, partials summed,
// replicas compared), the inverse of shard_of (graph/strategy.h).
#pragma once

#include <vector>

#include "graph/sharding.h"
#include "graph/tensor.h"

namespace tessera::testing {

struct Assembled {
  Tensor value;
  bool replicas_agree = true;  // and every block has the local shape the sharding gives
};

Assembled assemble(const std::vector<Tensor>& locals, const Sharding& s, const DeviceMesh& mesh,
                   const TensorType& global);

// Largest |a - b| over the elements, relative to max(1, max |b|); NaNs in
// the same places count as equal. Types must match.
double relative_error(const Tensor& a, const Tensor& b);

}  // namespace tessera::testing
