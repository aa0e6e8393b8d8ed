#include "mutator/sharding/deep_halo.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "graph/error.h"
#include "mutator/sharding/spatial.h"
#include "mutator/sharding/spatial_strategy.h"

namespace tessera::mutator {
namespace {

bool banded_on(const Sharding& s, int64_t dim) {
  return s.placements.size() == 1 && s.placements[0] == Placement::shard(dim);
}

// Node u continues a chain in bands of `dim` from value v: it reads v as
// its input 0 in bands and makes bands, its other inputs are constants, and
// it is a spatial window op or keeps v's shape (an element-wise op).
bool continues_chain(const Graph& g, const ShardedGraph& s, NodeId u, ValueId v, int64_t dim) {
  const Node& node = g.node(u);
  const Strategy& st = s.nodes[static_cast<size_t>(u)];
  if (node.inputs.empty() || node.inputs[0] != v || node.outputs.size() != 1 || st.axes.size() != 1) return false;
  if (!banded_on(st.inputs[0], dim) || !banded_on(st.outputs[0], dim) ||
      !banded_on(s.values[static_cast<size_t>(node.outputs[0])], dim))
    return false;
  for (size_t i = 1; i < node.inputs.size(); ++i)
    if (node.inputs[i] != kNoValue && !g.value(node.inputs[i]).is_constant()) return false;
  if (is_window_layer(node.kind)) return is_spatial(st.axes[0]);
  return st.axes[0].kind != AxisStrategy::Kind::kExplicit && g.type(node.outputs[0]).shape == g.type(v).shape;
}

// Whether value v is read by exactly one node and is no graph output.
bool only_reader(const Graph& g, const std::vector<std::vector<NodeId>>& users, ValueId v) {
  if (users[static_cast<size_t>(v)].size() != 1) return false;
  return std::find(g.outputs().begin(), g.outputs().end(), v) == g.outputs().end();
}

// Rank c's band program of the chain inlined into `program` in place of the
// nodes the partitioner emitted for it.
void splice_band_program(const Graph& g, const SpatialChain& chain, const SpatialPlan& plan, int64_t c, Graph& program) {
  const Node& last = g.node(chain.nodes.back());
  const std::string& out_name = g.value(last.outputs[0]).name;
  std::optional<ValueId> out = program.find_value(out_name);
  TESSERA_CHECK(out, "rank " << c << "'s program has no value " << out_name << " for its deeper halo");
  // Back from the chain's output through the nodes emitted for it (the op,
  // its "/halo" and "/band") to the band of the chain's input.
  std::set<std::string> names;
  for (NodeId n : chain.nodes) {
    names.insert(g.node(n).name);
    names.insert(g.node(n).name + "/halo");
    names.insert(g.node(n).name + "/band");
  }
  ValueId in = *out;
  int64_t ops = 0;
  while (program.value(in).producer >= 0 && names.count(program.node(program.value(in).producer).name)) {
    const Node& p = program.node(program.value(in).producer);
    for (size_t i = 1; i < p.inputs.size(); ++i)
      TESSERA_CHECK(p.inputs[i] == kNoValue || program.value(p.inputs[i]).is_constant(),
                    p.name << " reads a computed value beside its chain in rank " << c << "'s program");
    if (p.kind != OpKind::kHaloExchange && !(p.kind == OpKind::kSlice && p.name.ends_with("/band"))) ++ops;
    in = p.inputs[0];
  }
  TESSERA_CHECK(ops == static_cast<int64_t>(chain.nodes.size()),
                "rank " << c << "'s program holds " << ops << " of the chain's " << chain.nodes.size() << " layers");
  const Graph& band = plan.ranks[static_cast<size_t>(c)];
  TESSERA_CHECK(band.type(band.inputs()[0]) == program.type(in) && band.type(band.outputs()[0]) == program.type(*out),
                "the deeper halo's band program of rank " << c << " does not fit its program's bands");
  std::map<ValueId, ValueId> map{{band.inputs()[0], in}};
  for (ValueId v = 0; v < band.num_values(); ++v) {
    const Value& val = band.value(v);
    if (!val.is_constant()) continue;
    std::optional<ValueId> held = program.find_value(val.name);
    if (held && program.value(*held).is_constant() && program.type(*held) == val.type) {
      map[v] = *held;  // the replicated weight the program already holds
      continue;
    }
    std::string name = val.name + "/deep";
    for (int i = 2; program.find_value(name); ++i) name = val.name + "/deep" + std::to_string(i);
    map[v] = program.add_constant(name, *val.constant);
  }
  const std::string head = g.node(chain.nodes.front()).name;
  for (NodeId id : band.topo_order()) {
    const Node& n = band.node(id);
    std::vector<ValueId> ins;
    for (ValueId v : n.inputs) ins.push_back(v == kNoValue ? kNoValue : map.at(v));
    std::string name = n.kind == OpKind::kHaloExchange ? head + "/" + n.name : n.name;
    NodeId made = program.add_node(n.kind, ins, n.attrs, name);
    for (size_t i = 0; i < n.outputs.size(); ++i) map[n.outputs[i]] = program.node(made).outputs[i];
  }
  ValueId y = map.at(band.outputs()[0]);
  program.rename_value(*out, out_name + "/every-layer");
  program.replace_all_uses(*out, y);
  program.rename_value(y, out_name);
  program.remove_dead();
}

std::optional<SpatialPlan> deep_plan_of(const Graph& g, const DeepHalo& d, const DeviceMesh& mesh) {
  return spatial_plan_at(g, d.chain.nodes, d.chain.dim, mesh, every_k_window_layers(g, d.chain.nodes, d.every));
}

}  // namespace

std::vector<SpatialChain> spatial_chains(const Graph& g, const ShardedGraph& s) {
  std::vector<SpatialChain> out;
  if (s.mesh.axes().size() != 1) return out;
  std::vector<std::vector<NodeId>> users = g.users();
  std::vector<bool> taken(static_cast<size_t>(g.num_nodes()), false);
  for (NodeId n : g.topo_order()) {
    const Node& node = g.node(n);
    const Strategy& st = s.nodes[static_cast<size_t>(n)];
    if (taken[static_cast<size_t>(n)] || !is_window_layer(node.kind) || st.axes.size() != 1 || !is_spatial(st.axes[0]))
      continue;
    SpatialChain c;
    c.dim = st.axes[0].inputs[0].dim;
    if (!continues_chain(g, s, n, node.inputs[0], c.dim)) continue;
    c.nodes.push_back(n);
    for (NodeId cur = n;;) {
      ValueId v = g.node(cur).outputs[0];
      if (!only_reader(g, users, v)) break;
      NodeId u = users[static_cast<size_t>(v)][0];
      if (!continues_chain(g, s, u, v, c.dim)) break;
      c.nodes.push_back(u);
      cur = u;
    }
    while (!is_window_layer(g.node(c.nodes.back()).kind)) c.nodes.pop_back();
    for (NodeId m : c.nodes) taken[static_cast<size_t>(m)] = true;
    if (window_layers(g, c.nodes) >= 2) out.push_back(std::move(c));
  }
  return out;
}

std::string DeepHalo::str(const Graph& g) const {
  std::ostringstream os;
  os << std::setprecision(3) << "deeper halo: " << g.node(chain.nodes.front()).name << ".."
     << g.node(chain.nodes.back()).name << " exchange every " << every << " of " << window_layers(g, chain.nodes)
     << " window layers (" << time_s * 1e3 << " ms, every layer " << every_layer_s * 1e3 << " ms)";
  return os.str();
}

std::vector<DeepHalo> choose_deep_halos(const Graph& g, const ShardedGraph& s, const cost::DeviceProfile& rank_device,
                                        const SpatialPricing& how) {
  std::vector<DeepHalo> out;
  SpatialPricing windows = how;
  windows.unit = SpatialPricing::Unit::kWindowLayers;
  for (SpatialChain& c : spatial_chains(g, s)) {
    std::optional<SpatialChoice> choice = cheapest_spatial_plan(g, c.nodes, c.dim, s.mesh, rank_device, windows);
    if (!choice || choice->every <= 1 || choice->tried.empty() || choice->tried.front().first != 1) continue;
    DeepHalo d;
    d.chain = std::move(c);
    d.every = choice->every;
    d.time_s = choice->time_s;
    d.every_layer_s = choice->tried.front().second;
    d.tried = choice->tried;
    out.push_back(std::move(d));
  }
  return out;
}

void apply_deep_halos(const Graph& g, const std::vector<DeepHalo>& deep, const DeviceMesh& mesh, int64_t rank,
                      Graph& program) {
  for (const DeepHalo& d : deep) {
    std::optional<SpatialPlan> plan = deep_plan_of(g, d, mesh);
    TESSERA_CHECK(plan, "the deeper halo of " << g.node(d.chain.nodes.front()).name << " no longer plans");
    splice_band_program(g, d.chain, *plan, rank, program);
  }
}

}  // namespace tessera::mutator
