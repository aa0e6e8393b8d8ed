#include "graph/graph.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

#include "graph/error.h"

namespace tessera {

ValueId Graph::new_value(std::string name, TensorType type) {
  if (name.empty()) name = unique_name("v");
  if (name_index_.count(name))
    TESSERA_THROW(ErrorKind::kInvalidGraph, "value name '" << name << "' is defined twice");
  ValueId id = static_cast<ValueId>(values_.size());
  name_index_[name] = id;
  values_.push_back(Value{std::move(name), std::move(type), -1, 0, std::nullopt});
  return id;
}

std::string Graph::unique_name(const std::string& base) {
  std::string name;
  do {
    name = base + "_" + std::to_string(name_counter_++);
  } while (name_index_.count(name));
  return name;
}

void Graph::rename_value(ValueId v, const std::string& name) {
  Value& val = values_.at(static_cast<size_t>(v));
  if (val.name == name) return;
  if (name_index_.count(name))
    TESSERA_THROW(ErrorKind::kInvalidGraph, "value name '" << name << "' is defined twice");
  name_index_.erase(val.name);
  name_index_[name] = v;
  val.name = name;
}

std::optional<ValueId> Graph::find_value(const std::string& name) const {
  auto it = name_index_.find(name);
  if (it == name_index_.end()) return std::nullopt;
  return it->second;
}

ValueId Graph::add_input(const std::string& name, TensorType type) {
  shape_numel(type.shape);  // rejects negative dims
  ValueId v = new_value(name, std::move(type));
  inputs_.push_back(v);
  return v;
}

ValueId Graph::add_constant(const std::string& name, Tensor data) {
  TESSERA_CHECK(data.defined(), "constant '" << name << "' has no data");
  ValueId v = new_value(name, data.type());
  values_[v].constant = std::move(data);
  return v;
}

std::vector<TensorType> infer_node_types(const Graph& g, const Node& node) {
  const OpDef& def = op_def(node.kind);
  if (!def.infer)
    throw Error(ErrorKind::kUnsupported, "op has no shape inference", {"", node.name, op_name(node.kind)});
  int n = static_cast<int>(node.inputs.size());
  if (n < def.min_inputs || (def.max_inputs >= 0 && n > def.max_inputs)) {
    std::string range = def.max_inputs < 0 ? std::to_string(def.min_inputs) + " or more"
                        : def.min_inputs == def.max_inputs
                            ? std::to_string(def.min_inputs)
                            : std::to_string(def.min_inputs) + " to " + std::to_string(def.max_inputs);
    throw Error(ErrorKind::kInvalidGraph,
                "takes " + range + " inputs, got " + std::to_string(n),
                {"", node.name, op_name(node.kind)});
  }
  InferContext ctx{node, {}, {}, {}};
  for (ValueId in : node.inputs) {
    bool present = in != kNoValue;
    ctx.present.push_back(present);
    ctx.inputs.push_back(present ? g.type(in) : TensorType{DType::kF32, {}});
    ctx.constants.push_back(present && g.value(in).constant ? &*g.value(in).constant : nullptr);
  }
  for (int i = 0; i < def.min_inputs && i < n; ++i)
    if (!ctx.present[i])
      throw Error(ErrorKind::kInvalidGraph, "required input " + std::to_string(i) + " is missing",
                  {"", node.name, op_name(node.kind)});
  try {
    return def.infer(ctx);
  } catch (const Error& e) {
    throw e.with_context({"", node.name, op_name(node.kind)});
  }
}

NodeId Graph::add_node(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, std::string name,
                       std::vector<std::string> output_names) {
  if (name.empty()) name = op_name(kind) + std::string("_") + std::to_string(nodes_.size());
  for (ValueId in : inputs)
    TESSERA_CHECK(in == kNoValue || (in >= 0 && in < num_values()), "node " << name << " reads value " << in);
  try {
    validate_attrs(kind, attrs);
  } catch (const Error& e) {
    throw e.with_context({"", name, op_name(kind)});
  }
  Node node{kind, name, std::move(attrs), std::move(inputs), {}};
  std::vector<TensorType> types = infer_node_types(*this, node);
  const OpDef& def = op_def(kind);
  int nout = static_cast<int>(types.size());
  TESSERA_CHECK(nout >= def.min_outputs && (def.max_outputs < 0 || nout <= def.max_outputs),
                name << " inferred " << nout << " outputs");
  NodeId id = static_cast<NodeId>(nodes_.size());
  for (int i = 0; i < nout; ++i) {
    std::string out_name = i < static_cast<int>(output_names.size()) ? output_names[i] : "";
    if (out_name.empty()) out_name = name_index_.count(name + ":" + std::to_string(i)) ? "" : name + ":" + std::to_string(i);
    ValueId v = new_value(out_name, types[i]);
    values_[v].producer = id;
    values_[v].producer_output = i;
    node.outputs.push_back(v);
  }
  nodes_.push_back(std::move(node));
  return id;
}

ValueId Graph::add(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, std::string name) {
  NodeId n = add_node(kind, std::move(inputs), std::move(attrs), std::move(name));
  TESSERA_CHECK(nodes_[n].outputs.size() >= 1, "op has no outputs");
  return nodes_[n].outputs[0];
}

void Graph::replace_all_uses(ValueId from, ValueId to) {
  for (Node& n : nodes_)
    for (ValueId& in : n.inputs)
      if (in == from) in = to;
  for (ValueId& out : outputs_)
    if (out == from) out = to;
}

std::vector<std::vector<NodeId>> Graph::users() const {
  std::vector<std::vector<NodeId>> u(values_.size());
  for (NodeId n = 0; n < num_nodes(); ++n)
    for (ValueId in : nodes_[n].inputs)
      if (in != kNoValue) u[in].push_back(n);
  return u;
}

std::vector<NodeId> Graph::topo_order() const {
  std::vector<int> pending(nodes_.size(), 0);
  std::vector<std::vector<NodeId>> consumers(nodes_.size());
  for (NodeId n = 0; n < num_nodes(); ++n) {
    for (ValueId in : nodes_[n].inputs) {
      if (in == kNoValue) continue;
      NodeId p = values_[in].producer;
      if (p >= 0) {
        ++pending[n];
        consumers[p].push_back(n);
      }
    }
  }
  // Min-heap on node id keeps the order stable for graphs already sorted.
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> ready;
  for (NodeId n = 0; n < num_nodes(); ++n)
    if (pending[n] == 0) ready.push(n);
  std::vector<NodeId> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    NodeId n = ready.top();
    ready.pop();
    order.push_back(n);
    for (NodeId c : consumers[n])
      if (--pending[c] == 0) ready.push(c);
  }
  if (order.size() != nodes_.size()) {
    for (NodeId n = 0; n < num_nodes(); ++n)
      if (pending[n] > 0)
        throw Error(ErrorKind::kInvalidGraph, "the graph has a cycle through this node",
                    {"", nodes_[n].name, op_name(nodes_[n].kind)});
  }
  return order;
}

bool Graph::remove_dead() {
  std::vector<bool> live_value(values_.size(), false), live_node(nodes_.size(), false);
  std::vector<ValueId> stack(outputs_.begin(), outputs_.end());
  while (!stack.empty()) {
    ValueId v = stack.back();
    stack.pop_back();
    if (v == kNoValue || live_value[v]) continue;
    live_value[v] = true;
    NodeId p = values_[v].producer;
    if (p >= 0 && !live_node[p]) {
      live_node[p] = true;
      for (ValueId in : nodes_[p].inputs) stack.push_back(in);
      for (ValueId out : nodes_[p].outputs) live_value[out] = true;  // siblings stay defined
    }
  }
  for (ValueId in : inputs_) live_value[in] = true;
  bool changed = false;
  std::vector<ValueId> value_map(values_.size(), kNoValue);
  std::vector<Value> new_values;
  for (ValueId v = 0; v < num_values(); ++v) {
    if (!live_value[v]) { changed = true; continue; }
    value_map[v] = static_cast<ValueId>(new_values.size());
    new_values.push_back(std::move(values_[v]));
  }
  std::vector<NodeId> node_map(nodes_.size(), -1);
  std::vector<Node> new_nodes;
  for (NodeId n = 0; n < num_nodes(); ++n) {
    if (!live_node[n]) { changed = true; continue; }
    node_map[n] = static_cast<NodeId>(new_nodes.size());
    new_nodes.push_back(std::move(nodes_[n]));
  }
  if (!changed) {
    values_ = std::move(new_values);
    nodes_ = std::move(new_nodes);
    return false;
  }
  auto remap = [&](ValueId v) { return v == kNoValue ? kNoValue : value_map[v]; };
  for (Node& n : new_nodes) {
    for (ValueId& in : n.inputs) in = remap(in);
    for (ValueId& out : n.outputs) out = remap(out);
  }
  for (Value& v : new_values)
    if (v.producer >= 0) v.producer = node_map[v.producer];
  for (ValueId& v : inputs_) v = remap(v);
  for (ValueId& v : outputs_) v = remap(v);
  values_ = std::move(new_values);
  nodes_ = std::move(new_nodes);
  name_index_.clear();
  for (ValueId v = 0; v < num_values(); ++v) name_index_[values_[v].name] = v;
  return true;
}

Graph Graph::extract(const std::vector<NodeId>& nodes) const {
  std::unordered_set<NodeId> inside(nodes.begin(), nodes.end());
  std::vector<NodeId> order;
  for (NodeId n : topo_order())
    if (inside.count(n)) order.push_back(n);
  Graph sub;
  sub.name = name + "_sub";
  std::vector<ValueId> map(values_.size(), kNoValue);
  auto import_value = [&](ValueId v) {
    if (v == kNoValue || map[v] != kNoValue) return;
    const Value& val = values_[v];
    map[v] = val.constant ? sub.add_constant(val.name, *val.constant) : sub.add_input(val.name, val.type);
  };
  for (NodeId n : order) {
    const Node& node = nodes_[n];
    std::vector<ValueId> ins;
    for (ValueId in : node.inputs) {
      import_value(in);
      ins.push_back(in == kNoValue ? kNoValue : map[in]);
    }
    std::vector<std::string> out_names;
    for (ValueId out : node.outputs) out_names.push_back(values_[out].name);
    NodeId id = sub.add_node(node.kind, ins, node.attrs, node.name, out_names);
    for (size_t i = 0; i < node.outputs.size(); ++i) map[node.outputs[i]] = sub.node(id).outputs[i];
  }
  std::vector<bool> used_outside(values_.size(), false);
  for (NodeId n = 0; n < num_nodes(); ++n)
    if (!inside.count(n))
      for (ValueId in : nodes_[n].inputs)
        if (in != kNoValue) used_outside[in] = true;
  for (ValueId v : outputs_) used_outside[v] = true;
  std::vector<ValueId> outs;
  for (NodeId n : order)
    for (ValueId out : nodes_[n].outputs)
      if (used_outside[out]) outs.push_back(map[out]);
  sub.set_outputs(outs);
  return sub;
}

void Graph::validate() const {
  std::unordered_set<std::string> names;
  for (ValueId v = 0; v < num_values(); ++v) {
    const Value& val = values_[v];
    TESSERA_CHECK(names.insert(val.name).second, "value name '" << val.name << "' is defined twice");
    if (val.producer >= 0) {
      TESSERA_CHECK(val.producer < num_nodes(), "value " << val.name << " has producer out of range");
      const Node& p = nodes_[val.producer];
      TESSERA_CHECK(val.producer_output < static_cast<int32_t>(p.outputs.size()) &&
                        p.outputs[val.producer_output] == v,
                    "value " << val.name << " disagrees with its producer " << p.name);
    }
  }
  for (const Node& n : nodes_) {
    for (ValueId in : n.inputs)
      TESSERA_CHECK(in == kNoValue || (in >= 0 && in < num_values()), "node " << n.name << " reads a bad value id");
    std::vector<TensorType> types = infer_node_types(*this, n);
    TESSERA_CHECK(types.size() == n.outputs.size(), "node " << n.name << " output count changed");
    for (size_t i = 0; i < types.size(); ++i)
      TESSERA_CHECK(types[i] == values_[n.outputs[i]].type,
                    "node " << n.name << " output " << i << " has type " << type_str(values_[n.outputs[i]].type)
                            << " but infers " << type_str(types[i]));
  }
  for (ValueId v : outputs_) TESSERA_CHECK(v >= 0 && v < num_values(), "graph output id out of range");
  topo_order();
}

int64_t Graph::parameter_count() const {
  int64_t n = 0;
  for (const Value& v : values_)
    if (v.constant && is_float(v.type.dtype)) n += v.type.numel();
  return n;
}

int64_t Graph::parameter_bytes() const {
  int64_t n = 0;
  for (const Value& v : values_)
    if (v.constant) n += v.type.nbytes();
  return n;
}

}  // namespace tessera
