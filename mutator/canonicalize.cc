#include "mutator/canonicalize.h"

#include <cmath>
#include <unordered_set>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/interpreter.h"
#include "mutator/mutation.h"
#include "mutator/rules/rule.h"

namespace tessera::mutator {

namespace {

bool is_graph_output(const Graph& g, ValueId v) {
  for (ValueId o : g.outputs())
    if (o == v) return true;
  return false;
}

// Redirects uses of `from` to `to`. A graph output keeps its name, which
// needs `to` to be a node output that is not already an output; returns
// false (nothing changed) when it is not.
bool redirect(Graph& g, ValueId from, ValueId to) {
  if (!is_graph_output(g, from)) {
    g.replace_all_uses(from, to);
    return true;
  }
  if (g.value(to).producer < 0 || is_graph_output(g, to)) return false;
  std::string name = g.value(from).name;
  g.replace_all_uses(from, to);
  g.rename_value(from, fresh_value_name(g, name + ".old"));
  g.rename_value(to, name);
  return true;
}

const Tensor* const_of(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).is_constant() ? &*g.value(v).constant : nullptr;
}

}  // namespace

bool fold_constants(Graph& g) {
  bool changed = false;
  for (NodeId n : g.topo_order()) {
    const Node node = g.node(n);
    bool all_const = true;
    int64_t out_elems = 0;
    for (ValueId v : node.inputs) all_const = all_const && (v == kNoValue || g.value(v).is_constant());
    for (ValueId v : node.outputs) {
      out_elems += g.type(v).numel();
      all_const = all_const && !is_graph_output(g, v);
    }
    if (!all_const || out_elems > kMaxFoldElements) continue;
    Graph one;
    std::vector<ValueId> ins;
    for (ValueId v : node.inputs)
      ins.push_back(v == kNoValue ? kNoValue : one.add_constant(g.value(v).name, *g.value(v).constant));
    NodeId id = one.add_node(node.kind, ins, node.attrs, node.name);
    one.set_outputs(one.node(id).outputs);
    std::vector<Tensor> values = evaluate(one, {}, Precision::kF64);
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      ValueId c = g.add_constant(fresh_value_name(g, g.value(node.outputs[i]).name + ".folded"), values[i]);
      g.replace_all_uses(node.outputs[i], c);
    }
    changed = true;
  }
  if (changed) g.remove_dead();
  return changed;
}

bool remove_identities(Graph& g) {
  bool changed = false;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.kind != OpKind::kIdentity) continue;
    changed = redirect(g, node.outputs[0], node.inputs[0]) || changed;
  }
  if (changed) g.remove_dead();
  return changed;
}

bool fold_batchnorm_into_conv(Graph& g) {
  bool changed = false;
  auto users = g.users();
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node bn = g.node(n);
    if (bn.kind != OpKind::kBatchNormalization) continue;
    ValueId y = bn.inputs[0];
    NodeId c = g.value(y).producer;
    if (c < 0 || g.node(c).kind != OpKind::kConv || users[y].size() != 1 || is_graph_output(g, y)) continue;
    const Node conv = g.node(c);
    const Tensor* w = const_of(g, conv.inputs[1]);
    const Tensor* bias = conv.inputs.size() > 2 ? const_of(g, conv.inputs[2]) : nullptr;
    bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] != kNoValue;
    const Tensor *scale = const_of(g, bn.inputs[1]), *beta = const_of(g, bn.inputs[2]),
                 *mean = const_of(g, bn.inputs[3]), *var = const_of(g, bn.inputs[4]);
    if (!w || (has_bias && !bias) || !scale || !beta || !mean || !var || !is_float(w->dtype())) continue;
    int64_t cout = w->shape()[0], per = w->numel() / cout;
    double eps = BatchNormAttrs::of(bn).epsilon;
    Tensor w2(w->dtype(), w->shape()), b2(w->dtype(), {cout});
    for (int64_t o = 0; o < cout; ++o) {
      double s = scale->get_double(o) / std::sqrt(var->get_double(o) + eps);
      for (int64_t k = 0; k < per; ++k) w2.set_double(o * per + k, w->get_double(o * per + k) * s);
      double b = has_bias ? bias->get_double(o) : 0.0;
      b2.set_double(o, (b - mean->get_double(o)) * s + beta->get_double(o));
    }
    ValueId wv = g.add_constant(fresh_value_name(g, g.value(conv.inputs[1]).name + ".bn"), w2);
    ValueId bv = g.add_constant(fresh_value_name(g, conv.name + ".bn_bias"), b2);
    ValueId out = g.add(OpKind::kConv, {conv.inputs[0], wv, bv}, conv.attrs, fresh_node_name(g, conv.name + ".bn", 1));
    if (redirect(g, bn.outputs[0], out)) changed = true;
  }
  if (changed) g.remove_dead();
  return changed;
}

bool fold_bias_into_conv(Graph& g) {
  bool changed = false;
  auto users = g.users();
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node add = g.node(n);
    if (add.kind != OpKind::kAdd) continue;
    for (int side = 0; side < 2; ++side) {
      ValueId y = add.inputs[side];
      const Tensor* c = const_of(g, add.inputs[1 - side]);
      NodeId p = g.value(y).producer;
      if (!c || p < 0 || g.node(p).kind != OpKind::kConv || users[y].size() != 1 || is_graph_output(g, y)) continue;
      const Node conv = g.node(p);
      int64_t cout = g.type(y).shape[1];
      // c must vary along channels only: its shape, without leading 1s, is [C, 1, ..., 1]
      // with as many trailing dims as the Conv has spatial dims (or [C] only when spatial rank is 0).
      Shape s = c->shape();
      while (!s.empty() && s[0] == 1 && static_cast<int64_t>(s.size()) > g.type(y).rank() - 1) s.erase(s.begin());
      if (static_cast<int64_t>(s.size()) != g.type(y).rank() - 1 || s[0] != cout || c->numel() != cout) continue;
      if (c->dtype() != g.type(y).dtype || g.type(add.outputs[0]) != g.type(y)) continue;
      bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] != kNoValue;
      const Tensor* b = has_bias ? const_of(g, conv.inputs[2]) : nullptr;
      if (has_bias && !b) continue;
      Tensor b2(c->dtype(), {cout});
      for (int64_t o = 0; o < cout; ++o) b2.set_double(o, (b ? b->get_double(o) : 0.0) + c->get_double(o));
      ValueId bv = g.add_constant(fresh_value_name(g, conv.name + ".bias"), b2);
      ValueId out = g.add(OpKind::kConv, {conv.inputs[0], conv.inputs[1], bv}, conv.attrs,
                          fresh_node_name(g, conv.name + ".biased", 1));
      if (redirect(g, add.outputs[0], out)) changed = true;
      break;
    }
  }
  if (changed) g.remove_dead();
  return changed;
}

bool fold_bias_into_gemm(Graph& g) {
  const Rule& rule = find_rule("matmul-add-to-gemm");
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    auto users = g.users();
    RuleContext ctx{g, users};
    for (NodeId n = 0; n < g.num_nodes() && !again; ++n) {
      if (g.node(n).kind != OpKind::kMatMul) continue;
      std::vector<Mutation> ms = rule.fn(ctx, n);
      if (ms.empty()) continue;
      g = apply_mutation(g, ms[0]);
      again = changed = true;
    }
  }
  return changed;
}

bool remove_dead_code(Graph& g) { return g.remove_dead(); }

std::vector<std::pair<std::string, std::string>> canonical_pass_list() {
  return {{"fold-constants", "op(constants) = constant"},
          {"remove-identity", "Identity(X) = X"},
          {"fold-batchnorm-into-conv", "BN(Conv(X, W, b)) = Conv(X, W*s, (b - mean)*s + beta)"},
          {"fold-bias-into-conv", "Conv(X, W, b) + c = Conv(X, W, b + c)"},
          {"fold-bias-into-gemm", "MatMul(A, B) + C = Gemm(A, B, C)"},
          {"remove-dead-code", "nodes no output reads are removed"}};
}

std::vector<PassRecord> canonicalize(Graph& g) {
  using Pass = bool (*)(Graph&);
  // Folding constants first exposes constant weights to the BN and bias
  // folds; dead code last, once the folds have orphaned nodes.
  const std::vector<std::pair<PassRecord, Pass>> passes = {
      {{"fold-constants", 0, ""}, fold_constants},
      {{"remove-identity", 0, ""}, remove_identities},
      {{"fold-batchnorm-into-conv", 0, "conv-batchnorm-fold"}, fold_batchnorm_into_conv},
      {{"fold-bias-into-conv", 0, ""}, fold_bias_into_conv},
      {{"fold-bias-into-gemm", 0, ""}, fold_bias_into_gemm},
      {{"remove-dead-code", 0, ""}, remove_dead_code}};
  std::vector<PassRecord> records;
  for (const auto& p : passes) records.push_back(p.first);
  for (int round = 0; round < 8; ++round) {
    bool any = false;
    for (size_t i = 0; i < passes.size(); ++i) {
      if (!passes[i].second(g)) continue;
      g.validate();
      ++records[i].times;
      any = true;
    }
    if (!any) break;
  }
  return records;
}

}  // namespace tessera::mutator
