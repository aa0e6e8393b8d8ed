// The values an integer graph input takes in the model's own use, so that a
// check's random inputs exercise what the model reads: a token id over the
// whole table a Gather indexes, a position over its table (or over the KV
// cache a ScatterElements writes it into), and {0, 1} only where nothing
// bounds the input more widely (masks, booleans, flags).
//
// An input's values are followed through the ops that move values without
// changing them (Reshape, Squeeze, Unsqueeze, Flatten, Transpose, Expand,
// Tile, Slice, Split, Concat, Identity, integer Casts, the data side of a
// Gather, the data and updates of a scatter without reduction) to the index
// input of Gather, GatherElements or ScatterElements, whose axis size
// bounds them. Arithmetic on the way (a mask summed into positions) ends the
// trail: the input counts as a mask there. Where several uses bound one
// input, the smallest bound holds, so every index stays valid. A range the
// user states (--input-range NAME=LO:HI) replaces what the use gives.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::verifier {

struct IntRange {
  int64_t lo = 0;
  int64_t hi = 2;  // exclusive
  // What bounds it: "indexes <node> (<n> entries)", or "mask".
  std::string why = "mask";
};

// Ranges the user states, by input name: LO <= value < HI.
using StatedRanges = std::map<std::string, IntRange>;

// Parses --input-range NAME=LO:HI flags (HI exclusive, LO < HI) and checks
// that each names an integer (not bool) input of `g`. Throws Error(kUsage)
// with one line naming the flag.
StatedRanges parse_input_ranges(const Graph& g, const std::vector<std::string>& flags);

// One entry per graph input; float inputs get the default (unused). A
// stated range replaces the inferred one, its `why` saying so.
std::vector<IntRange> integer_input_ranges(const Graph& g, const StatedRanges& stated = {});

// "input_ids over [0, 50257) (indexes /wte/Gather), attention_mask over {0, 1}
// (mask)": the integer inputs and their ranges, for reports; "" if none.
std::string describe_ranges(const Graph& g, const std::vector<IntRange>& ranges);

}  // namespace tessera::verifier
