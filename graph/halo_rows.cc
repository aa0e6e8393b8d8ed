#include "graph/halo_rows.h"

#include <algorithm>

#include "graph/error.h"

namespace tessera {

int64_t WindowRows::out_rows(int64_t in_rows) const {
  int64_t span = in_rows + pad_begin + pad_end - extent();
  return span < 0 ? 0 : span / stride + 1;
}

RowRange WindowRows::reached(RowRange out) const {
  if (out.empty()) return {0, 0};
  return {stride * out.lo - pad_begin, stride * (out.hi - 1) - pad_begin + extent()};
}

bool WindowRows::taps_any(int64_t o, RowRange rows) const {
  for (int64_t t = 0; t < kernel; ++t) {
    int64_t r = stride * o - pad_begin + dilation * t;
    if (r >= rows.lo && r < rows.hi) return true;
  }
  return false;
}

std::optional<WindowRows> window_rows_of(const Node& n, int64_t dim, bool ceil_mode_too) {
  if (n.kind != OpKind::kConv && n.kind != OpKind::kMaxPool && n.kind != OpKind::kAveragePool) return std::nullopt;
  for (const char* name : {"kernel_shape", "strides", "pads", "dilations"})
    if (!n.attrs.has(name)) return std::nullopt;
  if (!ceil_mode_too && n.kind != OpKind::kConv && n.attrs.has("ceil_mode") && n.attrs.i("ceil_mode") != 0)
    return std::nullopt;
  const std::vector<int64_t>& k = n.attrs.ints("kernel_shape");
  auto spatial = static_cast<int64_t>(k.size());
  int64_t j = dim - 2;
  if (j < 0 || j >= spatial) return std::nullopt;
  auto at = [&](const char* name, int64_t i) { return n.attrs.ints(name).at(static_cast<size_t>(i)); };
  return WindowRows{k[static_cast<size_t>(j)], at("strides", j), at("dilations", j), at("pads", j),
                    at("pads", j + spatial)};
}

HaloSplit split_halo_rows(const WindowRows& w, const HaloBand& band) {
  int64_t out = w.out_rows(band.total());
  RowRange above{0, band.before}, below{band.before + band.rows, band.total()};
  // The edges end at the last row that taps the rows above and start at the
  // first that taps the rows below: a dilated window may skip a halo row
  // with some rows and not others, and the interior stays one range.
  int64_t top_end = 0, bottom_start = out;
  if (!above.empty())
    for (int64_t o = 0; o < out; ++o)
      if (w.taps_any(o, above)) top_end = o + 1;
  if (!below.empty())
    for (int64_t o = out - 1; o >= 0; --o)
      if (w.taps_any(o, below)) bottom_start = o;
  bottom_start = std::max(bottom_start, top_end);
  return {{0, top_end}, {top_end, bottom_start}, {bottom_start, out}};
}

WindowPiece window_piece(const WindowRows& w, RowRange out, RowRange src) {
  if (out.empty()) return {{0, 0}, 0, 0};
  RowRange r = w.reached(out);
  int64_t first = r.lo - src.lo, last = r.hi - src.lo;  // in the source's rows
  WindowPiece p;
  p.slice.lo = std::clamp<int64_t>(first, 0, src.size());
  p.slice.hi = std::clamp<int64_t>(last, p.slice.lo, src.size());
  p.pad_begin = p.slice.lo - first;
  p.pad_end = last - p.slice.hi;
  return p;
}

HaloBand halo_band_of(const Graph& g, const Node& h, int64_t* dim) {
  TESSERA_CHECK(h.kind == OpKind::kHaloExchange, "halo_band_of " << op_name(h.kind));
  const TensorType& x = g.type(h.inputs[0]);
  int64_t axis = h.attrs.i("axis");
  if (axis < 0) axis += x.rank();
  auto me = static_cast<size_t>(h.attrs.i("coordinate"));
  if (dim) *dim = axis;
  return {h.attrs.ints("before").at(me), x.shape.at(static_cast<size_t>(axis)), h.attrs.ints("after").at(me)};
}

std::string str(const RowRange& r) { return "[" + std::to_string(r.lo) + "," + std::to_string(r.hi) + ")"; }

}  // namespace tessera
