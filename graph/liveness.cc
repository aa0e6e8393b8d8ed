#include "graph/liveness.h"

#include <algorithm>

namespace tessera {

std::vector<int64_t> last_uses(const Graph& g, const std::vector<NodeId>& order) {
  std::vector<int64_t> last(static_cast<size_t>(g.num_values()), -1);
  for (size_t k = 0; k < order.size(); ++k)
    for (ValueId in : g.node(order[k]).inputs)
      if (in != kNoValue) last[static_cast<size_t>(in)] = static_cast<int64_t>(k);
  for (ValueId v : g.outputs()) last[static_cast<size_t>(v)] = static_cast<int64_t>(order.size());
  return last;
}

int64_t peak_live_bytes(const Graph& g, const std::vector<NodeId>& order,
                        const std::function<int64_t(ValueId)>& bytes) {
  return peak_live_bytes(g, order, last_uses(g, order), bytes);
}

int64_t peak_live_bytes(const Graph& g, const std::vector<NodeId>& order, const std::vector<int64_t>& last,
                        const std::function<int64_t(ValueId)>& bytes) {
  std::vector<bool> alive(static_cast<size_t>(g.num_values()), false);
  int64_t live = 0, peak = 0;
  auto add = [&](ValueId v) {
    if (v == kNoValue || alive[static_cast<size_t>(v)]) return;
    alive[static_cast<size_t>(v)] = true;
    live += bytes(v);
  };
  auto drop = [&](ValueId v) {
    if (v == kNoValue || !alive[static_cast<size_t>(v)]) return;
    alive[static_cast<size_t>(v)] = false;
    live -= bytes(v);
  };
  for (ValueId v : g.inputs()) add(v);
  peak = live;
  for (size_t k = 0; k < order.size(); ++k) {
    const Node& node = g.node(order[k]);
    for (ValueId in : node.inputs)
      if (in != kNoValue && g.value(in).is_constant()) add(in);
    for (ValueId o : node.outputs) add(o);
    peak = std::max(peak, live);
    for (ValueId in : node.inputs)
      if (in != kNoValue && last[static_cast<size_t>(in)] == static_cast<int64_t>(k)) drop(in);
    for (ValueId o : node.outputs)
      if (last[static_cast<size_t>(o)] < 0) drop(o);
  }
  // A graph output no node makes (a constant or an input) is held at the end.
  for (ValueId v : g.outputs()) add(v);
  return std::max(peak, live);
}

}  // namespace tessera
