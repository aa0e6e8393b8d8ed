// Splitting points of a program's index spaces: for every value and every
// dim, the positions where the value's index expression changes form (pad and
// slice bounds, concat seams, split points, conv and pool windows that start
// or stop touching padding, tile edges, reshape periods, steps in constant
// data). Between two consecutive points of every dim, i.e. inside one box of
// the grid they cut, each element reads the inputs through the same affine
// index maps, so one program position behaves like any other there. The
// multilinear test uses this to check a box at a few positions only.
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
// graph inputs. nullopt when an op has no splitting rule here (Gather, Trilu,
// reflect Pad, collectives, ...) or a dim gets more than `max_per_dim` points:
// the caller then evaluates the whole program instead.
std::optional<std::vector<DimSplits>> split_points(const Graph& g, int64_t max_per_dim = 4096);

// Where a Slice node reads along each dim of its input: output j of dim d
// reads input start[d] + j * step[d] (ONNX clamping applied, as the kernel).
void slice_geometry(const Node& n, const Shape& in, const Shape& out, std::vector<int64_t>& start,
                    std::vector<int64_t>& step);

// The boxes of the grid cut by `splits` over `shape`, row-major order.
std::vector<Box> grid_boxes(const Shape& shape, const DimSplits& splits);
// Number of boxes grid_boxes would return.
int64_t grid_box_count(const Shape& shape, const DimSplits& splits);

// The positions a box is checked at: its corners and one step from the low
// corner along each dim (deduplicated).
std::vector<std::vector<int64_t>> box_samples(const Box& box);

}  // namespace tessera::verifier
