// The communication model: alpha-beta per interconnect tier, with the bus
// bandwidth factors of nccl-tests, so that a profile's bandwidth is the bus
// bandwidth nccl-tests would report:
//
//   time = steps * alpha + bytes * factor / bandwidth
//
//   all-reduce      factor 2(n-1)/n, steps 2(n-1)   (ring: reduce-scatter + all-gather)
//   all-gather      factor  (n-1)/n, steps  (n-1)   (bytes: the gathered output)
//   reduce-scatter  factor  (n-1)/n, steps  (n-1)   (bytes: the full input)
//   all-to-all      factor  (n-1)/n, steps  (n-1)
//   send/recv       factor  1,       steps  1       (a halo exchange: the rows received)
//
// A group crosses the innermost tier (NVLink, shared memory) when all its
// members sit in one node, and the next tier out (the network) otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "cost/device_profile.h"
#include "graph/graph.h"
#include "graph/halo_rows.h"
#include "graph/sharding.h"

namespace tessera::cost {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };
const char* collective_name(CollectiveKind kind);

struct CollectiveCost {
  double latency_s = 0;   // steps * alpha
  double transfer_s = 0;  // bytes * factor / bandwidth
  double time_s = 0;
  std::string tier;
};

double bus_factor(CollectiveKind kind, int64_t n);
int64_t latency_steps(CollectiveKind kind, int64_t n);

// `bytes` as nccl-tests counts them (see above); n = 1 costs nothing.
CollectiveCost collective_time(CollectiveKind kind, double bytes, int64_t n, const Interconnect& tier);

// The tier a group of n devices, `stride` ranks apart in row-major rank
// order, crosses: the innermost whose nodes hold every such group whole.
// Throws Error(kUnsupported) if the profile has no interconnect.
const Interconnect& tier_for_group(const DeviceProfile& device, int64_t n, int64_t stride);
const Interconnect& tier_for_axis(const DeviceProfile& device, const DeviceMesh& mesh, const std::string& axis);

// Cost of a collective node (AllReduce, AllGather, ReduceScatter, AllToAll)
// of a per-rank program; `mesh` places its group, nullptr: consecutive ranks.
CollectiveCost collective_node_cost(const Graph& g, const Node& node, const DeviceProfile& device,
                                    const DeviceMesh* mesh);

// A HaloExchange and the window op that reads it, as the CPU runtime lowers
// them with overlap (runtime/cpu/halo_overlap.h): the op runs over the whole
// band while the halo is in flight, then the edge rows (split_halo_rows)
// are computed again from the arrived rows:
//
//   time = max(op, exchange) + op * edge_rows / out_rows
//
// so overlap hides the exchange only up to the op's own time, and costs the
// edge rows twice. (A transport that moves data only inside its own calls,
// MPI over shared memory, moves it in the wait: the model then flatters it.)
struct HaloOverlapCost {
  double exchange_s = 0, op_s = 0, edges_s = 0, time_s = 0;
  int64_t edge_rows = 0, out_rows = 0;
};
HaloOverlapCost halo_overlap_time(double exchange_s, double op_s, const WindowRows& w, const HaloBand& band);

}  // namespace tessera::cost
