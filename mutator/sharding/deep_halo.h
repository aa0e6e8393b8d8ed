// Deeper halos in the sharding search's plans (issue 43). The spatial
// strategies (spatial_strategy.h) exchange a halo before every window op.
// Where consecutive window layers (Conv, MaxPool, AveragePool, with
// element-wise ops between them) all keep the same rows in bands, one
// deeper HaloExchange every k window layers may serve them: the layers in
// between compute the overlap their successors read (each neighbour
// recomputes it), trading exchanges (latency) for recomputed rows.
//
// After propagation, each such chain's k is chosen by cost with
// cheapest_spatial_plan (spatial_partition.h, the one-chain tool's
// pricing): every k from 1 to the chain's window layers planned and priced
// on the search's rank device and cost options, the ranks' critical path;
// the smallest k on ties. A chain whose k is above 1 has its layers in
// every rank's program replaced by the band program of that plan (the
// partitioner's own programs are kept where k = 1). Meshes of one axis.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cost/device_profile.h"
#include "graph/graph.h"
#include "mutator/sharding/propagate.h"
#include "mutator/sharding/spatial_partition.h"

namespace tessera::mutator {

// A chain of the global graph: a window op first and last, every node the
// only reader of its predecessor's output, every value S(dim) on the one
// axis, every other input a constant.
struct SpatialChain {
  std::vector<NodeId> nodes;
  int64_t dim = 0;
};
// The chains of two or more window layers a sharding keeps in bands, in
// topological order (empty on a mesh of more than one axis).
std::vector<SpatialChain> spatial_chains(const Graph& g, const ShardedGraph& s);

struct DeepHalo {
  SpatialChain chain;
  int64_t every = 1;       // window layers per HaloExchange
  double time_s = 0;       // the chain's predicted time at `every` (its ranks' critical path)
  double every_layer_s = 0;  // at k = 1
  std::vector<std::pair<int64_t, double>> tried;
  std::string str(const Graph& g) const;  // "deeper halo: conv1..conv4 exchange every 2 of 4 window layers (...)"
};

// Each chain's k by cost; the chains where k > 1 wins.
std::vector<DeepHalo> choose_deep_halos(const Graph& g, const ShardedGraph& s, const cost::DeviceProfile& rank_device,
                                        const SpatialPricing& how);

// Rank `rank`'s program (partition_rank(g, s, rank)) with each deep chain's
// nodes replaced by the band program of its plan: its HaloExchange nodes
// named "<first node>/halo_<i>". Throws Error(kInternal) where the program
// does not hold the chain as the partitioner emits it.
void apply_deep_halos(const Graph& g, const std::vector<DeepHalo>& deep, const DeviceMesh& mesh, int64_t rank,
                      Graph& program);

}  // namespace tessera::mutator
