// Splitting points of a program's index spaces: for every value and every
// dim, the positions where the value's index expression changes form (pad and
// slice bounds, concat seams, split points, conv and pool windows that start
// or stop touching padding, tile edges, reshape periods, steps in constant
// data). Between two consecutive points of every dim, i.e. inside one box of
// the grid they cut, each element reads the inputs through the same affine
// index maps, so one program position behaves like any other there. The
// multilinear test uses this to check a box at a few positions only.
//
// The points come from each op's dim map (graph/dim_map.h), per piece of
// each output:
//  (a) an output dim that merges several factors splits at every multiple of
//      its minor factor's size, so that inside a box only that factor moves;
//  (b) a piece's range ends (Concat's seams);
//  (c) every read dim's points (the input's own, and its edges where the read
//      is guarded) become the output positions where the read's index crosses
//      them: for a dim c·f + (contracted terms) + offset, where f crosses for
//      each value of the contracted terms; for a merge of pass factors (a
//      reshape), where its digits pass the point's, lexicographically.
// Values with data known here (constants, and nodes over them only) split
// where their values change.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/graph.h"
#include "verifier/verdict.h"

namespace tessera::verifier {

// Per dim, the sorted interior points p (0 < p < dim): the form may differ
// between index p - 1 and index p.
using DimSplits = std::vector<std::vector<int64_t>>;

// Splits of every value of `g` (indexed by ValueId), from no splits at the
// graph inputs. nullopt when an op's map has a dim that is no affine function
// of the position (Gather, Trilu, reflect Pad, Resize, ConvTranspose), for
// collectives, or when a dim gets more than `max_per_dim` points: the caller
// then evaluates the whole program instead.
std::optional<std::vector<DimSplits>> split_points(const Graph& g, int64_t max_per_dim = 4096);

// The boxes of the grid cut by `splits` over `shape`, row-major order.
std::vector<Box> grid_boxes(const Shape& shape, const DimSplits& splits);
// Number of boxes grid_boxes would return.
int64_t grid_box_count(const Shape& shape, const DimSplits& splits);

// The positions a box is checked at: its corners and one step from the low
// corner along each dim (deduplicated).
std::vector<std::vector<int64_t>> box_samples(const Box& box);

}  // namespace tessera::verifier
