#include "graph/op.h"

#include <unordered_map>

#include "graph/error.h"
#include "graph/graph.h"
#include "graph/ops/registry.h"

namespace tessera {

namespace {
constexpr const char* kOpNames[] = {
#define TESSERA_OP(name, family) #name,
#include "graph/ops.def"
#undef TESSERA_OP
};

constexpr OpFamily kFamilies[] = {
#define TESSERA_OP(name, family) OpFamily::k##family,
#include "graph/ops.def"
#undef TESSERA_OP
};

std::vector<OpDef> build_table() {
  std::vector<OpDef> defs(kNumOpKinds);
  for (int i = 0; i < kNumOpKinds; ++i) {
    defs[i].kind = static_cast<OpKind>(i);
    defs[i].family = kFamilies[i];
  }
  // Order does not matter: each family fills only its own kinds.
  register_elementwise_ops(defs);
  register_reduce_ops(defs);
  register_nn_ops(defs);
  register_movement_ops(defs);
  register_collective_ops(defs);
  // Completeness (every kind has inference and kernels) is asserted by
  // tests/graph/op_test.cc; here only the placement is checked.
  for (int i = 0; i < kNumOpKinds; ++i)
    TESSERA_CHECK(defs[i].kind == static_cast<OpKind>(i), "op table entry " << i << " is misplaced");
  return defs;
}
}  // namespace

const char* op_family_name(OpFamily f) {
  switch (f) {
    case OpFamily::kElementwise: return "elementwise";
    case OpFamily::kReduce: return "reduce";
    case OpFamily::kNn: return "nn";
    case OpFamily::kMovement: return "movement";
    case OpFamily::kCollective: return "collective";
  }
  return "?";
}

const char* op_name(OpKind kind) { return kOpNames[static_cast<int>(kind)]; }

std::optional<OpKind> op_from_name(std::string_view name) {
  static const std::unordered_map<std::string_view, OpKind> index = [] {
    std::unordered_map<std::string_view, OpKind> m;
    for (int i = 0; i < kNumOpKinds; ++i) m[kOpNames[i]] = static_cast<OpKind>(i);
    return m;
  }();
  auto it = index.find(name);
  if (it == index.end()) return std::nullopt;
  return it->second;
}

const OpDef& op_def(OpKind kind) {
  static const std::vector<OpDef> table = build_table();
  return table[static_cast<int>(kind)];
}

Arithmetic op_arithmetic(const Graph& g, const Node& node) {
  const OpDef& def = op_def(node.kind);
  return def.arithmetic_of ? def.arithmetic_of(g, node) : def.arithmetic;
}

int64_t op_flops(const Graph& g, const Node& node) {
  const OpDef& def = op_def(node.kind);
  if (def.flops) return def.flops(g, node);
  // A transcendental counted as one operation, as vector libraries issue it.
  auto count = [](int64_t elements, Arithmetic a) {
    return static_cast<int64_t>(static_cast<double>(elements) * (a.ops + a.transcendentals));
  };
  if (def.input_arithmetic.ops + def.input_arithmetic.transcendentals > 0)
    return count(g.type(node.inputs[0]).numel(), def.input_arithmetic);
  if (def.elementwise()) return count(g.type(node.outputs[0]).numel(), op_arithmetic(g, node));
  return 0;  // data movement
}

void validate_attrs(OpKind kind, Attrs& attrs) {
  const OpDef& def = op_def(kind);
  for (const auto& [name, value] : attrs.map()) {
    const AttrSpec* spec = nullptr;
    for (const AttrSpec& s : def.attrs)
      if (s.name == name) spec = &s;
    if (!spec) TESSERA_THROW(ErrorKind::kInvalidGraph, "unknown attribute '" << name << "'");
    AttrType got = attr_type_of(value);
    if (got != spec->type)
      TESSERA_THROW(ErrorKind::kInvalidGraph, "attribute '" << name << "' must be " << attr_type_name(spec->type)
                                                            << ", got " << attr_type_name(got));
  }
  for (const AttrSpec& s : def.attrs) {
    if (attrs.has(s.name)) continue;
    if (!s.default_value) TESSERA_THROW(ErrorKind::kInvalidGraph, "required attribute '" << s.name << "' is missing");
    attrs.set(s.name, *s.default_value);
  }
}

}  // namespace tessera
