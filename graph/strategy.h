// Sharding strategies of an op: for placements of a node's inputs on a
// device mesh, the placements of its outputs and the local op each rank
// runs. Derived from the op's dimension map (dim_map.h) where they can be:
//
//   - a pass factor (one-to-one: element-wise dims, batch, M, N, output
//     channels) splits when every tensor that holds it has it as the major
//     term of a whole dim: those dims are S, the other inputs R;
//   - a contracted factor that the op sums (MatMul's K, a Conv's input
//     channels, ReduceSum's axis) splits the same way and leaves the outputs
//     Partial(sum); a bias added after the sum must then be Partial too
//     (held by one rank), a mean is scaled by 1/n on each rank;
//   - an op linear in some inputs takes them Partial and gives Partial;
//   - everything else is replicated: the fallback every op has.
//
// Ops list what the map cannot give next to their other facts
// (OpDef::explicit_strategies: Gather's vocab-parallel rows). Strategies are
// chosen per mesh axis and combined: a mesh dp=2,tp=4 may shard the batch
// over dp and the heads over tp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/sharding.h"

namespace tessera {

struct LocalOp;

// What a node does along one mesh axis.
struct AxisStrategy {
  enum class Kind : uint8_t {
    kReplicate,       // every rank computes the whole node
    kShardFactor,     // a factor of the dim map is split over the axis
    kPartialThrough,  // Partial inputs of a linear op stay Partial
    kExplicit,        // listed by the op (OpDef::explicit_strategies)
  };
  Kind kind = Kind::kReplicate;
  int factor = -1;                 // kShardFactor: the factor
  // kShardFactor: 0 splits the factor over the whole axis; g (a divisor of
  // the axis size) into g blocks, each computed by the n/g ranks of a group
  // (Placement::groups): a pass factor the axis does not divide, a KV head
  // that several ranks' query heads read.
  int64_t groups = 0;
  FactorKind factor_kind = FactorKind::kPass;
  std::vector<Placement> inputs;   // per input slot (R for omitted inputs)
  std::vector<Placement> outputs;  // per output
  std::string name;                // for reports: "shard m", "contract k", "partial", "vocab-parallel"
  // kExplicit: appends the rank's local op (local shapes already reflect
  // every axis; the emitter adds what its own axis needs, e.g. a mask).
  std::vector<ValueId> (*emit)(const LocalOp& op, int axis) = nullptr;
  // kExplicit spatial splits (mutator/sharding/spatial_strategy.h): the
  // bytes of halo rows the rank that receives most takes from its
  // neighbours before it runs (its emitter's HaloExchange), for the price.
  int64_t halo_bytes = 0;
  // Its shards may be uneven (Blocks::kUneven, block_start): a factor that
  // is a whole dim of every tensor holding it, which the axis does not
  // divide (a band of rows of an image the ranks do not divide), or a
  // spatial split whose emitter cuts the bands itself. Every rank's local op
  // then reads and makes blocks of its own size.
  bool uneven = false;
  bool operator==(const AxisStrategy&) const = default;
};

struct Strategy {
  std::vector<AxisStrategy> axes;  // per mesh axis
  std::vector<Sharding> inputs;    // per input slot
  std::vector<Sharding> outputs;   // per output
  std::string str() const;         // "[S(0)] x [R] -> [S(0)] (shard m)"
  // Equality is every field's (the axes' emitters included); the hash is a
  // candidate only, confirmed by equality where it keys a memo.
  bool operator==(const Strategy&) const = default;
  uint64_t hash() const;
};

// The choices for one mesh axis of `axis_size` ranks: the replicate fallback
// first, then every factor split (over the whole axis, then in groups: a
// pass factor of size divisible by g, for each divisor 1 < g < n of the
// axis size, split into g blocks each replicated over n/g ranks), Partial
// pass-through and explicit entry that fits. Collectives have only the fallback (they are rank programs,
// not global ops).
std::vector<AxisStrategy> axis_strategies(const Graph& g, const Node& n, int64_t axis_size);

// Every strategy of `n` on `mesh` (the cross product of the axes' choices
// whose combined shardings divide), the all-replicated one first.
std::vector<Strategy> strategies(const Graph& g, const Node& n, const DeviceMesh& mesh);

// The strategies whose inputs are placed exactly as `inputs` (one per input
// slot). Empty when the inputs must be resharded first. Throws
// Error(kInvalidGraph) naming the tensor when a sharding does not fit it (a
// dim the axis does not divide, a dim that does not exist).
std::vector<Strategy> strategies_for(const Graph& g, const Node& n, const DeviceMesh& mesh,
                                     const std::vector<Sharding>& inputs);

// A node's local op on one rank: what emit_local and explicit emitters see.
struct LocalOp {
  const Graph& global;
  const Node& node;
  const Strategy& strategy;
  const DeviceMesh& mesh;
  int64_t rank = 0;
  Graph& local;
  std::vector<ValueId> inputs;  // the rank's local inputs, per input slot (kNoValue if omitted)
};

// Appends to `local` what `rank` runs for `n` under `s`, reading
// `local_inputs` (laid out as s.inputs says), and returns the local outputs
// (laid out as s.outputs says).
std::vector<ValueId> emit_local(const Graph& g, const Node& n, const Strategy& s, const DeviceMesh& mesh,
                                int64_t rank, Graph& local, const std::vector<ValueId>& local_inputs);

// The inputs `n` is linear in once the bias reads of its dim map are left
// out: Conv(x, w) + b is linear in x and in w separately with b counted once.
// For ops without a bias it is the op's own linearity.
Linearity affine_linearity(const Graph& g, const Node& n);

// The block of a tensor of global shape `global` that `rank` holds under
// `sharding`: per dim its offset and size (dims sharded over several axes
// nest in mesh-axis order; uneven blocks as block_start cuts them). Partial
// and Replicate axes hold everything.
void local_block(const DeviceMesh& mesh, const Sharding& sharding, const Shape& global, int64_t rank,
                 std::vector<int64_t>& offset, Shape& size);

// What `rank` holds of `global` under `sharding`: its block, or zeros on
// ranks off coordinate 0 of a Partial axis (how a whole value is split into
// partials that sum to it). A whole block is `global` itself, one run of
// its elements a view of it (Tensor::view_part), and a strided block of a
// view (a column split of a mapped weight) is made when read (Tensor::made).
Tensor shard_of(const Tensor& global, const Sharding& sharding, const DeviceMesh& mesh, int64_t rank);

// The inverse of shard_of for Shard and Replicate placements: the global
// tensor of shape `global` from every rank's block (by rank; a replicated
// axis is read at coordinate 0). Throws Error(kInvalidGraph) for a Partial
// placement or blocks of the wrong type.
Tensor unshard(const std::vector<Tensor>& blocks, const Sharding& sharding, const DeviceMesh& mesh, const Shape& global);

// The global shape of a tensor whose block is `local` under `sharding`
// (even blocks only: an uneven block does not tell the whole).
Shape global_shape(const Sharding& sharding, const DeviceMesh& mesh, const Shape& local);

}  // namespace tessera
