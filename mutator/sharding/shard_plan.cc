#include "mutator/sharding/shard_plan.h"

#include "cost/graph_cost.h"
#include "mutator/sharding/partition.h"

namespace tessera::mutator {

PricedPlan price_partitioned(const Graph& g, const DeviceMesh& mesh, const cost::DeviceProfile& device,
                             const cost::DeviceProfile& rank_device, const std::vector<ShardConstraint>& pins,
                             DegreePoint& p) {
  p.priced_as_plan = true;
  PricedPlan out;
  const cost::CostOptions priced_as_run = cost::runtime_cost_options(rank_device);
  if (mesh.num_devices() == 1) {
    p.predicted_s = p.compute_s = cost::graph_cost(g, rank_device, priced_as_run).time_s;
    p.comm_s = 0;
    return out;
  }
  out.sharded = propagate(g, mesh, pins, device);
  SpatialPricing how;
  how.halo_overlap = priced_as_run.halo_overlap;
  how.plan = {};  // as plan_cost below
  out.deep = choose_deep_halos(g, out.sharded, rank_device, how);
  Graph rank0 = partition_rank(g, out.sharded, 0);
  apply_deep_halos(g, out.deep, mesh, 0, rank0);
  out.cost = cost::plan_cost(cost::spmd_rank_programs(rank0, mesh, rank_device, priced_as_run));
  p.predicted_s = out.cost.time_s;
  p.compute_s = out.cost.compute_s[0];
  p.comm_s = out.cost.comm_s[0];
  for (const DeepHalo& d : out.deep) p.moves.push_back(d.str(g));
  return out;
}

std::vector<Graph> written_ranks(const Graph& g, const PricedPlan& plan) {
  std::vector<Graph> ranks;
  for (int64_t k = 0; k < plan.sharded.mesh.num_devices(); ++k) {
    ranks.push_back(partition_rank(g, plan.sharded, k));
    apply_deep_halos(g, plan.deep, plan.sharded.mesh, k, ranks.back());
  }
  return ranks;
}

}  // namespace tessera::mutator
