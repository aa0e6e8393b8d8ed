// The graphs the sharding search (shard_search.h) searches a mesh on: the
// graph as given, and each mesh rule of the registry (rules/rule.h,
// Rule::mesh_only) applied everywhere it applies.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.h"
#include "graph/graph.h"
#include "mutator/rules/rule.h"
#include "mutator/sharding/shard_search.h"

namespace tessera::mutator {

// Every instance of a mesh rule the graph has, for a mesh whose innermost
// axis has `ways` devices, applied together.
Graph apply_everywhere(const Graph& g, const Rule& rule, int64_t ways, std::vector<std::string>& applied);

// The graphs a mesh is searched on: the graph as given, and each mesh rule
// of the registry applied everywhere it applies (for the mesh's innermost
// degree where the rule depends on it), made once per rule and degree.
class Variants {
 public:
  struct Variant {
    std::string name;            // "as given", "split-merged-projection x12", "permute-merged-projection(2) x12"
    const Rule* rule = nullptr;  // nullptr: as given
    Graph graph;
    std::vector<std::string> rewrites;
  };

  Variants(const Graph& g, const ShardSearchOptions& o) : g_(g) {
    variants_.push_back({"as given", nullptr, g, {}});
    if (!o.rewrites || o.rewrite == "none") return;
    if (!o.rewrite.empty()) {
      const Rule& r = find_rule(o.rewrite);  // Error(kUsage) naming the valid rules
      if (!r.mesh_only)
        TESSERA_THROW(ErrorKind::kUsage, "rule '" << o.rewrite << "' is not a sharding rewrite (" << mesh_rule_names()
                                                  << ")");
      if (o.disabled_rules.count(r.name))
        TESSERA_THROW(ErrorKind::kUsage, "sharding rewrite '" << o.rewrite << "' is also disabled by --disable-rule");
    }
    for (const Rule& r : all_rules())
      if (r.mesh_only && !o.disabled_rules.count(r.name) && (o.rewrite.empty() || o.rewrite == r.name))
        rules_.push_back(&r);
  }

  static std::string mesh_rule_names() {
    std::string out;
    for (const Rule& r : all_rules())
      if (r.mesh_only) out += (out.empty() ? "" : ", ") + r.name;
    return out;
  }

  // Indices of the graphs to search `mesh` on: the graph as given (unless
  // only a rewrite was asked for), then every rule that applies.
  std::vector<size_t> for_mesh(const DeviceMesh& mesh, bool only_rewritten) {
    std::vector<size_t> out;
    if (!only_rewritten || mesh.num_devices() == 1) out.push_back(0);
    if (mesh.num_devices() == 1) return out;
    int64_t ways = mesh.axes().back().size;
    for (const Rule* r : rules_) {
      auto key = std::make_pair(r, r->mesh_fn ? ways : 0);
      auto it = made_.find(key);
      if (it == made_.end()) {
        std::vector<std::string> applied;
        Graph rewritten = apply_everywhere(g_, *r, ways, applied);
        size_t idx = 0;
        if (!applied.empty()) {
          idx = variants_.size();
          std::string name = r->name + (r->mesh_fn ? "(" + std::to_string(ways) + ")" : "") + " x" +
                             std::to_string(applied.size());
          variants_.push_back({name, r, std::move(rewritten), applied});
        }
        it = made_.emplace(key, idx).first;
      }
      if (it->second > 0) out.push_back(it->second);
    }
    return out;
  }

  const Variant& operator[](size_t k) const { return variants_[k]; }

 private:
  const Graph& g_;
  std::vector<const Rule*> rules_;
  std::vector<Variant> variants_;
  std::map<std::pair<const Rule*, int64_t>, size_t> made_;  // 0: applies nowhere
};

}  // namespace tessera::mutator
