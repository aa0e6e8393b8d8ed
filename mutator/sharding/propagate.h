// Sharding propagation, as GSPMD's: from fixed placements of a few tensors
// (user annotations, or the search's choices) to a sharding of every tensor
// and a strategy (graph/strategy.h) for every node. Where two placements
// meet, the cheaper reshard on the device's collective model wins.
//
// Sweeps: forward in topological order, each node picking, among the
// strategies its neighbours drive (every split axis carries a placement an
// input already has, a constraint fixes, or a reader asks for), the one
// whose reshards and per-rank work (a roofline of its FLOPs and bytes over
// the ranks that split it) cost least; then backward, each node also
// weighing what its readers ask; repeated until nothing changes (at most
// kMaxSweeps). Ties go to the strategy listed first, the replicated one
// first of all, and nothing splits what nothing drives. Deterministic.
//
// Graph inputs are fed whole (replicated) and graph outputs gathered to
// replicated, unless a boundary constraint says how they cross the plan's
// boundary (GSPMD's in/out shardings): then each rank is fed, or gives
// back, its block. Constants take whatever sharding their reader wants for
// free (the partitioner gives each rank its block of the data), unless
// annotated: an annotated weight is held as annotated and drives its
// readers like any tensor.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "graph/strategy.h"

namespace tessera::mutator {

struct ShardConstraint {
  ValueId value = kNoValue;
  Sharding sharding;
  std::string origin;  // what the user wrote, for errors and reports
  // On a graph input or output: it crosses the plan's boundary as each
  // rank's block (the rank program's input or output is the block). A
  // constraint that is not (the search's pins) shards the value inside the
  // program only: the input is fed whole, the output gathered.
  bool boundary = false;
};

struct ShardedGraph {
  DeviceMesh mesh;
  std::vector<Sharding> values;  // per ValueId: the sharding readers see
  std::vector<Strategy> nodes;   // per NodeId: the strategy it runs
  std::vector<bool> fixed;       // per ValueId: set by a constraint
  // How each graph input and output crosses the plan's boundary, by
  // position: replicated (whole) unless a boundary constraint says.
  std::vector<Sharding> inputs, outputs;
  double reshard_seconds = 0;    // predicted, every reshard of the plan
  int sweeps = 0;
};

inline constexpr int kMaxSweeps = 6;

// strategies(g, node, mesh) of every node, by NodeId: what propagation
// chooses among. The search builds it once per graph and mesh and
// propagates many times over it.
using StrategyTable = std::vector<std::vector<Strategy>>;
StrategyTable strategy_table(const Graph& g, const DeviceMesh& mesh);

// Throws Error(kInvalidGraph) naming the tensor when a constraint does not
// fit it (a dim the axis size does not divide, a dim it does not have, the
// wrong number of placements).
// `table`, when given, is strategy_table(g, mesh).
ShardedGraph propagate(const Graph& g, const DeviceMesh& mesh, const std::vector<ShardConstraint>& fixed,
                       const cost::DeviceProfile& device, const StrategyTable* table = nullptr);

// One line per node, "name: strategy", and one per reshard, "  reshard
// value: from -> to (steps)": what golden tests and reports print.
std::string describe(const Graph& g, const ShardedGraph& s);

// Predicted seconds of moving value `v` of `g` from `from` to `to`; free
// for constants (the partitioner writes the block each rank needs) unless
// pinned: a constraint on a weight says how ranks hold it.
class ReshardPrices {
 public:
  ReshardPrices(const Graph& g, const DeviceMesh& mesh, const cost::DeviceProfile& device)
      : g_(g), mesh_(mesh), device_(device), pinned_(static_cast<size_t>(g.num_values()), false) {}
  void pin(ValueId v) { pinned_[static_cast<size_t>(v)] = true; }
  double operator()(ValueId v, const Sharding& from, const Sharding& to);

 private:
  const Graph& g_;
  const DeviceMesh& mesh_;
  const cost::DeviceProfile& device_;
  std::vector<bool> pinned_;
  std::map<std::string, double> cache_;
};

}  // namespace tessera::mutator
