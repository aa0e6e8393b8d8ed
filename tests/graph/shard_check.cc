#include "tests/graph/shard_check.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/strategy.h"

namespace tessera::testing {
namespace {

void add_box(const Tensor& from, Tensor& to, const std::vector<int64_t>& to_off) {
  const Shape &fs = from.type().shape, &ts = to.type().shape;
  std::vector<int64_t> idx(fs.size());
  for (int64_t e = 0; e < from.numel(); ++e) {
    int64_t rem = e, ti = 0;
    for (size_t d = fs.size(); d-- > 0;) {
      idx[d] = rem % fs[d];
      rem /= fs[d];
    }
    for (size_t d = 0; d < fs.size(); ++d) ti = ti * ts[d] + to_off[d] + idx[d];
    if (is_float(from.dtype())) to.set_double(ti, to.get_double(ti) + from.get_double(e));
    else to.set_int(ti, to.get_int(ti) + from.get_int(e));
  }
}

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

}  // namespace

Assembled assemble(const std::vector<Tensor>& locals, const Sharding& s, const DeviceMesh& mesh,
                   const TensorType& global) {
  Assembled out{Tensor(global.dtype, global.shape)};
  for (int64_t r = 0; r < mesh.num_devices(); ++r) {
    std::vector<int64_t> c = mesh.coords(r), c0 = c;
    for (size_t a = 0; a < s.placements.size(); ++a) {
      const Placement& p = s.placements[a];
      int64_t n = mesh.axes()[a].size;
      if (p.kind == Placement::Kind::kReplicate) c0[a] = 0;
      // A shard in groups: the group's first rank holds the block.
      if (p.is_grouped()) c0[a] = c[a] - c[a] % (n / p.groups);
    }
    const Tensor& mine = locals[static_cast<size_t>(r)];
    std::vector<int64_t> off;
    Shape size;
    local_block(mesh, s, global.shape, r, off, size);
    if (size != mine.type().shape) {
      out.replicas_agree = false;
      continue;
    }
    if (c0 != c) {
      const Tensor& ref = locals[static_cast<size_t>(mesh.rank_of(c0))];
      for (int64_t e = 0; e < mine.numel(); ++e)
        if (!same(mine.get_double(e), ref.get_double(e))) out.replicas_agree = false;
      continue;
    }
    add_box(mine, out.value, off);
  }
  return out;
}

double relative_error(const Tensor& a, const Tensor& b) {
  if (a.type() != b.type()) return std::numeric_limits<double>::infinity();
  double scale = 1, err = 0;
  for (int64_t e = 0; e < b.numel(); ++e) scale = std::max(scale, std::fabs(b.get_double(e)));
  for (int64_t e = 0; e < b.numel(); ++e) {
    double x = a.get_double(e), y = b.get_double(e);
    if (same(x, y)) continue;
    err = std::max(err, std::isnan(x) || std::isnan(y) ? std::numeric_limits<double>::infinity() : std::fabs(x - y));
  }
  return err / scale;
}

}  // namespace tessera::testing
