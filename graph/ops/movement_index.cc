// Data movement, part 2: ops where each output element reads one input element
// through an index computation (or a fill value):
//
//   Slice           ONNX clamping: negatives count from the end; for step > 0
//                   start and end clamp to [0, dim], for step < 0 start clamps
//                   to [0, dim-1] and end to [-1, dim-1]
//   Gather          out[o.., j.., i..] = data[o.., indices[j..], i..]
//   GatherElements  out[i] = data[i with i[axis] = indices[i]]
//   Pad             constant / reflect (mirror, edge not repeated) / edge
//   Expand, Tile, Trilu
//
// Each kernel builds the map "output element -> input element" and hands it
// to copy_by_map, which works for number and integer storage alike. The
// scatters, which combine two inputs, are in scatter.cc.
#include <algorithm>
#include <cmath>
#include <set>

#include "graph/attr_views.h"
#include "graph/interpreter.h"
#include "graph/ops/movement_util.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"
#include "graph/strategy.h"

namespace tessera {
namespace {

using ops::checked_index;
using ops::linear_in_data;
using ops::normalize_axis;
using ops::require_indices;

// The elements a Slice reads along one dim: start, start+step, ... (size of them).
struct SliceDim {
  int64_t start = 0, step = 1, size = 0;
};

std::vector<SliceDim> slice_plan(const Node& node, const Shape& shape) {
  const auto& starts = node.attrs.ints("starts");
  const auto& ends = node.attrs.ints("ends");
  const auto& raw_axes = node.attrs.ints("axes");
  const auto& steps = node.attrs.ints("steps");
  if (ends.size() != starts.size() || raw_axes.size() != starts.size() || steps.size() != starts.size())
    TESSERA_SHAPE_ERROR("Slice starts, ends, axes and steps must have the same length, got "
                        << starts.size() << ", " << ends.size() << ", " << raw_axes.size() << ", " << steps.size());
  int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<SliceDim> plan(shape.size());
  for (int64_t d = 0; d < rank; ++d) plan[d] = {0, 1, shape[d]};
  std::vector<int64_t> axes = ops::normalize_axes(raw_axes, rank);
  std::set<int64_t> seen;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = axes[i], dim = shape[axis], step = steps[i];
    if (!seen.insert(axis).second) TESSERA_SHAPE_ERROR("Slice axis " << axis << " appears twice");
    if (step == 0) TESSERA_SHAPE_ERROR("Slice step for axis " << axis << " is zero");
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    SliceDim s;
    if (dim == 0) {
      s = {0, 1, 0};
    } else if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      s = {start, step, end > start ? 1 + (end - start - 1) / step : 0};
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      int64_t magnitude = step == INT64_MIN ? INT64_MAX : -step;
      s = {start, step, start > end ? 1 + (start - end - 1) / magnitude : 0};
    }
    if (s.size <= 1) s.step = 1;  // only index 0 is read; keeps start + k*step from overflowing
    plan[axis] = s;
  }
  return plan;
}

std::vector<TensorType> infer_slice(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  Shape out;
  for (const SliceDim& s : slice_plan(c.node, x.shape)) out.push_back(s.size);
  return ops::one(x.dtype, out);
}

template <class T>
void eval_slice(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  std::vector<SliceDim> plan = slice_plan(a.node, x.type.shape);
  std::vector<int64_t> strides = shape_strides(x.type.shape), idx, src(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    ops::unravel(i, out.type.shape, idx);
    int64_t s = 0;
    for (size_t d = 0; d < plan.size(); ++d) s += (plan[d].start + idx[d] * plan[d].step) * strides[d];
    src[i] = s;
  }
  ops::copy_by_map(x, out, src);
}

std::vector<TensorType> infer_gather(const InferContext& c) {
  const TensorType &data = c.inputs[0], &indices = c.inputs[1];
  require_indices(indices, "Gather");
  if (data.rank() == 0) TESSERA_SHAPE_ERROR("Gather data must have rank >= 1");
  int64_t axis = normalize_axis(c.node.attrs.i("axis"), data.rank());
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), indices.shape.begin(), indices.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  return ops::one(data.dtype, out);
}

template <class T>
void eval_gather(const EvalArgs<T>& a) {
  const RefTensor<T>& data = *a.inputs[0];
  const RefTensor<T>& indices = *a.inputs[1];
  RefTensor<T>& out = (*a.outputs)[0];
  const Shape& shape = data.type.shape;
  int64_t axis = normalize_axis(a.node.attrs.i("axis"), data.type.rank());
  int64_t outer = 1, inner = 1, dim = shape[axis];
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<int64_t> src;
  src.reserve(static_cast<size_t>(out.numel()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t idx : indices.ints) {
      int64_t j = checked_index(idx, dim, axis);
      for (int64_t i = 0; i < inner; ++i) src.push_back((o * dim + j) * inner + i);
    }
  ops::copy_by_map(data, out, src);
}

std::vector<TensorType> infer_gather_elements(const InferContext& c) {
  const TensorType &data = c.inputs[0], &indices = c.inputs[1];
  require_indices(indices, "GatherElements");
  if (data.rank() == 0) TESSERA_SHAPE_ERROR("GatherElements data must have rank >= 1");
  if (indices.rank() != data.rank())
    TESSERA_SHAPE_ERROR("GatherElements indices " << shape_str(indices.shape) << " must have the rank of data "
                                                  << shape_str(data.shape));
  int64_t axis = normalize_axis(c.node.attrs.i("axis"), data.rank());
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.shape[d] > data.shape[d])
      TESSERA_SHAPE_ERROR("GatherElements indices dim " << d << " (" << indices.shape[d] << ") exceeds data dim "
                                                        << data.shape[d]);
  return ops::one(data.dtype, indices.shape);
}

template <class T>
void eval_gather_elements(const EvalArgs<T>& a) {
  const RefTensor<T>& data = *a.inputs[0];
  const RefTensor<T>& indices = *a.inputs[1];
  RefTensor<T>& out = (*a.outputs)[0];
  int64_t axis = normalize_axis(a.node.attrs.i("axis"), data.type.rank());
  std::vector<int64_t> strides = shape_strides(data.type.shape), idx, src(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    ops::unravel(i, out.type.shape, idx);
    idx[axis] = checked_index(indices.ints[i], data.type.shape[axis], axis);
    src[i] = ops::ravel(idx, strides);
  }
  ops::copy_by_map(data, out, src);
}

enum class PadMode { kConstant, kReflect, kEdge };

PadMode pad_mode(const Node& node) {
  const std::string& m = node.attrs.s("mode");
  if (m == "constant") return PadMode::kConstant;
  if (m == "reflect") return PadMode::kReflect;
  if (m == "edge") return PadMode::kEdge;
  TESSERA_SHAPE_ERROR("Pad mode '" << m << "' is not one of constant, reflect, edge");
}

std::vector<TensorType> infer_pad(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  const std::vector<int64_t>& pads = c.node.attrs.ints("pads");
  PadMode mode = pad_mode(c.node);
  int64_t rank = x.rank();
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    TESSERA_SHAPE_ERROR("Pad pads has " << pads.size() << " values, expected " << 2 * rank << " for rank " << rank);
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t dim = x.shape[d], b = pads[d], e = pads[rank + d];
    if (mode == PadMode::kReflect && (b > 0 || e > 0) && (b >= dim || e >= dim))
      TESSERA_SHAPE_ERROR("reflect Pad of dim " << d << " (size " << dim << ") needs pads < " << dim << ", got "
                                                << b << " and " << e);
    if (mode == PadMode::kEdge && (b > 0 || e > 0) && dim == 0)
      TESSERA_SHAPE_ERROR("edge Pad of empty dim " << d);
    if (dim + b + e < 0) TESSERA_SHAPE_ERROR("Pad makes dim " << d << " negative (" << dim + b + e << ")");
    out.push_back(dim + b + e);
  }
  return ops::one(x.dtype, out);
}

template <class T>
void eval_pad(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  const std::vector<int64_t>& pads = a.node.attrs.ints("pads");
  PadMode mode = pad_mode(a.node);
  const Shape& shape = x.type.shape;
  size_t rank = shape.size();
  std::vector<int64_t> strides = shape_strides(shape), idx, src(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    ops::unravel(i, out.type.shape, idx);
    int64_t s = 0;
    for (size_t d = 0; d < rank && s >= 0; ++d) {
      int64_t p = idx[d] - pads[d], dim = shape[d];
      if (p < 0 || p >= dim) {
        if (mode == PadMode::kConstant) s = -1;
        else if (mode == PadMode::kEdge) p = std::clamp<int64_t>(p, 0, dim - 1);
        else p = p < 0 ? -p : 2 * (dim - 1) - p;
      }
      if (s >= 0) s += p * strides[d];
    }
    src[i] = s;
  }
  ops::copy_by_map(x, out, src, a.node.attrs.f("value"));
}

Linearity pad_linearity(const Node& n) {
  bool zero_fill = n.attrs.s("mode") == "constant" && n.attrs.f("value") == 0.0;
  return zero_fill ? Linearity{1u, false} : Linearity{};
}

std::vector<TensorType> infer_expand(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  const Shape& shape = c.node.attrs.ints("shape");
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < 0) TESSERA_SHAPE_ERROR("Expand shape[" << i << "] is negative: " << shape[i]);
  try {
    return ops::one(x.dtype, ops::broadcast_shapes(x.shape, shape));
  } catch (const Error&) {
    TESSERA_SHAPE_ERROR("cannot expand " << shape_str(x.shape) << " to " << shape_str(shape));
  }
}

template <class T>
void eval_expand(const EvalArgs<T>& a) {
  RefTensor<T>& out = (*a.outputs)[0];
  ops::copy_by_map(*a.inputs[0], out, ops::broadcast_index_map(a.inputs[0]->type.shape, out.type.shape));
}

std::vector<TensorType> infer_tile(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  const std::vector<int64_t>& repeats = c.node.attrs.ints("repeats");
  if (static_cast<int64_t>(repeats.size()) != x.rank())
    TESSERA_SHAPE_ERROR("Tile repeats has " << repeats.size() << " values for rank " << x.rank());
  Shape out;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (repeats[d] < 0) TESSERA_SHAPE_ERROR("Tile repeats[" << d << "] is negative: " << repeats[d]);
    if (repeats[d] > 0 && x.shape[d] > kMaxTensorBytes / repeats[d])
      TESSERA_THROW(ErrorKind::kResource, "Tile output dim " << d << " is too large");
    out.push_back(x.shape[d] * repeats[d]);
  }
  shape_numel(out);  // raises kResource when the product overflows
  return ops::one(x.dtype, out);
}

template <class T>
void eval_tile(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  const Shape& shape = x.type.shape;
  std::vector<int64_t> strides = shape_strides(shape), idx, src(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    ops::unravel(i, out.type.shape, idx);
    for (size_t d = 0; d < shape.size(); ++d) idx[d] %= shape[d];
    src[i] = ops::ravel(idx, strides);
  }
  ops::copy_by_map(x, out, src);
}

std::vector<TensorType> infer_trilu(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  if (x.rank() < 2) TESSERA_SHAPE_ERROR("Trilu input must have rank >= 2, got " << shape_str(x.shape));
  return {x};
}

// Keeps element (i, j) of each trailing matrix where j - i >= k (upper) or
// j - i <= k (lower); zeroes the rest.
template <class T>
void eval_trilu(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  bool upper = a.node.attrs.i("upper") != 0;
  int64_t k = a.node.attrs.i("k");
  int64_t rows = x.type.shape[x.type.rank() - 2], cols = x.type.shape.back();
  std::vector<int64_t> src(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t diff = i % cols - (i / cols) % rows;
    bool keep = upper ? diff >= k : diff <= k;
    src[i] = keep ? i : -1;
  }
  ops::copy_by_map(x, out, src);
}

// Dim maps.

// out[f..] = x[start + step·f ..] along each dim (slice_plan's clamping).
DimMap slice_dim_map(const DimMapContext& c) {
  DimMap m;
  m.copies = true;
  Piece p;
  Read r{0, {}, false};
  for (const SliceDim& s : slice_plan(c.node, c.in[0])) {
    int f = dims::add_factor(m, s.size);
    p.dims.push_back(dims::factor(f));
    r.dims.push_back(dims::affine({{f, s.step}}, s.start, false));
  }
  p.reads.push_back(std::move(r));
  m.outputs.push_back({std::move(p)});
  return m;
}

// out[o.., j.., i..] = data[o.., indices[j..], i..].
DimMap gather_dim_map(const DimMapContext& c) {
  const Shape &data = c.in[0], &idx = c.in[1];
  auto axis = static_cast<size_t>(normalize_axis(c.node.attrs.i("axis"), static_cast<int64_t>(data.size())));
  DimMap m;
  std::vector<int> outer, index, inner;
  for (size_t d = 0; d < axis; ++d) outer.push_back(dims::add_factor(m, data[d]));
  for (int64_t s : idx) index.push_back(dims::add_factor(m, s));
  for (size_t d = axis + 1; d < data.size(); ++d) inner.push_back(dims::add_factor(m, data[d]));
  std::vector<int> all = outer;
  all.insert(all.end(), index.begin(), index.end());
  all.insert(all.end(), inner.begin(), inner.end());
  std::vector<DimExpr> dd = dims::factors(outer);
  dd.push_back(dims::positional({}, DimForm::kGathered));
  for (int f : inner) dd.push_back(dims::factor(f));
  m.outputs.push_back({Piece{dims::factors(all), {{0, dd, false}, {1, dims::factors(index), false}}}});
  return m;
}

// out[i] = data[i with i[axis] = indices[i]]: data's other dims read at i,
// which may be smaller than data.
DimMap gather_elements_dim_map(const DimMapContext& c) {
  const Shape& idx = c.in[1];
  auto axis = static_cast<size_t>(normalize_axis(c.node.attrs.i("axis"), static_cast<int64_t>(idx.size())));
  DimMap m;
  std::vector<int> f;
  for (int64_t s : idx) f.push_back(dims::add_factor(m, s));
  std::vector<DimExpr> dd = dims::factors(f);
  dd[axis] = dims::positional({}, DimForm::kGathered);
  m.outputs.push_back({Piece{dims::factors(f), {{0, dd, false}, {1, dims::factors(f), false}}}});
  return m;
}

// Constant Pad: out[f..] = x[f - begin ..], the fill outside x. Reflect and
// edge modes mirror or clamp: positional on the padded dims.
DimMap pad_dim_map(const DimMapContext& c) {
  const Shape &x = c.in[0], &out = c.out[0];
  const auto& pads = c.node.attrs.ints("pads");
  bool constant = pad_mode(c.node) == PadMode::kConstant;
  DimMap m;
  m.copies = constant;
  Piece p;
  Read r{0, {}, false};
  for (size_t d = 0; d < x.size(); ++d) {
    int f = dims::add_factor(m, out[d]);
    bool padded = pads[d] != 0 || pads[x.size() + d] != 0;
    p.dims.push_back(dims::factor(f));
    if (padded && !constant) r.dims.push_back(dims::positional({f}));
    else r.dims.push_back(dims::affine({{f, 1}}, -pads[d], padded));
  }
  p.reads.push_back(std::move(r));
  m.outputs.push_back({std::move(p)});
  m.fill = c.node.attrs.f("value");
  return m;
}

DimMap expand_dim_map(const DimMapContext& c) {
  DimMap m = dims::elementwise(c);
  m.copies = true;
  return m;
}

// out[r·n + f] = x[f] along each dim (r the repeat, n = x's size).
DimMap tile_dim_map(const DimMapContext& c) {
  const Shape& x = c.in[0];
  const auto& repeats = c.node.attrs.ints("repeats");
  DimMap m;
  m.copies = true;
  Piece p;
  Read r{0, {}, false};
  for (size_t d = 0; d < x.size(); ++d) {
    int fr = dims::add_factor(m, repeats[d]), f = dims::add_factor(m, x[d]);
    p.dims.push_back(dims::merge(m, {fr, f}));
    r.dims.push_back(dims::factor(f));
  }
  p.reads.push_back(std::move(r));
  m.outputs.push_back({std::move(p)});
  return m;
}

// Keeps or zeroes each element by its place relative to the diagonal.
DimMap trilu_dim_map(const DimMapContext& c) {
  DimMap m = dims::elementwise(c);
  std::vector<DimExpr>& r = m.outputs[0][0].reads[0].dims;
  for (size_t d = r.size() - 2; d < r.size(); ++d) r[d].form = DimForm::kPositional;
  return m;
}

// Vocab-parallel rows (Megatron's VocabParallelEmbedding, XLA's gather with
// a sharded operand): each rank holds rows [start, start + V/n) of data along
// the gathered axis, looks up the indices that fall there (shifted into its
// block, the others at a safe 0) and zeroes the rest, so the ranks' outputs
// sum to the gather (Partial). Negative indices count from the end first.
std::vector<ValueId> emit_vocab_parallel(const LocalOp& op, int) {
  Graph& l = op.local;
  const Node& n = op.node;
  ValueId data = op.inputs[0], ids = op.inputs[1];
  const Shape& global = op.global.type(n.inputs[0]).shape;
  auto axis = static_cast<size_t>(normalize_axis(n.attrs.i("axis"), static_cast<int64_t>(global.size())));
  std::vector<int64_t> offset;
  Shape block;
  local_block(op.mesh, op.strategy.inputs[0], global, op.rank, offset, block);
  DType it = l.type(ids).dtype;
  auto index = [&](const char* what, int64_t v) {
    return l.add_constant(n.name + "/vocab_" + what, Tensor::from_ints(it, {}, {v}));
  };
  auto op_named = [&](OpKind k, std::vector<ValueId> in, const char* what) {
    return l.add(k, std::move(in), {}, n.name + "/vocab_" + what);
  };
  ValueId zero = index("zero", 0), start = index("start", offset[axis]);
  ValueId negative = op_named(OpKind::kLess, {ids, zero}, "negative");
  ValueId wrapped = op_named(OpKind::kAdd, {ids, index("size", global[axis])}, "wrapped");
  ValueId id = op_named(OpKind::kWhere, {negative, wrapped, ids}, "id");
  ValueId from = op_named(OpKind::kGreaterOrEqual, {id, start}, "from");
  ValueId below = op_named(OpKind::kLess, {id, index("end", offset[axis] + block[axis])}, "below");
  ValueId mine = op_named(OpKind::kAnd, {from, below}, "mine");
  ValueId shifted = op_named(OpKind::kSub, {id, start}, "shifted");
  ValueId safe = op_named(OpKind::kWhere, {mine, shifted, zero}, "safe");
  ValueId looked_up = l.add(OpKind::kGather, {data, safe}, n.attrs, n.name);
  Shape mask_shape(axis, 1);
  const Shape& ids_shape = l.type(ids).shape;
  mask_shape.insert(mask_shape.end(), ids_shape.begin(), ids_shape.end());
  mask_shape.resize(mask_shape.size() + global.size() - axis - 1, 1);
  Attrs shape;
  shape.set("shape", mask_shape);
  ValueId mask = l.add(OpKind::kReshape, {mine}, shape, n.name + "/vocab_mask");
  DType dt = l.type(data).dtype;
  ValueId fill = l.add_constant(n.name + "/vocab_fill",
                                is_float(dt) ? Tensor::from_doubles(dt, {}, {0.0}) : Tensor::from_ints(dt, {}, {0}));
  return {l.add(OpKind::kWhere, {mask, looked_up, fill}, {}, n.name + "/vocab_masked")};
}

std::vector<AxisStrategy> gather_strategies(const Graph& g, const Node& n, int64_t axis_size) {
  const TensorType& data = g.type(n.inputs[0]);
  int64_t axis = normalize_axis(n.attrs.i("axis"), data.rank());
  int64_t rows = data.shape[static_cast<size_t>(axis)];
  if (data.dtype == DType::kBool || rows < axis_size || rows % axis_size != 0) return {};
  AxisStrategy s;
  s.kind = AxisStrategy::Kind::kExplicit;
  s.inputs = {Placement::shard(axis), Placement::replicate()};
  s.outputs = {Placement::partial()};
  s.name = "vocab-parallel";
  s.emit = emit_vocab_parallel;
  return {s};
}

// Sizes the attributes hold: the local output's.
void localize_expand(const DimMapContext&, Attrs& attrs, const std::vector<Shape>&, const std::vector<Shape>& out) {
  attrs.set("shape", out[0]);
}

void localize_tile(const DimMapContext&, Attrs& attrs, const std::vector<Shape>& in, const std::vector<Shape>& out) {
  std::vector<int64_t> repeats;
  for (size_t d = 0; d < in[0].size(); ++d) repeats.push_back(in[0][d] ? out[0][d] / in[0][d] : 0);
  attrs.set("repeats", repeats);
}

}  // namespace

namespace {
int64_t gather_axis(const Node& n) { return GatherAttrs::of(n).axis; }
}  // namespace

void register_movement_index_ops(std::vector<OpDef>& defs) {
  auto def = [&](OpKind k, InferFn infer, std::vector<AttrSpec> attrs) -> OpDef& {
    OpDef& d = defs[static_cast<int>(k)];
    d.attrs = std::move(attrs);
    d.infer = infer;
    d.linearity = linear_in_data;
    return d;
  };

  TESSERA_SET_KERNELS(def(OpKind::kSlice, infer_slice, SliceAttrs::schema()),
                      eval_slice);

  OpDef& gather = def(OpKind::kGather, infer_gather, GatherAttrs::schema());
  gather.min_inputs = gather.max_inputs = 2;
  TESSERA_SET_KERNELS(gather, eval_gather);

  OpDef& gather_el = def(OpKind::kGatherElements, infer_gather_elements, GatherAttrs::schema());
  gather_el.min_inputs = gather_el.max_inputs = 2;
  TESSERA_SET_KERNELS(gather_el, eval_gather_elements);

  OpDef& pad = def(OpKind::kPad, infer_pad, PadAttrs::schema());
  pad.linearity = pad_linearity;
  TESSERA_SET_KERNELS(pad, eval_pad);

  TESSERA_SET_KERNELS(def(OpKind::kExpand, infer_expand, ExpandAttrs::schema()), eval_expand);
  TESSERA_SET_KERNELS(def(OpKind::kTile, infer_tile, TileAttrs::schema()), eval_tile);
  TESSERA_SET_KERNELS(def(OpKind::kTrilu, infer_trilu, TriluAttrs::schema()), eval_trilu);

  auto set = [&](OpKind k) -> OpDef& { return defs[static_cast<int>(k)]; };
  for (OpKind k : {OpKind::kSlice, OpKind::kExpand, OpKind::kTile, OpKind::kGather, OpKind::kGatherElements})
    set(k).copies_inputs = 1u;  // Gather's data side: its values are looked up, not changed
  set(OpKind::kGather).indexed_axis = gather_axis;
  set(OpKind::kGatherElements).indexed_axis = gather_axis;
  set(OpKind::kSlice).dim_map = slice_dim_map;
  set(OpKind::kGather).dim_map = gather_dim_map;
  set(OpKind::kGather).explicit_strategies = gather_strategies;
  set(OpKind::kGatherElements).dim_map = gather_elements_dim_map;
  set(OpKind::kPad).dim_map = pad_dim_map;
  set(OpKind::kExpand).dim_map = expand_dim_map;
  set(OpKind::kExpand).localize = localize_expand;
  set(OpKind::kTile).dim_map = tile_dim_map;
  set(OpKind::kTile).localize = localize_tile;
  set(OpKind::kTrilu).dim_map = trilu_dim_map;
}

}  // namespace tessera
