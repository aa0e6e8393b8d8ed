// The search's halo, found by the verifier: for the window of one op along
// one dim, halo_from_seams (halo_seams.h) runs on a surrogate chain with
// that window (the same kind, kernel extent, stride, dilation, pads and
// ceil mode, the same input and output rows, the same number of bands) and
// its seams give each rank's halo. The rows a window reads do not depend on
// its channels or on the other spatial dims, so the surrogate has one
// channel and two columns (a kernel of 1 across them): the Z_p test of a
// few hundred rows, once per distinct window of a search.
//
// Memoized process-wide behind a mutex, keyed by the geometry itself (the
// value compared, no hash): the verdict depends only on the key and the
// verifier's fixed seed, so the memo is deterministic whatever the order
// of the calls.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace tessera::mutator {

// The rows of one window op along one dim cut in n bands.
struct WindowGeometry {
  OpKind kind = OpKind::kConv;  // Conv, MaxPool, AveragePool
  int64_t kernel = 1, stride = 1, dilation = 1, pad_begin = 0, pad_end = 0;
  int64_t ceil_mode = 0;
  int64_t in_rows = 0, out_rows = 0, n = 0;
  // Rows the corrected split drops from each seam halo before its test (the
  // wrong twin: nonzero only from tests, see thin_seam_halo_for_testing).
  int64_t thin = 0;
  auto operator<=>(const WindowGeometry&) const = default;
};

// Per rank, the rows (from the previous rank, from the next) the verifier's
// seams ask for. nullopt where the surrogate cannot be built (its rows do
// not come out as out_rows), the seams do not give a halo, or the split
// corrected with that halo is not equivalent to the whole window.
std::optional<std::vector<std::pair<int64_t, int64_t>>> seam_halo_rows(const WindowGeometry& w);

// The geometry of node `id`'s window along `dim` over n bands; nullopt
// where the op has no window there.
std::optional<WindowGeometry> window_geometry(const Graph& g, NodeId id, int64_t dim, int64_t n);

// Test hook: every later seam_halo_rows tests its corrected split with each
// halo `thin` rows thinner (0 restores), so that the search must refuse the
// spatial strategy. Returns the previous value.
int64_t thin_seam_halo_for_testing(int64_t thin);

// How many surrogates have been tested (the memo's misses), for tests.
int64_t seam_halo_surrogates_tested();

}  // namespace tessera::mutator
