#include "cost/graph_cost.h"

#include <algorithm>

namespace tessera::cost {

namespace {

bool is_eltwise_post_op(OpKind k) {
  switch (k) {
    case OpKind::kRelu: case OpKind::kLeakyRelu: case OpKind::kElu: case OpKind::kSigmoid:
    case OpKind::kTanh: case OpKind::kGelu: case OpKind::kHardSwish: case OpKind::kSoftplus:
    case OpKind::kSqrt: case OpKind::kAbs: case OpKind::kExp: case OpKind::kLog:
    case OpKind::kClip: case OpKind::kNeg: case OpKind::kReciprocal: case OpKind::kRound:
      return true;
    default:
      return false;
  }
}

bool is_binary_post_op(OpKind k) {
  switch (k) {
    case OpKind::kAdd: case OpKind::kSub: case OpKind::kMul: case OpKind::kDiv:
    case OpKind::kMax: case OpKind::kMin:
      return true;
    default:
      return false;
  }
}

bool commutative(OpKind k) {
  return k == OpKind::kAdd || k == OpKind::kMul || k == OpKind::kMax || k == OpKind::kMin;
}

bool all_f32(const Graph& g, const Node& n) {
  for (ValueId v : n.inputs)
    if (v != kNoValue && g.type(v).dtype != DType::kF32) return false;
  for (ValueId v : n.outputs)
    if (g.type(v).dtype != DType::kF32) return false;
  return true;
}

bool is_root(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1 || !all_f32(g, n)) return false;
  return n.kind == OpKind::kConv || n.kind == OpKind::kMatMul || n.kind == OpKind::kGemm ||
         is_binary_post_op(n.kind) || is_eltwise_post_op(n.kind);
}

// Whether `next` can extend the chain ending in value `chain`: a unary
// element-wise op, or a binary one whose other operand broadcasts into the
// chain (never the reverse) and that reads the chain once.
bool extends_chain(const Graph& g, const Node& next, ValueId chain) {
  if (next.outputs.size() != 1 || !all_f32(g, next)) return false;
  if (is_eltwise_post_op(next.kind)) return true;
  if (!is_binary_post_op(next.kind) || next.inputs.size() != 2) return false;
  bool chain_first = next.inputs[0] == chain;
  ValueId other = chain_first ? next.inputs[1] : next.inputs[0];
  return other != chain && (chain_first || commutative(next.kind)) &&
         g.type(next.outputs[0]).shape == g.type(chain).shape && g.type(other).rank() <= g.type(chain).rank();
}

}  // namespace

std::vector<std::vector<NodeId>> kernel_groups(const Graph& g, bool fuse) {
  std::vector<NodeId> order = g.topo_order();
  std::vector<size_t> position(static_cast<size_t>(g.num_nodes()), 0);
  for (size_t k = 0; k < order.size(); ++k) position[static_cast<size_t>(order[k])] = k;
  std::vector<std::vector<NodeId>> users = g.users();
  std::vector<bool> is_output(static_cast<size_t>(g.num_values()), false);
  for (ValueId v : g.outputs()) is_output[static_cast<size_t>(v)] = true;
  std::vector<bool> taken(static_cast<size_t>(g.num_nodes()), false);
  std::vector<std::vector<NodeId>> groups;
  for (NodeId id : order) {
    if (taken[static_cast<size_t>(id)]) continue;
    taken[static_cast<size_t>(id)] = true;
    std::vector<NodeId> group = {id};
    if (fuse && is_root(g, g.node(id))) {
      ValueId chain = g.node(id).outputs[0];
      while (!is_output[static_cast<size_t>(chain)] && users[static_cast<size_t>(chain)].size() == 1) {
        NodeId next = users[static_cast<size_t>(chain)][0];
        if (taken[static_cast<size_t>(next)] || !extends_chain(g, g.node(next), chain)) break;
        taken[static_cast<size_t>(next)] = true;
        group.push_back(next);
        chain = g.node(next).outputs[0];
      }
    }
    groups.push_back(std::move(group));
  }
  // A group runs where its last node was, when every operand is ready.
  std::stable_sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
    return position[static_cast<size_t>(a.back())] < position[static_cast<size_t>(b.back())];
  });
  return groups;
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
