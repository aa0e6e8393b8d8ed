// A point of the sharding search's degree curve (shard_search.h) as the
// plan will be written: propagated from its pins, partitioned, each chain
// of window layers in bands given its deeper halo where one is cheaper
// (deep_halo.h), and priced on the ranks' critical path, so that degrees
// and rewrites are compared on the number plan.json reports.
#pragma once

#include <vector>

#include "cost/device_profile.h"
#include "cost/plan_cost.h"
#include "mutator/sharding/deep_halo.h"
#include "mutator/sharding/propagate.h"
#include "mutator/sharding/shard_search.h"

namespace tessera::mutator {

struct PricedPlan {
  ShardedGraph sharded;
  std::vector<DeepHalo> deep;  // chains exchanging every k > 1 window layers
  cost::PlanCost cost;
};

// Rank 0's program partitioned (SPMD ranks run alike) and priced; it is
// not kept: its column-split weights are copies (a third of a Llama's
// weights on tp=2), and only the winner's ranks are built again
// (written_ranks). Propagation runs on `device`, as the plan is
// propagated; the ranks' programs are priced on `rank_device`, each rank's
// share of its host, with cost::runtime_cost_options (the runtime's halo
// overlap). Sets p's predicted, compute and comm times, and lists the
// deeper halos among its moves.
PricedPlan price_partitioned(const Graph& g, const DeviceMesh& mesh, const cost::DeviceProfile& device,
                             const cost::DeviceProfile& rank_device, const std::vector<ShardConstraint>& pins,
                             DegreePoint& p);

// Every rank's program of a priced plan of two or more devices.
std::vector<Graph> written_ranks(const Graph& g, const PricedPlan& plan);

}  // namespace tessera::mutator
