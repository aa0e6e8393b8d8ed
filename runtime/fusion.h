// Post-op fusion: the grouping rule lives in graph/fusion_groups.h so that
// the cost model (which may not link the runtime) cuts graphs into the same
// kernels; the runtime's compilers use it through these names.
#pragma once

#include "graph/fusion_groups.h"

namespace tessera::runtime {

using tessera::form_groups;
using tessera::FusedGroup;
using tessera::is_binary_post_op;
using tessera::is_eltwise_post_op;
using tessera::PostOp;

}  // namespace tessera::runtime
