// Reductions and normalizations: Reduce* over a set of axes, ArgMax/ArgMin
// and CumSum along one axis, Softmax/LogSoftmax (opset-13 semantics: one
// axis), LayerNormalization and inference-form BatchNormalization.
//
// Over Z_p, sums, means (sum times the inverse of the count) and products are
// exact; Max/Min/ArgMax compare residues; sqrt, exp and log are
// uninterpreted (number.h). Softmax over Z_p therefore skips the max shift,
// which only matters for floating-point overflow: u(x_i) * inverse(sum u(x_j)).
#include <cmath>

#include "graph/attr_views.h"
#include "graph/number.h"
#include "graph/ops/int_arith.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"

namespace tessera {
namespace {

bool is_reduce(OpKind k) {
  return k == OpKind::kReduceSum || k == OpKind::kReduceMean || k == OpKind::kReduceMax ||
         k == OpKind::kReduceMin || k == OpKind::kReduceProd || k == OpKind::kReduceL2 ||
         k == OpKind::kReduceSumSquare;
}

void require_float(DType t, const char* what) {
  if (!is_float(t)) TESSERA_SHAPE_ERROR(what << " must have a floating-point dtype, got " << dtype_name(t));
}
void require_numeric(DType t) {
  if (t == DType::kBool) TESSERA_SHAPE_ERROR("input must be numeric, got bool");
}

// mask[d]: whether dimension d is reduced. Empty `axes` reduces all of them.
std::vector<bool> reduced_dims(const Node& node, int64_t rank) {
  const std::vector<int64_t>& axes = node.attrs.ints("axes");
  std::vector<bool> mask(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    int64_t d = ops::normalize_axis(a, rank);
    if (mask[d]) TESSERA_SHAPE_ERROR("axis " << a << " appears twice in 'axes'");
    mask[d] = true;
  }
  return mask;
}

std::vector<TensorType> infer_reduce(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  require_numeric(x.dtype);
  OpKind kind = c.node.kind;
  if (kind == OpKind::kReduceL2) require_float(x.dtype, "input");
  std::vector<bool> mask = reduced_dims(c.node, x.rank());
  bool keep = c.node.attrs.i("keepdims") != 0;
  Shape out;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (!mask[d]) out.push_back(x.shape[d]);
    else if (keep) out.push_back(1);
    if (mask[d] && x.shape[d] == 0 && (kind == OpKind::kReduceMax || kind == OpKind::kReduceMin))
      TESSERA_SHAPE_ERROR("cannot reduce over dimension " << d << " of " << type_str(x) << ": it is empty");
  }
  return ops::one(x.dtype, out);
}

// For each flat input index, the flat index of the output element it
// reduces into (the same with or without kept dims).
std::vector<int64_t> reduce_index_map(const Shape& in, const std::vector<bool>& mask) {
  Shape kept = in;
  for (size_t d = 0; d < in.size(); ++d)
    if (mask[d]) kept[d] = 1;
  std::vector<int64_t> strides = shape_strides(kept);
  int64_t n = shape_numel(in);
  std::vector<int64_t> map(static_cast<size_t>(n));
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n; ++i) {
    ops::unravel(i, in, idx);
    int64_t o = 0;
    for (size_t d = 0; d < in.size(); ++d)
      if (!mask[d]) o += idx[d] * strides[d];
    map[i] = o;
  }
  return map;
}

template <class T>
bool num_isnan(T x) {
  if constexpr (kIsZp<T>) return false;
  else return std::isnan(x);
}

template <class T>
void reduce_num(OpKind kind, const std::vector<T>& in, const std::vector<int64_t>& map, int64_t count,
                std::vector<T>& out) {
  bool prod = kind == OpKind::kReduceProd;
  std::fill(out.begin(), out.end(), num_from_int<T>(prod ? 1 : 0));
  std::vector<bool> seen(out.size(), false);
  for (size_t i = 0; i < in.size(); ++i) {
    T x = in[i];
    T& acc = out[map[i]];
    switch (kind) {
      case OpKind::kReduceSum:
      case OpKind::kReduceMean: acc = acc + x; break;
      case OpKind::kReduceSumSquare:
      case OpKind::kReduceL2: acc = acc + x * x; break;
      case OpKind::kReduceProd: acc = acc * x; break;
      case OpKind::kReduceMax:
      case OpKind::kReduceMin: {
        // NaN wins, as numpy's max/min.
        bool better = kind == OpKind::kReduceMax ? num_less(acc, x) : num_less(x, acc);
        if (!seen[map[i]] || (!num_isnan(acc) && (better || num_isnan(x)))) acc = x;
        seen[map[i]] = true;
        break;
      }
      default: TESSERA_CHECK(false, op_name(kind) << " is not a reduction");
    }
  }
  if (kind == OpKind::kReduceMean)
    for (T& v : out) v = num_div(v, num_from_int<T>(count));
  if (kind == OpKind::kReduceL2)
    for (T& v : out) v = math_fn(MathFn::kSqrt, v);
}

void reduce_int(OpKind kind, DType dtype, const std::vector<int64_t>& in, const std::vector<int64_t>& map,
                int64_t count, std::vector<int64_t>& out) {
  std::fill(out.begin(), out.end(), kind == OpKind::kReduceProd ? 1 : 0);
  std::vector<bool> seen(out.size(), false);
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t x = in[i];
    int64_t& acc = out[map[i]];
    switch (kind) {
      case OpKind::kReduceSum:
      case OpKind::kReduceMean: acc = ops::int_add(acc, x); break;
      case OpKind::kReduceSumSquare: acc = ops::int_add(acc, ops::int_mul(x, x)); break;
      case OpKind::kReduceProd: acc = ops::int_mul(acc, x); break;
      case OpKind::kReduceMax: acc = !seen[map[i]] || acc < x ? x : acc; seen[map[i]] = true; break;
      case OpKind::kReduceMin: acc = !seen[map[i]] || x < acc ? x : acc; seen[map[i]] = true; break;
      default: TESSERA_CHECK(false, op_name(kind) << " has no integer kernel");
    }
  }
  for (int64_t& v : out) {
    if (kind == OpKind::kReduceMean) v = count > 0 ? ops::int_div(v, count) : 0;
    v = ops::wrap_int(dtype, v);
  }
}

template <class T>
void eval_reduce(const EvalArgs<T>& a) {
  const RefTensor<T>& in = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  std::vector<bool> mask = reduced_dims(a.node, in.type.rank());
  int64_t count = 1;
  for (size_t d = 0; d < mask.size(); ++d)
    if (mask[d]) count *= in.type.shape[d];
  std::vector<int64_t> map = reduce_index_map(in.type.shape, mask);
  if (in.is_num()) reduce_num(a.node.kind, in.num, map, count, out.num);
  else reduce_int(a.node.kind, out.type.dtype, in.ints, map, count, out.ints);
}

// A tensor seen as [outer, len, inner] around one axis.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
  int64_t at(int64_t o, int64_t k, int64_t i) const { return (o * len + k) * inner + i; }
};

AxisView view_at(const Shape& s, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < axis) v.outer *= s[d];
    else if (d == axis) v.len = s[d];
    else v.inner *= s[d];
  }
  return v;
}

std::vector<TensorType> infer_arg(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  require_numeric(x.dtype);
  int64_t axis = ops::normalize_axis(c.node.attrs.i("axis"), x.rank());
  if (x.shape[axis] == 0) TESSERA_SHAPE_ERROR("cannot take " << op_name(c.node.kind) << " over empty axis " << axis);
  Shape out = x.shape;
  if (c.node.attrs.i("keepdims") != 0) out[axis] = 1;
  else out.erase(out.begin() + axis);
  return ops::one(DType::kI64, out);
}

template <class V>
void arg_along(const std::vector<V>& x, const AxisView& v, bool is_max, bool last, std::vector<int64_t>& out) {
  auto less = [](V a, V b) {
    if constexpr (std::is_same_v<V, int64_t>) return a < b;
    else return num_less(a, b);
  };
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < v.len; ++k) {
        V cur = x[v.at(o, k, i)], b = x[v.at(o, best, i)];
        bool better = is_max ? less(b, cur) : less(cur, b);
        if (better || (last && cur == b)) best = k;
      }
      out[o * v.inner + i] = best;
    }
}

template <class T>
void eval_arg(const EvalArgs<T>& a) {
  const RefTensor<T>& in = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  AxisView v = view_at(in.type.shape, ops::normalize_axis(a.node.attrs.i("axis"), in.type.rank()));
  bool is_max = a.node.kind == OpKind::kArgMax;
  bool last = a.node.attrs.i("select_last_index") != 0;
  if (in.is_num()) arg_along(in.num, v, is_max, last, out.ints);
  else arg_along(in.ints, v, is_max, last, out.ints);
}

std::vector<TensorType> infer_cumsum(const InferContext& c) {
  require_numeric(c.inputs[0].dtype);
  ops::normalize_axis(c.node.attrs.i("axis"), c.inputs[0].rank());
  return {c.inputs[0]};
}

template <class V, class Add>
void cumsum_along(const std::vector<V>& x, const AxisView& v, bool exclusive, bool reverse, V zero, Add add,
                  std::vector<V>& out) {
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      V acc = zero;
      for (int64_t step = 0; step < v.len; ++step) {
        int64_t k = reverse ? v.len - 1 - step : step;
        V x_k = x[v.at(o, k, i)];
        if (!exclusive) acc = add(acc, x_k);
        out[v.at(o, k, i)] = acc;
        if (exclusive) acc = add(acc, x_k);
      }
    }
}

template <class T>
void eval_cumsum(const EvalArgs<T>& a) {
  const RefTensor<T>& in = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  AxisView v = view_at(in.type.shape, ops::normalize_axis(a.node.attrs.i("axis"), in.type.rank()));
  bool exclusive = a.node.attrs.i("exclusive") != 0, reverse = a.node.attrs.i("reverse") != 0;
  if (in.is_num()) {
    cumsum_along(in.num, v, exclusive, reverse, num_from_int<T>(0), [](T p, T q) { return p + q; }, out.num);
  } else {
    DType dt = out.type.dtype;
    cumsum_along(in.ints, v, exclusive, reverse, int64_t{0},
                 [dt](int64_t p, int64_t q) { return ops::wrap_int(dt, ops::int_add(p, q)); }, out.ints);
  }
}

std::vector<TensorType> infer_softmax(const InferContext& c) {
  require_float(c.inputs[0].dtype, "input");
  ops::normalize_axis(c.node.attrs.i("axis"), c.inputs[0].rank());
  return {c.inputs[0]};
}

template <class T>
void eval_softmax(const EvalArgs<T>& a) {
  const RefTensor<T>& in = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  AxisView v = view_at(in.type.shape, ops::normalize_axis(a.node.attrs.i("axis"), in.type.rank()));
  if (v.len == 0) return;
  bool log = a.node.kind == OpKind::kLogSoftmax;
  std::vector<T> e(static_cast<size_t>(v.len));
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      // Floats: shift by the max so exp cannot overflow. Z_p: no shift (see top).
      T shift = num_from_int<T>(0);
      if constexpr (!kIsZp<T>) {
        shift = in.num[v.at(o, 0, i)];
        for (int64_t k = 1; k < v.len; ++k) shift = std::max(shift, in.num[v.at(o, k, i)]);
      }
      T sum = num_from_int<T>(0);
      for (int64_t k = 0; k < v.len; ++k) sum = sum + (e[k] = math_fn(MathFn::kExp, in.num[v.at(o, k, i)] - shift));
      T log_sum = log ? math_fn(MathFn::kLog, sum) : sum;
      T inv_sum = log ? sum : num_div(num_from_int<T>(1), sum);
      for (int64_t k = 0; k < v.len; ++k) {
        T& y = out.num[v.at(o, k, i)];
        y = log ? in.num[v.at(o, k, i)] - shift - log_sum : e[k] * inv_sum;
      }
    }
}

// ONNX TensorProto.DataType codes accepted for LayerNormalization's stash_type.
DType stash_dtype(int64_t code) {
  switch (code) {
    case 1: return DType::kF32;
    case 10: return DType::kF16;
    case 11: return DType::kF64;
    case 16: return DType::kBF16;
    default: TESSERA_SHAPE_ERROR("attribute 'stash_type' must be a floating-point ONNX type code (1, 10, 11 or 16), got "
                                 << code);
  }
}

// Checks that a parameter (Scale, B) broadcasts to `target` without growing it.
void check_param(const TensorType& p, const TensorType& x, const Shape& target, const char* name) {
  if (p.dtype != x.dtype) TESSERA_SHAPE_ERROR(name << " has dtype " << dtype_name(p.dtype) << ", X has " << dtype_name(x.dtype));
  bool fits = p.shape.size() <= target.size();
  for (size_t d = 0; fits && d < p.shape.size(); ++d) {
    int64_t have = p.shape[p.shape.size() - 1 - d], want = target[target.size() - 1 - d];
    fits = have == want || have == 1;
  }
  if (!fits)
    TESSERA_SHAPE_ERROR(name << " of shape " << shape_str(p.shape) << " does not broadcast to the normalized shape "
                             << shape_str(target));
}

std::vector<TensorType> infer_layer_norm(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  require_float(x.dtype, "X");
  int64_t axis = ops::normalize_axis(c.node.attrs.i("axis"), x.rank());
  Shape norm(x.shape.begin() + axis, x.shape.end());
  check_param(c.inputs[1], x, norm, "Scale");
  if (c.has_input(2)) check_param(c.inputs[2], x, norm, "B");
  DType u = stash_dtype(c.node.attrs.i("stash_type"));
  Shape stat = x.shape;
  for (int64_t d = axis; d < x.rank(); ++d) stat[d] = 1;
  // Always three outputs: Mean and InvStdDev are cheap, and a fixed count
  // keeps inference independent of how many outputs a model names.
  return {x, {u, stat}, {u, stat}};
}

template <class T>
void eval_layer_norm(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  const RefTensor<T>& scale = *a.inputs[1];
  const RefTensor<T>* bias = a.inputs.size() > 2 ? a.inputs[2] : nullptr;
  std::vector<RefTensor<T>>& outs = *a.outputs;
  for (RefTensor<T>& o : outs) ops::alloc(o);
  int64_t axis = ops::normalize_axis(a.node.attrs.i("axis"), x.type.rank());
  Shape norm(x.type.shape.begin() + axis, x.type.shape.end());
  int64_t inner = shape_numel(norm), outer = inner == 0 ? 0 : x.numel() / inner;
  std::vector<int64_t> ms = ops::broadcast_index_map(scale.type.shape, norm);
  std::vector<int64_t> mb = bias ? ops::broadcast_index_map(bias->type.shape, norm) : std::vector<int64_t>{};
  T n = num_from_int<T>(inner);
  T eps = num_from_double<T>(a.node.attrs.f("epsilon"));
  for (int64_t o = 0; o < outer; ++o) {
    const T* row = x.num.data() + o * inner;
    T sum = num_from_int<T>(0);
    for (int64_t k = 0; k < inner; ++k) sum = sum + row[k];
    T mean = num_div(sum, n);
    T sq = num_from_int<T>(0);
    for (int64_t k = 0; k < inner; ++k) sq = sq + (row[k] - mean) * (row[k] - mean);
    T inv_std = num_div(num_from_int<T>(1), math_fn(MathFn::kSqrt, num_div(sq, n) + eps));
    for (int64_t k = 0; k < inner; ++k) {
      T y = (row[k] - mean) * inv_std * scale.num[ms[k]];
      outs[0].num[o * inner + k] = bias ? y + bias->num[mb[k]] : y;
    }
    if (outs.size() > 1) outs[1].num[o] = mean;
    if (outs.size() > 2) outs[2].num[o] = inv_std;
  }
}

std::vector<TensorType> infer_batch_norm(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  require_float(x.dtype, "X");
  if (x.rank() < 2) TESSERA_SHAPE_ERROR("X must have rank 2 or more (N, C, ...), got " << type_str(x));
  const char* names[] = {"", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; ++i) {
    const TensorType& p = c.inputs[i];
    require_float(p.dtype, names[i]);
    if (p.shape != Shape{x.shape[1]})
      TESSERA_SHAPE_ERROR(names[i] << " must have shape " << x.shape[1] << " (the channels of X), got "
                                   << shape_str(p.shape));
  }
  return {x};
}

template <class T>
void eval_batch_norm(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  const std::vector<T>& scale = a.inputs[1]->num;
  const std::vector<T>& bias = a.inputs[2]->num;
  const std::vector<T>& mean = a.inputs[3]->num;
  const std::vector<T>& var = a.inputs[4]->num;
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  AxisView v = view_at(x.type.shape, 1);
  T eps = num_from_double<T>(a.node.attrs.f("epsilon"));
  for (int64_t ch = 0; ch < v.len; ++ch) {
    T inv_std = num_div(num_from_int<T>(1), math_fn(MathFn::kSqrt, var[ch] + eps));
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t i = 0; i < v.inner; ++i) {
        int64_t at = v.at(o, ch, i);
        out.num[at] = (x.num[at] - mean[ch]) * inv_std * scale[ch] + bias[ch];
      }
  }
}

// Dim maps. Reduce*: kept dims pass, reduced dims are contracted (a sum, a
// mean, or another reduction). Ops that read a row (Softmax, CumSum,
// LayerNorm's statistics) read x twice: at the element, and along the row
// through a second, contracted factor per row dim.
FactorKind reduce_kind(OpKind k) {
  switch (k) {
    case OpKind::kReduceSum: case OpKind::kReduceSumSquare: return FactorKind::kSum;
    case OpKind::kReduceMean: return FactorKind::kMean;
    default: return FactorKind::kReduce;
  }
}

DimMap reduce_dim_map(const DimMapContext& c) {
  const Shape& x = c.in[0];
  std::vector<bool> mask(x.size(), false);
  if (c.node.kind == OpKind::kArgMax || c.node.kind == OpKind::kArgMin)
    mask[ops::normalize_axis(c.node.attrs.i("axis"), static_cast<int64_t>(x.size()))] = true;
  else
    mask = reduced_dims(c.node, static_cast<int64_t>(x.size()));
  bool keep = c.node.attrs.i("keepdims") != 0;
  DimMap m;
  Piece p;
  Read r{0, {}, false};
  for (size_t d = 0; d < x.size(); ++d) {
    int f = dims::add_factor(m, x[d], mask[d] ? reduce_kind(c.node.kind) : FactorKind::kPass);
    r.dims.push_back(dims::factor(f));
    if (!mask[d]) p.dims.push_back(dims::factor(f));
    else if (keep) p.dims.push_back(dims::constant_zero());
  }
  p.reads.push_back(std::move(r));
  m.outputs.push_back({std::move(p)});
  return m;
}

// Rows: dims [from, rank) of x. Returns the identity read's factors; `row`
// gets the contracted factor of each row dim.
std::vector<int> row_factors(DimMap& m, const Shape& x, size_t from, std::vector<int>& row) {
  std::vector<int> f;
  for (int64_t s : x) f.push_back(dims::add_factor(m, s));
  row.assign(x.size(), -1);
  for (size_t d = from; d < x.size(); ++d) row[d] = dims::add_factor(m, x[d], FactorKind::kReduce);
  return f;
}

Read row_read(const std::vector<int>& f, const std::vector<int>& row) {
  Read r{0, {}, false};
  for (size_t d = 0; d < f.size(); ++d) r.dims.push_back(dims::factor(row[d] >= 0 ? row[d] : f[d]));
  return r;
}

// Softmax, LogSoftmax, CumSum: along one axis.
DimMap axis_row_dim_map(const DimMapContext& c) {
  const Shape& x = c.in[0];
  size_t axis = static_cast<size_t>(ops::normalize_axis(c.node.attrs.i("axis"), static_cast<int64_t>(x.size())));
  DimMap m;
  std::vector<int> row;
  std::vector<int> f = row_factors(m, x, axis, row);
  for (size_t d = axis + 1; d < x.size(); ++d) row[d] = -1;  // only the axis is a row
  Piece p{dims::factors(f), {Read{0, dims::factors(f), false}, row_read(f, row)}};
  m.outputs.push_back({std::move(p)});
  return m;
}

DimMap layer_norm_dim_map(const DimMapContext& c) {
  const Shape& x = c.in[0];
  size_t axis = static_cast<size_t>(ops::normalize_axis(c.node.attrs.i("axis"), static_cast<int64_t>(x.size())));
  DimMap m;
  std::vector<int> row;
  std::vector<int> f = row_factors(m, x, axis, row);
  Piece y{dims::factors(f), {Read{0, dims::factors(f), false}, row_read(f, row)}};
  for (size_t i = 1; i < 3; ++i)
    if (c.has_input(i)) y.reads.push_back({static_cast<int>(i), dims::broadcast(c.in[i], x, f), false});
  Piece stat{{}, {row_read(f, row)}};
  for (size_t d = 0; d < x.size(); ++d) stat.dims.push_back(d < axis ? dims::factor(f[d]) : dims::constant_zero());
  m.outputs = {{y}, {stat}, {stat}};
  return m;
}

DimMap batch_norm_dim_map(const DimMapContext& c) {
  const Shape& x = c.in[0];
  DimMap m;
  std::vector<int> f;
  for (int64_t s : x) f.push_back(dims::add_factor(m, s));
  Piece p{dims::factors(f), {Read{0, dims::factors(f), false}}};
  for (int i = 1; i < 5; ++i) p.reads.push_back({i, {dims::factor(f[1])}, false});
  m.outputs.push_back({std::move(p)});
  return m;
}

Linearity linear_in_x(const Node&) { return {1u, false}; }

}  // namespace

void register_reduce_ops(std::vector<OpDef>& defs) {
  auto def = [&](OpKind k) -> OpDef& { return defs[static_cast<int>(k)]; };

  for (int k = 0; k < kNumOpKinds; ++k) {
    if (!is_reduce(static_cast<OpKind>(k))) continue;
    OpDef& d = defs[k];
    d.attrs = ReduceAttrs::schema();
    d.infer = infer_reduce;
    d.dim_map = reduce_dim_map;
    TESSERA_SET_KERNELS(d, eval_reduce);
  }
  def(OpKind::kReduceSum).linearity = linear_in_x;
  for (OpKind k : {OpKind::kReduceMax, OpKind::kReduceMin, OpKind::kArgMax, OpKind::kArgMin})
    def(k).orders_values = true;
  // Arithmetic per element read: one operation by default (a reduction's
  // add or compare); two for a square and add, and for ArgMax/ArgMin's
  // compare and index select; Softmax 4 and an exp (max, subtract, exp,
  // sum, divide); LayerNorm 8 (mean, centre, square, sum, rsqrt, scale,
  // shift); BatchNorm folded into one multiply-add.
  for (int k = 0; k < kNumOpKinds; ++k)
    if (defs[k].family == OpFamily::kReduce) defs[k].input_arithmetic = {1, 0};
  for (OpKind k : {OpKind::kReduceL2, OpKind::kReduceSumSquare, OpKind::kArgMax, OpKind::kArgMin})
    def(k).input_arithmetic = {2, 0};
  def(OpKind::kSoftmax).input_arithmetic = {4, 1};
  def(OpKind::kLogSoftmax).input_arithmetic = {4, 1};
  def(OpKind::kLayerNormalization).input_arithmetic = {8, 0};
  def(OpKind::kBatchNormalization).input_arithmetic = {2, 0};
  def(OpKind::kReduceMean).linearity = linear_in_x;

  for (OpKind k : {OpKind::kArgMax, OpKind::kArgMin}) {
    OpDef& d = def(k);
    d.attrs = ArgReduceAttrs::schema();
    d.infer = infer_arg;
    d.dim_map = reduce_dim_map;
    TESSERA_SET_KERNELS(d, eval_arg);
  }

  OpDef& cs = def(OpKind::kCumSum);
  cs.attrs = CumSumAttrs::schema();
  cs.infer = infer_cumsum;
  cs.dim_map = axis_row_dim_map;
  TESSERA_SET_KERNELS(cs, eval_cumsum);
  cs.linearity = linear_in_x;

  for (OpKind k : {OpKind::kSoftmax, OpKind::kLogSoftmax}) {
    OpDef& d = def(k);
    d.attrs = SoftmaxAttrs::schema();
    d.infer = infer_softmax;
    d.dim_map = axis_row_dim_map;
    TESSERA_SET_KERNELS(d, eval_softmax);
  }

  OpDef& ln = def(OpKind::kLayerNormalization);
  ln.min_inputs = 2;
  ln.max_inputs = 3;
  ln.max_outputs = 3;
  ln.attrs = LayerNormAttrs::schema();
  ln.infer = infer_layer_norm;
  ln.dim_map = layer_norm_dim_map;
  TESSERA_SET_KERNELS(ln, eval_layer_norm);

  OpDef& bn = def(OpKind::kBatchNormalization);
  bn.min_inputs = bn.max_inputs = 5;
  bn.attrs = BatchNormAttrs::schema();
  bn.infer = infer_batch_norm;
  bn.dim_map = batch_norm_dim_map;
  TESSERA_SET_KERNELS(bn, eval_batch_norm);
}

}  // namespace tessera
