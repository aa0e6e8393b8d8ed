// Carried state: graph outputs that feed graph inputs at the next step of a
// loop (a decoder's KV cache: present.N.key -> past_key_values.N.key), as
// `--carry OUT=IN` names them. A Session (tools/api) keeps a carried
// tensor on its ranks from one step to the next; the optimizer gives both
// ends of a pair one boundary sharding, so the state never leaves the ranks.
//
//   OUT=IN      one pair, by exact names
//   GLOB=GLOB   every output OUT matches, each `*` of the output pattern
//               carried into the input pattern's `*`s in order:
//               `present.*=past_key_values.*` pairs present.0.key with
//               past_key_values.0.key, and so on.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace tessera::mutator {

struct CarryPair {
  std::string output, input;
  bool operator==(const CarryPair&) const = default;
};

// The pairs that the specs name, in spec order then output order. Throws
// Error(kUsage) with one line naming the spec for a malformed spec, one that
// matches no output, an input it names that the graph does not have, or an
// input carried into twice; Error(kInvalidGraph) naming both tensors when
// an output is not of its input's type (the next step could not take it).
std::vector<CarryPair> resolve_carry(const std::vector<std::pair<std::string, TensorType>>& outputs,
                                     const std::vector<std::pair<std::string, TensorType>>& inputs,
                                     const std::vector<std::string>& specs);

// The same over a graph's outputs and inputs.
std::vector<CarryPair> resolve_carry(const Graph& g, const std::vector<std::string>& specs);

}  // namespace tessera::mutator
