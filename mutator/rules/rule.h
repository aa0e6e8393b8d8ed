// Rewrite rules: named, fully equivalent rewrites. A rule is a function from
// a root node to the mutations it proposes there; the registry (registry.cc)
// indexes rules by root op kind. Each rule names the Z3 obligations that
// prove its identity for all sizes (verifier/proofs.h) and checks, on each
// instance, the preconditions they assume; or it says why its instances are
// each checked by the multilinear test instead.
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
// The obligation whose preconditions instance m satisfies exactly, or ""
// when m lies outside all of them.
using CoverFn = std::string (*)(const Mutation& m);

// What verify() is given for a mutation no proof covers: it is tested.
inline constexpr const char* kNoObligation = "";

struct Rule {
  std::string name;        // kebab-case, stable (--disable-rule)
  std::string identity;    // what it rewrites, as a formula
  std::vector<OpKind> roots;
  RuleFn fn = nullptr;
  // The Z3 obligations of the identity over symbolic sizes (verifier/
  // proofs.h), and the check of an instance against their preconditions:
  // made on the mutation itself (m.before, m.replacement), not trusted from
  // the matcher that proposed it. A covered instance of a proven obligation
  // needs no test; one outside is tested as a rule without a proof is.
  std::vector<std::string> obligations;
  CoverFn covered_by = nullptr;
  // A rule without obligations, or without covered_by: why its instances
  // are each tested.
  std::string per_instance;
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
  // A mesh rule whose rewrite depends on the mesh, in place of `fn`: called
  // with the number of devices on the mesh's innermost axis (`ways`).
  std::vector<Mutation> (*mesh_fn)(const RuleContext&, NodeId root, int64_t ways) = nullptr;
};

// What `rule` proposes at root on a mesh whose innermost axis has `ways`
// devices: fn's mutations, or mesh_fn's for that degree.
std::vector<Mutation> propose(const Rule& rule, const RuleContext& ctx, NodeId root, int64_t ways);

// The obligation of `rule` that covers instance m, or kNoObligation.
std::string covering_obligation(const Rule& rule, const Mutation& m);
// "[proof: a, b]" or "[per instance: why]", for --list-rules.
std::string check_text(const Rule& rule);

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
// Same type and bytes.
bool same_tensor(const Tensor& a, const Tensor& b);
// Whether value rv of a mutation's replacement is value bv of its `before`
// graph: the same input (the two share a signature) or equal constants.
bool same_operand(const Graph& before, ValueId bv, const Graph& replacement, ValueId rv);

}  // namespace tessera::mutator
