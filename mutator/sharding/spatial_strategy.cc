#include "mutator/sharding/spatial_strategy.h"

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/halo_rows.h"
#include "mutator/sharding/seam_halo_memo.h"
#include "mutator/sharding/spatial.h"

namespace tessera::mutator {
namespace {

// What the band of one rank reads: its own rows of the input, its rows of
// the output, the input rows those read (want), the rows the windows reach,
// padding included (reach), and the halo the verifier's seams ask for from
// the previous and the next rank (seam_halo_memo.h).
struct BandRead {
  Band own, out, want, reach;
  int64_t seam_before = 0, seam_after = 0;
  int64_t before() const { return seam_before; }
  int64_t after() const { return seam_after; }
  // The halo of the formula (want beyond own), the seams' cross-check.
  int64_t formula_before() const { return std::max<int64_t>(0, own.lo - want.lo); }
  int64_t formula_after() const { return std::max<int64_t>(0, want.hi - own.hi); }
  Band have() const { return {own.lo - before(), own.hi + after()}; }
};

// Per coordinate of an axis of n ranks, the band each reads along `dim`
// (bands as the Sharding's blocks: block_start, uneven where n does not
// divide the rows); nullopt where the op has no window along the dim, a
// rank would hold no rows, a halo reaches past the neighbour's band, or the
// verifier's seams do not give the formula's halo with a corrected split
// that passes its test.
std::optional<std::vector<BandRead>> band_reads(const Graph& g, NodeId id, int64_t dim, int64_t n) {
  const Node& node = g.node(id);
  const Shape& in = g.type(node.inputs[0]).shape;
  const Shape& out = g.type(node.outputs[0]).shape;
  if (dim < 2 || dim >= static_cast<int64_t>(in.size()) || dim >= static_cast<int64_t>(out.size())) return std::nullopt;
  int64_t hin = in[static_cast<size_t>(dim)], hout = out[static_cast<size_t>(dim)];
  if (n < 2 || hin < n || hout < n) return std::nullopt;
  // Weights and biases are not indexed by the rows of a Conv or a pool.
  std::optional<WindowRows> w = window_rows_of(node, dim, /*ceil_mode_too=*/true);
  if (!w) return std::nullopt;
  std::vector<BandRead> reads;
  for (int64_t c = 0; c < n; ++c) {
    BandRead r;
    r.own = {block_start(hin, n, c), block_start(hin, n, c + 1)};
    r.out = {block_start(hout, n, c), block_start(hout, n, c + 1)};
    // The window's rows (graph/halo_rows.h, the geometry the runtime and
    // the collective model read): what the band of output rows reaches,
    // padding included, and what of it lies in the input.
    RowRange reach = w->reached({r.out.lo, r.out.hi});
    r.reach = {reach.lo, reach.hi};
    r.want = {std::max<int64_t>(0, reach.lo), std::min(hin, reach.hi)};
    if (r.want.size() == 0) return std::nullopt;
    reads.push_back(r);
  }
  for (int64_t c = 0; c < n; ++c) {  // a halo from the rank beyond the neighbour: not offered
    const BandRead& r = reads[static_cast<size_t>(c)];
    if ((c > 0 && r.formula_before() > reads[static_cast<size_t>(c - 1)].own.size()) ||
        (c + 1 < n && r.formula_after() > reads[static_cast<size_t>(c + 1)].own.size()))
      return std::nullopt;
  }
  // The halo is the one the verifier finds at the seams of the bands run as
  // whole images, on a surrogate of the window; the formula cross-checks it.
  std::optional<WindowGeometry> geometry = window_geometry(g, id, dim, n);
  if (!geometry) return std::nullopt;
  std::optional<std::vector<std::pair<int64_t, int64_t>>> seams = seam_halo_rows(*geometry);
  if (!seams || seams->size() != reads.size()) return std::nullopt;
  for (size_t c = 0; c < reads.size(); ++c) {
    BandRead& r = reads[c];
    std::tie(r.seam_before, r.seam_after) = (*seams)[c];
    if (r.seam_before != r.formula_before() || r.seam_after != r.formula_after()) return std::nullopt;
  }
  return reads;
}

// Rank c's band of the op: receive the halo, cut the rows read, run the op
// with the band's padding. nullopt when the op's padding cannot be set per
// band or the local op does not make the band's rows.
std::optional<ValueId> emit_band(const Node& node, int64_t dim, const std::string& axis_name,
                                 const std::vector<BandRead>& reads, int64_t c, Graph& local,
                                 const std::vector<ValueId>& ins) {
  const BandRead& me = reads[static_cast<size_t>(c)];
  auto n = static_cast<int64_t>(reads.size());
  std::vector<int64_t> before, after;
  bool halo = false, cut = false;
  for (const BandRead& r : reads) {
    before.push_back(r.before());
    after.push_back(r.after());
    halo |= r.before() > 0 || r.after() > 0;
    cut |= r.have() != r.want;
  }
  ValueId cur = ins[0];
  if (halo) {
    Attrs a;
    a.set("mesh_axis", axis_name);
    a.set("group_size", n);
    a.set("axis", dim);
    a.set("before", before);
    a.set("after", after);
    a.set("coordinate", c);
    cur = local.add(OpKind::kHaloExchange, {cur}, a, node.name + "/halo");
  }
  if (cut) {
    Band have = me.have();
    Attrs s;
    s.set("starts", std::vector<int64_t>{me.want.lo - have.lo});
    s.set("ends", std::vector<int64_t>{me.want.hi - have.lo});
    s.set("axes", std::vector<int64_t>{dim});
    s.set("steps", std::vector<int64_t>{1});
    cur = local.add(OpKind::kSlice, {cur}, s, node.name + "/band");
  }
  Attrs attrs = node.attrs;
  if (attrs.has("pads")) {
    // (No schema has auto_pad: import turns it into pads.)
    std::vector<int64_t> pads = node.kind == OpKind::kPad ? PadAttrs::of(node).pads : WindowAttrs::of(node).pads;
    size_t spatial = pads.size() / 2, at = static_cast<size_t>(dim - 2);
    if (at >= spatial) return std::nullopt;
    pads[at] = me.want.lo - me.reach.lo;
    pads[spatial + at] = me.reach.hi - me.want.hi;
    attrs.set("pads", pads);
    if (attrs.has("ceil_mode")) attrs.set("ceil_mode", int64_t{0});
  } else if (me.reach != me.want) {
    return std::nullopt;  // reads padding, but has no padding of its own to set per band
  }
  std::vector<ValueId> local_ins = ins;
  local_ins[0] = cur;
  NodeId made = local.add_node(node.kind, local_ins, attrs, node.name);
  ValueId y = local.node(made).outputs[0];
  if (local.type(y).shape[static_cast<size_t>(dim)] != me.out.size()) return std::nullopt;
  return y;
}

std::vector<ValueId> emit_spatial(const LocalOp& op, int axis) {
  NodeId id = op.global.value(op.node.outputs[0]).producer;
  int64_t dim = op.strategy.axes[static_cast<size_t>(axis)].inputs[0].dim;
  const DeviceMesh::Axis& a = op.mesh.axes()[static_cast<size_t>(axis)];
  std::optional<std::vector<BandRead>> reads = band_reads(op.global, id, dim, a.size);
  TESSERA_CHECK(reads, op.node.name << ": no spatial split of dim " << dim << " over " << a.name);
  int64_t c = op.mesh.coords(op.rank)[static_cast<size_t>(axis)];
  std::optional<ValueId> y = emit_band(op.node, dim, a.name, *reads, c, op.local, op.inputs);
  TESSERA_CHECK(y, op.node.name << ": its band of dim " << dim << " on coordinate " << c << " cannot be computed");
  return {*y};
}

// Whether every rank's local op makes its band (emitted on scratch graphs
// of the local types).
bool every_band_computes(const Graph& g, const Node& node, int64_t dim, const std::vector<BandRead>& reads) {
  for (size_t c = 0; c < reads.size(); ++c) {
    Graph scratch;
    std::vector<ValueId> ins;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] == kNoValue) {
        ins.push_back(kNoValue);
        continue;
      }
      TensorType t = g.type(node.inputs[i]);
      if (i == 0) t.shape[static_cast<size_t>(dim)] = reads[c].own.size();
      ins.push_back(scratch.add_input("in" + std::to_string(i), t));
    }
    try {
      // The exchange's group is a scratch axis here: only shapes matter.
      if (!emit_band(node, dim, "scratch", reads, static_cast<int64_t>(c), scratch, ins)) return false;
    } catch (const Error&) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<std::vector<std::pair<int64_t, int64_t>>> spatial_halo_rows(const Graph& g, NodeId id, int64_t dim,
                                                                          int64_t n) {
  std::optional<std::vector<BandRead>> reads = band_reads(g, id, dim, n);
  if (!reads) return std::nullopt;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const BandRead& r : *reads) out.emplace_back(r.before(), r.after());
  return out;
}

bool is_spatial(const AxisStrategy& s) { return s.kind == AxisStrategy::Kind::kExplicit && s.emit == &emit_spatial; }

std::vector<Strategy> spatial_strategies(const Graph& g, const Node& n, const DeviceMesh& mesh) {
  std::vector<Strategy> out;
  if (!is_window_layer(n.kind) || n.outputs.size() != 1 || n.inputs.empty() || mesh.num_devices() < 2) return out;
  NodeId id = g.value(n.outputs[0]).producer;
  const TensorType& x = g.type(n.inputs[0]);
  for (size_t axis = 0; axis < mesh.axes().size(); ++axis) {
    int64_t size = mesh.axes()[axis].size;
    for (int64_t dim = 2; dim < x.rank(); ++dim) {
      std::optional<std::vector<BandRead>> reads = band_reads(g, id, dim, size);
      if (!reads || !every_band_computes(g, n, dim, *reads)) continue;
      int64_t deepest = 0;
      for (const BandRead& r : *reads) deepest = std::max(deepest, r.before() + r.after());
      Strategy s;
      s.inputs.assign(n.inputs.size(), Sharding{});
      s.outputs.assign(1, Sharding{});
      for (size_t a = 0; a < mesh.axes().size(); ++a) {
        AxisStrategy as;
        as.inputs.assign(n.inputs.size(), Placement::replicate());
        as.outputs.assign(1, Placement::replicate());
        as.name = "replicate";
        if (a == axis) {
          as.kind = AxisStrategy::Kind::kExplicit;
          as.inputs[0] = Placement::shard(dim);
          as.outputs[0] = Placement::shard(dim);
          as.name = "spatial dim " + std::to_string(dim);
          as.emit = &emit_spatial;
          as.uneven = x.shape[static_cast<size_t>(dim)] % size != 0 ||
                      g.type(n.outputs[0]).shape[static_cast<size_t>(dim)] % size != 0;
          as.halo_bytes = deepest * (x.numel() / x.shape[static_cast<size_t>(dim)]) *
                          static_cast<int64_t>(dtype_size(x.dtype));
        }
        for (size_t i = 0; i < n.inputs.size(); ++i) s.inputs[i].placements.push_back(as.inputs[i]);
        s.outputs[0].placements.push_back(as.outputs[0]);
        s.axes.push_back(std::move(as));
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace tessera::mutator
