// Moving a tensor between two shardings of one device mesh: the steps, one
// per mesh axis whose placement changes, what they cost on a device (the
// collective model), and the local ops a rank runs for them.
//
//   S -> R  AllGather          P -> R  AllReduce       R -> S  local Slice
//   P -> S  ReduceScatter      S(i) -> S(j)  AllToAll  R -> P  keep on coordinate 0, zero elsewhere
//   S -> P  AllGather, then keep on coordinate 0
//
// A shard in groups (Placement::groups, g blocks over n ranks) is cut from
// R or refined into smaller blocks (S(d/g) -> S(d), S(d/2) -> S(d/4)) by a
// local Slice; it is gathered by an AllGather over the whole axis, which
// brings each block n/g times, followed by a Slice that keeps one copy.
//
// A dim split into uneven blocks (Blocks::kUneven, one mesh axis) is
// gathered by padding each block to the largest, an AllGather, and slices
// that drop the padding; it is cut by a Slice at block_start. AllToAll and
// ReduceScatter assume even blocks: to or from an uneven dim they become an
// AllGather or an AllReduce and a Slice.
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
  // Slice: the rank's block of `from_blocks` is cut into its block of
  // `to_blocks` (1 and n: R -> S); AllGather: the blocks of a shard in
  // groups (0: a shard over the whole axis).
  int64_t from_blocks = 1, to_blocks = 0;
  int64_t groups = 0;
};
const char* reshard_step_name(ReshardStep::Kind k);

// The steps from `from` to `to` (empty when they are equal) for a tensor of
// global shape `global` (empty: every block taken as even).
std::vector<ReshardStep> reshard_steps(const Sharding& from, const Sharding& to, const DeviceMesh& mesh,
                                       const Shape& global = {});

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
