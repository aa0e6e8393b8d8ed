// SPMD partitioning: a sharded global graph (propagate.h) becomes one local
// graph per rank. Each rank's graph has local shapes, its block of every
// constant (a rank holds only its slice of the weights), the nodes' local
// ops (graph/strategy.h) and, where a reader wants another placement than a
// value has, the reshard between them (reshard.h) as ordinary IR ops: the
// collectives over the mesh axis they run on, local slices.
//
// Every rank's program takes the global inputs whole (a sharded input is
// sliced by the program itself) and ends with its outputs gathered whole,
// so a plan is fed and read exactly as the single-device graph. The ranks'
// programs have the same nodes in the same order; only constant data and
// slice offsets differ, so they run in lockstep (interpret_ranks).
#pragma once

#include <vector>

#include "mutator/sharding/propagate.h"

namespace tessera::mutator {

struct RankPrograms {
  DeviceMesh mesh;
  std::vector<Graph> ranks;  // per rank
};

RankPrograms partition(const Graph& g, const ShardedGraph& sharded);

// One rank's program of partition(g, sharded).
Graph partition_rank(const Graph& g, const ShardedGraph& sharded, int64_t rank);

}  // namespace tessera::mutator
