// GPU ranks: a Communicator over NCCL, one NCCL communicator per mesh axis
// group (ncclCommSplit of the world's, with the group's other coordinates as
// color and the coordinate on the axis as key, as MpiCommunicator splits).
// The CUDA backend runs a plan's collectives on its stream with the device
// communicators (cuda_compiler.cc); the host-buffer primitives of the
// Communicator interface stage through device memory, for tests and for
// plans on other backends. Declared in every build; without NCCL (or the
// CUDA backend) nccl_unavailable_reason() says why and the rest throws
// Error(kUsage).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/communicator.h"

namespace tessera::runtime {

// ncclUniqueId's bytes: made on rank 0, handed to every rank (over MPI, or
// in memory for ranks that are threads) before any creates its communicator.
struct NcclId {
  std::array<char, 128> bytes{};
};

// Empty when this build has NCCL and a CUDA device is present.
std::string nccl_unavailable_reason();
int cuda_device_count();

NcclId nccl_unique_id();

// Collective over the mesh's ranks (ncclCommInitRank blocks until every
// rank has called it): rank's communicator on CUDA device `device`.
std::unique_ptr<Communicator> make_nccl_communicator(const DeviceMesh& mesh, int64_t rank, int device,
                                                     const NcclId& id);

}  // namespace tessera::runtime
