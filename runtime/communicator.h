// How one rank's plan exchanges data with the other ranks of its device mesh.
// A plan is one rank's program; its collective ops (AllReduce, AllGather,
// ReduceScatter, AllToAll) call these primitives over the group of ranks that
// differ from this one only along the op's mesh axis (DeviceMesh::group).
// Implementations: InProcessWorld (ranks are threads of one process, for
// tests and single-node runs); MPI (CPU ranks) and NCCL (GPU ranks) plug in
// behind the same interface.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "graph/dtype.h"
#include "graph/sharding.h"

namespace tessera::runtime {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual const DeviceMesh& mesh() const = 0;

  // out = elementwise sum over the group of every member's `count` elements.
  virtual void all_reduce_sum(int axis, DType dtype, const void* in, void* out, int64_t count) = 0;
  // out = every member's `bytes` bytes, concatenated in group order.
  virtual void all_gather(int axis, const void* in, void* out, int64_t bytes) = 0;
  // in holds one block of `bytes` per member (block j goes to member j); out
  // receives block i from member i, in group order.
  virtual void all_to_all(int axis, const void* in, void* out, int64_t bytes) = 0;
};

// Ranks as threads of one process: every rank's plan runs on its own thread
// with communicator(rank). Each collective is two barriers: publish, then
// read the peers' buffers in place.
class InProcessWorld {
 public:
  explicit InProcessWorld(DeviceMesh mesh);
  ~InProcessWorld();
  Communicator* communicator(int64_t rank);
  const DeviceMesh& mesh() const { return mesh_; }

 private:
  class Rank;
  friend class Rank;
  void barrier();

  DeviceMesh mesh_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<const void*> posted_;  // per rank: its input for the current collective
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t waiting_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace tessera::runtime
