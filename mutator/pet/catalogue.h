// The PET operator catalogue: moves that rewrite one anchor op (a Conv or a
// MatMul) or a pair of them into an operator sequence that moves one
// dimension into another (batch <-> height/width, dilation -> batch), pads
// and slices for odd sizes, splits groups, or batches two products into one.
// A move only checks that its shapes line up; whether the result equals the
// original, everywhere or on part of the output, is for the multilinear test
// to say (enumerate.h). That is what lets sequences of moves be enumerated
// blindly: the catalogue is not a list of known-good outcomes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::mutator::pet {

struct Move {
  std::string name;     // kebab-case; a mutant's description lists its sequence
  std::string inverse;  // the move that undoes this one ("" when none is in the catalogue)
  int arity = 1;        // anchors it rewrites: 1, or 2 (a pair of independent anchors)
  // The program with the move applied to `anchors` (node ids of `g`), or
  // nullopt when the move does not apply there.
  std::function<std::optional<Graph>(const Graph& g, const std::vector<NodeId>& anchors)> apply;
};

// Every move, in the order the enumeration tries them.
const std::vector<Move>& catalogue();

// Ops the catalogue's moves rewrite.
bool is_anchor(const Node& n);

}  // namespace tessera::mutator::pet
