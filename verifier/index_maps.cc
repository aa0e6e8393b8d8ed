#include "verifier/index_maps.h"

#include <map>

#include "verifier/dim_geometry.h"

namespace tessera::verifier {
namespace {

// More distinct linear parts than this: give up on the value (as "several").
constexpr size_t kMaxReads = 256;
const LinearRead kSeveral{-1, {}};

// Matrix rows x cols, row-major.
struct Mat {
  size_t rows = 0, cols = 0;
  std::vector<int64_t> a;
  Mat(size_t r, size_t c) : rows(r), cols(c), a(r * c, 0) {}
  int64_t& at(size_t r, size_t c) { return a[r * cols + c]; }
};

struct NodeRead {
  size_t input;  // the node's input slot
  Mat map;       // rank(input) x rank(output)
};

// The linear part of each read of one output, from its dim map. Inside a box
// no output dim crosses a period of its minor factor, so moving output dim j
// by one moves that factor by one and no other: L[d][j] is the coefficient
// of j's minor factor in input dim d's expression. Contracted factors are the
// reduction terms and stay out of L. A view op's flat run moves its input's
// innermost run dim by the output dim's row-major stride in the run (only
// that dim moves inside a box: split_points cuts at its periods). nullopt
// for dims that are no affine function of the position (Gather's index, a
// reflect Pad, Trilu's mask, Resize taps).
std::optional<std::vector<NodeRead>> node_maps(const Graph& g, const Node& n, const DimMap& m, size_t out_index) {
  const Shape& out = g.type(n.outputs[out_index]).shape;
  std::vector<NodeRead> reads;
  for (const Piece& p : m.outputs.at(out_index)) {
    if (p.reads.empty()) continue;  // reads no input (Shape, Range, ConstantOfShape)
    const Shape& in0 = g.type(n.inputs[static_cast<size_t>(p.reads[0].input)]).shape;
    std::optional<std::vector<FlatRun>> runs = flat_runs(n, m, p, in0, out);
    if (!runs) return std::nullopt;
    std::vector<int> minor(out.size(), -1);
    for (size_t j = 0; j < out.size(); ++j)
      if (p.dims[j].form == DimForm::kAffine && !p.dims[j].terms.empty()) minor[j] = p.dims[j].terms.back().factor;
    for (const Read& r : p.reads) {
      auto slot = static_cast<size_t>(r.input);
      Mat l(g.type(n.inputs[slot]).shape.size(), out.size());
      for (size_t d = 0; d < r.dims.size(); ++d) {
        if (r.dims[d].form != DimForm::kAffine) continue;  // a flat run's dim
        for (const DimTerm& t : r.dims[d].terms)
          for (size_t j = 0; j < out.size(); ++j)
            if (minor[j] == t.factor) l.at(d, j) += t.coef;
      }
      for (const FlatRun& run : *runs) {
        int64_t stride = 1;
        for (size_t k = run.out_dims.size(); k-- > 0;) {
          l.at(run.in_dims.back(), run.out_dims[k]) = stride;
          stride *= out[run.out_dims[k]];
        }
      }
      reads.push_back({slot, std::move(l)});
    }
  }
  return reads;
}

std::vector<int64_t> compose(const std::vector<int64_t>& l, size_t l_rows, const Mat& m) {
  // l: l_rows x m.rows; result l_rows x m.cols.
  std::vector<int64_t> out(l_rows * m.cols, 0);
  for (size_t i = 0; i < l_rows; ++i)
    for (size_t k = 0; k < m.rows; ++k) {
      int64_t x = l[i * m.rows + k];
      if (x == 0) continue;
      for (size_t j = 0; j < m.cols; ++j) out[i * m.cols + j] += x * m.a[k * m.cols + j];
    }
  return out;
}

}  // namespace
std::optional<std::vector<LinearReads>> linear_reads(const Graph& g) {
  std::vector<LinearReads> reads(static_cast<size_t>(g.num_values()));
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    size_t r = g.type(g.inputs()[i]).shape.size();
    std::vector<int64_t> id(r * r, 0);
    for (size_t d = 0; d < r; ++d) id[d * r + d] = 1;
    reads[static_cast<size_t>(g.inputs()[i])].insert({static_cast<int>(i), id});
  }
  for (NodeId id : g.topo_order()) {
    const Node& n = g.node(id);
    if (op_def(n.kind).is_collective()) return std::nullopt;  // reads other ranks' data
    DimMap m = dim_map(g, n);
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      std::optional<std::vector<NodeRead>> maps = node_maps(g, n, m, o);
      if (!maps) return std::nullopt;
      LinearReads& out = reads[static_cast<size_t>(n.outputs[o])];
      for (const NodeRead& rd : *maps) {
        for (const LinearRead& lr : reads[static_cast<size_t>(n.inputs[rd.input])]) {
          if (lr == kSeveral) {
            out.insert(kSeveral);
            continue;
          }
          size_t rows = g.type(g.inputs()[static_cast<size_t>(lr.first)]).shape.size();
          out.insert({lr.first, compose(lr.second, rows, rd.map)});
        }
        if (out.size() > kMaxReads) out = {kSeveral};
      }
    }
  }
  return reads;
}

bool single_linear_part(const LinearReads& a, const LinearReads& b, const std::vector<bool>& moving) {
  std::map<int, std::vector<int64_t>> seen;
  size_t cols = moving.size();
  for (const LinearReads* set : {&a, &b})
    for (const LinearRead& r : *set) {
      if (r == kSeveral) return false;
      std::vector<int64_t> m = r.second;
      for (size_t i = 0; i < m.size(); ++i)
        if (!moving[i % cols]) m[i] = 0;
      auto [it, fresh] = seen.emplace(r.first, m);
      if (!fresh && it->second != m) return false;
    }
  return true;
}

}  // namespace tessera::verifier
