// Liveness-based placement of buffers in one arena. Each buffer is live over
// an inclusive range of plan steps; two buffers whose ranges intersect get
// disjoint byte ranges. Placement is greedy by size (largest first, each at the
// lowest offset that fits between the buffers already placed that overlap it
// in time), the TFLite arena planner's strategy: near-optimal on the chains
// and diamonds of inference graphs, and deterministic.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace tessera::runtime {

struct BufferRequest {
  int64_t bytes = 0;
  int32_t first = 0;  // step that writes it
  int32_t last = 0;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // one per request, multiples of the alignment
  int64_t arena_bytes = 0;
};

inline constexpr int64_t kArenaAlignment = 64;  // a cache line; what oneDNN asks for

// Throws Error(kInternal) for a request with last < first or negative bytes.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, int64_t alignment = kArenaAlignment);

// The first pair of buffers that are live at the same step and overlap in
// the arena, or {-1, -1}: the planner's correctness property, for tests and
// for the plan compiler's own check.
std::pair<int64_t, int64_t> find_overlap(const std::vector<BufferRequest>& requests, const MemoryPlan& plan);

// One arena laid out from its values' live ranges: the host plan
// (runtime/plan.cc) and the CUDA program (runtime/cuda/cuda_compiler.cc)
// each say over their own steps where a value is written and last read (a
// view's reads count for the value it views) and which outputs may take an
// operand's buffer; this decides the rest, once for both.
struct ArenaValue {
  int64_t bytes = 0;
  int32_t first = -1;  // the step that writes it
  int32_t last = -1;   // the last step that reads it or a view of it (at least `first`)
  bool in_arena = false;
};
// `out` may be written over `operand` (a root buffer) at `step`: it is, when
// the operand dies at that step, both are arena values of one size, and out
// has no buffer of its own yet. In step order.
struct InPlaceCandidate {
  int32_t step = 0;
  ValueId out = kNoValue;
  ValueId operand = kNoValue;
};
struct ArenaLayout {
  std::vector<ValueId> storage;        // per value: the value whose buffer it uses (itself, or an in-place donor's)
  std::vector<int32_t> storage_last;   // per buffer owner: the last step its buffer is read
  std::vector<int64_t> offset;         // per value: its buffer's offset in the arena; -1 outside it
  std::vector<int64_t> scratch_offset; // per scratch request
  int64_t arena_bytes = 0;
  int64_t buffers = 0;   // arena values with a buffer of their own
  int64_t in_place = 0;  // candidates taken
};
// Throws Error(kInternal) if the planner placed two live buffers on top of
// each other (its correctness property, checked on every layout).
ArenaLayout layout_arena(const std::vector<ArenaValue>& values, const std::vector<InPlaceCandidate>& in_place,
                         const std::vector<BufferRequest>& scratch, int64_t alignment = kArenaAlignment);

}  // namespace tessera::runtime
