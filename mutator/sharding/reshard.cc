#include "mutator/sharding/reshard.h"

#include <algorithm>

#include "cost/collective_model.h"
#include "graph/error.h"

namespace tessera::mutator {
namespace {

using Kind = ReshardStep::Kind;

// Per tensor dim, the mesh axes that split it, major first (the nesting).
std::vector<int> axes_of(const Sharding& s, int64_t dim, bool grouped = false) {
  std::vector<int> v;
  for (size_t a = 0; a < s.placements.size(); ++a)
    if (s.placements[a] == Placement::shard(dim) || (grouped && s.placements[a].is_shard() && s.placements[a].dim == dim))
      v.push_back(static_cast<int>(a));
  return v;
}

// The axes of `dim` past the part both shardings share: those must be
// undone (from) or done (to). A shared prefix stays, being major.
std::vector<int> changed_axes(const Sharding& from, const Sharding& to, int64_t dim, bool of_from) {
  std::vector<int> f = axes_of(from, dim), t = axes_of(to, dim);
  size_t p = 0;
  while (p < f.size() && p < t.size() && f[p] == t[p]) ++p;
  const std::vector<int>& v = of_from ? f : t;
  return {v.begin() + static_cast<int64_t>(p), v.end()};
}

std::string step_name(const std::string& base, size_t i, const char* what) {
  std::string s = base;
  s += "/";
  s += what;
  s += std::to_string(i);
  return s;
}

// The whole `dim` (`whole` rows) from blocks of unequal size (block_start
// over n ranks): each rank pads its block to the largest, the AllGather
// brings n equal blocks, and slices of the runs of real rows, joined, drop
// the padding (XLA's pad-then-collective). Every rank adds the same nodes;
// only the Pad's rows differ.
ValueId gather_uneven(Graph& local, ValueId v, const Attrs& collective, int64_t dim, int64_t whole, int64_t n,
                      const std::string& name) {
  auto d = static_cast<size_t>(dim);
  Shape block = local.type(v).shape;
  int64_t big = block_size(whole, n, 0);
  std::vector<int64_t> pads(2 * block.size(), 0);
  pads[block.size() + d] = big - block[d];
  Attrs pad;
  pad.set("pads", pads);
  v = local.add(OpKind::kPad, {v}, pad, name + "_pad");
  v = local.add(OpKind::kAllGather, {v}, collective, name);
  // Runs of real rows in the gathered [n * big] rows: block b at b * big.
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t b = 0; b < n; ++b) {
    int64_t lo = b * big, hi = lo + block_size(whole, n, b);
    if (!runs.empty() && runs.back().second == lo) runs.back().second = hi;
    else runs.push_back({lo, hi});
  }
  std::vector<ValueId> pieces;
  for (size_t r = 0; r < runs.size(); ++r) {
    Attrs cut;
    cut.set("starts", std::vector<int64_t>{runs[r].first});
    cut.set("ends", std::vector<int64_t>{runs[r].second});
    cut.set("axes", std::vector<int64_t>{dim});
    cut.set("steps", std::vector<int64_t>{1});
    pieces.push_back(local.add(OpKind::kSlice, {v}, cut, name + "_rows" + std::to_string(r)));
  }
  if (pieces.size() == 1) return pieces[0];
  Attrs cat;
  cat.set("axis", dim);
  return local.add(OpKind::kConcat, pieces, cat, name + "_whole");
}

}  // namespace

const char* reshard_step_name(Kind k) {
  switch (k) {
    case Kind::kAllGather: return "all-gather";
    case Kind::kAllReduce: return "all-reduce";
    case Kind::kReduceScatter: return "reduce-scatter";
    case Kind::kAllToAll: return "all-to-all";
    case Kind::kSlice: return "slice";
    case Kind::kKeepOnFirst: return "keep-on-first";
  }
  return "?";
}

std::vector<ReshardStep> reshard_steps(const Sharding& from, const Sharding& to, const DeviceMesh& mesh,
                                       const Shape& global) {
  size_t axes = mesh.axes().size();
  TESSERA_CHECK(from.placements.size() == axes && to.placements.size() == axes,
                "reshard " << from.str() << " -> " << to.str() << " on mesh " << mesh.str());
  auto only = [](const std::vector<int>& v, int a) { return v.size() == 1 && v[0] == a; };
  auto holds = [](const std::vector<int>& v, int a) { return std::find(v.begin(), v.end(), a) != v.end(); };
  std::vector<ReshardStep> take, give;  // take: shards/partials removed; give: splits made
  for (size_t k = axes; k-- > 0;) {
    int a = static_cast<int>(k);
    const Placement &f = from.placements[k], &t = to.placements[k];
    // A split that stays but sits under a changed major split must be redone.
    bool renest = f.is_shard() && holds(changed_axes(from, to, f.dim, true), a);
    if (f == t && !renest) continue;
    int64_t n = mesh.axes()[k].size;
    auto uneven = [&](const Placement& p) {
      return p.is_shard() && p.dim < static_cast<int64_t>(global.size()) && global[static_cast<size_t>(p.dim)] % n != 0;
    };
    // A shard in groups refined to smaller blocks of the same dim: each
    // rank cuts its block from the one it holds.
    if (f.is_shard() && t.is_shard() && f.dim == t.dim && (f.groups || t.groups) && t.blocks(n) > f.blocks(n) &&
        t.blocks(n) % f.blocks(n) == 0 && only(axes_of(to, t.dim, true), a)) {
      give.push_back({Kind::kSlice, a, t.dim, -1, f.blocks(n), t.blocks(n), 0});
      continue;
    }
    bool grouped = f.is_grouped() || t.is_grouped();
    bool done = false;  // the split of `t` happened with the removal
    if (f.is_shard()) {
      // Directly only when nothing else on either dim must be undone first.
      if (!grouped && !uneven(f) && !uneven(t) && t.is_shard() && t.dim != f.dim &&
          only(changed_axes(from, to, f.dim, true), a) &&
          only(changed_axes(from, to, t.dim, false), a) && changed_axes(from, to, t.dim, true).empty()) {
        take.push_back({Kind::kAllToAll, a, f.dim, t.dim});
        done = true;
      } else {
        take.push_back({Kind::kAllGather, a, f.dim, -1, 1, 0, f.groups});
      }
    } else if (f.kind == Placement::Kind::kPartial) {
      if (!grouped && !uneven(t) && t.is_shard() && only(changed_axes(from, to, t.dim, false), a) &&
          changed_axes(from, to, t.dim, true).empty()) {
        take.push_back({Kind::kReduceScatter, a, t.dim, -1});
        done = true;
      } else {
        take.push_back({Kind::kAllReduce, a, -1, -1});
      }
    }
    if (done) continue;
    if (t.is_shard()) give.push_back({Kind::kSlice, a, t.dim, -1, 1, t.blocks(n), 0});
    if (t.kind == Placement::Kind::kPartial) give.push_back({Kind::kKeepOnFirst, a, -1, -1});
  }
  std::reverse(give.begin(), give.end());  // major axes first
  take.insert(take.end(), give.begin(), give.end());
  return take;
}

ValueId emit_reshard(Graph& local, ValueId v, const Sharding& from, const Sharding& to, const TensorType& global,
                     const DeviceMesh& mesh, int64_t rank, const std::string& name) {
  std::vector<ReshardStep> steps = reshard_steps(from, to, mesh, global.shape);
  std::vector<int64_t> coords = mesh.coords(rank);
  for (size_t i = 0; i < steps.size(); ++i) {
    const ReshardStep& s = steps[i];
    const DeviceMesh::Axis& axis = mesh.axes()[static_cast<size_t>(s.axis)];
    Attrs a;
    if (s.kind != Kind::kSlice && s.kind != Kind::kKeepOnFirst) {
      a.set("mesh_axis", axis.name);
      a.set("group_size", axis.size);
    }
    switch (s.kind) {
      case Kind::kAllGather: {
        a.set("axis", s.dim);
        Shape block = local.type(v).shape;
        int64_t rows = global.shape[static_cast<size_t>(s.dim)];
        if (s.groups == 0 && rows % axis.size != 0) {
          v = gather_uneven(local, v, a, s.dim, rows, axis.size, step_name(name, i, "all_gather"));
          break;
        }
        v = local.add(OpKind::kAllGather, {v}, a, step_name(name, i, "all_gather"));
        if (s.groups == 0) break;
        // Ranks of a group sent the same block: [.., g, n/g, b, ..], keep
        // copy 0 of each block.
        auto d = static_cast<size_t>(s.dim);
        Shape split(block.begin(), block.begin() + static_cast<int64_t>(d));
        split.push_back(s.groups);
        split.push_back(axis.size / s.groups);
        split.insert(split.end(), block.begin() + static_cast<int64_t>(d), block.end());
        Attrs shape;
        shape.set("shape", split);
        v = local.add(OpKind::kReshape, {v}, shape, step_name(name, i, "group_copies"));
        Attrs one;
        one.set("starts", std::vector<int64_t>{0});
        one.set("ends", std::vector<int64_t>{1});
        one.set("axes", std::vector<int64_t>{s.dim + 1});
        one.set("steps", std::vector<int64_t>{1});
        v = local.add(OpKind::kSlice, {v}, one, step_name(name, i, "one_copy"));
        Shape whole = block;
        whole[d] *= s.groups;
        Attrs back;
        back.set("shape", whole);
        v = local.add(OpKind::kReshape, {v}, back, step_name(name, i, "gathered"));
        break;
      }
      case Kind::kAllReduce:
        v = local.add(OpKind::kAllReduce, {v}, a, step_name(name, i, "all_reduce"));
        break;
      case Kind::kReduceScatter:
        a.set("axis", s.dim);
        v = local.add(OpKind::kReduceScatter, {v}, a, step_name(name, i, "reduce_scatter"));
        break;
      case Kind::kAllToAll:
        a.set("split_axis", s.to_dim);
        a.set("concat_axis", s.dim);
        v = local.add(OpKind::kAllToAll, {v}, a, step_name(name, i, "all_to_all"));
        break;
      case Kind::kSlice: {
        // The rank's block of to_blocks lies inside its block of
        // from_blocks, at this index among to/from parts.
        // Uneven where the parts do not divide the rows (block_start).
        int64_t parts = s.to_blocks / s.from_blocks;
        int64_t rows = local.type(v).shape[static_cast<size_t>(s.dim)];
        int64_t c = coords[static_cast<size_t>(s.axis)];
        int64_t part = (c / (axis.size / s.to_blocks)) % parts;
        a.set("starts", std::vector<int64_t>{block_start(rows, parts, part)});
        a.set("ends", std::vector<int64_t>{block_start(rows, parts, part + 1)});
        a.set("axes", std::vector<int64_t>{s.dim});
        a.set("steps", std::vector<int64_t>{1});
        v = local.add(OpKind::kSlice, {v}, a, step_name(name, i, "slice"));
        break;
      }
      case Kind::kKeepOnFirst: {
        // A multiply on every rank (by 1 or 0) keeps the ranks' programs alike.
        DType dt = local.type(v).dtype;
        TESSERA_CHECK(dt != DType::kBool, name << ": a bool tensor cannot be Partial");
        bool first = coords[static_cast<size_t>(s.axis)] == 0;
        Tensor k = is_float(dt) ? Tensor::from_doubles(dt, {}, {first ? 1.0 : 0.0})
                                : Tensor::from_ints(dt, {}, {first ? 1 : 0});
        ValueId c = local.add_constant(step_name(name, i, "keep"), k);
        v = local.add(OpKind::kMul, {v, c}, {}, step_name(name, i, "keep_on_first"));
        break;
      }
    }
  }
  return v;
}

double reshard_seconds(const Sharding& from, const Sharding& to, const TensorType& global, const DeviceMesh& mesh,
                       const cost::DeviceProfile& device) {
  if (from == to) return 0;
  // Rank 0's program prices every rank: the steps are the same on each.
  Graph g;
  ValueId v = g.add_input("x", {global.dtype, from.local_shape(mesh, global.shape)});
  emit_reshard(g, v, from, to, global, mesh, 0, "reshard");
  double memory = device.main_memory().effective_bandwidth();
  double s = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (op_def(node.kind).is_collective()) {
      // As the kernel model prices a collective: its launch too.
      s += cost::collective_node_cost(g, node, device, &mesh).time_s + device.launch_overhead_s;
    } else {
      double bytes = static_cast<double>(g.type(node.inputs[0]).nbytes() + g.type(node.outputs[0]).nbytes());
      s += device.launch_overhead_s + (memory > 0 ? bytes / memory : 0);
    }
  }
  return s;
}

}  // namespace tessera::mutator
