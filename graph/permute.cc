#include "graph/permute.h"

#include <algorithm>
#include <utility>

namespace tessera {

CanonicalPermute canonical_permute(const std::vector<int64_t>& shape, const std::vector<int64_t>& perm) {
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first input axis, size) in output order
  int64_t prev = -2;
  for (int64_t a : perm) {
    if (shape[static_cast<size_t>(a)] == 1) continue;
    bool follows = prev >= 0 && [&] {
      for (int64_t b = prev + 1; b < a; ++b)
        if (shape[static_cast<size_t>(b)] != 1) return false;
      return a > prev;
    }();
    if (follows) runs.back().second *= shape[static_cast<size_t>(a)];
    else runs.push_back({a, shape[static_cast<size_t>(a)]});
    prev = a;
  }
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return runs[x].first < runs[y].first; });
  CanonicalPermute c;
  c.perm.resize(runs.size());
  for (size_t rank = 0; rank < order.size(); ++rank) {
    c.sizes.push_back(runs[order[rank]].second);
    c.perm[order[rank]] = static_cast<int64_t>(rank);
  }
  return c;
}

CopyRow copy_row(const std::vector<int64_t>& extents, const std::vector<int64_t>& src_strides, size_t t,
                 int64_t elem_bytes) {
  CopyRow row{{t}, {extents[t]}, extents[t]};
  for (bool grown = true; grown && row.elements * elem_bytes < kCopyLineBytes;) {
    grown = false;
    for (size_t i = 0; i < extents.size() && !grown; ++i) {
      if (src_strides[i] != row.elements || std::find(row.dims.begin(), row.dims.end(), i) != row.dims.end())
        continue;
      int64_t need = (kCopyLineBytes / elem_bytes + row.elements - 1) / row.elements, take = extents[i];
      for (int64_t f = need; f < extents[i]; ++f)
        if (extents[i] % f == 0) {
          take = f;
          break;
        }
      if (row.elements * take > kMaxCopyRow) continue;
      row.dims.push_back(i);
      row.take.push_back(take);
      row.elements *= take;
      grown = true;
    }
  }
  return row;
}

}  // namespace tessera
