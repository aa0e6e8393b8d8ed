// Algebraic rules: epilogues folded into the GEMM, and distributivity where it
// removes a product.
#include <algorithm>

#include "mutator/rules/rule.h"
#include "graph/attr_views.h"

namespace tessera::mutator {

namespace {

// Identity: MatMul(A, B) + C = Gemm(A, B, C) for 2-D A and B and a constant C
// that broadcasts to [M, N]. Example: a Linear layer exported as MatMul + Add.
std::vector<Mutation> matmul_add_to_gemm(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& mm = g.node(root);
  if (g.type(mm.inputs[0]).rank() != 2 || g.type(mm.inputs[1]).rank() != 2) return {};
  NodeId u = ctx.sole_user(mm.outputs[0]);
  if (u < 0 || g.node(u).kind != OpKind::kAdd) return {};
  const Node& add = g.node(u);
  ValueId c = add.inputs[0] == mm.outputs[0] ? add.inputs[1] : add.inputs[0];
  if (c == mm.outputs[0] || !is_constant(g, c) || g.type(add.outputs[0]) != g.type(mm.outputs[0])) return {};
  MutationBuilder b(g, "matmul-add-to-gemm", {root, u});
  b.replace(add.outputs[0], b.add(OpKind::kGemm, {b.in(mm.inputs[0]), b.in(mm.inputs[1]), b.in(c)}));
  return {b.finish("MatMul + Add became one Gemm")};
}

// Identity: A@B + A@C = A@(B + C), and A@C + B@C = (A + B)@C.
// Example: two projections of one input that are summed share one MatMul.
std::vector<Mutation> matmul_distribute_add(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& add = g.node(root);
  NodeId p = g.value(add.inputs[0]).producer, q = g.value(add.inputs[1]).producer;
  if (p < 0 || q < 0 || p == q || g.node(p).kind != OpKind::kMatMul || g.node(q).kind != OpKind::kMatMul) return {};
  if (ctx.sole_user(add.inputs[0]) != root || ctx.sole_user(add.inputs[1]) != root) return {};
  const Node& l = g.node(p);
  const Node& r = g.node(q);
  int shared = l.inputs[0] == r.inputs[0] ? 0 : l.inputs[1] == r.inputs[1] ? 1 : -1;
  if (shared < 0) return {};
  int other = 1 - shared;
  if (g.type(l.inputs[other]) != g.type(r.inputs[other])) return {};
  MutationBuilder b(g, "matmul-distribute-add", {p, q, root});
  ValueId sum = b.add(OpKind::kAdd, {b.in(l.inputs[other]), b.in(r.inputs[other])});
  ValueId s = b.in(l.inputs[shared]);
  ValueId y = shared == 0 ? b.add(OpKind::kMatMul, {s, sum}) : b.add(OpKind::kMatMul, {sum, s});
  if (b.type(y) != g.type(add.outputs[0])) return {};
  b.replace(add.outputs[0], y);
  return {b.finish("sum of two MatMuls sharing an operand became one MatMul")};
}

// covered_by of matmul-add-to-gemm: MatMul(A, B) of 2-D A and B, and the
// Add of a constant C (either side) that broadcasts to [M, N] as [], [N],
// [1, N], [M, 1] or [M, N], giving [M, N]; replaced by Gemm(A, B, C) with
// alpha = beta = 1 and no transposes.
std::string matmul_add_covered(const Mutation& m) {
  const Graph& g = m.before;
  if (g.num_nodes() != 2 || g.outputs().size() != 1) return "";
  const Node& mm = g.node(0);
  const Node& add = g.node(1);
  if (mm.kind != OpKind::kMatMul || add.kind != OpKind::kAdd || g.type(mm.inputs[0]).rank() != 2 ||
      g.type(mm.inputs[1]).rank() != 2 || g.outputs()[0] != add.outputs[0])
    return "";
  ValueId c = add.inputs[0] == mm.outputs[0] ? add.inputs[1] : add.inputs[0];
  if (!is_constant(g, c) || g.type(add.outputs[0]) != g.type(mm.outputs[0])) return "";
  const Shape& out = g.type(mm.outputs[0]).shape;
  const Shape& cs = g.type(c).shape;
  bool broadcasts = cs.empty() || cs == Shape{out[1]} || cs == Shape{1, out[1]} || cs == Shape{out[0], 1} || cs == out;
  const Graph& r = m.replacement;
  if (!broadcasts || r.num_nodes() != 1 || r.outputs().size() != 1) return "";
  const Node& gemm = r.node(0);
  bool plain = gemm.kind == OpKind::kGemm && gemm.inputs.size() == 3 && [&] {
    const GemmAttrs a = GemmAttrs::of(gemm);
    return a.alpha == 1.0 && a.beta == 1.0 && a.transA == 0 && a.transB == 0;
  }();
  if (!plain || !is_constant(r, gemm.inputs[2]) || !same_tensor(*r.value(gemm.inputs[2]).constant, *g.value(c).constant))
    return "";
  for (int i = 0; i < 2; ++i)
    if (!same_operand(g, mm.inputs[i], r, gemm.inputs[i])) return "";
  return "matmul-add-gemm";
}

// covered_by of matmul-distribute-add: Add(MatMul(X, Y), MatMul(Z, T))
// where the two products share their left (X = Z) or right (Y = T) operand
// and the other operands have one type; replaced by the product of the
// shared operand with the Add of the other two, on the same side.
std::string distribute_covered(const Mutation& m) {
  const Graph& g = m.before;
  const Graph& r = m.replacement;
  if (g.num_nodes() != 3 || r.num_nodes() != 2 || g.outputs().size() != 1 || r.outputs().size() != 1) return "";
  const Node& add = g.node(g.value(g.outputs()[0]).producer);
  if (add.kind != OpKind::kAdd) return "";
  NodeId p = g.value(add.inputs[0]).producer, q = g.value(add.inputs[1]).producer;
  if (p < 0 || q < 0 || p == q || g.node(p).kind != OpKind::kMatMul || g.node(q).kind != OpKind::kMatMul) return "";
  const Node& l = g.node(p);
  const Node& rt = g.node(q);
  int shared = l.inputs[0] == rt.inputs[0] ? 0 : l.inputs[1] == rt.inputs[1] ? 1 : -1;
  if (shared < 0 || g.type(l.inputs[1 - shared]) != g.type(rt.inputs[1 - shared])) return "";
  const Node& mm = r.node(r.value(r.outputs()[0]).producer);
  if (mm.kind != OpKind::kMatMul || r.value(mm.inputs[1 - shared]).producer < 0) return "";
  const Node& sum = r.node(r.value(mm.inputs[1 - shared]).producer);
  auto same = [&](ValueId in_r, ValueId in_g) { return same_operand(g, in_g, r, in_r); };
  if (sum.kind != OpKind::kAdd || !same(mm.inputs[shared], l.inputs[shared]) ||
      !same(sum.inputs[0], l.inputs[1 - shared]) || !same(sum.inputs[1], rt.inputs[1 - shared]))
    return "";
  return "matmul-distribute-add";
}

}  // namespace

void register_algebra_rules(std::vector<Rule>& rules) {
  rules.push_back({.name = "matmul-add-to-gemm",
                   .identity = "MatMul(A, B) + C = Gemm(A, B, C)",
                   .roots = {OpKind::kMatMul},
                   .fn = matmul_add_to_gemm,
                   .obligations = {"matmul-add-gemm"},
                   .covered_by = matmul_add_covered});
  rules.push_back({.name = "matmul-distribute-add",
                   .identity = "A@B + A@C = A@(B + C); A@C + B@C = (A + B)@C",
                   .roots = {OpKind::kAdd},
                   .fn = matmul_distribute_add,
                   .obligations = {"matmul-distribute-add"},
                   .covered_by = distribute_covered});
}

}  // namespace tessera::mutator
