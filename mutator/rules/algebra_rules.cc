// Algebraic rules: epilogues folded into the GEMM, and distributivity where it
// removes a product.
#include "mutator/rules/rule.h"

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

}  // namespace

void register_algebra_rules(std::vector<Rule>& rules) {
  rules.push_back({"matmul-add-to-gemm", "MatMul(A, B) + C = Gemm(A, B, C)", kNoObligation, {OpKind::kMatMul},
                   matmul_add_to_gemm});
  rules.push_back({"matmul-distribute-add", "A@B + A@C = A@(B + C); A@C + B@C = (A + B)@C", "matmul-distribute-add",
                   {OpKind::kAdd}, matmul_distribute_add});
}

}  // namespace tessera::mutator
