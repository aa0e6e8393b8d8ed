#include "mutator/sharding/shard_variants.h"

#include <algorithm>
#include <set>

namespace tessera::mutator {

Graph apply_everywhere(const Graph& g, const Rule& rule, int64_t ways, std::vector<std::string>& applied) {
  std::vector<std::vector<NodeId>> users = g.users();
  RuleContext ctx{g, users};
  std::vector<Mutation> ms;
  std::set<NodeId> used;
  for (NodeId n : g.topo_order()) {
    if (std::find(rule.roots.begin(), rule.roots.end(), g.node(n).kind) == rule.roots.end()) continue;
    for (Mutation& m : propose(rule, ctx, n, ways)) {
      if (std::any_of(m.nodes.begin(), m.nodes.end(), [&](NodeId x) { return used.count(x) > 0; })) continue;
      used.insert(m.nodes.begin(), m.nodes.end());
      m.id.kind = MutationId::Kind::kSharding;
      applied.push_back(m.description);
      ms.push_back(std::move(m));
    }
  }
  return ms.empty() ? g : apply_mutations(g, ms);
}

}  // namespace tessera::mutator
