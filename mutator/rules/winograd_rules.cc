// Winograd convolution: a 3x3, stride-1 convolution computed as F(m x m,
// 3 x 3) (Lavin & Gray 2016), written with standard ops so that any runtime
// runs it:
//   V = B^T d B   per input tile d ((m+2)x(m+2), stride m): a Conv of the
//                 input, channels read as batch, with (m+2)^2 fixed filters
//   M = U . V     one batched MatMul over the (m+2)^2 transformed positions,
//                 U = G g G^T the transformed weights (a constant)
//   Y = A^T M A   per tile: a MatMul by a fixed [m^2, (m+2)^2] matrix, then
//                 the m x m outputs of each tile moved into place.
// The products in the transformed domain are (m+2)^2 per m^2 outputs instead
// of 9 m^2: 2.25x fewer for F(2,3), 4x fewer for F(4,3), at the price of the
// transforms' passes over memory. The cost model decides where that pays.
//
// Verification: Z3 proves the identity for all channel counts, image sizes,
// pads and tile counts once (verifier/z3_winograd.cc: conv-winograd-f2 and
// -f4), and an instance that meets its preconditions (winograd_covered) is
// not tested. Otherwise it is tested: B, G and A are scaled to integers
// (G' = s G) and the result divided by s^2 at the end, so the Z_p test
// evaluates the exact identity with U' = G' g G'^T computed from the host's
// weights by graph ops (the mutation's unfolded form); the applied form holds
// U folded in float (its rounding is the plan check's to bound).
#include <array>
#include <algorithm>
#include <cmath>

#include "mutator/rules/rule.h"
#include "verifier/winograd_form.h"
#include "graph/attr_views.h"

namespace tessera::mutator {

namespace {

struct WinogradForm {
  int64_t m;                              // outputs per tile side
  double s;                               // G' = s G is integral
  std::vector<std::vector<double>> bt;    // B^T, (m+2) x (m+2)
  std::vector<std::vector<double>> g;     // G' = s G, (m+2) x 3
  std::vector<std::vector<double>> at;    // A^T, m x (m+2)
};

// The forms of verifier/winograd_form.h, the matrices the obligation proves.
const std::array<WinogradForm, 2>& forms() {
  auto convert = [](const verifier::WinogradForm& v) {
    auto rows = [](const std::vector<std::vector<int>>& m) {
      std::vector<std::vector<double>> out;
      for (const auto& r : m) out.emplace_back(r.begin(), r.end());
      return out;
    };
    return WinogradForm{v.m, static_cast<double>(v.s), rows(v.bt), rows(v.g), rows(v.at)};
  };
  static const std::array<WinogradForm, 2> f = {convert(verifier::winograd_form(2)), convert(verifier::winograd_form(4))};
  return f;
}

// kron(X, X) laid out as [rows^2, cols^2] (row (a, b), column (i, j)).
Tensor kron_square(const std::vector<std::vector<double>>& x, DType t, double scale, Shape shape) {
  size_t r = x.size(), c = x[0].size();
  Tensor out(t, std::move(shape));
  for (size_t a = 0; a < r; ++a)
    for (size_t b = 0; b < r; ++b)
      for (size_t i = 0; i < c; ++i)
        for (size_t j = 0; j < c; ++j)
          out.set_double(static_cast<int64_t>(((a * r + b) * c + i) * c + j), x[a][i] * x[b][j] * scale);
  return out;
}

Attrs ints_attr(const char* name, std::vector<int64_t> v) {
  Attrs a;
  a.set(name, std::move(v));
  return a;
}

// The transformed weights U = G g G^T as [(m+2)^2, Co, C], in double.
// U(p, q, o, i) for each entry of U, in the order of U's layout, as
// `visit(index, value)`: the rule writes U from it, winograd_covered checks
// an instance's U against it. Reads f32 weights directly: get_double per
// weight made the check of a 512x512-channel Conv take about a second.
template <class Visit>
void for_each_transformed_weight(const Tensor& w, const WinogradForm& f, Visit visit) {
  int64_t co = w.shape()[0], c = w.shape()[1], a = f.m + 2;
  double inv = 1.0 / (f.s * f.s);
  std::vector<double> wd(static_cast<size_t>(w.numel()));
  if (w.dtype() == DType::kF32)
    std::copy(w.data_as<float>(), w.data_as<float>() + w.numel(), wd.begin());
  else
    for (int64_t k = 0; k < w.numel(); ++k) wd[static_cast<size_t>(k)] = w.get_double(k);
  for (int64_t p = 0; p < a; ++p)
    for (int64_t q = 0; q < a; ++q)
      for (int64_t o = 0; o < co; ++o)
        for (int64_t i = 0; i < c; ++i) {
          const double* k9 = &wd[static_cast<size_t>((o * c + i) * 9)];
          double sum = 0;
          for (int64_t y = 0; y < 3; ++y)
            for (int64_t x = 0; x < 3; ++x) sum += f.g[p][y] * f.g[q][x] * k9[y * 3 + x];
          if (!visit(((p * a + q) * co + o) * c + i, sum * inv)) return;
        }
}

Tensor transformed_weights(const Tensor& w, const WinogradForm& f) {
  int64_t a = f.m + 2;
  Tensor u(w.dtype(), {a * a, w.shape()[0], w.shape()[1]});
  if (u.dtype() == DType::kF32) {
    float* out = u.mutable_data_as<float>();
    for_each_transformed_weight(w, f, [&](int64_t k, double v) { return out[k] = static_cast<float>(v), true; });
  } else {
    for_each_transformed_weight(w, f, [&](int64_t k, double v) { return u.set_double(k, v), true; });
  }
  return u;
}

// Whether u holds exactly the transformed weights of w.
bool is_transformed_weights(const Tensor& u, const Tensor& w, const WinogradForm& f) {
  int64_t a = f.m + 2;
  if (u.dtype() != w.dtype() || u.shape() != Shape{a * a, w.shape()[0], w.shape()[1]}) return false;
  Tensor one(u.dtype(), {1});
  bool same = true;
  for_each_transformed_weight(w, f, [&](int64_t k, double v) {
    if (u.dtype() == DType::kF32) same = u.data_as<float>()[k] == static_cast<float>(v);
    else one.set_double(0, v), same = one.get_double(0) == u.get_double(k);
    return same;
  });
  return same;
}

// Conv(X, W[, B]) with a 3x3 kernel, stride 1, dilation 1, one group, 2-D,
// float, constant weights: one mutation per Winograd form.
std::vector<Mutation> conv_winograd(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& n = g.node(root);
  if (n.inputs.size() < 2 || !is_constant(g, n.inputs[1])) return {};
  if (n.inputs.size() > 2 && n.inputs[2] != kNoValue && !is_constant(g, n.inputs[2])) return {};
  const TensorType& xt = g.type(n.inputs[0]);
  const ConvAttrs attrs = ConvAttrs::of(n);
  if (xt.rank() != 4 || !is_float(xt.dtype) || attrs.group != 1) return {};
  for (const std::vector<int64_t>* k : {&attrs.strides, &attrs.dilations})
    for (int64_t v : *k)
      if (v != 1) return {};
  if (attrs.kernel_shape != std::vector<int64_t>{3, 3}) return {};
  const std::vector<int64_t>& pads = attrs.pads;  // top, left, bottom, right
  const Tensor& w = *g.value(n.inputs[1]).constant;
  const Shape& ys = g.type(n.outputs[0]).shape;
  int64_t batch = xt.shape[0], c = xt.shape[1], h = xt.shape[2], wd = xt.shape[3];
  int64_t co = ys[1], ho = ys[2], wo = ys[3];
  std::vector<Mutation> out;
  for (const WinogradForm& f : forms()) {
    int64_t m = f.m, a = m + 2, th = (ho + m - 1) / m, tw = (wo + m - 1) / m, t = th * tw;
    // Tiles never start in the padding only: at least one tile row per m outputs.
    if (ho < m || wo < m) continue;
    auto build = [&](bool fold) {
      MutationBuilder b(g, "conv-winograd", {root});
      ValueId x = b.in(n.inputs[0]);
      // Input transform: each channel of each image as its own batch item.
      ValueId xc = b.add(OpKind::kReshape, {x}, ints_attr("shape", {batch * c, 1, h, wd}));
      Attrs ca;
      ca.set("kernel_shape", std::vector<int64_t>{a, a});
      ca.set("strides", std::vector<int64_t>{m, m});
      ca.set("dilations", std::vector<int64_t>{1, 1});
      ca.set("pads", std::vector<int64_t>{pads[0], pads[1], m * th + 2 - h - pads[0], m * tw + 2 - wd - pads[1]});
      ca.set("group", int64_t{1});
      ValueId v = b.add(OpKind::kConv, {xc, b.constant(kron_square(f.bt, xt.dtype, 1.0, {a * a, 1, a, a}))}, ca);
      v = b.add(OpKind::kReshape, {v}, ints_attr("shape", {batch, c, a * a, t}));
      v = b.add(OpKind::kTranspose, {v}, ints_attr("perm", {2, 1, 0, 3}));
      v = b.add(OpKind::kReshape, {v}, ints_attr("shape", {a * a, c, batch * t}));
      ValueId u;
      if (fold) {
        u = b.constant(transformed_weights(w, f));
      } else {
        // U' = (G' (x) G') g, from the host's weights.
        ValueId wf = b.add(OpKind::kReshape, {b.in(n.inputs[1])}, ints_attr("shape", {co * c, 9}));
        Tensor gk = kron_square(f.g, xt.dtype, 1.0, {a * a, 9});
        ValueId prod = b.add(OpKind::kMatMul, {wf, b.constant(transpose_2d(gk))});
        prod = b.add(OpKind::kTranspose, {prod}, ints_attr("perm", {1, 0}));
        u = b.add(OpKind::kReshape, {prod}, ints_attr("shape", {a * a, co, c}));
      }
      ValueId mm = b.add(OpKind::kMatMul, {u, v});
      mm = b.add(OpKind::kReshape, {mm}, ints_attr("shape", {a * a, co * batch * t}));
      ValueId y = b.add(OpKind::kMatMul, {b.constant(kron_square(f.at, xt.dtype, 1.0, {m * m, a * a})), mm});
      if (!fold) {
        Tensor s(xt.dtype, {});
        s.set_double(0, f.s * f.s);
        y = b.add(OpKind::kDiv, {y, b.constant(s)});
      }
      y = b.add(OpKind::kReshape, {y}, ints_attr("shape", {m, m, co, batch, th, tw}));
      y = b.add(OpKind::kTranspose, {y}, ints_attr("perm", {3, 2, 4, 0, 5, 1}));
      y = b.add(OpKind::kReshape, {y}, ints_attr("shape", {batch, co, th * m, tw * m}));
      if (th * m != ho || tw * m != wo) {
        Attrs sa;
        sa.set("starts", std::vector<int64_t>{0, 0});
        sa.set("ends", std::vector<int64_t>{ho, wo});
        sa.set("axes", std::vector<int64_t>{2, 3});
        sa.set("steps", std::vector<int64_t>{1, 1});
        y = b.add(OpKind::kSlice, {y}, sa);
      }
      if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
        Tensor bias = g.value(n.inputs[2]).constant->reshaped({co, 1, 1});
        y = b.add(OpKind::kAdd, {y, b.constant(bias)});
      }
      b.replace(n.outputs[0], y);
      return b.finish("3x3 Conv " + n.name + " as Winograd F(" + std::to_string(m) + "x" + std::to_string(m) +
                      ", 3x3): " + std::to_string(a * a) + " batched products over " + std::to_string(t * batch) +
                      " tiles");
    };
    Mutation mu = build(true);
    mu.unfolded = build(false).replacement;
    out.push_back(std::move(mu));
  }
  return out;
}

// The constant input of node n of g that has `shape`, or null.
const Tensor* constant_input(const Graph& g, const Node& n, const Shape& shape) {
  for (ValueId v : n.inputs)
    if (v != kNoValue && g.value(v).is_constant() && g.type(v).shape == shape) return &*g.value(v).constant;
  return nullptr;
}

// covered_by of conv-winograd (obligations conv-winograd-f2, -f4), the
// preconditions those state: `before` is one 2-D Conv of a float input by a
// constant 3x3 weight (and a constant bias or none), stride 1, dilation 1,
// one group, with at least m x m outputs; the replacement's input transform
// is the (m+2) x (m+2) Conv by B^T (x) B^T with stride m, pads (top, left)
// the Conv's and end pads m * th + 2 - H - top (tiles of m covering the
// output), its transformed weights U = G g G^T / s^2 (computed again here
// from the weight, exactly as the rule computes them), its output transform
// A^T (x) A^T, and the bias the Conv's. The layout ops between them are what
// the obligations model as index maps.
std::string winograd_covered(const Mutation& m) {
  const Graph& g = m.before;
  if (g.num_nodes() != 1 || g.outputs().size() != 1) return "";
  const Node& n = g.node(0);
  if (n.kind != OpKind::kConv || n.inputs.size() < 2 || !is_constant(g, n.inputs[1]) || is_constant(g, n.inputs[0]))
    return "";
  bool bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  if (bias && !is_constant(g, n.inputs[2])) return "";
  const TensorType& xt = g.type(n.inputs[0]);
  const ConvAttrs attrs = ConvAttrs::of(n);
  if (xt.rank() != 4 || !is_float(xt.dtype) || attrs.group != 1 || attrs.kernel_shape != std::vector<int64_t>{3, 3} ||
      attrs.strides != std::vector<int64_t>{1, 1} || attrs.dilations != std::vector<int64_t>{1, 1})
    return "";
  const std::vector<int64_t>& pads = attrs.pads;
  const Tensor& w = *g.value(n.inputs[1]).constant;
  const Shape& ys = g.type(n.outputs[0]).shape;
  int64_t h = xt.shape[2], wd = xt.shape[3], co = ys[1], c = xt.shape[1], ho = ys[2], wo = ys[3];
  const Graph& r = m.replacement;
  NodeId conv = -1;
  for (NodeId k = 0; k < r.num_nodes(); ++k)
    if (r.node(k).kind == OpKind::kConv) conv = conv < 0 ? k : -2;
  if (conv < 0) return "";
  const Node& t = r.node(conv);
  for (const WinogradForm& f : forms()) {
    int64_t mm = f.m, a = mm + 2, th = (ho + mm - 1) / mm, tw = (wo + mm - 1) / mm;
    const ConvAttrs tc = ConvAttrs::of(t);
    if (tc.strides != std::vector<int64_t>{mm, mm}) continue;
    if (ho < mm || wo < mm || tc.pads != std::vector<int64_t>{pads[0], pads[1], mm * th + 2 - h - pads[0],
                                                             mm * tw + 2 - wd - pads[1]})
      return "";
    const Tensor* bt = constant_input(r, t, {a * a, 1, a, a});
    if (!bt || !same_tensor(*bt, kron_square(f.bt, xt.dtype, 1.0, {a * a, 1, a, a}))) return "";
    const Tensor *u = nullptr, *at = nullptr, *b = nullptr;
    for (NodeId k = 0; k < r.num_nodes(); ++k) {
      const Node& x = r.node(k);
      if (x.kind == OpKind::kMatMul && !u) u = constant_input(r, x, {a * a, co, c});
      if (x.kind == OpKind::kMatMul && !at) at = constant_input(r, x, {mm * mm, a * a});
      if (x.kind == OpKind::kAdd && !b) b = constant_input(r, x, {co, 1, 1});
    }
    if (!u || !at || !is_transformed_weights(*u, w, f) ||
        !same_tensor(*at, kron_square(f.at, xt.dtype, 1.0, {mm * mm, a * a})))
      return "";
    if (bias != (b != nullptr) || (bias && !same_tensor(*b, g.value(n.inputs[2]).constant->reshaped({co, 1, 1}))))
      return "";
    return mm == 2 ? "conv-winograd-f2" : "conv-winograd-f4";
  }
  return "";
}

}  // namespace

void register_winograd_rules(std::vector<Rule>& rules) {
  rules.push_back({.name = "conv-winograd",
                   .identity = "Conv3x3(X, g) = A^T [ (G g G^T) . (B^T X_tile B) ] A per m x m output tile, "
                               "F(2x2,3x3) and F(4x4,3x3)",
                   .roots = {OpKind::kConv},
                   .fn = conv_winograd,
                   .obligations = {"conv-winograd-f2", "conv-winograd-f4"},
                   .covered_by = winograd_covered});
}

}  // namespace tessera::mutator
