#include "mutator/sharding/seam_halo_memo.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "graph/error.h"
#include "graph/halo_rows.h"
#include "mutator/sharding/halo_seams.h"

namespace tessera::mutator {
namespace {

using Ints = std::vector<int64_t>;
using Rows = std::vector<std::pair<int64_t, int64_t>>;

std::mutex memo_mutex;
std::map<WindowGeometry, std::optional<Rows>> memo;  // guarded by memo_mutex
int64_t thin_for_testing = 0;                        // guarded by memo_mutex
int64_t surrogates_tested = 0;                       // guarded by memo_mutex

// x [1, 1, in_rows, 2] -> the window along dim 2 (a kernel of 1 across the
// two columns) -> out. A Conv's weight is an input, so the Z_p test reads
// it as a variable: no chosen weight can hide a seam.
std::optional<Rows> test_surrogate(const WindowGeometry& w) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 1, w.in_rows, 2}});
  Attrs a;
  a.set("kernel_shape", Ints{w.kernel, 1});
  a.set("strides", Ints{w.stride, 1});
  a.set("pads", Ints{w.pad_begin, 0, w.pad_end, 0});
  a.set("dilations", Ints{w.dilation, 1});
  std::vector<ValueId> ins{x};
  if (w.kind == OpKind::kConv) {
    a.set("group", int64_t{1});
    ins.push_back(g.add_input("w", {DType::kF32, {1, 1, w.kernel, 1}}));
  } else {
    a.set("ceil_mode", w.ceil_mode);
    if (w.kind == OpKind::kAveragePool) a.set("count_include_pad", int64_t{0});
  }
  NodeId op = g.add_node(w.kind, ins, a, "surrogate");
  g.set_outputs({g.node(op).outputs[0]});
  if (g.type(g.node(op).outputs[0]).shape[2] != w.out_rows || w.out_rows < w.n) return std::nullopt;
  std::optional<SeamHalo> s = halo_from_seams(g, {op}, 2, w.n, w.thin);
  if (!s || !s->corrected.equivalent()) return std::nullopt;
  Rows rows;
  for (const RankHalo& r : s->ranks) rows.emplace_back(r.from_prev, r.from_next);
  return rows;
}

}  // namespace

std::optional<Rows> seam_halo_rows(const WindowGeometry& geometry) {
  std::lock_guard<std::mutex> lock(memo_mutex);
  WindowGeometry w = geometry;
  w.thin = std::max(w.thin, thin_for_testing);
  auto it = memo.find(w);
  if (it != memo.end()) return it->second;
  ++surrogates_tested;
  std::optional<Rows> rows;
  try {
    rows = test_surrogate(w);
  } catch (const Error&) {
    rows = std::nullopt;  // a window the surrogate cannot hold (shape inference refused it): not offered
  }
  memo.emplace(w, rows);
  return rows;
}

std::optional<WindowGeometry> window_geometry(const Graph& g, NodeId id, int64_t dim, int64_t n) {
  const Node& node = g.node(id);
  std::optional<WindowRows> r = window_rows_of(node, dim, /*ceil_mode_too=*/true);
  if (!r) return std::nullopt;
  WindowGeometry w;
  w.kind = node.kind;
  w.kernel = r->kernel;
  w.stride = r->stride;
  w.dilation = r->dilation;
  w.pad_begin = r->pad_begin;
  w.pad_end = r->pad_end;
  w.ceil_mode = node.kind != OpKind::kConv && node.attrs.has("ceil_mode") ? node.attrs.i("ceil_mode") : 0;
  w.in_rows = g.type(node.inputs[0]).shape.at(static_cast<size_t>(dim));
  w.out_rows = g.type(node.outputs[0]).shape.at(static_cast<size_t>(dim));
  w.n = n;
  return w;
}

int64_t thin_seam_halo_for_testing(int64_t thin) {
  std::lock_guard<std::mutex> lock(memo_mutex);
  int64_t was = thin_for_testing;
  thin_for_testing = thin;
  return was;
}

int64_t seam_halo_surrogates_tested() {
  std::lock_guard<std::mutex> lock(memo_mutex);
  return surrogates_tested;
}

}  // namespace tessera::mutator
