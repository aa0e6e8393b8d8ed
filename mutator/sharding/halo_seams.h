// The halo found by the verifier rather than assumed: a spatial split run
// with each rank's band as a whole image (rows outside the band read as the
// image's zero padding) is a partially equivalent mutant of the chain, right
// everywhere except at the seams. The multilinear test returns the rows
// that differ as boxes; the rows those seam rows read beyond the rank's band
// are the halo, the correction is the exchange that brings them, and the
// corrected split is tested again against the whole chain, as any plan is.
// spatial.h's formula must agree with what this finds (tests/mutator/
// sharding/spatial_test.cc checks both on the suite's windows).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "mutator/sharding/spatial.h"
#include "verifier/verdict.h"

namespace tessera::mutator {

struct SeamHalo {
  verifier::Verdict split;      // bands as whole images against the chain
  std::vector<std::vector<Band>> seams;  // per rank: its output rows that differ (a top and a bottom seam)
  std::vector<RankHalo> ranks;  // per rank: own band, needed rows from the seams, halo from each neighbour
  verifier::Verdict corrected;  // bands with the halo the seams ask for, against the chain
};

// The chain as in spatial_halo (spatial.h), its dim `dim` of the last output
// cut into n bands. `thin` > 0 takes that many rows off each halo before the
// corrected split is tested (the wrong plan of the catalogue, which must
// differ). nullopt when the chain's rows are not read through affine windows.
std::optional<SeamHalo> halo_from_seams(const Graph& g, const std::vector<NodeId>& chain, int64_t dim, int64_t n,
                                        int64_t thin = 0);

// The chain alone as a graph: the first node's input 0 is input 0, the
// other values it reads from outside are inputs after it (constants stay
// constants), the last node's output 0 the output. With `rows` (one band of
// the chain's input dim per rank, and `out_dim` of the output), the split
// program: rank r's copy of the chain reads the input with the rows outside
// rows[r] zeroed, keeps its band of the output, and the bands are concatenated.
Graph chain_program(const Graph& g, const std::vector<NodeId>& chain, int64_t in_dim = -1,
                    const std::vector<Band>& rows = {}, int64_t out_dim = -1);

}  // namespace tessera::mutator
