// The ranks' programs of a spatial split (spatial.h): each rank takes its
// band of the chain's input, receives its halo from its neighbours by a
// HaloExchange (the `tessera` domain's neighbour send/receive), and runs
// the chain's layers on the rows it holds, each window op with the padding
// of its band (zero only at the image's own edges) and sliced to the rows
// its band of the output reads. With an exchange every k layers, the layers
// between two exchanges compute the overlap their successors read (the
// deeper halo), so both neighbours recompute it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "cost/plan_cost.h"
#include "graph/graph.h"
#include "graph/sharding.h"
#include "mutator/sharding/spatial.h"

namespace tessera::mutator {

struct SpatialPlan {
  DeviceMesh mesh;               // one axis
  int64_t in_dim = 0, out_dim = 0;
  std::vector<Band> in_bands, out_bands;  // per rank, of the chain's input and output
  std::vector<SpatialHalo> exchanges;     // one per HaloExchange, in order
  std::vector<Graph> ranks;               // per rank: its input band in, its output band out
  int64_t halo_bytes() const;             // sent by all ranks together, all exchanges
};

// The chain as in spatial_halo, its output dim `dim` split over the one
// axis of `mesh`, exchanging every k layers (k = 0: once, before the
// chain). nullopt when a layer is not a window op (Conv, MaxPool,
// AveragePool) or element-wise along the dim, or a halo is deeper than a
// neighbour's band.
std::optional<SpatialPlan> spatial_plan(const Graph& g, const std::vector<NodeId>& chain, int64_t dim,
                                        const DeviceMesh& mesh, int64_t k = 0);
// The same with an exchange before the layers at `starts` (spatial.h:
// every_k_layers, every_k_window_layers).
std::optional<SpatialPlan> spatial_plan_at(const Graph& g, const std::vector<NodeId>& chain, int64_t dim,
                                           const DeviceMesh& mesh, const std::vector<size_t>& starts);

// Exchange once every k layers, k chosen by cost: every k from 1 to the
// chain's length is planned and priced on `device` (the ranks' kernels at
// their band shapes plus each HaloExchange's send/recv on the collective
// model, the latest rank's finish), the cheapest kept (the smallest k on
// ties). A deeper halo saves exchanges (latency) and costs recomputed rows
// (compute) and more rows per message. `one_device_s`: the chain on one
// device, for the degree curve. The one-chain tool (bench/sharding/
// spatial_plan) and the sharding search (deep_halo.h) both choose here.
struct SpatialPricing {
  // k counts every layer (the one-chain tool's --every) or window layers
  // only (the search: an exchange always goes before a window op).
  enum class Unit { kLayers, kWindowLayers } unit = Unit::kLayers;
  bool halo_overlap = false;    // cost::CostOptions::halo_overlap
  cost::PlanCostOptions plan{true};  // the one-chain tool: collectives on their own stream
};
struct SpatialChoice {
  SpatialPlan plan;
  int64_t every = 0;
  double time_s = 0;
  std::vector<std::pair<int64_t, double>> tried;  // (k, predicted seconds)
};
std::optional<SpatialChoice> cheapest_spatial_plan(const Graph& g, const std::vector<NodeId>& chain, int64_t dim,
                                                   const DeviceMesh& mesh, const cost::DeviceProfile& device,
                                                   const SpatialPricing& how = {});
double chain_seconds(const Graph& g, const std::vector<NodeId>& chain, const cost::DeviceProfile& device);

// The ranks' programs with the chain's whole input and output, as `tessera
// run PLAN_DIR` feeds a plan whose boundary is not sharded: each rank cuts
// its band of the input, and its band of the output, placed in zeros of the
// whole output's shape, is summed over the ranks (an AllReduce: the bands
// are disjoint, so every rank ends with the whole output, bit for bit).
std::vector<Graph> whole_io_programs(const SpatialPlan& plan);

// The ranks' programs run in lockstep on the reference interpreter against
// the chain on one device, at random inputs from `seed`: the largest
// absolute difference of the assembled output (bands concatenated).
double spatial_plan_error(const Graph& g, const std::vector<NodeId>& chain, const SpatialPlan& plan, uint64_t seed);

}  // namespace tessera::mutator
