#include "verifier/point_eval.h"

#include <algorithm>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "graph/number.h"
#include "verifier/split_points.h"

namespace tessera::verifier {

struct PointEvaluator::Slot {
  Shape shape;
  std::vector<int64_t> strides;
  bool num = true;
  bool full = false;
  std::vector<uint64_t> data;  // Zp residue or int64 bits
  std::vector<uint8_t> have;
};

// Per-element work repeats the same attribute reads and stride arithmetic;
// reading them once per node (with the scratch index below) took the BERT
// check from 157 to 71 ms (bench_verifier): its K and V chains run every
// element through Split, Reshape and Transpose.
struct PointEvaluator::Plan {
  std::vector<int64_t> perm;                 // Transpose
  std::vector<int64_t> start, step;          // Slice
  std::vector<int64_t> pads;                 // Pad (begins then ends), Conv
  uint64_t fill = 0;                         // Pad value
  size_t axis = 0;                           // Concat, Split
  std::vector<int64_t> offsets;              // Concat: input starts; Split: output starts
  Shape a_batch, b_batch;                    // MatMul
  std::vector<int64_t> a_bstr, b_bstr;
  int64_t k = 0, cols = 0;
  bool a1 = false, b1 = false;
  std::vector<int64_t> ks, st, dil, xs, ws;  // Conv
  int64_t cg = 0, mg = 0, taps = 0;
  bool bias = false;
};

namespace {

int64_t numel_of(const Graph& g, ValueId v) { return g.type(v).numel(); }

// Sum of products reduced once per 32 terms: each product is below 2^122, so
// 32 of them fit in 128 bits, and the modular reduction leaves the inner loop.
class Dot {
 public:
  void add(uint64_t a, uint64_t b) {
    acc_ += static_cast<unsigned __int128>(a) * b;
    if (++count_ == 32) flush();
  }
  uint64_t result() {
    flush();
    return sum_;
  }

 private:
  void flush() {
    uint64_t lo = static_cast<uint64_t>(acc_) & Zp::kP;
    unsigned __int128 hi = acc_ >> 61;  // < 2^67
    uint64_t s = lo + (static_cast<uint64_t>(hi) & Zp::kP) + static_cast<uint64_t>(hi >> 61);
    s = (s & Zp::kP) + (s >> 61);
    if (s >= Zp::kP) s -= Zp::kP;
    sum_ += s;
    if (sum_ >= Zp::kP) sum_ -= Zp::kP;
    acc_ = 0;
    count_ = 0;
  }
  unsigned __int128 acc_ = 0;
  int count_ = 0;
  uint64_t sum_ = 0;
};

void unravel(int64_t flat, const Shape& shape, std::vector<int64_t>& idx) {
  idx.resize(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
}

// Flat index into a right-aligned broadcast input of the output index `idx`.
int64_t broadcast_flat(const std::vector<int64_t>& idx, const Shape& in, const std::vector<int64_t>& strides) {
  size_t off = idx.size() - in.size();
  int64_t f = 0;
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1) f += idx[off + d] * strides[d];
  return f;
}

bool is_reshape(OpKind k) {
  return k == OpKind::kReshape || k == OpKind::kFlatten || k == OpKind::kSqueeze || k == OpKind::kUnsqueeze;
}

}  // namespace

int64_t full_evaluation_work(const Graph& g) {
  int64_t w = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    int64_t out = 0;
    for (ValueId v : n.outputs) out += numel_of(g, v);
    switch (n.kind) {
      case OpKind::kMatMul: {
        const Shape& a = g.type(n.inputs[0]).shape;
        w += out * (a.empty() ? 1 : a.back());
        break;
      }
      case OpKind::kGemm: {
        const Shape& a = g.type(n.inputs[0]).shape;
        w += out * a[n.attrs.i("transA") ? 0 : 1];
        break;
      }
      case OpKind::kConv: case OpKind::kConvTranspose: {
        const Shape& ws = g.type(n.inputs[1]).shape;
        int64_t k = 1;
        for (size_t d = 1; d < ws.size(); ++d) k *= ws[d];
        w += (n.kind == OpKind::kConv ? out : numel_of(g, n.inputs[0]) * ws[1]) * k;
        break;
      }
      default:
        w += out;
    }
  }
  return w;
}

PointEvaluator::PointEvaluator(const Graph& g, const std::vector<RefTensor<Zp>>& inputs, int64_t* work,
                               int64_t budget)
    : g_(g), work_(work), budget_(budget) {
  TESSERA_CHECK(inputs.size() == g.inputs().size(), "point evaluator got " << inputs.size() << " inputs");
  plans_.resize(static_cast<size_t>(g.num_nodes()));
  for (ValueId v = 0; v < g.num_values(); ++v) {
    auto s = std::make_unique<Slot>();
    s->shape = g.type(v).shape;
    s->strides = shape_strides(s->shape);
    s->num = is_float(g.type(v).dtype);
    slots_.push_back(std::move(s));
  }
  auto fill = [&](ValueId v, const RefTensor<Zp>& t) {
    Slot& s = *slots_[static_cast<size_t>(v)];
    auto n = static_cast<size_t>(t.numel());
    s.data.resize(n);
    for (size_t i = 0; i < n; ++i) s.data[i] = s.num ? t.num[i].v : static_cast<uint64_t>(t.ints[i]);
    s.have.assign(n, 1);
    s.full = true;
  };
  for (size_t i = 0; i < inputs.size(); ++i) fill(g.inputs()[i], inputs[i]);
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).constant) fill(v, to_ref<Zp>(*g.value(v).constant));
}

PointEvaluator::~PointEvaluator() = default;

void PointEvaluator::charge(int64_t w) {
  *work_ += w;
  if (*work_ > budget_) throw WorkBudgetExceeded{};
}

const PointEvaluator::Plan& PointEvaluator::plan(NodeId id) {
  std::unique_ptr<Plan>& slot = plans_[static_cast<size_t>(id)];
  if (slot) return *slot;
  slot = std::make_unique<Plan>();
  Plan& p = *slot;
  const Node& n = g_.node(id);
  auto axis_of = [&](int64_t a) { return static_cast<size_t>(a < 0 ? a + g_.type(n.outputs[0]).rank() : a); };
  switch (n.kind) {
    case OpKind::kTranspose: p.perm = n.attrs.ints("perm"); break;
    case OpKind::kSlice: slice_geometry(n, g_.type(n.inputs[0]).shape, g_.type(n.outputs[0]).shape, p.start, p.step); break;
    case OpKind::kPad: {
      p.pads = n.attrs.ints("pads");
      double value = n.attrs.f("value");
      p.fill = is_float(g_.type(n.outputs[0]).dtype) ? num_from_double<Zp>(value).v
                                                     : static_cast<uint64_t>(static_cast<int64_t>(value));
      break;
    }
    case OpKind::kConcat: {
      p.axis = axis_of(n.attrs.i("axis"));
      int64_t off = 0;
      for (ValueId in : n.inputs) {
        p.offsets.push_back(off);
        off += g_.type(in).shape[p.axis];
      }
      break;
    }
    case OpKind::kSplit: {
      p.axis = axis_of(n.attrs.i("axis"));
      int64_t off = 0;
      for (int64_t size : n.attrs.ints("split")) {
        p.offsets.push_back(off);
        off += size;
      }
      break;
    }
    case OpKind::kMatMul: {
      Shape a = g_.type(n.inputs[0]).shape, b = g_.type(n.inputs[1]).shape;
      p.a1 = a.size() == 1;
      p.b1 = b.size() == 1;
      if (p.a1) a.insert(a.begin(), 1);
      if (p.b1) b.push_back(1);
      p.k = a.back();
      p.cols = b.back();
      std::vector<int64_t> as = shape_strides(a), bs = shape_strides(b);
      p.a_batch.assign(a.begin(), a.end() - 2);
      p.b_batch.assign(b.begin(), b.end() - 2);
      p.a_bstr.assign(as.begin(), as.end() - 2);
      p.b_bstr.assign(bs.begin(), bs.end() - 2);
      break;
    }
    case OpKind::kConv: {
      const Shape& x = g_.type(n.inputs[0]).shape;
      p.ks = n.attrs.ints("kernel_shape");
      p.st = n.attrs.ints("strides");
      p.pads = n.attrs.ints("pads");
      p.dil = n.attrs.ints("dilations");
      p.xs = shape_strides(x);
      p.ws = shape_strides(g_.type(n.inputs[1]).shape);
      int64_t group = n.attrs.i("group");
      p.cg = x[1] / group;
      p.mg = g_.type(n.outputs[0]).shape[1] / group;
      p.taps = 1;
      for (int64_t k : p.ks) p.taps *= k;
      p.bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
      break;
    }
    default:
      break;
  }
  return p;
}

uint64_t PointEvaluator::output_at(size_t j, const std::vector<int64_t>& idx) {
  ValueId v = g_.outputs().at(j);
  const Slot& s = *slots_[static_cast<size_t>(v)];
  int64_t flat = 0;
  for (size_t d = 0; d < idx.size(); ++d) flat += idx[d] * s.strides[d];
  return get(v, flat);
}

uint64_t PointEvaluator::get(ValueId v, int64_t flat) {
  Slot& s = *slots_[static_cast<size_t>(v)];
  if (s.full) return s.data[static_cast<size_t>(flat)];
  if (s.have.empty()) {
    auto n = static_cast<size_t>(shape_numel(s.shape));
    s.data.assign(n, 0);
    s.have.assign(n, 0);
  }
  if (!s.have[static_cast<size_t>(flat)]) compute(v, flat);
  return s.data[static_cast<size_t>(flat)];
}

void PointEvaluator::compute(ValueId v, int64_t flat) {
  const Value& val = g_.value(v);
  TESSERA_CHECK(val.producer >= 0, "value " << val.name << " has no data and no producer");
  const Node& n = g_.node(val.producer);
  const OpDef& def = op_def(n.kind);
  bool all_num = slots_[static_cast<size_t>(v)]->num;
  for (ValueId in : n.inputs)
    if (in != kNoValue) all_num = all_num && slots_[static_cast<size_t>(in)]->num;
  if (def.elementwise() && def.eval_zp) return elementwise(n, v, flat);
  switch (n.kind) {
    case OpKind::kTranspose: case OpKind::kSlice: case OpKind::kConcat: case OpKind::kSplit:
      return movement(val.producer, v, flat);
    case OpKind::kPad:
      if (n.attrs.s("mode") == "constant") return movement(val.producer, v, flat);
      break;
    case OpKind::kMatMul:
      if (all_num) return matmul(val.producer, v, flat);
      break;
    case OpKind::kConv:
      if (all_num) return conv(val.producer, v, flat);
      break;
    case OpKind::kSoftmax: case OpKind::kLogSoftmax:
      return softmax_row(n, v, flat);
    default:
      if (is_reshape(n.kind)) return movement(val.producer, v, flat);
  }
  materialize(val.producer);
}

void PointEvaluator::elementwise(const Node& n, ValueId v, int64_t flat) {
  Slot& out = *slots_[static_cast<size_t>(v)];
  std::vector<int64_t> idx;
  unravel(flat, out.shape, idx);
  std::vector<RefTensor<Zp>> ins(n.inputs.size());
  EvalArgs<Zp> args{n, {}, nullptr, nullptr};
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    ValueId in = n.inputs[i];
    if (in == kNoValue) {
      args.inputs.push_back(nullptr);
      continue;
    }
    const Slot& s = *slots_[static_cast<size_t>(in)];
    uint64_t x = get(in, broadcast_flat(idx, s.shape, s.strides));
    ins[i].type = TensorType{g_.type(in).dtype, {}};
    if (s.num) ins[i].num.push_back(Zp::from_u64(x));
    else ins[i].ints.push_back(static_cast<int64_t>(x));
    args.inputs.push_back(&ins[i]);
  }
  std::vector<RefTensor<Zp>> outs(1);
  outs[0].type = TensorType{g_.type(v).dtype, {}};
  args.outputs = &outs;
  op_def(n.kind).eval_zp(args);
  charge(1);
  out.data[static_cast<size_t>(flat)] = out.num ? outs[0].num.at(0).v : static_cast<uint64_t>(outs[0].ints.at(0));
  out.have[static_cast<size_t>(flat)] = 1;
}

// Movement ops: the output element is one input element (or the pad value).
void PointEvaluator::movement(NodeId id, ValueId v, int64_t flat) {
  const Node& n = g_.node(id);
  Slot& out = *slots_[static_cast<size_t>(v)];
  ValueId src = n.inputs[0];
  int64_t src_flat = -1;
  uint64_t fill = 0;
  if (is_reshape(n.kind)) {
    src_flat = flat;  // row-major order is unchanged
  } else {
    const Plan& p = plan(id);
    std::vector<int64_t>& idx = scratch_;  // free again before the recursive get below
    unravel(flat, out.shape, idx);
    auto index_in = [&](ValueId in) {
      const std::vector<int64_t>& strides = slots_[static_cast<size_t>(in)]->strides;
      int64_t f = 0;
      for (size_t d = 0; d < idx.size(); ++d) f += idx[d] * strides[d];
      return f;
    };
    switch (n.kind) {
      case OpKind::kTranspose: {
        const std::vector<int64_t>& strides = slots_[static_cast<size_t>(src)]->strides;
        src_flat = 0;
        for (size_t d = 0; d < idx.size(); ++d) src_flat += idx[d] * strides[static_cast<size_t>(p.perm[d])];
        break;
      }
      case OpKind::kSlice:
        for (size_t d = 0; d < idx.size(); ++d) idx[d] = p.start[d] + idx[d] * p.step[d];
        src_flat = index_in(src);
        break;
      case OpKind::kPad: {
        const Shape& in = slots_[static_cast<size_t>(src)]->shape;
        bool inside = true;
        for (size_t d = 0; d < idx.size(); ++d) {
          idx[d] -= p.pads[d];
          inside = inside && idx[d] >= 0 && idx[d] < in[d];
        }
        if (inside) src_flat = index_in(src);
        else fill = p.fill;
        break;
      }
      case OpKind::kConcat: {
        auto k = static_cast<size_t>(std::upper_bound(p.offsets.begin(), p.offsets.end(), idx[p.axis]) -
                                     p.offsets.begin() - 1);
        src = n.inputs[k];
        idx[p.axis] -= p.offsets[k];
        src_flat = index_in(src);
        break;
      }
      case OpKind::kSplit: {
        auto k = static_cast<size_t>(std::find(n.outputs.begin(), n.outputs.end(), v) - n.outputs.begin());
        idx[p.axis] += p.offsets[k];
        src_flat = index_in(src);
        break;
      }
      default:
        TESSERA_CHECK(false, "no position rule for " << op_name(n.kind));
    }
  }
  charge(1);
  out.data[static_cast<size_t>(flat)] = src_flat >= 0 ? get(src, src_flat) : fill;
  out.have[static_cast<size_t>(flat)] = 1;
}

void PointEvaluator::matmul(NodeId id, ValueId v, int64_t flat) {
  const Node& n = g_.node(id);
  const Plan& p = plan(id);
  Slot& out = *slots_[static_cast<size_t>(v)];
  ValueId av = n.inputs[0], bv = n.inputs[1];
  std::vector<int64_t>& idx = scratch_;  // free again before the recursive gets below
  unravel(flat, out.shape, idx);
  if (p.b1) idx.push_back(0);
  if (p.a1) idx.insert(idx.end() - 1, 0);
  int64_t m = idx[idx.size() - 2], col = idx.back(), k = p.k, cols = p.cols;
  idx.resize(idx.size() - 2);
  int64_t ao = broadcast_flat(idx, p.a_batch, p.a_bstr) + m * k;
  int64_t bo = broadcast_flat(idx, p.b_batch, p.b_bstr) + col;
  charge(k);
  Dot dot;
  const uint64_t* ap = dense_if_cheap(av);
  const uint64_t* bp = dense_if_cheap(bv);
  if (ap && bp) {
    for (int64_t t = 0; t < k; ++t) dot.add(ap[ao + t], bp[bo + t * cols]);
  } else {
    for (int64_t t = 0; t < k; ++t) dot.add(get(av, ao + t), get(bv, bo + t * cols));
  }
  out.data[static_cast<size_t>(flat)] = dot.result();
  out.have[static_cast<size_t>(flat)] = 1;
}

bool PointEvaluator::movement_of_held(ValueId v) const {
  const Slot& s = *slots_[static_cast<size_t>(v)];
  if (s.full) return true;
  const Value& val = g_.value(v);
  if (val.producer < 0) return false;
  const Node& n = g_.node(val.producer);
  bool movement = is_reshape(n.kind) || n.kind == OpKind::kTranspose || n.kind == OpKind::kSlice ||
                  n.kind == OpKind::kConcat || n.kind == OpKind::kSplit ||
                  (n.kind == OpKind::kPad && n.attrs.s("mode") == "constant");
  if (!movement) return false;
  for (ValueId in : n.inputs)
    if (in != kNoValue && !movement_of_held(in)) return false;
  return true;
}

// Making such an operand whole costs one copy per element, less than the
// per-element lookups of a dot product that reads it (the fused-QKV weights
// of the BERT benchmark: Concat of three held weights).
const uint64_t* PointEvaluator::dense_if_cheap(ValueId v) {
  Slot& s = *slots_[static_cast<size_t>(v)];
  if (!s.full && movement_of_held(v)) {
    const Node& n = g_.node(g_.value(v).producer);
    for (ValueId in : n.inputs)
      if (in != kNoValue) dense_if_cheap(in);
    materialize(g_.value(v).producer);
  }
  return s.full ? s.data.data() : nullptr;
}

void PointEvaluator::conv(NodeId id, ValueId v, int64_t flat) {
  const Node& n = g_.node(id);
  const Plan& p = plan(id);
  Slot& out = *slots_[static_cast<size_t>(v)];
  ValueId xv = n.inputs[0], wv = n.inputs[1];
  const Shape& x = slots_[static_cast<size_t>(xv)]->shape;
  size_t sp = p.ks.size();
  std::vector<int64_t>& idx = scratch_;  // free again before the recursive gets below
  unravel(flat, out.shape, idx);
  int64_t spatial[3] = {0, 0, 0};
  for (size_t d = 0; d < sp; ++d) spatial[d] = idx[2 + d];
  int64_t map = idx[1], grp = map / p.mg;
  int64_t xbase = idx[0] * p.xs[0] + grp * p.cg * p.xs[1], wbase = map * p.ws[0];
  charge(p.cg * p.taps);
  const uint64_t* xp = dense_if_cheap(xv);
  const uint64_t* wp = dense_if_cheap(wv);
  Dot dot;
  for (int64_t t = 0; t < p.taps; ++t) {
    int64_t rem = t, xo = 0, wo = 0;
    bool inside = true;
    for (size_t d = sp; d-- > 0;) {
      int64_t tap = rem % p.ks[d];
      rem /= p.ks[d];
      int64_t i = spatial[d] * p.st[d] - p.pads[d] + tap * p.dil[d];
      inside = inside && i >= 0 && i < x[2 + d];
      xo += i * p.xs[2 + d];
      wo += tap * p.ws[2 + d];
    }
    if (!inside) continue;
    int64_t xb = xbase + xo, wb = wbase + wo;
    if (xp && wp) {
      for (int64_t ic = 0; ic < p.cg; ++ic) dot.add(xp[xb + ic * p.xs[1]], wp[wb + ic * p.ws[1]]);
    } else {
      for (int64_t ic = 0; ic < p.cg; ++ic) dot.add(get(xv, xb + ic * p.xs[1]), get(wv, wb + ic * p.ws[1]));
    }
  }
  uint64_t r = dot.result();
  if (p.bias) r = (Zp::from_u64(r) + Zp::from_u64(get(n.inputs[2], map))).v;
  out.data[static_cast<size_t>(flat)] = r;
  out.have[static_cast<size_t>(flat)] = 1;
}

// Softmax over one row: the kernel runs on the row alone (a tensor of the
// same rank with every other dim 1, so the axis attribute still applies).
void PointEvaluator::softmax_row(const Node& n, ValueId v, int64_t flat) {
  Slot& out = *slots_[static_cast<size_t>(v)];
  ValueId xv = n.inputs[0];
  int64_t rank = static_cast<int64_t>(out.shape.size());
  int64_t axis = n.attrs.i("axis");
  if (axis < 0) axis += rank;
  auto a = static_cast<size_t>(axis);
  int64_t len = out.shape[a];
  std::vector<int64_t> idx;
  unravel(flat, out.shape, idx);
  RefTensor<Zp> row;
  row.type = g_.type(xv);
  for (size_t d = 0; d < row.type.shape.size(); ++d)
    if (d != a) row.type.shape[d] = 1;
  int64_t base = flat - idx[a] * out.strides[a];
  for (int64_t t = 0; t < len; ++t) row.num.push_back(Zp::from_u64(get(xv, base + t * out.strides[a])));
  std::vector<RefTensor<Zp>> outs(1);
  outs[0].type = TensorType{g_.type(v).dtype, row.type.shape};
  EvalArgs<Zp> args{n, {&row}, &outs, nullptr};
  op_def(n.kind).eval_zp(args);
  charge(len);
  for (int64_t t = 0; t < len; ++t) {
    auto f = static_cast<size_t>(base + t * out.strides[a]);
    out.data[f] = outs[0].num.at(static_cast<size_t>(t)).v;
    out.have[f] = 1;
  }
}

// Ops without a position rule run whole, on whole inputs.
void PointEvaluator::materialize(NodeId id) {
  const Node& n = g_.node(id);
  EvalFn<Zp> fn = op_def(n.kind).eval_zp;
  if (!fn) throw Error(ErrorKind::kUnsupported, "op has no reference kernel", {"", n.name, op_name(n.kind)});
  std::vector<RefTensor<Zp>> ins(n.inputs.size());
  EvalArgs<Zp> args{n, {}, nullptr, nullptr};
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    ValueId in = n.inputs[i];
    if (in == kNoValue) {
      args.inputs.push_back(nullptr);
      continue;
    }
    const Slot& s = *slots_[static_cast<size_t>(in)];
    ins[i].type = g_.type(in);
    int64_t count = ins[i].numel();
    charge(count);
    for (int64_t f = 0; f < count; ++f) {
      uint64_t x = get(in, f);
      if (s.num) ins[i].num.push_back(Zp::from_u64(x));
      else ins[i].ints.push_back(static_cast<int64_t>(x));
    }
    args.inputs.push_back(&ins[i]);
  }
  std::vector<RefTensor<Zp>> outs(n.outputs.size());
  int64_t total = 0;
  for (size_t o = 0; o < outs.size(); ++o) {
    outs[o].type = g_.type(n.outputs[o]);
    total += outs[o].numel();
  }
  args.outputs = &outs;
  charge(total);
  try {
    fn(args);
  } catch (const Error& e) {
    throw e.with_context({"", n.name, op_name(n.kind)});
  }
  for (size_t o = 0; o < outs.size(); ++o) {
    Slot& s = *slots_[static_cast<size_t>(n.outputs[o])];
    auto count = static_cast<size_t>(outs[o].numel());
    s.data.resize(count);
    for (size_t f = 0; f < count; ++f) s.data[f] = s.num ? outs[o].num.at(f).v : static_cast<uint64_t>(outs[o].ints.at(f));
    s.have.assign(count, 1);
    s.full = true;
  }
}

}  // namespace tessera::verifier
