#include "mutator/sharding/spatial.h"

#include <algorithm>
#include <sstream>

#include "graph/dim_map.h"
#include "graph/dtype.h"
#include "graph/error.h"

namespace tessera::mutator {

std::vector<Band> row_bands(int64_t size, int64_t n) {
  if (n < 1 || n > size)
    throw Error(ErrorKind::kUsage, "cannot cut " + std::to_string(size) + " rows into " + std::to_string(n) + " bands");
  std::vector<Band> bands;  // the Sharding's uneven blocks, so that the one-chain tool and the search agree
  for (int64_t r = 0; r < n; ++r) bands.push_back({block_start(size, n, r), block_start(size, n, r + 1)});
  return bands;
}

namespace {

// The factor a dim is, when it is exactly one pass factor (coefficient 1).
std::optional<int> single_factor(const DimExpr& e) {
  if (e.form != DimForm::kAffine || e.terms.size() != 1 || e.offset != 0 || e.terms[0].coef != 1) return std::nullopt;
  return e.terms[0].factor;
}

bool mentions(const DimExpr& e, int factor) {
  return std::any_of(e.terms.begin(), e.terms.end(), [&](const DimTerm& t) { return t.factor == factor; });
}

// [min, max] of an affine dim over the output factor's rows and the full
// range of every other (contracted) factor; false if another pass factor
// shares the dim (a merge) or the dim is not affine.
bool affine_extent(const DimMap& m, const DimExpr& e, int factor, Band rows, int64_t& lo, int64_t& hi) {
  if (e.form != DimForm::kAffine) return false;
  lo = hi = e.offset;
  for (const DimTerm& t : e.terms) {
    int64_t from = 0, to = m.factors[static_cast<size_t>(t.factor)].size - 1;
    if (t.factor == factor) {
      from = rows.lo;
      to = rows.hi - 1;
    } else if (m.factors[static_cast<size_t>(t.factor)].kind == FactorKind::kPass) {
      return false;
    }
    lo += std::min(t.coef * from, t.coef * to);
    hi += std::max(t.coef * from, t.coef * to);
  }
  return true;
}

}  // namespace

namespace {

std::optional<Band> window_rows(const Graph& g, NodeId id, int64_t out_dim, Band rows, int slot, int64_t* in_dim,
                                bool clip) {
  const Node& node = g.node(id);
  DimMap m = dim_map(g, node);
  *in_dim = -1;
  if (m.outputs.empty() || m.outputs[0].size() != 1) return std::nullopt;
  const Piece& piece = m.outputs[0][0];
  if (out_dim < 0 || out_dim >= static_cast<int64_t>(piece.dims.size())) return std::nullopt;
  std::optional<int> factor = single_factor(piece.dims[static_cast<size_t>(out_dim)]);
  if (!factor) return std::nullopt;
  const Shape& in_shape = g.type(node.inputs[static_cast<size_t>(slot)]).shape;
  std::optional<Band> read;
  for (const Read& r : piece.reads) {
    if (r.input != slot) continue;
    for (size_t d = 0; d < r.dims.size(); ++d) {
      if (!mentions(r.dims[d], *factor)) continue;
      if (*in_dim >= 0 && *in_dim != static_cast<int64_t>(d)) return std::nullopt;  // the rows reach two dims
      *in_dim = static_cast<int64_t>(d);
      int64_t lo = 0, hi = 0;
      if (!affine_extent(m, r.dims[d], *factor, rows, lo, hi)) return std::nullopt;
      int64_t size = in_shape[d];
      if (!clip) {
        Band b{lo, hi + 1};
        read = read ? Band{std::min(read->lo, b.lo), std::max(read->hi, b.hi)} : b;
        continue;
      }
      if (r.dims[d].guarded) {
        lo = std::max<int64_t>(lo, 0);
        hi = std::min<int64_t>(hi, size - 1);
      }
      TESSERA_CHECK(lo >= 0 && hi < size, "an unguarded read leaves its input in " << op_name(node.kind));
      Band b{lo, hi + 1};
      read = read ? Band{std::min(read->lo, b.lo), std::max(read->hi, b.hi)} : b;
    }
  }
  if (*in_dim < 0) return Band{};
  return read;
}

}  // namespace

std::optional<Band> rows_read(const Graph& g, NodeId n, int64_t out_dim, Band rows, int slot, int64_t* in_dim) {
  return window_rows(g, n, out_dim, rows, slot, in_dim, true);
}

std::optional<Band> rows_reached(const Graph& g, NodeId n, int64_t out_dim, Band rows, int slot, int64_t* in_dim) {
  return window_rows(g, n, out_dim, rows, slot, in_dim, false);
}

std::optional<Band> chain_rows_read(const Graph& g, const std::vector<NodeId>& chain, int64_t dim, Band rows,
                                    int64_t* in_dim) {
  *in_dim = dim;
  for (size_t i = chain.size(); i-- > 0;) {
    const Node& node = g.node(chain[i]);
    int64_t read_dim = -1;
    std::optional<Band> read = rows_read(g, chain[i], *in_dim, rows, 0, &read_dim);
    if (!read || read_dim < 0) return std::nullopt;
    for (size_t s = 1; s < node.inputs.size(); ++s) {  // weights and biases: not indexed by the rows
      if (node.inputs[s] == kNoValue) continue;
      int64_t other = -1;
      if (!rows_read(g, chain[i], *in_dim, rows, static_cast<int>(s), &other) || other >= 0) return std::nullopt;
    }
    rows = *read;
    *in_dim = read_dim;
  }
  return rows;
}

int64_t SpatialHalo::halo_rows() const {
  int64_t rows = 0;
  for (const RankHalo& r : ranks) rows += r.from_prev + r.from_next;
  return rows;
}

std::string SpatialHalo::str() const {
  std::ostringstream os;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankHalo& h = ranks[r];
    os << (r ? ", " : "") << "rank " << r << " rows [" << h.own.lo << "," << h.own.hi << ") +" << h.from_prev << "/+"
       << h.from_next;
  }
  return os.str();
}

std::optional<SpatialHalo> spatial_halo(const Graph& g, const std::vector<NodeId>& chain, int64_t dim, int64_t n) {
  TESSERA_CHECK(!chain.empty(), "an empty chain has no halo");
  const Node& last = g.node(chain.back());
  int64_t out_rows = g.type(last.outputs[0]).shape.at(static_cast<size_t>(dim));
  std::vector<Band> out_bands = row_bands(out_rows, n);
  SpatialHalo h;
  h.out_dim = dim;
  for (int64_t r = 0; r < n; ++r) {
    RankHalo rank;
    rank.out = out_bands[static_cast<size_t>(r)];
    // Rows of an intermediate output beyond its own band are recomputed.
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      std::vector<NodeId> after(chain.begin() + static_cast<std::ptrdiff_t>(i) + 1, chain.end());
      int64_t at_dim = -1;
      std::optional<Band> rows = chain_rows_read(g, after, dim, rank.out, &at_dim);
      if (!rows) return std::nullopt;
      int64_t size = g.type(g.node(chain[i]).outputs[0]).shape[static_cast<size_t>(at_dim)];
      if (size < n) return std::nullopt;
      Band own = row_bands(size, n)[static_cast<size_t>(r)];
      int64_t inside = std::max<int64_t>(0, std::min(rows->hi, own.hi) - std::max(rows->lo, own.lo));
      rank.recomputed_rows += rows->size() - inside;
    }
    int64_t at_dim = -1;
    std::optional<Band> needed = chain_rows_read(g, chain, dim, rank.out, &at_dim);
    if (!needed) return std::nullopt;
    Band rows = *needed;
    const TensorType& in = g.type(g.node(chain.front()).inputs[0]);
    int64_t in_rows = in.shape[static_cast<size_t>(at_dim)];
    if (in_rows < n) return std::nullopt;
    h.in_dim = at_dim;
    h.bytes_per_row = in.numel() / in_rows * static_cast<int64_t>(dtype_size(in.dtype));
    rank.own = row_bands(in_rows, n)[static_cast<size_t>(r)];
    rank.needed = rows;
    rank.from_prev = std::max<int64_t>(0, rank.own.lo - rows.lo);
    rank.from_next = std::max<int64_t>(0, rows.hi - rank.own.hi);
    h.ranks.push_back(rank);
  }
  for (size_t r = 0; r < h.ranks.size(); ++r) {
    if (h.ranks[r].from_prev > (r > 0 ? h.ranks[r - 1].own.size() : 0)) h.neighbours_only = false;
    if (h.ranks[r].from_next > (r + 1 < h.ranks.size() ? h.ranks[r + 1].own.size() : 0)) h.neighbours_only = false;
  }
  return h;
}

std::vector<size_t> every_k_layers(size_t chain_size, int64_t k) {
  TESSERA_CHECK(k >= 1, "an exchange every " << k << " layers");
  std::vector<size_t> starts;
  for (size_t end = chain_size; end > 0;) {
    size_t begin = end > static_cast<size_t>(k) ? end - static_cast<size_t>(k) : 0;
    starts.insert(starts.begin(), begin);
    end = begin;
  }
  return starts;
}

bool is_window_layer(OpKind k) { return k == OpKind::kConv || k == OpKind::kMaxPool || k == OpKind::kAveragePool; }

int64_t window_layers(const Graph& g, const std::vector<NodeId>& chain) {
  return std::count_if(chain.begin(), chain.end(), [&](NodeId n) { return is_window_layer(g.node(n).kind); });
}

std::vector<size_t> every_k_window_layers(const Graph& g, const std::vector<NodeId>& chain, int64_t k) {
  TESSERA_CHECK(k >= 1, "an exchange every " << k << " window layers");
  TESSERA_CHECK(!chain.empty() && is_window_layer(g.node(chain.front()).kind), "a chain starting with a window op");
  std::vector<size_t> starts;
  int64_t seen = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    if (!is_window_layer(g.node(chain[i]).kind)) continue;
    if (seen % k == 0) starts.push_back(i);
    ++seen;
  }
  return starts;
}

std::optional<std::vector<SpatialHalo>> spatial_halos_at(const Graph& g, const std::vector<NodeId>& chain,
                                                         int64_t dim, int64_t n, const std::vector<size_t>& starts) {
  TESSERA_CHECK(!starts.empty() && starts.front() == 0 && std::is_sorted(starts.begin(), starts.end()) &&
                    std::adjacent_find(starts.begin(), starts.end()) == starts.end() && starts.back() < chain.size(),
                "segments of a chain of " << chain.size() << " layers start at 0, increasing, within it");
  // Segments from the end: the dim at each segment's output is the dim its
  // successor reads.
  std::vector<SpatialHalo> out;
  int64_t at_dim = dim;
  size_t end = chain.size();
  for (size_t s = starts.size(); s-- > 0;) {
    std::vector<NodeId> segment(chain.begin() + static_cast<std::ptrdiff_t>(starts[s]),
                                chain.begin() + static_cast<std::ptrdiff_t>(end));
    std::optional<SpatialHalo> h = spatial_halo(g, segment, at_dim, n);
    if (!h) return std::nullopt;
    at_dim = h->in_dim;
    out.insert(out.begin(), *h);
    end = starts[s];
  }
  return out;
}

std::optional<std::vector<SpatialHalo>> spatial_halos_every(const Graph& g, const std::vector<NodeId>& chain,
                                                            int64_t dim, int64_t n, int64_t k) {
  return spatial_halos_at(g, chain, dim, n, every_k_layers(chain.size(), k));
}

}  // namespace tessera::mutator
