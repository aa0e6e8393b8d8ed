// Data movement, part 3: the scatters, which copy data and then write (or
// combine, by `reduction`) updates at positions that indices give:
//
//   ScatterND        out = data; then for each index tuple u of
//                    indices[..., :], out[indices[u]] (reduced with) updates[u]
//   ScatterElements  out = data; then for each position i of indices (and of
//                    updates, which has its shape), out[i with i[axis] =
//                    indices[i]] (reduced with) updates[i]
//
// ScatterElements is how torch exports index_copy_ and scatter_: the
// in-place KV cache of a static-cache decoder, written along its sequence
// axis at cache_position. Updates apply in row-major order of the updates
// (a repeated index with reduction none keeps the last, as ONNX's reference
// does); an index outside [-size, size) of its axis is an error.
#include <algorithm>
#include <cmath>

#include "graph/attr_views.h"
#include "graph/ops/movement_util.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"

namespace tessera {
namespace {

using ops::checked_index;
using ops::normalize_axis;
using ops::require_indices;

enum class ScatterReduction { kNone, kAdd, kMul, kMax, kMin };

ScatterReduction scatter_reduction(const Node& node) {
  const std::string& r = node.attrs.s("reduction");
  if (r == "none") return ScatterReduction::kNone;
  if (r == "add") return ScatterReduction::kAdd;
  if (r == "mul") return ScatterReduction::kMul;
  if (r == "max") return ScatterReduction::kMax;
  if (r == "min") return ScatterReduction::kMin;
  TESSERA_SHAPE_ERROR(op_name(node.kind) << " reduction '" << r << "' is not one of none, add, mul, max, min");
}

std::vector<TensorType> infer_scatter_nd(const InferContext& c) {
  const TensorType &data = c.inputs[0], &indices = c.inputs[1], &updates = c.inputs[2];
  require_indices(indices, "ScatterND");
  scatter_reduction(c.node);
  if (data.rank() == 0) TESSERA_SHAPE_ERROR("ScatterND data must have rank >= 1");
  if (indices.rank() == 0) TESSERA_SHAPE_ERROR("ScatterND indices must have rank >= 1");
  int64_t k = indices.shape.back();
  if (k > data.rank())
    TESSERA_SHAPE_ERROR("ScatterND indices " << shape_str(indices.shape) << " index " << k
                                             << " dims, more than the rank of data " << shape_str(data.shape));
  Shape want(indices.shape.begin(), indices.shape.end() - 1);
  want.insert(want.end(), data.shape.begin() + k, data.shape.end());
  if (updates.shape != want)
    TESSERA_SHAPE_ERROR("ScatterND updates " << shape_str(updates.shape) << " must have shape " << shape_str(want)
                                             << " (indices " << shape_str(indices.shape) << ", data "
                                             << shape_str(data.shape) << ")");
  if (updates.dtype != data.dtype)
    TESSERA_SHAPE_ERROR("ScatterND updates " << type_str(updates) << " must have the dtype of data " << type_str(data));
  return {data};
}

// ONNX: data, indices and updates have one rank; updates the shape of
// indices; indices no larger than data on the dims other than axis (the
// positions it does not cover keep data).
std::vector<TensorType> infer_scatter_elements(const InferContext& c) {
  const TensorType &data = c.inputs[0], &indices = c.inputs[1], &updates = c.inputs[2];
  require_indices(indices, "ScatterElements");
  scatter_reduction(c.node);
  if (data.rank() == 0) TESSERA_SHAPE_ERROR("ScatterElements data must have rank >= 1");
  if (indices.rank() != data.rank())
    TESSERA_SHAPE_ERROR("ScatterElements indices " << shape_str(indices.shape) << " must have the rank of data "
                                                   << shape_str(data.shape));
  int64_t axis = normalize_axis(c.node.attrs.i("axis"), data.rank());
  if (updates.shape != indices.shape)
    TESSERA_SHAPE_ERROR("ScatterElements updates " << shape_str(updates.shape) << " must have the shape of indices "
                                                   << shape_str(indices.shape));
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && indices.shape[d] > data.shape[d])
      TESSERA_SHAPE_ERROR("ScatterElements indices dim " << d << " (" << indices.shape[d] << ") exceeds data dim "
                                                         << data.shape[d]);
  if (updates.dtype != data.dtype)
    TESSERA_SHAPE_ERROR("ScatterElements updates " << type_str(updates) << " must have the dtype of data "
                                                   << type_str(data));
  return {data};
}

template <class T>
bool scatter_isnan(T x) {
  if constexpr (kIsZp<T>) return false;
  else return std::isnan(x);
}

// a (reduced with) b, as numpy's +, *, maximum, minimum (NaN wins).
template <class T>
T scatter_combine(ScatterReduction r, T a, T b) {
  switch (r) {
    case ScatterReduction::kNone: return b;
    case ScatterReduction::kAdd: return a + b;
    case ScatterReduction::kMul: return a * b;
    case ScatterReduction::kMax: return scatter_isnan(a) ? a : scatter_isnan(b) ? b : num_less(a, b) ? b : a;
    case ScatterReduction::kMin: return scatter_isnan(a) ? a : scatter_isnan(b) ? b : num_less(b, a) ? b : a;
  }
  return b;
}

// Integer storage wraps on overflow (two's complement) instead of being UB.
inline int64_t scatter_combine(ScatterReduction r, int64_t a, int64_t b) {
  auto wrap = [](uint64_t v) { return static_cast<int64_t>(v); };
  switch (r) {
    case ScatterReduction::kNone: return b;
    case ScatterReduction::kAdd: return wrap(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    case ScatterReduction::kMul: return wrap(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case ScatterReduction::kMax: return std::max(a, b);
    case ScatterReduction::kMin: return std::min(a, b);
  }
  return b;
}

// Applies the updates in index order, so that with reduction none a
// repeated index keeps its last update (as ONNX's reference does). Update u
// is the run of `slice` elements at updates[u * slice], written at
// out[offsets[u]].
template <class V>
void scatter_into(std::vector<V>& out, const std::vector<V>& updates, const std::vector<int64_t>& offsets,
                  int64_t slice, ScatterReduction r) {
  for (size_t u = 0; u < offsets.size(); ++u)
    for (int64_t i = 0; i < slice; ++i) {
      V& o = out[static_cast<size_t>(offsets[u] + i)];
      o = scatter_combine(r, o, updates[u * static_cast<size_t>(slice) + static_cast<size_t>(i)]);
    }
}

// out = data, then the updates scattered at `offsets`, in either storage.
template <class T>
void scatter_copy(const EvalArgs<T>& a, const std::vector<int64_t>& offsets, int64_t slice) {
  const RefTensor<T>& data = *a.inputs[0];
  const RefTensor<T>& updates = *a.inputs[2];
  RefTensor<T>& out = (*a.outputs)[0];
  ScatterReduction r = scatter_reduction(a.node);
  out.num = data.num;
  out.ints = data.ints;
  if (out.is_num()) scatter_into(out.num, updates.num, offsets, slice, r);
  else scatter_into(out.ints, updates.ints, offsets, slice, r);
}

template <class T>
void eval_scatter_nd(const EvalArgs<T>& a) {
  const Shape& shape = a.inputs[0]->type.shape;
  const RefTensor<T>& indices = *a.inputs[1];
  int64_t k = indices.type.shape.back();
  int64_t tuples = shape_numel(Shape(indices.type.shape.begin(), indices.type.shape.end() - 1));
  int64_t slice = shape_numel(Shape(shape.begin() + k, shape.end()));
  std::vector<int64_t> strides = shape_strides(shape), offsets(static_cast<size_t>(tuples), 0);
  for (int64_t u = 0; u < tuples; ++u)
    for (int64_t j = 0; j < k; ++j)
      offsets[u] += checked_index(indices.ints[static_cast<size_t>(u * k + j)], shape[j], j) * strides[j];
  scatter_copy(a, offsets, slice);
}

template <class T>
void eval_scatter_elements(const EvalArgs<T>& a) {
  const Shape& shape = a.inputs[0]->type.shape;
  const RefTensor<T>& indices = *a.inputs[1];
  int64_t axis = normalize_axis(a.node.attrs.i("axis"), static_cast<int64_t>(shape.size()));
  std::vector<int64_t> strides = shape_strides(shape), idx, offsets(static_cast<size_t>(indices.numel()));
  for (int64_t u = 0; u < indices.numel(); ++u) {
    ops::unravel(u, indices.type.shape, idx);
    idx[axis] = checked_index(indices.ints[static_cast<size_t>(u)], shape[axis], axis);
    offsets[u] = ops::ravel(idx, strides);
  }
  scatter_copy(a, offsets, 1);
}

// Replacing or adding updates is linear in data and updates together;
// products, maxima and minima are not.
Linearity scatter_linearity(const Node& n) {
  ScatterReduction r = scatter_reduction(n);
  return r == ScatterReduction::kNone || r == ScatterReduction::kAdd ? Linearity{0b101u, false} : Linearity{};
}

// out = data with updates[u.., s..] written (or combined) at data[indices[u..], s..]:
// the k dims that indices address are written at gathered positions; the
// slice dims s pass through; the update tuples u are contracted.
DimMap scatter_nd_dim_map(const DimMapContext& c) {
  const Shape &data = c.in[0], &idx = c.in[1];
  size_t k = static_cast<size_t>(idx.back()), tuples = idx.size() - 1;
  DimMap m;
  std::vector<int> f;
  for (int64_t s : data) f.push_back(dims::add_factor(m, s));
  std::vector<int> u;
  for (size_t d = 0; d < tuples; ++d) u.push_back(dims::add_factor(m, idx[d], FactorKind::kReduce));
  int fk = dims::add_factor(m, idx.back(), FactorKind::kReduce);
  Piece p;
  for (size_t d = 0; d < data.size(); ++d)
    p.dims.push_back(d < k ? dims::positional({f[d]}, DimForm::kGathered) : dims::factor(f[d]));
  std::vector<DimExpr> ud = dims::factors(u), id = dims::factors(u);
  for (size_t d = k; d < data.size(); ++d) ud.push_back(dims::factor(f[d]));
  id.push_back(dims::factor(fk));
  p.reads = {{0, dims::factors(f), false}, {1, id, false}, {2, ud, false}};
  m.outputs.push_back({std::move(p)});
  return m;
}

// out[i] = data[i], and updates[j] written (or combined) at out[j with
// j[axis] = indices[j]]: the axis is written at gathered positions and the
// updates' axis is contracted; every other dim passes through data, indices
// and updates alike (a KV cache [batch, heads, len, head_dim] written along
// len keeps a split of its heads). Where indices is shorter than data on
// such a dim, its read there is guarded: the positions past it keep data.
DimMap scatter_elements_dim_map(const DimMapContext& c) {
  const Shape &data = c.in[0], &idx = c.in[1];
  auto axis = static_cast<size_t>(normalize_axis(c.node.attrs.i("axis"), static_cast<int64_t>(data.size())));
  DimMap m;
  std::vector<int> f;
  for (int64_t s : data) f.push_back(dims::add_factor(m, s));
  int u = dims::add_factor(m, idx[axis], FactorKind::kReduce);
  Piece p;
  std::vector<DimExpr> at_updates;
  for (size_t d = 0; d < data.size(); ++d) {
    p.dims.push_back(d == axis ? dims::positional({f[d]}, DimForm::kGathered) : dims::factor(f[d]));
    if (d == axis) at_updates.push_back(dims::factor(u));
    else if (idx[d] == data[d]) at_updates.push_back(dims::factor(f[d]));
    else at_updates.push_back(dims::affine({{f[d], 1}}, 0, true));
  }
  p.reads = {{0, dims::factors(f), false}, {1, at_updates, false}, {2, at_updates, false}};
  m.outputs.push_back({std::move(p)});
  return m;
}

}  // namespace

namespace {
// Without a reduction a scatter's output holds data's and updates' values.
bool scatter_copies(const Graph&, const Node& n) {
  return (n.kind == OpKind::kScatterND ? ScatterNDAttrs::of(n).reduction : ScatterElementsAttrs::of(n).reduction) ==
         "none";
}
int64_t scatter_elements_axis(const Node& n) { return ScatterElementsAttrs::of(n).axis; }
}  // namespace

void register_scatter_ops(std::vector<OpDef>& defs) {
  auto def = [&](OpKind k, InferFn infer, std::vector<AttrSpec> attrs, DimMapFn dim_map) -> OpDef& {
    OpDef& d = defs[static_cast<int>(k)];
    d.attrs = std::move(attrs);
    d.infer = infer;
    d.min_inputs = d.max_inputs = 3;
    d.linearity = scatter_linearity;
    d.dim_map = dim_map;
    d.copies_inputs = 0b101u;  // data and updates
    d.copies_if = scatter_copies;
    return d;
  };
  TESSERA_SET_KERNELS(def(OpKind::kScatterND, infer_scatter_nd, ScatterNDAttrs::schema(), scatter_nd_dim_map), eval_scatter_nd);
  TESSERA_SET_KERNELS(def(OpKind::kScatterElements, infer_scatter_elements,
                          ScatterElementsAttrs::schema(), scatter_elements_dim_map),
                      eval_scatter_elements);
  defs[static_cast<int>(OpKind::kScatterElements)].indexed_axis = scatter_elements_axis;
}

}  // namespace tessera
