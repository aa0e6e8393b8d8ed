// Element-wise programs and strided copies (lowering.h).
#include <algorithm>

#include "graph/attr_views.h"
#include "graph/dim_map.h"
#include "graph/error.h"
#include "runtime/cuda/lowering.h"

namespace tessera::runtime::cuda {
namespace {

bool float_or_bool(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kBool; }

// Element strides of `in` read at the indices of `out` (numpy broadcasting,
// right-aligned); nullopt if `in` does not broadcast to `out`.
std::optional<std::vector<int64_t>> broadcast_strides(const Shape& in, const Shape& out) {
  if (in.size() > out.size()) return std::nullopt;
  std::vector<int64_t> st(out.size(), 0), own = shape_strides(in);
  size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == out[lead + d]) st[lead + d] = own[d];
    else if (in[d] != 1) return std::nullopt;
  }
  return st;
}

std::optional<EwCode> unary_code(const Node& n, float& alpha, float& beta) {
  switch (n.kind) {
    case OpKind::kIdentity: return EwCode::kCopy;
    case OpKind::kRelu: return EwCode::kRelu;
    case OpKind::kLeakyRelu: alpha = static_cast<float>(LeakyReluAttrs::of(n).alpha); return EwCode::kLeakyRelu;
    case OpKind::kElu: alpha = static_cast<float>(EluAttrs::of(n).alpha); return EwCode::kElu;
    case OpKind::kSigmoid: return EwCode::kSigmoid;
    case OpKind::kHardSigmoid: {
      const HardSigmoidAttrs a = HardSigmoidAttrs::of(n);
      alpha = static_cast<float>(a.alpha);
      beta = static_cast<float>(a.beta);
      return EwCode::kHardSigmoid;
    }
    case OpKind::kHardSwish: return EwCode::kHardSwish;
    case OpKind::kSoftplus: return EwCode::kSoftplus;
    case OpKind::kTanh: return EwCode::kTanh;
    case OpKind::kErf: return EwCode::kErf;
    case OpKind::kGelu: return gelu_tanh_form(GeluAttrs::of(n)) ? EwCode::kGeluTanh : EwCode::kGeluErf;
    case OpKind::kSqrt: return EwCode::kSqrt;
    case OpKind::kReciprocal: return EwCode::kReciprocal;
    case OpKind::kNeg: return EwCode::kNeg;
    case OpKind::kAbs: return EwCode::kAbs;
    case OpKind::kExp: return EwCode::kExp;
    case OpKind::kLog: return EwCode::kLog;
    case OpKind::kSin: return EwCode::kSin;
    case OpKind::kCos: return EwCode::kCos;
    case OpKind::kFloor: return EwCode::kFloor;
    case OpKind::kCeil: return EwCode::kCeil;
    case OpKind::kRound: return EwCode::kRound;
    case OpKind::kSign: return EwCode::kSign;
    case OpKind::kNot: return EwCode::kNot;
    case OpKind::kIsNaN: return EwCode::kIsNaN;
    case OpKind::kIsInf: {
      const IsInfAttrs a = IsInfAttrs::of(n);
      alpha = a.detect_negative != 0 ? 1.0f : 0.0f;
      beta = a.detect_positive != 0 ? 1.0f : 0.0f;
      return EwCode::kIsInf;
    }
    case OpKind::kClip: {
      const ClipAttrs a = ClipAttrs::of(n);
      alpha = static_cast<float>(a.min);
      beta = static_cast<float>(a.max);
      return EwCode::kClip;
    }
    default: return std::nullopt;
  }
}

std::optional<EwCode> binary_code(const Node& n) {
  switch (n.kind) {
    case OpKind::kAdd: return EwCode::kAdd;
    case OpKind::kSub: return EwCode::kSub;
    case OpKind::kMul: return EwCode::kMul;
    case OpKind::kDiv: return EwCode::kDiv;
    case OpKind::kPow: return EwCode::kPow;
    case OpKind::kMax: return EwCode::kMax;
    case OpKind::kMin: return EwCode::kMin;
    case OpKind::kMod: return ModAttrs::of(n).fmod != 0 ? EwCode::kFmod : EwCode::kMod;
    case OpKind::kEqual: return EwCode::kEqual;
    case OpKind::kLess: return EwCode::kLess;
    case OpKind::kLessOrEqual: return EwCode::kLessOrEqual;
    case OpKind::kGreater: return EwCode::kGreater;
    case OpKind::kGreaterOrEqual: return EwCode::kGreaterOrEqual;
    case OpKind::kAnd: return EwCode::kAnd;
    case OpKind::kOr: return EwCode::kOr;
    case OpKind::kXor: return EwCode::kXor;
    default: return std::nullopt;
  }
}

Shape channel_view(int64_t c, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 1);
  if (rank >= 2) s[1] = c;
  return s;
}

}  // namespace

std::optional<Elem> elem_of(DType dtype) {
  switch (dtype) {
    case DType::kF32: return Elem::kF32;
    case DType::kF16: return Elem::kF16;
    case DType::kBF16: return Elem::kBF16;
    case DType::kBool: return Elem::kBool;
    case DType::kI64: return Elem::kI64;
    case DType::kI32: return Elem::kI32;
    case DType::kI8: return Elem::kI8;
    case DType::kU8: return Elem::kU8;
    case DType::kF64: return std::nullopt;
  }
  return std::nullopt;
}

EwBuilder::EwBuilder(const Graph& g, const TensorType& out) : g_(g), out_(out) {
  if (out.rank() > kMaxRank || !elem_of(out.dtype)) ok_ = false;
}

int EwBuilder::input(ValueId v, const std::optional<Shape>& view) { return input(v, g_.type(v), view); }

int EwBuilder::input(ValueId v, const TensorType& t, const std::optional<Shape>& view) {
  Shape s = view ? *view : t.shape;
  for (size_t i = 0; i < seen_.size(); ++i)
    if (seen_[i].first == v && seen_[i].second == s) return seen_reg_[i];
  std::optional<Elem> e = elem_of(t.dtype);
  auto st = broadcast_strides(s, out_.shape);
  if (!ok_ || !e || !st || l_.program.num_inputs >= kEwMaxInputs) {
    ok_ = false;
    return 0;
  }
  int k = l_.program.num_inputs++;
  EwOperand& op = l_.program.in[k];
  op.elem = *e;
  op.contiguous = s == out_.shape;
  std::copy(st->begin(), st->end(), op.strides);
  l_.inputs.push_back(v);
  int r = emit(EwCode::kInput, k);
  seen_.emplace_back(v, s);
  seen_reg_.push_back(r);
  return r;
}

int EwBuilder::emit(EwCode code, int a, int b, int c, float alpha, float beta) {
  if (!ok_ || l_.program.num_instrs >= kEwMaxInstrs) {
    ok_ = false;
    return 0;
  }
  int r = l_.program.num_instrs++;
  l_.program.instr[r] = EwInstr{code, static_cast<int8_t>(a), static_cast<int8_t>(b), static_cast<int8_t>(c), alpha, beta};
  return r;
}

int EwBuilder::node(const Node& n, const std::vector<int>& args) {
  auto fail = [this] {
    ok_ = false;
    return -1;
  };
  if (n.kind == OpKind::kCast) {
    DType from = g_.type(n.inputs[0]).dtype, to = g_.type(n.outputs[0]).dtype;
    if (!elem_of(from) || !elem_of(to)) return fail();
    // Registers are f32: an integer passes through them exactly only when
    // the other side is a float or bool.
    if (is_integer(from) && is_integer(to) && from != DType::kBool && to != DType::kBool && from != to) return fail();
    int r = args[0];
    switch (to) {
      case DType::kF16: return emit(EwCode::kToF16, r);
      case DType::kBF16: return emit(EwCode::kToBF16, r);
      case DType::kBool: return emit(EwCode::kNot, emit(EwCode::kNot, r));
      case DType::kF32: return emit(EwCode::kCopy, r);
      default: return emit(EwCode::kTrunc, r);
    }
  }
  for (ValueId v : n.inputs)
    if (v != kNoValue && !float_or_bool(g_.type(v).dtype)) return fail();
  for (ValueId v : n.outputs)
    if (!float_or_bool(g_.type(v).dtype)) return fail();
  float alpha = 0, beta = 0;
  if (auto code = unary_code(n, alpha, beta); code && args.size() == 1) return emit(*code, args[0], 0, 0, alpha, beta);
  if (auto code = binary_code(n); code && args.size() == 2) return emit(*code, args[0], args[1]);
  if (n.kind == OpKind::kWhere && args.size() == 3) return emit(EwCode::kWhere, args[0], args[1], args[2]);
  if (n.kind == OpKind::kBatchNormalization && args.size() == 5) {
    // y = (x - mean) / sqrt(var + eps) * scale + B
    int eps = emit(EwCode::kConst, 0, 0, 0, static_cast<float>(BatchNormAttrs::of(n).epsilon));
    int den = emit(EwCode::kSqrt, emit(EwCode::kAdd, args[4], eps));
    int y = emit(EwCode::kDiv, emit(EwCode::kSub, args[0], args[3]), den);
    return emit(EwCode::kAdd, emit(EwCode::kMul, y, args[1]), args[2]);
  }
  return fail();
}

std::optional<EwLowering> EwBuilder::finish(int result) {
  if (!ok_ || result < 0 || l_.program.num_instrs == 0) return std::nullopt;
  if (result != l_.program.num_instrs - 1) emit(EwCode::kCopy, result);
  if (!ok_) return std::nullopt;
  EwProgram& p = l_.program;
  p.rank = static_cast<int>(out_.rank());
  std::copy(out_.shape.begin(), out_.shape.end(), p.shape);
  p.numel = out_.numel();
  p.out_elem = *elem_of(out_.dtype);
  return l_;
}

namespace {

// Appends the post-op links of `grp` to the chain held in register `chain`
// (whose graph value is `chain_value`).
int append_links(EwBuilder& b, const Graph& g, const FusedGroup& grp, int chain, ValueId chain_value) {
  for (const PostOp& p : grp.post) {
    const Node& n = g.node(p.node);
    if (chain < 0) return -1;
    if (p.other == kNoValue) {
      chain = b.node(n, {chain});
    } else {
      int other = b.input(p.other);
      chain = b.node(n, n.inputs[0] == chain_value ? std::vector<int>{chain, other} : std::vector<int>{other, chain});
    }
    chain_value = n.outputs[0];
  }
  return chain;
}

}  // namespace

std::optional<EwLowering> lower_elementwise_group(const Graph& g, const FusedGroup& grp) {
  const Node& root = g.node(grp.root);
  if (root.outputs.size() != 1) return std::nullopt;
  EwBuilder b(g, g.type(grp.output(g)));
  std::vector<int> args;
  int64_t rank = g.type(root.outputs[0]).rank();
  for (size_t i = 0; i < root.inputs.size(); ++i) {
    ValueId v = root.inputs[i];
    if (v == kNoValue) return std::nullopt;
    bool per_channel = root.kind == OpKind::kBatchNormalization && i > 0;
    args.push_back(per_channel ? b.input(v, channel_view(g.type(v).numel(), rank)) : b.input(v));
  }
  int r = b.node(root, args);
  return b.finish(append_links(b, g, grp, r, root.outputs[0]));
}

std::optional<EwLowering> lower_epilogue(const Graph& g, const FusedGroup& grp, ValueId raw, ValueId bias) {
  const Node& root = g.node(grp.root);
  const TensorType& t = g.type(root.outputs[0]);
  EwBuilder b(g, g.type(grp.output(g)));
  int r = b.input(raw, t);
  if (bias != kNoValue) {
    Shape view = root.kind == OpKind::kConv ? channel_view(g.type(bias).numel(), t.rank()) : g.type(bias).shape;
    r = b.emit(EwCode::kAdd, r, b.input(bias, view));
  }
  return b.finish(append_links(b, g, grp, r, root.outputs[0]));
}

// ---- strided copies ----

namespace {

CopyDesc plain_copy(const Shape& shape, DType dtype) {
  CopyDesc c;
  c.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), c.shape);
  auto st = shape_strides(shape);
  std::copy(st.begin(), st.end(), c.src_strides);
  std::copy(st.begin(), st.end(), c.dst_strides);
  c.numel = shape_numel(shape);
  c.elem_bytes = static_cast<int>(dtype_size(dtype));
  return c;
}

bool fits(const Shape& s) { return static_cast<int>(s.size()) <= kMaxRank; }

}  // namespace

std::optional<std::vector<CopyPart>> lower_strided_copy(const Graph& g, const Node& n) {
  if (op_def(n.kind).family != OpFamily::kMovement) return std::nullopt;
  DimMap m = dim_map(g, n);
  if (!m.copies) return std::nullopt;
  std::vector<Shape> in;
  for (ValueId v : n.inputs) in.push_back(v == kNoValue ? Shape{} : g.type(v).shape);
  std::vector<CopyPart> parts;
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    const TensorType& y = g.type(n.outputs[o]);
    std::vector<StridedRead> reads = strided_reads(m, o, y.shape, in);
    if (reads.empty() || !fits(y.shape)) return std::nullopt;
    auto ys = shape_strides(y.shape);
    for (const StridedRead& r : reads) {
      CopyDesc c = plain_copy(r.extent, y.dtype);
      std::copy(r.src_strides.begin(), r.src_strides.end(), c.src_strides);
      std::copy(ys.begin(), ys.end(), c.dst_strides);
      c.src_offset = r.src_offset;
      for (size_t d = 0; d < ys.size(); ++d) c.dst_offset += r.dst_lo[d] * ys[d];
      parts.push_back({static_cast<size_t>(r.input), o, c});
    }
  }
  return parts;
}

std::optional<CopyDesc> broadcast_copy(const TensorType& from, const TensorType& to) {
  auto st = broadcast_strides(from.shape, to.shape);
  if (!st || !fits(to.shape)) return std::nullopt;
  CopyDesc c = plain_copy(to.shape, to.dtype);
  std::copy(st->begin(), st->end(), c.src_strides);
  return c;
}

std::optional<CopyDesc> lower_tile(const Graph& g, const Node& n) {
  // Output dim k seen as (repeat r_k, position i_k): dst index r_k*d_k + i_k.
  const TensorType& x = g.type(n.inputs[0]);
  const Shape& out = g.type(n.outputs[0]).shape;
  if (2 * x.rank() > kMaxRank) return std::nullopt;
  CopyDesc c;
  c.rank = static_cast<int>(2 * x.rank());
  auto in = shape_strides(x.shape), os = shape_strides(out);
  for (int64_t k = 0; k < x.rank(); ++k) {
    c.shape[2 * k] = out[k] / std::max<int64_t>(x.shape[k], 1);
    c.shape[2 * k + 1] = x.shape[k];
    c.src_strides[2 * k] = 0;
    c.src_strides[2 * k + 1] = in[k];
    c.dst_strides[2 * k] = x.shape[k] * os[k];
    c.dst_strides[2 * k + 1] = os[k];
  }
  c.numel = shape_numel(out);
  c.elem_bytes = static_cast<int>(dtype_size(x.dtype));
  return c;
}

std::optional<PadLowering> lower_pad(const Graph& g, const Node& n) {
  const PadAttrs attrs = PadAttrs::of(n);
  if (attrs.mode != "constant" || n.inputs.size() != 1) return std::nullopt;
  const TensorType& x = g.type(n.inputs[0]);
  const Shape& out = g.type(n.outputs[0]).shape;
  if (!fits(out) || !is_float(x.dtype) || x.dtype == DType::kF64) return std::nullopt;
  const auto& pads = attrs.pads;
  PadLowering p;
  p.value = static_cast<float>(attrs.value);
  p.copy = plain_copy(x.shape, x.dtype);
  auto os = shape_strides(out);
  std::copy(os.begin(), os.end(), p.copy.dst_strides);
  // Negative pads crop: start reading inside the input instead.
  auto is = shape_strides(x.shape);
  for (int64_t d = 0; d < x.rank(); ++d) {
    int64_t begin = pads[d], end = pads[x.rank() + d];
    if (begin >= 0) p.copy.dst_offset += begin * os[d];
    else p.copy.src_offset += -begin * is[d];
    p.copy.shape[d] = x.shape[d] + std::min<int64_t>(begin, 0) + std::min<int64_t>(end, 0);
    if (p.copy.shape[d] < 0) p.copy.shape[d] = 0;
  }
  p.copy.numel = 1;
  for (int d = 0; d < p.copy.rank; ++d) p.copy.numel *= p.copy.shape[d];
  return p;
}

}  // namespace tessera::runtime::cuda
