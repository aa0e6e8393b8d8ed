// The unit the search moves by: a Mutation replaces a set of nodes of a graph
// by a small replacement graph that computes the same values. Rules, and
// later enumerated (PET) and partially equivalent mutants, all produce
// Mutations; the search verifies, costs and applies them without knowing
// which generator made them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "verifier/verdict.h"

namespace tessera::mutator {

// How a mutation was shown to be right.
struct Verification {
  enum Status { kUnverified, kProven, kTested, kRejected };
  Status status = kUnverified;
  std::string method;  // "z3:<obligation>", "multilinear", "float-test", ...
  double error_bound = 1.0;  // chance that a "tested" verdict is wrong
  std::string detail;
  // Rejected by the multilinear test: the output boxes that differed (what a
  // partially equivalent mutant's corrections must recompute).
  std::vector<verifier::OutputRegion> differing;

  bool accepted() const { return status == kProven || status == kTested; }
};
const char* verification_status_name(Verification::Status s);

// What made a mutation, as values: the generator's kind, the rule's name,
// and for the search's splice of a subprogram's best program back into the
// host, that subprogram's index (code that needs the index reads the int).
struct MutationId {
  enum class Kind {
    kRule,        // a rewrite rule (mutator/rules/)
    kEnumerated,  // a PET sequence (mutator/pet/enumerate.h)
    kPartial,     // a mutant corrected where it is wrong (mutator/pet/correction.h)
    kSplice,      // a subprogram's best program spliced back (mutator/search.h)
    kSharding,    // a rewrite the sharding search makes for its mesh (mutator/sharding/shard_search.h)
  };
  Kind kind = Kind::kRule;
  std::string rule;     // kebab-case name of the rule or generator; empty for a splice
  int subprogram = -1;  // kSplice: the subprogram's index (partition_subprograms order)

  static MutationId splice(int subprogram) { return {Kind::kSplice, "", subprogram}; }
  // What the nodes and constants the mutation adds are named after: the
  // rule's name, or "subprogram-<i>" for a splice.
  std::string name() const;
  bool operator==(const MutationId&) const = default;
};

// The subprogram whose splice added the node named `node_name` (its name is
// "subprogram-<i>_<k>", after MutationId::name()), or -1 for any other node.
int spliced_subprogram(const std::string& node_name);

struct Mutation {
  MutationId id;  // what made it
  // The host nodes on every path from `inputs` to `outputs`: the computation
  // the replacement stands for (those still read elsewhere stay alive).
  std::vector<NodeId> nodes;
  // Host values the replacement reads, in the order of replacement's inputs,
  // and host values it replaces, in the order of replacement's outputs.
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  Graph before;       // the replaced computation, same signature as replacement
  Graph replacement;
  // Replacement nodes that stand for a host node they rewrite
  // (MutationBuilder::add_as): spliced under their own name, the host node's.
  // Every other replacement node is named after the mutation.
  std::vector<NodeId> keep_names;
  // Partially equivalent mutants (a later generator): output boxes where the
  // replacement is wrong and a correction recomputes the original. Empty for
  // fully equivalent mutations.
  std::vector<verifier::OutputRegion> corrections;
  // When not empty: the replacement before its constant subexpressions were
  // folded (e.g. W*f written as a Mul of the host's W and f). Verification
  // tests this form, since the Z_p test reads a folded non-integral constant
  // as an unrelated residue; folding is exact float evaluation of the same ops.
  Graph unfolded;
  Verification verification;
  std::string description;  // one line for the report
};

// Builds a Mutation: rules read host values through in(), add replacement
// nodes, and say which host value each new value replaces. `nodes` must hold
// every host node between the values read through in() and the replaced
// values, or the before/after comparison would compare different things.
class MutationBuilder {
 public:
  MutationBuilder(const Graph& host, std::string rule, std::vector<NodeId> nodes);

  // The replacement's value for host value v (a constant is copied, anything
  // else becomes a replacement input).
  ValueId in(ValueId v);
  ValueId constant(Tensor data);
  ValueId add(OpKind kind, std::vector<ValueId> inputs, Attrs attrs = {});
  std::vector<ValueId> add_multi(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, int outputs);
  // A node that stands for the host node `host` it replaces (the same op,
  // rewritten): spliced under that node's name, so that module paths and
  // annotations naming it (`*/c_attn/Gemm:in1`) still find it.
  ValueId add_as(NodeId host, OpKind kind, std::vector<ValueId> inputs, Attrs attrs = {});
  void replace(ValueId host_value, ValueId replacement_value);
  const TensorType& type(ValueId replacement_value) const { return g_.type(replacement_value); }
  Mutation finish(std::string description);

 private:
  const Graph& host_;
  std::string rule_;
  std::vector<NodeId> nodes_;
  Graph g_;
  std::vector<ValueId> host_inputs_;
  std::vector<ValueId> host_outputs_, new_outputs_;
  std::vector<NodeId> keep_names_;
  int counter_ = 0;
};

// The host graph with the mutation applied: replacement nodes spliced in,
// uses of replaced values redirected, dead nodes removed. Graph outputs keep
// their names.
Graph apply_mutation(const Graph& host, const Mutation& m);
// Several mutations over disjoint nodes of one host, applied together.
Graph apply_mutations(const Graph& host, const std::vector<Mutation>& ms);

// A name not yet used by any value of g, starting with `base`.
std::string fresh_value_name(const Graph& g, const std::string& base);
// A node name whose default output names "<name>:<i>" are all free.
std::string fresh_node_name(const Graph& g, const std::string& base, size_t outputs);

}  // namespace tessera::mutator
