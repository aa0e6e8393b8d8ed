// Spatial splits as sharding strategies, so that the one sharding search
// offers them beside batch and channel splits (GSPMD's windowed-op halo,
// derived here from the window's rows, graph/halo_rows.h: the formula of
// the dimension map in spatial.h, which the one-chain tool reads).
//
// A spatial dim of an activation split in bands is an ordinary shard,
// S(dim): element-wise ops keep it (a pass factor), a global pool or a
// ReduceMean over it gives Partial (a summed factor), an op that cannot read
// a band (Resize, a Reshape merging it, a Gemm after Flatten) takes the
// tensor gathered (reshard.h). What the dim map alone cannot give is the
// window op whose input rows reach across a band's edge: for Conv, MaxPool
// and AveragePool this adds, per mesh axis and spatial dim,
//
//   input 0 S(dim), weights and bias R  ->  output S(dim)
//
// whose emitter, on the rank at coordinate c of the axis,
//   1. receives the halo: a HaloExchange over the axis of the rows the
//      band of its output reads beyond its own band of the input, as the
//      verifier's seams find them on a surrogate of the window
//      (seam_halo_memo.h) and WindowRows::reached agrees (any stride,
//      dilation, padding; not offered where they differ), before[c] rows
//      from the previous rank and after[c] from the next;
//   2. cuts the rows its band reads (a strided window may skip the last
//      rows), on every rank where any rank needs it (the ranks' programs
//      keep one node list);
//   3. runs the op with its band's padding: the op's own at the image's
//      edges, none at a seam.
// Bands are the Sharding's blocks (block_start: uneven where the axis does
// not divide the rows, the first ranks one row more, at the input and the
// output alike). Offered where every rank holds rows and every halo lies
// within the neighbour's band; the strategy carries the bytes of the
// deepest halo for the price (AxisStrategy::halo_bytes).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "graph/strategy.h"

namespace tessera::mutator {

// The spatial strategies of `n` on `mesh` (empty for other ops, for a mesh
// of one device, for bands that would leave a rank without rows).
std::vector<Strategy> spatial_strategies(const Graph& g, const Node& n, const DeviceMesh& mesh);

// The rows the HaloExchange of node `id`'s spatial strategy brings each
// coordinate of an axis of n ranks along `dim`: (from the previous rank,
// from the next), per coordinate; nullopt where no spatial strategy is
// offered. The rows are the verifier's seams' (seam_halo_memo.h), equal to
// graph/halo_rows.h's formula (window_rows_of, reached) where offered.
std::optional<std::vector<std::pair<int64_t, int64_t>>> spatial_halo_rows(const Graph& g, NodeId id, int64_t dim,
                                                                          int64_t n);

// Whether an axis strategy is one of them (its emitter exchanges a halo).
bool is_spatial(const AxisStrategy& s);

}  // namespace tessera::mutator
