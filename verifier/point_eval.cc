#include "verifier/point_eval.h"

#include <algorithm>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "verifier/point_plan.h"

namespace tessera::verifier {

struct PointEvaluator::Slot {
  Shape shape;
  std::vector<int64_t> strides;
  bool num = true;
  bool full = false;
  std::vector<uint64_t> data;  // Zp residue or int64 bits
  std::vector<uint8_t> have;
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

// The pass factors' values at output index idx.
void factor_values(const std::vector<Digit>& digits, const std::vector<int64_t>& idx, std::vector<int64_t>& values) {
  for (const Digit& d : digits) {
    int64_t v = idx[d.dim] - d.offset;
    if (d.div != 1) v /= d.div;
    if (d.mod) v %= d.mod;
    values[static_cast<size_t>(d.factor)] = v;
  }
}

bool inside(const Guard& g, int64_t i) { return i >= 0 && i < g.size; }

}  // namespace

int64_t full_evaluation_work(const Graph& g) {
  int64_t w = 0;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    int64_t out = 0;
    for (ValueId v : n.outputs) out += numel_of(g, v);
    w += out * std::max<int64_t>(product_sum_work(g, n), 1);
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

// Per-element work repeats the same reads of the dim map; reading it once
// per node (with the scratch indices) took the BERT check from 157 to 71 ms
// (bench_verifier): its K and V chains run every element through Split,
// Reshape and Transpose.
const PointPlan& PointEvaluator::plan(NodeId id) {
  std::unique_ptr<PointPlan>& p = plans_[static_cast<size_t>(id)];
  if (!p) p = std::make_unique<PointPlan>(make_point_plan(g_, id));
  return *p;
}

PointEvaluator::Slot& PointEvaluator::slot(ValueId v) {
  Slot& s = *slots_[static_cast<size_t>(v)];
  if (s.have.empty() && !s.full) {
    auto n = static_cast<size_t>(shape_numel(s.shape));
    s.data.assign(n, 0);
    s.have.assign(n, 0);
  }
  return s;
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
  slot(v);
  if (!s.have[static_cast<size_t>(flat)]) compute(v, flat);
  return s.data[static_cast<size_t>(flat)];
}

void PointEvaluator::compute(ValueId v, int64_t flat) {
  const Value& val = g_.value(v);
  TESSERA_CHECK(val.producer >= 0, "value " << val.name << " has no data and no producer");
  const Node& n = g_.node(val.producer);
  const PointPlan& p = plan(val.producer);
  switch (p.mode) {
    case PointPlan::Mode::kElementwise: return elementwise(n, v, flat);
    case PointPlan::Mode::kView: {
      charge(1);
      uint64_t x = get(n.inputs[0], flat);  // row-major order is unchanged
      Slot& out = *slots_[static_cast<size_t>(v)];
      out.data[static_cast<size_t>(flat)] = x;
      out.have[static_cast<size_t>(flat)] = 1;
      return;
    }
    case PointPlan::Mode::kCopy: return copy(n, p, v, flat);
    case PointPlan::Mode::kProductSum: {
      bool all_num = slots_[static_cast<size_t>(v)]->num;
      for (ValueId in : n.inputs)
        if (in != kNoValue) all_num = all_num && slots_[static_cast<size_t>(in)]->num;
      if (all_num) return product_sum(n, p, v, flat);
      break;
    }
    case PointPlan::Mode::kRow: {
      auto o = static_cast<size_t>(std::find(n.outputs.begin(), n.outputs.end(), v) - n.outputs.begin());
      if (!p.row.writes[o].empty()) return row(n, p, v, flat);
      break;
    }
    case PointPlan::Mode::kWhole: break;
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

// Copy ops: the output element is the element its piece reads, or the fill.
void PointEvaluator::copy(const Node& n, const PointPlan& p, ValueId v, int64_t flat) {
  Slot& out = *slots_[static_cast<size_t>(v)];
  auto o = static_cast<size_t>(std::find(n.outputs.begin(), n.outputs.end(), v) - n.outputs.begin());
  const std::vector<CopyPiece>& pieces = p.copy.outputs[o];
  unravel(flat, out.shape, idx_);
  const CopyPiece* piece = &pieces[0];
  if (pieces.size() > 1) {
    int axis = p.copy.piece_axis[o];
    if (axis >= 0) {
      const std::vector<int64_t>& starts = p.copy.piece_starts[o];
      int64_t at = idx_[static_cast<size_t>(axis)];
      piece = &pieces[static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), at) - starts.begin() - 1)];
    } else {
      piece = nullptr;
      for (const CopyPiece& c : pieces) {
        bool in = true;
        for (size_t d = 0; d < idx_.size() && in; ++d) in = idx_[d] >= c.lo[d] && idx_[d] < c.hi[d];
        if (in) piece = &c;
      }
      TESSERA_CHECK(piece, op_name(n.kind) << " dim map has no piece at output position " << flat);
    }
  }
  values_.resize(p.factors);
  factor_values(piece->digits, idx_, values_);
  bool fill = false;
  for (const Guard& g : piece->guards) fill = fill || !inside(g, g.index.at(values_));
  int64_t src = piece->read.flat.at(values_);
  charge(1);
  uint64_t x = fill ? p.copy.fill : get(n.inputs[piece->read.input], src);
  out.data[static_cast<size_t>(flat)] = x;
  out.have[static_cast<size_t>(flat)] = 1;
}

// MatMul, Gemm, Conv: the outer contracted factors (a Conv's taps) step an
// odometer, checked against the guards; the inner one (K, input channels)
// is the tight loop of the dot product.
void PointEvaluator::product_sum(const Node& n, const PointPlan& p, ValueId v, int64_t flat) {
  const ProductSumPlan& ps = p.product;
  Slot& out = *slots_[static_cast<size_t>(v)];
  unravel(flat, out.shape, idx_);
  values_.resize(p.factors);
  factor_values(ps.digits, idx_, values_);
  int64_t a0 = ps.a.flat.at(values_), b0 = ps.b.flat.at(values_);
  int64_t guard_base[ProductSumPlan::kMaxGuards], bias_at[ProductSumPlan::kMaxBias], t[ProductSumPlan::kMaxOuter] = {};
  for (size_t k = 0; k < ps.guards.size(); ++k) guard_base[k] = ps.guards[k].index.at(values_);
  for (size_t k = 0; k < ps.bias.size(); ++k) bias_at[k] = ps.bias[k].flat.at(values_);
  ValueId av = n.inputs[ps.a.input], bv = n.inputs[ps.b.input];
  charge(ps.work);
  const uint64_t* ap = dense_if_cheap(av);
  const uint64_t* bp = dense_if_cheap(bv);
  const size_t outer = ps.outer.size();
  const int64_t inner = ps.inner, sa = ps.a_inner, sb = ps.b_inner;
  Dot dot;
  while (true) {
    bool in = true;
    for (size_t k = 0; k < ps.guards.size() && in; ++k) {
      int64_t i = guard_base[k];
      for (size_t q = 0; q < outer; ++q) i += ps.guards[k].outer[q] * t[q];
      in = inside(ps.guards[k], i);
    }
    if (in) {
      int64_t ao = a0, bo = b0;
      for (size_t q = 0; q < outer; ++q) {
        ao += ps.a_outer[q] * t[q];
        bo += ps.b_outer[q] * t[q];
      }
      if (ap && bp) {
        for (int64_t i = 0; i < inner; ++i) dot.add(ap[ao + i * sa], bp[bo + i * sb]);
      } else {
        for (int64_t i = 0; i < inner; ++i) dot.add(get(av, ao + i * sa), get(bv, bo + i * sb));
      }
    }
    size_t q = outer;
    while (q > 0 && ++t[q - 1] == ps.outer[q - 1]) t[--q] = 0;
    if (q == 0) break;
  }
  uint64_t r = dot.result();
  if (ps.scaled || !ps.bias.empty()) {
    Zp y = ps.alpha * Zp::from_u64(r);
    for (size_t k = 0; k < ps.bias.size(); ++k) y += ps.beta * Zp::from_u64(get(n.inputs[ps.bias[k].input], bias_at[k]));
    r = y.v;
  }
  out.data[static_cast<size_t>(flat)] = r;
  out.have[static_cast<size_t>(flat)] = 1;
}

bool PointEvaluator::movement_of_held(ValueId v) {
  const Slot& s = *slots_[static_cast<size_t>(v)];
  if (s.full) return true;
  const Value& val = g_.value(v);
  if (val.producer < 0 || !plan(val.producer).moves_data) return false;
  for (ValueId in : g_.node(val.producer).inputs)
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

// Row ops: the kernel runs on the slab the requested element reads (a
// tensor of the same rank, size 1 on the fixed dims, so the op's axes still
// apply) and fills every output element the slab gives.
void PointEvaluator::row(const Node& n, const PointPlan& p, ValueId v, int64_t flat) {
  const RowPlan& rp = p.row;
  auto o = static_cast<size_t>(std::find(n.outputs.begin(), n.outputs.end(), v) - n.outputs.begin());
  std::vector<int64_t> values(p.factors, 0), idx;
  unravel(flat, slots_[static_cast<size_t>(v)]->shape, idx);
  factor_values(rp.digits[o], idx, values);
  // Element `e` of a slab as a flat position of the full tensor.
  auto position = [&](const RowPlan::Slab& s, const std::vector<int64_t>& strides, int64_t e) {
    int64_t f = 0;
    for (size_t d = s.dims.size(); d-- > 0;) {
      const SlabDim& sd = s.dims[d];
      int64_t i = sd.full ? e % s.shape[d] : sd.factor >= 0 ? values[static_cast<size_t>(sd.factor)] : sd.index;
      if (sd.full) e /= s.shape[d];
      f += i * strides[d];
    }
    return f;
  };
  std::vector<RefTensor<Zp>> ins(n.inputs.size());
  EvalArgs<Zp> args{n, std::vector<const RefTensor<Zp>*>(n.inputs.size(), nullptr), nullptr, nullptr};
  charge(rp.work);
  for (const RowPlan::Slab& s : rp.inputs) {
    ValueId in = n.inputs[s.slot];
    const Slot& src = *slots_[static_cast<size_t>(in)];
    RefTensor<Zp>& t = ins[s.slot];
    t.type = TensorType{g_.type(in).dtype, s.shape};
    for (int64_t e = 0; e < t.numel(); ++e) {
      uint64_t x = get(in, position(s, src.strides, e));
      if (src.num) t.num.push_back(Zp::from_u64(x));
      else t.ints.push_back(static_cast<int64_t>(x));
    }
    args.inputs[s.slot] = &t;
  }
  std::vector<RefTensor<Zp>> outs(n.outputs.size());
  for (size_t k = 0; k < outs.size(); ++k) outs[k].type = TensorType{g_.type(n.outputs[k]).dtype, rp.outputs[k].shape};
  args.outputs = &outs;
  try {
    op_def(n.kind).eval_zp(args);
  } catch (const Error& e) {
    throw e.with_context({"", n.name, op_name(n.kind)});
  }
  for (size_t w : rp.writes[o]) {
    Slot& s = slot(n.outputs[w]);
    const RefTensor<Zp>& r = outs[w];
    for (int64_t e = 0; e < r.numel(); ++e) {
      auto f = static_cast<size_t>(position(rp.outputs[w], s.strides, e));
      s.data[f] = s.num ? r.num.at(static_cast<size_t>(e)).v : static_cast<uint64_t>(r.ints.at(static_cast<size_t>(e)));
      s.have[f] = 1;
    }
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
