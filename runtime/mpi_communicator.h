// Ranks as processes started by mpirun: MpiSession owns MPI's lifetime in
// this process and the few world-wide steps a run needs around the plan
// (agreeing that every rank is ready, MPI_Abort when one fails mid-run);
// MpiCommunicator runs the plan's collectives with MPI's own collectives over
// one communicator per mesh axis group, blocking or non-blocking. MPI_COMM_WORLD rank i is mesh rank i.
// Only the thread that created the session calls MPI (MPI_THREAD_SERIALIZED
// is asked for; the kernels' OpenMP threads never call it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/communicator.h"

namespace tessera::runtime {

class MpiSession {
 public:
  // Whether this process runs under an MPI launcher (OMPI_COMM_WORLD_SIZE
  // for Open MPI, PMI_SIZE for MPICH's Hydra) or has MPI initialized with
  // more than one rank. Read once, before MPI is started: that is the only
  // way to know, without starting MPI, whether mpirun started this process.
  static bool launched();

  // This process's session, started on first use: MPI_Init_thread unless
  // MPI is initialized already. MPI_Finalize (of what it initialized) runs
  // at process exit, after main has printed any error: finalizing waits for
  // every rank, so no rank's exit ends the job before the others have said
  // why they fail.
  static MpiSession& get();

  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  int64_t local_rank() const { return local_rank_; }  // among the ranks on this node
  int64_t local_size() const { return local_size_; }

  // Collective: the lowest rank whose `failed` is true (-1 when none), with
  // that rank's code and message, so that every rank can name it.
  struct Failure {
    int64_t rank = -1;
    int code = 0;
    std::string message;
  };
  Failure first_failure(bool failed, int code, const std::string& message) const;

  // rank 0's `bytes` bytes at `data` on every rank (collective).
  void broadcast(void* data, int64_t bytes) const;

  // Ends every process of the job (MPI_Abort on MPI_COMM_WORLD) with `code`.
  [[noreturn]] static void abort(int code);

 private:
  MpiSession();
  bool owns_ = false;
  int64_t rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

class MpiCommunicator : public Communicator {
 public:
  // Collective over MPI_COMM_WORLD: one MPI_Comm_split per mesh axis, with
  // the group's other coordinates as color and the coordinate on the axis as
  // key, so that a split communicator's ranks are in DeviceMesh::group order.
  // Throws Error(kResource) when the world's size is not the mesh's.
  MpiCommunicator(const MpiSession& session, DeviceMesh mesh);
  ~MpiCommunicator() override;

  int64_t rank() const override { return rank_; }
  const DeviceMesh& mesh() const override { return mesh_; }
  std::string name() const override { return "mpi"; }

  void all_reduce_sum(int axis, DType dtype, const void* in, void* out, int64_t count) override;
  void reduce_scatter_sum(int axis, DType dtype, const void* in, void* out, int64_t count) override;
  void all_gather(int axis, const void* in, void* out, int64_t bytes) override;
  void all_to_all(int axis, const void* in, void* out, int64_t bytes) override;
  void halo_exchange(const Exchange& x) override;

  // MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ialltoall;
  // wait is MPI_Wait. Open MPI moves them only inside MPI calls (it has no
  // progress thread): progress() is an MPI_Test, which the plan calls
  // between kernels.
  int64_t start(const Exchange& x) override;
  void wait(int64_t request) override;
  void progress() override;

 private:
  struct Comms;
  DeviceMesh mesh_;
  int64_t rank_ = 0;
  std::unique_ptr<Comms> comms_;
};

}  // namespace tessera::runtime
