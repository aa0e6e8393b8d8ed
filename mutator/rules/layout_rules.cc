// Layout rules: transposes and reshapes that compose, cancel, or move past
// element-wise ops toward a partner they cancel with.
#include <algorithm>

#include "mutator/rules/rule.h"
#include "verifier/proofs.h"
#include "graph/attr_views.h"

namespace tessera::mutator {

namespace {

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
  const std::vector<int64_t> p1 = TransposeAttrs::of(inner).perm;
  const std::vector<int64_t> p2 = TransposeAttrs::of(outer).perm;
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
  if (!identity_perm(TransposeAttrs::of(n).perm)) return {};
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
  if (TransposeAttrs::of(ta).perm != TransposeAttrs::of(tb).perm || g.type(ta.inputs[0]) != g.type(tb.inputs[0])) return {};
  MutationBuilder b(g, "transpose-sink-elementwise", {pa, pb, root});
  ValueId y = b.add(n.kind, {b.in(ta.inputs[0]), b.in(tb.inputs[0])}, n.attrs);
  b.replace(n.outputs[0], b.add(OpKind::kTranspose, {y}, perm_attrs(TransposeAttrs::of(ta).perm)));
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

// The nodes of g in order when it is a chain of single-input nodes from
// its one input to its one output, else empty.
std::vector<const Node*> chain_of(const Graph& g) {
  std::vector<const Node*> chain;
  if (g.inputs().size() != 1 || g.outputs().size() != 1) return {};
  ValueId at = g.inputs()[0];
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.inputs.empty() || node.inputs[0] != at || node.outputs.size() != 1) return {};
    for (size_t i = 1; i < node.inputs.size(); ++i)
      if (!g.value(node.inputs[i]).is_constant()) return {};
    at = node.outputs[0];
    chain.push_back(&node);
  }
  return at == g.outputs()[0] ? chain : std::vector<const Node*>{};
}

// The replacement is its input itself (no node).
bool is_pass_through(const Graph& r) { return r.num_nodes() == 0 && r.outputs().size() == 1 && r.outputs() == r.inputs(); }

// The replacement is one node of `kind` from its input to its output; that node.
const Node* single(const Graph& r, OpKind kind) {
  std::vector<const Node*> c = chain_of(r);
  return c.size() == 1 && c[0]->kind == kind ? c[0] : nullptr;
}

// covered_by of transpose-compose: Transpose(Transpose(X, p1), p2) of rank
// up to kMaxPermRank, replaced by X when p1[p2[k]] is the identity, else by
// Transpose(X, p1[p2[k]]).
std::string transpose_compose_covered(const Mutation& m) {
  std::vector<const Node*> c = chain_of(m.before);
  if (c.size() != 2 || c[0]->kind != OpKind::kTranspose || c[1]->kind != OpKind::kTranspose) return "";
  const std::vector<int64_t> p1 = TransposeAttrs::of(*c[0]).perm;
  const std::vector<int64_t> p2 = TransposeAttrs::of(*c[1]).perm;
  if (p1.size() != p2.size() || static_cast<int>(p1.size()) > verifier::kMaxPermRank) return "";
  std::vector<int64_t> q(p2.size());
  for (size_t k = 0; k < q.size(); ++k) q[k] = p1[static_cast<size_t>(p2[k])];
  const Node* t = single(m.replacement, OpKind::kTranspose);
  bool ok = identity_perm(q) ? is_pass_through(m.replacement) : t && TransposeAttrs::of(*t).perm == q;
  return ok ? "transpose-compose" : "";
}

// covered_by of transpose-elimination: one Transpose by the identity of rank
// up to 8, replaced by its input.
std::string transpose_elimination_covered(const Mutation& m) {
  std::vector<const Node*> c = chain_of(m.before);
  bool ok = c.size() == 1 && c[0]->kind == OpKind::kTranspose && identity_perm(TransposeAttrs::of(*c[0]).perm) &&
            TransposeAttrs::of(*c[0]).perm.size() <= 8 && is_pass_through(m.replacement);
  return ok ? "transpose-identity" : "";
}

// covered_by of transpose-sink-elementwise: f(Transpose(A, p), Transpose(B, p))
// for f Add, Sub or Mul, A and B of one type of rank up to kMaxPermRank,
// replaced by Transpose(f(A, B), p) with the operands in the same order.
std::string transpose_sink_covered(const Mutation& m) {
  const Graph& g = m.before;
  if (g.num_nodes() != 3 || g.outputs().size() != 1) return "";
  const Node& f = g.node(g.value(g.outputs()[0]).producer);
  if ((f.kind != OpKind::kAdd && f.kind != OpKind::kSub && f.kind != OpKind::kMul) || f.inputs.size() != 2) return "";
  std::vector<ValueId> sources;
  std::vector<int64_t> perm;
  for (ValueId v : f.inputs) {
    NodeId p = g.value(v).producer;
    if (p < 0 || g.node(p).kind != OpKind::kTranspose) return "";
    if (!perm.empty() && TransposeAttrs::of(g.node(p)).perm != perm) return "";
    perm = TransposeAttrs::of(g.node(p)).perm;
    sources.push_back(g.node(p).inputs[0]);
  }
  if (g.type(sources[0]) != g.type(sources[1]) || static_cast<int>(perm.size()) > verifier::kMaxPermRank) return "";
  const Graph& r = m.replacement;
  if (r.num_nodes() != 2 || r.outputs().size() != 1) return "";
  const Node& t = r.node(r.value(r.outputs()[0]).producer);
  if (t.kind != OpKind::kTranspose || TransposeAttrs::of(t).perm != perm || r.value(t.inputs[0]).producer < 0) return "";
  const Node& h = r.node(r.value(t.inputs[0]).producer);
  if (h.kind != f.kind || h.inputs.size() != 2) return "";
  for (size_t i = 0; i < 2; ++i)
    if (!same_operand(g, sources[i], r, h.inputs[i])) return "";
  return "transpose-sink-elementwise";
}

// covered_by of reshape-chain: two Reshapes (or Flattens) whose middle
// shape has rank up to kMaxReshapeRank, replaced by one Reshape to the
// second's shape, or by X when that is X's shape.
std::string reshape_chain_covered(const Mutation& m) {
  std::vector<const Node*> c = chain_of(m.before);
  if (c.size() != 2 || !is_reshape_like(c[0]->kind) || !is_reshape_like(c[1]->kind)) return "";
  const Graph& g = m.before;
  if (g.type(c[0]->outputs[0]).rank() > verifier::kMaxReshapeRank) return "";
  const Shape& out = g.type(g.outputs()[0]).shape;
  if (g.type(g.inputs()[0]).shape == out) return is_pass_through(m.replacement) ? "reshape-chain" : "";
  const Node* r = single(m.replacement, OpKind::kReshape);
  return r && m.replacement.type(r->outputs[0]).shape == out ? "reshape-chain" : "";
}

// covered_by of reshape-elimination: one Reshape (or Flatten) of rank up to
// kMaxReshapeRank to its input's own shape, replaced by its input.
std::string reshape_elimination_covered(const Mutation& m) {
  std::vector<const Node*> c = chain_of(m.before);
  const Graph& g = m.before;
  bool ok = c.size() == 1 && is_reshape_like(c[0]->kind) && g.type(g.inputs()[0]) == g.type(g.outputs()[0]) &&
            g.type(g.inputs()[0]).rank() <= verifier::kMaxReshapeRank && is_pass_through(m.replacement);
  return ok ? "reshape-identity" : "";
}

}  // namespace

void register_layout_rules(std::vector<Rule>& rules) {
  rules.push_back({.name = "transpose-compose",
                   .identity = "Transpose(Transpose(X, p1), p2) = Transpose(X, p1[p2[k]])",
                   .roots = {OpKind::kTranspose},
                   .fn = transpose_compose,
                   .obligations = {"transpose-compose"},
                   .covered_by = transpose_compose_covered});
  rules.push_back({.name = "transpose-elimination",
                   .identity = "Transpose(X, identity) = X",
                   .roots = {OpKind::kTranspose},
                   .fn = transpose_elimination,
                   .obligations = {"transpose-identity"},
                   .covered_by = transpose_elimination_covered});
  rules.push_back({.name = "transpose-sink-elementwise",
                   .identity = "f(Transpose(A, p), Transpose(B, p)) = Transpose(f(A, B), p)",
                   .roots = {OpKind::kAdd, OpKind::kSub, OpKind::kMul},
                   .fn = transpose_sink_elementwise,
                   .obligations = {"transpose-sink-elementwise"},
                   .covered_by = transpose_sink_covered});
  rules.push_back({.name = "reshape-chain",
                   .identity = "Reshape(Reshape(X, s1), s2) = Reshape(X, s2)",
                   .roots = {OpKind::kReshape, OpKind::kFlatten},
                   .fn = reshape_chain,
                   .obligations = {"reshape-chain"},
                   .covered_by = reshape_chain_covered});
  rules.push_back({.name = "reshape-elimination",
                   .identity = "Reshape(X, shape(X)) = X",
                   .roots = {OpKind::kReshape, OpKind::kFlatten},
                   .fn = reshape_elimination,
                   .obligations = {"reshape-identity"},
                   .covered_by = reshape_elimination_covered});
}

}  // namespace tessera::mutator
