// Rewrite rules: named, fully equivalent rewrites. A rule is a function from
// a root node to the mutations it proposes there; the registry (registry.cc)
// indexes rules by root op kind. Each rule names the Z3 obligation that proves
// its identity once (verifier/proofs.h), or says it is verified per use by the
// multilinear test.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "mutator/mutation.h"

namespace tessera::mutator {

// What a rule sees: the graph and who reads each value.
struct RuleContext {
  const Graph& g;
  const std::vector<std::vector<NodeId>>& users;

  // The single node that reads v, or -1 (several readers, or a graph output).
  NodeId sole_user(ValueId v) const;
  bool is_graph_output(ValueId v) const;
};

using RuleFn = std::vector<Mutation> (*)(const RuleContext&, NodeId root);

inline constexpr const char* kNoObligation = "none: verified per use by the multilinear test";

struct Rule {
  std::string name;        // kebab-case, stable (--disable-rule)
  std::string identity;    // what it rewrites, as a formula
  std::string obligation;  // Z3 obligation name, or kNoObligation
  std::vector<OpKind> roots;
  RuleFn fn = nullptr;
  // A generator of enumerated sequences (PET) rather than one rewrite: the
  // search runs it once per candidate lineage, since its output already holds
  // every sequence up to its depth.
  bool enumerator = false;
  // Its mutants may be right on part of the output only; the search then adds
  // corrections (mutator/pet/correction.h) unless partial mutants are off.
  bool partial = false;
  // Only the sharding search proposes it (mutator/sharding/shard_search.h):
  // on one device it only undoes what another rule does.
  bool mesh_only = false;
};

// Every rule, in the order the search tries them.
const std::vector<Rule>& all_rules();
// Throws Error(kUsage) listing the valid names.
const Rule& find_rule(const std::string& name);
std::string rule_names_list();  // "a, b, c"

// One function per family file; registry.cc calls them in one place.
void register_merge_rules(std::vector<Rule>& rules);
void register_layout_rules(std::vector<Rule>& rules);
void register_algebra_rules(std::vector<Rule>& rules);
void register_scale_rules(std::vector<Rule>& rules);
void register_winograd_rules(std::vector<Rule>& rules);
void register_pet_rules(std::vector<Rule>& rules);  // mutator/pet/enumerate.cc

// A projection by a merged weight split along its columns (merge_rules.cc):
// Split <- [Reshape keeping the last axis] <- [bias Add] <- MatMul/Gemm by a
// constant weight, each read only by the next.
struct MergedProjection {
  NodeId split = -1, reshape = -1, add = -1, product = -1;
  std::vector<NodeId> nodes;  // all of them, sorted
  Tensor weight;              // [K, N]
  Tensor gemm_bias, bias;     // length N, when present
  std::vector<int64_t> sizes; // the parts
};
std::optional<MergedProjection> match_merged_projection(const RuleContext& ctx, NodeId split);
// The merged weight's columns in `ways` blocks of every part, the result
// put back in order by Reshape, Transpose and Split (merge_rules.cc): what
// a column split over `ways` ranks needs to give each whole heads. Proposed
// by the sharding search for its mesh's degree.
std::vector<Mutation> permute_merged_projection(const RuleContext& ctx, NodeId split, int64_t ways);

// Helpers the family files share.
Tensor concat_tensors(const std::vector<Tensor>& parts, int64_t axis);
Tensor transpose_2d(const Tensor& t);
// Columns [begin, begin + count) of the last axis.
Tensor slice_last_axis(const Tensor& t, int64_t begin, int64_t count);
bool is_constant(const Graph& g, ValueId v);

}  // namespace tessera::mutator
