// FLOP counts per node, the compute term of the cost model. A multiply-add
// counts as 2 FLOPs; element-wise ops count one FLOP per output element times
// the op's arithmetic weight; data movement counts 0.
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace tessera {

int64_t node_flops(const Graph& g, const Node& node);
int64_t graph_flops(const Graph& g);

}  // namespace tessera
