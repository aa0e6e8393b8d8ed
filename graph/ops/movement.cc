// Data movement, part 1: ops that reshape, permute, join or split whole
// tensors, and the shape-producing ops (Shape, Size, ConstantOfShape, Range).
// The per-element indexing ops (Slice, Gather, Pad, Expand, ...) are in
// movement_index.cc. Shape-like ONNX inputs are attributes here (the importer
// resolves them), so only ConstantOfShape and Range read constant inputs.
#include <cmath>
#include <set>

#include "graph/attr_views.h"
#include "graph/interpreter.h"
#include "graph/ops/movement_util.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"

namespace tessera {

// Defined in movement_index.cc, scatter.cc and resize.cc.
void register_movement_index_ops(std::vector<OpDef>& defs);
void register_scatter_ops(std::vector<OpDef>& defs);
void register_resize_ops(std::vector<OpDef>& defs);

namespace {

using ops::linear_in_data;
using ops::normalize_axis;

// Same data, new shape: Reshape, Flatten, Squeeze, Unsqueeze.
template <class T>
void eval_same_data(const EvalArgs<T>& a) {
  RefTensor<T>& out = (*a.outputs)[0];
  out.num = a.inputs[0]->num;
  out.ints = a.inputs[0]->ints;
}

std::vector<TensorType> infer_reshape(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  const Shape& shape = c.node.attrs.ints("shape");
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < 0)
      TESSERA_SHAPE_ERROR("Reshape shape[" << i << "] is " << shape[i] << "; the shape must be fully resolved");
  int64_t n = shape_numel(shape);
  if (n != x.numel())
    TESSERA_SHAPE_ERROR("cannot reshape " << shape_str(x.shape) << " (" << x.numel() << " elements) to "
                                          << shape_str(shape) << " (" << n << " elements)");
  return ops::one(x.dtype, shape);
}

std::vector<TensorType> infer_flatten(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  int64_t axis = c.node.attrs.i("axis");
  if (axis < -x.rank() || axis > x.rank())
    TESSERA_SHAPE_ERROR("Flatten axis " << axis << " is out of range for rank " << x.rank());
  if (axis < 0) axis += x.rank();
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  int64_t inner = 1;
  for (int64_t d = axis; d < x.rank(); ++d) inner *= x.shape[d];
  return ops::one(x.dtype, {outer, inner});
}

std::vector<TensorType> infer_squeeze(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  std::vector<int64_t> axes = ops::normalize_axes(c.node.attrs.ints("axes"), x.rank());
  std::set<int64_t> drop(axes.begin(), axes.end());
  if (drop.size() != axes.size()) TESSERA_SHAPE_ERROR("Squeeze axes contain a duplicate");
  Shape out;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (!drop.count(d)) {
      out.push_back(x.shape[d]);
    } else if (x.shape[d] != 1) {
      TESSERA_SHAPE_ERROR("cannot squeeze dim " << d << " of size " << x.shape[d] << " in " << shape_str(x.shape));
    }
  }
  return ops::one(x.dtype, out);
}

std::vector<TensorType> infer_unsqueeze(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  const std::vector<int64_t>& raw = c.node.attrs.ints("axes");
  int64_t rank = x.rank() + static_cast<int64_t>(raw.size());
  std::vector<int64_t> axes = ops::normalize_axes(raw, rank);
  std::set<int64_t> add(axes.begin(), axes.end());
  if (add.size() != axes.size()) TESSERA_SHAPE_ERROR("Unsqueeze axes contain a duplicate");
  Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) out.push_back(add.count(d) ? 1 : x.shape[next++]);
  return ops::one(x.dtype, out);
}

std::vector<TensorType> infer_transpose(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  const std::vector<int64_t>& perm = c.node.attrs.ints("perm");
  if (static_cast<int64_t>(perm.size()) != x.rank())
    TESSERA_SHAPE_ERROR("Transpose perm has " << perm.size() << " entries for rank " << x.rank());
  std::vector<bool> seen(perm.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank() || seen[p]) TESSERA_SHAPE_ERROR("Transpose perm is not a permutation of 0.." << x.rank() - 1);
    seen[p] = true;
    out.push_back(x.shape[p]);
  }
  return ops::one(x.dtype, out);
}

template <class T>
void eval_transpose(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  const std::vector<int64_t>& perm = a.node.attrs.ints("perm");
  std::vector<int64_t> in_strides = shape_strides(x.type.shape);
  std::vector<int64_t> idx, src(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    ops::unravel(i, out.type.shape, idx);
    int64_t s = 0;
    for (size_t d = 0; d < perm.size(); ++d) s += idx[d] * in_strides[perm[d]];
    src[i] = s;
  }
  ops::copy_by_map(x, out, src);
}

std::vector<TensorType> infer_concat(const InferContext& c) {
  const TensorType& first = c.inputs[0];
  if (first.rank() == 0) TESSERA_SHAPE_ERROR("Concat inputs must have rank >= 1");
  int64_t axis = normalize_axis(c.node.attrs.i("axis"), first.rank());
  Shape out = first.shape;
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const TensorType& t = c.inputs[i];
    if (!c.has_input(i)) TESSERA_SHAPE_ERROR("Concat input " << i << " is missing");
    if (t.dtype != first.dtype)
      TESSERA_SHAPE_ERROR("Concat input " << i << " is " << dtype_name(t.dtype) << ", input 0 is "
                                          << dtype_name(first.dtype));
    if (t.rank() != first.rank())
      TESSERA_SHAPE_ERROR("Concat input " << i << " " << shape_str(t.shape) << " has rank " << t.rank()
                                          << ", input 0 has rank " << first.rank());
    for (int64_t d = 0; d < t.rank(); ++d)
      if (d != axis && t.shape[d] != first.shape[d])
        TESSERA_SHAPE_ERROR("Concat input " << i << " " << shape_str(t.shape) << " differs from input 0 "
                                            << shape_str(first.shape) << " in dim " << d << " (axis is " << axis
                                            << ")");
    out[axis] += t.shape[axis];
  }
  return ops::one(first.dtype, out);
}

// Index of the first element of block `offset` along `axis` in each outer row.
struct AxisBlocks {
  int64_t outer = 1, inner = 1;
};
AxisBlocks axis_blocks(const Shape& shape, int64_t axis) {
  AxisBlocks b;
  for (int64_t d = 0; d < axis; ++d) b.outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) b.inner *= shape[d];
  return b;
}

template <class T>
void eval_concat(const EvalArgs<T>& a) {
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  int64_t axis = normalize_axis(a.node.attrs.i("axis"), out.type.rank());
  AxisBlocks b = axis_blocks(out.type.shape, axis);
  int64_t total = out.type.shape[axis], offset = 0;
  for (const RefTensor<T>* in : a.inputs) {
    int64_t len = in->type.shape[axis];
    for (int64_t o = 0; o < b.outer; ++o)
      for (int64_t k = 0; k < len * b.inner; ++k) {
        int64_t dst = (o * total + offset) * b.inner + k, src = o * len * b.inner + k;
        if (out.is_num()) out.num[dst] = in->num[src];
        else out.ints[dst] = in->ints[src];
      }
    offset += len;
  }
}

std::vector<TensorType> infer_split(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  if (x.rank() == 0) TESSERA_SHAPE_ERROR("Split input must have rank >= 1");
  int64_t axis = normalize_axis(c.node.attrs.i("axis"), x.rank());
  const std::vector<int64_t>& split = c.node.attrs.ints("split");
  if (split.empty()) TESSERA_SHAPE_ERROR("Split needs at least one output size in 'split'");
  int64_t sum = 0;
  std::vector<TensorType> outs;
  for (int64_t s : split) {
    if (s < 0) TESSERA_SHAPE_ERROR("Split size " << s << " is negative");
    sum += s;
    TensorType t = x;
    t.shape[axis] = s;
    outs.push_back(t);
  }
  if (sum != x.shape[axis])
    TESSERA_SHAPE_ERROR("Split sizes add up to " << sum << " but dim " << axis << " of " << shape_str(x.shape)
                                                 << " is " << x.shape[axis]);
  return outs;
}

template <class T>
void eval_split(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  int64_t axis = normalize_axis(a.node.attrs.i("axis"), x.type.rank());
  AxisBlocks b = axis_blocks(x.type.shape, axis);
  int64_t total = x.type.shape[axis], offset = 0;
  for (RefTensor<T>& out : *a.outputs) {
    ops::alloc(out);
    int64_t len = out.type.shape[axis];
    std::vector<int64_t> src;
    src.reserve(static_cast<size_t>(out.numel()));
    for (int64_t o = 0; o < b.outer; ++o)
      for (int64_t k = 0; k < len * b.inner; ++k) src.push_back((o * total + offset) * b.inner + k);
    ops::copy_by_map(x, out, src);
    offset += len;
  }
}

// Shape's [start, end) after ONNX's negative-index and clamping rules.
std::pair<int64_t, int64_t> shape_range(const Node& node, int64_t rank) {
  auto clamp = [&](int64_t v) {
    if (v < 0) v = v < -rank ? 0 : v + rank;
    return std::min(v, rank);
  };
  int64_t start = clamp(node.attrs.i("start")), end = clamp(node.attrs.i("end"));
  return {start, std::max(start, end)};
}

std::vector<TensorType> infer_shape(const InferContext& c) {
  auto [start, end] = shape_range(c.node, c.inputs[0].rank());
  return ops::one(DType::kI64, {end - start});
}

template <class T>
void eval_shape(const EvalArgs<T>& a) {
  const Shape& in = a.inputs[0]->type.shape;
  auto [start, end] = shape_range(a.node, static_cast<int64_t>(in.size()));
  (*a.outputs)[0].ints.assign(in.begin() + start, in.begin() + end);
}

std::vector<TensorType> infer_size(const InferContext&) { return ops::one(DType::kI64, {}); }

template <class T>
void eval_size(const EvalArgs<T>& a) { (*a.outputs)[0].ints = {a.inputs[0]->numel()}; }

std::vector<TensorType> infer_constant_of_shape(const InferContext& c) {
  const Tensor& value = c.node.attrs.tensor("value");
  if (value.numel() != 1)
    TESSERA_SHAPE_ERROR("ConstantOfShape value must hold one element, got " << type_str(value.type()));
  const Tensor* shape = c.constants[0];
  if (!shape) TESSERA_SHAPE_ERROR("ConstantOfShape needs a constant shape input");
  if (!is_integer(shape->dtype()) || shape->dtype() == DType::kBool || shape->rank() != 1)
    TESSERA_SHAPE_ERROR("ConstantOfShape shape input must be a 1-D integer tensor, got " << type_str(shape->type()));
  Shape out = shape->to_ints();
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] < 0) TESSERA_SHAPE_ERROR("ConstantOfShape shape[" << i << "] is negative: " << out[i]);
  return ops::one(value.dtype(), out);
}

template <class T>
void eval_constant_of_shape(const EvalArgs<T>& a) {
  const Tensor& value = a.node.attrs.tensor("value");
  RefTensor<T>& out = (*a.outputs)[0];
  size_t n = static_cast<size_t>(out.numel());
  if (out.is_num()) out.num.assign(n, num_from_double<T>(value.get_double(0)));
  else out.ints.assign(n, value.get_int(0));
}

std::vector<TensorType> infer_range(const InferContext& c) {
  DType dtype = c.inputs[0].dtype;
  const char* names[] = {"start", "limit", "delta"};
  double v[3];
  for (int i = 0; i < 3; ++i) {
    if (c.inputs[i].dtype != dtype || c.inputs[i].rank() != 0)
      TESSERA_SHAPE_ERROR("Range " << names[i] << " must be a " << dtype_name(dtype) << " scalar, got "
                                   << type_str(c.inputs[i]));
    if (!c.constants[i]) TESSERA_SHAPE_ERROR("Range needs a constant " << names[i]);
    v[i] = c.constants[i]->get_double(0);
  }
  if (dtype == DType::kBool) TESSERA_SHAPE_ERROR("Range does not take bool inputs");
  if (v[2] == 0) TESSERA_SHAPE_ERROR("Range delta is zero");
  int64_t n;
  if (is_float(dtype)) {
    double count = std::ceil((v[1] - v[0]) / v[2]);
    if (!(count < 1e12)) TESSERA_SHAPE_ERROR("Range would have " << count << " elements");
    n = count > 0 ? static_cast<int64_t>(count) : 0;
  } else {
    int64_t s = c.constants[0]->get_int(0), l = c.constants[1]->get_int(0), d = c.constants[2]->get_int(0);
    int64_t span = l - s;
    n = span / d + ((span % d != 0 && (span > 0) == (d > 0)) ? 1 : 0);  // ceil division
    n = std::max<int64_t>(n, 0);
  }
  if (n > kMaxTensorBytes / static_cast<int64_t>(dtype_size(dtype)))
    TESSERA_THROW(ErrorKind::kResource, "Range would have " << n << " elements");
  return ops::one(dtype, {n});
}

template <class T>
void eval_range(const EvalArgs<T>& a) {
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (out.is_num()) out.num[i] = a.inputs[0]->num[0] + num_from_int<T>(i) * a.inputs[2]->num[0];
    else out.ints[i] = a.inputs[0]->ints[0] + i * a.inputs[2]->ints[0];
  }
}

// Dim maps (the movement ops copy: each output element is one input element).
DimMap same_data_dim_map(const DimMapContext& c) { return dims::reshape(c.in[0], c.out[0]); }

void localize_reshape(const DimMapContext&, Attrs& attrs, const std::vector<Shape>&,
                      const std::vector<Shape>& local_out) {
  attrs.set("shape", local_out[0]);
}

DimMap transpose_dim_map(const DimMapContext& c) {
  DimMap m;
  m.copies = true;
  Piece p;
  Read r{0, {}, false};
  for (int64_t s : c.in[0]) r.dims.push_back(dims::factor(dims::add_factor(m, s)));
  for (int64_t axis : c.node.attrs.ints("perm")) p.dims.push_back(r.dims[static_cast<size_t>(axis)]);
  p.reads.push_back(std::move(r));
  m.outputs.push_back({std::move(p)});
  return m;
}

// Shared factors for the dims other than `axis`, one factor per piece on it.
std::vector<int> shared_factors(DimMap& m, const Shape& shape, size_t axis) {
  std::vector<int> f(shape.size(), -1);
  for (size_t d = 0; d < shape.size(); ++d)
    if (d != axis) f[d] = dims::add_factor(m, shape[d]);
  return f;
}

// Piece i: out[.., off_i + f_i, ..] = x_i[.., f_i, ..].
DimMap concat_dim_map(const DimMapContext& c) {
  const Shape& out = c.out[0];
  auto axis = static_cast<size_t>(normalize_axis(c.node.attrs.i("axis"), static_cast<int64_t>(out.size())));
  DimMap m;
  m.copies = true;
  std::vector<int> f = shared_factors(m, out, axis);
  std::vector<Piece> pieces;
  int64_t off = 0;
  for (size_t i = 0; i < c.in.size(); ++i) {
    std::vector<int> fi = f;
    fi[axis] = dims::add_factor(m, c.in[i][axis]);
    Piece p;
    for (size_t d = 0; d < out.size(); ++d) p.dims.push_back(dims::merge(m, {fi[d]}, d == axis ? off : 0));
    Read r{static_cast<int>(i), {}, false};
    for (int x : fi) r.dims.push_back(dims::factor(x));
    p.reads.push_back(std::move(r));
    pieces.push_back(std::move(p));
    off += c.in[i][axis];
  }
  m.outputs.push_back(std::move(pieces));
  return m;
}

// Output k: out_k[.., f_k, ..] = x[.., off_k + f_k, ..].
DimMap split_dim_map(const DimMapContext& c) {
  const Shape& x = c.in[0];
  auto axis = static_cast<size_t>(normalize_axis(c.node.attrs.i("axis"), static_cast<int64_t>(x.size())));
  DimMap m;
  m.copies = true;
  std::vector<int> f = shared_factors(m, x, axis);
  int64_t off = 0;
  for (const Shape& out : c.out) {
    std::vector<int> fk = f;
    fk[axis] = dims::add_factor(m, out[axis]);
    Piece p;
    Read r{0, {}, false};
    for (size_t d = 0; d < x.size(); ++d) {
      p.dims.push_back(dims::factor(fk[d]));
      r.dims.push_back(dims::merge(m, {fk[d]}, d == axis ? off : 0));
    }
    p.reads.push_back(std::move(r));
    m.outputs.push_back({std::move(p)});
    off += out[axis];
  }
  return m;
}

// Shape, Size, Range: outputs that read no input element, each element a
// function of its position (Range's values, Shape's entries).
DimMap generated_dim_map(const DimMapContext& c) {
  DimMap m;
  Piece p;
  for (int64_t s : c.out[0]) p.dims.push_back(dims::positional({dims::add_factor(m, s)}));
  m.outputs.push_back({std::move(p)});
  return m;
}

// ConstantOfShape: one value everywhere, reading no element. (Its size is
// an input, not an attribute, so a rank cannot make its block alone: no
// localize hook, so no split.)
DimMap constant_of_shape_dim_map(const DimMapContext& c) {
  DimMap m;
  Piece p;
  for (int64_t s : c.out[0]) p.dims.push_back(dims::factor(dims::add_factor(m, s)));
  m.outputs.push_back({std::move(p)});
  return m;
}

Linearity linear_in_all(const Node& n) {
  return {n.inputs.size() >= 32 ? ~0u : (1u << n.inputs.size()) - 1, false};
}

}  // namespace

void register_movement_ops(std::vector<OpDef>& defs) {
  auto def = [&](OpKind k) -> OpDef& { return defs[static_cast<int>(k)]; };
  auto data_op = [&](OpKind k, InferFn infer, std::vector<AttrSpec> attrs) -> OpDef& {
    OpDef& d = def(k);
    d.attrs = std::move(attrs);
    d.infer = infer;
    d.linearity = linear_in_data;
    d.copies_inputs = 1u;  // the reshape family, Transpose and Split move their data's values
    return d;
  };
  for (OpKind k : {OpKind::kReshape, OpKind::kFlatten, OpKind::kSqueeze, OpKind::kUnsqueeze}) {
    def(k).dim_map = same_data_dim_map;
    def(k).is_view = true;
  }
  def(OpKind::kReshape).localize = localize_reshape;
  def(OpKind::kTranspose).dim_map = transpose_dim_map;
  def(OpKind::kConcat).dim_map = concat_dim_map;
  def(OpKind::kSplit).dim_map = split_dim_map;
  for (OpKind k : {OpKind::kShape, OpKind::kSize, OpKind::kRange}) def(k).dim_map = generated_dim_map;
  def(OpKind::kConstantOfShape).dim_map = constant_of_shape_dim_map;

  TESSERA_SET_KERNELS(data_op(OpKind::kReshape, infer_reshape, ReshapeAttrs::schema()),
                      eval_same_data);
  TESSERA_SET_KERNELS(data_op(OpKind::kFlatten, infer_flatten, FlattenAttrs::schema()),
                      eval_same_data);
  TESSERA_SET_KERNELS(data_op(OpKind::kSqueeze, infer_squeeze, SqueezeAttrs::schema()),
                      eval_same_data);
  TESSERA_SET_KERNELS(data_op(OpKind::kUnsqueeze, infer_unsqueeze, SqueezeAttrs::schema()),
                      eval_same_data);
  TESSERA_SET_KERNELS(data_op(OpKind::kTranspose, infer_transpose, TransposeAttrs::schema()),
                      eval_transpose);

  OpDef& concat = data_op(OpKind::kConcat, infer_concat, ConcatAttrs::schema());
  concat.max_inputs = -1;
  concat.linearity = linear_in_all;
  concat.copies_inputs = ~0u;
  TESSERA_SET_KERNELS(concat, eval_concat);

  OpDef& split = data_op(OpKind::kSplit, infer_split, SplitAttrs::schema());
  split.max_outputs = -1;
  TESSERA_SET_KERNELS(split, eval_split);

  OpDef& shape = def(OpKind::kShape);
  shape.attrs = ShapeAttrs::schema();
  shape.infer = infer_shape;
  TESSERA_SET_KERNELS(shape, eval_shape);

  OpDef& size = def(OpKind::kSize);
  size.infer = infer_size;
  TESSERA_SET_KERNELS(size, eval_size);

  OpDef& cos = def(OpKind::kConstantOfShape);
  cos.attrs = ConstantOfShapeAttrs::schema();
  cos.infer = infer_constant_of_shape;
  TESSERA_SET_KERNELS(cos, eval_constant_of_shape);

  OpDef& range = def(OpKind::kRange);
  range.min_inputs = range.max_inputs = 3;
  range.infer = infer_range;
  TESSERA_SET_KERNELS(range, eval_range);

  register_movement_index_ops(defs);
  register_scatter_ops(defs);
  register_resize_ops(defs);
}

}  // namespace tessera
