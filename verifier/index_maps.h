// The linear parts of the index maps through which a program's outputs read
// its inputs. Inside a box of the splitting-point grid (split_points.h) every
// read of input X at output position i is X[L i + c + (reduction terms)],
// with L and c fixed in the box. If both programs read each input through
// one and the same L, two reads X[L i + c] and X[L i + c'] coincide either
// at every position of a box or at none, so a box is uniformly equal or
// uniformly different. Different linear parts (x[i] against x[n-1-i], a
// transpose against none) can meet inside a box at positions no corner
// sample sees; then a differing box must be evaluated whole.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace tessera::verifier {

// (graph input index, row-major matrix of rank(input) x rank(value)).
using LinearRead = std::pair<int, std::vector<int64_t>>;
using LinearReads = std::set<LinearRead>;

// Per value of `g`, the linear parts of its reads of graph inputs, read off
// each op's dim map. nullopt when an op reads through an index that is no
// affine function of the position (Gather, Trilu, reflect Pad, Resize,
// ConvTranspose) or is a collective.
std::optional<std::vector<LinearReads>> linear_reads(const Graph& g);

// Whether two programs' reads (of one output each) use at most one linear
// part per input, the same in both, along the output dims marked `moving`
// (a box's dims of extent > 1; the others never change inside the box).
// This is when box samples decide differing boxes exactly.
bool single_linear_part(const LinearReads& a, const LinearReads& b, const std::vector<bool>& moving);

}  // namespace tessera::verifier
