#include "mutator/pet/catalogue.h"

#include <algorithm>

#include "mutator/mutation.h"
#include "mutator/rules/rule.h"
#include "graph/attr_views.h"

namespace tessera::mutator::pet {

namespace {

Attrs ints_attr(const char* key, std::vector<int64_t> v) {
  Attrs a;
  a.set(key, std::move(v));
  return a;
}

ValueId reshape(MutationBuilder& b, ValueId x, Shape s) {
  if (b.type(x).shape == s) return x;
  return b.add(OpKind::kReshape, {x}, ints_attr("shape", std::vector<int64_t>(s.begin(), s.end())));
}

ValueId transpose(MutationBuilder& b, ValueId x, std::vector<int64_t> perm) {
  return b.add(OpKind::kTranspose, {x}, ints_attr("perm", std::move(perm)));
}

// Rewrites `nodes` of g through a MutationBuilder; `build` returns false when
// the move does not apply after all.
template <class F>
std::optional<Graph> rewrite(const Graph& g, std::vector<NodeId> nodes, F&& build) {
  MutationBuilder b(g, "pet", std::move(nodes));
  if (!build(b)) return std::nullopt;
  return apply_mutation(g, b.finish(""));
}

// A 2-D Conv (4-D NCHW input), the only rank the spatial moves handle.
bool conv2d(const Graph& g, NodeId n) {
  const Node& c = g.node(n);
  return c.kind == OpKind::kConv && g.type(c.inputs[0]).rank() == 4;
}

ValueId conv_on(MutationBuilder& b, const Node& c, ValueId x, const Attrs& attrs) {
  std::vector<ValueId> ins = {x, b.in(c.inputs[1])};
  if (c.inputs.size() > 2 && c.inputs[2] != kNoValue) ins.push_back(b.in(c.inputs[2]));
  return b.add(OpKind::kConv, ins, attrs);
}

// batch -> height (axis 2) or width (axis 3): the N images laid side by side
// along one spatial axis, one Conv over the strip. With padding the rows at
// each seam read the neighbour image instead of zeros: a partial mutant.
std::optional<Graph> batch_to_space(const Graph& g, NodeId n, int axis) {
  if (!conv2d(g, n)) return std::nullopt;
  const Node& c = g.node(n);
  Shape in = g.type(c.inputs[0]).shape, out = g.type(c.outputs[0]).shape;
  int64_t s = ConvAttrs::of(c).strides[static_cast<size_t>(axis - 2)];
  if (in[0] < 2 || in[axis] % s != 0 || out[axis] * s != in[axis]) return std::nullopt;
  return rewrite(g, {n}, [&](MutationBuilder& b) {
    int64_t N = in[0], C = in[1], H = in[2], W = in[3];
    ValueId x = b.in(c.inputs[0]);
    ValueId y;
    if (axis == 2) {
      y = conv_on(b, c, reshape(b, transpose(b, x, {1, 0, 2, 3}), {1, C, N * H, W}), c.attrs);
      if (b.type(y).shape != Shape{1, out[1], N * out[2], out[3]}) return false;
      y = transpose(b, reshape(b, y, {out[1], N, out[2], out[3]}), {1, 0, 2, 3});
    } else {
      y = conv_on(b, c, reshape(b, transpose(b, x, {1, 2, 0, 3}), {1, C, H, N * W}), c.attrs);
      if (b.type(y).shape != Shape{1, out[1], out[2], N * out[3]}) return false;
      y = transpose(b, reshape(b, y, {out[1], out[2], N, out[3]}), {2, 0, 1, 3});
    }
    b.replace(c.outputs[0], y);
    return true;
  });
}

// height/width -> batch: the axis cut into two halves that become two images
// (the inverse of batch_to_space). The rows at the cut lose their neighbours.
std::optional<Graph> space_to_batch(const Graph& g, NodeId n, int axis) {
  constexpr int64_t f = 2;
  if (!conv2d(g, n)) return std::nullopt;
  const Node& c = g.node(n);
  Shape in = g.type(c.inputs[0]).shape, out = g.type(c.outputs[0]).shape;
  if (in[axis] % f != 0 || out[axis] % f != 0) return std::nullopt;
  return rewrite(g, {n}, [&](MutationBuilder& b) {
    int64_t N = in[0], C = in[1], H = in[2], W = in[3];
    int64_t Co = out[1], Ho = out[2], Wo = out[3];
    ValueId x = b.in(c.inputs[0]);
    ValueId y;
    if (axis == 2) {
      x = reshape(b, transpose(b, reshape(b, x, {N, C, f, H / f, W}), {2, 0, 1, 3, 4}), {f * N, C, H / f, W});
      y = conv_on(b, c, x, c.attrs);
      if (b.type(y).shape != Shape{f * N, Co, Ho / f, Wo}) return false;
      y = reshape(b, transpose(b, reshape(b, y, {f, N, Co, Ho / f, Wo}), {1, 2, 0, 3, 4}), out);
    } else {
      x = reshape(b, transpose(b, reshape(b, x, {N, C, H, f, W / f}), {3, 0, 1, 2, 4}), {f * N, C, H, W / f});
      y = conv_on(b, c, x, c.attrs);
      if (b.type(y).shape != Shape{f * N, Co, Ho, Wo / f}) return false;
      y = reshape(b, transpose(b, reshape(b, y, {f, N, Co, Ho, Wo / f}), {1, 2, 3, 0, 4}), out);
    }
    b.replace(c.outputs[0], y);
    return true;
  });
}

// dilation -> batch (space-to-batch): a Conv dilated by (dh, dw) reads only
// positions congruent mod d, so the d*d phases become d*d images of a plain
// Conv. Needs stride 1 and sizes and pads divisible by d (pad-to-multiple and
// explicit-pad make them so).
std::optional<Graph> dilation_to_batch(const Graph& g, NodeId n) {
  if (!conv2d(g, n)) return std::nullopt;
  const Node& c = g.node(n);
  const ConvAttrs conv = ConvAttrs::of(c);
  const auto& d = conv.dilations;
  const auto& s = conv.strides;
  const auto& p = conv.pads;
  if ((d[0] == 1 && d[1] == 1) || s[0] != 1 || s[1] != 1) return std::nullopt;
  Shape in = g.type(c.inputs[0]).shape, out = g.type(c.outputs[0]).shape;
  int64_t dh = d[0], dw = d[1];
  if (in[2] % dh || in[3] % dw || out[2] % dh || out[3] % dw || p[0] % dh || p[2] % dh || p[1] % dw || p[3] % dw)
    return std::nullopt;
  return rewrite(g, {n}, [&](MutationBuilder& b) {
    int64_t N = in[0], C = in[1], H = in[2], W = in[3];
    ValueId x = reshape(b, b.in(c.inputs[0]), {N, C, H / dh, dh, W / dw, dw});
    x = reshape(b, transpose(b, x, {3, 5, 0, 1, 2, 4}), {dh * dw * N, C, H / dh, W / dw});
    Attrs a = c.attrs;
    a.set("dilations", std::vector<int64_t>{1, 1});
    a.set("pads", std::vector<int64_t>{p[0] / dh, p[1] / dw, p[2] / dh, p[3] / dw});
    ValueId y = conv_on(b, c, x, a);
    int64_t Co = out[1], Ho = out[2], Wo = out[3];
    if (b.type(y).shape != Shape{dh * dw * N, Co, Ho / dh, Wo / dw}) return false;
    y = transpose(b, reshape(b, y, {dh, dw, N, Co, Ho / dh, Wo / dw}), {2, 3, 4, 0, 5, 1});
    b.replace(c.outputs[0], reshape(b, y, out));
    return true;
  });
}

// Conv(X, pads) = Conv(Pad(X, pads), pads 0): the padding becomes data, so
// later moves may cut or fold the padded tensor freely.
std::optional<Graph> explicit_pad(const Graph& g, NodeId n) {
  if (!conv2d(g, n)) return std::nullopt;
  const Node& c = g.node(n);
  const std::vector<int64_t> p = ConvAttrs::of(c).pads;
  if (std::all_of(p.begin(), p.end(), [](int64_t v) { return v == 0; })) return std::nullopt;
  return rewrite(g, {n}, [&](MutationBuilder& b) {
    Attrs pad = ints_attr("pads", {0, 0, p[0], p[1], 0, 0, p[2], p[3]});
    pad.set("mode", std::string("constant"));
    pad.set("value", 0.0);
    Attrs a = c.attrs;
    a.set("pads", std::vector<int64_t>{0, 0, 0, 0});
    b.replace(c.outputs[0], conv_on(b, c, b.add(OpKind::kPad, {b.in(c.inputs[0])}, pad), a));
    return true;
  });
}

// Odd sizes: zeros appended on one axis up to a multiple of the axis'
// dilation (2 when undilated), the extra outputs sliced off. The appended
// zeros are what the Conv's own padding read there, so this is exact.
std::optional<Graph> pad_to_multiple(const Graph& g, NodeId n, int axis) {
  if (!conv2d(g, n)) return std::nullopt;
  const Node& c = g.node(n);
  int64_t d = ConvAttrs::of(c).dilations[static_cast<size_t>(axis - 2)];
  int64_t m = d > 1 ? d : 2;
  Shape in = g.type(c.inputs[0]).shape, out = g.type(c.outputs[0]).shape;
  if (in[axis] % m == 0) return std::nullopt;
  int64_t extra = m - in[axis] % m;
  return rewrite(g, {n}, [&](MutationBuilder& b) {
    std::vector<int64_t> pads(8, 0);
    pads[4 + axis] = extra;
    Attrs pad = ints_attr("pads", pads);
    pad.set("mode", std::string("constant"));
    pad.set("value", 0.0);
    ValueId y = conv_on(b, c, b.add(OpKind::kPad, {b.in(c.inputs[0])}, pad), c.attrs);
    Attrs slice = ints_attr("starts", {0});
    slice.set("ends", std::vector<int64_t>{out[axis]});
    slice.set("axes", std::vector<int64_t>{axis});
    slice.set("steps", std::vector<int64_t>{1});
    b.replace(c.outputs[0], b.add(OpKind::kSlice, {y}, slice));
    return true;
  });
}

Tensor rows(const Tensor& t, int64_t begin, int64_t count) {
  int64_t row = t.numel() / t.shape()[0] * static_cast<int64_t>(dtype_size(t.dtype()));
  Shape s = t.shape();
  s[0] = count;
  std::vector<uint8_t> bytes(t.data() + begin * row, t.data() + (begin + count) * row);
  return Tensor::from_bytes(t.dtype(), s, std::move(bytes));
}

// Group split: Conv(X, group=g) = Concat(Conv(X_i, W_i) for each group): g
// plain Convs that later moves (or merges) can treat one by one.
std::optional<Graph> group_split(const Graph& g, NodeId n) {
  if (!conv2d(g, n)) return std::nullopt;
  const Node& c = g.node(n);
  int64_t groups = ConvAttrs::of(c).group;
  bool bias = c.inputs.size() > 2 && c.inputs[2] != kNoValue;
  if (groups < 2 || groups > 4 || !is_constant(g, c.inputs[1]) || (bias && !is_constant(g, c.inputs[2])))
    return std::nullopt;
  return rewrite(g, {n}, [&](MutationBuilder& b) {
    const Tensor& w = *g.value(c.inputs[1]).constant;
    int64_t cin = g.type(c.inputs[0]).shape[1] / groups, cout = w.shape()[0] / groups;
    Attrs split = ints_attr("split", std::vector<int64_t>(groups, cin));
    split.set("axis", int64_t{1});
    std::vector<ValueId> xs = b.add_multi(OpKind::kSplit, {b.in(c.inputs[0])}, split, static_cast<int>(groups));
    Attrs a = c.attrs;
    a.set("group", int64_t{1});
    std::vector<ValueId> ys;
    for (int64_t k = 0; k < groups; ++k) {
      std::vector<ValueId> ins = {xs[k], b.constant(rows(w, k * cout, cout))};
      if (bias) ins.push_back(b.constant(rows(*g.value(c.inputs[2]).constant, k * cout, cout)));
      ys.push_back(b.add(OpKind::kConv, ins, a));
    }
    Attrs cat;
    cat.set("axis", int64_t{1});
    b.replace(c.outputs[0], b.add(OpKind::kConcat, ys, cat));
    return true;
  });
}

// Batch -> rows: A[b.., M, K] @ B[K, N] = reshape(A[b..*M, K] @ B): one 2-D
// GEMM instead of a batched one over a broadcast operand.
std::optional<Graph> matmul_batch_to_rows(const Graph& g, NodeId n) {
  const Node& m = g.node(n);
  if (m.kind != OpKind::kMatMul) return std::nullopt;
  Shape a = g.type(m.inputs[0]).shape;
  if (a.size() < 3 || g.type(m.inputs[1]).rank() != 2) return std::nullopt;
  return rewrite(g, {n}, [&](MutationBuilder& b) {
    int64_t rows_total = 1;
    for (size_t i = 0; i + 1 < a.size(); ++i) rows_total *= a[i];
    ValueId y = b.add(OpKind::kMatMul, {reshape(b, b.in(m.inputs[0]), {rows_total, a.back()}), b.in(m.inputs[1])});
    b.replace(m.outputs[0], reshape(b, y, g.type(m.outputs[0]).shape));
    return true;
  });
}

// Stacks x1 and x2 (equal types) on a new leading axis of size 2, then
// reshapes to `rank` + 1 dims by inserting unit dims after it (so that the
// stacked operands of a MatMul broadcast against each other).
ValueId stack2(MutationBuilder& b, ValueId x1, ValueId x2, size_t rank) {
  Attrs un = ints_attr("axes", {0});
  Attrs cat;
  cat.set("axis", int64_t{0});
  ValueId s = b.add(OpKind::kConcat, {b.add(OpKind::kUnsqueeze, {x1}, un), b.add(OpKind::kUnsqueeze, {x2}, un)}, cat);
  Shape shape = b.type(s).shape;
  while (shape.size() < rank + 1) shape.insert(shape.begin() + 1, 1);
  return reshape(b, s, shape);
}

// Batched-matmul merge: A1@B1, A2@B2 (equal shapes, independent) =
// Split(Stack(A1, A2) @ Stack(B1, B2)): one batched product, one launch.
std::optional<Graph> matmul_pair_batch(const Graph& g, const std::vector<NodeId>& ns) {
  const Node& m1 = g.node(ns[0]);
  const Node& m2 = g.node(ns[1]);
  if (m1.kind != OpKind::kMatMul || m2.kind != OpKind::kMatMul) return std::nullopt;
  if (g.type(m1.inputs[0]) != g.type(m2.inputs[0]) || g.type(m1.inputs[1]) != g.type(m2.inputs[1])) return std::nullopt;
  if (g.type(m1.inputs[0]).rank() < 2 || g.type(m1.inputs[1]).rank() < 2) return std::nullopt;
  return rewrite(g, ns, [&](MutationBuilder& b) {
    size_t rank = std::max(g.type(m1.inputs[0]).rank(), g.type(m1.inputs[1]).rank());
    ValueId a = stack2(b, b.in(m1.inputs[0]), b.in(m2.inputs[0]), rank);
    ValueId w = stack2(b, b.in(m1.inputs[1]), b.in(m2.inputs[1]), rank);
    ValueId y = b.add(OpKind::kMatMul, {a, w});
    Attrs split = ints_attr("split", {1, 1});
    split.set("axis", int64_t{0});
    std::vector<ValueId> parts = b.add_multi(OpKind::kSplit, {y}, split, 2);
    for (int k = 0; k < 2; ++k)
      b.replace(g.node(ns[k]).outputs[0], b.add(OpKind::kSqueeze, {parts[k]}, ints_attr("axes", {0})));
    return true;
  });
}

// Two Convs with one weight on two inputs of one type: their inputs
// concatenated on `axis` (0: batch, exact; 2: height, wrong at the seam) and
// one Conv over both.
std::optional<Graph> conv_pair_concat(const Graph& g, const std::vector<NodeId>& ns, int64_t axis) {
  if (!conv2d(g, ns[0]) || !conv2d(g, ns[1])) return std::nullopt;
  const Node& c1 = g.node(ns[0]);
  const Node& c2 = g.node(ns[1]);
  auto same = [&](size_t i) {
    bool has1 = c1.inputs.size() > i && c1.inputs[i] != kNoValue, has2 = c2.inputs.size() > i && c2.inputs[i] != kNoValue;
    if (has1 != has2) return false;
    if (!has1 || c1.inputs[i] == c2.inputs[i]) return true;
    return is_constant(g, c1.inputs[i]) && is_constant(g, c2.inputs[i]) &&
           g.value(c1.inputs[i]).constant->identical(*g.value(c2.inputs[i]).constant);
  };
  if (!(c1.attrs == c2.attrs) || g.type(c1.inputs[0]) != g.type(c2.inputs[0]) || !same(1) || !same(2))
    return std::nullopt;
  Shape in = g.type(c1.inputs[0]).shape, out = g.type(c1.outputs[0]).shape;
  int64_t stride = ConvAttrs::of(c1).strides[0];
  if (axis == 2 && (in[2] % stride != 0 || out[2] * stride != in[2]))
    return std::nullopt;
  return rewrite(g, ns, [&](MutationBuilder& b) {
    Attrs cat;
    cat.set("axis", axis);
    ValueId y = conv_on(b, c1, b.add(OpKind::kConcat, {b.in(c1.inputs[0]), b.in(c2.inputs[0])}, cat), c1.attrs);
    Shape want = out;
    want[axis] *= 2;
    if (b.type(y).shape != want) return false;
    Attrs split = ints_attr("split", {out[axis], out[axis]});
    split.set("axis", axis);
    std::vector<ValueId> parts = b.add_multi(OpKind::kSplit, {y}, split, 2);
    b.replace(c1.outputs[0], parts[0]);
    b.replace(c2.outputs[0], parts[1]);
    return true;
  });
}

}  // namespace

bool is_anchor(const Node& n) { return n.kind == OpKind::kConv || n.kind == OpKind::kMatMul; }

const std::vector<Move>& catalogue() {
  using Anchors = const std::vector<NodeId>&;
  static const std::vector<Move> moves = {
      {"batch-to-height", "height-to-batch", 1, [](const Graph& g, Anchors a) { return batch_to_space(g, a[0], 2); }},
      {"batch-to-width", "width-to-batch", 1, [](const Graph& g, Anchors a) { return batch_to_space(g, a[0], 3); }},
      {"height-to-batch", "batch-to-height", 1, [](const Graph& g, Anchors a) { return space_to_batch(g, a[0], 2); }},
      {"width-to-batch", "batch-to-width", 1, [](const Graph& g, Anchors a) { return space_to_batch(g, a[0], 3); }},
      {"dilation-to-batch", "", 1, [](const Graph& g, Anchors a) { return dilation_to_batch(g, a[0]); }},
      {"explicit-pad", "", 1, [](const Graph& g, Anchors a) { return explicit_pad(g, a[0]); }},
      {"pad-height-to-multiple", "", 1, [](const Graph& g, Anchors a) { return pad_to_multiple(g, a[0], 2); }},
      {"pad-width-to-multiple", "", 1, [](const Graph& g, Anchors a) { return pad_to_multiple(g, a[0], 3); }},
      {"group-split", "", 1, [](const Graph& g, Anchors a) { return group_split(g, a[0]); }},
      {"matmul-batch-to-rows", "", 1, [](const Graph& g, Anchors a) { return matmul_batch_to_rows(g, a[0]); }},
      {"batched-matmul-merge", "", 2, [](const Graph& g, Anchors a) { return matmul_pair_batch(g, a); }},
      {"conv-batch-merge", "", 2, [](const Graph& g, Anchors a) { return conv_pair_concat(g, a, 0); }},
      {"conv-height-merge", "", 2, [](const Graph& g, Anchors a) { return conv_pair_concat(g, a, 2); }},
  };
  return moves;
}

}  // namespace tessera::mutator::pet
