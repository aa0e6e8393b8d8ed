#include "runtime/memory_planner.h"

#include <algorithm>
#include <numeric>

#include "graph/error.h"

namespace tessera::runtime {
namespace {

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

bool live_together(const BufferRequest& a, const BufferRequest& b) {
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, int64_t alignment) {
  TESSERA_CHECK(alignment > 0, "arena alignment must be positive");
  for (const BufferRequest& r : requests)
    TESSERA_CHECK(r.bytes >= 0 && r.first <= r.last,
                  "bad buffer request: " << r.bytes << " bytes, steps " << r.first << ".." << r.last);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Largest first; ties by first use so that the result does not depend on
  // the sort's stability.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (requests[a].bytes != requests[b].bytes) return requests[a].bytes > requests[b].bytes;
    if (requests[a].first != requests[b].first) return requests[a].first < requests[b].first;
    return a < b;
  });

  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> placed;  // indices of placed requests, kept sorted by offset
  for (size_t i : order) {
    int64_t size = round_up(std::max<int64_t>(requests[i].bytes, 1), alignment);
    // Best fit: the smallest gap between time-overlapping placed buffers that
    // holds this one; otherwise the end of the highest of them.
    int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
    for (size_t j : placed) {
      if (!live_together(requests[i], requests[j])) continue;
      int64_t start = plan.offsets[j];
      int64_t gap = start - cursor;
      if (gap >= size && gap < best_gap) {
        best = cursor;
        best_gap = gap;
      }
      cursor = std::max(cursor, start + round_up(std::max<int64_t>(requests[j].bytes, 1), alignment));
    }
    if (best < 0) best = cursor;
    plan.offsets[i] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + size);
    auto pos = std::upper_bound(placed.begin(), placed.end(), best,
                                [&](int64_t off, size_t j) { return off < plan.offsets[j]; });
    placed.insert(pos, i);
  }
  return plan;
}

std::pair<int64_t, int64_t> find_overlap(const std::vector<BufferRequest>& requests, const MemoryPlan& plan) {
  for (size_t a = 0; a < requests.size(); ++a)
    for (size_t b = a + 1; b < requests.size(); ++b) {
      if (!live_together(requests[a], requests[b]) || requests[a].bytes == 0 || requests[b].bytes == 0) continue;
      int64_t a0 = plan.offsets[a], a1 = a0 + requests[a].bytes;
      int64_t b0 = plan.offsets[b], b1 = b0 + requests[b].bytes;
      if (a0 < b1 && b0 < a1) return {static_cast<int64_t>(a), static_cast<int64_t>(b)};
    }
  return {-1, -1};
}

ArenaLayout layout_arena(const std::vector<ArenaValue>& values, const std::vector<InPlaceCandidate>& in_place,
                         const std::vector<BufferRequest>& scratch, int64_t alignment) {
  const size_t nv = values.size();
  ArenaLayout a;
  a.storage.resize(nv);
  a.storage_last.resize(nv);
  for (size_t v = 0; v < nv; ++v) {
    a.storage[v] = static_cast<ValueId>(v);
    a.storage_last[v] = values[v].last;
  }
  for (const InPlaceCandidate& c : in_place) {
    if (c.out == kNoValue || c.operand == kNoValue) continue;
    const ArenaValue &out = values[static_cast<size_t>(c.out)], &in = values[static_cast<size_t>(c.operand)];
    if (!out.in_arena || !in.in_arena || in.last != c.step || out.bytes != in.bytes ||
        a.storage[static_cast<size_t>(c.out)] != c.out)
      continue;
    ValueId s = a.storage[static_cast<size_t>(c.operand)];
    a.storage[static_cast<size_t>(c.out)] = s;
    a.storage_last[static_cast<size_t>(s)] = std::max(a.storage_last[static_cast<size_t>(s)], out.last);
    ++a.in_place;
  }
  std::vector<BufferRequest> requests;
  std::vector<ValueId> owner;
  for (size_t v = 0; v < nv; ++v) {
    if (!values[v].in_arena || a.storage[v] != static_cast<ValueId>(v)) continue;
    requests.push_back({values[v].bytes, values[v].first, a.storage_last[v]});
    owner.push_back(static_cast<ValueId>(v));
  }
  a.buffers = static_cast<int64_t>(requests.size());
  requests.insert(requests.end(), scratch.begin(), scratch.end());
  MemoryPlan mp = plan_memory(requests, alignment);
  auto bad = find_overlap(requests, mp);
  TESSERA_CHECK(bad.first < 0, "memory planner placed live buffers " << bad.first << " and " << bad.second
                                                                     << " on top of each other");
  a.arena_bytes = mp.arena_bytes;
  a.offset.assign(nv, -1);
  for (size_t i = 0; i < owner.size(); ++i) a.offset[static_cast<size_t>(owner[i])] = mp.offsets[i];
  for (size_t v = 0; v < nv; ++v)
    if (values[v].in_arena) a.offset[v] = a.offset[static_cast<size_t>(a.storage[v])];
  a.scratch_offset.assign(mp.offsets.begin() + static_cast<std::ptrdiff_t>(owner.size()), mp.offsets.end());
  return a;
}

}  // namespace tessera::runtime
