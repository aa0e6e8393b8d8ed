#include "graph/dim_map.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "graph/error.h"
#include "graph/graph.h"

namespace tessera {

const char* factor_kind_name(FactorKind k) {
  switch (k) {
    case FactorKind::kPass: return "pass";
    case FactorKind::kSum: return "sum";
    case FactorKind::kMean: return "mean";
    case FactorKind::kReduce: return "reduce";
  }
  return "?";
}

namespace {

// Terms over factors of size 1 always contribute 0: dropping them makes the
// minor term of a merge the one that really moves.
void drop_unit_terms(const DimMap& m, DimExpr& e) {
  if (e.form != DimForm::kAffine) return;
  std::erase_if(e.terms, [&](const DimTerm& t) { return m.factors.at(static_cast<size_t>(t.factor)).size == 1; });
}

void normalize(DimMap& m) {
  for (auto& pieces : m.outputs)
    for (Piece& p : pieces) {
      for (DimExpr& e : p.dims) drop_unit_terms(m, e);
      for (Read& r : p.reads)
        for (DimExpr& e : r.dims) drop_unit_terms(m, e);
    }
}

}  // namespace

DimMap dim_map(const Node& n, const std::vector<Shape>& in, const std::vector<Shape>& out,
               const std::vector<bool>& present) {
  const OpDef& def = op_def(n.kind);
  TESSERA_CHECK(def.dim_map != nullptr, op_name(n.kind) << " has no dim map");
  DimMapContext c{n, in, out, present};
  DimMap m = def.dim_map(c);
  normalize(m);
  TESSERA_CHECK(m.outputs.size() == out.size(),
                op_name(n.kind) << " dim map has " << m.outputs.size() << " outputs, the node " << out.size());
  return m;
}

DimMap dim_map(const Graph& g, const Node& n) {
  std::vector<Shape> in, out;
  std::vector<bool> present;
  for (ValueId v : n.inputs) {
    present.push_back(v != kNoValue);
    in.push_back(v != kNoValue ? g.type(v).shape : Shape{});
  }
  for (ValueId v : n.outputs) out.push_back(g.type(v).shape);
  return dim_map(n, in, out, present);
}

bool is_merge(const DimMap& m, const DimExpr& e) {
  if (e.form != DimForm::kAffine || e.guarded || e.offset != 0) return false;
  int64_t stride = 1;
  for (size_t k = e.terms.size(); k-- > 0;) {
    if (e.terms[k].coef != stride) return false;
    stride *= m.factors.at(static_cast<size_t>(e.terms[k].factor)).size;
  }
  return true;
}

bool is_plain(const DimMap& m, const DimExpr& e, int64_t size) {
  if (!is_merge(m, e)) return false;
  int64_t product = 1;
  for (const DimTerm& t : e.terms) product *= m.factors.at(static_cast<size_t>(t.factor)).size;
  return product == size;
}

bool decompose(const DimMap& m, const DimExpr& e, int64_t pos, std::vector<int64_t>& values) {
  int64_t rest = pos - e.offset;
  if (rest < 0) return false;
  for (size_t k = e.terms.size(); k-- > 0;) {
    int64_t size = m.factors.at(static_cast<size_t>(e.terms[k].factor)).size;
    if (size == 0) return false;
    if (k == 0) {
      if (rest >= size) return false;
      values[static_cast<size_t>(e.terms[k].factor)] = rest;
    } else {
      values[static_cast<size_t>(e.terms[k].factor)] = rest % size;
      rest /= size;
    }
  }
  return e.terms.empty() ? rest == 0 : true;
}

int64_t evaluate(const DimExpr& e, const std::vector<int64_t>& values) {
  int64_t i = e.offset;
  for (const DimTerm& t : e.terms) i += t.coef * values[static_cast<size_t>(t.factor)];
  return i;
}

void piece_range(const DimMap& m, const Piece& p, const Shape& out, std::vector<int64_t>& lo,
                 std::vector<int64_t>& hi) {
  lo.assign(out.size(), 0);
  hi = out;
  for (size_t d = 0; d < out.size() && d < p.dims.size(); ++d) {
    const DimExpr& e = p.dims[d];
    if (e.form != DimForm::kAffine) continue;
    int64_t extent = 1;
    for (const DimTerm& t : e.terms) extent *= m.factors.at(static_cast<size_t>(t.factor)).size;
    lo[d] = e.offset;
    hi[d] = e.offset + extent;
  }
}

std::vector<StridedRead> strided_reads(const DimMap& m, size_t output, const Shape& out,
                                       const std::vector<Shape>& in) {
  std::vector<StridedRead> result;
  if (!m.copies || output >= m.outputs.size()) return {};
  for (const Piece& p : m.outputs[output]) {
    if (p.reads.size() != 1) return {};
    const Read& r = p.reads[0];
    StridedRead s;
    s.input = r.input;
    std::vector<int64_t> hi;
    piece_range(m, p, out, s.dst_lo, hi);
    // Output dim d moves a single factor (or none); the input index is affine in it.
    std::vector<int> factor_of(out.size(), -1);
    for (size_t d = 0; d < out.size(); ++d) {
      const DimExpr& e = p.dims[d];
      if (e.form != DimForm::kAffine || e.terms.size() > 1) return {};
      if (e.terms.size() == 1) factor_of[d] = e.terms[0].factor;
      s.extent.push_back(hi[d] - s.dst_lo[d]);
    }
    const Shape& x = in.at(static_cast<size_t>(r.input));
    std::vector<int64_t> xs = shape_strides(x);
    s.src_strides.assign(out.size(), 0);
    for (size_t k = 0; k < r.dims.size(); ++k) {
      const DimExpr& e = r.dims[k];
      if (e.form != DimForm::kAffine || e.guarded) return {};
      s.src_offset += e.offset * xs[k];
      for (const DimTerm& t : e.terms) {
        auto d = std::find(factor_of.begin(), factor_of.end(), t.factor);
        if (d == factor_of.end()) return {};  // a factor no output dim moves (not a copy)
        s.src_strides[static_cast<size_t>(d - factor_of.begin())] += t.coef * xs[k];
      }
    }
    result.push_back(std::move(s));
  }
  return result;
}

std::string dim_map_str(const DimMap& m) {
  std::ostringstream os;
  auto name = [](int f) {
    std::string s(1, static_cast<char>('a' + f % 26));
    if (f >= 26) s += std::to_string(f / 26);
    return s;
  };
  auto expr = [&](const DimExpr& e) {
    std::ostringstream d;
    if (e.form == DimForm::kGathered) d << "gather(";
    if (e.form == DimForm::kPositional) d << "fn(";
    bool first = true;
    for (const DimTerm& t : e.terms) {
      if (!first) d << (e.form == DimForm::kAffine ? (t.coef < 0 ? "-" : "+") : ",");
      int64_t c = e.form == DimForm::kAffine ? (first ? t.coef : std::abs(t.coef)) : 1;
      if (c != 1) d << c;
      d << name(t.factor);
      first = false;
    }
    if (e.offset != 0 || e.terms.empty()) {
      if (!first && e.offset >= 0) d << "+";
      d << e.offset;
    }
    if (e.form != DimForm::kAffine) d << ")";
    if (e.guarded) d << "?";
    return d.str();
  };
  auto dims = [&](const std::vector<DimExpr>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + expr(v[i]);
    return s + "]";
  };
  for (size_t f = 0; f < m.factors.size(); ++f)
    os << (f ? " " : "") << name(static_cast<int>(f)) << ":" << m.factors[f].size
       << (m.factors[f].kind == FactorKind::kPass ? "" : std::string("/") + factor_kind_name(m.factors[f].kind));
  for (size_t o = 0; o < m.outputs.size(); ++o)
    for (const Piece& p : m.outputs[o]) {
      os << "; out" << o << dims(p.dims) << " <-";
      for (const Read& r : p.reads) os << " in" << r.input << dims(r.dims) << (r.bias ? "(bias)" : "");
    }
  return os.str();
}

namespace dims {

int add_factor(DimMap& m, int64_t size, FactorKind kind) {
  m.factors.push_back({size, kind});
  return static_cast<int>(m.factors.size()) - 1;
}

DimExpr factor(int f) { return DimExpr{DimForm::kAffine, {{f, 1}}, 0, false, {}}; }

std::vector<DimExpr> factors(const std::vector<int>& fs) {
  std::vector<DimExpr> v;
  for (int f : fs) v.push_back(factor(f));
  return v;
}

DimExpr merge(const DimMap& m, const std::vector<int>& factors, int64_t offset) {
  DimExpr e;
  int64_t stride = 1;
  for (size_t k = factors.size(); k-- > 0;) {
    e.terms.insert(e.terms.begin(), DimTerm{factors[k], stride});
    stride *= m.factors.at(static_cast<size_t>(factors[k])).size;
  }
  e.offset = offset;
  return e;
}

DimExpr affine(std::vector<DimTerm> terms, int64_t offset, bool guarded) {
  return DimExpr{DimForm::kAffine, std::move(terms), offset, guarded, {}};
}

DimExpr constant_zero() { return DimExpr{}; }

DimExpr positional(std::vector<int> factors, DimForm form) {
  DimExpr e;
  e.form = form;
  for (int f : factors) e.terms.push_back({f, 1});
  return e;
}

std::vector<DimExpr> broadcast(const Shape& in, const Shape& out, const std::vector<int>& out_factors) {
  std::vector<DimExpr> dims;
  size_t off = out.size() >= in.size() ? out.size() - in.size() : 0;
  for (size_t d = 0; d < in.size(); ++d) {
    size_t o = off + d;
    if (o < out.size() && in[d] == out[o] && out_factors[o] >= 0) dims.push_back(factor(out_factors[o]));
    else dims.push_back(constant_zero());
  }
  return dims;
}

DimMap elementwise(const DimMapContext& c) {
  DimMap m;
  const Shape& out = c.out.at(0);
  std::vector<int> f;
  for (int64_t s : out) f.push_back(add_factor(m, s));
  Piece p{factors(f), {}};
  for (size_t i = 0; i < c.in.size(); ++i)
    if (c.has_input(i)) p.reads.push_back({static_cast<int>(i), broadcast(c.in[i], out, f), false});
  m.outputs.push_back({std::move(p)});
  for (size_t o = 1; o < c.out.size(); ++o) m.outputs.push_back(m.outputs[0]);
  return m;
}

DimMap reshape(const Shape& in, const Shape& out) {
  DimMap m;
  m.copies = true;
  Piece p;
  p.dims.assign(out.size(), DimExpr{});
  Read r{0, std::vector<DimExpr>(in.size()), false};
  if (shape_numel(in) == 0) {
    // No elements: nothing to relate; one positional factor per output dim.
    for (size_t j = 0; j < out.size(); ++j) p.dims[j] = factor(add_factor(m, out[j]));
    for (size_t i = 0; i < in.size(); ++i) r.dims[i] = positional({});
    p.reads.push_back(std::move(r));
    m.outputs.push_back({std::move(p)});
    return m;
  }
  // Walk the non-unit dims of both sides in runs of equal product.
  std::vector<size_t> ins, outs;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != 1) ins.push_back(i);
  for (size_t j = 0; j < out.size(); ++j)
    if (out[j] != 1) outs.push_back(j);
  size_t a = 0, b = 0;
  while (a < ins.size() || b < outs.size()) {
    size_t a0 = a, b0 = b;
    int64_t pa = a < ins.size() ? in[ins[a++]] : 1, pb = b < outs.size() ? out[outs[b++]] : 1;
    while (pa != pb) {
      if (pa < pb && a < ins.size()) pa *= in[ins[a++]];
      else if (pb < pa && b < outs.size()) pb *= out[outs[b++]];
      else TESSERA_THROW(ErrorKind::kInvalidGraph, "reshape " << shape_str(in) << " -> " << shape_str(out)
                                                               << " changes the element count");
    }
    // Suffix products of each side inside the run: where its dims begin.
    std::set<int64_t, std::greater<>> cuts;
    auto suffixes = [&](const Shape& s, const std::vector<size_t>& idx, size_t lo, size_t hi) {
      std::vector<int64_t> v(hi - lo + 1, 1);
      for (size_t k = hi; k-- > lo;) v[k - lo] = v[k - lo + 1] * s[idx[k]];
      cuts.insert(v.begin(), v.end());
      return v;
    };
    std::vector<int64_t> sin = suffixes(in, ins, a0, a), sout = suffixes(out, outs, b0, b);
    std::vector<int64_t> c(cuts.begin(), cuts.end());  // total ... 1, descending
    bool chain = true;
    for (size_t t = 0; t + 1 < c.size(); ++t) chain = chain && c[t] % c[t + 1] == 0;
    if (!chain) {
      int f = add_factor(m, pa);
      for (size_t k = a0; k < a; ++k) r.dims[ins[k]] = positional({f});
      for (size_t k = b0; k < b; ++k) p.dims[outs[k]] = positional({f});
      continue;
    }
    // Factor t spans cut points c[t] > c[t+1]; a dim spanning [hi, lo) merges them.
    std::vector<int> fac;
    for (size_t t = 0; t + 1 < c.size(); ++t) fac.push_back(add_factor(m, c[t] / c[t + 1]));
    auto dims_of = [&](const std::vector<int64_t>& suf, size_t k) {
      std::vector<int> fs;
      for (size_t t = 0; t + 1 < c.size(); ++t)
        if (c[t] <= suf[k] && c[t + 1] >= suf[k + 1]) fs.push_back(fac[t]);
      return merge(m, fs);
    };
    for (size_t k = a0; k < a; ++k) r.dims[ins[k]] = dims_of(sin, k - a0);
    for (size_t k = b0; k < b; ++k) p.dims[outs[k]] = dims_of(sout, k - b0);
  }
  p.reads.push_back(std::move(r));
  m.outputs.push_back({std::move(p)});
  return m;
}

}  // namespace dims

}  // namespace tessera
