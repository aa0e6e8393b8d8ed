// Elementwise unary ops, Clip and Cast. The binary and ternary ops are in
// elementwise_binary.cc.
//
// Over Z_p, ops that are polynomials (Identity, Neg) or rational (Reciprocal)
// are computed exactly; every other op is an uninterpreted function of its
// argument and attributes (see number.h), so the same op on the same value
// gives the same result on both sides of a comparison.
#include <cmath>
#include <cstring>

#include "graph/attr_views.h"
#include "graph/number.h"
#include "graph/ops/int_arith.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"

namespace tessera {
namespace {

// Which input dtypes an op accepts (ONNX's type constraints, restricted to
// the dtypes Tessera has).
enum class Accepts { kAny, kFloat, kNumeric, kBool };

// arith: OpDef::arithmetic, per element (ops, transcendentals). As the CPU
// runtime computes them: Sigmoid 1/(1+exp(-x)), Softplus log(1+exp(x)) and
// Elu's exp(x)-1 branch one transcendental and two operations; Gelu's erf
// form x*0.5*(1+erf(x/sqrt2)) one and four (its tanh form, a cubic inside
// the tanh, is priced alike); Sqrt and Reciprocal a divide's 4 slots; the
// hard forms and LeakyRelu a multiply-add and a clamp or select; Cast one
// conversion.
struct UnaryRow {
  OpKind kind;
  Accepts accepts;
  Arithmetic arith = {1, 0};
  const std::vector<AttrSpec>& (*attrs)() = nullptr;  // attr_views.def
};

const std::vector<UnaryRow>& unary_rows() {
  static const std::vector<UnaryRow> rows = {
      {OpKind::kIdentity, Accepts::kAny, {0, 0}},
      {OpKind::kRelu, Accepts::kNumeric},
      {OpKind::kLeakyRelu, Accepts::kFloat, {2, 0}, &LeakyReluAttrs::schema},
      {OpKind::kElu, Accepts::kFloat, {2, 1}, &EluAttrs::schema},
      {OpKind::kSigmoid, Accepts::kFloat, {2, 1}},
      {OpKind::kHardSigmoid, Accepts::kFloat, {2, 0}, &HardSigmoidAttrs::schema},
      {OpKind::kHardSwish, Accepts::kFloat, {2, 0}},
      {OpKind::kSoftplus, Accepts::kFloat, {2, 1}},
      {OpKind::kTanh, Accepts::kFloat, {0, 1}},
      {OpKind::kErf, Accepts::kFloat, {0, 1}},
      {OpKind::kGelu, Accepts::kFloat, {4, 1}, &GeluAttrs::schema},
      {OpKind::kSqrt, Accepts::kFloat, {4, 0}},
      {OpKind::kReciprocal, Accepts::kFloat, {4, 0}},
      {OpKind::kNeg, Accepts::kNumeric},
      {OpKind::kAbs, Accepts::kNumeric},
      {OpKind::kExp, Accepts::kFloat, {0, 1}},
      {OpKind::kLog, Accepts::kFloat, {0, 1}},
      {OpKind::kSin, Accepts::kFloat, {0, 1}},
      {OpKind::kCos, Accepts::kFloat, {0, 1}},
      {OpKind::kFloor, Accepts::kFloat},
      {OpKind::kCeil, Accepts::kFloat},
      {OpKind::kRound, Accepts::kFloat},
      {OpKind::kSign, Accepts::kNumeric},
      {OpKind::kNot, Accepts::kBool},
      {OpKind::kIsNaN, Accepts::kFloat},
      {OpKind::kIsInf, Accepts::kFloat, {1, 0}, &IsInfAttrs::schema},
      {OpKind::kClip, Accepts::kNumeric, {2, 0}, &ClipAttrs::schema},
      {OpKind::kCast, Accepts::kAny, {1, 0}, &CastAttrs::schema},
  };
  return rows;
}

const UnaryRow& row_of(OpKind kind) {
  for (const UnaryRow& r : unary_rows())
    if (r.kind == kind) return r;
  TESSERA_CHECK(false, "no unary row for " << op_name(kind));
  return unary_rows()[0];
}

void check_accepts(Accepts accepts, DType t) {
  switch (accepts) {
    case Accepts::kAny: return;
    case Accepts::kFloat:
      if (!is_float(t)) TESSERA_SHAPE_ERROR("input must have a floating-point dtype, got " << dtype_name(t));
      return;
    case Accepts::kNumeric:
      if (t == DType::kBool) TESSERA_SHAPE_ERROR("input must be numeric, got bool");
      return;
    case Accepts::kBool:
      if (t != DType::kBool) TESSERA_SHAPE_ERROR("input must be bool, got " << dtype_name(t));
      return;
  }
}

DType cast_target(const Node& node) {
  const std::string& to = node.attrs.s("to");
  for (DType t : kAllDTypes)
    if (to == dtype_name(t)) return t;
  TESSERA_SHAPE_ERROR("attribute 'to' names an unknown dtype '" << to << "'");
}

std::vector<TensorType> infer_unary(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  OpKind kind = c.node.kind;
  check_accepts(row_of(kind).accepts, x.dtype);
  if (kind == OpKind::kGelu) {
    const std::string& approx = c.node.attrs.s("approximate");
    if (approx != "none" && approx != "tanh")
      TESSERA_SHAPE_ERROR("attribute 'approximate' must be \"none\" or \"tanh\", got \"" << approx << "\"");
  }
  if (kind == OpKind::kIsNaN || kind == OpKind::kIsInf) return ops::one(DType::kBool, x.shape);
  if (kind == OpKind::kCast) return ops::one(cast_target(c.node), x.shape);
  if (kind == OpKind::kClip && (std::isnan(c.node.attrs.f("min")) || std::isnan(c.node.attrs.f("max"))))
    TESSERA_SHAPE_ERROR("attributes 'min' and 'max' must not be NaN");
  return {x};
}

// Attributes read once per kernel call, not per element.
struct UnaryParams {
  OpKind kind;
  double alpha = 0, beta = 0;
  MathFn gelu_fn = MathFn::kGeluErf;
  bool detect_negative = true, detect_positive = true;
  uint64_t salt = 0;  // distinguishes attribute values for uninterpreted functions
};

uint64_t bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}

UnaryParams params_of(const Node& node) {
  UnaryParams p{node.kind};
  const Attrs& at = node.attrs;
  switch (node.kind) {
    case OpKind::kLeakyRelu:
    case OpKind::kElu: p.alpha = at.f("alpha"); break;
    case OpKind::kHardSigmoid: p.alpha = at.f("alpha"); p.beta = at.f("beta"); break;
    case OpKind::kClip: p.alpha = at.f("min"); p.beta = at.f("max"); break;
    case OpKind::kGelu: p.gelu_fn = gelu_tanh_form(GeluAttrs::of(node)) ? MathFn::kGeluTanh : MathFn::kGeluErf; break;
    case OpKind::kIsInf:
      p.detect_negative = at.i("detect_negative") != 0;
      p.detect_positive = at.i("detect_positive") != 0;
      break;
    default: break;
  }
  p.salt = bits_of(p.alpha) * 0x9e3779b97f4a7c15ull ^ bits_of(p.beta) ^
           (p.detect_negative ? 2u : 0u) ^ (p.detect_positive ? 1u : 0u);
  return p;
}

// Ops without a MathFn of their own, over Z_p: one uninterpreted function per
// kind and attribute values (ids above number.h's MathFn range).
Zp opaque(const UnaryParams& p, Zp x) { return uninterpreted(0x1000 + static_cast<uint64_t>(p.kind), x, p.salt); }

template <class T>
T hard_sigmoid(T x, double alpha, double beta) {
  T y = static_cast<T>(alpha) * x + static_cast<T>(beta);
  return y < T(0) ? T(0) : y > T(1) ? T(1) : y;
}

template <class T>
T unary_num(const UnaryParams& p, T x) {
  switch (p.kind) {
    case OpKind::kIdentity: return x;
    case OpKind::kNeg: return -x;
    case OpKind::kReciprocal: return num_div(num_from_int<T>(1), x);
    case OpKind::kRelu: return math_fn(MathFn::kRelu, x);
    case OpKind::kSigmoid: return math_fn(MathFn::kSigmoid, x);
    case OpKind::kSoftplus: return math_fn(MathFn::kSoftplus, x);
    case OpKind::kTanh: return math_fn(MathFn::kTanh, x);
    case OpKind::kErf: return math_fn(MathFn::kErf, x);
    case OpKind::kGelu: return math_fn(p.gelu_fn, x);
    case OpKind::kSqrt: return math_fn(MathFn::kSqrt, x);
    case OpKind::kAbs: return math_fn(MathFn::kAbs, x);
    case OpKind::kExp: return math_fn(MathFn::kExp, x);
    case OpKind::kLog: return math_fn(MathFn::kLog, x);
    case OpKind::kSin: return math_fn(MathFn::kSin, x);
    case OpKind::kCos: return math_fn(MathFn::kCos, x);
    case OpKind::kFloor: return math_fn(MathFn::kFloor, x);
    case OpKind::kCeil: return math_fn(MathFn::kCeil, x);
    case OpKind::kRound: return math_fn(MathFn::kRound, x);
    case OpKind::kSign: return math_fn(MathFn::kSign, x);
    default: break;
  }
  if constexpr (kIsZp<T>) {
    return opaque(p, x);
  } else {
    switch (p.kind) {
      case OpKind::kLeakyRelu: return x >= T(0) ? x : static_cast<T>(p.alpha) * x;
      case OpKind::kElu: return x >= T(0) ? x : static_cast<T>(p.alpha) * std::expm1(x);
      case OpKind::kHardSigmoid: return hard_sigmoid(x, p.alpha, p.beta);
      case OpKind::kHardSwish: return x * hard_sigmoid(x, 1.0 / 6.0, 0.5);
      case OpKind::kClip: {
        // numpy's minimum(maximum(x, min), max): NaN passes through, and
        // min > max gives max, as ONNX specifies.
        T y = x < static_cast<T>(p.alpha) ? static_cast<T>(p.alpha) : x;
        return y > static_cast<T>(p.beta) ? static_cast<T>(p.beta) : y;
      }
      default: break;
    }
  }
  TESSERA_CHECK(false, op_name(p.kind) << " has no floating-point kernel");
  return x;
}

int64_t unary_int(const UnaryParams& p, int64_t x, DType dtype) {
  switch (p.kind) {
    case OpKind::kIdentity: return x;
    case OpKind::kRelu: return x > 0 ? x : 0;
    case OpKind::kNeg: return ops::wrap_int(dtype, ops::int_neg(x));
    case OpKind::kAbs: return ops::wrap_int(dtype, x < 0 ? ops::int_neg(x) : x);
    case OpKind::kSign: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case OpKind::kNot: return x == 0 ? 1 : 0;
    case OpKind::kClip: {
      // Compared as doubles so that the infinite defaults never clamp.
      double d = static_cast<double>(x);
      if (d < p.alpha) x = static_cast<int64_t>(std::ceil(p.alpha));
      if (static_cast<double>(x) > p.beta) x = static_cast<int64_t>(std::floor(p.beta));
      return x;
    }
    default: break;
  }
  TESSERA_CHECK(false, op_name(p.kind) << " has no integer kernel");
  return x;
}

template <class T>
void eval_unary(const EvalArgs<T>& a) {
  const RefTensor<T>& in = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  UnaryParams p = params_of(a.node);
  if (in.is_num()) {
    for (size_t i = 0; i < out.num.size(); ++i) out.num[i] = unary_num(p, in.num[i]);
  } else {
    for (size_t i = 0; i < out.ints.size(); ++i) out.ints[i] = unary_int(p, in.ints[i], out.type.dtype);
  }
}

// IsNaN and IsInf: float in, bool out. Over Z_p the answer is one bit of an
// uninterpreted function, so it is deterministic but carries no meaning.
template <class T>
bool classify(const UnaryParams& p, T x) {
  if constexpr (kIsZp<T>) {
    return (opaque(p, x).v & 1) != 0;
  } else {
    if (p.kind == OpKind::kIsNaN) return std::isnan(x);
    if (!std::isinf(x)) return false;
    return x > 0 ? p.detect_positive : p.detect_negative;
  }
}

template <class T>
void eval_classify(const EvalArgs<T>& a) {
  const RefTensor<T>& in = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  UnaryParams p = params_of(a.node);
  for (size_t i = 0; i < out.ints.size(); ++i) out.ints[i] = classify(p, in.num[i]) ? 1 : 0;
}

// Float to integer: truncation toward zero, then the target's wrap; NaN and
// out-of-range values (undefined in ONNX) become 0 or the wrapped value
// instead of undefined behaviour. Over Z_p the residue is read as a signed
// integer, which is exact for the integers Z_p embeds.
template <class T>
int64_t num_to_target_int(T x, DType to) {
  if (to == DType::kBool) return num_is_zero(x) ? 0 : 1;
  if constexpr (kIsZp<T>) {
    return ops::wrap_int(to, num_to_int(x));
  } else {
    double d = std::trunc(static_cast<double>(x));
    if (!(d > -9.2e18 && d < 9.2e18)) return 0;
    return ops::wrap_int(to, static_cast<int64_t>(d));
  }
}

template <class T>
void eval_cast(const EvalArgs<T>& a) {
  const RefTensor<T>& in = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  ops::alloc(out);
  DType to = out.type.dtype;
  int64_t n = out.numel();
  // Narrowing float-to-float casts are rounded by the interpreter after the
  // kernel (round_to_dtype), so number-to-number is a copy.
  if (in.is_num() && out.is_num()) out.num = in.num;
  else if (in.is_num())
    for (int64_t i = 0; i < n; ++i) out.ints[i] = num_to_target_int(in.num[i], to);
  else if (out.is_num())
    for (int64_t i = 0; i < n; ++i) out.num[i] = num_from_int<T>(in.ints[i]);
  else
    for (int64_t i = 0; i < n; ++i) out.ints[i] = ops::wrap_int(to, in.ints[i]);
}

Linearity linear_in_x(const Node&) { return {1u, false}; }
// A cast into an integer dtype keeps integer values (an index stays an index).
bool casts_to_integer(const Graph& g, const Node& n) {
  DType t = g.type(n.outputs[0]).dtype;
  return is_integer(t) && t != DType::kBool;
}
Linearity cast_linearity(const Node& n) {
  // Between floating dtypes a cast is the identity over Z_p; into an integer
  // dtype it truncates.
  for (DType t : kAllDTypes)
    if (n.attrs.s("to") == dtype_name(t) && is_float(t)) return {1u, false};
  return {};
}

}  // namespace

void register_elementwise_binary_ops(std::vector<OpDef>& defs);

void register_elementwise_ops(std::vector<OpDef>& defs) {
  for (const UnaryRow& row : unary_rows()) {
    OpDef& d = defs[static_cast<int>(row.kind)];
    d.min_inputs = d.max_inputs = 1;
    if (row.attrs) d.attrs = row.attrs();
    d.arithmetic = row.arith;
    d.infer = infer_unary;
    d.dim_map = dims::elementwise;
    if (row.kind == OpKind::kIsNaN || row.kind == OpKind::kIsInf) {
      TESSERA_SET_KERNELS(d, eval_classify);
    } else if (row.kind == OpKind::kCast) {
      TESSERA_SET_KERNELS(d, eval_cast);
      d.linearity = cast_linearity;
      d.copies_inputs = 1u;
      d.copies_if = casts_to_integer;
    } else {
      TESSERA_SET_KERNELS(d, eval_unary);
    }
    if (row.kind == OpKind::kIdentity || row.kind == OpKind::kNeg) d.linearity = linear_in_x;
    d.is_view = row.kind == OpKind::kIdentity;
    if (row.kind == OpKind::kIdentity) d.copies_inputs = 1u;
    d.orders_values = row.kind == OpKind::kClip;
  }
  register_elementwise_binary_ops(defs);
}

}  // namespace tessera
