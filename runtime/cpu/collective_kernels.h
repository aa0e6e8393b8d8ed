// The collective ops as CPU kernels: each calls the plan's Communicator
// (ExecContext::communicator) on flat blocks, with the tensor permuted around
// the exchange (cpu/strided_copy.h) when the op's axis is not the outermost,
// and f16/bf16 sums widened to f32 so that they accumulate in f32:
//
//   AllReduce(x)             all_reduce_sum of x
//   ReduceScatter(x, axis)   pack x's blocks along axis, reduce_scatter_sum
//   AllGather(x, axis)       all_gather of x, unpack the blocks along axis
//   AllToAll(x, split, cat)  pack along split, all_to_all, unpack along cat
//   HaloExchange(x, axis)    pack the edge rows, halo_exchange, place the neighbours' rows around x
//
// Each splits (Kernel::splits): start() packs or widens and starts the
// exchange (Communicator::start), finish() waits for it and unpacks or
// narrows; run() is the blocking exchange between the same two halves.
//
// Used by the CPU and the reference backends (the reference kernel of a
// collective needs the peers' tensors, which only the communicator has).
#pragma once

#include <memory>

#include "graph/graph.h"
#include "runtime/communicator.h"
#include "runtime/kernel.h"

namespace tessera::runtime::cpu {

// The kernel of a collective node. Throws collective_axis's Error(kUsage)
// (no communicator, an axis or size that is not the communicator's mesh's)
// and Error(kUnsupported) for a sum of a dtype other than f32, f64, f16,
// bf16, i32 and i64.
// halo_own_rows_at_start (HaloExchange only): start() writes x into its
// rows of the output and zeros the halo rows, finish() writes the halo rows
// (the overlapped lowering, halo_overlap.h, reads the output in between).
std::unique_ptr<Kernel> make_collective_kernel(const Graph& g, NodeId node, const Communicator* comm,
                                               bool halo_own_rows_at_start = false);

}  // namespace tessera::runtime::cpu
