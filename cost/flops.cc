#include "cost/flops.h"

namespace tessera {

// The op table's FLOPs rows (graph/op.h: OpDef::flops,
// input_arithmetic, arithmetic).
int64_t node_flops(const Graph& g, const Node& n) { return op_flops(g, n); }

int64_t graph_flops(const Graph& g) {
  int64_t total = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) total += node_flops(g, g.node(n));
  return total;
}

}  // namespace tessera
