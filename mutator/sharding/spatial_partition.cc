#include "mutator/sharding/spatial_partition.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <random>

#include "cost/plan_cost.h"
#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/interpreter.h"
#include "mutator/sharding/halo_seams.h"

namespace tessera::mutator {
namespace {

// Rows `b` of t along `dim`.
Tensor slice_rows(const Tensor& t, int64_t dim, Band b) {
  Shape shape = t.type().shape;
  int64_t rows = shape[static_cast<size_t>(dim)], outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) outer *= shape[static_cast<size_t>(d)];
    if (d > dim) inner *= shape[static_cast<size_t>(d)];
  }
  shape[static_cast<size_t>(dim)] = b.size();
  Tensor out(t.type().dtype, shape);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < b.size(); ++r)
      for (int64_t i = 0; i < inner; ++i)
        out.set_double((o * b.size() + r) * inner + i, t.get_double((o * rows + b.lo + r) * inner + i));
  return out;
}

// A layer of rank r: reads rows `have` of its input (dim in_dim), computes
// rows `rows` of its output. Slices the input to what the band reads and
// gives a window op the padding of its band. False when it cannot.
// `slice`: cut the input even where the band reads all of it (every rank's
// program has the same nodes, so that the ranks run in lockstep); *sliced
// says whether this rank needed the cut.
bool add_local_layer(const Graph& g, NodeId id, int64_t out_dim, Band rows, Graph& local, ValueId& cur, Band& have,
                     const std::map<ValueId, ValueId>& weights, bool slice, bool* sliced) {
  const Node& node = g.node(id);
  int64_t in_dim = -1, d = -1;
  std::optional<Band> want = rows_read(g, id, out_dim, rows, 0, &in_dim);
  std::optional<Band> reach = rows_reached(g, id, out_dim, rows, 0, &d);
  if (!want || !reach || in_dim < 0 || want->lo < have.lo || want->hi > have.hi) return false;
  *sliced = *want != have;
  if (*sliced || slice) {
    Attrs s;
    s.set("starts", std::vector<int64_t>{want->lo - have.lo});
    s.set("ends", std::vector<int64_t>{want->hi - have.lo});
    s.set("axes", std::vector<int64_t>{in_dim});
    s.set("steps", std::vector<int64_t>{1});
    cur = local.add(OpKind::kSlice, {cur}, s, node.name + "/band");
  }
  Attrs attrs = node.attrs;
  if (attrs.has("pads")) {
    // (No schema has auto_pad: import turns it into pads.)
    std::vector<int64_t> pads = node.kind == OpKind::kPad ? PadAttrs::of(node).pads : WindowAttrs::of(node).pads;
    size_t spatial = pads.size() / 2, at = static_cast<size_t>(in_dim - 2);
    if (in_dim < 2 || at >= spatial) return false;
    pads[at] = want->lo - reach->lo;
    pads[spatial + at] = reach->hi - want->hi;
    attrs.set("pads", pads);
    if (attrs.has("ceil_mode")) attrs.set("ceil_mode", int64_t{0});
  } else if (*reach != *want) {
    return false;  // reads padding, but has no padding of its own to set
  }
  std::vector<ValueId> ins{cur};
  for (size_t i = 1; i < node.inputs.size(); ++i)
    ins.push_back(node.inputs[i] == kNoValue ? kNoValue : weights.at(node.inputs[i]));
  NodeId made = local.add_node(node.kind, ins, attrs, node.name);
  cur = local.node(made).outputs[0];
  TESSERA_CHECK(local.type(cur).shape[static_cast<size_t>(out_dim)] == rows.size(),
                "the band of " << node.name << " computes " << local.type(cur).shape[static_cast<size_t>(out_dim)]
                               << " rows, not " << rows.size());
  have = rows;
  return true;
}

}  // namespace

int64_t SpatialPlan::halo_bytes() const {
  int64_t b = 0;
  for (const SpatialHalo& h : exchanges) b += h.halo_bytes();
  return b;
}

std::optional<SpatialPlan> spatial_plan(const Graph& g, const std::vector<NodeId>& chain, int64_t dim,
                                        const DeviceMesh& mesh, int64_t k) {
  return spatial_plan_at(g, chain, dim, mesh, every_k_layers(chain.size(), k == 0 ? static_cast<int64_t>(chain.size()) : k));
}

std::optional<SpatialPlan> spatial_plan_at(const Graph& g, const std::vector<NodeId>& chain, int64_t dim,
                                           const DeviceMesh& mesh, const std::vector<size_t>& starts) {
  TESSERA_CHECK(mesh.axes().size() == 1, "a spatial plan over the one axis of a mesh, not " << mesh.str());
  int64_t n = mesh.axes()[0].size;
  std::optional<std::vector<SpatialHalo>> segments = spatial_halos_at(g, chain, dim, n, starts);
  if (!segments) return std::nullopt;
  for (const SpatialHalo& s : *segments)
    if (!s.neighbours_only) return std::nullopt;
  // Each layer's output dim (the one its successor reads), from the end.
  std::vector<int64_t> out_dims(chain.size());
  out_dims.back() = dim;
  for (size_t i = chain.size() - 1; i > 0; --i) {
    int64_t in_dim = -1;
    if (!rows_read(g, chain[i], out_dims[i], Band{0, 1}, 0, &in_dim) || in_dim < 0) return std::nullopt;
    out_dims[i - 1] = in_dim;
  }
  // Weights are constants every rank holds whole.
  std::vector<NodeId> in_chain = chain;
  ValueId x = g.node(chain.front()).inputs[0];
  SpatialPlan plan;
  plan.mesh = mesh;
  plan.in_dim = segments->front().in_dim;
  plan.out_dim = dim;
  plan.exchanges = *segments;
  plan.in_bands = row_bands(g.type(x).shape[static_cast<size_t>(plan.in_dim)], n);
  plan.out_bands = row_bands(g.type(g.node(chain.back()).outputs[0]).shape[static_cast<size_t>(dim)], n);
  // Built twice: the second time every rank cuts the layers some rank cut.
  std::set<size_t> cut, needed;
  auto build_rank = [&](int64_t r) -> std::optional<Graph> {
    Graph local;
    std::map<ValueId, ValueId> weights;
    for (NodeId id : chain)
      for (size_t i = 1; i < g.node(id).inputs.size(); ++i) {
        ValueId v = g.node(id).inputs[i];
        if (v == kNoValue || weights.count(v)) continue;
        if (!g.value(v).is_constant()) return std::nullopt;
        weights[v] = local.add_constant(g.value(v).name, *g.value(v).constant);
      }
    TensorType band = g.type(x);
    band.shape[static_cast<size_t>(plan.in_dim)] = plan.in_bands[static_cast<size_t>(r)].size();
    ValueId cur = local.add_input(g.value(x).name, band);
    Band have = plan.in_bands[static_cast<size_t>(r)];
    int64_t at_dim = plan.in_dim;
    size_t next = 0;
    for (size_t s = 0; s < segments->size(); ++s) {
      const SpatialHalo& h = (*segments)[s];
      size_t len = (s + 1 < starts.size() ? starts[s + 1] : chain.size()) - starts[s];
      std::vector<NodeId> seg(chain.begin() + static_cast<std::ptrdiff_t>(next),
                              chain.begin() + static_cast<std::ptrdiff_t>(next + len));
      if (h.halo_rows() > 0) {
        std::vector<int64_t> before, after;
        for (const RankHalo& rh : h.ranks) {
          before.push_back(rh.from_prev);
          after.push_back(rh.from_next);
        }
        Attrs a;
        a.set("mesh_axis", mesh.axes()[0].name);
        a.set("group_size", n);
        a.set("axis", at_dim);
        a.set("before", before);
        a.set("after", after);
        a.set("coordinate", r);
        cur = local.add(OpKind::kHaloExchange, {cur}, a, "halo_" + std::to_string(s));
        have = {have.lo - before[static_cast<size_t>(r)], have.hi + after[static_cast<size_t>(r)]};
      }
      Band seg_out = h.ranks[static_cast<size_t>(r)].out;
      for (size_t i = 0; i < seg.size(); ++i) {
        Band rows = seg_out;
        if (i + 1 < seg.size()) {
          std::vector<NodeId> rest(seg.begin() + static_cast<std::ptrdiff_t>(i) + 1, seg.end());
          int64_t d = -1;
          std::optional<Band> read = chain_rows_read(g, rest, h.out_dim, seg_out, &d);
          if (!read) return std::nullopt;
          rows = *read;
        }
        bool sliced = false;
        if (!add_local_layer(g, seg[i], out_dims[next + i], rows, local, cur, have, weights, cut.count(next + i) > 0,
                             &sliced))
          return std::nullopt;
        if (sliced) needed.insert(next + i);
      }
      at_dim = h.out_dim;
      next += len;
    }
    local.set_outputs({cur});
    return local;
  };
  for (int pass = 0; pass < 2; ++pass) {
    plan.ranks.clear();
    for (int64_t r = 0; r < n; ++r) {
      std::optional<Graph> local = build_rank(r);
      if (!local) return std::nullopt;
      plan.ranks.push_back(std::move(*local));
    }
    if (needed == cut) break;
    cut = needed;
  }
  return plan;
}

std::optional<SpatialChoice> cheapest_spatial_plan(const Graph& g, const std::vector<NodeId>& chain, int64_t dim,
                                                   const DeviceMesh& mesh, const cost::DeviceProfile& device,
                                                   const SpatialPricing& how) {
  std::optional<SpatialChoice> best;
  std::vector<std::pair<int64_t, double>> tried;
  int64_t most = how.unit == SpatialPricing::Unit::kWindowLayers ? window_layers(g, chain)
                                                                 : static_cast<int64_t>(chain.size());
  for (int64_t k = 1; k <= most; ++k) {
    std::vector<size_t> starts = how.unit == SpatialPricing::Unit::kWindowLayers ? every_k_window_layers(g, chain, k)
                                                                                 : every_k_layers(chain.size(), k);
    std::optional<SpatialPlan> plan = spatial_plan_at(g, chain, dim, mesh, starts);
    if (!plan) continue;
    cost::CostOptions o;
    o.mesh = &plan->mesh;
    o.halo_overlap = how.halo_overlap;
    double t = cost::plan_cost(cost::rank_programs(plan->ranks, plan->mesh, device, o), how.plan).time_s;
    tried.emplace_back(k, t);
    // A deeper halo only where it is cheaper by more than rounding.
    if (!best || t < best->time_s * (1 - 1e-9)) best = SpatialChoice{std::move(*plan), k, t, {}};
  }
  if (best) best->tried = tried;
  return best;
}

double chain_seconds(const Graph& g, const std::vector<NodeId>& chain, const cost::DeviceProfile& device) {
  DeviceMesh one = DeviceMesh::parse("tp=1");
  return cost::plan_cost(cost::rank_programs({chain_program(g, chain)}, one, device)).time_s;
}

std::vector<Graph> whole_io_programs(const SpatialPlan& plan) {
  std::vector<Graph> out;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const Graph& local = plan.ranks[r];
    Graph w;
    ValueId band_in = local.inputs()[0];
    TensorType whole_in = local.type(band_in);
    whole_in.shape[static_cast<size_t>(plan.in_dim)] = plan.in_bands.back().hi;
    ValueId x = w.add_input(local.value(band_in).name, whole_in);
    Attrs cut;
    cut.set("starts", std::vector<int64_t>{plan.in_bands[r].lo});
    cut.set("ends", std::vector<int64_t>{plan.in_bands[r].hi});
    cut.set("axes", std::vector<int64_t>{plan.in_dim});
    cut.set("steps", std::vector<int64_t>{1});
    std::map<ValueId, ValueId> map{{band_in, w.add(OpKind::kSlice, {x}, cut, "band_in")}};
    for (ValueId v = 0; v < local.num_values(); ++v)
      if (local.value(v).is_constant()) map[v] = w.add_constant(local.value(v).name, *local.value(v).constant);
    for (NodeId id : local.topo_order()) {
      const Node& n = local.node(id);
      std::vector<ValueId> ins;
      for (ValueId v : n.inputs) ins.push_back(v == kNoValue ? kNoValue : map.at(v));
      NodeId made = w.add_node(n.kind, ins, n.attrs, n.name);
      for (size_t i = 0; i < n.outputs.size(); ++i) map[n.outputs[i]] = w.node(made).outputs[i];
    }
    ValueId y = map.at(local.outputs()[0]);
    size_t rank = w.type(y).shape.size();
    std::vector<int64_t> pads(2 * rank, 0);
    pads[static_cast<size_t>(plan.out_dim)] = plan.out_bands[r].lo;
    pads[rank + static_cast<size_t>(plan.out_dim)] = plan.out_bands.back().hi - plan.out_bands[r].hi;
    Attrs pad;
    pad.set("pads", pads);
    Attrs sum;
    sum.set("mesh_axis", plan.mesh.axes()[0].name);
    sum.set("group_size", plan.mesh.axes()[0].size);
    w.set_outputs({w.add(OpKind::kAllReduce, {w.add(OpKind::kPad, {y}, pad, "band_out")}, sum, "assemble")});
    out.push_back(std::move(w));
  }
  return out;
}

double spatial_plan_error(const Graph& g, const std::vector<NodeId>& chain, const SpatialPlan& plan, uint64_t seed) {
  Graph whole = chain_program(g, chain);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const TensorType& xt = whole.type(whole.inputs()[0]);
  Tensor x(xt.dtype, xt.shape);
  for (int64_t i = 0; i < x.numel(); ++i) x.set_double(i, u(rng));
  Tensor want = evaluate(whole, {x}, Precision::kF64)[0];
  std::vector<const Graph*> programs;
  std::vector<std::vector<RefTensor<double>>> inputs;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    programs.push_back(&plan.ranks[r]);
    inputs.push_back({to_ref<double>(slice_rows(x, plan.in_dim, plan.in_bands[r]))});
  }
  auto got = interpret_ranks<double>(programs, plan.mesh, inputs);
  double worst = 0;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    Tensor band = slice_rows(want, plan.out_dim, plan.out_bands[r]);
    Tensor mine = from_ref(got[r][0]);
    TESSERA_CHECK(mine.type().shape == band.type().shape, "rank " << r << "'s band has the wrong shape");
    for (int64_t i = 0; i < band.numel(); ++i) worst = std::max(worst, std::fabs(mine.get_double(i) - band.get_double(i)));
  }
  return worst;
}

}  // namespace tessera::mutator
