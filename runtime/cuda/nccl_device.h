// The NCCL communicator as the CUDA backend sees it: the device
// communicator of each mesh axis, for collectives enqueued on the plan's
// stream (nccl_ops.cc). Only in builds with NCCL (TESSERA_WITH_NCCL).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "runtime/cuda/device_op.h"
#include "runtime/cuda/nccl_communicator.h"

namespace tessera::runtime::cuda {

class NcclCommunicator : public Communicator {
 public:
  // Collective over the mesh (see make_nccl_communicator).
  NcclCommunicator(DeviceMesh mesh, int64_t rank, int device, const NcclId& id);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int64_t rank() const override { return rank_; }
  const DeviceMesh& mesh() const override { return mesh_; }
  std::string name() const override { return "nccl"; }

  // Host buffers, staged through device memory on the communicator's own
  // stream (synchronous).
  void all_reduce_sum(int axis, DType dtype, const void* in, void* out, int64_t count) override;
  void reduce_scatter_sum(int axis, DType dtype, const void* in, void* out, int64_t count) override;
  void all_gather(int axis, const void* in, void* out, int64_t bytes) override;
  void all_to_all(int axis, const void* in, void* out, int64_t bytes) override;
  void halo_exchange(const Exchange& x) override;

  ncclComm_t comm(int axis) const { return axis_[static_cast<size_t>(axis)]; }
  int device() const { return device_; }

 private:
  uint8_t* staging(int64_t bytes);

  DeviceMesh mesh_;
  int64_t rank_ = 0;
  int device_ = 0;
  ncclComm_t world_ = nullptr;
  std::vector<ncclComm_t> axis_;
  cudaStream_t stream_ = nullptr;
  void* staging_ = nullptr;
  int64_t staging_bytes_ = 0;
};

// NCCL's type for `dtype`; false where it has none.
bool nccl_type(DType dtype, ncclDataType_t& out);

[[noreturn]] void throw_nccl(ncclResult_t r, const char* call);

// One collective on `stream` over device buffers; `count` in elements of
// `type` as NCCL counts them: the received block for a reduce-scatter, the
// sent block for an all-gather, one peer's block for an all-to-all. Moves
// (all-gather, all-to-all) are given in bytes, as ncclUint8.
void enqueue_collective(OpKind kind, const NcclCommunicator& comm, int axis, ncclDataType_t type, size_t count,
                        const void* in, void* out, cudaStream_t stream);

// The device op of a collective: reads `in`, writes `out` (device values of
// the program), enqueue_collective on the program's stream.
std::unique_ptr<DeviceOp> make_nccl_op(OpKind kind, const NcclCommunicator& comm, int axis, ncclDataType_t type,
                                       size_t count, ValueId in, ValueId out);

// The device op of a HaloExchange's exchange (lower_halo): one NCCL group
// of sends of `send`'s blocks and receives into `recv`'s, with the
// previous and the next rank of the axis's group. `send` or `recv` is
// kNoValue where this rank sends or receives nothing.
std::unique_ptr<DeviceOp> make_nccl_halo_op(const NcclCommunicator& comm, int axis, int64_t send_prev,
                                            int64_t send_next, int64_t recv_prev, int64_t recv_next, ValueId send,
                                            ValueId recv);

}  // namespace tessera::runtime::cuda

#define TESSERA_NCCL(call)                                                           \
  do {                                                                               \
    ncclResult_t tessera_r_ = (call);                                                \
    if (tessera_r_ != ncclSuccess) ::tessera::runtime::cuda::throw_nccl(tessera_r_, #call); \
  } while (0)
