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

struct Placement {
  enum class Kind : uint8_t { kReplicate, kShard, kPartial };
  Kind kind = Kind::kReplicate;
  int64_t dim = 0;  // for kShard

  static Placement replicate() { return {Kind::kReplicate, 0}; }
  static Placement shard(int64_t dim) { return {Kind::kShard, dim}; }
  static Placement partial() { return {Kind::kPartial, 0}; }
  bool is_shard() const { return kind == Kind::kShard; }
  std::string str() const;  // "R", "S(1)", "P"
  bool operator==(const Placement&) const = default;
};

// One placement per mesh axis.
struct Sharding {
  std::vector<Placement> placements;

  static Sharding replicated(const DeviceMesh& mesh);
  // Throws Error(kInvalidGraph) if the placements do not fit the mesh and the
  // tensor type (dim out of range, dim not divisible by the axis size).
  void validate(const DeviceMesh& mesh, const TensorType& global) const;
  // The per-rank (local) shape of a tensor with this sharding.
  Shape local_shape(const DeviceMesh& mesh, const Shape& global) const;
  // Parses "[R,S(1)]"; str() prints the same form.
  static Sharding parse(const std::string& text);
  std::string str() const;
  uint64_t hash() const;
  bool operator==(const Sharding&) const = default;
};

}  // namespace tessera
