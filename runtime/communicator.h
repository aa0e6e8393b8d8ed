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
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/error.h"
#include "graph/graph.h"
#include "graph/sharding.h"

namespace tessera::runtime {

// One exchange of flat blocks, as a value: what the primitives below take,
// for the non-blocking form (Communicator::start) and for messages.
struct Exchange {
  enum class Kind : uint8_t { kAllReduceSum, kReduceScatterSum, kAllGather, kAllToAll, kHalo };
  Kind kind = Kind::kAllReduceSum;
  int axis = 0;
  DType dtype = DType::kF32;  // of the sums; the moves take bytes
  const void* in = nullptr;
  void* out = nullptr;
  // The sums: elements of `out`; all_gather: bytes of `in`; all_to_all:
  // bytes of one block; halo: bytes of one edge block (the same on every
  // rank of the group: the deepest halo's rows).
  int64_t count = 0;
  // kHalo, a neighbour exchange along the axis: `in` holds this rank's first
  // edge block then its last one (2 * count bytes). The first send_prev
  // bytes of the first block go to the previous rank of the group, the last
  // send_next bytes of the last block to the next; `out` receives recv_prev
  // bytes (the end of the previous rank's last block) then recv_next bytes
  // (the start of the next rank's first block). The first rank of the group
  // has no previous and the last no next (their amounts are 0).
  int64_t send_prev = 0, send_next = 0, recv_prev = 0, recv_next = 0;

  // "AllReduce of 1024 f32 over axis 0", for messages.
  std::string str() const;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual const DeviceMesh& mesh() const = 0;
  virtual std::string name() const = 0;  // "in-process", "mpi", "nccl": for messages

  // Sums take f32, f64, i32 and i64 (the kernels sum f16 and bf16 in f32,
  // so that every communicator accumulates them the same way). Only
  // all_reduce_sum and all_to_all may be given the same buffer as `in` and
  // `out`.
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
  // The neighbour exchange of a HaloExchange (Exchange::Kind::kHalo).
  virtual void halo_exchange(const Exchange& x) = 0;

  // The blocking primitive that x names.
  void exchange(const Exchange& x);

  // The non-blocking form, so that a rank computes while an exchange is in
  // flight: start() posts x and returns a request that wait() completes
  // (each request is waited on once). From start to wait, x.in must not
  // change and x.out is not the caller's: neither may be freed, and `out`
  // is not read. Every rank starts the same exchanges in the same order, and
  // in that order among its blocking ones; waits may come in any order. The
  // sums are the blocking form's, bit for bit. This default runs the
  // blocking primitive in start() (NCCL's communicator, whose CPU form
  // stages through the GPU, keeps it).
  virtual int64_t start(const Exchange& x) {
    exchange(x);
    return -1;
  }
  virtual void wait(int64_t request) { (void)request; }
  // Lets started exchanges advance, between kernels: MPI moves a
  // non-blocking collective only inside MPI calls.
  virtual void progress() {}

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
// with communicator(rank). The k-th collective every rank makes (blocking or
// started) is the world's slot k: each rank posts its input there, and once
// every rank of the world has posted, each reads its group's inputs in place
// and computes its own result (the sums in group order, so every rank's sum
// is bitwise the same). A rank waits only for its peers' posts, never for
// their reads: a blocking collective posts its input in place and, when it
// is done and a peer has not read it yet, leaves a copy in the slot; a
// started one posts a copy. So ranks complete their collectives in any
// order, and a rank can fail or go on while peers still read what it
// posted. Posts are checked against the slot's first (kind, axis, size):
// ranks whose programs make different collectives fail instead of mixing
// their data.
//
// A rank that fails must not leave the others waiting: abort() (which run()
// calls when a rank's body throws) wakes every rank waiting for a post, and
// each of them, and every rank that posts later, throws Error naming the
// failed rank. A rank whose body returns while another waits for its post
// (their programs make different collectives) aborts the world too.
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
  struct Slot;
  friend class Rank;
  // Guards the slots: held for a few loads and stores, so waiting for it
  // spins (a std::mutex sleeps when two ranks post at once, and the wake-up
  // cost more than the collective: 2 ranks, 1024 floats, 5 us against 1.5).
  class SpinLock {
   public:
    void lock();
    void unlock() { flag_.store(false, std::memory_order_release); }

   private:
    std::atomic<bool> flag_{false};
  };

  // Posts x.in (or a copy of its `bytes`) as `rank`'s next collective.
  Slot& post(int64_t rank, const Exchange& x, int64_t bytes, bool copy);
  // Returns once every rank has posted to s; throws when the world failed first.
  void await_posts(int64_t rank, Slot& s);
  void release(Slot& s);  // this rank is done with s
  void leave(int64_t rank);
  [[noreturn]] void throw_aborted(int64_t rank);
  void fail_locked(int64_t rank, ErrorKind kind, const std::string& why);  // with mu_ held
  [[noreturn]] void fail(int64_t rank, ErrorKind kind, const std::string& why);  // and throw_aborted

  DeviceMesh mesh_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  SpinLock slots_mu_;
  std::map<uint64_t, std::unique_ptr<Slot>> slots_;  // by sequence number
  std::vector<std::unique_ptr<Slot>> spare_;          // done with, for reuse
  std::vector<uint64_t> next_;  // per rank: the sequence number of its next collective
  int64_t left_ = -1;           // a rank whose body returned, or -1
  // Sleeping ranks and failures: mu_ and cv_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int64_t> sleepers_{0};
  std::atomic<int64_t> failed_{-1};  // the rank that failed, or -1 (written under mu_, after the two below)
  ErrorKind failed_kind_ = ErrorKind::kInternal;
  std::string failed_why_;
  int spins_ = 0;  // pauses before sleeping or copying (0 when ranks outnumber cores)
};

}  // namespace tessera::runtime
