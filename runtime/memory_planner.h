// Liveness-based placement of buffers in one arena. Each buffer is live over
// an inclusive range of plan steps; two buffers whose ranges intersect get
// disjoint byte ranges. Placement is greedy by size (largest first, each at the
// lowest offset that fits between the buffers already placed that overlap it
// in time), the TFLite arena planner's strategy: near-optimal on the chains
// and diamonds of inference graphs, and deterministic.
#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace tessera::runtime
