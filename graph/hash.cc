#include "graph/hash.h"

#include <utility>

#include "graph/error.h"

namespace tessera {
namespace {

// splitmix64 finalizer: a good avalanche, so that combining hashes by
// mixing keeps sibling subtrees from cancelling.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Order-sensitive combination.
uint64_t combine(uint64_t seed, uint64_t v) { return mix64(seed ^ mix64(v)); }

uint64_t type_hash(const TensorType& t) {
  uint64_t h = combine(0x7e5ull, static_cast<uint64_t>(t.dtype));
  h = combine(h, t.shape.size());
  for (int64_t d : t.shape) h = combine(h, static_cast<uint64_t>(d));
  return h;
}

constexpr uint64_t kInputTag = 0x1ull;
constexpr uint64_t kConstantTag = 0x2ull;
constexpr uint64_t kNodeTag = 0x3ull;
constexpr uint64_t kOmittedInput = 0x0badc0ffee0ddf00ull;

}  // namespace

std::vector<uint64_t> value_hashes(const Graph& g) {
  std::vector<uint64_t> h(static_cast<size_t>(g.num_values()), 0);
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    ValueId v = g.inputs()[i];
    h[v] = combine(combine(kInputTag, i), type_hash(g.type(v)));
  }
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).is_constant()) h[v] = combine(kConstantTag, g.value(v).constant->hash());
  for (NodeId n : g.topo_order()) {
    const Node& node = g.node(n);
    uint64_t base = combine(kNodeTag, static_cast<uint64_t>(node.kind));
    base = combine(base, node.attrs.hash());
    base = combine(base, node.inputs.size());
    for (ValueId in : node.inputs) base = combine(base, in == kNoValue ? kOmittedInput : h[in]);
    for (size_t i = 0; i < node.outputs.size(); ++i) h[node.outputs[i]] = combine(base, i);
  }
  return h;
}

uint64_t structural_hash(const Graph& g) {
  std::vector<uint64_t> h = value_hashes(g);
  uint64_t out = combine(0x6a09e667f3bcc909ull, g.inputs().size());
  for (ValueId v : g.inputs()) out = combine(out, type_hash(g.type(v)));
  out = combine(out, g.outputs().size());
  for (ValueId v : g.outputs()) out = combine(out, h[v]);
  return out;
}

namespace {

// Matches the computations of `a` and `b` backwards from their outputs,
// keeping one-to-one maps of values and nodes. Iterative, so deep chains
// (thousands of layers) do not overflow the stack.
class Matcher {
 public:
  Matcher(const Graph& a, const Graph& b)
      : a_(a), b_(b),
        va_(static_cast<size_t>(a.num_values()), kNoValue),
        vb_(static_cast<size_t>(b.num_values()), kNoValue),
        na_(static_cast<size_t>(a.num_nodes()), -1),
        nb_(static_cast<size_t>(b.num_nodes()), -1) {}

  bool run() {
    if (a_.inputs().size() != b_.inputs().size() || a_.outputs().size() != b_.outputs().size())
      return false;
    for (size_t i = 0; i < a_.inputs().size(); ++i) {
      ValueId x = a_.inputs()[i], y = b_.inputs()[i];
      if (a_.type(x) != b_.type(y)) return false;
      va_[x] = y;
      vb_[y] = x;
    }
    for (size_t i = 0; i < a_.outputs().size(); ++i) stack_.push_back({a_.outputs()[i], b_.outputs()[i]});
    while (!stack_.empty()) {
      auto [x, y] = stack_.back();
      stack_.pop_back();
      if (!match_value(x, y)) return false;
    }
    return true;
  }

 private:
  bool match_value(ValueId x, ValueId y) {
    if (x == kNoValue || y == kNoValue) return x == y;
    if (va_[x] != kNoValue || vb_[y] != kNoValue) return va_[x] == y && vb_[y] == x;
    const Value& vx = a_.value(x);
    const Value& vy = b_.value(y);
    // Graph inputs were all paired up front; an unpaired one has no match.
    if (vx.type != vy.type || vx.is_constant() != vy.is_constant()) return false;
    if ((vx.producer < 0) != (vy.producer < 0)) return false;
    va_[x] = y;
    vb_[y] = x;
    if (vx.is_constant()) return vx.constant->identical(*vy.constant);
    if (vx.producer < 0) return false;  // an input of a that is not an input of b at this position
    if (vx.producer_output != vy.producer_output) return false;
    return match_node(vx.producer, vy.producer);
  }

  bool match_node(NodeId p, NodeId q) {
    if (na_[p] != -1 || nb_[q] != -1) return na_[p] == q && nb_[q] == p;
    const Node& m = a_.node(p);
    const Node& n = b_.node(q);
    if (m.kind != n.kind || m.inputs.size() != n.inputs.size() || m.outputs.size() != n.outputs.size() ||
        !(m.attrs == n.attrs))
      return false;
    na_[p] = q;
    nb_[q] = p;
    // Sibling outputs correspond by index, so reads of them elsewhere pair up.
    for (size_t i = 0; i < m.outputs.size(); ++i) {
      ValueId x = m.outputs[i], y = n.outputs[i];
      if (va_[x] == kNoValue && vb_[y] == kNoValue) {
        if (a_.type(x) != b_.type(y)) return false;
        va_[x] = y;
        vb_[y] = x;
      } else if (va_[x] != y || vb_[y] != x) {
        return false;
      }
    }
    for (size_t i = 0; i < m.inputs.size(); ++i) stack_.push_back({m.inputs[i], n.inputs[i]});
    return true;
  }

  const Graph& a_;
  const Graph& b_;
  std::vector<ValueId> va_, vb_;
  std::vector<NodeId> na_, nb_;
  std::vector<std::pair<ValueId, ValueId>> stack_;
};

}  // namespace

bool structurally_equal(const Graph& a, const Graph& b) { return Matcher(a, b).run(); }

}  // namespace tessera
