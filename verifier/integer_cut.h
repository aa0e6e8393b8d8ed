// Integer inputs (token ids, masks, positions) defeat the Z_p test: they
// cannot range over a field, so a test at a few valid values proves nothing
// about the others. But where both programs read their integer inputs only
// through the same computations — the same Gather of the same table by the
// same ids, the same Cast of the same mask — the programs agree for every
// value of the integer inputs as soon as they agree as functions of those
// computations' results, taken as independent float inputs (a polynomial
// identity in free variables holds at every point, and the rows a Gather
// picks are one such point). This pass finds that cut.
//
// The integer part of a graph: nodes whose outputs are all integer or bool
// and that depend on an integer graph input. Its frontier: nodes outside it
// that read it and produce floats; a frontier node may read only the
// integer part, integer graph inputs and constants. The cut exists when
// every frontier value of one program is computed identically (same ops,
// attributes, constants and wiring back to the integer inputs) by a frontier
// value of the other, and no float node or graph output reads the integer
// part directly.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "graph/graph.h"

namespace tessera::verifier {

struct IntegerCut {
  // The float parts of both programs: the float graph inputs first (in the
  // original order), then one input per matched frontier value (same
  // position in both), and the original outputs.
  Graph original, candidate;
  int frontier = 0;    // values cut
  std::string detail;  // "12 values (Gather, Cast)"
};

// nullopt (with `why`) when the two programs read their integer inputs
// differently, or have none.
std::optional<IntegerCut> cut_integer_inputs(const Graph& original, const Graph& candidate, std::string* why);

}  // namespace tessera::verifier
