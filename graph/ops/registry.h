// One registration function per op family; op.cc calls them all, in one place.
#pragma once

#include <vector>

#include "graph/op.h"

namespace tessera {

// Each function fills defs[static_cast<int>(kind)] for the kinds of its family.
void register_elementwise_ops(std::vector<OpDef>& defs);
void register_reduce_ops(std::vector<OpDef>& defs);
void register_nn_ops(std::vector<OpDef>& defs);
void register_movement_ops(std::vector<OpDef>& defs);
void register_collective_ops(std::vector<OpDef>& defs);

}  // namespace tessera
