// The halo geometry of a window op (Conv, MaxPool, AveragePool) along one
// spatial dim, in one place: which input rows a band of output rows reads,
// which of a rank's output rows need its neighbours' rows (the edges) and
// which do not (the interior), and how to compute any range of output rows
// from a slice of the input. The runtime's overlapped halo exchange
// (runtime/cpu/halo_overlap.h), the CUDA lowering and the collective model's
// price of a HaloExchange read it; the sharding strategy's halo comes from
// the verifier's seams (mutator/sharding/seam_halo_memo.h), checked against
// the formula below (the dimension map's, mutator/sharding/spatial.h):
// output row o reads s·o - p + d·t over the taps t in [0, K).
//
// Rows are counted along the dim; a negative row or one past the input is
// padding (zeros for Conv and AveragePool, -inf for MaxPool).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "graph/graph.h"

namespace tessera {

// Rows [lo, hi) of one dim.
struct RowRange {
  int64_t lo = 0, hi = 0;
  int64_t size() const { return hi > lo ? hi - lo : 0; }
  bool empty() const { return hi <= lo; }
  bool operator==(const RowRange&) const = default;
};

// A window along one dim: kernel K, stride s, dilation d, padding before
// and after (floor mode: out = (in + pb + pe - d·(K-1) - 1) / s + 1).
struct WindowRows {
  int64_t kernel = 1, stride = 1, dilation = 1, pad_begin = 0, pad_end = 0;

  int64_t extent() const { return dilation * (kernel - 1) + 1; }  // rows one window spans
  // Output rows over `in_rows` input rows (0 when the window does not fit).
  int64_t out_rows(int64_t in_rows) const;
  // The rows output rows [out.lo, out.hi) reach, padding included: [s·lo - pb,
  // s·(hi-1) - pb + d·(K-1) + 1); empty for an empty range.
  RowRange reached(RowRange out) const;
  // Whether output row o taps a row of [lo, hi) (only the taps: a dilated
  // window skips rows).
  bool taps_any(int64_t o, RowRange rows) const;
  bool operator==(const WindowRows&) const = default;
};

// Node n's window along its spatial dim `dim` (2 for rows of NCHW), the one
// place the runtime reads the window attributes. nullopt for other ops, a
// ceil-mode pool (its last window may hang past the padding), or a dim that
// is not spatial. `ceil_mode_too`: a ceil-mode pool's window as well, for
// callers that read only reached() (the rows a band of output rows reaches
// is the same formula; out_rows() is not: the sharding strategy's bands).
std::optional<WindowRows> window_rows_of(const Node& n, int64_t dim, bool ceil_mode_too = false);

// One rank's band of a window op's input after its HaloExchange: `before`
// rows from the previous rank, its own `rows`, `after` rows from the next,
// read with the window's padding (the band's: the op's own at the image's
// edges, none at a seam).
struct HaloBand {
  int64_t before = 0, rows = 0, after = 0;
  int64_t total() const { return before + rows + after; }
};

// A band's output rows, split by what they read: the interior (contiguous)
// taps only the rank's own rows and padding, so it can be computed before
// the halo arrives; the edges above and below it tap halo rows.
struct HaloSplit {
  RowRange top, interior, bottom;  // they cover [0, out_rows) in this order
};
HaloSplit split_halo_rows(const WindowRows& w, const HaloBand& band);

// How to compute output rows `out` of the window op from the input rows a
// source holds: the source's rows [src.lo, src.hi) (in the op's input
// coordinates) sliced at rows [slice.lo, slice.hi) of the source, and run
// with padding pad_begin/pad_end, give exactly those output rows. The
// padding stands only for rows the window's padding or its untapped rows
// hold (the caller asks for rows whose taps lie in the source or padding).
struct WindowPiece {
  RowRange slice;  // rows of the source, counted from src.lo
  int64_t pad_begin = 0, pad_end = 0;
};
WindowPiece window_piece(const WindowRows& w, RowRange out, RowRange src);

// HaloExchange node h's dim (*dim) and this rank's band: the one place its
// attributes are read for the geometry.
HaloBand halo_band_of(const Graph& g, const Node& h, int64_t* dim);

// Bytes a rank receives in a HaloExchange: (before + after) rows of
// `row_bytes` (the other dims times the element size).
inline int64_t halo_received_bytes(const HaloBand& band, int64_t row_bytes) {
  return (band.before + band.after) * row_bytes;
}

std::string str(const RowRange& r);  // "[3,9)"

}  // namespace tessera
