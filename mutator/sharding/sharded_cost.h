// What a sharded global graph costs one rank, without partitioning it: the
// search's objective. Each kernel of the graph (cost/graph_cost.h's fusion
// groups) is costed at the local shapes its strategies give, as the local
// op emit_local writes for rank 0 (so a Reshape's new shape and Gather's
// mask are priced too); the reshards are propagation's, priced on the
// collective model for the mesh axis they cross. A kernel costed once is
// remembered by its ops, attributes, input types and strategies, so that
// repeated layers and repeated evaluations cost one lookup each. Whether
// weights stay in the last cache between runs is judged on the rank's own
// weights (a split that replicates them holds them all), as the rank's
// partitioned program is priced.
//
// Memory per rank: every constant's blocks as its readers read them, and
// the peak of live activations at their local sizes in topological order.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cost/device_profile.h"
#include "mutator/sharding/propagate.h"

namespace tessera::mutator {

struct ShardedCost {
  double compute_s = 0;  // the kernels of one rank
  double comm_s = 0;     // the reshards
  int64_t weight_bytes = 0;
  int64_t activation_bytes = 0;
  double time_s() const { return compute_s + comm_s; }
  int64_t memory_bytes() const { return weight_bytes + activation_bytes; }
};

class ShardedCostModel {
 public:
  ShardedCostModel(const Graph& g, const DeviceMesh& mesh, const cost::DeviceProfile& device);
  // Thread-safe.
  ShardedCost operator()(const ShardedGraph& s);
  int64_t kernels_costed() const;

 private:
  double group_seconds(const std::vector<NodeId>& group, const ShardedGraph& s, int64_t rank_weight_bytes,
                       bool weights_fit);

  const Graph& g_;
  DeviceMesh mesh_;
  const cost::DeviceProfile& device_;
  std::vector<std::vector<NodeId>> groups_;
  std::vector<NodeId> order_;
  std::vector<int64_t> last_use_;  // per value: index in order_ of its last reader
  // Per node: the first node that costs as it does (same_costing), whose id
  // keys the cache.
  std::vector<NodeId> node_key_;
  // A costed kernel: its nodes' keys (node_key_), their strategies and
  // whether the rank's weights fit; found by a hash of those, confirmed by
  // equality (Strategy::operator==).
  struct CachedGroup {
    bool weights_fit;
    std::vector<NodeId> keys;
    std::vector<Strategy> strategies;
    double seconds;
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<CachedGroup>> cache_;
  int64_t cached_ = 0;
};

}  // namespace tessera::mutator
