// Sharding types: a device mesh with named axes, and per-tensor placements
// (Replicate, Shard(dim), Partial(sum)) with one placement per mesh axis.
// Value types with validation, equality, hashing and a text form.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace tessera {

class DeviceMesh {
 public:
  struct Axis {
    std::string name;
    int64_t size;
    bool operator==(const Axis&) const = default;
  };

  DeviceMesh() = default;  // a single device (no axes)
  // Throws Error(kUsage) on empty/duplicate names or sizes < 1.
  explicit DeviceMesh(std::vector<Axis> axes);
  // Parses "tp=4" or "dp=2,tp=4".
  static DeviceMesh parse(const std::string& text);

  const std::vector<Axis>& axes() const { return axes_; }
  int64_t num_devices() const;
  // Index of the axis called `name`; throws Error(kUsage) if absent.
  int axis_index(const std::string& name) const;
  int64_t axis_size(const std::string& name) const { return axes_[axis_index(name)].size; }
  // Rank <-> coordinates, row-major over the axes.
  std::vector<int64_t> coords(int64_t rank) const;
  int64_t rank_of(const std::vector<int64_t>& coords) const;
  // Ranks that share all coordinates with `rank` except along `axis`, ordered
  // by their coordinate on that axis (the group a collective runs over).
  std::vector<int64_t> group(int64_t rank, int axis) const;

  std::string str() const;  // "dp=2,tp=4"; "single" for no axes
  bool operator==(const DeviceMesh&) const = default;

 private:
  std::vector<Axis> axes_;
};

// What one mesh axis does to a tensor. A shard may cover only part of the
// axis (GSPMD's partial replication, Shardy's sub-axes): `groups` g, a
// divisor of the axis size n with 1 < g < n, splits `dim` into g blocks over
// the axis's major sub-axis and replicates each block over the minor one, so
// the rank at coordinate c holds block c / (n / g). That is how tensor
// parallelism over more ranks than a model has KV heads holds K and V
// (Megatron-LM, vLLM): at n = 8 with 4 KV heads, ranks 2h and 2h+1 both hold
// KV head h. groups = 0 splits over the whole axis (block c of n).
struct Placement {
  enum class Kind : uint8_t { kReplicate, kShard, kPartial };
  Kind kind = Kind::kReplicate;
  int64_t dim = 0;     // for kShard
  int64_t groups = 0;  // for kShard: 0, or the blocks of a partly replicated shard

  static Placement replicate() { return {Kind::kReplicate, 0, 0}; }
  static Placement shard(int64_t dim) { return {Kind::kShard, dim, 0}; }
  static Placement shard_groups(int64_t dim, int64_t groups) { return {Kind::kShard, dim, groups}; }
  static Placement partial() { return {Kind::kPartial, 0, 0}; }
  bool is_shard() const { return kind == Kind::kShard; }
  bool is_grouped() const { return kind == Kind::kShard && groups > 0; }
  // The blocks `dim` is cut into on an axis of `axis_size` ranks (1 unless
  // a shard), and the block the rank at `coord` holds.
  int64_t blocks(int64_t axis_size) const { return kind != Kind::kShard ? 1 : groups > 0 ? groups : axis_size; }
  int64_t block_of(int64_t coord, int64_t axis_size) const {
    return kind != Kind::kShard ? 0 : coord / (axis_size / blocks(axis_size));
  }
  std::string str() const;  // "R", "S(1)", "S(1/4)" (dim 1 in 4 blocks), "P"
  bool operator==(const Placement&) const = default;
};

// Where a dim of `size` elements is cut into `blocks` blocks that do not
// all have the same size: the first size % blocks blocks hold one element
// more (ONNX Split's and the spatial bands' convention). Every part of
// Tessera that cuts, gathers or prices an uneven block reads it here.
int64_t block_start(int64_t size, int64_t blocks, int64_t b);
inline int64_t block_size(int64_t size, int64_t blocks, int64_t b) {
  return block_start(size, blocks, b + 1) - block_start(size, blocks, b);
}

// Whether a shard's blocks must all be the same size (the default: every
// collective and weight split assumes it), or may be uneven (block_start):
// allowed only where a strategy says its emitter handles it, a dim split
// over one whole mesh axis and no rank left without rows.
enum class Blocks : uint8_t { kEven, kUneven };

// One placement per mesh axis.
struct Sharding {
  std::vector<Placement> placements;

  static Sharding replicated(const DeviceMesh& mesh);
  // Throws Error(kInvalidGraph) if the placements do not fit the mesh and the
  // tensor type (dim out of range, dim not divisible by the axis size where
  // `blocks` is kEven; with kUneven, a dim split over two axes, or over more
  // ranks than it has elements, where it does not divide).
  void validate(const DeviceMesh& mesh, const TensorType& global, Blocks blocks = Blocks::kEven) const;
  // Whether every split dim divides by its blocks.
  bool is_even(const DeviceMesh& mesh, const Shape& global) const;
  // The local shape of the largest block (every rank's where the blocks are
  // even; with uneven blocks, the first rank's, which prices the slowest).
  Shape local_shape(const DeviceMesh& mesh, const Shape& global) const;
  // The local shape on `rank` (local_block in graph/strategy.h).
  Shape local_shape(const DeviceMesh& mesh, const Shape& global, int64_t rank) const;
  // Parses "[R,S(1)]"; str() prints the same form.
  static Sharding parse(const std::string& text);
  std::string str() const;
  uint64_t hash() const;
  bool operator==(const Sharding&) const = default;
};

}  // namespace tessera
