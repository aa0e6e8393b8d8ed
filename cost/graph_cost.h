// Whole-graph cost on one device: the graph cut into kernels the way the
// runtime's CPU backend fuses (the shared rule of graph/fusion_groups.h,
// with the erf form of Gelu matched as the CPU compiler does), each kernel
// costed, times summed in execution order.
#pragma once

#include <vector>

#include "cost/kernel_model.h"

namespace tessera::cost {

// Kernels in execution order; each is a root node followed by the
// element-wise chain fused into it (FusedGroup::nodes). fuse = false: one
// node per kernel.
std::vector<std::vector<NodeId>> kernel_groups(const Graph& g, bool fuse = true);

struct GraphCost {
  std::vector<std::vector<NodeId>> groups;
  std::vector<KernelCost> kernels;  // parallel to groups
  // CPU: copies of blocked-layout values into row-major form for kernels
  // that only read row-major data (included in time_s).
  std::vector<KernelCost> reorders;
  double time_s = 0;
  int64_t flops = 0;
  std::vector<double> level_bytes;  // summed over kernels
};

GraphCost graph_cost(const Graph& g, const DeviceProfile& device, const CostOptions& options,
                     const std::vector<std::vector<NodeId>>& groups);
inline GraphCost graph_cost(const Graph& g, const DeviceProfile& device, const CostOptions& options = {},
                            bool fuse = true) {
  return graph_cost(g, device, options, kernel_groups(g, fuse));
}

// CPU: the reorder of value v between row-major and blocked form (either
// way: the same copy of its bytes).
KernelCost reorder_cost(const Graph& g, ValueId v, const DeviceProfile& device, const CostOptions& options = {});
// CPU: which values the runtime keeps in a blocked layout (per ValueId; all
// false for other devices).
std::vector<char> blocked_values(const Graph& g, const DeviceProfile& device);

}  // namespace tessera::cost
