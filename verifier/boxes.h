// Turning a per-position "differs" mask over an output into disjoint boxes.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/tensor.h"
#include "verifier/verdict.h"

namespace tessera::verifier {

// Disjoint boxes covering exactly the positions where mask (row-major over
// `shape`) is true. Adjacent slices with identical sub-box lists merge, from
// the innermost dimension outwards, so a uniform region comes back as one box.
std::vector<Box> boxes_from_mask(const Shape& shape, const std::vector<uint8_t>& mask);

}  // namespace tessera::verifier
