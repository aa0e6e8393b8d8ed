#include "mutator/sharding/propagate.h"

#include <algorithm>
#include <optional>
#include <set>

#include "cost/collective_model.h"
#include "cost/flops.h"
#include "graph/error.h"
#include "mutator/sharding/reshard.h"
#include "mutator/sharding/spatial_strategy.h"

namespace tessera::mutator {

double ReshardPrices::operator()(ValueId v, const Sharding& from, const Sharding& to) {
  if (from == to || (g_.value(v).constant && !pinned_[static_cast<size_t>(v)])) return 0;
  const TensorType& t = g_.type(v);
  std::string key = from.str();
  key += to.str();
  key += type_str(t);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  double s = reshard_seconds(from, to, t, mesh_, device_);
  cache_.emplace(std::move(key), s);
  return s;
}

namespace {

class Propagation {
 public:
  Propagation(const Graph& g, const DeviceMesh& mesh, const cost::DeviceProfile& device, const StrategyTable* table)
      : g_(g), mesh_(mesh), device_(device), price_(g, mesh, device), users_(g.users()) {
    auto nv = static_cast<size_t>(g.num_values());
    value_.assign(nv, Sharding::replicated(mesh));
    fixed_.assign(nv, std::nullopt);
    is_output_.assign(nv, false);
    for (ValueId v : g.outputs()) is_output_[static_cast<size_t>(v)] = true;
    boundary_.assign(nv, Sharding::replicated(mesh));
    order_ = g.topo_order();
    choice_.assign(static_cast<size_t>(g.num_nodes()), 0);
    if (!table) {
      own_ = strategy_table(g, mesh);
      table = &own_;
    }
    TESSERA_CHECK(table->size() == static_cast<size_t>(g.num_nodes()), "strategy table is for another graph");
    options_ = table;
  }

  void fix(const ShardConstraint& c) {
    const Value& val = g_.value(c.value);
    try {
      // Inside the program an activation may hold uneven bands (the
      // strategies that read them cut them); across the boundary blocks are
      // even (a plan's run reads the whole shape back from rank 0's block),
      // and so are a pinned weight's.
      c.sharding.validate(mesh_, val.type, c.boundary || val.constant ? Blocks::kEven : Blocks::kUneven);
    } catch (const Error& e) {
      TESSERA_THROW(ErrorKind::kInvalidGraph, "tensor '" << val.name << "'"
                                                         << (c.origin.empty() ? "" : " (" + c.origin + ")") << ": "
                                                         << e.what());
    }
    auto v = static_cast<size_t>(c.value);
    if (fixed_[v] && *fixed_[v] != c.sharding)
      TESSERA_THROW(ErrorKind::kInvalidGraph, "tensor '" << val.name << "' is given two shardings, "
                                                         << fixed_[v]->str() << " and " << c.sharding.str());
    fixed_[v] = c.sharding;
    value_[v] = c.sharding;
    price_.pin(c.value);
    if (c.boundary) set_boundary(c);
  }

  // Forward, then alternately backward and forward until nothing changes.
  int run() {
    for (NodeId n : order_) settle(n, false);
    int sweeps = 1;
    bool changed = true;
    for (bool backward = true; changed && sweeps < kMaxSweeps; backward = !backward, ++sweeps) {
      changed = false;
      if (backward)
        for (size_t k = order_.size(); k-- > 0;) changed |= settle(order_[k], true);
      else
        for (NodeId n : order_) changed |= settle(n, true);
    }
    return sweeps;
  }

  ShardedGraph result(int sweeps) {
    ShardedGraph out;
    out.mesh = mesh_;
    for (ValueId v : g_.inputs()) out.inputs.push_back(boundary_[static_cast<size_t>(v)]);
    for (ValueId v : g_.outputs()) out.outputs.push_back(boundary_[static_cast<size_t>(v)]);
    out.values = value_;
    out.sweeps = sweeps;
    for (size_t v = 0; v < fixed_.size(); ++v) out.fixed.push_back(fixed_[v].has_value());
    out.nodes.resize(options_->size());
    std::set<std::pair<ValueId, std::string>> paid;  // one reshard per value and target
    auto pay = [&](ValueId v, const Sharding& from, const Sharding& to) {
      if (from != to && paid.insert({v, to.str()}).second) out.reshard_seconds += price_(v, from, to);
    };
    for (NodeId n : order_) {
      const Strategy& s = chosen(n);
      out.nodes[static_cast<size_t>(n)] = s;
      const Node& node = g_.node(n);
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (node.inputs[i] != kNoValue) pay(node.inputs[i], value_[static_cast<size_t>(node.inputs[i])], s.inputs[i]);
      for (size_t o = 0; o < node.outputs.size(); ++o)
        if (fixed_[static_cast<size_t>(node.outputs[o])]) pay(node.outputs[o], s.outputs[o], value_[static_cast<size_t>(node.outputs[o])]);
    }
    for (ValueId v : g_.outputs()) pay(v, value_[static_cast<size_t>(v)], boundary_[static_cast<size_t>(v)]);
    return out;
  }

 private:
  // A boundary sharding places blocks: a Partial block would leave the sum
  // to the caller, so only Shard and Replicate cross.
  void set_boundary(const ShardConstraint& c) {
    const Value& val = g_.value(c.value);
    bool is_input = std::find(g_.inputs().begin(), g_.inputs().end(), c.value) != g_.inputs().end();
    if (!is_input && !is_output_[static_cast<size_t>(c.value)])
      TESSERA_THROW(ErrorKind::kInvalidGraph,
                    "tensor '" << val.name << "' is neither a graph input nor output: it has no boundary sharding");
    for (const Placement& p : c.sharding.placements)
      if (p.kind == Placement::Kind::kPartial)
        TESSERA_THROW(ErrorKind::kInvalidGraph, "tensor '" << val.name << "'"
                                                           << (c.origin.empty() ? "" : " (" + c.origin + ")")
                                                           << ": a graph input or output crosses the plan's boundary "
                                                              "whole or as blocks, not as partial sums (P)");
    boundary_[static_cast<size_t>(c.value)] = c.sharding;
  }

  const Strategy& chosen(NodeId n) const {
    return (*options_)[static_cast<size_t>(n)][static_cast<size_t>(choice_[static_cast<size_t>(n)])];
  }

  // A rank's share of the node's work, as a roofline: a factor split over
  // an axis divides it; replicated and Partial-through nodes do it whole.
  // The ways axis `a` divides the node's work: its size, or with uneven
  // blocks the whole over the largest block (the rank that finishes last).
  double uneven_ways(const Node& node, const Strategy& s, size_t a) const {
    int64_t n = s.axes[a].groups > 0 ? s.axes[a].groups : mesh_.axes()[a].size;
    if (!s.axes[a].uneven) return static_cast<double>(n);
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const Placement& p = s.outputs[o].placements[a];
      if (!p.is_shard()) continue;
      int64_t size = g_.type(node.outputs[o]).shape[static_cast<size_t>(p.dim)];
      return static_cast<double>(size) / static_cast<double>(block_size(size, n, 0));
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] == kNoValue) continue;
      const Placement& p = s.inputs[i].placements[a];
      if (!p.is_shard()) continue;
      int64_t size = g_.type(node.inputs[i]).shape[static_cast<size_t>(p.dim)];
      return static_cast<double>(size) / static_cast<double>(block_size(size, n, 0));
    }
    return static_cast<double>(n);
  }

  double compute(NodeId n, const Strategy& s) {
    const Node& node = g_.node(n);
    double ways = 1;
    for (size_t a = 0; a < s.axes.size(); ++a)
      if (s.axes[a].kind == AxisStrategy::Kind::kShardFactor || s.axes[a].kind == AxisStrategy::Kind::kExplicit)
        ways *= uneven_ways(node, s, a);
    double bytes = 0;
    for (ValueId v : node.inputs)
      if (v != kNoValue) bytes += static_cast<double>(g_.type(v).nbytes());
    for (ValueId v : node.outputs) bytes += static_cast<double>(g_.type(v).nbytes());
    bool matrix = op_def(node.kind).family == OpFamily::kNn;
    double peak = device_.peak_flops(g_.type(node.outputs[0]).dtype, matrix) *
                  (matrix ? device_.gemm_efficiency : device_.vector_efficiency);
    double bw = device_.main_memory().effective_bandwidth();
    double flops = static_cast<double>(node_flops(g_, node));
    double t = std::max(peak > 0 ? flops / peak : 0.0, bw > 0 ? bytes / bw : 0.0) / ways;
    // A spatial split's halo arrives before the band runs.
    for (size_t a = 0; a < s.axes.size(); ++a)
      if (s.axes[a].halo_bytes > 0) {
        const DeviceMesh::Axis& axis = mesh_.axes()[a];
        t += cost::collective_time(cost::CollectiveKind::kSendRecv, static_cast<double>(s.axes[a].halo_bytes),
                                   axis.size, cost::tier_for_axis(device_, mesh_, axis.name))
                 .time_s;
      }
    return t;
  }

  // A split spreads from where it is: each axis of a strategy must be
  // replicated, or carry a placement that a (non-constant) input already
  // has, that a constraint fixes on an output, or (backward) that a reader
  // asks of an output. So propagation never splits what nothing split.
  bool driven(NodeId n, const Strategy& s, bool with_consumers) {
    const Node& node = g_.node(n);
    for (size_t a = 0; a < s.axes.size(); ++a) {
      if (s.axes[a].kind == AxisStrategy::Kind::kReplicate) continue;
      bool why = false;
      for (size_t i = 0; i < node.inputs.size() && !why; ++i) {
        ValueId v = node.inputs[i];
        if (v == kNoValue || (g_.value(v).constant && !fixed_[static_cast<size_t>(v)])) continue;
        const Placement& p = s.inputs[i].placements[a];
        why = p.kind != Placement::Kind::kReplicate && value_[static_cast<size_t>(v)].placements[a] == p;
      }
      for (size_t o = 0; o < node.outputs.size() && !why; ++o) {
        auto v = static_cast<size_t>(node.outputs[o]);
        const Placement& p = s.outputs[o].placements[a];
        if (p.kind == Placement::Kind::kReplicate) continue;
        if (fixed_[v]) {
          why = fixed_[v]->placements[a] == p;
          continue;
        }
        if (!with_consumers) continue;
        for (NodeId u : users_[v]) {
          const Node& un = g_.node(u);
          for (size_t slot = 0; slot < un.inputs.size() && !why; ++slot)
            why = un.inputs[slot] == node.outputs[o] && chosen(u).inputs[slot].placements[a] == p;
        }
      }
      if (!why) return false;
    }
    return true;
  }

  double cost(NodeId n, const Strategy& s, bool with_consumers) {
    const Node& node = g_.node(n);
    double c = compute(n, s);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] != kNoValue) c += price_(node.inputs[i], value_[static_cast<size_t>(node.inputs[i])], s.inputs[i]);
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      ValueId v = node.outputs[o];
      auto vi = static_cast<size_t>(v);
      if (fixed_[vi]) {
        c += price_(v, s.outputs[o], *fixed_[vi]);
        continue;
      }
      if (is_output_[vi]) c += price_(v, s.outputs[o], boundary_[vi]);
      if (!with_consumers) {
        // Before its readers have chosen, a Partial output is charged the
        // reduction it will need: passing a Partial on is then no cheaper
        // than reducing it here unless it shrinks on the way (and a value
        // read twice is not reduced once per reader downstream).
        if (!is_output_[vi]) {
          Sharding reduced = s.outputs[o];
          for (Placement& p : reduced.placements)
            if (p.kind == Placement::Kind::kPartial) p = Placement::replicate();
          c += price_(v, s.outputs[o], reduced);
        }
        continue;
      }
      for (NodeId u : users_[vi]) {
        const Node& un = g_.node(u);
        for (size_t slot = 0; slot < un.inputs.size(); ++slot)
          if (un.inputs[slot] == v) c += price_(v, s.outputs[o], chosen(u).inputs[slot]);
      }
    }
    return c;
  }

  // Picks n's cheapest strategy (the current one unless another is
  // strictly cheaper, so sweeps settle); returns whether it changed.
  bool settle(NodeId n, bool with_consumers) {
    const std::vector<Strategy>& opts = (*options_)[static_cast<size_t>(n)];
    int& pick = choice_[static_cast<size_t>(n)];
    if (!driven(n, opts[static_cast<size_t>(pick)], with_consumers)) pick = 0;  // the replicated fallback
    int best = pick;
    double best_cost = cost(n, opts[static_cast<size_t>(pick)], with_consumers);
    for (size_t k = 0; k < opts.size(); ++k) {
      if (!driven(n, opts[k], with_consumers)) continue;
      double c = cost(n, opts[k], with_consumers);
      if (c < best_cost - 1e-15) {
        best = static_cast<int>(k);
        best_cost = c;
      }
    }
    bool changed = best != pick;
    pick = best;
    const Node& node = g_.node(n);
    for (size_t o = 0; o < node.outputs.size(); ++o)
      if (!fixed_[static_cast<size_t>(node.outputs[o])]) value_[static_cast<size_t>(node.outputs[o])] = opts[static_cast<size_t>(best)].outputs[o];
    return changed;
  }

  const Graph& g_;
  const DeviceMesh& mesh_;
  const cost::DeviceProfile& device_;
  ReshardPrices price_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<NodeId> order_;
  const StrategyTable* options_ = nullptr;
  StrategyTable own_;
  std::vector<int> choice_;
  std::vector<Sharding> value_;
  std::vector<std::optional<Sharding>> fixed_;
  std::vector<bool> is_output_;
  std::vector<Sharding> boundary_;  // per ValueId: how a graph input or output crosses
};

}  // namespace

std::string describe(const Graph& g, const ShardedGraph& s) {
  std::string out;
  auto steps = [&](const Shape& shape, const Sharding& from, const Sharding& to) {
    std::string t;
    for (const ReshardStep& st : reshard_steps(from, to, s.mesh, shape)) {
      if (!t.empty()) t += ", ";
      t += reshard_step_name(st.kind);
      t += " over ";
      t += s.mesh.axes()[static_cast<size_t>(st.axis)].name;
    }
    return t;
  };
  auto line = [&](ValueId v, const Sharding& from, const Sharding& to) {
    out += "  reshard " + g.value(v).name + ": " + from.str() + " -> " + to.str() + " (" +
           steps(g.type(v).shape, from, to) + ")\n";
  };
  for (NodeId n : g.topo_order()) {
    const Node& node = g.node(n);
    const Strategy& st = s.nodes[static_cast<size_t>(n)];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueId v = node.inputs[i];
      if (v != kNoValue && !g.value(v).constant && s.values[static_cast<size_t>(v)] != st.inputs[i])
        line(v, s.values[static_cast<size_t>(v)], st.inputs[i]);
    }
    out += node.name + ": " + st.str() + "\n";
    for (size_t o = 0; o < node.outputs.size(); ++o)
      if (s.values[static_cast<size_t>(node.outputs[o])] != st.outputs[o])
        line(node.outputs[o], st.outputs[o], s.values[static_cast<size_t>(node.outputs[o])]);
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    ValueId v = g.outputs()[k];
    const Sharding& out = k < s.outputs.size() ? s.outputs[k] : Sharding::replicated(s.mesh);
    if (s.values[static_cast<size_t>(v)] != out) line(v, s.values[static_cast<size_t>(v)], out);
  }
  return out;
}

StrategyTable strategy_table(const Graph& g, const DeviceMesh& mesh) {
  StrategyTable t(static_cast<size_t>(g.num_nodes()));
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    t[static_cast<size_t>(n)] = strategies(g, g.node(n), mesh);
    for (Strategy& s : spatial_strategies(g, g.node(n), mesh)) t[static_cast<size_t>(n)].push_back(std::move(s));
  }
  return t;
}

ShardedGraph propagate(const Graph& g, const DeviceMesh& mesh, const std::vector<ShardConstraint>& fixed,
                       const cost::DeviceProfile& device, const StrategyTable* table) {
  Propagation p(g, mesh, device, table);
  for (const ShardConstraint& c : fixed) p.fix(c);
  int sweeps = p.run();
  return p.result(sweeps);
}

}  // namespace tessera::mutator
