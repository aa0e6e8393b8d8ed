#include "tests/graph/op_cases.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace tessera::testing {
namespace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g_); }
  bool coin() { return uniform(0, 1) == 1; }
  template <class T>
  T pick(const std::vector<T>& v) { return v[static_cast<size_t>(uniform(0, static_cast<int64_t>(v.size()) - 1))]; }
  int64_t dim() { return pick<int64_t>({4, 6, 12, 3, 5, 2, 1, 4, 6, 12}); }
  Shape shape(int rank) {
    Shape s;
    for (int i = 0; i < rank; ++i) s.push_back(dim());
    return s;
  }

 private:
  std::mt19937_64 g_;
};


// One case under construction.
struct Case {
  std::string name;
  Graph g;
  int inputs = 0;
  ValueId in(DType t, Shape s) {
    std::string name = "x";  // not "x" + ...: GCC 12 warns -Wrestrict on that
    name += std::to_string(inputs++);
    return g.add_input(name, {t, std::move(s)});
  }
  ValueId in(Shape s) { return in(DType::kF32, std::move(s)); }
  ValueId constant(const std::string& n, Tensor t) { return g.add_constant(n, std::move(t)); }
  OpCase done(OpKind k, std::vector<ValueId> ins, Attrs a = {}) {
    NodeId n = g.add_node(k, std::move(ins), std::move(a), std::string(op_name(k)) + "_node");
    g.set_outputs(g.node(n).outputs);
    return OpCase{name, std::move(g), n};
  }
};

// A broadcasting partner of `s`: some dims set to 1, maybe fewer leading dims.
Shape broadcast_partner(Rng& r, const Shape& s) {
  Shape p = s;
  for (int64_t& d : p)
    if (r.uniform(0, 3) == 0) d = 1;
  if (!p.empty() && r.coin()) p.erase(p.begin(), p.begin() + r.uniform(0, static_cast<int64_t>(p.size()) - 1));
  return p;
}

std::vector<int64_t> random_axes(Rng& r, int64_t rank, bool allow_empty) {
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < rank; ++d)
    if (r.coin()) axes.push_back(d);
  if (axes.empty() && !allow_empty) axes.push_back(r.uniform(0, rank - 1));
  return axes;
}

void unary(Rng& r, std::vector<OpCase>& out, const std::string& tag) {
  for (int k = 0; k < kNumOpKinds; ++k) {
    auto kind = static_cast<OpKind>(k);
    const OpDef& d = op_def(kind);
    if (!d.elementwise() || d.min_inputs != 1 || d.max_inputs != 1) continue;
    Case c{std::string(op_name(kind)) + tag};
    Attrs a;
    DType t = kind == OpKind::kNot ? DType::kBool : DType::kF32;
    if (kind == OpKind::kCast) a.set("to", std::string(r.coin() ? "f64" : "i64"));
    if (kind == OpKind::kClip) {
      a.set("min", 0.7);
      a.set("max", 1.2);
    }
    ValueId x = c.in(t, r.shape(static_cast<int>(r.uniform(1, 4))));
    out.push_back(c.done(kind, {x}, a));
  }
}

void binary(Rng& r, std::vector<OpCase>& out, const std::string& tag) {
  const OpKind kinds[] = {OpKind::kAdd,  OpKind::kSub,  OpKind::kMul,     OpKind::kDiv,       OpKind::kPow,
                          OpKind::kMax,  OpKind::kMin,  OpKind::kMod,     OpKind::kEqual,     OpKind::kLess,
                          OpKind::kLessOrEqual, OpKind::kGreater, OpKind::kGreaterOrEqual, OpKind::kAnd,
                          OpKind::kOr,   OpKind::kXor};
  for (OpKind kind : kinds) {
    Case c{std::string(op_name(kind)) + tag};
    bool logic = kind == OpKind::kAnd || kind == OpKind::kOr || kind == OpKind::kXor;
    DType t = logic ? DType::kBool : DType::kF32;
    Shape s = r.shape(static_cast<int>(r.uniform(1, 4)));
    Shape p = broadcast_partner(r, s);
    bool swap = r.coin();
    ValueId a = c.in(t, swap ? p : s), b = c.in(t, swap ? s : p);
    Attrs at;
    if (kind == OpKind::kMod) at.set("fmod", int64_t{1});
    out.push_back(c.done(kind, {a, b}, at));
  }
  Case w{"Where" + tag};
  Shape s = r.shape(3);
  ValueId cond = w.in(DType::kBool, broadcast_partner(r, s)), x = w.in(s), y = w.in(broadcast_partner(r, s));
  out.push_back(w.done(OpKind::kWhere, {cond, x, y}));
}

void reductions(Rng& r, std::vector<OpCase>& out, const std::string& tag) {
  for (OpKind kind : {OpKind::kReduceSum, OpKind::kReduceMean, OpKind::kReduceMax, OpKind::kReduceMin,
                      OpKind::kReduceProd, OpKind::kReduceL2, OpKind::kReduceSumSquare}) {
    Case c{std::string(op_name(kind)) + tag};
    int rank = static_cast<int>(r.uniform(1, 4));
    Attrs a;
    a.set("axes", random_axes(r, rank, true));
    a.set("keepdims", int64_t{r.coin()});
    out.push_back(c.done(kind, {c.in(r.shape(rank))}, a));
  }
  for (OpKind kind : {OpKind::kArgMax, OpKind::kArgMin, OpKind::kCumSum, OpKind::kSoftmax, OpKind::kLogSoftmax}) {
    Case c{std::string(op_name(kind)) + tag};
    int rank = static_cast<int>(r.uniform(1, 4));
    Attrs a;
    a.set("axis", r.uniform(-rank, rank - 1));
    if (kind == OpKind::kArgMax || kind == OpKind::kArgMin) a.set("keepdims", int64_t{r.coin()});
    if (kind == OpKind::kCumSum) {
      a.set("exclusive", int64_t{r.coin()});
      a.set("reverse", int64_t{r.coin()});
    }
    out.push_back(c.done(kind, {c.in(r.shape(rank))}, a));
  }
  Case ln{"LayerNormalization" + tag};
  Shape s = r.shape(3);
  int64_t axis = r.uniform(1, 2);
  Shape norm(s.begin() + axis, s.end());
  std::vector<ValueId> ins{ln.in(s), ln.in(norm)};
  if (r.coin()) ins.push_back(ln.in(norm));
  Attrs a;
  a.set("axis", axis);
  out.push_back(ln.done(OpKind::kLayerNormalization, ins, a));
  Case bn{"BatchNormalization" + tag};
  Shape x = r.shape(4);
  std::vector<ValueId> bins{bn.in(x)};
  for (int i = 0; i < 4; ++i) bins.push_back(bn.in({x[1]}));
  out.push_back(bn.done(OpKind::kBatchNormalization, bins));
}

void contractions(Rng& r, std::vector<OpCase>& out, const std::string& tag) {
  int64_t m = r.dim(), k = r.dim(), n = r.dim(), b = r.dim();
  std::vector<std::pair<Shape, Shape>> mm = {{{m, k}, {k, n}}, {{b, m, k}, {k, n}}, {{b, 1, m, k}, {3, k, n}},
                                             {{k}, {k, n}},   {{m, k}, {k}},      {{b, m, k}, {b, k, n}}};
  for (size_t v = 0; v < mm.size(); ++v) {
    Case c{"MatMul/" + std::to_string(v) + tag};
    out.push_back(c.done(OpKind::kMatMul, {c.in(mm[v].first), c.in(mm[v].second)}));
  }
  for (int v = 0; v < 3; ++v) {
    Case c{"Gemm/" + std::to_string(v) + tag};
    bool ta = r.coin(), tb = r.coin();
    Attrs a;
    a.set("transA", int64_t{ta});
    a.set("transB", int64_t{tb});
    if (r.coin()) a.set("alpha", 0.5);
    if (r.coin()) a.set("beta", 2.0);
    std::vector<ValueId> ins{c.in(ta ? Shape{k, m} : Shape{m, k}), c.in(tb ? Shape{n, k} : Shape{k, n})};
    std::vector<Shape> biases{{n}, {m, n}, {1, n}, {m, 1}};
    if (v > 0) ins.push_back(c.in(r.pick(biases)));
    out.push_back(c.done(OpKind::kGemm, ins, a));
  }
}

Attrs window(const std::vector<int64_t>& k, const std::vector<int64_t>& st, const std::vector<int64_t>& pads,
             const std::vector<int64_t>& dil) {
  Attrs a;
  a.set("kernel_shape", k);
  a.set("strides", st);
  a.set("pads", pads);
  a.set("dilations", dil);
  return a;
}

void windows(Rng& r, std::vector<OpCase>& out, const std::string& tag) {
  for (int v = 0; v < 4; ++v) {
    int sp = v % 2 == 0 ? 1 : 2;
    int64_t group = r.pick<int64_t>({1, 1, 2, 3});
    int64_t cg = r.pick<int64_t>({1, 2, 3}), mg = r.pick<int64_t>({1, 2, 4});
    std::vector<int64_t> k, st, pads, dil;
    Shape x{r.pick<int64_t>({1, 2, 4}), group * cg};
    for (int i = 0; i < sp; ++i) {
      k.push_back(r.uniform(1, 3));
      st.push_back(r.uniform(1, 2));
      dil.push_back(r.uniform(1, 2));
      x.push_back(r.uniform(5, 8));
    }
    for (int i = 0; i < 2 * sp; ++i) pads.push_back(r.uniform(0, 1));
    Case c{"Conv/" + std::to_string(v) + tag};
    Attrs a = window(k, st, pads, dil);
    a.set("group", group);
    Shape w{group * mg, cg};
    w.insert(w.end(), k.begin(), k.end());
    std::vector<ValueId> ins{c.in(x), c.in(w)};
    if (r.coin()) ins.push_back(c.in({group * mg}));
    out.push_back(c.done(OpKind::kConv, ins, a));

    Case t{"ConvTranspose/" + std::to_string(v) + tag};
    Attrs at = window(k, st, pads, std::vector<int64_t>(sp, 1));
    at.set("group", group);
    at.set("output_padding", std::vector<int64_t>(sp, 0));
    Shape wt{group * cg, mg};
    wt.insert(wt.end(), k.begin(), k.end());
    std::vector<ValueId> tins{t.in(x), t.in(wt)};
    if (r.coin()) tins.push_back(t.in({group * mg}));
    out.push_back(t.done(OpKind::kConvTranspose, tins, at));

    for (OpKind kind : {OpKind::kMaxPool, OpKind::kAveragePool}) {
      Case p{std::string(op_name(kind)) + "/" + std::to_string(v) + tag};
      std::vector<int64_t> pk(k), ppads(pads);
      for (size_t i = 0; i < pk.size(); ++i) pk[i] = std::max<int64_t>(pk[i], 2);
      for (size_t i = 0; i < ppads.size(); ++i) ppads[i] = std::min<int64_t>(ppads[i], pk[i % pk.size()] - 1);
      Attrs pa = window(pk, st, ppads, dil);
      pa.set("ceil_mode", int64_t{r.coin()});
      if (kind == OpKind::kAveragePool) pa.set("count_include_pad", int64_t{r.coin()});
      out.push_back(p.done(kind, {p.in(x)}, pa));
    }
  }
  for (OpKind kind : {OpKind::kGlobalAveragePool, OpKind::kGlobalMaxPool}) {
    Case c{std::string(op_name(kind)) + tag};
    out.push_back(c.done(kind, {c.in(r.shape(4))}, {}));
  }
}

// Reshapes that split a dim, merge two, and regroup a run without common
// factors; Flatten, Squeeze, Unsqueeze.
void reshapes(Rng& r, std::vector<OpCase>& out, const std::string& tag) {
  int64_t a = r.pick<int64_t>({2, 3, 4}), b = r.pick<int64_t>({2, 3, 4, 6}), c0 = r.dim();
  std::vector<std::pair<Shape, Shape>> forms = {
      {{a * b, c0}, {a, b, c0}}, {{c0, a, b}, {c0, a * b}}, {{6, 4}, {4, 6}}, {{2, a * b, 1}, {2, 1, a, b}}};
  for (size_t v = 0; v < forms.size(); ++v) {
    Case c{"Reshape/" + std::to_string(v) + tag};
    Attrs at;
    at.set("shape", forms[v].second);
    out.push_back(c.done(OpKind::kReshape, {c.in(forms[v].first)}, at));
  }
  Case f{"Flatten" + tag};
  Attrs fa;
  fa.set("axis", r.uniform(0, 3));
  out.push_back(f.done(OpKind::kFlatten, {f.in(r.shape(3))}, fa));
  Case s{"Squeeze" + tag};
  Attrs sa;
  sa.set("axes", std::vector<int64_t>{1});
  out.push_back(s.done(OpKind::kSqueeze, {s.in({r.dim(), 1, r.dim()})}, sa));
  Case u{"Unsqueeze" + tag};
  Attrs ua;
  ua.set("axes", std::vector<int64_t>{0, 2});
  out.push_back(u.done(OpKind::kUnsqueeze, {u.in(r.shape(2))}, ua));
}

void movements(Rng& r, std::vector<OpCase>& out, const std::string& tag) {
  {
    Case c{"Transpose" + tag};
    std::vector<int64_t> perm{0, 1, 2};
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(static_cast<uint64_t>(r.uniform(0, 1 << 30))));
    Attrs a;
    a.set("perm", perm);
    out.push_back(c.done(OpKind::kTranspose, {c.in(r.shape(3))}, a));
  }
  {
    Case c{"Concat" + tag};
    Shape s = r.shape(3);
    int64_t axis = r.uniform(0, 2);
    std::vector<ValueId> ins;
    for (int i = 0; i < 3; ++i) {
      Shape p = s;
      p[static_cast<size_t>(axis)] = r.dim();
      ins.push_back(c.in(p));
    }
    Attrs a;
    a.set("axis", axis);
    out.push_back(c.done(OpKind::kConcat, ins, a));
  }
  {
    Case c{"Split" + tag};
    Shape s = r.shape(3);
    int64_t axis = r.uniform(0, 2);
    s[static_cast<size_t>(axis)] = 7;
    Attrs a;
    a.set("axis", axis);
    a.set("split", std::vector<int64_t>{3, 4});
    out.push_back(c.done(OpKind::kSplit, {c.in(s)}, a));
  }
  {
    Case c{"Slice" + tag};
    Shape s = r.shape(3);
    std::vector<int64_t> starts, ends, axes, steps;
    for (int64_t d = 0; d < 3; ++d) {
      if (!r.coin()) continue;
      axes.push_back(d);
      int64_t step = r.pick<int64_t>({1, 1, 2, -1, -2});
      steps.push_back(step);
      starts.push_back(step > 0 ? r.uniform(0, 1) : r.uniform(-1, s[d]));
      ends.push_back(step > 0 ? r.pick<int64_t>({s[d], INT64_MAX, s[d] - 1}) : r.pick<int64_t>({INT64_MIN, 0}));
    }
    Attrs a;
    a.set("starts", starts);
    a.set("ends", ends);
    a.set("axes", axes);
    a.set("steps", steps);
    out.push_back(c.done(OpKind::kSlice, {c.in(s)}, a));
  }
  {
    Case c{"Pad" + tag};
    Shape s = r.shape(3);
    for (int64_t& d : s) d = std::max<int64_t>(d, 3);
    std::string mode = r.pick<std::string>({"constant", "constant", "reflect", "edge"});
    std::vector<int64_t> pads;
    for (int i = 0; i < 6; ++i) pads.push_back(r.uniform(mode == "constant" ? -1 : 0, 2));
    Attrs a;
    a.set("pads", pads);
    a.set("mode", mode);
    if (r.coin()) a.set("value", 0.25);
    out.push_back(c.done(OpKind::kPad, {c.in(s)}, a));
  }
  {
    Case c{"Expand" + tag};
    Shape s = r.shape(3);
    Shape from = broadcast_partner(r, s);
    Attrs a;
    a.set("shape", s);
    out.push_back(c.done(OpKind::kExpand, {c.in(from)}, a));
  }
  {
    Case c{"Tile" + tag};
    Attrs a;
    a.set("repeats", std::vector<int64_t>{r.uniform(1, 3), r.uniform(1, 4)});
    out.push_back(c.done(OpKind::kTile, {c.in(r.shape(2))}, a));
  }
  {
    Case c{"Trilu" + tag};
    Attrs a;
    a.set("upper", int64_t{r.coin()});
    a.set("k", r.uniform(-1, 1));
    out.push_back(c.done(OpKind::kTrilu, {c.in(r.shape(3))}, a));
  }
}

void indexing(Rng& r, std::vector<OpCase>& out, const std::string& tag) {
  {
    Case c{"Gather" + tag};
    Shape s = r.shape(3);
    int64_t axis = r.uniform(0, 2), dim = s[static_cast<size_t>(axis)];
    Shape is = r.shape(static_cast<int>(r.uniform(0, 2)));
    std::vector<int64_t> ids(static_cast<size_t>(shape_numel(is)));
    for (int64_t& i : ids) i = r.uniform(-dim, dim - 1);
    ValueId data = c.in(s);
    ValueId idx = c.constant("ids", Tensor::from_ints(DType::kI64, is, ids));
    Attrs a;
    a.set("axis", axis);
    out.push_back(c.done(OpKind::kGather, {data, idx}, a));
  }
  {
    Case c{"GatherElements" + tag};
    Shape s = r.shape(3);
    int64_t axis = r.uniform(0, 2);
    Shape is = s;
    for (int64_t& d : is) d = r.uniform(1, d);
    is[static_cast<size_t>(axis)] = r.dim();
    std::vector<int64_t> ids(static_cast<size_t>(shape_numel(is)));
    for (int64_t& i : ids) i = r.uniform(0, s[static_cast<size_t>(axis)] - 1);
    ValueId data = c.in(s);
    ValueId idx = c.constant("ids", Tensor::from_ints(DType::kI64, is, ids));
    Attrs a;
    a.set("axis", axis);
    out.push_back(c.done(OpKind::kGatherElements, {data, idx}, a));
  }
  {
    Case c{"ScatterND" + tag};
    Shape s = r.shape(3);
    for (int64_t& d : s) d = std::max<int64_t>(d, 2);
    // Two distinct tuples over the first dim (k = 1): updates [2, s1, s2].
    std::vector<int64_t> ids{0, s[0] - 1};
    ValueId data = c.in(s);
    ValueId idx = c.constant("ids", Tensor::from_ints(DType::kI64, {2, 1}, ids));
    ValueId upd = c.in({2, s[1], s[2]});
    Attrs a;
    a.set("reduction", r.pick<std::string>({"none", "add", "max"}));
    out.push_back(c.done(OpKind::kScatterND, {data, idx, upd}, a));
  }
  {
    // Indices as large as data off the axis, or (one case in three) shorter
    // there; negative indices; repeats along the axis.
    Case c{"ScatterElements" + tag};
    Shape s = r.shape(3);
    int64_t axis = r.uniform(0, 2), dim = s[static_cast<size_t>(axis)];
    Shape is = s;
    if (r.uniform(0, 2) == 0)
      for (int64_t& d : is) d = r.uniform(1, d);
    is[static_cast<size_t>(axis)] = r.uniform(1, 3);
    std::vector<int64_t> ids(static_cast<size_t>(shape_numel(is)));
    for (int64_t& i : ids) i = r.uniform(-dim, dim - 1);
    ValueId data = c.in(s);
    ValueId idx = c.constant("ids", Tensor::from_ints(DType::kI64, is, ids));
    ValueId upd = c.in(is);
    Attrs a;
    a.set("axis", axis - (r.coin() ? 3 : 0));
    a.set("reduction", r.pick<std::string>({"none", "add", "mul", "max", "min"}));
    out.push_back(c.done(OpKind::kScatterElements, {data, idx, upd}, a));
  }
}

void generators(Rng& r, std::vector<OpCase>& out, const std::string& tag) {
  {
    Case c{"Shape" + tag};
    out.push_back(c.done(OpKind::kShape, {c.in(r.shape(3))}));
  }
  {
    Case c{"Size" + tag};
    out.push_back(c.done(OpKind::kSize, {c.in(r.shape(2))}));
  }
  {
    Case c{"ConstantOfShape" + tag};
    ValueId shape = c.constant("shape", Tensor::from_ints(DType::kI64, {2}, {r.dim(), r.dim()}));
    Attrs a;
    a.set("value", Tensor::from_doubles(DType::kF32, {1}, {0.5}));
    out.push_back(c.done(OpKind::kConstantOfShape, {shape}, a));
  }
  {
    Case c{"Range" + tag};
    auto k = [&](const char* n, int64_t v) { return c.constant(n, Tensor::from_ints(DType::kI64, {}, {v})); };
    out.push_back(c.done(OpKind::kRange, {k("start", 1), k("limit", 1 + 2 * r.dim()), k("delta", 2)}));
  }
  {
    Case c{"Resize" + tag};
    Shape s{r.dim(), r.dim(), r.uniform(2, 5), r.uniform(2, 5)};
    Shape sizes{s[0], s[1], s[2] * 2, s[3] + 1};
    std::vector<double> scales;
    for (size_t d = 0; d < 4; ++d) scales.push_back(static_cast<double>(sizes[d]) / static_cast<double>(s[d]));
    Attrs a;
    a.set("sizes", sizes);
    a.set("scales", scales);
    a.set("mode", r.pick<std::string>({"nearest", "linear"}));
    out.push_back(c.done(OpKind::kResize, {c.in(s)}, a));
  }
}

}  // namespace

std::vector<OpCase> op_cases(uint64_t seed) {
  Rng r(seed);
  std::string tag = "/";
  tag += std::to_string(seed);
  std::vector<OpCase> out;
  unary(r, out, tag);
  binary(r, out, tag);
  reductions(r, out, tag);
  contractions(r, out, tag);
  windows(r, out, tag);
  reshapes(r, out, tag);
  movements(r, out, tag);
  indexing(r, out, tag);
  generators(r, out, tag);
  return out;
}

std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> out;
  for (ValueId v : g.inputs()) {
    const TensorType& t = g.type(v);
    int64_t n = t.numel();
    if (is_float(t.dtype)) {
      std::vector<double> x(static_cast<size_t>(n));
      for (double& e : x) e = 0.5 + std::uniform_real_distribution<double>(0, 1)(rng);
      out.push_back(Tensor::from_doubles(t.dtype, t.shape, x));
    } else {
      std::vector<int64_t> x(static_cast<size_t>(n));
      int64_t hi = t.dtype == DType::kBool ? 1 : 3;
      for (int64_t& e : x) e = std::uniform_int_distribution<int64_t>(0, hi)(rng);
      out.push_back(Tensor::from_ints(t.dtype, t.shape, x));
    }
  }
  return out;
}

}  // namespace tessera::testing
