#include "cost/graph_cost.h"

#include "graph/fusion_groups.h"

namespace tessera::cost {

namespace {

// Groups the CPU backend forms but oneDNN does not run fused, so that the
// runtime runs their links one by one (runtime/cpu/cpu_compiler.cc,
// add_group): a binary root whose first operand broadcasts (oneDNN's binary
// primitive needs src0 of the destination's shape), and a unary root with a
// binary link (only oneDNN's reference eltwise takes binary post-ops, and
// the runtime refuses fused reference kernels).
bool runtime_splits(const Graph& g, const FusedGroup& grp) {
  if (grp.post.empty()) return false;
  const Node& root = g.node(grp.root);
  if (is_binary_post_op(root.kind)) return g.type(root.inputs[0]).shape != g.type(root.outputs[0]).shape;
  if (is_eltwise_post_op(root))
    for (const PostOp& p : grp.post)
      if (p.other != kNoValue) return true;
  return false;
}

}  // namespace

std::vector<std::vector<NodeId>> kernel_groups(const Graph& g, bool fuse) {
  std::vector<std::vector<NodeId>> out;
  for (const FusedGroup& grp : form_groups(g, g.topo_order(), fuse, /*match_gelu=*/true)) {
    if (!runtime_splits(g, grp)) {
      out.push_back(grp.nodes());
      continue;
    }
    for (NodeId id : grp.nodes()) out.push_back({id});
  }
  return out;
}

GraphCost graph_cost(const Graph& g, const DeviceProfile& device, const CostOptions& options,
                     const std::vector<std::vector<NodeId>>& groups) {
  GraphCost c;
  c.groups = groups;
  c.level_bytes.assign(device.memory.size(), 0.0);
  for (const auto& group : groups) {
    KernelCost k = kernel_cost(g, group, device, options);
    c.time_s += k.time_s;
    c.flops += k.total_flops();
    for (size_t i = 0; i < k.level_bytes.size(); ++i) c.level_bytes[i] += k.level_bytes[i];
    c.kernels.push_back(std::move(k));
  }
  return c;
}

}  // namespace tessera::cost
