#include "onnx_import/if_branch.h"

#include <unordered_map>

#include "onnx_import/tensor_proto.h"

namespace tessera::onnx_import {

namespace {

bool is_graph_attr(const onnx::AttributeProto& a) {
  return a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS || a.has_g() ||
         a.graphs_size() > 0;
}

template <typename F>
void for_each_subgraph(const onnx::NodeProto& node, F&& f) {
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (!is_graph_attr(a)) continue;
    if (a.has_g()) f(a.g());
    for (const onnx::GraphProto& g : a.graphs()) f(g);
  }
}

// Names a graph reads that it does not define (inputs, initializers and
// node outputs are its own), through its nested subgraphs too.
void outer_reads_of(const onnx::GraphProto& g, std::unordered_set<std::string>& out) {
  std::unordered_set<std::string> own, reads;
  for (const auto& vi : g.input()) own.insert(vi.name());
  for (const auto& t : g.initializer()) own.insert(t.name());
  for (const auto& node : g.node()) {
    for (const std::string& s : node.output()) own.insert(s);
    for (const std::string& s : node.input())
      if (!s.empty()) reads.insert(s);
    for (const std::string& s : subgraph_reads(node)) reads.insert(s);
  }
  for (const auto& vi : g.output()) reads.insert(vi.name());
  for (const std::string& s : reads)
    if (!own.count(s)) out.insert(s);
}

void names_of(const onnx::GraphProto& g, std::unordered_set<std::string>& defined, std::unordered_set<std::string>& read) {
  for (const auto& vi : g.input()) defined.insert(vi.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& node : g.node()) {
    for (const std::string& s : node.output()) defined.insert(s);
    for (const std::string& s : node.input()) read.insert(s);
    subgraph_names(node, defined, read);
  }
  for (const auto& vi : g.output()) read.insert(vi.name());
}

using Renames = std::unordered_map<std::string, std::string>;

std::string renamed(const Renames& r, const std::string& s) {
  auto it = r.find(s);
  return it == r.end() ? s : it->second;
}

// Applies the renames to what a nested subgraph reads from the branch.
void rename_reads(onnx::GraphProto& g, const Renames& r) {
  for (onnx::NodeProto& node : *g.mutable_node()) {
    for (std::string& s : *node.mutable_input()) s = renamed(r, s);
    for (onnx::AttributeProto& a : *node.mutable_attribute()) {
      if (a.has_g()) rename_reads(*a.mutable_g(), r);
      for (onnx::GraphProto& sub : *a.mutable_graphs()) rename_reads(sub, r);
    }
  }
  for (onnx::ValueInfoProto& vi : *g.mutable_output()) vi.set_name(renamed(r, vi.name()));
}

[[noreturn]] void fail(const onnx::NodeProto& proto, const std::string& name, ErrorKind kind, const std::string& msg) {
  throw Error(kind, msg, {"", name, proto.op_type()});
}

}  // namespace

std::vector<std::string> subgraph_reads(const onnx::NodeProto& node) {
  std::unordered_set<std::string> out;
  for_each_subgraph(node, [&](const onnx::GraphProto& g) { outer_reads_of(g, out); });
  return {out.begin(), out.end()};
}

void subgraph_names(const onnx::NodeProto& node, std::unordered_set<std::string>& defined,
                    std::unordered_set<std::string>& read) {
  for_each_subgraph(node, [&](const onnx::GraphProto& g) { names_of(g, defined, read); });
}

void import_if(ImportState& state, const onnx::NodeProto& proto, const std::string& name,
               const std::function<void(const onnx::GraphProto&)>& import_graph) {
  if (proto.input_size() < 1 || proto.input(0).empty())
    fail(proto, name, ErrorKind::kInvalidGraph, "If has no condition input");
  const std::string& cond_name = proto.input(0);
  auto bound = state.values.find(cond_name);
  TESSERA_CHECK(bound != state.values.end(), "condition '" << cond_name << "' was not bound before its If");
  const Value& cond = state.graph.value(bound->second);
  if (!cond.constant) {
    bool is_input = false;
    for (ValueId v : state.graph.inputs()) is_input = is_input || v == bound->second;
    std::string way = is_input ? "fix it with --input-value " + cond_name + "=0 or =1"
                               : "fix the inputs it is computed from with --input-value NAME=VALUE";
    fail(proto, name, ErrorKind::kUnsupported,
         "the condition '" + cond_name + "' is not a constant at import (Tessera plans one branch): " + way);
  }
  if (cond.constant->numel() != 1)
    fail(proto, name, ErrorKind::kInvalidGraph,
         "the condition '" + cond_name + "' must hold one value, got " + type_str(cond.constant->type()));
  const bool taken = cond.constant->get_double(0) != 0;
  const char* attr = taken ? "then_branch" : "else_branch";
  const onnx::GraphProto* chosen = nullptr;
  for (const onnx::AttributeProto& a : proto.attribute()) {
    if (a.name() != "then_branch" && a.name() != "else_branch")
      fail(proto, name, ErrorKind::kUnsupported, "attribute '" + a.name() + "' of If is not supported");
    if (a.name() == attr) {
      if (!a.has_g()) fail(proto, name, ErrorKind::kInvalidGraph, std::string("attribute '") + attr + "' is not a graph");
      chosen = &a.g();
    }
  }
  if (!chosen) fail(proto, name, ErrorKind::kInvalidGraph, std::string("If has no ") + attr);
  if (chosen->input_size() > 0)
    fail(proto, name, ErrorKind::kInvalidGraph, std::string(attr) + " declares inputs (an If's branches take none)");
  if (chosen->output_size() != proto.output_size())
    fail(proto, name, ErrorKind::kInvalidGraph,
         std::string(attr) + " has " + std::to_string(chosen->output_size()) + " outputs, the If " +
             std::to_string(proto.output_size()));

  // The names the branch defines, renamed where an enclosing scope has them
  // (optimum's branches name their outputs as the If's outputs).
  onnx::GraphProto branch = *chosen;
  Renames renames;
  auto claim = [&](const std::string& s) {
    if (s.empty() || renames.count(s)) return;
    bool clash = state.reserved_names.count(s) || state.values.count(s) || state.graph.find_value(s);
    std::string fresh = clash ? state.fresh_value_name(s) : s;
    state.reserved_names.insert(fresh);
    renames[s] = fresh;
  };
  for (const auto& t : branch.initializer()) claim(t.name());
  for (const auto& node : branch.node())
    for (const std::string& s : node.output()) claim(s);
  for (onnx::TensorProto& t : *branch.mutable_initializer()) t.set_name(renamed(renames, t.name()));
  for (onnx::NodeProto& node : *branch.mutable_node())
    for (std::string& s : *node.mutable_output()) s = renamed(renames, s);
  rename_reads(branch, renames);

  for (const onnx::TensorProto& t : branch.initializer()) {
    if (state.values.count(t.name()))
      fail(proto, name, ErrorKind::kInvalidGraph, "initializer '" + t.name() + "' of " + attr + " is defined twice");
    state.values[t.name()] = state.graph.add_constant(
        t.name(), tensor_from_proto(t, state.external, "initializer '" + t.name() + "' of " + attr));
  }
  import_graph(branch);

  // The branch's outputs are the If's.
  NodeImporter outputs(state, proto, name);
  for (int k = 0; k < proto.output_size(); ++k) {
    if (proto.output(k).empty()) continue;
    auto it = state.values.find(branch.output(k).name());
    if (it == state.values.end())
      fail(proto, name, ErrorKind::kInvalidGraph,
           std::string(attr) + " output '" + branch.output(k).name() + "' is not defined");
    outputs.bind_output(k, it->second);
  }
}

}  // namespace tessera::onnx_import
