#include "verifier/split_points.h"

#include <algorithm>
#include <set>

#include "graph/interpreter.h"

namespace tessera::verifier {
namespace {

// Thrown inside the analysis when a program leaves what it can describe.
struct NoRule {};

class Builder {
 public:
  Builder(const Shape& shape, int64_t cap) : shape_(shape), sets_(shape.size()), cap_(cap) {}
  void add(size_t d, int64_t p) {
    if (p > 0 && p < shape_[d]) sets_[d].insert(p);
    if (static_cast<int64_t>(sets_[d].size()) > cap_) throw NoRule{};
  }
  void add_all(size_t d, const std::vector<int64_t>& ps, int64_t shift = 0) {
    for (int64_t p : ps) add(d, p + shift);
  }
  DimSplits done() const {
    DimSplits out;
    for (const auto& s : sets_) out.emplace_back(s.begin(), s.end());
    return out;
  }

 private:
  const Shape& shape_;
  std::vector<std::set<int64_t>> sets_;
  int64_t cap_;
};

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Numpy broadcasting: an input dim of size 1 stretched over the output has
// one form everywhere; other dims keep their points.
void add_broadcast(Builder& b, const Shape& out, const Shape& in, const DimSplits& s) {
  size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] == out[off + d]) b.add_all(off + d, s[d]);
}

// Constant data reads as a different constant wherever its values change.
DimSplits constant_splits(const Tensor& t, int64_t cap) {
  RefTensor<Zp> r = to_ref<Zp>(t);
  const Shape& shape = r.type.shape;
  Builder b(shape, cap);
  std::vector<int64_t> strides = shape_strides(shape);
  auto at = [&](int64_t i) { return r.is_num() ? r.num[static_cast<size_t>(i)].v : static_cast<uint64_t>(r.ints[static_cast<size_t>(i)]); };
  for (size_t d = 0; d < shape.size(); ++d)
    for (int64_t i = 0; i < r.numel(); ++i) {
      int64_t pos = (i / strides[d]) % shape[d];
      if (pos > 0 && at(i) != at(i - strides[d])) b.add(d, pos);
    }
  return b.done();
}

// Reshape: dims group into runs of equal size product. Inside a group the
// flat index is affine in the output index, and the input index is affine in
// the flat index only within one period of the innermost non-unit input dim.
DimSplits reshape_splits(const Shape& in, const Shape& out, const DimSplits& s, int64_t cap) {
  if (shape_numel(in) == 0) throw NoRule{};
  Builder b(out, cap);
  size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    size_t i0 = i, j0 = j;
    int64_t pi = 1, pj = 1;
    if (i < in.size()) pi *= in[i++];
    if (j < out.size()) pj *= out[j++];
    while (pi != pj) {
      if (pi < pj && i < in.size()) pi *= in[i++];
      else if (pj < pi && j < out.size()) pj *= out[j++];
      else throw NoRule{};
    }
    std::set<int64_t> flat;
    size_t inner = i;
    for (size_t k = i; k-- > i0;)
      if (in[k] > 1) { inner = k; break; }
    if (inner != i) {
      int64_t period = in[inner], periods = pi / period;
      if (periods * static_cast<int64_t>(1 + s[inner].size()) > cap) throw NoRule{};
      for (int64_t o = 0; o < periods; ++o) {
        if (o > 0) flat.insert(o * period);
        for (int64_t p : s[inner]) flat.insert(o * period + p);
      }
    }
    for (int64_t p : flat) {
      std::vector<int64_t> idx(j - j0);
      int64_t rem = p;
      for (size_t k = j; k-- > j0;) {
        idx[k - j0] = rem % out[k];
        rem /= out[k];
      }
      size_t last = 0;
      for (size_t k = 0; k < idx.size(); ++k)
        if (idx[k] != 0) last = k;
      for (size_t k = 0; k <= last; ++k) {
        b.add(j0 + k, idx[k]);
        if (k < last) b.add(j0 + k, idx[k] + 1);
      }
    }
  }
  return b.done();
}

DimSplits slice_splits(const Node& n, const Shape& in, const Shape& out, const DimSplits& s, int64_t cap) {
  Builder b(out, cap);
  size_t rank = in.size();
  std::vector<int64_t> start, step;
  slice_geometry(n, in, out, start, step);
  for (size_t d = 0; d < rank; ++d)
    for (int64_t p : s[d]) {
      if (step[d] > 0) b.add(d, ceil_div(p - start[d], step[d]));
      else b.add(d, floor_div(start[d] - p, -step[d]) + 1);
    }
  return b.done();
}

// A window op: output o reads input o*stride - pad + t*dilation for each tap
// t; the form changes where some tap crosses an input point or an edge.
void window_splits(Builder& b, const Node& n, const Shape& x, const DimSplits& sx) {
  const auto& k = n.attrs.ints("kernel_shape");
  const auto& st = n.attrs.ints("strides");
  const auto& pads = n.attrs.ints("pads");
  const auto& dil = n.attrs.ints("dilations");
  size_t sp = k.size();
  for (size_t j = 0; j < sp; ++j) {
    std::vector<int64_t> pts = sx[2 + j];
    int64_t in = x[2 + j];
    pts.insert(pts.end(), {0, in, -pads[j], in + pads[sp + j]});
    for (int64_t p : pts)
      for (int64_t t = 0; t < k[j]; ++t) b.add(2 + j, ceil_div(p + pads[j] - t * dil[j], st[j]));
  }
}

DimSplits node_output_splits(const Graph& g, const Node& n, size_t out_index, const std::vector<DimSplits>& vs,
                             int64_t cap) {
  const Shape& out = g.type(n.outputs[out_index]).shape;
  auto in_shape = [&](size_t i) -> const Shape& { return g.type(n.inputs[i]).shape; };
  auto in_splits = [&](size_t i) -> const DimSplits& { return vs[static_cast<size_t>(n.inputs[i])]; };
  auto present = [&](size_t i) { return i < n.inputs.size() && n.inputs[i] != kNoValue; };
  Builder b(out, cap);
  const OpDef& def = op_def(n.kind);
  if (def.elementwise()) {
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (present(i)) add_broadcast(b, out, in_shape(i), in_splits(i));
    return b.done();
  }
  switch (n.kind) {
    case OpKind::kReshape: case OpKind::kFlatten: case OpKind::kSqueeze: case OpKind::kUnsqueeze:
      return reshape_splits(in_shape(0), out, in_splits(0), cap);
    case OpKind::kTranspose: {
      const auto& perm = n.attrs.ints("perm");
      for (size_t d = 0; d < out.size(); ++d) b.add_all(d, in_splits(0)[static_cast<size_t>(perm[d])]);
      return b.done();
    }
    case OpKind::kSlice:
      return slice_splits(n, in_shape(0), out, in_splits(0), cap);
    case OpKind::kPad: {
      if (n.attrs.s("mode") != "constant") throw NoRule{};
      const auto& pads = n.attrs.ints("pads");
      for (size_t d = 0; d < out.size(); ++d) {
        b.add_all(d, in_splits(0)[d], pads[d]);
        b.add(d, pads[d]);
        b.add(d, pads[d] + in_shape(0)[d]);
      }
      return b.done();
    }
    case OpKind::kConcat: {
      int64_t axis = n.attrs.i("axis");
      if (axis < 0) axis += static_cast<int64_t>(out.size());
      int64_t off = 0;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        for (size_t d = 0; d < out.size(); ++d)
          b.add_all(d, in_splits(i)[d], static_cast<int64_t>(d) == axis ? off : 0);
        off += in_shape(i)[static_cast<size_t>(axis)];
        b.add(static_cast<size_t>(axis), off);
      }
      return b.done();
    }
    case OpKind::kSplit: {
      int64_t axis = n.attrs.i("axis");
      if (axis < 0) axis += static_cast<int64_t>(out.size());
      const auto& sizes = n.attrs.ints("split");
      int64_t off = 0;
      for (size_t k = 0; k < out_index; ++k) off += sizes[k];
      for (size_t d = 0; d < out.size(); ++d) b.add_all(d, in_splits(0)[d], static_cast<int64_t>(d) == axis ? -off : 0);
      return b.done();
    }
    case OpKind::kMatMul: {
      Shape a = in_shape(0), bs = in_shape(1);
      DimSplits sa = in_splits(0), sb = in_splits(1);
      bool a1 = a.size() == 1, b1 = bs.size() == 1;
      size_t r = out.size();
      // Batch dims broadcast; M comes from A's rows, N from B's columns.
      size_t batch = r - (a1 ? 0 : 1) - (b1 ? 0 : 1);
      Shape ob(out.begin(), out.begin() + static_cast<int64_t>(batch));
      auto add_batch = [&](const Shape& s, const DimSplits& ss, size_t core) {
        if (s.size() <= core) return;
        Shape sbatch(s.begin(), s.end() - static_cast<int64_t>(core));
        DimSplits spl(ss.begin(), ss.end() - static_cast<int64_t>(core));
        Builder bb(ob, cap);
        add_broadcast(bb, ob, sbatch, spl);
        DimSplits got = bb.done();
        for (size_t d = 0; d < batch; ++d) b.add_all(d, got[d]);
      };
      add_batch(a, sa, 2);
      add_batch(bs, sb, 2);
      if (!a1) b.add_all(batch, sa[a.size() - 2]);
      if (!b1) b.add_all(r - 1, sb[bs.size() - 1]);
      return b.done();
    }
    case OpKind::kGemm: {
      bool ta = n.attrs.i("transA") != 0, tb = n.attrs.i("transB") != 0;
      b.add_all(0, in_splits(0)[ta ? 1 : 0]);
      b.add_all(1, in_splits(1)[tb ? 0 : 1]);
      if (present(2)) add_broadcast(b, out, in_shape(2), in_splits(2));
      return b.done();
    }
    case OpKind::kConv: {
      int64_t group = n.attrs.i("group");
      b.add_all(0, in_splits(0)[0]);
      b.add_all(1, in_splits(1)[0]);
      if (present(2)) b.add_all(1, in_splits(2)[0]);
      for (int64_t k = 1; k < group; ++k) b.add(1, k * (out[1] / group));
      window_splits(b, n, in_shape(0), in_splits(0));
      return b.done();
    }
    case OpKind::kMaxPool: case OpKind::kAveragePool:
      b.add_all(0, in_splits(0)[0]);
      b.add_all(1, in_splits(0)[1]);
      window_splits(b, n, in_shape(0), in_splits(0));
      return b.done();
    case OpKind::kGlobalAveragePool: case OpKind::kGlobalMaxPool:
      b.add_all(0, in_splits(0)[0]);
      b.add_all(1, in_splits(0)[1]);
      return b.done();
    case OpKind::kSoftmax: case OpKind::kLogSoftmax: case OpKind::kCumSum:
      for (size_t d = 0; d < out.size(); ++d) b.add_all(d, in_splits(0)[d]);
      return b.done();
    case OpKind::kLayerNormalization: {
      const Shape& x = in_shape(0);
      if (out_index == 0) {
        add_broadcast(b, out, x, in_splits(0));
        for (size_t i = 1; i < n.inputs.size(); ++i)
          if (present(i)) add_broadcast(b, out, in_shape(i), in_splits(i));
      } else {
        add_broadcast(b, out, x, in_splits(0));  // Mean, InvStdDev: reduced dims have size 1
      }
      return b.done();
    }
    case OpKind::kBatchNormalization:
      for (size_t d = 0; d < out.size(); ++d) b.add_all(d, in_splits(0)[d]);
      for (size_t i = 1; i < n.inputs.size(); ++i) b.add_all(1, in_splits(i)[0]);
      return b.done();
    case OpKind::kReduceSum: case OpKind::kReduceMean: case OpKind::kReduceMax: case OpKind::kReduceMin:
    case OpKind::kReduceProd: case OpKind::kReduceL2: case OpKind::kReduceSumSquare: {
      const Shape& x = in_shape(0);
      std::vector<int64_t> axes = n.attrs.ints("axes");
      std::vector<bool> reduced(x.size(), axes.empty());
      for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(x.size()) : a)] = true;
      bool keep = n.attrs.i("keepdims") != 0;
      for (size_t d = 0, o = 0; d < x.size(); ++d) {
        if (!reduced[d]) b.add_all(o, in_splits(0)[d]);
        if (!reduced[d] || keep) ++o;
      }
      return b.done();
    }
    case OpKind::kExpand:
      add_broadcast(b, out, in_shape(0), in_splits(0));
      return b.done();
    case OpKind::kTile: {
      const Shape& x = in_shape(0);
      for (size_t d = 0; d < out.size(); ++d)
        for (int64_t r = 0; r * x[d] < out[d]; ++r) {
          b.add(d, r * x[d]);
          b.add_all(d, in_splits(0)[d], r * x[d]);
        }
      return b.done();
    }
    case OpKind::kConstantOfShape: case OpKind::kSize:
      return b.done();
    default:
      throw NoRule{};
  }
}

}  // namespace

void slice_geometry(const Node& n, const Shape& in, const Shape& out, std::vector<int64_t>& start,
                    std::vector<int64_t>& step) {
  size_t rank = in.size();
  start.assign(rank, 0);
  step.assign(rank, 1);
  const auto& starts = n.attrs.ints("starts");
  const auto& axes = n.attrs.ints("axes");
  const auto& steps = n.attrs.ints("steps");
  for (size_t k = 0; k < axes.size(); ++k) {
    auto axis = static_cast<size_t>(axes[k] < 0 ? axes[k] + static_cast<int64_t>(rank) : axes[k]);
    int64_t dim = in[axis], st = steps[k];
    int64_t first = starts[k] < 0 ? starts[k] + dim : starts[k];
    first = st > 0 ? std::clamp<int64_t>(first, 0, dim) : std::clamp<int64_t>(first, 0, std::max<int64_t>(dim - 1, 0));
    start[axis] = first;
    step[axis] = out[axis] <= 1 ? 1 : st;
  }
}

std::optional<std::vector<DimSplits>> split_points(const Graph& g, int64_t max_per_dim) {
  std::vector<DimSplits> vs(static_cast<size_t>(g.num_values()));
  try {
    for (ValueId v = 0; v < g.num_values(); ++v) {
      const Value& val = g.value(v);
      if (val.constant) vs[static_cast<size_t>(v)] = constant_splits(*val.constant, max_per_dim);
      else vs[static_cast<size_t>(v)].assign(val.type.shape.size(), {});
    }
    for (NodeId id : g.topo_order()) {
      const Node& n = g.node(id);
      for (size_t o = 0; o < n.outputs.size(); ++o)
        vs[static_cast<size_t>(n.outputs[o])] = node_output_splits(g, n, o, vs, max_per_dim);
    }
  } catch (const NoRule&) {
    return std::nullopt;
  }
  return vs;
}

int64_t grid_box_count(const Shape& shape, const DimSplits& splits) {
  int64_t n = shape_numel(shape) == 0 ? 0 : 1;
  for (size_t d = 0; d < shape.size(); ++d) n *= static_cast<int64_t>(splits[d].size()) + 1;
  return n;
}

std::vector<Box> grid_boxes(const Shape& shape, const DimSplits& splits) {
  std::vector<Box> out;
  if (shape_numel(shape) == 0) return out;
  std::vector<std::vector<int64_t>> edges(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    edges[d].push_back(0);
    edges[d].insert(edges[d].end(), splits[d].begin(), splits[d].end());
    edges[d].push_back(shape[d]);
  }
  std::vector<size_t> at(shape.size(), 0);
  while (true) {
    Box box;
    for (size_t d = 0; d < shape.size(); ++d) {
      box.lo.push_back(edges[d][at[d]]);
      box.hi.push_back(edges[d][at[d] + 1]);
    }
    out.push_back(std::move(box));
    size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++at[d] + 1 < edges[d].size()) break;
      at[d] = 0;
      if (d == 0) return out;
    }
    if (shape.empty()) return out;
  }
}

std::vector<std::vector<int64_t>> box_samples(const Box& box) {
  std::set<std::vector<int64_t>> pts;
  size_t r = box.lo.size();
  for (uint64_t mask = 0; mask < (uint64_t{1} << r); ++mask) {
    std::vector<int64_t> p(r);
    for (size_t d = 0; d < r; ++d) p[d] = (mask >> d) & 1 ? box.hi[d] - 1 : box.lo[d];
    pts.insert(std::move(p));
  }
  for (size_t d = 0; d < r; ++d)
    if (box.hi[d] - box.lo[d] > 1) {
      std::vector<int64_t> p = box.lo;
      ++p[d];
      pts.insert(std::move(p));
    }
  return {pts.begin(), pts.end()};
}

}  // namespace tessera::verifier
