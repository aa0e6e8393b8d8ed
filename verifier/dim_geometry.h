// What the verifier's index analyses read off an op's dimension map
// (graph/dim_map.h) beyond its own helpers: where each pass factor sits among
// an output's dims, and the flat runs of view ops. index_maps.cc,
// split_points.cc and point_plan.cc read every op's geometry through these
// and the map; none of them keeps a per-op copy.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/dim_map.h"
#include "graph/graph.h"

namespace tessera::verifier {

// Where a factor sits in one piece's output dims: dim -1 when it indexes
// none of them (a contracted factor, or a pass factor of another output).
struct Place {
  int dim = -1;
  size_t term = 0;  // its index among the dim's terms, major to minor
};
std::vector<Place> factor_places(const DimMap& m, const Piece& p);

// Whether factor f is a pass factor this piece's output dims hold.
inline bool indexes(const DimMap& m, const std::vector<Place>& places, int f) {
  return m.factors[static_cast<size_t>(f)].kind == FactorKind::kPass && places[static_cast<size_t>(f)].dim >= 0;
}

// A positional factor of a view op (OpDef::is_view: the output is the input's
// data in row-major order under another shape). Reshape's map makes a run of
// dims whose sizes share no chain of factors one positional factor (see
// dims::reshape): the factor is then the row-major flat index of the input
// dims that name it, and equally of the output dims that name it, which is
// what the map does not record and these runs restore.
struct FlatRun {
  int factor = 0;
  std::vector<size_t> in_dims, out_dims;  // ascending
};

// The piece's flat runs, or nullopt when it has a positional or gathered dim
// that is not one (any such dim of an op that is not a view).
std::optional<std::vector<FlatRun>> flat_runs(const Node& n, const DimMap& m, const Piece& p, const Shape& in,
                                              const Shape& out);

// Whether every dim of the piece and of its reads is affine.
bool all_affine(const Piece& p);

}  // namespace tessera::verifier
