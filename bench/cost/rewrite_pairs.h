// Pairs of alternative programs that compute the same result (a graph before
// and after a rewrite the mutator makes), for checking that the cost model
// orders them the way measurements do.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::bench {

struct RewritePair {
  std::string name;
  Graph before;
  Graph after;
};

std::vector<RewritePair> rewrite_pairs();

}  // namespace tessera::bench
