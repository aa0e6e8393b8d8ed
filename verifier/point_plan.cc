#include "verifier/point_plan.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "graph/dim_map.h"
#include "graph/error.h"
#include "graph/number.h"
#include "verifier/dim_geometry.h"

namespace tessera::verifier {
namespace {


const Shape& in_shape(const Graph& g, const Node& n, size_t slot) { return g.type(n.inputs.at(slot)).shape; }

int64_t factor_size(const DimMap& m, int f) { return m.factors[static_cast<size_t>(f)].size; }

void add_term(Affine& a, int f, int64_t coef) {
  for (auto& [g, c] : a.terms)
    if (g == f) {
      c += coef;
      return;
    }
  a.terms.push_back({f, coef});
}

// One digit per term of the piece's output dims (mixed-radix merges of pass
// factors, with Concat's offset); false if a dim is anything else.
bool piece_digits(const DimMap& m, const Piece& p, std::vector<Digit>& digits) {
  for (size_t j = 0; j < p.dims.size(); ++j) {
    DimExpr bare = p.dims[j];
    bare.offset = 0;
    if (!is_merge(m, bare)) return false;
    for (size_t t = 0; t < bare.terms.size(); ++t) {
      int f = bare.terms[t].factor;
      if (m.factors[static_cast<size_t>(f)].kind != FactorKind::kPass) return false;
      digits.push_back({f, j, p.dims[j].offset, bare.terms[t].coef, t == 0 ? 0 : factor_size(m, f)});
    }
  }
  return true;
}

std::vector<bool> known_factors(const DimMap& m, const std::vector<Digit>& digits) {
  std::vector<bool> known(m.factors.size(), false);
  for (const Digit& d : digits) known[static_cast<size_t>(d.factor)] = true;
  return known;
}

// Copy ops: each position's element is its piece's one read, or the fill.
bool plan_copy(const Graph& g, const Node& n, const DimMap& m, CopyPlan& cp) {
  if (!m.copies) return false;
  bool guarded = false;
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    const Shape& out = g.type(n.outputs[o]).shape;
    std::vector<CopyPiece> pieces;
    for (const Piece& p : m.outputs[o]) {
      if (p.reads.size() != 1 || !all_affine(p)) return false;
      CopyPiece c;
      piece_range(m, p, out, c.lo, c.hi);
      bool empty = false;
      for (size_t j = 0; j < out.size(); ++j) empty = empty || c.lo[j] >= c.hi[j];
      if (empty) continue;  // an empty Concat input holds no position
      if (!piece_digits(m, p, c.digits)) return false;
      std::vector<bool> known = known_factors(m, c.digits);
      const Read& r = p.reads[0];
      c.read.input = static_cast<size_t>(r.input);
      const Shape& x = in_shape(g, n, c.read.input);
      std::vector<int64_t> strides = shape_strides(x);
      for (size_t d = 0; d < r.dims.size(); ++d) {
        const DimExpr& e = r.dims[d];
        Guard guard{Affine{e.offset, {}}, x[d], {}};
        c.read.flat.base += strides[d] * e.offset;
        for (const DimTerm& t : e.terms) {
          if (!known[static_cast<size_t>(t.factor)]) return false;
          add_term(c.read.flat, t.factor, strides[d] * t.coef);
          add_term(guard.index, t.factor, t.coef);
        }
        if (e.guarded) c.guards.push_back(std::move(guard));
      }
      guarded = guarded || !c.guards.empty();
      pieces.push_back(std::move(c));
    }
    // Pieces side by side along one dim (Concat) are found by binary search.
    int axis = -1;
    for (size_t j = 0; j < out.size() && pieces.size() > 1; ++j) {
      bool same = std::all_of(pieces.begin(), pieces.end(), [&](const CopyPiece& c) {
        return c.lo[j] == pieces[0].lo[j] && c.hi[j] == pieces[0].hi[j];
      });
      if (!same) axis = axis == -1 ? static_cast<int>(j) : -2;
    }
    std::vector<int64_t> starts;
    if (axis >= 0) {
      auto a = static_cast<size_t>(axis);
      std::sort(pieces.begin(), pieces.end(), [&](const CopyPiece& x, const CopyPiece& y) { return x.lo[a] < y.lo[a]; });
      for (size_t k = 0; k < pieces.size(); ++k) {
        if (k > 0 && pieces[k].lo[a] < pieces[k - 1].hi[a]) axis = -1;
        starts.push_back(pieces[k].lo[a]);
      }
    }
    cp.piece_axis.push_back(std::max(axis, -1));
    cp.piece_starts.push_back(std::move(starts));
    cp.outputs.push_back(std::move(pieces));
  }
  // Integer outputs take the fill's integer part, as the kernel does.
  if (guarded)
    cp.fill = is_float(g.type(n.outputs[0]).dtype) ? num_from_double<Zp>(m.fill).v
                                                    : static_cast<uint64_t>(static_cast<int64_t>(m.fill));
  return true;
}

// One operand of a product-sum: its pass factors into the flat offset, the
// contracted ones into the inner and outer strides, its guarded dims.
bool product_operand(const Graph& g, const Node& n, const DimMap& m, const Read& r, const std::vector<bool>& known,
                     int inner, const std::vector<int>& outer, FlatRead& fr, int64_t& inner_stride,
                     std::vector<int64_t>& outer_strides, std::vector<Guard>& guards) {
  fr.input = static_cast<size_t>(r.input);
  const Shape& x = in_shape(g, n, fr.input);
  std::vector<int64_t> strides = shape_strides(x);
  inner_stride = 0;
  outer_strides.assign(outer.size(), 0);
  for (size_t d = 0; d < r.dims.size(); ++d) {
    const DimExpr& e = r.dims[d];
    Guard guard{Affine{e.offset, {}}, x[d], std::vector<int64_t>(outer.size(), 0)};
    fr.flat.base += strides[d] * e.offset;
    for (const DimTerm& t : e.terms) {
      auto k = static_cast<size_t>(std::find(outer.begin(), outer.end(), t.factor) - outer.begin());
      if (known[static_cast<size_t>(t.factor)]) {
        add_term(fr.flat, t.factor, strides[d] * t.coef);
        add_term(guard.index, t.factor, t.coef);
      } else if (t.factor == inner) {
        inner_stride += strides[d] * t.coef;
      } else if (k < outer.size()) {
        outer_strides[k] += strides[d] * t.coef;
        guard.outer[k] += t.coef;
      } else {
        return false;
      }
    }
    if (e.guarded) guards.push_back(std::move(guard));
  }
  return true;
}

bool plan_product_sum(const Graph& g, const Node& n, const DimMap& m, ProductSumPlan& ps) {
  if (!m.products || m.outputs.size() != 1 || m.outputs[0].size() != 1) return false;
  const Piece& p = m.outputs[0][0];
  if (!all_affine(p) || !piece_digits(m, p, ps.digits)) return false;
  std::vector<bool> known = known_factors(m, ps.digits);
  std::vector<const Read*> operands;
  for (const Read& r : p.reads)
    if (!r.bias) operands.push_back(&r);
  if (operands.size() != 2) return false;
  // The contracted factors: sums, the largest that no guard involves inside.
  std::vector<bool> in_guard(m.factors.size(), false);
  for (const Read* r : operands)
    for (const DimExpr& e : r->dims)
      for (const DimTerm& t : e.terms) in_guard[static_cast<size_t>(t.factor)] = in_guard[static_cast<size_t>(t.factor)] || e.guarded;
  int inner = -1;
  std::vector<int> contracted;
  ps.work = 1;
  for (size_t f = 0; f < m.factors.size(); ++f) {
    if (m.factors[f].kind == FactorKind::kPass) continue;
    if (m.factors[f].kind != FactorKind::kSum) return false;
    contracted.push_back(static_cast<int>(f));
    ps.work *= m.factors[f].size;
    if (!in_guard[f] && (inner < 0 || m.factors[f].size > factor_size(m, inner))) inner = static_cast<int>(f);
  }
  std::vector<int> outer;
  for (int f : contracted)
    if (f != inner) {
      outer.push_back(f);
      ps.outer.push_back(factor_size(m, f));
    }
  ps.inner = inner >= 0 ? factor_size(m, inner) : 1;
  if (outer.size() > ProductSumPlan::kMaxOuter) return false;
  if (!product_operand(g, n, m, *operands[0], known, inner, outer, ps.a, ps.a_inner, ps.a_outer, ps.guards) ||
      !product_operand(g, n, m, *operands[1], known, inner, outer, ps.b, ps.b_inner, ps.b_outer, ps.guards))
    return false;
  if (ps.guards.size() > ProductSumPlan::kMaxGuards) return false;
  for (const Read& r : p.reads) {
    if (!r.bias) continue;
    FlatRead fr{static_cast<size_t>(r.input), {}};
    std::vector<int64_t> strides = shape_strides(in_shape(g, n, fr.input));
    for (size_t d = 0; d < r.dims.size(); ++d) {
      if (r.dims[d].guarded) return false;
      fr.flat.base += strides[d] * r.dims[d].offset;
      for (const DimTerm& t : r.dims[d].terms) {
        if (!known[static_cast<size_t>(t.factor)]) return false;
        add_term(fr.flat, t.factor, strides[d] * t.coef);
      }
    }
    ps.bias.push_back(std::move(fr));
  }
  if (ps.bias.size() > ProductSumPlan::kMaxBias) return false;
  ps.alpha = num_from_double<Zp>(m.product_scale);
  ps.beta = num_from_double<Zp>(m.bias_scale);
  ps.scaled = ps.alpha != Zp::from_u64(1) || ps.beta != Zp::from_u64(1);
  return true;
}

// A dim that a slab can take whole or at one index: one factor (or none)
// with coefficient 1 that spans the dim, no offset, no guard.
bool slab_dim(const DimMap& m, const DimExpr& e, int64_t size) {
  if (e.form != DimForm::kAffine || e.guarded || e.offset != 0 || e.terms.size() > 1) return false;
  return e.terms.empty() ? size == 1 : e.terms[0].coef == 1 && factor_size(m, e.terms[0].factor) == size;
}

// Row ops: every output is computed from a slab of its inputs. A slab dim
// spans its input dim where some read contracts it, or where it holds a
// pass factor that spans a dim elsewhere (LayerNorm's scale along the
// normalized dims); the output dims of such factors span too. The op's own
// shape inference on the slab must give the output slab, or there is no plan.
bool plan_row(const Graph& g, const Node& n, const DimMap& m, RowPlan& rp) {
  const OpDef& def = op_def(n.kind);
  if (m.copies || !def.eval_zp || !def.infer) return false;
  std::vector<std::vector<int>> pass(n.inputs.size());  // per slot, per dim: the pass factor it reads
  std::vector<std::vector<bool>> full(n.inputs.size());  // per slot, per dim: the slab spans it
  std::vector<bool> read_any(n.inputs.size(), false);
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] != kNoValue) {
      pass[i].assign(in_shape(g, n, i).size(), -1);
      full[i].assign(in_shape(g, n, i).size(), false);
    }
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    if (m.outputs[o].size() != 1) return false;
    const Piece& p = m.outputs[o][0];
    const Shape& out = g.type(n.outputs[o]).shape;
    for (size_t j = 0; j < out.size(); ++j)
      if (!slab_dim(m, p.dims[j], out[j])) return false;
    for (const Read& r : p.reads) {
      auto i = static_cast<size_t>(r.input);
      const Shape& x = in_shape(g, n, i);
      read_any[i] = true;
      for (size_t d = 0; d < x.size(); ++d) {
        const DimExpr& e = r.dims[d];
        if (!slab_dim(m, e, x[d])) return false;
        if (e.terms.empty()) continue;
        int f = e.terms[0].factor;
        if (m.factors[static_cast<size_t>(f)].kind != FactorKind::kPass) full[i][d] = true;
        else if (pass[i][d] >= 0 && pass[i][d] != f) return false;
        else pass[i][d] = f;
      }
    }
  }
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] != kNoValue && !read_any[i]) return false;  // an input no read reads (Size's)
  // Spanning spreads through the pass factors to a fixpoint.
  std::vector<bool> spans(m.factors.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < pass.size(); ++i)
      for (size_t d = 0; d < pass[i].size(); ++d) {
        int f = pass[i][d];
        if (f < 0) continue;
        auto uf = static_cast<size_t>(f);
        if (full[i][d] && !spans[uf]) spans[uf] = changed = true;
        if (spans[uf] && !full[i][d]) full[i][d] = changed = true;
      }
  }
  std::vector<bool> needed(m.factors.size(), false);  // fixed factors the input slabs take
  InferContext ctx{n, {}, {}, {}};
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    bool present = n.inputs[i] != kNoValue;
    ctx.present.push_back(present);
    ctx.constants.push_back(nullptr);
    if (!present) {
      ctx.inputs.push_back(TensorType{DType::kF32, {}});
      continue;
    }
    RowPlan::Slab s{i, {}, {}};
    const Shape& x = in_shape(g, n, i);
    for (size_t d = 0; d < x.size(); ++d) {
      SlabDim sd;
      if (full[i][d]) sd.full = true;
      else if (pass[i][d] >= 0) needed[static_cast<size_t>(sd.factor = pass[i][d])] = true;
      s.dims.push_back(sd);
      s.shape.push_back(sd.full ? x[d] : 1);
    }
    rp.work += shape_numel(s.shape);
    ctx.inputs.push_back(TensorType{g.type(n.inputs[i]).dtype, s.shape});
    rp.inputs.push_back(std::move(s));
  }
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    RowPlan::Slab s{o, {}, {}};
    const Shape& out = g.type(n.outputs[o]).shape;
    for (size_t j = 0; j < out.size(); ++j) {
      const DimExpr& e = m.outputs[o][0].dims[j];
      SlabDim sd;
      if (!e.terms.empty()) {
        if (spans[static_cast<size_t>(e.terms[0].factor)]) sd.full = true;
        else sd.factor = e.terms[0].factor;
      }
      s.dims.push_back(sd);
      s.shape.push_back(sd.full ? out[j] : 1);
    }
    rp.outputs.push_back(std::move(s));
    rp.digits.emplace_back();
    if (!piece_digits(m, m.outputs[o][0], rp.digits.back())) return false;
  }
  try {
    std::vector<TensorType> got = def.infer(ctx);
    if (got.size() != rp.outputs.size()) return false;
    for (size_t o = 0; o < got.size(); ++o)
      if (got[o] != TensorType{g.type(n.outputs[o]).dtype, rp.outputs[o].shape}) return false;
  } catch (const Error&) {
    return false;
  }
  // A request for output o fills the outputs whose fixed factors o's position gives.
  for (size_t o = 0; o < rp.outputs.size(); ++o) {
    std::vector<bool> known = known_factors(m, rp.digits[o]);
    auto covered = [&](const std::vector<bool>& want) {
      for (size_t f = 0; f < want.size(); ++f)
        if (want[f] && !known[f]) return false;
      return true;
    };
    rp.writes.emplace_back();
    if (!covered(needed)) continue;
    for (size_t w = 0; w < rp.outputs.size(); ++w) {
      std::vector<bool> fixed(m.factors.size(), false);
      for (const SlabDim& sd : rp.outputs[w].dims)
        if (sd.factor >= 0) fixed[static_cast<size_t>(sd.factor)] = true;
      if (w == o || covered(fixed)) rp.writes.back().push_back(w);
    }
  }
  return true;
}

}  // namespace

PointPlan make_point_plan(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const OpDef& def = op_def(n.kind);
  PointPlan p;
  if (def.is_view) {
    p.mode = PointPlan::Mode::kView;  // row-major order is unchanged
    p.moves_data = true;
    return p;
  }
  if (def.elementwise() && def.eval_zp) {
    p.mode = PointPlan::Mode::kElementwise;
    return p;
  }
  if (def.is_collective()) return p;
  DimMap m = dim_map(g, n);
  p.factors = m.factors.size();
  p.moves_data = m.copies;
  if (plan_copy(g, n, m, p.copy)) p.mode = PointPlan::Mode::kCopy;
  else if (plan_product_sum(g, n, m, p.product)) p.mode = PointPlan::Mode::kProductSum;
  else if (plan_row(g, n, m, p.row)) p.mode = PointPlan::Mode::kRow;
  return p;
}

int64_t product_sum_work(const Graph& g, const Node& n) {
  if (op_def(n.kind).is_collective()) return 0;
  DimMap m = dim_map(g, n);
  if (!m.products) return 0;
  int64_t w = 1;
  for (const Factor& f : m.factors)
    if (f.kind != FactorKind::kPass) w *= f.size;
  return w;
}

}  // namespace tessera::verifier
