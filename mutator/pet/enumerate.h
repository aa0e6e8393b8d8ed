// PET-style enumerated mutants: at an anchor op (Conv, MatMul), every
// sequence of up to `depth` moves from the operator catalogue (catalogue.h),
// breadth first, over the program made of the anchor alone or, for the pair
// moves, of the anchor and its first independent partner of the same shape.
// Sequences that undo their previous move are pruned, and programs already
// seen (structural hash confirmed by equality) are dropped. The mutants come
// back unverified: the search tests each with the multilinear test and keeps
// those equal everywhere, or equal but on a few output boxes (then with
// corrections, correction.h).
#pragma once

#include <vector>

#include "mutator/mutation.h"
#include "mutator/rules/rule.h"

namespace tessera::mutator::pet {

struct EnumerateOptions {
  int depth = 3;         // moves per sequence
  int max_states = 128;  // programs visited per anchor
  int max_mutants = 32;  // mutants returned per anchor (the shortest sequences first)
};

inline constexpr const char* kRuleName = "pet-enumeration";

std::vector<Mutation> enumerate_mutants(const RuleContext& ctx, NodeId root, const EnumerateOptions& options = {});

// The first anchor after `root` with the same kind and operand types that is
// independent of it (neither reads the other), or -1.
NodeId pair_partner(const RuleContext& ctx, NodeId root);

}  // namespace tessera::mutator::pet
