#include "onnx_import/node_importer.h"

#include <map>

#include "graph/interpreter.h"
#include "onnx_import/tensor_proto.h"

namespace tessera::onnx_import {

std::string ImportState::fresh_value_name(const std::string& base) {
  std::string name;
  do {
    name = base + "_" + std::to_string(counter++);
  } while (onnx_value_names.count(name) || graph.find_value(name));
  return name;
}

NodeImporter::NodeImporter(ImportState& state, const onnx::NodeProto& proto, std::string name)
    : state_(state), proto_(proto), name_(std::move(name)) {}

void NodeImporter::fail(ErrorKind kind, const std::string& message) const {
  throw Error(kind, message, {"", name_, proto_.op_type()});
}

ValueId NodeImporter::input(int i) const {
  if (!has_input(i)) fail(ErrorKind::kInvalidGraph, "required input " + std::to_string(i) + " is missing");
  auto it = state_.values.find(proto_.input(i));
  TESSERA_CHECK(it != state_.values.end(), "input '" << proto_.input(i) << "' was not bound before its reader");
  return it->second;
}

ValueId NodeImporter::input_or_none(int i) const { return has_input(i) ? input(i) : kNoValue; }

const Tensor* NodeImporter::constant(int i) const {
  if (!has_input(i)) return nullptr;
  const Value& v = state_.graph.value(input(i));
  return v.constant ? &*v.constant : nullptr;
}

const Tensor& NodeImporter::const_tensor(int i, const char* what) const {
  const Tensor* t = constant(i);
  if (!t)
    fail(ErrorKind::kUnsupported, std::string("input '") + what + "' of " + proto_.op_type() +
                                      " must be a constant (it is computed at run time from '" +
                                      (has_input(i) ? proto_.input(i) : "?") + "')");
  return *t;
}

std::vector<int64_t> NodeImporter::const_ints(int i, const char* what) const {
  const Tensor& t = const_tensor(i, what);
  if (!is_integer(t.dtype()))
    fail(ErrorKind::kInvalidGraph, std::string("input '") + what + "' must be an integer tensor, got " +
                                       type_str(t.type()));
  return t.to_ints();
}

double NodeImporter::const_scalar(int i, const char* what) const {
  const Tensor& t = const_tensor(i, what);
  if (t.numel() != 1)
    fail(ErrorKind::kInvalidGraph, std::string("input '") + what + "' must hold one value, got " + type_str(t.type()));
  return t.get_double(0);
}

const onnx::AttributeProto* NodeImporter::find_attr(const std::string& name) const {
  for (const onnx::AttributeProto& a : proto_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool NodeImporter::has_attr(const std::string& name) const { return find_attr(name) != nullptr; }

const onnx::AttributeProto* NodeImporter::typed_attr(const std::string& name,
                                                     onnx::AttributeProto::AttributeType type) {
  const onnx::AttributeProto* a = find_attr(name);
  if (!a) return nullptr;
  consumed_.insert(name);
  if (a->ref_attr_name().size())
    fail(ErrorKind::kUnsupported, "attribute '" + name + "' refers to a function attribute");
  if (a->type() != type && a->type() != onnx::AttributeProto::UNDEFINED)
    fail(ErrorKind::kInvalidGraph, "attribute '" + name + "' must be " + onnx::AttributeProto_AttributeType_Name(type) +
                                       ", got " + onnx::AttributeProto_AttributeType_Name(a->type()));
  return a;
}

int64_t NodeImporter::attr_int(const std::string& name, int64_t def) {
  const auto* a = typed_attr(name, onnx::AttributeProto::INT);
  return a ? a->i() : def;
}

double NodeImporter::attr_float(const std::string& name, double def) {
  const auto* a = typed_attr(name, onnx::AttributeProto::FLOAT);
  return a ? a->f() : def;
}

std::string NodeImporter::attr_string(const std::string& name, const std::string& def) {
  const auto* a = typed_attr(name, onnx::AttributeProto::STRING);
  return a ? a->s() : def;
}

std::optional<std::vector<int64_t>> NodeImporter::attr_ints(const std::string& name) {
  const auto* a = typed_attr(name, onnx::AttributeProto::INTS);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::optional<std::vector<double>> NodeImporter::attr_floats(const std::string& name) {
  const auto* a = typed_attr(name, onnx::AttributeProto::FLOATS);
  if (!a) return std::nullopt;
  return std::vector<double>(a->floats().begin(), a->floats().end());
}

std::optional<Tensor> NodeImporter::attr_tensor(const std::string& name) {
  const auto* a = typed_attr(name, onnx::AttributeProto::TENSOR);
  if (!a) return std::nullopt;
  return tensor_from_proto(a->t(), state_.external, "attribute '" + name + "'");
}

void NodeImporter::copy_schema_attrs(OpKind kind, Attrs& attrs) {
  for (const AttrSpec& spec : op_def(kind).attrs) {
    if (!has_attr(spec.name) || attrs.has(spec.name)) continue;
    switch (spec.type) {
      case AttrType::kInt: attrs.set(spec.name, attr_int(spec.name, 0)); break;
      case AttrType::kFloat: attrs.set(spec.name, attr_float(spec.name, 0)); break;
      case AttrType::kString: attrs.set(spec.name, attr_string(spec.name, "")); break;
      case AttrType::kInts: attrs.set(spec.name, *attr_ints(spec.name)); break;
      case AttrType::kFloats: attrs.set(spec.name, *attr_floats(spec.name)); break;
      case AttrType::kTensor: attrs.set(spec.name, *attr_tensor(spec.name)); break;
    }
  }
}

void NodeImporter::finish() const {
  for (const onnx::AttributeProto& a : proto_.attribute())
    if (!consumed_.count(a.name()))
      fail(ErrorKind::kUnsupported, "attribute '" + a.name() + "' of " + proto_.op_type() + " is not supported");
}

ValueId NodeImporter::add_constant(Tensor t) {
  return state_.graph.add_constant(state_.fresh_value_name(name_ + "/const"), std::move(t));
}

std::optional<std::vector<ValueId>> NodeImporter::try_fold(OpKind kind, const std::vector<ValueId>& inputs,
                                                           const Attrs& attrs, const std::string& node_name,
                                                           const std::vector<std::string>& out_names) {
  if (op_def(kind).is_collective()) return std::nullopt;  // needs a mesh
  Graph& g = state_.graph;
  int64_t in_bytes = 0;
  bool wide = false;
  for (ValueId v : inputs) {
    if (v == kNoValue) continue;
    if (!g.value(v).constant) return std::nullopt;
    in_bytes += g.type(v).nbytes();
    wide = wide || g.type(v).dtype == DType::kF64;
  }
  Graph tmp;
  std::vector<ValueId> tmp_inputs;
  // A value may feed several inputs (Concat(a, a), Sub(x, Identity(x))): add it once.
  std::map<ValueId, ValueId> tmp_of;
  for (ValueId v : inputs) {
    if (v != kNoValue && !tmp_of.count(v)) tmp_of[v] = tmp.add_constant(g.value(v).name, *g.value(v).constant);
    tmp_inputs.push_back(v == kNoValue ? kNoValue : tmp_of[v]);
  }
  NodeId id = tmp.add_node(kind, tmp_inputs, attrs, node_name);
  int64_t out_bytes = 0;
  for (ValueId out : tmp.node(id).outputs) {
    out_bytes += tmp.type(out).nbytes();
    wide = wide || tmp.type(out).dtype == DType::kF64;
  }
  if (out_bytes > in_bytes + kMaxFoldGrowthBytes) return std::nullopt;
  tmp.set_outputs(tmp.node(id).outputs);
  std::vector<Tensor> results = evaluate(tmp, {}, wide ? Precision::kF64 : Precision::kF32);
  std::vector<ValueId> outs;
  for (size_t i = 0; i < results.size(); ++i) {
    std::string out_name = i < out_names.size() && !out_names[i].empty() ? out_names[i]
                                                                         : state_.fresh_value_name(node_name);
    outs.push_back(g.add_constant(out_name, std::move(results[i])));
  }
  return outs;
}

std::vector<ValueId> NodeImporter::emit(OpKind kind, std::vector<ValueId> inputs, Attrs attrs,
                                        const std::string& node_name, const std::vector<std::string>& out_names) {
  if (auto folded = try_fold(kind, inputs, attrs, node_name, out_names)) return *folded;
  Graph& g = state_.graph;
  std::vector<std::string> names = out_names;
  // Unnamed outputs get names now, so that Graph never picks a name that a
  // later ONNX node defines.
  const OpDef& def = op_def(kind);
  size_t want = std::max<size_t>(names.size(), static_cast<size_t>(std::max(def.max_outputs, def.min_outputs)));
  names.resize(want);
  for (std::string& s : names)
    if (s.empty()) s = state_.fresh_value_name(node_name);
  NodeId id = g.add_node(kind, std::move(inputs), std::move(attrs), node_name, names);
  return g.node(id).outputs;
}

void NodeImporter::emit_outputs(OpKind kind, std::vector<ValueId> inputs, Attrs attrs) {
  std::vector<std::string> out_names(proto_.output().begin(), proto_.output().end());
  std::vector<ValueId> outs = emit(kind, std::move(inputs), std::move(attrs), name_, out_names);
  for (int i = 0; i < proto_.output_size(); ++i) {
    if (proto_.output(i).empty()) continue;
    if (i >= static_cast<int>(outs.size()))
      fail(ErrorKind::kUnsupported, "output " + std::to_string(i) + " ('" + proto_.output(i) + "') of " +
                                        proto_.op_type() + " is not supported");
    state_.values[proto_.output(i)] = outs[i];
  }
}

ValueId NodeImporter::emit_temp(OpKind kind, std::vector<ValueId> inputs, Attrs attrs) {
  std::string node_name = name_ + "/" + std::to_string(temps_++);
  return emit(kind, std::move(inputs), std::move(attrs), node_name, {state_.fresh_value_name(node_name)})[0];
}

void NodeImporter::bind_output(int i, ValueId v) {
  if (i >= proto_.output_size() || proto_.output(i).empty()) return;
  const std::string& name = proto_.output(i);
  Graph& g = state_.graph;
  const Value& val = g.value(v);
  if (!state_.graph_outputs.count(name) || val.name == name) {
    state_.values[name] = v;
    return;
  }
  // A graph output keeps its ONNX name: take over the value's name when it is
  // an internal one, otherwise copy the value under the output's name.
  bool is_graph_input = false;
  for (ValueId in : g.inputs()) is_graph_input = is_graph_input || in == v;
  if (val.constant) {
    state_.values[name] = g.add_constant(name, *val.constant);
  } else if (!is_graph_input && !state_.graph_outputs.count(val.name)) {
    g.rename_value(v, name);
    state_.values[name] = v;
  } else {
    NodeId id = g.add_node(OpKind::kIdentity, {v}, {}, name_, {name});
    state_.values[name] = g.node(id).outputs[0];
  }
}

}  // namespace tessera::onnx_import
