// The per-kernel cost model: for one kernel (a node, or a root node with the
// element-wise post-ops fused into it), the FLOPs it performs by data type,
// the bytes it moves at each level of the device's memory hierarchy, and the
// time that follows:
//
//   time = max(compute, bytes(level) / bandwidth(level) for every level, comm) + launch
//
// The term that attains the maximum is the kernel's bound. On CPUs a GEMM's
// compute term includes reading its weights from main memory when they come
// from there (the micro-kernel does not overlap it), and a small kernel runs
// on one core (graph/fusion_groups.h, runs_on_one_thread); launch includes
// the profile's parallel and GEMM per-call overheads. Bytes come from
// how the kernel computes: GEMM and convolution from their tiling (see
// gemm_model.h), element-wise and data-movement kernels from their inputs
// plus outputs, reductions from the passes they make over their input.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "graph/fusion_groups.h"
#include "graph/graph.h"
#include "graph/sharding.h"

namespace tessera::cost {

struct CostOptions {
  // Data a kernel reads that the previous kernels just wrote stays in the
  // smallest cache that holds the kernel's working set, so only weights that
  // do not all fit in the last cache level come from main memory. false:
  // every kernel starts cold (all bytes from main memory).
  bool warm_cache = true;
  // With warm_cache: per value (indexed by ValueId), the bytes other kernels
  // touched since it was last touched (its reuse distance; graph_cost fills
  // it before each kernel). A value a kernel reads sits in the smallest
  // level that holds it and those bytes, and comes from there even when the
  // kernel's own working set would fit further in (a program's input, read
  // again after a whole run's traffic, comes from main memory). nullptr or
  // a negative entry: every value sits where the kernel's working set does.
  const std::vector<double>* reuse_distance = nullptr;
  // Collectives: which interconnect tier a mesh axis crosses. nullptr: a
  // group of group_size consecutive devices.
  const DeviceMesh* mesh = nullptr;
  // The graph is part of a larger program (a subprogram the search costs):
  // the weights of the rest of it, which compete for the last cache level;
  // and its outputs are read by later kernels, so a convolution writing one
  // keeps its blocked layout instead of writing a row-major graph output.
  int64_t other_parameter_bytes = 0;
  bool part_of_larger_program = false;
  // CPU: names of the graph's inputs that the larger program hands over in
  // a blocked layout (see blocked_values in graph_cost.h).
  std::vector<std::string> blocked_inputs;
  // Rank programs (plan_cost.h): a HaloExchange whose only reader is a
  // window op along its dim is priced as the runtime's overlapped lowering
  // runs them (collective_model.h, halo_overlap_time): the op's step takes
  // max(op, exchange) plus its edge rows again, the exchange's step only
  // meets its neighbours. false: the exchange, then the op.
  bool halo_overlap = false;
};

struct KernelCost {
  std::string label;                // "Conv+Add+Relu"
  std::map<DType, int64_t> flops;   // multiply-add = 2
  std::vector<double> level_bytes;  // per device memory level, fastest first
  double compute_s = 0;
  std::vector<double> level_s;      // bytes / effective bandwidth
  double comm_s = 0;                // collectives only
  double launch_s = 0;
  double time_s = 0;
  // CPU: the kernel spreads over the pool's threads (not under the
  // one-thread line of graph/fusion_groups.h, on a device of several cores).
  bool parallel = false;
  // "compute", a memory level's name, an interconnect tier's name,
  // "launch", or "none" for a kernel that does no work (a reshape alias).
  std::string bound;

  int64_t total_flops() const;
};

// Cost of one kernel made of `nodes`: nodes[0] is the root, the others the
// element-wise chain fused after it in order (each reads the previous
// one's output). Throws Error(kInvalidGraph) if the nodes are not such a chain.
KernelCost kernel_cost(const Graph& g, const std::vector<NodeId>& nodes, const DeviceProfile& device,
                       const CostOptions& options = {});
inline KernelCost node_cost(const Graph& g, NodeId node, const DeviceProfile& device,
                            const CostOptions& options = {}) {
  return kernel_cost(g, {node}, device, options);
}

// The line under which a CPU kernel runs on one core (graph/fusion_groups.h),
// priced from the profile: splitting a kernel over u cores saves (1 - 1/u)
// of its one-core time t and costs parallel_overhead_s (waking and joining
// the pool), so it pays where t > parallel_overhead_s * u / (u - 1); a
// product or convolution takes t = MACs / (one core's matrix rate). On the
// 2-vCPU Zen 4 host (4.7 us fork-join, 113 GFLOP/s a core) that is about
// 0.5 M MACs: MNASNet-0.5 at 2 threads went from 3.75 to 2.3-2.5 ms (ORT
// 2.16-2.56) with 49 of its 52 convolutions no longer held to one core by
// the default 4 M line. The elements' line (memory-bound kernels) stays the
// default. A profile of one core, a GPU, or one without a measured
// fork-join cost gets the defaults.
OneThreadLine one_thread_line(const DeviceProfile& device);

// Whether g's weights and the rest of the program's (options.
// other_parameter_bytes) stay in the last cache level between runs: half of
// it; where they do not, kernels read their weights from main memory (see
// CostOptions::warm_cache).
bool weights_fit_in_cache(const Graph& g, const DeviceProfile& device, const CostOptions& options = {});

// Whether the runtime makes n's result a view of its input (a reshape, a
// Cast to the type it has): no kernel runs and no byte moves.
bool is_view_node(const Graph& g, const Node& n);

}  // namespace tessera::cost
