#include "verifier/split_points.h"

#include <algorithm>
#include <set>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "verifier/dim_geometry.h"

namespace tessera::verifier {
namespace {

// Thrown inside the analysis when a program leaves what it can describe.
struct NoRule {};

// More distinct values of the contracted terms of one read dim than this
// (taps times channels of a grouped conv's input channel dim): no rule.
constexpr size_t kMaxRests = size_t{1} << 14;

class Builder {
 public:
  Builder(const Shape& shape, int64_t cap) : shape_(shape), sets_(shape.size()), cap_(cap) {}
  void add(size_t d, int64_t p) {
    if (p > 0 && p < shape_[d]) sets_[d].insert(p);
    if (static_cast<int64_t>(sets_[d].size()) > cap_) throw NoRule{};
  }
  int64_t cap() const { return cap_; }
  DimSplits done() const {
    DimSplits out;
    for (const auto& s : sets_) out.emplace_back(s.begin(), s.end());
    return out;
  }

 private:
  const Shape& shape_;
  std::vector<std::set<int64_t>> sets_;
  int64_t cap_;
};

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Constant data reads as a different constant wherever its values change.
DimSplits constant_splits(const RefTensor<Zp>& r, int64_t cap) {
  const Shape& shape = r.type.shape;
  Builder b(shape, cap);
  std::vector<int64_t> strides = shape_strides(shape);
  auto at = [&](int64_t i) { return r.is_num() ? r.num[static_cast<size_t>(i)].v : static_cast<uint64_t>(r.ints[static_cast<size_t>(i)]); };
  // Position pos of dim d splits when any element there differs from its
  // neighbour at pos - 1: the scan of a position stops at its first
  // difference, so random weights cost one comparison per position, not
  // per element (GPT-2's 768x2304 projection: 3.5M set insertions, a
  // third of a fold-scale-into-weights test, before).
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t stride = strides[d], outer = r.numel() / std::max<int64_t>(1, shape[d] * stride);
    for (int64_t pos = 1; pos < shape[d]; ++pos) {
      bool differs = false;
      for (int64_t o = 0; o < outer && !differs; ++o)
        for (int64_t i = (o * shape[d] + pos) * stride, end = i + stride; i < end && !differs; ++i)
          differs = at(i) != at(i - stride);
      if (differs) b.add(d, pos);
    }
  }
  return b.done();
}

// Whether e is a merge (dim_map.h) once its offset (a Concat piece's) is set aside.
bool merge_with_offset(const DimMap& m, DimExpr e) {
  e.offset = 0;
  return is_merge(m, e);
}

// The splits that one piece of an output adds (the rules of split_points.h).
class PieceSplits {
 public:
  PieceSplits(const DimMap& m, const Piece& p, const Shape& out, Builder& b)
      : m_(m), p_(p), out_(out), b_(b), places_(factor_places(m, p)) {}

  // A merged output dim moves only its minor factor between multiples of
  // that factor's size; a piece's range ends (Concat's seams) split too.
  void output_dims() {
    std::vector<int64_t> lo, hi;
    piece_range(m_, p_, out_, lo, hi);
    for (size_t j = 0; j < out_.size(); ++j) {
      b_.add(j, lo[j]);
      b_.add(j, hi[j]);
      const DimExpr& e = p_.dims[j];
      if (e.form != DimForm::kAffine) continue;  // a flat run's (split by flat_run)
      for (const DimTerm& t : e.terms)
        if (!indexes(m_, places_, t.factor)) throw NoRule{};
      if (!merge_with_offset(m_, e)) throw NoRule{};
      if (e.terms.size() < 2) continue;
      int64_t period = size(e.terms.back().factor);
      if (period == 0) continue;  // no positions
      int64_t blocks = (hi[j] - lo[j]) / period;
      if (blocks - 1 > b_.cap()) throw NoRule{};
      for (int64_t k = 1; k < blocks; ++k) b_.add(j, lo[j] + k * period);
    }
  }

  // Where the read's index crosses a point of each input dim: the input's
  // own splits, and its edges where the read is guarded.
  void read(const Read& r, const Shape& x, const DimSplits& s, const Node& n) {
    for (size_t d = 0; d < r.dims.size(); ++d) {
      const DimExpr& e = r.dims[d];
      if (e.form != DimForm::kAffine) continue;  // a flat run's (split by flat_run)
      std::vector<int64_t> points = s[d];
      if (e.guarded) points.insert(points.end(), {0, x[d]});
      points.insert(points.end(), e.edges.begin(), e.edges.end());
      if (points.empty()) continue;
      std::vector<const DimTerm*> pass, free;
      for (const DimTerm& t : e.terms) (indexes(m_, places_, t.factor) ? pass : free).push_back(&t);
      if (pass.empty()) continue;  // every position reads the same indices
      if (pass.size() == 1) {
        one_pass_factor(e, *pass[0], free, points);
      } else {
        if (!free.empty() || e.guarded) throw NoRule{};
        merged(e, points);
      }
    }
  }

  // A view op's flat run: the input's innermost run dim moves with the flat
  // index within one of its periods; its points and period starts, as flat
  // positions, become lexicographic splits of the run's output dims.
  void flat_run(const FlatRun& run, const Shape& x, const DimSplits& s) {
    size_t inner = run.in_dims.back();
    int64_t period = x[inner], periods = size(run.factor) / period;
    if (periods * static_cast<int64_t>(1 + s[inner].size()) > b_.cap()) throw NoRule{};
    std::set<int64_t> flat;
    for (int64_t o = 0; o < periods; ++o) {
      if (o > 0) flat.insert(o * period);
      for (int64_t p : s[inner]) flat.insert(o * period + p);
    }
    std::vector<int64_t> idx(run.out_dims.size());
    for (int64_t p : flat) {
      int64_t rem = p;
      for (size_t k = idx.size(); k-- > 0;) {
        idx[k] = rem % out_[run.out_dims[k]];
        rem /= out_[run.out_dims[k]];
      }
      size_t last = 0;
      for (size_t k = 0; k < idx.size(); ++k)
        if (idx[k] != 0) last = k;
      for (size_t k = 0; k <= last; ++k) {
        b_.add(run.out_dims[k], idx[k]);
        if (k < last) b_.add(run.out_dims[k], idx[k] + 1);
      }
    }
  }

 private:
  int64_t size(int f) const { return m_.factors[static_cast<size_t>(f)].size; }

  // The positions of output dim j where its terms [first, last], read as
  // one mixed-radix digit, step from v - 1 to v, for every value of the
  // dim's more-major terms.
  void add_split(size_t j, size_t first, size_t last, int64_t v) {
    const DimExpr& e = p_.dims[j];
    int64_t digit = 1;
    for (size_t t = first; t <= last; ++t) digit *= size(e.terms[t].factor);
    if (v <= 0 || v >= digit) return;
    int64_t base = e.offset + v * e.terms[last].coef;
    std::vector<int64_t> major(first, 0);
    while (true) {
      int64_t pos = base;
      for (size_t t = 0; t < first; ++t) pos += major[t] * e.terms[t].coef;
      b_.add(j, pos);
      size_t t = first;
      while (t > 0 && ++major[t - 1] == size(e.terms[t - 1].factor)) major[--t] = 0;
      if (t == 0) return;
    }
  }

  // index = c·f + rest + offset, rest over the contracted terms: for each
  // rest, f crosses p at ceil((p - rest - offset) / c), or for c < 0 (a
  // reversed Slice) at floor((offset + rest - p) / -c) + 1.
  void one_pass_factor(const DimExpr& e, const DimTerm& pass, const std::vector<const DimTerm*>& free,
                       const std::vector<int64_t>& points) {
    std::vector<int64_t> rests{0};
    for (const DimTerm* t : free) {
      std::vector<int64_t> next;
      for (int64_t r : rests)
        for (int64_t v = 0; v < size(t->factor); ++v) next.push_back(r + t->coef * v);
      std::sort(next.begin(), next.end());
      next.erase(std::unique(next.begin(), next.end()), next.end());
      if (next.size() > kMaxRests) throw NoRule{};
      rests = std::move(next);
    }
    int64_t c = pass.coef;
    if (c == 0 || rests.empty()) return;  // an empty contracted factor reads nothing
    auto cross = [&](int64_t p, int64_t r) {
      return c > 0 ? ceil_div(p - r - e.offset, c) : floor_div(e.offset + r - p, -c) + 1;
    };
    const Place& at = places_[static_cast<size_t>(pass.factor)];
    auto j = static_cast<size_t>(at.dim);
    // Consecutive rests give consecutive crossings (|c| >= 1): an interval.
    bool interval = rests.back() - rests.front() + 1 == static_cast<int64_t>(rests.size());
    for (int64_t p : points) {
      if (interval) {
        int64_t a = cross(p, rests.front()), z = cross(p, rests.back());
        int64_t lo = std::max<int64_t>(std::min(a, z), 1), hi = std::min(std::max(a, z), size(pass.factor) - 1);
        for (int64_t v = lo; v <= hi; ++v) add_split(j, at.term, at.term, v);
      } else {
        for (int64_t r : rests) add_split(j, at.term, at.term, cross(p, r));
      }
    }
  }

  // A merge of pass factors (a reshape's input dim): the index crosses p
  // where the factors, read lexicographically, pass p's digits v1..vm.
  // Factors that sit next to each other in one output dim form one digit
  // there; each digit but the last non-zero one splits at v and v + 1.
  void merged(const DimExpr& e, const std::vector<int64_t>& points) {
    if (!merge_with_offset(m_, e)) throw NoRule{};
    struct Digit {
      size_t first, last;  // terms of e
      int64_t size = 1;
    };
    std::vector<Digit> digits;
    for (size_t t = 0; t < e.terms.size(); ++t) {
      const Place& at = places_[static_cast<size_t>(e.terms[t].factor)];
      if (!digits.empty()) {
        const Place& prev = places_[static_cast<size_t>(e.terms[t - 1].factor)];
        if (prev.dim == at.dim && prev.term + 1 == at.term) {
          digits.back().last = t;
          digits.back().size *= size(e.terms[t].factor);
          continue;
        }
      }
      digits.push_back({t, t, size(e.terms[t].factor)});
    }
    int64_t total = 1;
    for (const Digit& g : digits) total *= g.size;
    std::vector<int64_t> value(digits.size());
    for (int64_t p : points) {
      int64_t q = p - e.offset;
      if (q <= 0 || q >= total) continue;
      for (size_t k = digits.size(); k-- > 0;) {
        value[k] = q % digits[k].size;
        q /= digits[k].size;
      }
      size_t last = 0;
      for (size_t k = 0; k < digits.size(); ++k)
        if (value[k] != 0) last = k;
      for (size_t k = 0; k <= last; ++k) {
        const Place& at = places_[static_cast<size_t>(e.terms[digits[k].first].factor)];
        const Place& end = places_[static_cast<size_t>(e.terms[digits[k].last].factor)];
        auto j = static_cast<size_t>(at.dim);
        add_split(j, at.term, end.term, value[k]);
        if (k < last) add_split(j, at.term, end.term, value[k] + 1);
      }
    }
  }

  const DimMap& m_;
  const Piece& p_;
  const Shape& out_;
  Builder& b_;
  std::vector<Place> places_;
};

DimSplits node_output_splits(const Graph& g, const Node& n, const DimMap& m, size_t out_index,
                             const std::vector<DimSplits>& vs, int64_t cap) {
  const Shape& out = g.type(n.outputs[out_index]).shape;
  auto in_shape = [&](int slot) -> const Shape& { return g.type(n.inputs[static_cast<size_t>(slot)]).shape; };
  auto in_splits = [&](int slot) -> const DimSplits& { return vs[static_cast<size_t>(n.inputs[static_cast<size_t>(slot)])]; };
  Builder b(out, cap);
  for (const Piece& p : m.outputs.at(out_index)) {
    std::optional<std::vector<FlatRun>> runs =
        flat_runs(n, m, p, p.reads.empty() ? Shape{} : in_shape(p.reads[0].input), out);
    if (!runs) throw NoRule{};
    PieceSplits ps(m, p, out, b);
    ps.output_dims();
    for (const Read& r : p.reads) ps.read(r, in_shape(r.input), in_splits(r.input), n);
    for (const FlatRun& run : *runs) ps.flat_run(run, in_shape(0), in_splits(0));
  }
  return b.done();
}

// A node whose inputs are all known data (constants, or nodes folded
// before) is known data too: its splits are where its values change. This
// covers what reads no input element but is still fixed (ConstantOfShape,
// Range), whose maps say only "positional".
bool fold(const Graph& g, const Node& n, std::vector<std::optional<RefTensor<Zp>>>& data, std::vector<DimSplits>& vs,
          int64_t cap) {
  const OpDef& def = op_def(n.kind);
  if (def.is_collective() || !def.eval_zp) return false;
  EvalArgs<Zp> args{n, {}, nullptr, nullptr};
  for (ValueId in : n.inputs) {
    if (in == kNoValue) {
      args.inputs.push_back(nullptr);
      continue;
    }
    std::optional<RefTensor<Zp>>& d = data[static_cast<size_t>(in)];
    if (!d && g.value(in).constant) d = to_ref<Zp>(*g.value(in).constant);
    if (!d) return false;
    args.inputs.push_back(&*d);
  }
  std::vector<RefTensor<Zp>> outs(n.outputs.size());
  for (size_t o = 0; o < outs.size(); ++o) outs[o].type = g.type(n.outputs[o]);
  args.outputs = &outs;
  try {
    def.eval_zp(args);
  } catch (const Error&) {
    return false;
  }
  for (size_t o = 0; o < outs.size(); ++o) {
    vs[static_cast<size_t>(n.outputs[o])] = constant_splits(outs[o], cap);
    data[static_cast<size_t>(n.outputs[o])] = std::move(outs[o]);
  }
  return true;
}

}  // namespace

std::optional<std::vector<DimSplits>> split_points(const Graph& g, int64_t max_per_dim) {
  std::vector<DimSplits> vs(static_cast<size_t>(g.num_values()));
  std::vector<std::optional<RefTensor<Zp>>> data(static_cast<size_t>(g.num_values()));
  try {
    for (ValueId v = 0; v < g.num_values(); ++v) {
      const Value& val = g.value(v);
      if (val.constant) vs[static_cast<size_t>(v)] = constant_splits(to_ref<Zp>(*val.constant), max_per_dim);
      else vs[static_cast<size_t>(v)].assign(val.type.shape.size(), {});
    }
    for (NodeId id : g.topo_order()) {
      const Node& n = g.node(id);
      try {
        if (op_def(n.kind).is_collective()) throw NoRule{};  // reads other ranks' data
        DimMap m = dim_map(g, n);
        for (size_t o = 0; o < n.outputs.size(); ++o)
          vs[static_cast<size_t>(n.outputs[o])] = node_output_splits(g, n, m, o, vs, max_per_dim);
      } catch (const NoRule&) {
        if (!fold(g, n, data, vs, max_per_dim)) throw;
      }
    }
  } catch (const NoRule&) {
    return std::nullopt;
  }
  return vs;
}

int64_t grid_box_count(const Shape& shape, const DimSplits& splits) {
  int64_t n = shape_numel(shape) == 0 ? 0 : 1;
  for (size_t d = 0; d < shape.size(); ++d) n *= static_cast<int64_t>(splits[d].size()) + 1;
  return n;
}

std::vector<Box> grid_boxes(const Shape& shape, const DimSplits& splits) {
  std::vector<Box> out;
  if (shape_numel(shape) == 0) return out;
  std::vector<std::vector<int64_t>> edges(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    edges[d].push_back(0);
    edges[d].insert(edges[d].end(), splits[d].begin(), splits[d].end());
    edges[d].push_back(shape[d]);
  }
  std::vector<size_t> at(shape.size(), 0);
  while (true) {
    Box box;
    for (size_t d = 0; d < shape.size(); ++d) {
      box.lo.push_back(edges[d][at[d]]);
      box.hi.push_back(edges[d][at[d] + 1]);
    }
    out.push_back(std::move(box));
    size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++at[d] + 1 < edges[d].size()) break;
      at[d] = 0;
      if (d == 0) return out;
    }
    if (shape.empty()) return out;
  }
}

std::vector<std::vector<int64_t>> box_samples(const Box& box) {
  std::set<std::vector<int64_t>> pts;
  size_t r = box.lo.size();
  for (uint64_t mask = 0; mask < (uint64_t{1} << r); ++mask) {
    std::vector<int64_t> p(r);
    for (size_t d = 0; d < r; ++d) p[d] = (mask >> d) & 1 ? box.hi[d] - 1 : box.lo[d];
    pts.insert(std::move(p));
  }
  for (size_t d = 0; d < r; ++d)
    if (box.hi[d] - box.lo[d] > 1) {
      std::vector<int64_t> p = box.lo;
      ++p[d];
      pts.insert(std::move(p));
    }
  return {pts.begin(), pts.end()};
}

}  // namespace tessera::verifier
