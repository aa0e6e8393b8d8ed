#include "mutator/sharding/halo_seams.h"

#include <algorithm>
#include <map>

#include "graph/error.h"
#include "verifier/multilinear.h"

namespace tessera::mutator {
namespace {

// A 0/1 tensor of x's rank, 1 at the rows `keep` of `dim` and size 1 on
// every other dim (broadcast by Mul).
Tensor row_mask(const TensorType& x, int64_t dim, Band keep) {
  Shape shape(x.shape.size(), 1);
  shape[static_cast<size_t>(dim)] = x.shape[static_cast<size_t>(dim)];
  std::vector<double> v(static_cast<size_t>(shape[static_cast<size_t>(dim)]), 0.0);
  for (int64_t i = std::max<int64_t>(0, keep.lo); i < std::min<int64_t>(keep.hi, static_cast<int64_t>(v.size())); ++i)
    v[static_cast<size_t>(i)] = 1.0;
  return Tensor::from_doubles(x.dtype, shape, v);
}

Attrs ints_attrs(std::initializer_list<std::pair<const char*, std::vector<int64_t>>> kv) {
  Attrs a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

}  // namespace

Graph chain_program(const Graph& g, const std::vector<NodeId>& chain, int64_t in_dim, const std::vector<Band>& rows,
                    int64_t out_dim) {
  TESSERA_CHECK(!chain.empty(), "an empty chain");
  Graph out;
  std::map<ValueId, ValueId> outside;  // values read from outside the chain -> their copy
  ValueId x0 = g.node(chain.front()).inputs[0];
  outside[x0] = out.add_input(g.value(x0).name, g.type(x0));
  std::vector<ValueId> produced;
  for (NodeId id : chain) produced.insert(produced.end(), g.node(id).outputs.begin(), g.node(id).outputs.end());
  for (NodeId id : chain)
    for (ValueId v : g.node(id).inputs) {
      if (v == kNoValue || outside.count(v) || std::count(produced.begin(), produced.end(), v)) continue;
      outside[v] = g.value(v).is_constant() ? out.add_constant(g.value(v).name, *g.value(v).constant)
                                            : out.add_input(g.value(v).name, g.type(v));
    }
  // One copy of the chain reading `x`; its last output 0.
  auto copy = [&](ValueId x) {
    std::map<ValueId, ValueId> map = outside;
    map[x0] = x;
    for (NodeId id : chain) {
      const Node& n = g.node(id);
      std::vector<ValueId> ins;
      for (ValueId v : n.inputs) ins.push_back(v == kNoValue ? kNoValue : map.at(v));
      NodeId made = out.add_node(n.kind, ins, n.attrs);
      for (size_t i = 0; i < n.outputs.size(); ++i) map[n.outputs[i]] = out.node(made).outputs[i];
    }
    return map.at(g.node(chain.back()).outputs[0]);
  };
  if (rows.empty()) {
    out.set_outputs({copy(outside[x0])});
    return out;
  }
  int64_t out_rows = g.type(g.node(chain.back()).outputs[0]).shape.at(static_cast<size_t>(out_dim));
  std::vector<Band> bands = row_bands(out_rows, static_cast<int64_t>(rows.size()));
  std::vector<ValueId> pieces;
  for (size_t r = 0; r < rows.size(); ++r) {
    ValueId mask = out.add_constant("band_mask_" + std::to_string(r), row_mask(g.type(x0), in_dim, rows[r]));
    ValueId y = copy(out.add(OpKind::kMul, {outside[x0], mask}));
    pieces.push_back(out.add(OpKind::kSlice, {y},
                             ints_attrs({{"starts", {bands[r].lo}}, {"ends", {bands[r].hi}}, {"axes", {out_dim}},
                                         {"steps", {1}}})));
  }
  Attrs cat;
  cat.set("axis", out_dim);
  out.set_outputs({out.add(OpKind::kConcat, pieces, cat)});
  return out;
}

std::optional<SeamHalo> halo_from_seams(const Graph& g, const std::vector<NodeId>& chain, int64_t dim, int64_t n,
                                        int64_t thin) {
  int64_t in_dim = -1;
  const TensorType& x = g.type(g.node(chain.front()).inputs[0]);
  if (!chain_rows_read(g, chain, dim, Band{0, 1}, &in_dim)) return std::nullopt;
  std::vector<Band> own = row_bands(x.shape.at(static_cast<size_t>(in_dim)), n);
  int64_t out_rows = g.type(g.node(chain.back()).outputs[0]).shape.at(static_cast<size_t>(dim));
  std::vector<Band> out_bands = row_bands(out_rows, n);
  Graph whole = chain_program(g, chain);
  SeamHalo s;
  s.split = verifier::check_equivalence(whole, chain_program(g, chain, in_dim, own, dim));
  // The seam rows of each rank: the rows of the differing boxes in its band.
  s.seams.resize(static_cast<size_t>(n));
  for (const verifier::OutputRegion& region : s.split.differing)
    for (const verifier::Box& box : region.boxes)
      for (int64_t r = 0; r < n; ++r) {
        Band b = out_bands[static_cast<size_t>(r)];
        Band seam{std::max(b.lo, box.lo[static_cast<size_t>(dim)]), std::min(b.hi, box.hi[static_cast<size_t>(dim)])};
        if (seam.size() > 0) s.seams[static_cast<size_t>(r)].push_back(seam);
      }
  // The halo: the rows the seams read beyond the rank's own band.
  std::vector<Band> corrected;
  for (int64_t r = 0; r < n; ++r) {
    RankHalo h;
    h.out = out_bands[static_cast<size_t>(r)];
    h.own = own[static_cast<size_t>(r)];
    h.needed = h.own;
    for (const Band& seam : s.seams[static_cast<size_t>(r)]) {
      int64_t d = -1;
      std::optional<Band> read = chain_rows_read(g, chain, dim, seam, &d);
      if (!read) return std::nullopt;
      h.needed = {std::min(h.needed.lo, read->lo), std::max(h.needed.hi, read->hi)};
    }
    h.from_prev = h.own.lo - h.needed.lo;
    h.from_next = h.needed.hi - h.own.hi;
    Band with_halo{h.own.lo - std::max<int64_t>(0, h.from_prev - thin), h.own.hi + std::max<int64_t>(0, h.from_next - thin)};
    corrected.push_back(with_halo);
    s.ranks.push_back(h);
  }
  s.corrected = verifier::check_equivalence(whole, chain_program(g, chain, in_dim, corrected, dim));
  return s;
}

}  // namespace tessera::mutator
