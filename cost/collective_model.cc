#include "cost/collective_model.h"

#include "graph/attr_views.h"
#include <algorithm>

#include "graph/error.h"

namespace tessera::cost {

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all-reduce";
    case CollectiveKind::kAllGather: return "all-gather";
    case CollectiveKind::kReduceScatter: return "reduce-scatter";
    case CollectiveKind::kAllToAll: return "all-to-all";
    case CollectiveKind::kSendRecv: return "send-recv";
  }
  return "?";
}

double bus_factor(CollectiveKind kind, int64_t n) {
  TESSERA_CHECK(n >= 1, "collective over " << n << " devices");
  double share = static_cast<double>(n - 1) / static_cast<double>(n);
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2 * share;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll: return share;
    case CollectiveKind::kSendRecv: return n > 1 ? 1.0 : 0.0;
  }
  return 0;
}

int64_t latency_steps(CollectiveKind kind, int64_t n) {
  if (n <= 1) return 0;
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2 * (n - 1);
    case CollectiveKind::kSendRecv: return 1;
    default: return n - 1;
  }
}

CollectiveCost collective_time(CollectiveKind kind, double bytes, int64_t n, const Interconnect& tier) {
  CollectiveCost c;
  c.tier = tier.name;
  if (n <= 1) return c;
  c.latency_s = static_cast<double>(latency_steps(kind, n)) * tier.latency_s;
  c.transfer_s = bytes * bus_factor(kind, n) / tier.bandwidth;
  c.time_s = c.latency_s + c.transfer_s;
  return c;
}

const Interconnect& tier_for_group(const DeviceProfile& device, int64_t n, int64_t stride) {
  if (device.interconnect.empty())
    TESSERA_THROW(ErrorKind::kUnsupported, "device profile '" << device.name << "' lists no interconnect for collectives");
  int64_t span = n * stride;  // ranks covered by the block that holds one group
  for (const Interconnect& tier : device.interconnect) {
    if (tier.devices_per_node == 0) return tier;
    if (span <= tier.devices_per_node && tier.devices_per_node % span == 0) return tier;
  }
  return device.interconnect.back();
}

const Interconnect& tier_for_axis(const DeviceProfile& device, const DeviceMesh& mesh, const std::string& axis) {
  int index = mesh.axis_index(axis);
  int64_t stride = 1;
  for (size_t i = static_cast<size_t>(index) + 1; i < mesh.axes().size(); ++i) stride *= mesh.axes()[i].size;
  return tier_for_group(device, mesh.axes()[static_cast<size_t>(index)].size, stride);
}

CollectiveCost collective_node_cost(const Graph& g, const Node& node, const DeviceProfile& device,
                                    const DeviceMesh* mesh) {
  const CollectiveAttrs attrs = CollectiveAttrs::of(node);
  int64_t n = attrs.group_size;
  const Interconnect& tier =
      mesh ? tier_for_axis(device, *mesh, attrs.mesh_axis) : tier_for_group(device, n, 1);
  if (mesh && mesh->axis_size(attrs.mesh_axis) != n)
    TESSERA_THROW(ErrorKind::kInvalidGraph, "group_size " << n << " does not match mesh axis '"
                                                          << attrs.mesh_axis << "' of " << mesh->str());
  double in = static_cast<double>(g.type(node.inputs[0]).nbytes());
  double out = static_cast<double>(g.type(node.outputs[0]).nbytes());
  switch (node.kind) {
    case OpKind::kAllReduce: return collective_time(CollectiveKind::kAllReduce, in, n, tier);
    case OpKind::kAllGather: return collective_time(CollectiveKind::kAllGather, out, n, tier);
    case OpKind::kReduceScatter: return collective_time(CollectiveKind::kReduceScatter, in, n, tier);
    case OpKind::kAllToAll: return collective_time(CollectiveKind::kAllToAll, in, n, tier);
    case OpKind::kHaloExchange: {
      // Send/recv with both neighbours at once: the rows this rank
      // receives, one latency step.
      int64_t dim = 0;
      HaloBand band = halo_band_of(g, node, &dim);
      double row_bytes = band.rows > 0 ? in / static_cast<double>(band.rows) : 0;
      return collective_time(CollectiveKind::kSendRecv,
                             static_cast<double>(band.before + band.after) * row_bytes, n, tier);
    }
    default: break;
  }
  TESSERA_THROW(ErrorKind::kInternal, op_name(node.kind) << " is not a collective");
}

HaloOverlapCost halo_overlap_time(double exchange_s, double op_s, const WindowRows& w, const HaloBand& band) {
  HaloOverlapCost c;
  HaloSplit split = split_halo_rows(w, band);
  c.exchange_s = exchange_s;
  c.op_s = op_s;
  c.out_rows = split.bottom.hi;
  c.edge_rows = split.top.size() + split.bottom.size();
  c.edges_s = c.out_rows > 0 ? op_s * static_cast<double>(c.edge_rows) / static_cast<double>(c.out_rows) : 0;
  c.time_s = std::max(op_s, exchange_s) + c.edges_s;
  return c;
}

}  // namespace tessera::cost
