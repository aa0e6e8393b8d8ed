// Evaluates an original graph and a candidate over Z_p on the same inputs,
// computing once what both compute: a candidate node that applies the same op
// with the same attributes to values equal (by content) to an original node's
// inputs takes that node's outputs instead of running its kernel. Kernels are
// deterministic, so the results are exactly those of two separate runs; the
// saving is that a mutant pays only for the part where it really differs
// (measured on a ResNet basic block with an explicit-Pad mutant: the
// candidate's second conv and epilogue are reused; see bench/verifier).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "graph/zp.h"

namespace tessera::verifier {

struct PairOutputs {
  std::vector<RefTensor<Zp>> original, candidate;
  int64_t reused_nodes = 0;  // candidate nodes whose kernel did not run
};

// Both graphs take `inputs` (same types). Graphs with collectives are not
// accepted here (use Program::run). Throws Error as interpret() does.
PairOutputs evaluate_pair_zp(const Graph& original, const Graph& candidate, const std::vector<RefTensor<Zp>>& inputs);

// Whether evaluate_pair_zp can run `g` (no collective ops).
bool pair_evaluable(const Graph& g);

}  // namespace tessera::verifier
