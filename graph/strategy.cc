#include "graph/strategy.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "graph/error.h"
#include "graph/hash.h"

namespace tessera {
namespace {

using Kind = AxisStrategy::Kind;

bool present(const Node& n, size_t i) { return i < n.inputs.size() && n.inputs[i] != kNoValue; }

bool contains(const DimExpr& e, int f) {
  return std::any_of(e.terms.begin(), e.terms.end(), [&](const DimTerm& t) { return t.factor == f; });
}

// The dim of `dims` that holds factor f as the major term of a whole dim
// (-1: none holds it); false when f sits anywhere else (a minor term, a
// strided, padded or positional dim), which no shard of a dim describes.
bool major_dim(const DimMap& m, const std::vector<DimExpr>& dims, const Shape& shape, int f, int64_t& dim) {
  dim = -1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (!contains(dims[d], f)) continue;
    if (dim >= 0 || !is_plain(m, dims[d], shape[d]) || dims[d].terms[0].factor != f) return false;
    dim = static_cast<int64_t>(d);
  }
  return true;
}

// Whether factor f is, wherever `dims` holds it, a whole dim of its own
// (its only term, stride 1, the dim's whole size): the same rows of f in
// every tensor, so each rank's block of f may have its own size.
bool whole_dims(const DimMap& m, const std::vector<DimExpr>& dims, const Shape& shape, int f) {
  for (size_t d = 0; d < dims.size(); ++d) {
    if (!contains(dims[d], f)) continue;
    const DimExpr& e = dims[d];
    if (e.terms.size() != 1 || e.terms[0].coef != 1 || e.offset != 0 || e.guarded || !e.edges.empty() ||
        e.form != DimForm::kAffine || shape[d] != m.factors[static_cast<size_t>(f)].size)
      return false;
  }
  return true;
}

// Whether factor f may be split into uneven blocks: a pass, sum or mean
// factor held as a whole dim by every read and the one piece of each output.
bool splits_unevenly(const Graph& g, const Node& n, const DimMap& m, int f) {
  const Factor& fac = m.factors[static_cast<size_t>(f)];
  if (fac.kind == FactorKind::kReduce) return false;
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    if (m.outputs[o].size() != 1) return false;
    const Piece& p = m.outputs[o][0];
    if (!whole_dims(m, p.dims, g.type(n.outputs[o]).shape, f)) return false;
    for (const Read& r : p.reads)
      if (!whole_dims(m, r.dims, g.type(n.inputs[static_cast<size_t>(r.input)]).shape, f)) return false;
  }
  return true;
}

// Factor f split over an axis: inputs and outputs holding it are sharded on
// the dim where it is major, the others replicated (a bias after a sum
// Partial). nullopt when some tensor holds f where a dim shard cannot carry
// it, or a sharded dim's reads disagree on their major factor (Softmax's
// axis is read at the element and along the row).
// `groups` > 0: the factor in that many blocks, each replicated over the
// rest of the axis (a pass factor only: a Partial summed over a group's
// replicas would count each block n/g times).
std::optional<AxisStrategy> factor_split(const Graph& g, const Node& n, const DimMap& m, int f, int64_t groups) {
  const Factor& fac = m.factors[static_cast<size_t>(f)];
  bool contracted = fac.kind != FactorKind::kPass;
  if (contracted && groups > 0) return std::nullopt;
  auto shard = [groups](int64_t d) { return Placement::shard_groups(d, groups); };
  AxisStrategy s;
  s.kind = Kind::kShardFactor;
  s.factor = f;
  s.groups = groups;
  s.factor_kind = fac.kind;
  s.inputs.assign(n.inputs.size(), Placement::replicate());
  std::vector<int64_t> in_dim(n.inputs.size(), -2);  // -2: not read yet, -1: read without f
  for (const auto& pieces : m.outputs)
    for (const Piece& p : pieces)
      for (const Read& r : p.reads) {
        auto i = static_cast<size_t>(r.input);
        int64_t d = -1;
        if (!major_dim(m, r.dims, g.type(n.inputs[i]).shape, f, d)) return std::nullopt;
        // Every read of a sharded input must carry f on the same dim.
        if (in_dim[i] != -2 && in_dim[i] != d) return std::nullopt;
        in_dim[i] = d;
        if (d < 0 && r.bias && contracted) s.inputs[i] = Placement::partial();
      }
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (in_dim[i] >= 0) s.inputs[i] = shard(in_dim[i]);
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    const TensorType& t = g.type(n.outputs[o]);
    if (contracted) {
      if (t.dtype == DType::kBool || (fac.kind == FactorKind::kMean && !is_float(t.dtype))) return std::nullopt;
      s.outputs.push_back(Placement::partial());
      continue;
    }
    int64_t dim = -2;
    for (const Piece& p : m.outputs[o]) {
      // A Concat piece's dims other than its axis cover the output's.
      int64_t d = -1;
      if (!major_dim(m, p.dims, t.shape, f, d) || d < 0 || (dim != -2 && dim != d)) return std::nullopt;
      dim = d;
    }
    if (dim < 0) return std::nullopt;
    s.outputs.push_back(shard(dim));
  }
  // A pass factor no input holds is made by the op from its attributes
  // (Expand's broadcast dims, Tile's repeats): a rank makes its block only
  // if the op can rewrite those attributes for local shapes.
  if (!contracted && std::all_of(in_dim.begin(), in_dim.end(), [](int64_t d) { return d < 0; }) &&
      !op_def(n.kind).localize)
    return std::nullopt;
  s.name = std::string(contracted ? "contract " : "shard ") + factor_kind_name(fac.kind) + " factor of size " +
           std::to_string(fac.size) + (groups > 0 ? " in " + std::to_string(groups) + " groups" : "");
  return s;
}

Linearity linearity_without_bias(const Node& n, const DimMap& m) {
  const OpDef& def = op_def(n.kind);
  if (!def.linearity) return {};
  Node plain = n;
  for (const auto& pieces : m.outputs)
    for (const Piece& p : pieces)
      for (const Read& r : p.reads)
        if (r.bias) plain.inputs[static_cast<size_t>(r.input)] = kNoValue;
  return def.linearity(plain);
}

std::vector<AxisStrategy> partial_through(const Graph& g, const Node& n, const DimMap& m) {
  Linearity lin = linearity_without_bias(n, m);
  if (!lin.any()) return {};
  for (ValueId v : n.outputs)
    if (g.type(v).dtype == DType::kBool) return {};
  std::vector<bool> bias(n.inputs.size(), false);
  for (const auto& pieces : m.outputs)
    for (const Piece& p : pieces)
      for (const Read& r : p.reads)
        if (r.bias) bias[static_cast<size_t>(r.input)] = true;
  auto make = [&](int only) {
    AxisStrategy s;
    s.kind = Kind::kPartialThrough;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      bool p = present(n, i) && (bias[i] || (lin.linear_in(static_cast<int>(i)) && (only < 0 || only == static_cast<int>(i))));
      s.inputs.push_back(p ? Placement::partial() : Placement::replicate());
    }
    s.outputs.assign(n.outputs.size(), Placement::partial());
    s.name = only < 0 ? "partial" : "partial in input " + std::to_string(only);
    return s;
  };
  std::vector<AxisStrategy> out;
  if (!lin.separately) {
    out.push_back(make(-1));
  } else {
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (present(n, i) && !bias[i] && lin.linear_in(static_cast<int>(i))) out.push_back(make(static_cast<int>(i)));
  }
  return out;
}

bool same_placements(const AxisStrategy& a, const AxisStrategy& b) {
  return a.inputs == b.inputs && a.outputs == b.outputs;
}

// The product of the axis sizes that split each factor divides its size.
bool factors_divide(const DimMap& m, const DeviceMesh& mesh, const std::vector<const AxisStrategy*>& axes) {
  std::vector<int64_t> ways(m.factors.size(), 1);
  std::vector<int> uneven(m.factors.size(), 0);
  for (size_t a = 0; a < axes.size(); ++a)
    if (axes[a]->kind == Kind::kShardFactor) {
      ways[static_cast<size_t>(axes[a]->factor)] *= axes[a]->groups > 0 ? axes[a]->groups : mesh.axes()[a].size;
      uneven[static_cast<size_t>(axes[a]->factor)] += axes[a]->uneven ? 1 : 2;
    }
  // An uneven factor is split over its one axis only.
  for (size_t f = 0; f < m.factors.size(); ++f)
    if (ways[f] > 1 && m.factors[f].size % ways[f] != 0 && uneven[f] != 1) return false;
  return true;
}

bool fits(const Sharding& s, const DeviceMesh& mesh, const TensorType& t, Blocks blocks) {
  try {
    s.validate(mesh, t, blocks);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A mean over a split factor is the sum of the ranks' means, each scaled by
// its share of the factor: 1/n for even blocks, its rows over all rows for
// uneven ones.
std::vector<ValueId> scale_means(const LocalOp& op, std::vector<ValueId> outs) {
  double share = 1;
  std::vector<int64_t> c = op.mesh.coords(op.rank);
  std::optional<DimMap> m;
  for (size_t a = 0; a < op.strategy.axes.size(); ++a) {
    const AxisStrategy& s = op.strategy.axes[a];
    if (s.kind != Kind::kShardFactor || s.factor_kind != FactorKind::kMean) continue;
    int64_t n = op.mesh.axes()[a].size;
    if (!s.uneven) {
      share /= static_cast<double>(n);
      continue;
    }
    if (!m) m = dim_map(op.global, op.node);
    int64_t size = m->factors[static_cast<size_t>(s.factor)].size;
    share *= static_cast<double>(block_size(size, n, c[a])) / static_cast<double>(size);
  }
  if (share == 1) return outs;
  for (ValueId& v : outs) {
    const TensorType& t = op.local.type(v);
    ValueId k = op.local.add_constant(op.node.name + "/mean_share", Tensor::from_doubles(t.dtype, {}, {share}));
    v = op.local.add(OpKind::kMul, {v, k}, {}, op.node.name + "/mean_scale");
  }
  return outs;
}

}  // namespace

std::string Strategy::str() const {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) s += (i ? " x " : "") + inputs[i].str();
  s += " -> ";
  for (size_t o = 0; o < outputs.size(); ++o) s += (o ? ", " : "") + outputs[o].str();
  s += " (";
  for (size_t a = 0; a < axes.size(); ++a) s += (a ? "; " : "") + axes[a].name;
  return s + ")";
}

uint64_t Strategy::hash() const {
  uint64_t h = hash_combine(inputs.size(), outputs.size());
  for (const Sharding& x : inputs) h = hash_combine(h, x.hash());
  for (const Sharding& x : outputs) h = hash_combine(h, x.hash());
  for (const AxisStrategy& a : axes) {
    h = hash_combine(h, static_cast<uint64_t>(a.kind));
    h = hash_combine(h, static_cast<uint64_t>(a.factor));
    h = hash_combine(h, static_cast<uint64_t>(a.groups));
  }
  return h;
}

std::vector<AxisStrategy> axis_strategies(const Graph& g, const Node& n, int64_t axis_size) {
  AxisStrategy rep;
  rep.inputs.assign(n.inputs.size(), Placement::replicate());
  rep.outputs.assign(n.outputs.size(), Placement::replicate());
  rep.name = "replicate";
  std::vector<AxisStrategy> out{rep};
  const OpDef& def = op_def(n.kind);
  if (def.is_collective() || axis_size <= 1) return out;
  DimMap m = dim_map(g, n);
  for (size_t f = 0; f < m.factors.size(); ++f) {
    const Factor& fac = m.factors[f];
    if (fac.kind == FactorKind::kReduce || fac.size < axis_size) continue;
    bool uneven = fac.size % axis_size != 0;
    if (uneven && !splits_unevenly(g, n, m, static_cast<int>(f))) continue;
    if (std::optional<AxisStrategy> s = factor_split(g, n, m, static_cast<int>(f), 0)) {
      s->uneven = uneven;
      out.push_back(std::move(*s));
    }
  }
  for (int64_t groups = axis_size / 2; groups >= 2; --groups) {
    if (axis_size % groups != 0) continue;
    for (size_t f = 0; f < m.factors.size(); ++f) {
      const Factor& fac = m.factors[f];
      if (fac.kind != FactorKind::kPass || fac.size % groups != 0) continue;
      if (std::optional<AxisStrategy> s = factor_split(g, n, m, static_cast<int>(f), groups))
        out.push_back(std::move(*s));
    }
  }
  for (AxisStrategy& s : partial_through(g, n, m)) out.push_back(std::move(s));
  if (def.explicit_strategies)
    for (AxisStrategy& s : def.explicit_strategies(g, n, axis_size)) out.push_back(std::move(s));
  // Two factors of one dim (a size-1 run, say) can give the same placements.
  std::vector<AxisStrategy> unique;
  for (AxisStrategy& s : out)
    if (std::none_of(unique.begin(), unique.end(), [&](const AxisStrategy& u) { return same_placements(u, s); }))
      unique.push_back(std::move(s));
  return unique;
}

std::vector<Strategy> strategies(const Graph& g, const Node& n, const DeviceMesh& mesh) {
  size_t axes = mesh.axes().size();
  std::vector<std::vector<AxisStrategy>> per_axis;
  for (const DeviceMesh::Axis& a : mesh.axes()) per_axis.push_back(axis_strategies(g, n, a.size));
  DimMap m = op_def(n.kind).is_collective() ? DimMap{} : dim_map(g, n);
  std::vector<Strategy> out;
  std::vector<size_t> pick(axes, 0);
  while (true) {
    std::vector<const AxisStrategy*> chosen;
    int explicit_axes = 0;
    for (size_t a = 0; a < axes; ++a) {
      chosen.push_back(&per_axis[a][pick[a]]);
      explicit_axes += chosen.back()->kind == Kind::kExplicit;
    }
    Strategy s;
    for (const AxisStrategy* c : chosen) s.axes.push_back(*c);
    s.inputs.assign(n.inputs.size(), Sharding{});
    s.outputs.assign(n.outputs.size(), Sharding{});
    for (size_t a = 0; a < axes; ++a) {
      for (size_t i = 0; i < n.inputs.size(); ++i) s.inputs[i].placements.push_back(chosen[a]->inputs[i]);
      for (size_t o = 0; o < n.outputs.size(); ++o) s.outputs[o].placements.push_back(chosen[a]->outputs[o]);
    }
    bool ok = explicit_axes <= 1 && factors_divide(m, mesh, chosen);
    Blocks blocks = std::any_of(chosen.begin(), chosen.end(), [](const AxisStrategy* c) { return c->uneven; })
                        ? Blocks::kUneven
                        : Blocks::kEven;
    for (size_t i = 0; ok && i < n.inputs.size(); ++i)
      ok = !present(n, i) || fits(s.inputs[i], mesh, g.type(n.inputs[i]), blocks);
    for (size_t o = 0; ok && o < n.outputs.size(); ++o) ok = fits(s.outputs[o], mesh, g.type(n.outputs[o]), blocks);
    if (ok) out.push_back(std::move(s));
    size_t a = axes;
    while (a > 0 && ++pick[a - 1] == per_axis[a - 1].size()) pick[--a] = 0;
    if (a == 0) break;
  }
  return out;
}

std::vector<Strategy> strategies_for(const Graph& g, const Node& n, const DeviceMesh& mesh,
                                     const std::vector<Sharding>& inputs) {
  if (inputs.size() != n.inputs.size())
    throw Error(ErrorKind::kUsage, "expected " + std::to_string(n.inputs.size()) + " input shardings, got " +
                                       std::to_string(inputs.size()),
                {"", n.name, op_name(n.kind)});
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!present(n, i)) continue;
    try {
      inputs[i].validate(mesh, g.type(n.inputs[i]), Blocks::kUneven);
    } catch (const Error& e) {
      throw Error(ErrorKind::kInvalidGraph, "input '" + g.value(n.inputs[i]).name + "': " + e.what(),
                  {"", n.name, op_name(n.kind)});
    }
  }
  std::vector<Strategy> out;
  for (Strategy& s : strategies(g, n, mesh)) {
    bool same = true;
    for (size_t i = 0; i < inputs.size() && same; ++i) same = !present(n, i) || s.inputs[i] == inputs[i];
    if (same) out.push_back(std::move(s));
  }
  return out;
}

Linearity affine_linearity(const Graph& g, const Node& n) {
  if (op_def(n.kind).is_collective()) return op_def(n.kind).linearity ? op_def(n.kind).linearity(n) : Linearity{};
  return linearity_without_bias(n, dim_map(g, n));
}

void local_block(const DeviceMesh& mesh, const Sharding& sharding, const Shape& global, int64_t rank,
                 std::vector<int64_t>& offset, Shape& size) {
  offset.assign(global.size(), 0);
  size = global;
  std::vector<int64_t> c = mesh.coords(rank);
  for (size_t a = 0; a < sharding.placements.size(); ++a) {
    const Placement& p = sharding.placements[a];
    if (!p.is_shard()) continue;
    auto d = static_cast<size_t>(p.dim);
    int64_t n = p.blocks(mesh.axes()[a].size), b = p.block_of(c[a], mesh.axes()[a].size);
    offset[d] += block_start(size[d], n, b);
    size[d] = block_size(size[d], n, b);
  }
}

Tensor shard_of(const Tensor& global, const Sharding& sharding, const DeviceMesh& mesh, int64_t rank) {
  std::vector<int64_t> off;
  Shape size;
  local_block(mesh, sharding, global.shape(), rank, off, size);
  std::vector<int64_t> c = mesh.coords(rank);
  for (size_t a = 0; a < sharding.placements.size(); ++a)
    if (sharding.placements[a].kind == Placement::Kind::kPartial && c[a] != 0) return Tensor(global.dtype(), size);
  // A block that is the whole tensor, or one run of its elements (a split of
  // the outermost dim that is not 1), shares the global tensor's storage: a
  // rank's weights are then views of the model's, not copies.
  size_t first = 0;
  while (first < size.size() && size[first] == 1 && global.shape()[first] == 1) ++first;
  bool run = true;
  for (size_t d = first + 1; d < size.size(); ++d) run = run && size[d] == global.shape()[d];
  if (size.empty() || (run && global.numel() > 0)) {
    int64_t at = 0;
    std::vector<int64_t> gs = shape_strides(global.shape());
    for (size_t d = 0; d < size.size(); ++d) at += off[d] * gs[d];
    return size == global.shape() ? global : global.view_part(size, at);
  }
  if (shape_numel(size) == 0) return Tensor(global.dtype(), size);
  // Copy rows of the innermost dim; an odometer walks the outer ones.
  auto copy_block = [global, off, size](uint8_t* dst) {
    auto elem = static_cast<int64_t>(dtype_size(global.dtype()));
    std::vector<int64_t> gs = shape_strides(global.shape());
    size_t last = size.size() - 1;
    int64_t row = size[last] * elem, rows = shape_numel(size) / size[last];
    std::vector<int64_t> idx(size.size(), 0);
    // Its strided rows read every page of a mapped weight: read once.
    global.read_once([&](const uint8_t* src) {
      for (int64_t r = 0; r < rows; ++r) {
        int64_t at = 0;
        for (size_t d = 0; d < size.size(); ++d) at += (off[d] + idx[d]) * gs[d];
        std::memcpy(dst + r * row, src + at * elem, static_cast<size_t>(row));
        for (size_t d = last; d-- > 0;) {
          if (++idx[d] < size[d]) break;
          idx[d] = 0;
        }
      }
    });
  };
  // The block of a mapped weight is made when read, one at a time (the
  // check, the rank file's write), not held for every rank at once.
  if (global.is_view()) return Tensor::made(global.dtype(), size, copy_block);
  Tensor local(global.dtype(), size);
  copy_block(local.mutable_data());
  return local;
}

Tensor unshard(const std::vector<Tensor>& blocks, const Sharding& sharding, const DeviceMesh& mesh, const Shape& global) {
  TESSERA_CHECK(static_cast<int64_t>(blocks.size()) == mesh.num_devices(),
                blocks.size() << " blocks for the " << mesh.num_devices() << " ranks of " << mesh.str());
  for (const Placement& p : sharding.placements)
    if (p.kind == Placement::Kind::kPartial)
      TESSERA_THROW(ErrorKind::kInvalidGraph, "a tensor sharded " << sharding.str() << " has no blocks to place: "
                                                                  << "its ranks hold partial sums");
  Tensor out(blocks[0].dtype(), global);
  if (out.numel() == 0) return out;
  auto elem = static_cast<int64_t>(dtype_size(out.dtype()));
  std::vector<int64_t> gs = shape_strides(global);
  uint8_t* dst = out.mutable_data();
  for (int64_t rank = 0; rank < mesh.num_devices(); ++rank) {
    std::vector<int64_t> c = mesh.coords(rank);
    bool replica = false;  // another rank at coordinate 0 holds the same block
    for (size_t a = 0; a < sharding.placements.size(); ++a) {
      const Placement& p = sharding.placements[a];
      int64_t n = mesh.axes()[a].size;
      replica |= !p.is_shard() ? c[a] != 0 : c[a] % (n / p.blocks(n)) != 0;
    }
    if (replica) continue;
    std::vector<int64_t> off;
    Shape size;
    local_block(mesh, sharding, global, rank, off, size);
    const Tensor& b = blocks[static_cast<size_t>(rank)];
    if (b.dtype() != out.dtype() || b.shape() != size)
      TESSERA_THROW(ErrorKind::kInvalidGraph, "rank " << rank << "'s block is " << type_str(b.type()) << ", not "
                                                      << type_str(TensorType{out.dtype(), size}) << " (its block of "
                                                      << type_str(out.type()) << " sharded " << sharding.str() << ")");
    if (size.empty()) {
      std::memcpy(dst, b.data(), static_cast<size_t>(elem));
      continue;
    }
    // Rows of the innermost dim; an odometer walks the outer ones.
    size_t last = size.size() - 1;
    int64_t row = size[last] * elem, rows = b.numel() / std::max<int64_t>(1, size[last]);
    std::vector<int64_t> idx(size.size(), 0);
    const uint8_t* src = b.data();
    for (int64_t r = 0; r < rows && size[last] > 0; ++r) {
      int64_t at = 0;
      for (size_t d = 0; d < size.size(); ++d) at += (off[d] + idx[d]) * gs[d];
      std::memcpy(dst + at * elem, src + r * row, static_cast<size_t>(row));
      for (size_t d = last; d-- > 0;) {
        if (++idx[d] < size[d]) break;
        idx[d] = 0;
      }
    }
  }
  return out;
}

Shape global_shape(const Sharding& sharding, const DeviceMesh& mesh, const Shape& local) {
  Shape g = local;
  for (size_t a = 0; a < sharding.placements.size(); ++a)
    if (sharding.placements[a].is_shard())
      g[static_cast<size_t>(sharding.placements[a].dim)] *= sharding.placements[a].blocks(mesh.axes()[a].size);
  return g;
}

std::vector<ValueId> emit_local(const Graph& g, const Node& n, const Strategy& s, const DeviceMesh& mesh,
                                int64_t rank, Graph& local, const std::vector<ValueId>& local_inputs) {
  TESSERA_CHECK(local_inputs.size() == n.inputs.size(), n.name << ": " << local_inputs.size() << " local inputs for "
                                                               << n.inputs.size() << " slots");
  LocalOp op{g, n, s, mesh, rank, local, local_inputs};
  for (size_t a = 0; a < s.axes.size(); ++a)
    if (s.axes[a].kind == Kind::kExplicit) return scale_means(op, s.axes[a].emit(op, static_cast<int>(a)));
  const OpDef& def = op_def(n.kind);
  Attrs attrs = n.attrs;
  std::vector<Shape> local_out;
  for (size_t o = 0; o < n.outputs.size(); ++o)
    local_out.push_back(s.outputs[o].local_shape(mesh, g.type(n.outputs[o]).shape, rank));
  if (def.localize) {
    std::vector<Shape> gin, lin;
    std::vector<bool> have;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      have.push_back(present(n, i));
      gin.push_back(have.back() ? g.type(n.inputs[i]).shape : Shape{});
      lin.push_back(local_inputs[i] != kNoValue ? local.type(local_inputs[i]).shape : Shape{});
    }
    std::vector<Shape> gout;
    for (ValueId v : n.outputs) gout.push_back(g.type(v).shape);
    def.localize(DimMapContext{n, gin, gout, have}, attrs, lin, local_out);
  }
  // A Transpose that moves only dims the split left of size 1 keeps the
  // data in order: on this rank it is a Reshape (a view, not a copy). Only
  // where the split made it so: one that moves only dims of size 1 in the
  // whole tensor too stays a Transpose, as the program on one device keeps
  // it, so that a replicated op costs on a rank what it costs on one device
  // (else a plan that splits nothing is priced below the unsplit program).
  OpKind kind = n.kind;
  if (kind == OpKind::kTranspose && local_inputs[0] != kNoValue) {
    std::vector<int64_t> perm = attrs.ints("perm");
    auto keeps_order = [&](const Shape& in) {
      std::vector<int64_t> order;
      for (int64_t d : perm)
        if (in[static_cast<size_t>(d)] != 1) order.push_back(d);
      return std::is_sorted(order.begin(), order.end());
    };
    if (keeps_order(local.type(local_inputs[0]).shape) && !keeps_order(g.type(n.inputs[0]).shape) &&
        !std::is_sorted(perm.begin(), perm.end())) {
      kind = OpKind::kReshape;
      attrs = Attrs{};
      attrs.set("shape", local_out[0]);
    }
  }
  NodeId id = local.add_node(kind, local_inputs, attrs, n.name);
  std::vector<ValueId> outs = local.node(id).outputs;
  for (size_t o = 0; o < outs.size(); ++o)
    TESSERA_CHECK(local.type(outs[o]).shape == local_out[o],
                  n.name << " (" << op_name(n.kind) << ") under " << s.str() << " makes a local output of "
                         << shape_str(local.type(outs[o]).shape) << ", expected " << shape_str(local_out[o]));
  return scale_means(op, outs);
}

}  // namespace tessera
