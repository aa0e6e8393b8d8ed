// Elementwise binary ops and Where, with numpy broadcasting. Both operands
// have the same dtype (Pow excepted: ONNX types its exponent separately).
// Arithmetic on integer dtypes wraps to the dtype's width; integer Div
// truncates toward zero and integer division by zero is an Error.
//
// Over Z_p, Add/Sub/Mul/Div are exact field operations; order comparisons
// (Less, Max, ...) compare residues and Pow/Mod are uninterpreted except for
// small integral exponents (number.h), so both sides of a check agree.
#include <cmath>

#include "graph/attr_views.h"
#include "graph/number.h"
#include "graph/ops/int_arith.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"

namespace tessera {
namespace {

bool is_compare(OpKind k) {
  return k == OpKind::kEqual || k == OpKind::kLess || k == OpKind::kLessOrEqual || k == OpKind::kGreater ||
         k == OpKind::kGreaterOrEqual;
}
bool is_logic(OpKind k) { return k == OpKind::kAnd || k == OpKind::kOr || k == OpKind::kXor; }

std::vector<TensorType> infer_binary(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  const TensorType& y = c.inputs[1];
  OpKind kind = c.node.kind;
  Shape shape = ops::broadcast_shapes(x.shape, y.shape);
  if (kind != OpKind::kPow && x.dtype != y.dtype)
    TESSERA_SHAPE_ERROR("inputs have different dtypes " << dtype_name(x.dtype) << " and " << dtype_name(y.dtype));
  if (is_logic(kind)) {
    if (x.dtype != DType::kBool) TESSERA_SHAPE_ERROR("inputs must be bool, got " << dtype_name(x.dtype));
    return ops::one(DType::kBool, shape);
  }
  if (is_compare(kind)) return ops::one(DType::kBool, shape);
  if (x.dtype == DType::kBool || y.dtype == DType::kBool)
    TESSERA_SHAPE_ERROR("inputs must be numeric, got bool");
  return ops::one(x.dtype, shape);
}

std::vector<TensorType> infer_where(const InferContext& c) {
  const TensorType& cond = c.inputs[0];
  const TensorType& x = c.inputs[1];
  const TensorType& y = c.inputs[2];
  if (cond.dtype != DType::kBool) TESSERA_SHAPE_ERROR("condition must be bool, got " << dtype_name(cond.dtype));
  if (x.dtype != y.dtype)
    TESSERA_SHAPE_ERROR("inputs have different dtypes " << dtype_name(x.dtype) << " and " << dtype_name(y.dtype));
  return ops::one(x.dtype, ops::broadcast_shapes(cond.shape, ops::broadcast_shapes(x.shape, y.shape)));
}

template <class T>
bool num_isnan(T x) {
  if constexpr (kIsZp<T>) return false;
  else return std::isnan(x);
}

template <class T>
T binary_num(OpKind kind, bool fmod, T x, T y) {
  switch (kind) {
    case OpKind::kAdd: return x + y;
    case OpKind::kSub: return x - y;
    case OpKind::kMul: return x * y;
    case OpKind::kDiv: return num_div(x, y);
    case OpKind::kPow: return num_pow(x, y);
    // NaN propagates through Max and Min, as numpy.maximum/minimum.
    case OpKind::kMax: return num_isnan(x) ? x : num_isnan(y) ? y : num_less(x, y) ? y : x;
    case OpKind::kMin: return num_isnan(x) ? x : num_isnan(y) ? y : num_less(y, x) ? y : x;
    case OpKind::kMod: return fmod ? num_fmod(x, y) : num_floor_mod(x, y);
    default: break;
  }
  TESSERA_CHECK(false, op_name(kind) << " is not a numeric binary op");
  return x;
}

// Comparisons written with num_less and == only, so NaN compares false and
// Z_p compares residues.
template <class V>
bool compare(OpKind kind, V x, V y) {
  auto lt = [](V a, V b) {
    if constexpr (std::is_same_v<V, int64_t>) return a < b;
    else return num_less(a, b);
  };
  switch (kind) {
    case OpKind::kEqual: return x == y;
    case OpKind::kLess: return lt(x, y);
    case OpKind::kLessOrEqual: return lt(x, y) || x == y;
    case OpKind::kGreater: return lt(y, x);
    case OpKind::kGreaterOrEqual: return lt(y, x) || x == y;
    default: break;
  }
  TESSERA_CHECK(false, op_name(kind) << " is not a comparison");
  return false;
}

int64_t int_pow(int64_t base, int64_t e) {
  if (e < 0) {
    // Truncation of 1 / base^|e|: nonzero only for base 1 and -1.
    if (base == 0) TESSERA_THROW(ErrorKind::kInvalidGraph, "integer 0 raised to a negative power");
    if (base == 1) return 1;
    if (base == -1) return (e % 2 == 0) ? 1 : -1;
    return 0;
  }
  int64_t r = 1;
  for (; e > 0; e >>= 1, base = ops::int_mul(base, base))
    if (e & 1) r = ops::int_mul(r, base);
  return r;
}

int64_t binary_int(OpKind kind, bool fmod, int64_t x, int64_t y, DType dtype) {
  switch (kind) {
    case OpKind::kAdd: return ops::wrap_int(dtype, ops::int_add(x, y));
    case OpKind::kSub: return ops::wrap_int(dtype, ops::int_sub(x, y));
    case OpKind::kMul: return ops::wrap_int(dtype, ops::int_mul(x, y));
    case OpKind::kDiv: return ops::wrap_int(dtype, ops::int_div(x, y));
    case OpKind::kMod: return ops::wrap_int(dtype, ops::int_mod(x, y, fmod));
    case OpKind::kPow: return ops::wrap_int(dtype, int_pow(x, y));
    case OpKind::kMax: return x < y ? y : x;
    case OpKind::kMin: return y < x ? y : x;
    case OpKind::kAnd: return (x != 0 && y != 0) ? 1 : 0;
    case OpKind::kOr: return (x != 0 || y != 0) ? 1 : 0;
    case OpKind::kXor: return ((x != 0) != (y != 0)) ? 1 : 0;
    default: break;
  }
  if (is_compare(kind)) return compare(kind, x, y) ? 1 : 0;
  TESSERA_CHECK(false, op_name(kind) << " has no integer kernel");
  return 0;
}

template <class T>
void eval_binary(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  const RefTensor<T>& y = *a.inputs[1];
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  OpKind kind = a.node.kind;
  bool fmod = kind == OpKind::kMod && a.node.attrs.i("fmod") != 0;
  int64_t n = out.numel();
  if (x.is_num() && out.is_num() && x.numel() == n && y.numel() == 1) {
    const T b = y.num[0];  // a tensor by a scalar (GPT-2's Mul by 0.5, Pow by 3)
    for (int64_t i = 0; i < n; ++i) out.num[i] = binary_num(kind, fmod, x.num[i], b);
    return;
  }
  std::vector<int64_t> mx = ops::broadcast_index_map(x.type.shape, out.type.shape);
  std::vector<int64_t> my = ops::broadcast_index_map(y.type.shape, out.type.shape);
  if (x.is_num() && out.is_num())
    for (int64_t i = 0; i < n; ++i) out.num[i] = binary_num(kind, fmod, x.num[mx[i]], y.num[my[i]]);
  else if (x.is_num())
    for (int64_t i = 0; i < n; ++i) out.ints[i] = compare(kind, x.num[mx[i]], y.num[my[i]]) ? 1 : 0;
  else
    for (int64_t i = 0; i < n; ++i) out.ints[i] = binary_int(kind, fmod, x.ints[mx[i]], y.ints[my[i]], out.type.dtype);
}

// Pow's base and exponent may have different dtypes (ONNX T and T1).
template <class T>
void eval_pow(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  const RefTensor<T>& y = *a.inputs[1];
  if (x.is_num() == y.is_num()) return eval_binary(a);
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  std::vector<int64_t> mx = ops::broadcast_index_map(x.type.shape, out.type.shape);
  std::vector<int64_t> my = ops::broadcast_index_map(y.type.shape, out.type.shape);
  int64_t n = out.numel();
  if (x.is_num()) {
    for (int64_t i = 0; i < n; ++i) out.num[i] = num_pow(x.num[mx[i]], num_from_int<T>(y.ints[my[i]]));
  } else {
    // Integer base, float exponent: computed in double and truncated, as
    // ONNX Runtime does.
    for (int64_t i = 0; i < n; ++i) {
      double r = std::trunc(std::pow(static_cast<double>(x.ints[mx[i]]), num_to_double(y.num[my[i]])));
      out.ints[i] = (r > -9.2e18 && r < 9.2e18) ? ops::wrap_int(out.type.dtype, static_cast<int64_t>(r)) : 0;
    }
  }
}

template <class T>
void eval_where(const EvalArgs<T>& a) {
  const RefTensor<T>& cond = *a.inputs[0];
  const RefTensor<T>& x = *a.inputs[1];
  const RefTensor<T>& y = *a.inputs[2];
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  std::vector<int64_t> mc = ops::broadcast_index_map(cond.type.shape, out.type.shape);
  std::vector<int64_t> mx = ops::broadcast_index_map(x.type.shape, out.type.shape);
  std::vector<int64_t> my = ops::broadcast_index_map(y.type.shape, out.type.shape);
  int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    bool c = cond.ints[mc[i]] != 0;
    if (out.is_num()) out.num[i] = c ? x.num[mx[i]] : y.num[my[i]];
    else out.ints[i] = c ? x.ints[mx[i]] : y.ints[my[i]];
  }
}

Linearity add_sub_linearity(const Node&) { return {0b11u, false}; }
Linearity mul_linearity(const Node&) { return {0b11u, true}; }
Linearity div_linearity(const Node&) { return {0b01u, true}; }
// With the condition fixed, Where picks between x and y elementwise.
Linearity where_linearity(const Node&) { return {0b110u, false}; }

// Arithmetic per element of Pow by a constant scalar exponent, as the CPU
// runtime computes it (native_kernels.cc PowScalarKernel, oneDNN's square
// and sqrt): small integer exponents by multiplication, negative ones by a
// division more, 0.5 by a square root; any other exponent calls powf (a log
// and an exp). llama's RMSNorm x^2 on [1, 128, 256]: priced 21.3 us as
// powf, measured 3.7 us in the model at one thread.
Arithmetic pow_arithmetic(const Graph& g, const Node& n) {
  const Arithmetic powf{0, 2};
  if (n.inputs.size() < 2 || n.inputs[1] == kNoValue) return powf;
  const Value& e = g.value(n.inputs[1]);
  if (!e.is_constant() || e.constant->numel() != 1) return powf;
  double p = e.constant->get_double(0);
  if (p == 1 || p == 2) return {1, 0};
  if (p == 3 || p == 4) return {2, 0};  // x*x*x, (x*x)*(x*x)
  if (p == -1 || p == 0.5) return {4, 0};  // as Reciprocal, Sqrt
  if (p == -2) return {5, 0};
  return powf;
}

}  // namespace

// Called by register_elementwise_ops (elementwise.cc): one family, two files.
void register_elementwise_binary_ops(std::vector<OpDef>& defs) {
  const OpKind kinds[] = {OpKind::kAdd,   OpKind::kSub,        OpKind::kMul,     OpKind::kDiv,
                          OpKind::kPow,   OpKind::kMax,        OpKind::kMin,     OpKind::kMod,
                          OpKind::kEqual, OpKind::kLess,       OpKind::kLessOrEqual,
                          OpKind::kGreater, OpKind::kGreaterOrEqual, OpKind::kAnd, OpKind::kOr,
                          OpKind::kXor};
  for (OpKind k : kinds) {
    OpDef& d = defs[static_cast<int>(k)];
    d.min_inputs = d.max_inputs = 2;
    d.infer = infer_binary;
    d.dim_map = dims::elementwise;
    if (k == OpKind::kPow) TESSERA_SET_KERNELS(d, eval_pow);
    else TESSERA_SET_KERNELS(d, eval_binary);
  }
  defs[static_cast<int>(OpKind::kMod)].attrs = ModAttrs::schema();
  for (OpKind k : {OpKind::kMax, OpKind::kMin, OpKind::kLess, OpKind::kLessOrEqual, OpKind::kGreater,
                   OpKind::kGreaterOrEqual})
    defs[static_cast<int>(k)].orders_values = true;
  // A divide (and Mod's divide and truncation) takes 4 FMA slots: its
  // reciprocal throughput against an FMA's.
  defs[static_cast<int>(OpKind::kDiv)].arithmetic = {4, 0};
  defs[static_cast<int>(OpKind::kMod)].arithmetic = {4, 0};
  defs[static_cast<int>(OpKind::kPow)].arithmetic_of = pow_arithmetic;
  defs[static_cast<int>(OpKind::kAdd)].linearity = add_sub_linearity;
  defs[static_cast<int>(OpKind::kSub)].linearity = add_sub_linearity;
  defs[static_cast<int>(OpKind::kMul)].linearity = mul_linearity;
  defs[static_cast<int>(OpKind::kDiv)].linearity = div_linearity;

  OpDef& w = defs[static_cast<int>(OpKind::kWhere)];
  w.min_inputs = w.max_inputs = 3;
  w.infer = infer_where;
  w.dim_map = dims::elementwise;
  TESSERA_SET_KERNELS(w, eval_where);
  w.linearity = where_linearity;
}

}  // namespace tessera
