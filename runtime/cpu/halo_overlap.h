// The overlapped lowering of a HaloExchange and the window op that reads it
// (Conv, MaxPool, AveragePool, with the element-wise post-ops fused into
// it): the band's interior rows compute while its halo is in flight.
//
//   HaloExchange(x) -> X' = [rows from the previous rank; x; rows from the next]
//   Y = op(X')
//
// runs as one kernel that splits (Kernel::splits), so that the plan's
// schedule starts it where x is written and finishes it before Y is read:
//
//   start   write x into X' (its halo rows zeroed), pack the edge rows and
//           start the exchange (non-blocking: MPI_Isend/Irecv, or the
//           threads' posted copy); run op over the whole X': every output
//           row whose taps avoid the halo (graph/halo_rows.h: the interior)
//           is already final
//   finish  wait for the halo, write it into X', and recompute the edge
//           rows above and below the interior from their slice of X'
//           (window_piece), each copied into its rows of Y
//
// The interior comes out of the very primitive the unoverlapped lowering
// runs, on the same input rows, and an edge row of a piece reads the same
// rows with the same taps: the tests hold the two lowerings to the same
// bits (tests/runtime/halo_overlap_test.cc). The price is the edge rows
// computed twice (a few rows of a band of hundreds) and their copy.
#pragma once

#include <memory>

#include "graph/graph.h"
#include "runtime/cpu/onednn_kernel.h"
#include "runtime/fusion.h"
#include "runtime/kernel.h"

namespace tessera::runtime::cpu {

// Whether HaloExchange node `halo` and `consumer` (a group whose root reads
// the halo's output, its only reader) lower overlapped: the root is a window
// op along the exchanged dim (window_rows_of), f32, and its post-ops are
// element-wise without a second operand. Depends only on what every rank's
// program has alike (kinds, windows, types), never on a rank's halo depth,
// so that every rank makes the same kernels.
bool halo_overlappable(const Graph& g, NodeId halo, const FusedGroup& consumer);

// The overlapped kernel from the halo's kernel (made with
// halo_own_rows_at_start) and the consumer's oneDNN kernel over the halo's
// output (out_md: its output's layout). nullptr, leaving both untouched,
// where oneDNN rejects an edge piece. The halo's output then lives in the
// kernel's scratch: the caller marks that value unused.
std::unique_ptr<Kernel> make_halo_overlap_kernel(const Graph& g, NodeId halo, const FusedGroup& consumer,
                                                 std::unique_ptr<Kernel>& halo_kernel,
                                                 std::unique_ptr<OnednnKernel>& consumer_kernel, const Md& out_md,
                                                 const std::shared_ptr<Onednn>& dnn);

}  // namespace tessera::runtime::cpu
