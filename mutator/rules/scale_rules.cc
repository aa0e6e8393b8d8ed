// Scale folding: a product by a scalar constant moves back through the ops
// that commute with scaling (Reshape, Transpose, Squeeze/Unsqueeze, Add of a
// constant, a Split section, one operand of a MatMul) into the constant
// weights of the MatMul or Gemm that starts the chain, where it costs nothing
// at run time. Example: attention's 1/sqrt(d) after Q@K^T (BERT's Div by 8,
// GPT-2's Mul by 0.125) folds into the Q projection's weight and bias.
#include <algorithm>
#include <cmath>
#include <optional>

#include "mutator/rules/rule.h"
#include "graph/attr_views.h"

namespace tessera::mutator {

namespace {

// A section [lo, hi) of one axis of a constant (a Split output's share of a
// weight's columns); the whole tensor when hi == 0.
struct Section {
  int64_t lo = 0, hi = 0;
  bool whole() const { return hi == 0; }
};

// Whether t can carry a scale on the section of `axis` (negative: from the
// end): a float tensor whose axis is the section's whole width.
bool can_scale(const Tensor& t, Section s, int64_t axis, int64_t width) {
  if (!is_float(t.dtype())) return false;
  int64_t ax = axis < 0 ? t.rank() + axis : axis;
  return s.whole() || (ax >= 0 && ax < t.rank() && t.shape()[ax] == width);
}

// t * f on the section of `axis`, or nullopt when t cannot carry it
// (can_scale). An f32 weight (GPT-2's twelve 768x2304 projections) is
// scaled on a copy of its bytes, without a conversion per element.
std::optional<Tensor> scaled(const Tensor& t, double f, Section s, int64_t axis, int64_t width) {
  if (!can_scale(t, s, axis, width)) return std::nullopt;
  int64_t ax = axis < 0 ? t.rank() + axis : axis;
  Tensor out = t;
  int64_t inner = 1;
  for (int64_t d = ax + 1; d < t.rank(); ++d) inner *= t.shape()[d];
  const int64_t n = t.numel();
  // Runs of `inner` elements share one position on the axis.
  auto in_section = [&](int64_t i) { return s.whole() || ((i / inner) % width >= s.lo && (i / inner) % width < s.hi); };
  if (t.dtype() == DType::kF32) {
    auto* p = out.mutable_data_as<float>();
    for (int64_t i = 0; i < n; i += inner)
      if (in_section(i))
        for (int64_t k = i; k < std::min(n, i + inner); ++k) p[k] = static_cast<float>(static_cast<double>(p[k]) * f);
    return out;
  }
  for (int64_t i = 0; i < n; ++i)
    if (in_section(i)) out.set_double(i, t.get_double(i) * f);
  return out;
}

// The factor of Mul(y, c), Mul(c, y) or Div(y, c) for a float scalar constant
// c, and y; nullopt otherwise.
std::optional<std::pair<ValueId, double>> scalar_factor(const Graph& g, const Node& n) {
  for (int i = 0; i < 2; ++i) {
    if (n.kind == OpKind::kDiv && i == 0) continue;
    ValueId c = n.inputs[i], y = n.inputs[1 - i];
    if (!is_constant(g, c) || is_constant(g, y) || g.value(c).constant->numel() != 1) continue;
    if (!is_float(g.type(c).dtype) || g.type(n.outputs[0]) != g.type(y)) continue;
    double v = g.value(c).constant->get_double(0);
    if (n.kind == OpKind::kDiv && (v == 0 || !std::isfinite(1.0 / v))) continue;
    if (!std::isfinite(v)) continue;
    return std::make_pair(y, n.kind == OpKind::kDiv ? 1.0 / v : v);
  }
  return std::nullopt;
}

// One node of the chain from the weights' product up to the scale: the
// replacement rebuilds it with `through` (the input the chain passes) read
// from the rebuilt node below.
struct Link {
  NodeId node;
  int through = 0;
  int output = 0;  // which output continues the chain (a Split's section)
};

std::vector<Mutation> fold_scale_into_weights(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  auto factor = scalar_factor(g, g.node(root));
  if (!factor) return {};
  // Named copies, not a structured binding: clang before 16 cannot capture
  // bindings in the lambdas below.
  const ValueId v0 = factor->first;
  const double f = factor->second;
  ValueId v = v0;
  std::vector<Link> chain;  // nearest the root first
  Section section;
  int64_t width = 0;  // the split axis' full size, once a Split section is crossed
  NodeId product = -1;
  for (int steps = 0; steps < 16 && product < 0; ++steps) {
    NodeId p = g.value(v).producer;
    if (p < 0 || ctx.is_graph_output(v) || ctx.users[v].size() != 1) return {};
    const Node& n = g.node(p);
    int output = 0;
    while (n.outputs[output] != v) ++output;
    switch (n.kind) {
      case OpKind::kReshape: case OpKind::kFlatten: case OpKind::kSqueeze: case OpKind::kUnsqueeze:
        // After a section is taken, the sectioned axis must stay the last one.
        if (!section.whole() && g.type(n.inputs[0]).shape.back() != g.type(v).shape.back()) return {};
        chain.push_back({p, 0, 0});
        break;
      case OpKind::kTranspose: {
        const std::vector<int64_t> perm = TransposeAttrs::of(n).perm;
        if (!section.whole() && perm.back() != static_cast<int64_t>(perm.size()) - 1) return {};
        chain.push_back({p, 0, 0});
        break;
      }
      case OpKind::kAdd: {
        int c = is_constant(g, n.inputs[1]) ? 1 : is_constant(g, n.inputs[0]) ? 0 : -1;
        if (c < 0 || is_constant(g, n.inputs[1 - c]) || g.type(n.inputs[1 - c]) != g.type(v)) return {};
        chain.push_back({p, 1 - c, 0});
        break;
      }
      case OpKind::kSplit: {
        if (!section.whole() || ctx.is_graph_output(n.inputs[0])) return {};
        int64_t rank = g.type(n.inputs[0]).rank();
        const SplitAttrs split = SplitAttrs::of(n);
        int64_t axis = split.axis;
        if (axis < 0) axis += rank;
        if (axis != rank - 1) return {};
        const auto& sizes = split.split;
        width = g.type(n.inputs[0]).shape.back();
        for (int k = 0; k < output; ++k) section.lo += sizes[k];
        section.hi = section.lo + sizes[output];
        chain.push_back({p, 0, output});
        break;
      }
      case OpKind::kMatMul: case OpKind::kGemm: {
        bool const_b = is_constant(g, n.inputs[1]), const_a = is_constant(g, n.inputs[0]);
        if (const_b || const_a) {
          product = p;
          continue;
        }
        if (n.kind == OpKind::kGemm || !section.whole()) return {};
        chain.push_back({p, 0, 0});  // (A*f)@B = (A@B)*f: on through A
        break;
      }
      default:
        return {};
    }
    v = g.node(p).inputs[chain.back().through];
  }
  if (product < 0) return {};

  const Node& pn = g.node(product);
  // A section of A@X's columns is not a section of A, nor of a 1-D B's.
  int w = is_constant(g, pn.inputs[1]) ? 1 : 0;
  if (!section.whole() && (w == 0 || g.type(pn.inputs[1]).rank() < 2)) return {};
  if (pn.kind == OpKind::kGemm &&
      (GemmAttrs::of(pn).alpha != 1.0 || (pn.inputs.size() > 2 && GemmAttrs::of(pn).beta != 1.0)))
    return {};  // keep the rule to the plain form; alpha would fold the same way
  const Node& rn = g.node(root);
  const Tensor& c = *g.value(rn.inputs[0] == v0 ? rn.inputs[1] : rn.inputs[0]).constant;
  std::vector<NodeId> nodes = {root, product};
  for (const Link& l : chain) nodes.push_back(l.node);

  // Builds the replacement with folded constants, or (fold false) the same
  // program with each folded constant written as the root's op applied to the
  // host constant: what verification tests, since the Z_p test reads a folded
  // non-integral constant as an unrelated residue.
  auto build = [&](bool fold) -> std::optional<Mutation> {
    MutationBuilder b(g, "fold-scale-into-weights", nodes);
    // t scaled on `section` of `axis` (-1: last; 0 with transB).
    auto scale = [&](const Tensor& t, int64_t axis) -> std::optional<ValueId> {
      if (!can_scale(t, section, axis, width)) return std::nullopt;
      if (fold) return b.constant(*scaled(t, f, section, axis, width));
      Tensor by = c.reshaped({});
      if (!section.whole()) {
        by = Tensor(c.dtype(), axis == 0 ? Shape{width, 1} : Shape{width});
        for (int64_t i = 0; i < width; ++i) by.set_double(i, i >= section.lo && i < section.hi ? c.get_double(0) : 1.0);
      }
      return b.add(rn.kind, {b.constant(t), b.constant(by)});
    };
    std::vector<ValueId> ins;
    bool transb = pn.kind == OpKind::kGemm && GemmAttrs::of(pn).transB;
    for (size_t i = 0; i < pn.inputs.size(); ++i) {
      ValueId in = pn.inputs[i];
      if (in == kNoValue || (static_cast<int>(i) != w && i != 2)) {
        ins.push_back(in == kNoValue ? kNoValue : b.in(in));
        continue;
      }
      if (!is_constant(g, in)) return std::nullopt;
      // B's output columns are its last axis, or its first with transB; C
      // broadcasts to [M, N].
      auto t = scale(*g.value(in).constant, (static_cast<int>(i) == w && transb) ? 0 : -1);
      if (!t) return std::nullopt;
      ins.push_back(*t);
    }
    ValueId y = b.add(pn.kind, ins, pn.attrs);
    // Rebuild the chain from the product up; a Split's other sections keep
    // their values (their columns were not scaled).
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Node& n = g.node(it->node);
      std::vector<ValueId> nin;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        ValueId in = n.inputs[i];
        if (static_cast<int>(i) == it->through) {
          nin.push_back(y);
        } else if (n.kind == OpKind::kAdd) {
          auto t = scale(*g.value(in).constant, -1);
          if (!t) return std::nullopt;
          nin.push_back(*t);
        } else {
          nin.push_back(in == kNoValue ? kNoValue : b.in(in));
        }
      }
      std::vector<ValueId> outs = b.add_multi(n.kind, nin, n.attrs, static_cast<int>(n.outputs.size()));
      for (size_t k = 0; k < outs.size(); ++k)
        if (static_cast<int>(k) != it->output) b.replace(n.outputs[k], outs[k]);
      y = outs[it->output];
    }
    b.replace(rn.outputs[0], y);
    return b.finish(std::string(op_name(rn.kind)) + " by a scalar folded into the weights of " + pn.name);
  };
  std::optional<Mutation> m = build(true), unfolded = build(false);
  if (!m || !unfolded) return {};
  m->unfolded = std::move(unfolded->replacement);
  return {std::move(*m)};
}

}  // namespace

void register_scale_rules(std::vector<Rule>& rules) {
  rules.push_back({.name = "fold-scale-into-weights",
                   .identity = "(X@W + b) * f = X@(W*f) + b*f, through Reshape/Transpose/Split sections/MatMul operands",
                   .roots = {OpKind::kMul, OpKind::kDiv},
                   .fn = fold_scale_into_weights,
                   .per_instance = "its chain of up to 16 links (Reshape, Transpose, Add of a constant, a Split "
                                   "section, a MatMul operand) has no fixed form to state once; each instance is "
                                   "tested on its unfolded form, a product the size of one projection"});
}

}  // namespace tessera::mutator
