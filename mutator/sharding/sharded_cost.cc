#include "mutator/sharding/sharded_cost.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "cost/graph_cost.h"
#include "graph/error.h"
#include "graph/hash.h"
#include "graph/liveness.h"

namespace tessera::mutator {
namespace {

int64_t local_bytes(const TensorType& t, const Sharding& s, const DeviceMesh& mesh) {
  if (s.placements.empty()) return t.nbytes();
  return shape_numel(s.local_shape(mesh, t.shape)) * static_cast<int64_t>(dtype_size(t.dtype));
}

// Constants up to this many elements are part of what a node's cost
// depends on (a Reshape's shape, a Slice's starts); larger ones are weights,
// whose values do not change a cost.
constexpr int64_t kComparedConstant = 64;

// Whether a and b cost the same at every strategy: kind, attributes, input
// types, and the small constants among their inputs.
bool same_costing(const Graph& g, const Node& a, const Node& b) {
  if (a.kind != b.kind || !(a.attrs == b.attrs) || a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    ValueId x = a.inputs[i], y = b.inputs[i];
    if ((x == kNoValue) != (y == kNoValue)) return false;
    if (x == kNoValue) continue;
    const Value &vx = g.value(x), &vy = g.value(y);
    if (!(vx.type == vy.type) || vx.constant.has_value() != vy.constant.has_value()) return false;
    if (vx.constant && vx.constant->numel() <= kComparedConstant && !vx.constant->identical(*vy.constant)) return false;
  }
  return true;
}

}  // namespace

ShardedCostModel::ShardedCostModel(const Graph& g, const DeviceMesh& mesh, const cost::DeviceProfile& device)
    : g_(g), mesh_(mesh), device_(device), groups_(cost::kernel_groups(g)), order_(g.topo_order()) {
  last_use_ = last_uses(g, order_);
  // A node's key is the first node that costs as it does at every strategy:
  // a hash match confirmed by same_costing, so that two nodes share cached
  // costs only when they are equal where the cost model looks.
  node_key_.assign(static_cast<size_t>(g.num_nodes()), 0);
  std::unordered_map<uint64_t, std::vector<NodeId>> firsts;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    uint64_t h = hash_combine(static_cast<uint64_t>(node.kind), node.attrs.hash());
    for (ValueId v : node.inputs) {
      if (v == kNoValue) {
        h = hash_combine(h, 3);
        continue;
      }
      const Value& val = g.value(v);
      const std::string t = type_str(val.type);
      h = hash_combine(h, fnv1a(t.data(), t.size()));
      if (val.constant) h = hash_combine(h, val.constant->numel() <= kComparedConstant ? val.constant->hash() : 1);
    }
    std::vector<NodeId>& same_hash = firsts[h];
    auto it = std::find_if(same_hash.begin(), same_hash.end(), [&](NodeId m) { return same_costing(g, g.node(m), node); });
    node_key_[static_cast<size_t>(n)] = it == same_hash.end() ? n : *it;
    if (it == same_hash.end()) same_hash.push_back(n);
  }
}

double ShardedCostModel::group_seconds(const std::vector<NodeId>& group, const ShardedGraph& s,
                                       int64_t rank_weight_bytes, bool weights_fit) {
  uint64_t h = weights_fit ? 1 : 2;
  for (NodeId n : group) {
    h = hash_combine(h, static_cast<uint64_t>(node_key_[static_cast<size_t>(n)]));
    h = hash_combine(h, s.nodes[static_cast<size_t>(n)].hash());
  }
  auto same = [&](const CachedGroup& c) {
    if (c.weights_fit != weights_fit || c.keys.size() != group.size()) return false;
    for (size_t i = 0; i < group.size(); ++i)
      if (c.keys[i] != node_key_[static_cast<size_t>(group[i])] ||
          !(c.strategies[i] == s.nodes[static_cast<size_t>(group[i])]))
        return false;
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(h);
    if (it != cache_.end())
      for (const CachedGroup& c : it->second)
        if (same(c)) return c.seconds;
  }
  // The group's local ops for rank 0: what it reads from outside the group
  // are inputs (constants: rank 0's block), values it makes feed its own
  // readers when they read them as made.
  Graph mini;
  std::map<std::pair<ValueId, std::string>, ValueId> at;
  std::set<ValueId> inside;
  for (NodeId n : group)
    for (ValueId v : g_.node(n).outputs) inside.insert(v);
  std::vector<ValueId> outs;
  for (NodeId n : group) {
    const Node& node = g_.node(n);
    const Strategy& st = s.nodes[static_cast<size_t>(n)];
    std::vector<ValueId> ins;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId v = node.inputs[i];
      if (v == kNoValue) {
        ins.push_back(kNoValue);
        continue;
      }
      auto k = std::make_pair(v, st.inputs[i].str());
      auto it = at.find(k);
      if (it == at.end()) {
        const Value& val = g_.value(v);
        ValueId lv;
        if (val.constant) {
          lv = mini.add_constant(val.name + "/" + st.inputs[i].str(), shard_of(*val.constant, st.inputs[i], mesh_, 0));
        } else {
          TensorType t{val.type.dtype, st.inputs[i].placements.empty() ? val.type.shape
                                                                      : st.inputs[i].local_shape(mesh_, val.type.shape)};
          lv = mini.add_input(val.name + "/" + st.inputs[i].str(), t);
        }
        it = at.emplace(k, lv).first;
      }
      ins.push_back(it->second);
    }
    std::vector<ValueId> lo = emit_local(g_, node, st, mesh_, 0, mini, ins);
    for (size_t o = 0; o < lo.size(); ++o) {
      at[{node.outputs[o], st.outputs[o].str()}] = lo[o];
      outs.push_back(lo[o]);
    }
  }
  // Outputs: what no node of the group reads (the last node's, and values
  // read elsewhere keep their kernel from fusing in any case).
  std::set<ValueId> read;
  for (NodeId n = 0; n < mini.num_nodes(); ++n)
    for (ValueId v : mini.node(n).inputs) read.insert(v);
  std::vector<ValueId> results;
  for (ValueId v : outs)
    if (!read.count(v) && !mini.value(v).constant) results.push_back(v);
  if (results.empty() && !outs.empty()) results.push_back(outs.back());
  double t = 0;
  if (!results.empty() && !(results.size() == 1 && mini.value(results[0]).producer < 0)) {
    mini.set_outputs(results);
    cost::CostOptions opts;
    opts.part_of_larger_program = true;
    opts.other_parameter_bytes = std::max<int64_t>(0, rank_weight_bytes - mini.parameter_bytes());
    t = cost::graph_cost(mini, device_, opts).time_s;
  }
  CachedGroup entry{weights_fit, {}, {}, t};
  for (NodeId n : group) {
    entry.keys.push_back(node_key_[static_cast<size_t>(n)]);
    entry.strategies.push_back(s.nodes[static_cast<size_t>(n)]);
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CachedGroup>& bucket = cache_[h];
  // Another thread may have costed the same kernel meanwhile.
  if (std::none_of(bucket.begin(), bucket.end(), same)) {
    bucket.push_back(std::move(entry));
    ++cached_;
  }
  return t;
}

int64_t ShardedCostModel::kernels_costed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

ShardedCost ShardedCostModel::operator()(const ShardedGraph& s) {
  ShardedCost c;
  // Weights: each constant's distinct blocks as its readers read them.
  std::set<std::pair<ValueId, std::string>> held;
  for (NodeId n : order_) {
    const Node& node = g_.node(n);
    const Strategy& st = s.nodes[static_cast<size_t>(n)];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId v = node.inputs[i];
      if (v == kNoValue || !g_.value(v).constant) continue;
      if (held.insert({v, st.inputs[i].str()}).second) c.weight_bytes += local_bytes(g_.type(v), st.inputs[i], mesh_);
    }
  }
  // Whether the rank's weights stay in its last cache between runs
  // (cost::weights_fit_in_cache) is the plan's, not a kernel's: a split
  // that replicates the weights holds them all on every rank. Each group
  // is priced with the rest of the rank's weights beside it.
  cost::CostOptions rank;
  rank.other_parameter_bytes = c.weight_bytes;
  bool fit = cost::weights_fit_in_cache(Graph{}, device_, rank);
  for (const std::vector<NodeId>& group : groups_) c.compute_s += group_seconds(group, s, c.weight_bytes, fit);
  c.comm_s = s.reshard_seconds;
  // Activations: live non-constant values at their local size (graph
  // inputs cross the boundary whole), in topological order.
  c.activation_bytes = peak_live_bytes(g_, order_, last_use_, [&](ValueId v) -> int64_t {
    const Value& val = g_.value(v);
    if (val.is_constant()) return 0;
    return val.producer < 0 ? val.type.nbytes() : local_bytes(val.type, s.values[static_cast<size_t>(v)], mesh_);
  });
  return c;
}

}  // namespace tessera::mutator
