// The fast path of the multilinear test: cuts each output into the boxes of
// both programs' splitting points (split_points.h) and evaluates the two
// programs position-wise (point_eval.h) at each box's corners and one step
// along each dim only. Inside a box both programs read their inputs through
// fixed affine index maps, so the difference at any position is the
// difference at a sample with the input variables renamed: a box whose
// samples all agree agrees everywhere. A box whose samples all differ
// differs everywhere only if the two programs read each input through the
// same linear part (index_maps.h); otherwise the maps may meet inside it (a
// reversed slice against the original agrees at the middle element) and the
// box is not decided here, nor is one whose samples disagree among themselves.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/graph.h"

namespace tessera::verifier {

struct BoxCheck {
  // Per output, row-major: 1 where the programs differ in some trial.
  std::vector<std::vector<uint8_t>> masks;
  int64_t boxes = 0;      // boxes checked, all outputs
  int64_t positions = 0;  // positions evaluated per program and trial
};

// Runs `trials` trials with inputs drawn as the full test draws them from
// `seed`. nullopt when a program has an op without splitting rule, the grid
// is too fine, the work would pass `budget` multiply-adds, or a box is undecided:
// the caller then evaluates the whole outputs instead. Both graphs take the
// same inputs and have the same output types, and have no collectives.
std::optional<BoxCheck> box_check(const Graph& original, const Graph& candidate, int trials, uint64_t seed,
                                  int64_t budget);

}  // namespace tessera::verifier
