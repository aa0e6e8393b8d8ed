#include "mutator/sharding/partition.h"

#include <map>
#include <optional>

#include "graph/error.h"
#include "mutator/sharding/reshard.h"

namespace tessera::mutator {
namespace {

class RankBuilder {
 public:
  RankBuilder(const Graph& g, const ShardedGraph& s, int64_t rank) : g_(g), s_(s), rank_(rank) {
    local_.name = g.name + "_rank" + std::to_string(rank);
  }

  Graph build() {
    for (size_t k = 0; k < g_.inputs().size(); ++k) {
      ValueId v = g_.inputs()[k];
      const Sharding& crosses = boundary(s_.inputs, k);
      TensorType t = g_.type(v);
      t.shape = crosses.local_shape(s_.mesh, t.shape, rank_);
      ValueId in = local_.add_input(g_.value(v).name, t);
      at_[{v, crosses.str()}] = in;
      home(v, crosses);
    }
    for (NodeId n : g_.topo_order()) {
      const Node& node = g_.node(n);
      const Strategy& st = s_.nodes[static_cast<size_t>(n)];
      std::vector<ValueId> ins;
      for (size_t i = 0; i < node.inputs.size(); ++i)
        ins.push_back(node.inputs[i] == kNoValue ? kNoValue : as(node.inputs[i], st.inputs[i]));
      std::vector<ValueId> outs = emit_local(g_, node, st, s_.mesh, rank_, local_, ins);
      for (size_t o = 0; o < outs.size(); ++o) {
        ValueId v = node.outputs[o];
        at_[{v, st.outputs[o].str()}] = outs[o];
        if (st.outputs[o] == value_sharding(v)) name_like(outs[o], v);
        home(v, st.outputs[o]);
      }
    }
    std::vector<ValueId> outs;
    for (size_t k = 0; k < g_.outputs().size(); ++k) {
      ValueId v = g_.outputs()[k];
      ValueId lo = as(v, boundary(s_.outputs, k));
      if (local_.value(lo).producer < 0 && local_.value(lo).constant) {
        // An output that is a constant: still a value the program produces.
        lo = local_.add(OpKind::kIdentity, {lo}, {}, g_.value(v).name + "/out");
      }
      outs.push_back(lo);
    }
    // Outputs keep the global graph's names: a program is read as the graph is.
    for (size_t k = 0; k < outs.size(); ++k) {
      const std::string& name = g_.value(g_.outputs()[k]).name;
      std::optional<ValueId> holder = local_.find_value(name);
      if (holder && *holder != outs[k]) local_.rename_value(*holder, name + "/local");
      name_like(outs[k], g_.outputs()[k]);
    }
    local_.set_outputs(outs);
    return std::move(local_);
  }

 private:
  // How the k-th graph input or output crosses the boundary (replicated
  // where the sharding predates boundary shardings and lists none).
  const Sharding& boundary(const std::vector<Sharding>& list, size_t k) const {
    return k < list.size() ? list[k] : whole_;
  }

  const Sharding& value_sharding(ValueId v) const { return s_.values[static_cast<size_t>(v)]; }

  // The value as its readers see it: its own sharding, reached from what
  // was produced (a constraint may ask for another than the strategy made).
  void home(ValueId v, const Sharding& produced) {
    const Sharding& want = value_sharding(v);
    if (produced == want || g_.value(v).constant) return;
    ValueId from = at_.at({v, produced.str()});
    at_[{v, want.str()}] = emit_reshard(local_, from, produced, want, g_.type(v), s_.mesh, rank_, g_.value(v).name);
  }

  // `v` laid out as `want`, resharded once per (value, layout) however many
  // readers want it; constants are written as the block this rank holds.
  ValueId as(ValueId v, const Sharding& want) {
    auto key = std::make_pair(v, want.str());
    auto it = at_.find(key);
    if (it != at_.end()) return it->second;
    const Value& val = g_.value(v);
    ValueId lv;
    if (val.constant) {
      // Any layout of a constant is its data cut as that layout says: a
      // pinned weight read in another layout is written in that one too.
      std::string name = val.name;
      if (local_.find_value(name)) name += "/" + want.str();
      lv = local_.add_constant(name, shard_of(*val.constant, want, s_.mesh, rank_));
    } else {
      const Sharding& have = value_sharding(v);
      lv = emit_reshard(local_, at_.at({v, have.str()}), have, want, val.type, s_.mesh, rank_, val.name);
    }
    at_[key] = lv;
    return lv;
  }

  void name_like(ValueId local, ValueId global) {
    const std::string& name = g_.value(global).name;
    if (local_.value(local).name == name || local_.find_value(name)) return;
    local_.rename_value(local, name);
  }

  const Graph& g_;
  const ShardedGraph& s_;
  Sharding whole_ = Sharding::replicated(s_.mesh);
  int64_t rank_;
  Graph local_;
  std::map<std::pair<ValueId, std::string>, ValueId> at_;
};

}  // namespace

RankPrograms partition(const Graph& g, const ShardedGraph& sharded) {
  TESSERA_CHECK(sharded.nodes.size() == static_cast<size_t>(g.num_nodes()), "sharding is for another graph");
  RankPrograms p;
  p.mesh = sharded.mesh;
  for (int64_t r = 0; r < sharded.mesh.num_devices(); ++r) p.ranks.push_back(RankBuilder(g, sharded, r).build());
  return p;
}

Graph partition_rank(const Graph& g, const ShardedGraph& sharded, int64_t rank) {
  TESSERA_CHECK(sharded.nodes.size() == static_cast<size_t>(g.num_nodes()), "sharding is for another graph");
  TESSERA_CHECK(rank >= 0 && rank < sharded.mesh.num_devices(), "rank " << rank << " is not in " << sharded.mesh.str());
  return RankBuilder(g, sharded, rank).build();
}

}  // namespace tessera::mutator
