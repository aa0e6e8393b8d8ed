// Layout rules: transposes and reshapes that compose, cancel, or move past
// element-wise ops toward a partner they cancel with.
#include "mutator/rules/rule.h"

namespace tessera::mutator {

namespace {

bool is_reshape_like(OpKind k) { return k == OpKind::kReshape || k == OpKind::kFlatten; }

Attrs perm_attrs(std::vector<int64_t> perm) {
  Attrs a;
  a.set("perm", std::move(perm));
  return a;
}

Attrs shape_attrs(const Shape& s) {
  Attrs a;
  a.set("shape", std::vector<int64_t>(s.begin(), s.end()));
  return a;
}

bool identity_perm(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// Identity: Transpose(Transpose(X, p1), p2) = Transpose(X, p) with p[k] = p1[p2[k]].
// Example: perm [0,2,1,3] then [0,2,1,3] gives [0,1,2,3] (then eliminated).
std::vector<Mutation> transpose_compose(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& outer = g.node(root);
  NodeId p = g.value(outer.inputs[0]).producer;
  if (p < 0 || g.node(p).kind != OpKind::kTranspose) return {};
  const Node& inner = g.node(p);
  const auto& p1 = inner.attrs.ints("perm");
  const auto& p2 = outer.attrs.ints("perm");
  std::vector<int64_t> perm(p2.size());
  for (size_t k = 0; k < p2.size(); ++k) perm[k] = p1[p2[k]];
  // The inner transpose is part of the replaced computation (so that both
  // sides read X), and stays alive when something else reads it.
  MutationBuilder b(g, "transpose-compose", {p, root});
  ValueId x = b.in(inner.inputs[0]);
  b.replace(outer.outputs[0], identity_perm(perm) ? x : b.add(OpKind::kTranspose, {x}, perm_attrs(perm)));
  return {b.finish("two Transposes composed")};
}

// Identity: Transpose(X, [0, 1, ..., n-1]) = X.
std::vector<Mutation> transpose_elimination(const RuleContext& ctx, NodeId root) {
  const Node& n = ctx.g.node(root);
  if (!identity_perm(n.attrs.ints("perm"))) return {};
  MutationBuilder b(ctx.g, "transpose-elimination", {root});
  b.replace(n.outputs[0], b.in(n.inputs[0]));
  return {b.finish("identity Transpose removed")};
}

// Identity: f(Transpose(A, p), Transpose(B, p)) = Transpose(f(A, B), p) for an
// element-wise f on equal shapes. Example: Add of two transposed heads becomes
// one Transpose after the Add (one transpose kernel instead of two).
std::vector<Mutation> transpose_sink_elementwise(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& n = g.node(root);
  if (n.inputs.size() != 2) return {};
  NodeId pa = g.value(n.inputs[0]).producer, pb = g.value(n.inputs[1]).producer;
  if (pa < 0 || pb < 0 || g.node(pa).kind != OpKind::kTranspose || g.node(pb).kind != OpKind::kTranspose) return {};
  const Node& ta = g.node(pa);
  const Node& tb = g.node(pb);
  if (ta.attrs.ints("perm") != tb.attrs.ints("perm") || g.type(ta.inputs[0]) != g.type(tb.inputs[0])) return {};
  MutationBuilder b(g, "transpose-sink-elementwise", {pa, pb, root});
  ValueId y = b.add(n.kind, {b.in(ta.inputs[0]), b.in(tb.inputs[0])}, n.attrs);
  b.replace(n.outputs[0], b.add(OpKind::kTranspose, {y}, perm_attrs(ta.attrs.ints("perm"))));
  return {b.finish(std::string(op_name(n.kind)) + " moved before a shared Transpose")};
}

// Identity: Reshape(Reshape(X, s1), s2) = Reshape(X, s2) (Flatten is a Reshape).
// Example: [1,128,768] -> [128,768] -> [1,128,12,64] becomes one Reshape.
std::vector<Mutation> reshape_chain(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& outer = g.node(root);
  NodeId p = g.value(outer.inputs[0]).producer;
  if (p < 0 || !is_reshape_like(g.node(p).kind)) return {};
  MutationBuilder b(g, "reshape-chain", {p, root});
  ValueId x = b.in(g.node(p).inputs[0]);
  const Shape& s = g.type(outer.outputs[0]).shape;
  b.replace(outer.outputs[0], b.type(x).shape == s ? x : b.add(OpKind::kReshape, {x}, shape_attrs(s)));
  return {b.finish("two Reshapes collapsed")};
}

// Identity: Reshape(X, shape(X)) = X.
std::vector<Mutation> reshape_elimination(const RuleContext& ctx, NodeId root) {
  const Node& n = ctx.g.node(root);
  if (ctx.g.type(n.inputs[0]) != ctx.g.type(n.outputs[0])) return {};
  MutationBuilder b(ctx.g, "reshape-elimination", {root});
  b.replace(n.outputs[0], b.in(n.inputs[0]));
  return {b.finish("no-op Reshape removed")};
}

}  // namespace

void register_layout_rules(std::vector<Rule>& rules) {
  rules.push_back({"transpose-compose", "Transpose(Transpose(X, p1), p2) = Transpose(X, p1[p2[k]])",
                   "transpose-compose", {OpKind::kTranspose}, transpose_compose});
  rules.push_back({"transpose-elimination", "Transpose(X, identity) = X", kNoObligation, {OpKind::kTranspose},
                   transpose_elimination});
  rules.push_back({"transpose-sink-elementwise", "f(Transpose(A, p), Transpose(B, p)) = Transpose(f(A, B), p)",
                   kNoObligation, {OpKind::kAdd, OpKind::kSub, OpKind::kMul}, transpose_sink_elementwise});
  rules.push_back({"reshape-chain", "Reshape(Reshape(X, s1), s2) = Reshape(X, s2)", "reshape-chain",
                   {OpKind::kReshape, OpKind::kFlatten}, reshape_chain});
  rules.push_back({"reshape-elimination", "Reshape(X, shape(X)) = X", kNoObligation,
                   {OpKind::kReshape, OpKind::kFlatten}, reshape_elimination});
}

}  // namespace tessera::mutator
