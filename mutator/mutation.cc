#include "mutator/mutation.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "graph/error.h"

namespace tessera::mutator {

const char* verification_status_name(Verification::Status s) {
  switch (s) {
    case Verification::kUnverified: return "unverified";
    case Verification::kProven: return "proven";
    case Verification::kTested: return "tested";
    case Verification::kRejected: return "rejected";
  }
  return "?";
}

std::string MutationId::name() const {
  return kind == Kind::kSplice ? "subprogram-" + std::to_string(subprogram) : rule;
}

int spliced_subprogram(const std::string& node_name) {
  static const std::string kPrefix = [] {  // "subprogram-"
    std::string s = MutationId::splice(0).name();
    s.pop_back();
    return s;
  }();
  if (node_name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  size_t end = node_name.find('_', kPrefix.size());
  if (end == std::string::npos || end == kPrefix.size() || end - kPrefix.size() > 9) return -1;
  int index = 0;
  for (size_t i = kPrefix.size(); i < end; ++i) {
    if (node_name[i] < '0' || node_name[i] > '9') return -1;
    index = index * 10 + (node_name[i] - '0');
  }
  return index;
}

std::string fresh_value_name(const Graph& g, const std::string& base) {
  // Counting from the graph's size keeps names a function of the graph, so
  // the same search gives the same names whatever the thread timing.
  for (int64_t k = g.num_values();; ++k) {
    std::string name = base + "_" + std::to_string(k);
    if (!g.find_value(name)) return name;
  }
}

std::string fresh_node_name(const Graph& g, const std::string& base, size_t outputs) {
  for (int64_t k = g.num_values();; ++k) {
    std::string name = base + "_" + std::to_string(k);
    bool free = !g.find_value(name);
    for (size_t i = 0; i < outputs && free; ++i) free = !g.find_value(name + ":" + std::to_string(i));
    if (free) return name;
  }
}

MutationBuilder::MutationBuilder(const Graph& host, std::string rule, std::vector<NodeId> nodes)
    : host_(host), rule_(std::move(rule)), nodes_(std::move(nodes)) {
  g_.name = rule_;
}

ValueId MutationBuilder::in(ValueId v) {
  TESSERA_CHECK(v != kNoValue, "rule " << rule_ << " reads an omitted input");
  const Value& val = host_.value(v);
  if (auto existing = g_.find_value(val.name)) return *existing;
  if (val.is_constant()) return g_.add_constant(val.name, *val.constant);
  host_inputs_.push_back(v);
  return g_.add_input(val.name, val.type);
}

ValueId MutationBuilder::constant(Tensor data) {
  return g_.add_constant("tsr.c" + std::to_string(counter_++), std::move(data));
}

ValueId MutationBuilder::add(OpKind kind, std::vector<ValueId> inputs, Attrs attrs) {
  return add_multi(kind, std::move(inputs), std::move(attrs), 1)[0];
}

ValueId MutationBuilder::add_as(NodeId host, OpKind kind, std::vector<ValueId> inputs, Attrs attrs) {
  TESSERA_CHECK(std::find(nodes_.begin(), nodes_.end(), host) != nodes_.end(),
                "rule " << rule_ << " names a node after host node '" << host_.node(host).name << "' it does not replace");
  const std::string& name = host_.node(host).name;
  NodeId n = g_.add_node(kind, std::move(inputs), std::move(attrs), name, {name + ":0"});
  keep_names_.push_back(n);
  return g_.node(n).outputs[0];
}

std::vector<ValueId> MutationBuilder::add_multi(OpKind kind, std::vector<ValueId> inputs, Attrs attrs,
                                                int outputs) {
  std::string name = "tsr.n" + std::to_string(counter_++);
  std::vector<std::string> out_names;
  for (int i = 0; i < outputs; ++i) out_names.push_back(name + ":" + std::to_string(i));
  NodeId n = g_.add_node(kind, std::move(inputs), std::move(attrs), name, out_names);
  return g_.node(n).outputs;
}

void MutationBuilder::replace(ValueId host_value, ValueId replacement_value) {
  TESSERA_CHECK(host_.type(host_value) == g_.type(replacement_value),
                "rule " << rule_ << " replaces " << type_str(host_.type(host_value)) << " by "
                        << type_str(g_.type(replacement_value)));
  host_outputs_.push_back(host_value);
  new_outputs_.push_back(replacement_value);
}

namespace {

// The nodes in an order where producers inside the set come first.
std::vector<NodeId> local_topo(const Graph& g, const std::vector<NodeId>& nodes) {
  std::unordered_set<NodeId> inside(nodes.begin(), nodes.end());
  std::vector<NodeId> order;
  std::unordered_set<NodeId> done;
  std::vector<NodeId> sorted = nodes;
  std::sort(sorted.begin(), sorted.end());
  std::function<void(NodeId)> visit = [&](NodeId n) {
    if (done.count(n)) return;
    done.insert(n);
    for (ValueId in : g.node(n).inputs) {
      if (in == kNoValue) continue;
      NodeId p = g.value(in).producer;
      if (p >= 0 && inside.count(p)) visit(p);
    }
    order.push_back(n);
  };
  for (NodeId n : sorted) visit(n);
  return order;
}

}  // namespace

Mutation MutationBuilder::finish(std::string description) {
  Mutation m;
  m.id.rule = rule_;
  m.nodes = local_topo(host_, nodes_);
  std::unordered_set<NodeId> inside(m.nodes.begin(), m.nodes.end());
  // Inputs the replaced nodes read that the replacement does not: the two
  // graphs must share one signature, so the replacement takes them unused.
  for (NodeId n : m.nodes)
    for (ValueId v : host_.node(n).inputs) {
      if (v == kNoValue || host_.value(v).is_constant()) continue;
      NodeId p = host_.value(v).producer;
      if (p >= 0 && inside.count(p)) continue;
      if (std::find(host_inputs_.begin(), host_inputs_.end(), v) == host_inputs_.end()) in(v);
    }
  Graph before;
  before.name = rule_ + "_before";
  std::unordered_map<ValueId, ValueId> map;
  for (ValueId v : host_inputs_) map[v] = before.add_input(host_.value(v).name, host_.type(v));
  for (NodeId n : m.nodes) {
    const Node& node = host_.node(n);
    std::vector<ValueId> ins;
    for (ValueId v : node.inputs) {
      if (v == kNoValue) {
        ins.push_back(kNoValue);
        continue;
      }
      if (!map.count(v)) {
        TESSERA_CHECK(host_.value(v).is_constant(), "rule " << rule_ << ": value " << host_.value(v).name
                                                             << " is neither an input nor a constant");
        map[v] = before.add_constant(host_.value(v).name, *host_.value(v).constant);
      }
      ins.push_back(map[v]);
    }
    std::vector<std::string> out_names;
    for (ValueId o : node.outputs) out_names.push_back(host_.value(o).name);
    NodeId id = before.add_node(node.kind, ins, node.attrs, node.name, out_names);
    for (size_t i = 0; i < node.outputs.size(); ++i) map[node.outputs[i]] = before.node(id).outputs[i];
  }
  std::vector<ValueId> before_outs;
  for (ValueId v : host_outputs_) {
    TESSERA_CHECK(map.count(v) && host_.value(v).producer >= 0,
                  "rule " << rule_ << " replaces a value its nodes do not compute");
    before_outs.push_back(map[v]);
  }
  before.set_outputs(before_outs);
  g_.set_outputs(new_outputs_);
  m.inputs = host_inputs_;
  m.outputs = host_outputs_;
  m.before = std::move(before);
  m.keep_names = keep_names_;
  m.replacement = std::move(g_);
  m.description = std::move(description);
  return m;
}

namespace {

// Splices m into g (a copy of a host with host_nodes nodes) without removing
// what became dead, so that several disjoint mutations can share one splice.
void splice(Graph& g, NodeId host_nodes, const Mutation& m, std::unordered_map<ValueId, ValueId>& redirected) {
  const Graph& r = m.replacement;
  const std::string base = m.id.name();  // what the new nodes and constants are named after
  TESSERA_CHECK(r.inputs().size() == m.inputs.size() && r.outputs().size() == m.outputs.size(),
                "mutation " << base << " has a signature that does not match its host values");
  std::vector<ValueId> map(static_cast<size_t>(r.num_values()), kNoValue);
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    ValueId v = m.inputs[i];
    while (redirected.count(v)) v = redirected[v];
    map[r.inputs()[i]] = v;
  }
  for (ValueId v = 0; v < r.num_values(); ++v) {
    const Value& val = r.value(v);
    if (!val.is_constant()) continue;
    auto same = g.find_value(val.name);
    if (same && g.value(*same).is_constant() && g.value(*same).constant->identical(*val.constant))
      map[v] = *same;
    else
      map[v] = g.add_constant(fresh_value_name(g, base + ".w"), *val.constant);
  }
  for (NodeId n : r.topo_order()) {
    const Node& node = r.node(n);
    std::vector<ValueId> ins;
    for (ValueId v : node.inputs) ins.push_back(v == kNoValue ? kNoValue : map[v]);
    // A node that stands for the host node it rewrites (add_as) keeps that
    // name, its outputs get fresh ones.
    const bool kept = std::find(m.keep_names.begin(), m.keep_names.end(), n) != m.keep_names.end();
    std::string name = fresh_node_name(g, kept ? node.name : base, node.outputs.size());
    std::vector<std::string> out_names;
    for (size_t i = 0; i < node.outputs.size(); ++i) out_names.push_back(name + ":" + std::to_string(i));
    NodeId id = g.add_node(node.kind, ins, node.attrs, kept ? node.name : name, out_names);
    for (size_t i = 0; i < node.outputs.size(); ++i) map[node.outputs[i]] = g.node(id).outputs[i];
  }
  std::unordered_set<ValueId> graph_outputs(g.outputs().begin(), g.outputs().end());
  for (size_t i = 0; i < m.outputs.size(); ++i) {
    ValueId old_v = m.outputs[i];
    ValueId new_v = map[r.outputs()[i]];
    redirected[old_v] = new_v;
    if (graph_outputs.count(old_v)) {
      // Graph outputs keep their names; a replacement that is an input, a
      // constant or another output gets an Identity to carry the name.
      bool fresh_node_output = g.value(new_v).producer >= 0 && !graph_outputs.count(new_v) &&
                               g.value(new_v).producer >= host_nodes;
      if (!fresh_node_output) new_v = g.add(OpKind::kIdentity, {new_v}, {}, fresh_node_name(g, base, 1));
      std::string name = g.value(old_v).name;
      g.replace_all_uses(old_v, new_v);
      g.rename_value(old_v, fresh_value_name(g, name + ".old"));
      g.rename_value(new_v, name);
    } else {
      g.replace_all_uses(old_v, new_v);
    }
  }
}

}  // namespace

Graph apply_mutation(const Graph& host, const Mutation& m) { return apply_mutations(host, {m}); }

Graph apply_mutations(const Graph& host, const std::vector<Mutation>& ms) {
  Graph g = host;
  std::unordered_map<ValueId, ValueId> redirected;
  for (const Mutation& m : ms) splice(g, host.num_nodes(), m, redirected);
  g.remove_dead();
  return g;
}

}  // namespace tessera::mutator
