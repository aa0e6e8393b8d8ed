#include "mutator/sharding/structure.h"

#include <algorithm>
#include <map>

#include "graph/hash.h"

namespace tessera::mutator {
namespace {

uint64_t mix(uint64_t h, uint64_t v) { return hash_combine(h, v); }
uint64_t text_hash(const std::string& s) { return fnv1a(s.data(), s.size()); }

// A constant that is a parameter of the op (a scalar, or a short integer
// list: a shape, axes) rather than data.
bool is_parameter(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  if (!val.constant) return false;
  DType t = val.type.dtype;
  bool integral = t == DType::kI64 || t == DType::kI32 || t == DType::kBool;
  return val.constant->numel() == 1 || (integral && val.constant->numel() <= 64);
}

uint64_t input_label(const Graph& g, ValueId v) {
  if (v == kNoValue) return 7;
  const Value& val = g.value(v);
  uint64_t h = text_hash(type_str(val.type));
  if (is_parameter(g, v)) {
    const uint8_t* d = val.constant->data();
    for (size_t i = 0; d && i < val.constant->nbytes(); ++i) h = mix(h, d[i]);
    return mix(h, 1);
  }
  return mix(h, val.constant ? 2 : 3);
}

}  // namespace

std::vector<uint64_t> role_labels(const Graph& g, int rounds) {
  auto nn = static_cast<size_t>(g.num_nodes());
  std::vector<uint64_t> label(nn);
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    uint64_t h = mix(static_cast<uint64_t>(node.kind) + 11, node.attrs.hash());
    for (ValueId v : node.inputs) h = mix(h, input_label(g, v));
    for (ValueId v : node.outputs) h = mix(h, text_hash(type_str(g.type(v))));
    label[static_cast<size_t>(n)] = h;
  }
  std::vector<std::vector<NodeId>> users = g.users();
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint64_t> next(nn);
    for (NodeId n = 0; n < g.num_nodes(); ++n) {
      const Node& node = g.node(n);
      uint64_t h = label[static_cast<size_t>(n)];
      for (ValueId v : node.inputs) {
        NodeId p = v == kNoValue ? -1 : g.value(v).producer;
        h = mix(h, p < 0 ? 5 : mix(label[static_cast<size_t>(p)], static_cast<uint64_t>(g.value(v).producer_output)));
      }
      std::vector<uint64_t> readers;
      for (size_t o = 0; o < node.outputs.size(); ++o)
        for (NodeId u : users[static_cast<size_t>(node.outputs[o])])
          readers.push_back(mix(label[static_cast<size_t>(u)], o));
      std::sort(readers.begin(), readers.end());
      for (uint64_t x : readers) h = mix(h, x);
      next[static_cast<size_t>(n)] = h;
    }
    label = std::move(next);
  }
  return label;
}

std::vector<Role> value_roles(const Graph& g, const std::vector<ValueId>& values) {
  std::vector<uint64_t> label = role_labels(g);
  std::vector<std::vector<NodeId>> users = g.users();
  // Key: the readers' labels and slots, the value's type. Equality check:
  // the first reader's kind and attributes and the type, compared exactly.
  std::map<std::vector<uint64_t>, std::vector<size_t>> by_key;
  std::vector<Role> roles;
  for (ValueId v : values) {
    const std::vector<NodeId>& us = users[static_cast<size_t>(v)];
    if (us.empty()) continue;
    std::vector<uint64_t> key{text_hash(type_str(g.type(v))), g.value(v).constant ? 1u : 0u};
    std::vector<uint64_t> reads;
    int first_slot = 0;
    for (NodeId u : us) {
      const Node& node = g.node(u);
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (node.inputs[i] == v) {
          reads.push_back(mix(label[static_cast<size_t>(u)], i));
          if (u == us[0] && reads.size() == 1) first_slot = static_cast<int>(i);
        }
    }
    std::sort(reads.begin(), reads.end());
    key.insert(key.end(), reads.begin(), reads.end());
    std::vector<size_t>& candidates = by_key[key];
    bool placed = false;
    for (size_t c : candidates) {
      Role& r = roles[c];
      const Node& a = g.node(r.reader);
      const Node& b = g.node(us[0]);
      if (a.kind == b.kind && a.attrs == b.attrs && r.slot == first_slot &&
          g.type(r.values[0]) == g.type(v)) {
        r.values.push_back(v);
        placed = true;
        break;
      }
    }
    if (placed) continue;
    candidates.push_back(roles.size());
    roles.push_back({{v}, us[0], first_slot, ""});
  }
  for (Role& r : roles)
    r.label = std::string(op_name(g.node(r.reader).kind)) + " in" + std::to_string(r.slot) + " " +
              type_str(g.type(r.values[0])) + (r.values.size() > 1 ? " (x" + std::to_string(r.values.size()) + ")" : "");
  return roles;
}

std::vector<Role> weight_roles(const Graph& g) {
  std::vector<ValueId> weights;
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).constant && g.type(v).rank() >= 2 && !is_parameter(g, v)) weights.push_back(v);
  return value_roles(g, weights);
}

}  // namespace tessera::mutator
