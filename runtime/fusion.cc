#include "runtime/fusion.h"

#include <algorithm>

namespace tessera::runtime {
namespace {

bool is_root(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1 || g.type(n.outputs[0]).dtype != DType::kF32) return false;
  switch (n.kind) {
    case OpKind::kConv:
    case OpKind::kMatMul:
    case OpKind::kGemm:
      return true;
    default:
      return is_binary_post_op(n.kind) || is_eltwise_post_op(n);
  }
}

bool all_f32(const Graph& g, const Node& n) {
  for (ValueId v : n.inputs)
    if (v != kNoValue && g.type(v).dtype != DType::kF32) return false;
  for (ValueId v : n.outputs)
    if (g.type(v).dtype != DType::kF32) return false;
  return true;
}

}  // namespace

std::string FusedGroup::label(const Graph& g) const {
  std::string s = op_name(g.node(root).kind);
  for (const PostOp& p : post) s += std::string("+") + op_name(g.node(p.node).kind);
  return s;
}

bool is_eltwise_post_op(const Node& node) {
  switch (node.kind) {
    case OpKind::kRelu: case OpKind::kLeakyRelu: case OpKind::kElu: case OpKind::kSigmoid:
    case OpKind::kTanh: case OpKind::kGelu: case OpKind::kHardSwish: case OpKind::kSoftplus:
    case OpKind::kSqrt: case OpKind::kAbs: case OpKind::kExp: case OpKind::kLog:
    case OpKind::kClip: case OpKind::kNeg: case OpKind::kReciprocal: case OpKind::kRound:
      return true;
    default:
      return false;
  }
}

bool is_binary_post_op(OpKind kind) {
  switch (kind) {
    case OpKind::kAdd: case OpKind::kSub: case OpKind::kMul: case OpKind::kDiv:
    case OpKind::kMax: case OpKind::kMin:
      return true;
    default:
      return false;
  }
}

std::vector<FusedGroup> form_groups(const Graph& g, const std::vector<NodeId>& order, bool fuse) {
  std::vector<FusedGroup> groups;
  std::vector<bool> taken(static_cast<size_t>(g.num_nodes()), false);
  std::vector<size_t> position(static_cast<size_t>(g.num_nodes()), 0);
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = k;
  std::vector<std::vector<NodeId>> users = g.users();
  std::vector<bool> is_output(static_cast<size_t>(g.num_values()), false);
  for (ValueId v : g.outputs()) is_output[v] = true;

  std::vector<std::pair<size_t, FusedGroup>> placed;  // (position of last node, group)
  for (NodeId id : order) {
    if (taken[id]) continue;
    taken[id] = true;
    FusedGroup grp{id, {}};
    const Node& root = g.node(id);
    if (fuse && is_root(g, root) && all_f32(g, root)) {
      ValueId chain = root.outputs[0];
      while (!is_output[chain] && users[chain].size() == 1) {
        const Node& next = g.node(users[chain][0]);
        if (taken[users[chain][0]] || !all_f32(g, next) || next.outputs.size() != 1) break;
        PostOp p{users[chain][0], kNoValue};
        if (is_eltwise_post_op(next)) {
          // unary: nothing else to check
        } else if (is_binary_post_op(next.kind) && next.inputs.size() == 2) {
          bool chain_first = next.inputs[0] == chain;
          ValueId other = chain_first ? next.inputs[1] : next.inputs[0];
          bool commutative = next.kind == OpKind::kAdd || next.kind == OpKind::kMul ||
                             next.kind == OpKind::kMax || next.kind == OpKind::kMin;
          // The link must keep the chain's shape (the other operand broadcasts
          // into it, never the reverse) and read the chain once.
          if (other == chain || (!chain_first && !commutative) ||
              g.type(next.outputs[0]).shape != g.type(chain).shape ||
              g.type(other).rank() > g.type(chain).rank())
            break;
          p.other = other;
        } else {
          break;
        }
        taken[p.node] = true;
        grp.post.push_back(p);
        chain = next.outputs[0];
      }
    }
    placed.emplace_back(position[grp.last()], std::move(grp));
  }
  std::stable_sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [pos, grp] : placed) groups.push_back(std::move(grp));
  return groups;
}

}  // namespace tessera::runtime
