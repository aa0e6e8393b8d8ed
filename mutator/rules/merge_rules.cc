// Merging rules: ops that read the same activation (or have the same shape)
// become one bigger op followed by a Split, so the input is read once and one
// kernel launch replaces several.
#include <algorithm>
#include <optional>
#include <set>

#include "mutator/rules/rule.h"
#include "graph/attr_views.h"

namespace tessera::mutator {

namespace {

Attrs split_attrs(int64_t axis, std::vector<int64_t> sizes) {
  Attrs a;
  a.set("axis", axis);
  a.set("split", std::move(sizes));
  return a;
}

// The weight of a MatMul/Gemm as [K, N], or an undefined tensor when the
// node is not a plain product of its input 0 with a constant matrix.
Tensor weight_kn(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2 || !is_constant(g, n.inputs[1]) || is_constant(g, n.inputs[0])) return {};
  const Tensor& w = *g.value(n.inputs[1]).constant;
  if (w.rank() != 2) return {};
  if (n.kind == OpKind::kMatMul) return g.type(n.inputs[0]).rank() >= 1 ? w : Tensor{};
  const GemmAttrs a = GemmAttrs::of(n);
  if (a.transA != 0 || a.alpha != 1.0 || a.beta != 1.0) return {};
  return a.transB ? transpose_2d(w) : w;
}

// A Gemm's bias as a length-N vector: zeros when absent, undefined when it is
// not a constant broadcast along rows.
Tensor gemm_bias(const Graph& g, const Node& n, int64_t cols, DType dtype) {
  if (n.inputs.size() < 3 || n.inputs[2] == kNoValue) return Tensor(dtype, {cols});
  if (!is_constant(g, n.inputs[2])) return {};
  const Tensor& c = *g.value(n.inputs[2]).constant;
  if (c.numel() != cols || (c.rank() == 2 && c.shape()[0] != 1) || c.rank() > 2) return {};
  return c.reshaped({cols});
}

// The constant 1-D bias of an Add that is the sole reader of v, and that Add.
std::pair<NodeId, Tensor> bias_add(const RuleContext& ctx, ValueId v, int64_t cols) {
  NodeId u = ctx.sole_user(v);
  if (u < 0 || ctx.g.node(u).kind != OpKind::kAdd) return {-1, {}};
  const Node& add = ctx.g.node(u);
  ValueId other = add.inputs[0] == v ? add.inputs[1] : add.inputs[0];
  if (add.inputs[0] == add.inputs[1] || !is_constant(ctx.g, other)) return {-1, {}};
  const Tensor& b = *ctx.g.value(other).constant;
  if (b.rank() != 1 || b.shape()[0] != cols || ctx.g.type(add.outputs[0]) != ctx.g.type(v)) return {-1, {}};
  return {u, b};
}

// Identity: A@W1, ..., A@Wn = Split(A@Concat(W1..Wn, axis=1), [N1..Nn], axis=-1),
// and with row biases b_i: A@W_i + b_i = Split(A@Wcat + Concat(b_i)).
// Example: the Q, K and V projections of attention become one MatMul.
std::vector<Mutation> merge_matmuls_sharing_input(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& r = g.node(root);
  if (weight_kn(g, r).defined() == false) return {};
  ValueId a = r.inputs[0];
  std::vector<NodeId> group;
  std::set<NodeId> seen;
  for (NodeId u : ctx.users[a]) {
    const Node& n = g.node(u);
    if (!seen.insert(u).second || n.kind != r.kind || n.inputs[0] != a) continue;
    Tensor w = weight_kn(g, n);
    if (!w.defined() || w.dtype() != g.type(a).dtype || w.shape()[0] != weight_kn(g, r).shape()[0]) continue;
    group.push_back(u);
  }
  std::sort(group.begin(), group.end());
  if (group.size() < 2 || group[0] != root) return {};
  std::vector<Tensor> weights, biases;
  std::vector<int64_t> sizes;
  std::vector<NodeId> adds;
  for (NodeId u : group) {
    Tensor w = weight_kn(g, g.node(u));
    sizes.push_back(w.shape()[1]);
    weights.push_back(w);
    if (r.kind == OpKind::kGemm) {
      Tensor b = gemm_bias(g, g.node(u), w.shape()[1], w.dtype());
      if (!b.defined()) return {};
      biases.push_back(b);
    } else {
      auto [add, b] = bias_add(ctx, g.node(u).outputs[0], w.shape()[1]);
      adds.push_back(add);
      biases.push_back(b);
    }
  }
  bool with_bias = r.kind == OpKind::kGemm ||
                   std::all_of(adds.begin(), adds.end(), [](NodeId n) { return n >= 0; });
  std::vector<NodeId> nodes = group;
  if (with_bias && r.kind == OpKind::kMatMul) nodes.insert(nodes.end(), adds.begin(), adds.end());
  MutationBuilder b(g, "merge-matmuls-sharing-input", nodes);
  ValueId w = b.constant(concat_tensors(weights, 1));
  ValueId y;
  if (r.kind == OpKind::kGemm) {
    y = b.add(OpKind::kGemm, {b.in(a), w, b.constant(concat_tensors(biases, 0))});
  } else {
    y = b.add(OpKind::kMatMul, {b.in(a), w});
    if (with_bias) y = b.add(OpKind::kAdd, {y, b.constant(concat_tensors(biases, 0))});
  }
  int64_t axis = b.type(y).rank() - 1;
  std::vector<ValueId> parts = b.add_multi(OpKind::kSplit, {y}, split_attrs(axis, sizes), static_cast<int>(sizes.size()));
  for (size_t i = 0; i < group.size(); ++i) {
    ValueId old = (with_bias && r.kind == OpKind::kMatMul) ? g.node(adds[i]).outputs[0] : g.node(group[i]).outputs[0];
    b.replace(old, parts[i]);
  }
  return {b.finish(std::to_string(group.size()) + " " + op_name(r.kind) + "s reading " + g.value(a).name +
                   " merged into one")};
}

}  // namespace

// A projection by a merged weight whose result is split along its columns
// (GPT-2's c_attn: Gemm, Reshape back to [B, S, 3H], Split into Q, K, V).
// The ops between the product and the Split must keep the last axis as it
// is: a bias Add over it, a Reshape of the leading dims.
std::optional<MergedProjection> match_merged_projection(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& split = g.node(root);
  if (split.kind != OpKind::kSplit) return std::nullopt;
  MergedProjection m;
  m.split = root;
  ValueId y = split.inputs[0];
  const int64_t rank = g.type(y).rank();
  if (rank < 1 || split.outputs.size() < 2) return std::nullopt;
  int64_t axis = SplitAttrs::of(split).axis;
  if (axis < 0) axis += rank;
  if (axis != rank - 1) return std::nullopt;
  const int64_t cols = g.type(y).shape.back();
  ValueId at = y;
  m.nodes.push_back(root);
  for (int step = 0; step < 2; ++step) {
    NodeId p = g.value(at).producer;
    if (p < 0 || ctx.sole_user(at) < 0 || ctx.is_graph_output(at)) return std::nullopt;
    const Node& pn = g.node(p);
    if (pn.kind == OpKind::kReshape && m.reshape < 0 && m.add < 0 && g.type(pn.inputs[0]).rank() >= 1 &&
        g.type(pn.inputs[0]).shape.back() == cols) {
      m.reshape = p;
      at = pn.inputs[0];
    } else if (pn.kind == OpKind::kAdd && m.add < 0) {
      for (int side = 0; side < 2 && m.add < 0; ++side) {
        ValueId v = pn.inputs[static_cast<size_t>(side)];
        if (is_constant(g, v)) continue;
        auto [a, bias] = bias_add(ctx, v, cols);
        if (a != p) continue;
        m.add = p;
        m.bias = bias;
        at = v;
      }
      if (m.add < 0) return std::nullopt;
    } else {
      break;
    }
    m.nodes.push_back(p);
  }
  NodeId mm = g.value(at).producer;
  if (mm < 0 || ctx.sole_user(at) < 0 || ctx.is_graph_output(at)) return std::nullopt;
  const Node& prod = g.node(mm);
  if (prod.kind != OpKind::kMatMul && prod.kind != OpKind::kGemm) return std::nullopt;
  m.weight = weight_kn(g, prod);
  if (!m.weight.defined() || m.weight.shape()[1] != cols) return std::nullopt;
  if (prod.kind == OpKind::kGemm) {
    m.gemm_bias = gemm_bias(g, prod, cols, m.weight.dtype());
    if (!m.gemm_bias.defined()) return std::nullopt;
  }
  m.product = mm;
  m.nodes.push_back(mm);
  std::sort(m.nodes.begin(), m.nodes.end());
  m.sizes = SplitAttrs::of(split).split;
  if (m.sizes.empty()) {
    const auto parts = static_cast<int64_t>(split.outputs.size());
    if (cols % parts != 0) return std::nullopt;
    m.sizes.assign(static_cast<size_t>(parts), cols / parts);
  }
  return m;
}

namespace {

// x times columns [begin, begin + count) of the merged weight (and bias), as
// the product was written.
// `as_host`: the product stands for the merged one (keeps its name).
ValueId part_product(MutationBuilder& b, const Graph& g, const MergedProjection& m, ValueId x, const Tensor& w,
                     const Tensor& gbias, const Tensor& bias, bool as_host = false) {
  ValueId wi = b.constant(w);
  ValueId y;
  if (g.node(m.product).kind == OpKind::kGemm) {
    Attrs a;
    a.set("alpha", 1.0);
    a.set("beta", 1.0);
    a.set("transA", int64_t{0});
    a.set("transB", int64_t{0});
    y = as_host ? b.add_as(m.product, OpKind::kGemm, {x, wi, b.constant(gbias)}, a)
                : b.add(OpKind::kGemm, {x, wi, b.constant(gbias)}, a);
  } else {
    y = as_host ? b.add_as(m.product, OpKind::kMatMul, {x, wi}) : b.add(OpKind::kMatMul, {x, wi});
  }
  if (m.add >= 0) y = b.add(OpKind::kAdd, {y, b.constant(bias)});
  return y;
}

Attrs reshape_to(const Shape& s) {
  Attrs a;
  a.set("shape", s);
  return a;
}

// Identity: Split(A@Concat(W1..Wn)) = A@W1, ..., A@Wn (the merge rule's,
// read the other way). One projection per part, each by its own columns of
// the weight (and bias), so that each can be column-split on its own and
// every rank holds whole heads of Q, K and V.
std::vector<Mutation> split_merged_projection(const RuleContext& ctx, NodeId root) {
  std::optional<MergedProjection> m = match_merged_projection(ctx, root);
  if (!m) return {};
  const Graph& g = ctx.g;
  const Node& split = g.node(root);
  const Node& prod = g.node(m->product);
  MutationBuilder b(g, "split-merged-projection", m->nodes);
  ValueId x = b.in(prod.inputs[0]);
  int64_t offset = 0;
  for (size_t i = 0; i < m->sizes.size(); ++i) {
    int64_t n = m->sizes[i];
    ValueId part = part_product(b, g, *m, x, slice_last_axis(m->weight, offset, n),
                                m->gemm_bias.defined() ? slice_last_axis(m->gemm_bias, offset, n) : Tensor{},
                                m->bias.defined() ? slice_last_axis(m->bias, offset, n) : Tensor{});
    if (m->reshape >= 0) part = b.add(OpKind::kReshape, {part}, reshape_to(g.type(split.outputs[i]).shape));
    b.replace(split.outputs[i], part);
    offset += n;
  }
  return {b.finish(std::string(op_name(prod.kind)) + " by " + g.value(prod.inputs[1]).name + " and its Split become " +
                   std::to_string(m->sizes.size()) + " projections")};
}

}  // namespace

// The merged weight's columns reordered so that `ways` equal blocks each
// hold the same share of every part ([Q_0 K_0 V_0 | Q_1 K_1 V_1 | ...]),
// and the product's result put back in order by a Reshape to [..., ways,
// parts, H/ways], a Transpose of those two axes, a Split of the parts and a
// Reshape of each to [..., H]: the same values, and a column split of the
// new weight over `ways` ranks gives each rank whole heads of every part
// from one product. Parts must be equal and divisible by `ways`.
std::vector<Mutation> permute_merged_projection(const RuleContext& ctx, NodeId root, int64_t ways) {
  std::optional<MergedProjection> m = match_merged_projection(ctx, root);
  if (!m || ways < 2) return {};
  const auto parts = static_cast<int64_t>(m->sizes.size());
  const int64_t h = m->sizes[0];
  for (int64_t s : m->sizes)
    if (s != h) return {};
  if (h % ways != 0) return {};
  const int64_t block = h / ways;
  const Graph& g = ctx.g;
  const Node& split = g.node(root);
  const Node& prod = g.node(m->product);
  auto permute = [&](const Tensor& t) {
    std::vector<Tensor> pieces;
    for (int64_t r = 0; r < ways; ++r)
      for (int64_t p = 0; p < parts; ++p) pieces.push_back(slice_last_axis(t, p * h + r * block, block));
    return concat_tensors(pieces, t.rank() - 1);
  };
  MutationBuilder b(g, "permute-merged-projection", m->nodes);
  ValueId y = part_product(b, g, *m, b.in(prod.inputs[0]), permute(m->weight),
                           m->gemm_bias.defined() ? permute(m->gemm_bias) : Tensor{},
                           m->bias.defined() ? permute(m->bias) : Tensor{}, true);
  Shape lead = g.type(split.inputs[0]).shape;
  lead.pop_back();
  Shape blocked = lead;
  blocked.insert(blocked.end(), {ways, parts, block});
  ValueId v = b.add(OpKind::kReshape, {y}, reshape_to(blocked));
  std::vector<int64_t> perm;
  for (size_t d = 0; d < lead.size(); ++d) perm.push_back(static_cast<int64_t>(d));
  const auto l = static_cast<int64_t>(lead.size());
  perm.insert(perm.end(), {l + 1, l, l + 2});
  Attrs ta;
  ta.set("perm", perm);
  v = b.add(OpKind::kTranspose, {v}, ta);
  Attrs sa;
  sa.set("axis", l);
  sa.set("split", std::vector<int64_t>(static_cast<size_t>(parts), 1));
  std::vector<ValueId> outs = b.add_multi(OpKind::kSplit, {v}, sa, static_cast<int>(parts));
  for (size_t i = 0; i < outs.size(); ++i)
    b.replace(split.outputs[i], b.add(OpKind::kReshape, {outs[i]}, reshape_to(g.type(split.outputs[i]).shape)));
  return {b.finish(std::string(op_name(prod.kind)) + " by " + g.value(prod.inputs[1]).name + ": columns in " +
                   std::to_string(ways) + " blocks of every part")};
}

namespace {

bool same_geometry_but_group(const Node& a, const Node& b) {
  const WindowAttrs wa = WindowAttrs::of(a), wb = WindowAttrs::of(b);
  return wa.kernel_shape == wb.kernel_shape && wa.strides == wb.strides && wa.pads == wb.pads &&
         wa.dilations == wb.dilations;
}

bool same_geometry(const Node& a, const Node& b) {
  return same_geometry_but_group(a, b) && ConvAttrs::of(a).group == ConvAttrs::of(b).group;
}

// A Conv with a constant weight and a constant or absent bias, group 1.
bool plain_conv(const Graph& g, const Node& n) {
  return n.kind == OpKind::kConv && ConvAttrs::of(n).group == 1 && is_constant(g, n.inputs[1]) &&
         !is_constant(g, n.inputs[0]) && (n.inputs.size() < 3 || n.inputs[2] == kNoValue || is_constant(g, n.inputs[2]));
}

Tensor conv_bias(const Graph& g, const Node& n) {
  int64_t cout = g.type(n.inputs[1]).shape[0];
  if (n.inputs.size() < 3 || n.inputs[2] == kNoValue) return Tensor(g.type(n.inputs[1]).dtype, {cout});
  return *g.value(n.inputs[2]).constant;
}

// Builds Conv(x, Concat(W_i), Concat(b_i)) with `group` groups, Split on channels.
Mutation merged_conv(const RuleContext& ctx, const std::vector<NodeId>& convs, ValueId x, int64_t group,
                     const std::string& rule, const std::string& what) {
  const Graph& g = ctx.g;
  std::vector<Tensor> ws, bs;
  std::vector<int64_t> sizes;
  for (NodeId c : convs) {
    ws.push_back(*g.value(g.node(c).inputs[1]).constant);
    bs.push_back(conv_bias(g, g.node(c)));
    sizes.push_back(ws.back().shape()[0]);
  }
  MutationBuilder b(g, rule, convs);
  Attrs attrs = g.node(convs[0]).attrs;
  attrs.set("group", group);
  ValueId in = x;
  if (x == kNoValue) {
    std::vector<ValueId> xs;
    for (NodeId c : convs) xs.push_back(b.in(g.node(c).inputs[0]));
    Attrs cat;
    cat.set("axis", int64_t{1});
    in = b.add(OpKind::kConcat, xs, cat);
  } else {
    in = b.in(x);
  }
  ValueId y = b.add(OpKind::kConv, {in, b.constant(concat_tensors(ws, 0)), b.constant(concat_tensors(bs, 0))}, attrs);
  std::vector<ValueId> parts = b.add_multi(OpKind::kSplit, {y}, split_attrs(1, sizes), static_cast<int>(sizes.size()));
  for (size_t i = 0; i < convs.size(); ++i) b.replace(g.node(convs[i]).outputs[0], parts[i]);
  return b.finish(std::to_string(convs.size()) + " Convs " + what);
}

// Identity: Conv(X, W1), ..., Conv(X, Wn) = Split(Conv(X, Concat(W1..Wn, axis=0)), axis=1)
// for equal kernel, stride, pad and dilation. Example: the 1x1 branches of
// an Inception block.
std::vector<Mutation> merge_convs_sharing_input(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& r = g.node(root);
  if (!plain_conv(g, r)) return {};
  std::vector<NodeId> group;
  for (NodeId u : ctx.users[r.inputs[0]]) {
    const Node& n = g.node(u);
    if (plain_conv(g, n) && n.inputs[0] == r.inputs[0] && same_geometry(n, r) &&
        g.type(n.inputs[1]).shape == g.type(r.inputs[1]).shape && std::find(group.begin(), group.end(), u) == group.end())
      group.push_back(u);
  }
  std::sort(group.begin(), group.end());
  if (group.size() < 2 || group[0] != root) return {};
  // Different weight shapes (kernel size) cannot share a Conv; equal ones can.
  return {merged_conv(ctx, group, r.inputs[0], 1, "merge-convs-sharing-input",
                      "reading " + g.value(r.inputs[0]).name + " merged into one")};
}

// Whether `to` reads, transitively, an output of `from`.
bool reaches(const RuleContext& ctx, NodeId from, NodeId to) {
  std::vector<NodeId> stack = {from};
  std::set<NodeId> seen;
  while (!stack.empty()) {
    NodeId n = stack.back();
    stack.pop_back();
    if (n == to) return true;
    if (!seen.insert(n).second || seen.size() > 4096) continue;
    for (ValueId o : ctx.g.node(n).outputs)
      for (NodeId u : ctx.users[o]) stack.push_back(u);
  }
  return false;
}

// Identity: Conv(X1, W1), ..., Conv(Xn, Wn) = Split(Conv(Concat(X1..Xn, axis=1),
// Concat(W1..Wn, axis=0), group=n), axis=1) for equal shapes and geometry.
// Example: two parallel 3x3 branches of a block become one grouped Conv.
std::vector<Mutation> merge_parallel_convs_into_group(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& r = g.node(root);
  if (!plain_conv(g, r)) return {};
  std::vector<NodeId> group = {root};
  for (NodeId n = root + 1; n < g.num_nodes(); ++n) {
    const Node& c = g.node(n);
    if (!plain_conv(g, c) || c.inputs[0] == r.inputs[0] || !same_geometry(c, r) ||
        g.type(c.inputs[0]) != g.type(r.inputs[0]) || g.type(c.inputs[1]) != g.type(r.inputs[1]))
      continue;
    bool independent = true;
    for (NodeId m : group) independent = independent && !reaches(ctx, m, n) && !reaches(ctx, n, m);
    if (independent) group.push_back(n);
  }
  for (NodeId n = 0; n < root; ++n)  // root must be the first of its group
    if (plain_conv(g, g.node(n)) && same_geometry(g.node(n), r) && g.type(g.node(n).inputs[0]) == g.type(r.inputs[0]) &&
        g.type(g.node(n).inputs[1]) == g.type(r.inputs[1]) && g.node(n).inputs[0] != r.inputs[0] &&
        !reaches(ctx, n, root) && !reaches(ctx, root, n))
      return {};
  if (group.size() < 2) return {};
  return {merged_conv(ctx, group, kNoValue, static_cast<int64_t>(group.size()), "merge-parallel-convs-into-group",
                      "on different inputs merged into one grouped Conv")};
}

// The only node of `kind` in g, or -1 (none, or several).
NodeId only_node(const Graph& g, OpKind kind) {
  NodeId found = -1;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (g.node(n).kind == kind) {
      if (found >= 0) return -1;
      found = n;
    }
  return found;
}

// The replacement's Split: one, on `axis` (or the last axis when -1), into
// `sizes`, its outputs the replacement's outputs in order; its input's producer, or -1.
NodeId split_of(const Graph& r, int64_t axis, const std::vector<int64_t>& sizes) {
  NodeId s = only_node(r, OpKind::kSplit);
  if (s < 0) return -1;
  const Node& n = r.node(s);
  const SplitAttrs attrs = SplitAttrs::of(n);
  int64_t rank = r.type(n.inputs[0]).rank(), ax = attrs.axis;
  if (ax < 0) ax += rank;
  if (ax != (axis < 0 ? rank - 1 : axis) || attrs.split != sizes || n.outputs != r.outputs()) return -1;
  return r.value(n.inputs[0]).producer;
}

const Tensor* constant_of(const Graph& g, ValueId v) {
  return v != kNoValue && g.value(v).is_constant() ? &*g.value(v).constant : nullptr;
}

// covered_by of merge-matmuls-sharing-input (obligation matmul-concat-weights):
// `before` is n >= 2 products of one kind of its one input A by constant
// 2-D weights (Gemm: alpha = beta = 1, transA = 0), every one with a
// constant row bias (Gemm's C or the Add of a 1-D constant) or none with
// one; the replacement is the product of A by the weights' concatenation
// (plus the biases'), split on the last axis into the parts in order.
std::string merged_matmuls_covered(const Mutation& m) {
  const Graph& g = m.before;
  if (g.inputs().size() != 1 || g.outputs().size() < 2) return "";
  std::vector<Tensor> ws, bs;
  std::vector<int64_t> sizes;
  OpKind kind = OpKind::kMatMul;
  bool biased = false;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    NodeId p = g.value(g.outputs()[i]).producer;
    if (p < 0) return "";
    const Node* n = &g.node(p);
    Tensor bias;
    if (n->kind == OpKind::kAdd) {
      int side = constant_of(g, n->inputs[1]) ? 1 : 0;
      const Tensor* b = constant_of(g, n->inputs[side]);
      NodeId q = g.value(n->inputs[1 - side]).producer;
      if (!b || b->rank() != 1 || q < 0) return "";
      bias = *b;
      n = &g.node(q);
      if (n->kind != OpKind::kMatMul) return "";
    }
    if (i == 0) kind = n->kind, biased = bias.defined() || kind == OpKind::kGemm;
    if (n->kind != kind || n->inputs[0] != g.inputs()[0] || (kind == OpKind::kMatMul && bias.defined() != biased)) return "";
    Tensor w = weight_kn(g, *n);
    if (!w.defined()) return "";
    if (kind == OpKind::kGemm) bias = gemm_bias(g, *n, w.shape()[1], w.dtype());
    if (biased && (!bias.defined() || bias.numel() != w.shape()[1])) return "";
    sizes.push_back(w.shape()[1]);
    ws.push_back(w);
    if (biased) bs.push_back(bias.reshaped({w.shape()[1]}));
  }
  const Graph& r = m.replacement;
  NodeId top = split_of(r, -1, sizes);
  if (top < 0) return "";
  const Node* prod = &r.node(top);
  Tensor bias;
  if (prod->kind == OpKind::kAdd && kind == OpKind::kMatMul) {
    const Tensor* b = constant_of(r, prod->inputs[1]);
    if (!b || r.value(prod->inputs[0]).producer < 0) return "";
    bias = *b;
    prod = &r.node(r.value(prod->inputs[0]).producer);
  }
  if (prod->kind != kind || prod->inputs[0] != r.inputs()[0]) return "";
  Tensor w = weight_kn(r, *prod);
  if (kind == OpKind::kGemm) bias = w.defined() ? gemm_bias(r, *prod, w.shape()[1], w.dtype()) : Tensor{};
  if (!w.defined() || !same_tensor(w, concat_tensors(ws, 1))) return "";
  if (biased != bias.defined() || (biased && !same_tensor(bias.reshaped({bias.numel()}), concat_tensors(bs, 0))))
    return "";
  return "matmul-concat-weights";
}

// The convolutions' weights and biases (zeros where absent) in output order,
// when every output of g is a plain Conv (group 1, constant weights) with
// the same attributes as the first; `xs` gets each one's input.
bool conv_parts(const Graph& g, std::vector<Tensor>& ws, std::vector<Tensor>& bs, std::vector<ValueId>& xs) {
  const Node* first = nullptr;
  for (ValueId out : g.outputs()) {
    NodeId p = g.value(out).producer;
    if (p < 0 || !plain_conv(g, g.node(p))) return false;
    const Node& n = g.node(p);
    if (first && (!same_geometry(n, *first) || g.type(n.inputs[1]) != g.type(first->inputs[1]) ||
                  g.type(n.inputs[0]) != g.type(first->inputs[0])))
      return false;
    first = first ? first : &n;
    ws.push_back(*g.value(n.inputs[1]).constant);
    bs.push_back(conv_bias(g, n));
    xs.push_back(n.inputs[0]);
  }
  return ws.size() >= 2;
}

// The replacement's merged Conv before its Split on channels: its geometry
// that of the parts (`like`) with `group`, its weight and bias the parts'
// concatenations; the node, or null.
const Node* merged_conv_of(const Graph& r, const Node& like, int64_t group, const std::vector<Tensor>& ws,
                           const std::vector<Tensor>& bs) {
  std::vector<int64_t> sizes;
  for (const Tensor& w : ws) sizes.push_back(w.shape()[0]);
  NodeId c = split_of(r, 1, sizes);
  if (c < 0) return nullptr;
  const Node& n = r.node(c);
  if (n.kind != OpKind::kConv || ConvAttrs::of(n).group != group || !same_geometry_but_group(n, like)) return nullptr;
  const Tensor* w = constant_of(r, n.inputs[1]);
  const Tensor* b = n.inputs.size() > 2 ? constant_of(r, n.inputs[2]) : nullptr;
  if (!w || !b || !same_tensor(*w, concat_tensors(ws, 0)) || !same_tensor(*b, concat_tensors(bs, 0))) return nullptr;
  return &n;
}

// covered_by of merge-convs-sharing-input (obligation conv-concat-weights):
// n >= 2 Convs of the one input X, group 1, equal kernel, stride, pad,
// dilation and weight shape, constant weights and biases; the replacement is
// the Conv of X by their concatenation on output channels, split back in order.
std::string merged_convs_covered(const Mutation& m) {
  std::vector<Tensor> ws, bs;
  std::vector<ValueId> xs;
  const Graph& g = m.before;
  if (g.inputs().size() != 1 || !conv_parts(g, ws, bs, xs)) return "";
  const Node* c = merged_conv_of(m.replacement, g.node(g.value(g.outputs()[0]).producer), 1, ws, bs);
  return c && c->inputs[0] == m.replacement.inputs()[0] ? "conv-concat-weights" : "";
}

// covered_by of merge-parallel-convs-into-group (obligation
// conv-group-concat): n = 2 to 4 Convs of n different inputs of one type,
// each the before graph's input in order, group 1, equal geometry and weight
// shape; the replacement is one Conv with group n of the inputs' Concat on
// channels (in the same order) by the weights' concatenation, split back.
std::string grouped_convs_covered(const Mutation& m) {
  std::vector<Tensor> ws, bs;
  std::vector<ValueId> xs;
  const Graph& g = m.before;
  if (!conv_parts(g, ws, bs, xs) || xs.size() > 4 || xs != g.inputs()) return "";
  const Graph& r = m.replacement;
  const Node* c = merged_conv_of(r, g.node(g.value(g.outputs()[0]).producer), static_cast<int64_t>(xs.size()), ws, bs);
  if (!c || r.value(c->inputs[0]).producer < 0) return "";
  const Node& cat = r.node(r.value(c->inputs[0]).producer);
  if (cat.kind != OpKind::kConcat || ConcatAttrs::of(cat).axis != 1 || cat.inputs != r.inputs()) return "";
  return "conv-group-concat";
}

}  // namespace

void register_merge_rules(std::vector<Rule>& rules) {
  rules.push_back({.name = "merge-matmuls-sharing-input",
                   .identity = "A@W1 + b1, A@W2 + b2 = Split(A@Concat(W1, W2, axis=1) + Concat(b1, b2))",
                   .roots = {OpKind::kMatMul, OpKind::kGemm},
                   .fn = merge_matmuls_sharing_input,
                   .obligations = {"matmul-concat-weights"},
                   .covered_by = merged_matmuls_covered});
  rules.push_back({.name = "split-merged-projection",
                   .identity = "Split(A@Concat(W1, W2, axis=1)) = A@W1, A@W2",
                   .roots = {OpKind::kSplit},
                   .fn = split_merged_projection,
                   .obligations = {"matmul-concat-weights"},
                   .per_instance = "the sharding search proposes it with the Reshape that may sit between the "
                                   "product and the Split, which the obligation does not state",
                   .mesh_only = true});
  rules.push_back({.name = "permute-merged-projection",
                   .identity = "Split(A@W) = Reshape(Split(Transpose(Reshape(A@P(W)))), P(W) the columns of W in "
                               "`ways` blocks of every part",
                   .roots = {OpKind::kSplit},
                   .per_instance = "a column permutation undone by Reshape, Transpose and Split, for the mesh's "
                                   "degree; the plan's end-to-end check runs it",
                   .mesh_only = true,
                   .mesh_fn = permute_merged_projection});
  rules.push_back({.name = "merge-convs-sharing-input",
                   .identity = "Conv(X, W1), Conv(X, W2) = Split(Conv(X, Concat(W1, W2, axis=0)))",
                   .roots = {OpKind::kConv},
                   .fn = merge_convs_sharing_input,
                   .obligations = {"conv-concat-weights"},
                   .covered_by = merged_convs_covered});
  rules.push_back({.name = "merge-parallel-convs-into-group",
                   .identity = "Conv(X1, W1), Conv(X2, W2) = Split(Conv(Concat(X1, X2), Concat(W1, W2), group=2))",
                   .roots = {OpKind::kConv},
                   .fn = merge_parallel_convs_into_group,
                   .obligations = {"conv-group-concat"},
                   .covered_by = grouped_convs_covered});
}

}  // namespace tessera::mutator
