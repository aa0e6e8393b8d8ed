#include "mutator/pet/correction.h"

#include <map>
#include <optional>

#include "graph/attr_views.h"
#include "graph/error.h"

namespace tessera::mutator::pet {

using verifier::Box;

Tensor slice_tensor(const Tensor& t, const Box& box) {
  Shape s;
  for (size_t d = 0; d < box.lo.size(); ++d) s.push_back(box.hi[d] - box.lo[d]);
  Tensor out(t.dtype(), s);
  size_t elem = dtype_size(t.dtype());
  std::vector<int64_t> stride(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) stride[d] = stride[d + 1] * t.shape()[d + 1];
  std::vector<int64_t> idx(s.size(), 0);
  uint8_t* dst = out.mutable_data();
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t src = 0;
    for (size_t d = 0; d < s.size(); ++d) src += (box.lo[d] + idx[d]) * stride[d];
    std::copy(t.data() + src * elem, t.data() + (src + 1) * elem, dst + i * elem);
    for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0 && ++idx[d] == s[d]; --d) idx[d] = 0;
  }
  return out;
}

namespace {

Box full_box(const Shape& s) { return Box{std::vector<int64_t>(s.size(), 0), std::vector<int64_t>(s.begin(), s.end())}; }

bool is_full(const Box& b, const Shape& s) { return b == full_box(s); }

Attrs slice_attrs(std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> axes) {
  Attrs a;
  a.set("steps", std::vector<int64_t>(axes.size(), 1));
  a.set("starts", std::move(starts));
  a.set("ends", std::move(ends));
  a.set("axes", std::move(axes));
  return a;
}

// Builds, inside the replacement `g`, the original program's values
// restricted to boxes.
class Recompute {
 public:
  Recompute(const Graph& before, Graph& g) : before_(before), g_(g) {}

  std::optional<ValueId> value(ValueId v, const Box& box) {
    auto key = std::make_pair(v, box.str());
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::optional<ValueId> r = compute(v, box);
    if (r) {
      TESSERA_CHECK(g_.type(*r).shape == box_shape(box),
                    "correction of " << before_.value(v).name << " on " << box.str() << " has shape "
                                     << shape_str(g_.type(*r).shape));
      memo_[key] = *r;
    }
    return r;
  }

  // g value `v` restricted to box (no node when the box is all of it).
  ValueId slice(ValueId v, const Box& box) {
    const Shape s = g_.type(v).shape;
    std::vector<int64_t> starts, ends, axes;
    for (size_t d = 0; d < s.size(); ++d)
      if (box.lo[d] != 0 || box.hi[d] != s[d]) {
        starts.push_back(box.lo[d]);
        ends.push_back(box.hi[d]);
        axes.push_back(static_cast<int64_t>(d));
      }
    if (axes.empty()) return v;
    return add(OpKind::kSlice, {v}, slice_attrs(starts, ends, axes));
  }

  ValueId add(OpKind kind, std::vector<ValueId> ins, Attrs attrs) {
    return g_.add(kind, std::move(ins), std::move(attrs), fresh_node_name(g_, "pet.fix", 1));
  }

 private:
  static Shape box_shape(const Box& b) {
    Shape s;
    for (size_t d = 0; d < b.lo.size(); ++d) s.push_back(b.hi[d] - b.lo[d]);
    return s;
  }

  std::optional<ValueId> compute(ValueId v, const Box& box) {
    const Value& val = before_.value(v);
    if (val.is_constant()) {
      Tensor t = is_full(box, val.type.shape) ? *val.constant : slice_tensor(*val.constant, box);
      return g_.add_constant(fresh_value_name(g_, "pet.fix.c"), std::move(t));
    }
    if (val.producer < 0) {
      for (size_t i = 0; i < before_.inputs().size(); ++i)
        if (before_.inputs()[i] == v) return slice(g_.inputs()[i], box);
      return std::nullopt;
    }
    const Node& n = before_.node(val.producer);
    if (n.outputs.size() != 1) return std::nullopt;
    if (n.kind == OpKind::kConv) return conv(n, box);
    if (n.kind == OpKind::kMatMul) return matmul(n, box);
    if (n.kind == OpKind::kTranspose) {
      const std::vector<int64_t> perm = TransposeAttrs::of(n).perm;
      Box in{std::vector<int64_t>(perm.size()), std::vector<int64_t>(perm.size())};
      for (size_t k = 0; k < perm.size(); ++k) {
        in.lo[perm[k]] = box.lo[k];
        in.hi[perm[k]] = box.hi[k];
      }
      auto x = value(n.inputs[0], in);
      if (!x) return std::nullopt;
      return add(OpKind::kTranspose, {*x}, n.attrs);
    }
    if (op_def(n.kind).elementwise() || n.kind == OpKind::kIdentity) {
      std::vector<ValueId> ins;
      for (ValueId in : n.inputs) {
        if (in == kNoValue) return std::nullopt;
        auto x = value(in, broadcast_box(before_.type(in).shape, box));
        if (!x) return std::nullopt;
        ins.push_back(*x);
      }
      return add(n.kind, ins, n.attrs);
    }
    return std::nullopt;
  }

  // The part of an operand of `shape` that broadcasts onto `box`.
  static Box broadcast_box(const Shape& shape, const Box& box) {
    Box b = full_box(shape);
    size_t off = box.lo.size() - shape.size();
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] != 1) {
        b.lo[d] = box.lo[off + d];
        b.hi[d] = box.hi[off + d];
      }
    return b;
  }

  // Output box -> input window per spatial axis; the part of the window in
  // the Conv's padding becomes an explicit zero Pad.
  std::optional<ValueId> conv(const Node& n, const Box& box) {
    const Shape& xs = before_.type(n.inputs[0]).shape;
    const Shape& ws = before_.type(n.inputs[1]).shape;
    size_t spatial = xs.size() - 2;
    bool channels_full = box.lo[1] == 0 && box.hi[1] == ws[0];
    const ConvAttrs attrs = ConvAttrs::of(n);
    if (attrs.group != 1 && !channels_full) return std::nullopt;
    const auto& k = attrs.kernel_shape;
    const auto& s = attrs.strides;
    const auto& p = attrs.pads;
    const auto& d = attrs.dilations;
    Box in = full_box(xs);
    in.lo[0] = box.lo[0];
    in.hi[0] = box.hi[0];
    std::vector<int64_t> pads(2 * xs.size(), 0);
    bool padded = false;
    for (size_t a = 0; a < spatial; ++a) {
      int64_t begin = box.lo[a + 2] * s[a] - p[a];
      int64_t end = (box.hi[a + 2] - 1) * s[a] - p[a] + (k[a] - 1) * d[a] + 1;
      in.lo[a + 2] = std::max<int64_t>(begin, 0);
      in.hi[a + 2] = std::min<int64_t>(end, xs[a + 2]);
      if (in.lo[a + 2] >= in.hi[a + 2]) return std::nullopt;  // a box that reads only padding
      pads[a + 2] = in.lo[a + 2] - begin;
      pads[xs.size() + a + 2] = end - in.hi[a + 2];
      padded = padded || pads[a + 2] || pads[xs.size() + a + 2];
    }
    auto x = value(n.inputs[0], in);
    Box wbox = full_box(ws);
    wbox.lo[0] = box.lo[1];
    wbox.hi[0] = box.hi[1];
    auto w = value(n.inputs[1], wbox);
    if (!x || !w) return std::nullopt;
    ValueId xv = *x;
    if (padded) {
      Attrs a;
      a.set("pads", pads);
      a.set("mode", std::string("constant"));
      a.set("value", 0.0);
      xv = add(OpKind::kPad, {xv}, a);
    }
    std::vector<ValueId> ins = {xv, *w};
    if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
      auto b = value(n.inputs[2], Box{{box.lo[1]}, {box.hi[1]}});
      if (!b) return std::nullopt;
      ins.push_back(*b);
    }
    Attrs a = n.attrs;
    a.set("pads", std::vector<int64_t>(2 * spatial, 0));
    return add(OpKind::kConv, ins, a);
  }

  std::optional<ValueId> matmul(const Node& n, const Box& box) {
    const Shape& as = before_.type(n.inputs[0]).shape;
    const Shape& bs = before_.type(n.inputs[1]).shape;
    if (as.size() < 2 || bs.size() < 2) return std::nullopt;
    size_t r = box.lo.size();
    auto operand = [&](const Shape& s, bool left) {
      Box b = full_box(s);
      size_t off = r - s.size();
      for (size_t d = 0; d + 2 < s.size(); ++d)
        if (s[d] != 1) {
          b.lo[d] = box.lo[off + d];
          b.hi[d] = box.hi[off + d];
        }
      size_t d = left ? s.size() - 2 : s.size() - 1;
      b.lo[d] = box.lo[left ? r - 2 : r - 1];
      b.hi[d] = box.hi[left ? r - 2 : r - 1];
      return b;
    };
    auto a = value(n.inputs[0], operand(as, true));
    auto b = value(n.inputs[1], operand(bs, false));
    if (!a || !b) return std::nullopt;
    return add(OpKind::kMatMul, {*a, *b}, n.attrs);
  }

  const Graph& before_;
  Graph& g_;
  std::map<std::pair<ValueId, std::string>, ValueId> memo_;
};

// y with `box` overwritten by c: along the first axis the box does not
// cover, the rows before and after the box are kept and the middle is
// patched recursively; one Concat per such axis.
ValueId patch(Recompute& rc, Graph& g, ValueId y, const Box& box, ValueId c) {
  const Shape s = g.type(y).shape;  // a copy: adding nodes moves g's values
  size_t d = 0;
  while (d < s.size() && box.lo[d] == 0 && box.hi[d] == s[d]) ++d;
  if (d == s.size()) return c;
  Box mid = full_box(s), before = full_box(s), after = full_box(s);
  mid.lo[d] = box.lo[d];
  mid.hi[d] = box.hi[d];
  before.hi[d] = box.lo[d];
  after.lo[d] = box.hi[d];
  Box inner = box;
  inner.lo[d] = 0;
  inner.hi[d] = box.hi[d] - box.lo[d];
  ValueId middle = patch(rc, g, rc.slice(y, mid), inner, c);
  std::vector<ValueId> parts;
  if (box.lo[d] > 0) parts.push_back(rc.slice(y, before));
  parts.push_back(middle);
  if (box.hi[d] < s[d]) parts.push_back(rc.slice(y, after));
  Attrs cat;
  cat.set("axis", static_cast<int64_t>(d));
  return rc.add(OpKind::kConcat, parts, cat);
}

}  // namespace

bool add_corrections(Mutation& m, const std::vector<verifier::OutputRegion>& differing, double max_fraction) {
  constexpr size_t kMaxBoxes = 16;
  if (differing.empty()) return false;
  size_t boxes = 0;
  for (const verifier::OutputRegion& r : differing) {
    if (r.output < 0 || r.output >= static_cast<int>(m.before.outputs().size())) return false;
    const TensorType& t = m.before.type(m.before.outputs()[r.output]);
    if (t != m.replacement.type(m.replacement.outputs()[r.output])) return false;
    int64_t wrong = 0;
    for (const Box& b : r.boxes) wrong += b.numel();
    boxes += r.boxes.size();
    if (wrong > max_fraction * static_cast<double>(t.numel())) return false;
  }
  if (boxes > kMaxBoxes) return false;
  Graph g = m.replacement;
  Recompute rc(m.before, g);
  std::vector<ValueId> outs = g.outputs();
  try {
    for (const verifier::OutputRegion& r : differing)
      for (const Box& b : r.boxes) {
        std::optional<ValueId> c = rc.value(m.before.outputs()[r.output], b);
        if (!c) return false;
        outs[r.output] = patch(rc, g, outs[r.output], b, *c);
      }
  } catch (const Error&) {
    return false;  // an op whose window the recomputation cannot express
  }
  g.set_outputs(outs);
  g.remove_dead();
  m.replacement = std::move(g);
  m.corrections = differing;
  m.id.kind = MutationId::Kind::kPartial;
  return true;
}

}  // namespace tessera::mutator::pet
