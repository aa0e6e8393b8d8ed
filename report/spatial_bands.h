// The bands and halos of a mesh plan's spatial splits, for the reports
// (report.html draws them, report.txt and report.json list them): per
// HaloExchange of the rank programs (one before each windowed layer whose
// band reads across a seam), the tensor it exchanges, each rank's band of
// that tensor's rows and the halo rows it receives from each neighbour,
// with the bytes.
//
// Nothing here is recomputed from the windows: a band is the plan's
// sharding of the tensor (Sharding's blocks, graph/sharding.h's
// block_start: uneven where the rows do not divide), a halo is the
// exchange's own `before`/`after` rows (HaloExchangeAttrs), and the bytes
// are graph/halo_rows.h's halo_received_bytes of the rank's rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/halo_rows.h"
#include "mutator/optimize.h"

namespace tessera::report {

// One rank's band of the exchanged tensor along the split dim, in the
// whole tensor's rows.
struct RankBand {
  int64_t coordinate = 0;  // along the exchange's mesh axis
  RowRange band;           // the rows it holds
  RowRange above;          // the halo it receives from coordinate - 1 (rows of that rank's band)
  RowRange below;          // the halo it receives from coordinate + 1
  int64_t bytes = 0;       // what it receives (both halos)
};

struct SpatialExchange {
  std::string name;    // the HaloExchange node's
  std::string tensor;  // the exchanged tensor, by its name in the plan's graph
  std::string layer;   // the windowed layer that reads the halo
  std::string mesh_axis;
  int64_t dim = 0;     // the dim split in bands
  int64_t rows = 0;    // the tensor's rows along it
  int64_t groups = 1;  // groups of ranks exchanging alike (the mesh's other axes)
  std::vector<RankBand> bands;  // by coordinate

  // What every rank of the mesh receives together, one run.
  int64_t total_bytes() const;
};

// Rank 0's HaloExchange nodes in program order, each with its tensor's
// bands on the plan's sharding. Empty for a plan without spatial splits
// (one device, or no exchange). An exchange whose input is no tensor of
// the plan's graph split along its dim (none is written so) throws
// Error(kInternal).
std::vector<SpatialExchange> spatial_exchanges(const mutator::Plan& p);

// The hatch patterns the pictures fill halos with, once per page.
std::string spatial_defs_svg();

// One exchange drawn: the tensor's rows top to bottom as a bar in the
// ranks' tints (the seams marked with their row), then one column per rank:
// its band in its colour, the halo rows it receives hatched in that colour
// where those rows lie (over the neighbour's band), at least a few pixels
// tall however few the rows; labels give each rank's rows, the halo's rows
// and the bytes.
std::string spatial_exchange_svg(const SpatialExchange& e);

}  // namespace tessera::report
