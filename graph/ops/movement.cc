// Placeholder: being written.
#include "graph/ops/registry.h"
namespace tessera {
void register_movement_ops(std::vector<OpDef>&) {}
}  // namespace tessera
