// Live ranges of a graph's values over a program order, and the peak of the
// bytes alive at once: the one liveness the reference interpreter (its
// memory check), the search's per-rank memory (mutator/sharding/
// sharded_cost.cc) and the plan's report (mutator/optimize.cc) read. The
// runtimes' arenas place kernels' buffers over their own step lists
// (runtime/memory_planner.h) from the same rule: a value lives from the
// step that writes it to the last step that reads it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "graph/graph.h"

namespace tessera {

// The index in `order` of the last node that reads each value; graph
// outputs live past the end (order.size()); a value nothing reads: -1.
std::vector<int64_t> last_uses(const Graph& g, const std::vector<NodeId>& order);

// The largest sum of bytes(v) over the values alive at once when `g` runs
// in `order`: graph inputs from the start, a node's outputs from its step
// (together with what the step reads), a constant from its first reader;
// each until its last reader's step, a value nothing reads until the end of
// its own step, graph outputs to the end. bytes(v) = 0 leaves a value out
// (constants, for activation memory). A value read twice by one node is
// counted once.
int64_t peak_live_bytes(const Graph& g, const std::vector<NodeId>& order,
                        const std::function<int64_t(ValueId)>& bytes);
// The same with last_uses(g, order) already at hand (a search that prices
// many shardings of one graph).
int64_t peak_live_bytes(const Graph& g, const std::vector<NodeId>& order, const std::vector<int64_t>& last,
                        const std::function<int64_t(ValueId)>& bytes);

}  // namespace tessera
