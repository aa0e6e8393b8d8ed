#include "verifier/shared_eval.h"

#include <memory>
#include <unordered_map>

#include "graph/error.h"
#include "graph/hash.h"
#include "graph/interpreter.h"

namespace tessera::verifier {
namespace {

using TensorPtr = std::shared_ptr<const RefTensor<Zp>>;

uint64_t mix(uint64_t h, uint64_t v) { return hash_combine(h, v); }

uint64_t content_hash(const RefTensor<Zp>& t) {
  uint64_t h = static_cast<uint64_t>(t.type.dtype);
  for (int64_t d : t.type.shape) h = mix(h, static_cast<uint64_t>(d));
  for (const Zp& z : t.num) h = mix(h, z.v);
  for (int64_t i : t.ints) h = mix(h, static_cast<uint64_t>(i));
  return h;
}

bool same_content(const RefTensor<Zp>& a, const RefTensor<Zp>& b) {
  return a.type == b.type && a.num == b.num && a.ints == b.ints;
}

// Values of both graphs, numbered by content: equal tensors share a class.
class Classes {
 public:
  int64_t classify(const TensorPtr& t) {
    uint64_t h = content_hash(*t);
    for (int64_t c : by_hash_[h])
      if (same_content(*tensors_[c], *t)) return c;
    tensors_.push_back(t);
    by_hash_[h].push_back(static_cast<int64_t>(tensors_.size()) - 1);
    return static_cast<int64_t>(tensors_.size()) - 1;
  }

 private:
  std::vector<TensorPtr> tensors_;
  std::unordered_map<uint64_t, std::vector<int64_t>> by_hash_;
};

struct GraphState {
  std::vector<TensorPtr> values;
  std::vector<int64_t> cls;
};

struct NodeKey {
  const Node* node;
  std::vector<int64_t> input_classes;
  uint64_t hash() const {
    uint64_t h = mix(static_cast<uint64_t>(node->kind), node->attrs.hash());
    h = mix(h, node->outputs.size());
    for (int64_t c : input_classes) h = mix(h, static_cast<uint64_t>(c));
    return h;
  }
  bool operator==(const NodeKey& o) const {
    return node->kind == o.node->kind && node->outputs.size() == o.node->outputs.size() &&
           input_classes == o.input_classes && node->attrs == o.node->attrs;
  }
};

GraphState bind(const Graph& g, const std::vector<TensorPtr>& inputs, Classes& classes) {
  GraphState s;
  s.values.resize(static_cast<size_t>(g.num_values()));
  s.cls.assign(static_cast<size_t>(g.num_values()), -1);
  if (inputs.size() != g.inputs().size())
    TESSERA_THROW(ErrorKind::kUsage, "graph takes " << g.inputs().size() << " inputs, got " << inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueId v = g.inputs()[i];
    if (inputs[i]->type != g.type(v))
      TESSERA_THROW(ErrorKind::kUsage, "input '" << g.value(v).name << "' must be " << type_str(g.type(v)));
    s.values[v] = inputs[i];
  }
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).constant) s.values[v] = std::make_shared<RefTensor<Zp>>(to_ref<Zp>(*g.value(v).constant));
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (s.values[v]) s.cls[v] = classes.classify(s.values[v]);
  return s;
}

std::vector<TensorPtr> run_kernel(const Graph& g, const Node& n, const GraphState& s) {
  if (op_def(n.kind).is_collective())
    throw Error(ErrorKind::kUsage, "collective op needs a device mesh", {"", n.name, op_name(n.kind)});
  EvalFn<Zp> fn = op_def(n.kind).eval_zp;
  if (!fn) throw Error(ErrorKind::kUnsupported, "op has no reference kernel", {"", n.name, op_name(n.kind)});
  EvalArgs<Zp> args{n, {}, nullptr, nullptr};
  for (ValueId in : n.inputs) args.inputs.push_back(in == kNoValue ? nullptr : s.values[in].get());
  std::vector<RefTensor<Zp>> outs(n.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i) outs[i].type = g.type(n.outputs[i]);
  args.outputs = &outs;
  try {
    fn(args);
  } catch (const Error& e) {
    throw e.with_context({"", n.name, op_name(n.kind)});
  }
  std::vector<TensorPtr> result;
  for (RefTensor<Zp>& o : outs) {
    size_t have = o.is_num() ? o.num.size() : o.ints.size();
    TESSERA_CHECK(have == static_cast<size_t>(o.numel()), n.name << " output has " << have << " elements");
    result.push_back(std::make_shared<RefTensor<Zp>>(std::move(o)));
  }
  return result;
}

std::vector<int64_t> input_classes(const Node& n, const GraphState& s) {
  std::vector<int64_t> c;
  for (ValueId in : n.inputs) c.push_back(in == kNoValue ? -1 : s.cls[in]);
  return c;
}

}  // namespace

bool pair_evaluable(const Graph& g) {
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (op_def(g.node(n).kind).is_collective()) return false;
  return true;
}

PairOutputs evaluate_pair_zp(const Graph& original, const Graph& candidate, const std::vector<RefTensor<Zp>>& inputs) {
  std::vector<TensorPtr> shared_inputs;
  for (const RefTensor<Zp>& t : inputs) shared_inputs.push_back(std::make_shared<RefTensor<Zp>>(t));
  Classes classes;
  GraphState a = verifier::bind(original, shared_inputs, classes);
  GraphState b = verifier::bind(candidate, shared_inputs, classes);

  struct KeyHash {
    size_t operator()(const NodeKey& k) const { return k.hash(); }
  };
  std::unordered_map<NodeKey, NodeId, KeyHash> computed;  // key -> original node
  for (NodeId id : original.topo_order()) {
    const Node& n = original.node(id);
    std::vector<TensorPtr> outs = run_kernel(original, n, a);
    for (size_t i = 0; i < outs.size(); ++i) {
      a.values[n.outputs[i]] = outs[i];
      a.cls[n.outputs[i]] = classes.classify(outs[i]);
    }
    computed.emplace(NodeKey{&n, input_classes(n, a)}, id);
  }
  PairOutputs out;
  for (NodeId id : candidate.topo_order()) {
    const Node& n = candidate.node(id);
    auto hit = computed.find(NodeKey{&n, input_classes(n, b)});
    if (hit != computed.end()) {
      const Node& same = original.node(hit->second);
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        b.values[n.outputs[i]] = a.values[same.outputs[i]];
        b.cls[n.outputs[i]] = a.cls[same.outputs[i]];
      }
      ++out.reused_nodes;
      continue;
    }
    std::vector<TensorPtr> outs = run_kernel(candidate, n, b);
    for (size_t i = 0; i < outs.size(); ++i) {
      b.values[n.outputs[i]] = outs[i];
      b.cls[n.outputs[i]] = classes.classify(outs[i]);
    }
  }
  for (ValueId v : original.outputs()) out.original.push_back(*a.values[v]);
  for (ValueId v : candidate.outputs()) out.candidate.push_back(*b.values[v]);
  return out;
}

}  // namespace tessera::verifier
