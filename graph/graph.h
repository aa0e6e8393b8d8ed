// The dataflow graph: values (graph inputs, constants, node outputs) and nodes.
// Every value has a static type. Nodes are appended with add_node, which
// validates attributes and runs shape inference, so a Graph is always typed.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <string>
#include <vector>

#include "graph/attrs.h"
#include "graph/op.h"
#include "graph/tensor.h"

namespace tessera {

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr ValueId kNoValue = -1;  // an omitted optional input

struct Value {
  std::string name;
  TensorType type;
  NodeId producer = -1;      // -1 for graph inputs and constants
  int32_t producer_output = 0;
  std::optional<Tensor> constant;  // data, for constants

  bool is_constant() const { return constant.has_value(); }
};

struct Node {
  OpKind kind;
  std::string name;
  Attrs attrs;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
};

class Graph {
 public:
  std::string name = "graph";

  ValueId add_input(const std::string& name, TensorType type);
  ValueId add_constant(const std::string& name, Tensor data);
  // Validates attributes (filling defaults), infers output types and appends
  // the node. Output names default to "<node name>:<i>". Errors name the node.
  NodeId add_node(OpKind kind, std::vector<ValueId> inputs, Attrs attrs = {},
                  std::string name = "", std::vector<std::string> output_names = {});
  // Like add_node for single-output ops; returns the output value.
  ValueId add(OpKind kind, std::vector<ValueId> inputs, Attrs attrs = {}, std::string name = "");
  void set_outputs(std::vector<ValueId> outputs) { outputs_ = std::move(outputs); }
  // Renames a value; throws Error(kInvalidGraph) if the name is taken.
  void rename_value(ValueId v, const std::string& name);

  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  const Value& value(ValueId v) const { return values_.at(static_cast<size_t>(v)); }
  const Node& node(NodeId n) const { return nodes_.at(static_cast<size_t>(n)); }
  Node& mutable_node(NodeId n) { return nodes_.at(static_cast<size_t>(n)); }
  int32_t num_values() const { return static_cast<int32_t>(values_.size()); }
  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  const TensorType& type(ValueId v) const { return value(v).type; }
  std::optional<ValueId> find_value(const std::string& name) const;

  // Points every use of `from` (node inputs and graph outputs) at `to`.
  void replace_all_uses(ValueId from, ValueId to);
  // users()[v] = nodes that read value v (a node appears once per use).
  std::vector<std::vector<NodeId>> users() const;
  // Nodes in an order where producers come first (stable: ties keep insertion
  // order). Throws Error(kInvalidGraph) naming a node on a cycle.
  std::vector<NodeId> topo_order() const;
  // Removes nodes whose outputs reach no graph output and values nothing
  // uses (graph inputs stay). Renumbers nodes and values; returns whether
  // anything was removed.
  bool remove_dead();
  // The graph made of `nodes`: its inputs are the values those nodes read but
  // do not produce (constants stay constants), its outputs the values they
  // produce that other nodes or the graph's outputs read.
  Graph extract(const std::vector<NodeId>& nodes) const;
  // Checks invariants (ids in range, unique names, producers consistent,
  // types match shape inference, acyclic). Throws Error on violation.
  void validate() const;

  int64_t parameter_count() const;  // elements of float constants
  int64_t parameter_bytes() const;

 private:
  ValueId new_value(std::string name, TensorType type);
  std::string unique_name(const std::string& base);

  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::unordered_map<std::string, ValueId> name_index_;
  int64_t name_counter_ = 0;
};

// Runs the kind's shape inference for a node whose inputs live in `g`.
std::vector<TensorType> infer_node_types(const Graph& g, const Node& node);

}  // namespace tessera
