// Moving a tensor between two shardings of one device mesh: the steps, one
// per mesh axis whose placement changes, what they cost on a device (the
// collective model), and the local ops a rank runs for them.
//
//   S -> R  AllGather          P -> R  AllReduce       R -> S  local Slice
//   P -> S  ReduceScatter      S(i) -> S(j)  AllToAll  R -> P  keep on coordinate 0, zero elsewhere
//   S -> P  AllGather, then keep on coordinate 0
//
// Steps that take a shard or a partial away run first, minor mesh axes
// first (a dim split over two axes nests the minor axis inside the major
// one, so gathering the minor axis first leaves the major axis's blocks
// whole); steps that split run after, major axes first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "graph/graph.h"
#include "graph/sharding.h"

namespace tessera::mutator {

struct ReshardStep {
  enum class Kind : uint8_t { kAllGather, kAllReduce, kReduceScatter, kAllToAll, kSlice, kKeepOnFirst };
  Kind kind;
  int axis = 0;          // the mesh axis
  int64_t dim = -1;      // AllGather: the dim gathered; ReduceScatter, Slice: the dim split; AllToAll: the dim gathered
  int64_t to_dim = -1;   // AllToAll: the dim split
};
const char* reshard_step_name(ReshardStep::Kind k);

// The steps from `from` to `to` (empty when they are equal).
std::vector<ReshardStep> reshard_steps(const Sharding& from, const Sharding& to, const DeviceMesh& mesh);

// Predicted seconds of the steps on `device` for a tensor of global type
// `global` starting as `from`: collectives from the collective model on the
// tier their mesh axis crosses, local slices and masks as memory passes.
double reshard_seconds(const Sharding& from, const Sharding& to, const TensorType& global, const DeviceMesh& mesh,
                       const cost::DeviceProfile& device);

// Appends to `local` (rank `rank`'s program) the ops that move `v` (laid
// out as `from`) to `to`; returns the moved value (v itself when equal).
ValueId emit_reshard(Graph& local, ValueId v, const Sharding& from, const Sharding& to, const TensorType& global,
                     const DeviceMesh& mesh, int64_t rank, const std::string& name);

}  // namespace tessera::mutator
