// User annotations of shardings, as `tessera optimize --shard` takes them:
//
//   GLOB=PLACEMENTS          every value whose name matches GLOB
//   GLOB:inK=PLACEMENTS      input K of every node whose name matches GLOB
//   GLOB:outK=PLACEMENTS     output K of every node whose name matches GLOB
//
// GLOB is an fnmatch(3) pattern where `*` also matches `/`: exporters name
// weights arbitrarily (onnx::MatMul_1144) but keep module paths in node
// names (/blocks.0/fc1/MatMul), so `*/fc1/MatMul:in1=[S(1)]` names fc1's
// weight in every block. PLACEMENTS is one placement per mesh axis, as
// Sharding::parse reads it ("[S(1)]", "[S(0),R]", "[P]").
//
// An annotated graph input or output crosses the plan's boundary as
// annotated (ShardConstraint::boundary): the rank programs take or give
// back their block of it, and a run scatters or gathers it at the edges.
//
// A file (`--shard-file`) is a JSON object of such pairs:
//   { "*/fc1/MatMul:in1": "[S(1)]", "*/fc2/MatMul:in1": "[S(0)]" }
#pragma once

#include <string>
#include <vector>

#include "mutator/sharding/propagate.h"

namespace tessera::mutator {

// Every tensor the specs name, with its sharding. Throws Error(kUsage) with
// one line naming the spec for a malformed spec or a pattern that matches
// nothing, and Error(kInvalidGraph) naming the tensor for a sharding that
// does not fit it (a dim the axis size does not divide, a missing dim, the
// wrong number of placements) or two specs giving one tensor different
// shardings.
std::vector<ShardConstraint> resolve_annotations(const Graph& g, const DeviceMesh& mesh,
                                                 const std::vector<std::string>& specs);

// The specs of a --shard-file, in the file's order. Throws Error(kIo) if it
// cannot be read, Error(kParse) naming the file if it is not such an object.
std::vector<std::string> read_shard_file(const std::string& path);

}  // namespace tessera::mutator
