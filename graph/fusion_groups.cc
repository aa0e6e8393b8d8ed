#include "graph/fusion_groups.h"

#include <algorithm>
#include <cmath>

namespace tessera {
namespace {

// The float types a group computes in (the runtime runs f16 groups over f32
// copies, as one group still: the conversions go around it, not per link).
bool fusable_type(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

bool is_root(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1 || !fusable_type(g.type(n.outputs[0]).dtype)) return false;
  switch (n.kind) {
    case OpKind::kConv:
    case OpKind::kMatMul:
    case OpKind::kGemm:
      return true;
    default:
      return is_binary_post_op(n.kind) || is_eltwise_post_op(n);
  }
}

// Every tensor of n has type t (a group is of one type).
bool all_of_type(const Graph& g, const Node& n, DType t) {
  for (ValueId v : n.inputs)
    if (v != kNoValue && g.type(v).dtype != t) return false;
  for (ValueId v : n.outputs)
    if (g.type(v).dtype != t) return false;
  return true;
}

// Within the rounding of the constant's own type: an fp16 or bf16 model
// stores sqrt(2) as 1.4140625 (onnxconverter-common's fp16 ConvNeXt-Tiny
// ran its 18 GELUs unfused, an Erf per element each).
bool scalar_constant_near(const Graph& g, ValueId v, double want) {
  const Value& val = g.value(v);
  if (!val.constant || val.constant->numel() != 1) return false;
  DType t = val.constant->dtype();
  double rel = t == DType::kBF16 ? std::ldexp(1.0, -8) : t == DType::kF16 ? std::ldexp(1.0, -11) : 1e-6;
  return std::fabs(val.constant->get_double(0) - want) <= rel * want;
}

// The operand of binary node n that is not v, or kNoValue when n does not
// read v exactly once.
ValueId other_operand(const Node& n, ValueId v) {
  if (n.inputs.size() != 2 || (n.inputs[0] == v) == (n.inputs[1] == v)) return kNoValue;
  return n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
}

// Matches Gelu's erf form on x (PyTorch's export of nn.GELU()):
//   d = Div(x, sqrt 2)   e = Erf(d)   a = Add(e, 1)   m = Mul(x, a)   y = Mul(m, 0.5)
// where x feeds exactly the Div and the first Mul and every other value has
// one reader. Returns the five nodes in order, or nothing.
std::vector<NodeId> match_gelu_erf(const Graph& g, const std::vector<std::vector<NodeId>>& users,
                                   const std::vector<bool>& is_output, ValueId x) {
  if (users[x].size() != 2) return {};
  auto only_user = [&](ValueId v) -> const Node* {
    if (is_output[v] || users[v].size() != 1) return nullptr;
    return &g.node(users[v][0]);
  };
  for (int first = 0; first < 2; ++first) {
    NodeId div = users[x][first], mul = users[x][1 - first];
    const Node& d = g.node(div);
    if (d.kind != OpKind::kDiv || d.inputs[0] != x || !scalar_constant_near(g, d.inputs[1], std::sqrt(2.0))) continue;
    const Node* e = only_user(d.outputs[0]);
    if (!e || e->kind != OpKind::kErf) continue;
    const Node* a = only_user(e->outputs[0]);
    if (!a || a->kind != OpKind::kAdd) continue;
    ValueId one = other_operand(*a, e->outputs[0]);
    if (one == kNoValue || !scalar_constant_near(g, one, 1.0)) continue;
    const Node& m = g.node(mul);
    if (m.kind != OpKind::kMul || other_operand(m, x) != a->outputs[0]) continue;
    const Node* h = only_user(m.outputs[0]);
    if (!h || h->kind != OpKind::kMul) continue;
    ValueId half = other_operand(*h, m.outputs[0]);
    if (half == kNoValue || !scalar_constant_near(g, half, 0.5)) continue;
    if (g.type(h->outputs[0]).shape != g.type(x).shape) continue;
    return {div, users[d.outputs[0]][0], users[e->outputs[0]][0], mul, users[m.outputs[0]][0]};
  }
  return {};
}

// Matches SiLU on x (PyTorch's export of nn.SiLU and F.silu):
//   s = Sigmoid(x)   y = Mul(x, s)
// where x feeds exactly the two and s has one reader. Returns the two nodes
// in order, or nothing.
std::vector<NodeId> match_swish(const Graph& g, const std::vector<std::vector<NodeId>>& users,
                                const std::vector<bool>& is_output, ValueId x) {
  if (users[x].size() != 2) return {};
  for (int first = 0; first < 2; ++first) {
    NodeId sig = users[x][first], mul = users[x][1 - first];
    const Node& s = g.node(sig);
    if (s.kind != OpKind::kSigmoid || is_output[s.outputs[0]] || users[s.outputs[0]].size() != 1 ||
        users[s.outputs[0]][0] != mul)
      continue;
    const Node& m = g.node(mul);
    if (m.kind != OpKind::kMul || other_operand(m, x) != s.outputs[0]) continue;
    if (g.type(m.outputs[0]).shape != g.type(x).shape) continue;
    return {sig, mul};
  }
  return {};
}

}  // namespace

std::string FusedGroup::label(const Graph& g) const {
  std::string s = op_name(g.node(root).kind);
  for (const PostOp& p : post)
    s += std::string("+") + (p.gelu_erf ? "Gelu" : p.swish ? "Swish" : op_name(g.node(p.node).kind));
  return s;
}

bool is_column_bias(const Graph& g, ValueId product, ValueId operand) {
  if (operand == kNoValue || g.type(operand).dtype != g.type(product).dtype) return false;
  const Shape& p = g.type(product).shape;
  const Shape& o = g.type(operand).shape;
  if (p.empty() || o.empty() || o.size() > p.size() || o.back() != p.back()) return false;
  return std::all_of(o.begin(), o.end() - 1, [](int64_t d) { return d == 1; });
}

bool runs_on_one_thread(const Graph& g, const Node& root, ValueId out, const OneThreadLine& line) {
  int64_t elements = g.type(out).numel();
  int64_t reduce = 1;
  if (root.kind == OpKind::kConv) {
    const Shape& ws = g.type(root.inputs[1]).shape;
    for (size_t i = 1; i < ws.size(); ++i) reduce *= ws[i];
    return elements * reduce < line.macs;
  }
  if (root.kind == OpKind::kMatMul || root.kind == OpKind::kGemm) {
    const Shape& as = g.type(root.inputs[0]).shape;
    if (!as.empty()) reduce = root.kind == OpKind::kGemm && root.attrs.i("transA") != 0 ? as[0] : as.back();
    // A product of few rows does few multiply-adds per element of B but
    // reads all of B: over the elements' line it is memory-bound work, not
    // little (a decode step's 1024x2816 weight, 2.9 M multiply-adds, 11.5 MB).
    return elements * reduce < line.macs && g.type(root.inputs[1]).numel() < line.elements;
  }
  return elements < line.elements;
}

std::vector<NodeId> FusedGroup::nodes() const {
  std::vector<NodeId> out = {root};
  for (const PostOp& p : post) {
    if (p.members.empty()) out.push_back(p.node);
    else out.insert(out.end(), p.members.begin(), p.members.end());
  }
  return out;
}

bool is_eltwise_post_op(const Node& node) {
  switch (node.kind) {
    case OpKind::kRelu: case OpKind::kLeakyRelu: case OpKind::kElu: case OpKind::kSigmoid:
    case OpKind::kTanh: case OpKind::kGelu: case OpKind::kHardSwish: case OpKind::kSoftplus:
    case OpKind::kSqrt: case OpKind::kAbs: case OpKind::kExp: case OpKind::kLog:
    case OpKind::kClip: case OpKind::kNeg: case OpKind::kReciprocal: case OpKind::kRound:
    case OpKind::kHardSigmoid:
      return true;
    default:
      return false;
  }
}

bool keeps_blocked_layout(OpKind kind) {
  switch (kind) {
    case OpKind::kConv: case OpKind::kMaxPool: case OpKind::kAveragePool: case OpKind::kGlobalAveragePool:
    case OpKind::kGlobalMaxPool: case OpKind::kBatchNormalization: case OpKind::kConcat:
      return true;
    default:
      return is_binary_post_op(kind) || is_eltwise_post_op(Node{kind, "", {}, {}, {}});
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

std::vector<FusedGroup> form_groups(const Graph& g, const std::vector<NodeId>& order, bool fuse, bool match_gelu,
                                    bool concat_norms) {
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
    DType type = root.outputs.empty() ? DType::kF32 : g.type(root.outputs[0]).dtype;
    if (fuse && is_root(g, root) && all_of_type(g, root, type)) {
      ValueId chain = root.outputs[0];
      while (!is_output[chain]) {
        if (match_gelu) {
          // A multi-node function of the chain (Gelu's erf form, SiLU).
          std::vector<NodeId> members = match_gelu_erf(g, users, is_output, chain);
          bool is_gelu = !members.empty();
          if (!is_gelu) members = match_swish(g, users, is_output, chain);
          bool free = !members.empty();
          for (NodeId m : members) free = free && !taken[m] && all_of_type(g, g.node(m), type);
          if (free) {
            for (NodeId m : members) taken[m] = true;
            grp.post.push_back(PostOp{members.back(), kNoValue, members, is_gelu, !is_gelu});
            chain = g.node(members.back()).outputs[0];
            continue;
          }
        }
        if (users[chain].size() != 1) break;
        const Node& next = g.node(users[chain][0]);
        if (taken[users[chain][0]] || !all_of_type(g, next, type) || next.outputs.size() != 1) break;
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
    } else if (fuse && concat_norms && root.kind == OpKind::kConcat && root.outputs.size() == 1 &&
               all_of_type(g, root, type) && fusable_type(type) && !is_output[root.outputs[0]] &&
               users[root.outputs[0]].size() == 1) {
      // Concat -> BatchNormalization (-> Relu), the concatenation read by
      // nothing else: DenseNet-121 concatenates 62 times, each result read
      // once, by the next layer's BN+Relu; fused, each element is written
      // once instead of written, read and written again.
      NodeId bn = users[root.outputs[0]][0];
      const Node& b = g.node(bn);
      if (!taken[bn] && b.kind == OpKind::kBatchNormalization && b.inputs[0] == root.outputs[0] &&
          b.outputs.size() == 1 && all_of_type(g, b, type)) {
        taken[bn] = true;
        grp.post.push_back(PostOp{bn, kNoValue});
        ValueId bn_out = b.outputs[0];
        if (!is_output[bn_out] && users[bn_out].size() == 1) {
          NodeId next = users[bn_out][0];
          if (!taken[next] && g.node(next).kind == OpKind::kRelu && all_of_type(g, g.node(next), type)) {
            taken[next] = true;
            grp.post.push_back(PostOp{next, kNoValue});
          }
        }
      }
    } else if (fuse && root.kind == OpKind::kBatchNormalization && root.outputs.size() == 1 &&
               !is_output[root.outputs[0]] && users[root.outputs[0]].size() == 1) {
      // A batch normalization that no convolution absorbed (DenseNet's
      // pre-activation BN+Relu on each concatenation) takes one Relu, the
      // only post-op oneDNN's primitive has (fuse_norm_relu): one pass over
      // the tensor instead of two (densenet121, 1 thread: 62 Relu kernels,
      // 1.3 ms of 59).
      NodeId next = users[root.outputs[0]][0];
      if (!taken[next] && g.node(next).kind == OpKind::kRelu && all_of_type(g, g.node(next), type)) {
        taken[next] = true;
        grp.post.push_back(PostOp{next, kNoValue});
      }
    }
    placed.emplace_back(position[grp.last()], std::move(grp));
  }
  std::stable_sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [pos, grp] : placed) groups.push_back(std::move(grp));
  return groups;
}

}  // namespace tessera
