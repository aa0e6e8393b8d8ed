// Random one-node graphs, at least one per op kind that a global program can
// hold (every kind but the collectives), for property tests over the op
// table: dimension maps against the reference kernels, sharding strategies
// against the global op. Sizes are drawn from small sets that mix sizes the
// rank counts 2, 3 and 4 divide (4, 6, 12) with odd ones (1, 3, 5), so that
// some strategies exist and some do not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::testing {

struct OpCase {
  std::string name;  // "<Op>/<variant>/<seed>"
  Graph graph;       // inputs, constants (indices, shapes), one node, its outputs
  NodeId node = 0;
};

// The cases for one seed; the same seed gives the same graphs.
std::vector<OpCase> op_cases(uint64_t seed);

// Random inputs for a case's graph inputs: floats in [0.5, 1.5) (positive,
// so Sqrt, Log and Pow stay real), integers in [0, 4), random bools.
std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed);

}  // namespace tessera::testing
