// Spatial sharding: the rows of an image (one spatial dim) cut into bands
// over a mesh axis, each rank computing its band of a windowed op's output
// (Conv, pooling, element-wise ops between them) from its band of the input
// plus the halo, the rows its neighbours hold that its windows reach. GSPMD
// writes the halo of each windowed op by hand (convolution_handler.cc);
// here it is read from the dimension map: an output row o of a window dim
// reads s·o + d·t - p over the taps t, so the band [a, b) reads
//
//   [max(0, s·a - p), min(H, s·(b - 1) - p + d·(K - 1) + 1))
//
// whatever the stride, dilation and padding (the verifier proves the band
// equal to the global op for the suite's windows: spatial-halo-*). Bands
// are uneven where the rows do not divide: the first rows % n ranks hold
// one row more. A chain of windowed layers may exchange once for k layers
// (a deeper halo, the overlap recomputed by both neighbours).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::mutator {

// Rows [lo, hi) of one dim.
struct Band {
  int64_t lo = 0, hi = 0;
  int64_t size() const { return hi > lo ? hi - lo : 0; }
  bool operator==(const Band&) const = default;
};

// `n` bands covering [0, size), the first size % n one row longer. Throws
// Error(kUsage) when n < 1 or n > size (a rank without rows).
std::vector<Band> row_bands(int64_t size, int64_t n);

// The rows of input `slot` along its dim `in_dim` that node `n`'s output 0
// rows `rows` of dim `out_dim` read, from the dim map: each read's dim
// holding the output dim's factor must be affine in it, its other terms
// contracted factors (the window taps), clipped to the input where the read
// is guarded (zero padding). nullopt when the op reads the dim otherwise
// (Resize's positional taps, a gather, a reshape merging it with another
// dim, an op with more than one piece), or `slot` does not read it (a
// weight: *in_dim is then -1 and the result an empty band).
std::optional<Band> rows_read(const Graph& g, NodeId n, int64_t out_dim, Band rows, int slot, int64_t* in_dim);
// The same before clipping: the rows the windows reach, padding included
// (a band at the top of a pad-1 window reaches row -1).
std::optional<Band> rows_reached(const Graph& g, NodeId n, int64_t out_dim, Band rows, int slot, int64_t* in_dim);

// The rows of the chain's input (its dim *in_dim) that output rows `rows`
// of dim `dim` of the chain's last node read, through every node (the
// chain as below). nullopt as spatial_halo.
std::optional<Band> chain_rows_read(const Graph& g, const std::vector<NodeId>& chain, int64_t dim, Band rows,
                                    int64_t* in_dim);

// One rank of a spatial split of a chain of layers.
struct RankHalo {
  Band out;     // its band of the chain's output rows
  Band own;     // its band of the chain's input rows
  Band needed;  // the input rows its band reads: own plus halo, within the input
  int64_t from_prev = 0, from_next = 0;  // halo rows the previous and next ranks send
  // Rows of the chain's intermediate outputs it computes beyond its own
  // band of them (the overlap a deeper halo recomputes).
  int64_t recomputed_rows = 0;
};

struct SpatialHalo {
  int64_t in_dim = 0, out_dim = 0;  // the dim split, at the chain's input and output
  std::vector<RankHalo> ranks;
  // Every halo lies within the adjacent rank's band, so one exchange with
  // the two neighbours brings it (a halo deeper than a band would need the
  // rank beyond: such a split is not offered).
  bool neighbours_only = true;
  int64_t bytes_per_row = 0;  // of the chain's input: the other dims times the element size

  int64_t halo_rows() const;   // sent over all ranks
  int64_t halo_bytes() const { return halo_rows() * bytes_per_row; }
  std::string str() const;     // "rank 0 rows [0,8) +0/+1, rank 1 rows [8,16) +1/+0"
};

// The halo of splitting `dim` of the chain's output into n bands. `chain`:
// nodes in order, each reading the previous one's output 0 as its input 0,
// the first reading the chain's input, every other input a weight (not
// indexed by the dim). The dim of each node's input is found from its dim
// map (a Conv's H is H of its input and output). nullopt when a node reads
// the dim by no affine window (rows_read) or an other input reads it.
std::optional<SpatialHalo> spatial_halo(const Graph& g, const std::vector<NodeId>& chain, int64_t dim, int64_t n);

// The chain cut into exchanges every k layers (k = 1: before every layer):
// the halos of the segments in order, k layers each, the first shorter.
std::optional<std::vector<SpatialHalo>> spatial_halos_every(const Graph& g, const std::vector<NodeId>& chain,
                                                            int64_t dim, int64_t n, int64_t k);
// The same for segments starting at `starts` (indices into the chain,
// increasing, the first 0): one exchange before each.
std::optional<std::vector<SpatialHalo>> spatial_halos_at(const Graph& g, const std::vector<NodeId>& chain,
                                                         int64_t dim, int64_t n, const std::vector<size_t>& starts);

// Where an exchange every k layers starts its segments: the last k layers,
// the k before them, ..., the first segment shorter.
std::vector<size_t> every_k_layers(size_t chain_size, int64_t k);
// Where an exchange every k window layers (Conv, MaxPool, AveragePool)
// starts them: before the first window op of the chain, then before every
// k-th after it; the element-wise layers after a window op go with it
// (k = 1: an exchange before every window op, as the search's strategies
// emit). The chain must start with a window op.
std::vector<size_t> every_k_window_layers(const Graph& g, const std::vector<NodeId>& chain, int64_t k);
int64_t window_layers(const Graph& g, const std::vector<NodeId>& chain);  // window ops in the chain
bool is_window_layer(OpKind k);                                            // Conv, MaxPool, AveragePool

}  // namespace tessera::mutator
