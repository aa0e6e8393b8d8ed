// Internal to onnx_import: the state of one import (the graph being built and
// the ONNX names bound so far) and the view of one ONNX node that the per-op
// converters (op_converters.cc) work through. A converter reads inputs and
// attributes, turns ONNX's opset-dependent forms into IR attributes, and emits
// IR nodes; emitted nodes whose inputs are all constants are folded on the
// spot with the reference interpreter.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/error.h"
#include "graph/graph.h"
#include "onnx/onnx_pb.h"
#include "onnx_import/tensor_proto.h"

namespace tessera::onnx_import {

// Folding never adds more than this many bytes for one node beyond what its
// inputs already hold (ConstantOfShape/Expand/Tile of a huge shape stay nodes),
// so a small model cannot turn into a huge one at import.
inline constexpr int64_t kMaxFoldGrowthBytes = int64_t{64} << 20;

struct ImportState {
  Graph& graph;
  int64_t opset = 0;
  ExternalData external;  // the model's folder and its mapped external-data files
  std::unordered_map<std::string, ValueId> values;    // ONNX value name -> IR value
  std::unordered_set<std::string> onnx_value_names;   // every name the model uses
  std::unordered_set<std::string> graph_outputs;      // ONNX graph output names
  std::unordered_set<std::string> read_names;         // names some node or the graph output reads
  std::unordered_set<std::string> taken_node_names;
  // Names the scopes being imported define (the model's graph, then each
  // inlined If branch's names as renamed): a branch renames what it shares.
  std::unordered_set<std::string> reserved_names;
  int64_t counter = 0;

  // A value name that neither the graph nor the model uses.
  std::string fresh_value_name(const std::string& base);
};

class NodeImporter {
 public:
  NodeImporter(ImportState& state, const onnx::NodeProto& proto, std::string name);

  const onnx::NodeProto& proto() const { return proto_; }
  const std::string& name() const { return name_; }
  const std::string& op_type() const { return proto_.op_type(); }
  int64_t opset() const { return state_.opset; }
  const ImportState& state() const { return state_; }
  Graph& graph() { return state_.graph; }

  // Inputs. Omitted optional inputs are absent or have an empty name.
  int num_inputs() const { return proto_.input_size(); }
  bool has_input(int i) const { return i < proto_.input_size() && !proto_.input(i).empty(); }
  ValueId input(int i) const;        // throws if absent
  ValueId input_or_none(int i) const;  // kNoValue if absent
  const TensorType& input_type(int i) const { return state_.graph.type(input(i)); }
  const Tensor* constant(int i) const;  // nullptr unless the input is a constant
  // The input's data as ints / one float; it must be a constant. `what` names
  // the input in the error ("shape").
  std::vector<int64_t> const_ints(int i, const char* what) const;
  double const_scalar(int i, const char* what) const;
  const Tensor& const_tensor(int i, const char* what) const;

  // Attributes. Each read marks the attribute as understood; finish() rejects
  // any the converter did not read.
  bool has_attr(const std::string& name) const;
  int64_t attr_int(const std::string& name, int64_t def);
  double attr_float(const std::string& name, double def);
  std::string attr_string(const std::string& name, const std::string& def);
  std::optional<std::vector<int64_t>> attr_ints(const std::string& name);
  std::optional<std::vector<double>> attr_floats(const std::string& name);
  std::optional<Tensor> attr_tensor(const std::string& name);
  void ignore_attr(const std::string& name) { consumed_.insert(name); }
  // Copies every ONNX attribute whose name is in the IR schema of `kind`.
  void copy_schema_attrs(OpKind kind, Attrs& attrs);

  // Emits an IR node named after the ONNX node whose outputs become the ONNX
  // node's outputs (folded into constants when possible).
  void emit_outputs(OpKind kind, std::vector<ValueId> inputs, Attrs attrs = {});
  // Emits an intermediate single-output node (chains of binary ops).
  ValueId emit_temp(OpKind kind, std::vector<ValueId> inputs, Attrs attrs = {});
  ValueId add_constant(Tensor t);
  // Makes ONNX output i an alias of `v` (Identity, Dropout, no-op reductions).
  void bind_output(int i, ValueId v);

  void finish() const;
  [[noreturn]] void fail(ErrorKind kind, const std::string& message) const;

 private:
  std::vector<ValueId> emit(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, const std::string& node_name,
                            const std::vector<std::string>& out_names);
  std::optional<std::vector<ValueId>> try_fold(OpKind kind, const std::vector<ValueId>& inputs, const Attrs& attrs,
                                               const std::string& node_name, const std::vector<std::string>& out_names);
  const onnx::AttributeProto* find_attr(const std::string& name) const;
  const onnx::AttributeProto* typed_attr(const std::string& name, onnx::AttributeProto::AttributeType type);

  ImportState& state_;
  const onnx::NodeProto& proto_;
  std::string name_;
  std::set<std::string> consumed_;
  int temps_ = 0;
};

// Converts one ONNX node of the default domain; throws Error(kUnsupported) for
// op types Tessera does not know.
void convert_node(NodeImporter& n);

}  // namespace tessera::onnx_import
