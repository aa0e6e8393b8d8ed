// How one rank's plan exchanges data with the other ranks of its device mesh.
// A plan is one rank's program; its collective ops (AllReduce, AllGather,
// ReduceScatter, AllToAll) call these primitives over the group of ranks that
// differ from this one only along the op's mesh axis (DeviceMesh::group).
// The primitives move flat blocks; the kernels (cpu/collective_kernels.h)
// permute a tensor around them when the op's axis is not the outermost.
// Implementations: InProcessWorld (ranks are threads of one process, for
// tests and single-node runs), MpiCommunicator (one process per rank,
// mpi_communicator.h) and NcclCommunicator (GPU ranks, cuda/).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/error.h"
#include "graph/graph.h"
#include "graph/sharding.h"

namespace tessera::runtime {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual const DeviceMesh& mesh() const = 0;
  virtual std::string name() const = 0;  // "in-process", "mpi", "nccl": for messages

  // Sums take f32, f64, i32 and i64 (the kernels sum f16 and bf16 in f32,
  // so that every communicator accumulates them the same way). Only
  // all_reduce_sum may be given the same buffer as `in` and `out`.
  //
  // out = elementwise sum over the group of every member's `count` elements.
  virtual void all_reduce_sum(int axis, DType dtype, const void* in, void* out, int64_t count) = 0;
  // in holds one block of `count` elements per member, in group order; out
  // = the sum over the group of block i, where i is this rank's position in
  // the group.
  virtual void reduce_scatter_sum(int axis, DType dtype, const void* in, void* out, int64_t count) = 0;
  // out = every member's `bytes` bytes, concatenated in group order.
  virtual void all_gather(int axis, const void* in, void* out, int64_t bytes) = 0;
  // in holds one block of `bytes` per member (block j goes to member j); out
  // receives block i from member i, in group order.
  virtual void all_to_all(int axis, const void* in, void* out, int64_t bytes) = 0;

  // This rank's position in its group along `axis` (its coordinate there).
  int64_t group_index(int axis) const { return mesh().coords(rank())[static_cast<size_t>(axis)]; }
};

// The mesh axis a collective node runs over, checked against the plan's
// communicator: Error(kUsage) naming the node when there is none, when its
// mesh has no such axis, or when the node's group_size is not that axis's size.
int collective_axis(const Node& n, const Communicator* comm);

// Throws collective_axis's error for the first collective of g, if any.
void check_collectives(const Graph& g, const Communicator* comm);

// The collectives g makes, in the order its plan runs them, one line each
// ("AllReduce over tp of f32[1x16x64]"). Ranks whose programs make
// different collectives would wait for each other forever: the ranks of a
// run compare their signatures before the first run.
std::string collective_signature(const Graph& g);

// The first line where two signatures differ, for a message ("line 3:
// 'AllReduce ...' against 'AllGather ...'"); empty when they are equal.
std::string signature_difference(const std::string& mine, const std::string& theirs);

// Ranks as threads of one process: every rank's plan runs on its own thread
// with communicator(rank). Each collective is two barriers: publish, then
// read the peers' buffers in place.
//
// A rank that fails must not leave the others waiting: abort() (which run()
// calls when a rank's body throws) wakes every rank blocked in a collective,
// and each of them, and every rank that enters a collective later, throws
// Error naming the failed rank. A rank whose body returns while another
// waits for it in a collective (their programs make different collectives)
// aborts the world too. Peers read a rank's buffers only between the two
// barriers of a collective, where every rank is inside it, so no rank's
// buffers go away while a peer reads them.
class InProcessWorld {
 public:
  explicit InProcessWorld(DeviceMesh mesh);
  ~InProcessWorld();
  Communicator* communicator(int64_t rank);
  const DeviceMesh& mesh() const { return mesh_; }

  // Runs body(rank) for every rank of the mesh on its own thread and waits
  // for all of them. When any throws, rethrows the first failure (with
  // "rank r" in its message), not the errors of the ranks it stopped. The
  // world is reset at the start, so it can run again after a failure.
  void run(const std::function<void(int64_t rank)>& body);

  // Marks the world failed by `rank` (kind and message of its error).
  void abort(int64_t rank, ErrorKind kind, const std::string& why);

 private:
  class Rank;
  friend class Rank;
  void barrier(int64_t rank);
  void leave(int64_t rank);
  [[noreturn]] void throw_aborted(int64_t rank);  // with mu_ held
  void fail_locked(int64_t rank, ErrorKind kind, const std::string& why);

  DeviceMesh mesh_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<const void*> posted_;  // per rank: its input for the current collective
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t waiting_ = 0;
  int spins_ = 0;  // pauses in a barrier before sleeping (0 when ranks outnumber cores)
  // Written under mu_; read without it by ranks spinning in a barrier.
  std::atomic<uint64_t> generation_{0};
  int64_t left_ = -1;    // a rank whose body returned, or -1
  std::atomic<int64_t> failed_{-1};  // the rank that failed, or -1 (as generation_)
  ErrorKind failed_kind_ = ErrorKind::kInternal;
  std::string failed_why_;
};

}  // namespace tessera::runtime
