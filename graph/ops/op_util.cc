#include "graph/ops/op_util.h"

#include <numeric>

namespace tessera::ops {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      TESSERA_SHAPE_ERROR("shapes " << shape_str(a) << " and " << shape_str(b) << " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) TESSERA_SHAPE_ERROR("axis " << axis << " is out of range for rank " << rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) out.push_back(normalize_axis(a, rank));
  return out;
}

std::vector<int64_t> broadcast_index_map(const Shape& in, const Shape& out) {
  int64_t n = shape_numel(out);
  std::vector<int64_t> map(static_cast<size_t>(n));
  // The common cases without an index per dimension: the same shape (or
  // one that differs by leading 1s), and a single element.
  if (shape_numel(in) == n) {
    std::iota(map.begin(), map.end(), int64_t{0});
    return map;
  }
  if (shape_numel(in) == 1) return map;
  size_t rank = out.size(), off = rank - in.size();
  std::vector<int64_t> in_strides = shape_strides(in);
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0;
    for (size_t d = off; d < rank; ++d)
      if (in[d - off] != 1) src += idx[d] * in_strides[d - off];
    map[i] = src;
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
  return map;
}

void unravel(int64_t i, const Shape& shape, std::vector<int64_t>& idx) {
  idx.resize(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    int64_t s = shape[d] == 0 ? 1 : shape[d];
    idx[d] = i % s;
    i /= s;
  }
}

int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t r = 0;
  for (size_t d = 0; d < idx.size(); ++d) r += idx[d] * strides[d];
  return r;
}

}  // namespace tessera::ops
