#include "verifier/index_maps.h"

#include <map>

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

// Input dim d reads output dim off + d where the sizes agree (numpy
// broadcasting, keepdims reductions); a stretched or reduced dim reads 0.
Mat aligned(const Shape& in, const Shape& out) {
  Mat m(in.size(), out.size());
  size_t off = out.size() >= in.size() ? out.size() - in.size() : 0;
  for (size_t d = 0; d < in.size() && off + d < out.size(); ++d)
    if (in[d] == out[off + d]) m.at(d, off + d) = 1;
  return m;
}

Mat identity_without(size_t rank, const std::vector<bool>& zero) {
  Mat m(rank, rank);
  for (size_t d = 0; d < rank; ++d) m.at(d, d) = zero[d] ? 0 : 1;
  return m;
}

// Reshape: within a box, the flat index of each group is linear in the
// output index, and only the group's innermost non-unit input dim moves.
Mat reshape_map(const Shape& in, const Shape& out) {
  Mat m(in.size(), out.size());
  size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    size_t j0 = j;
    int64_t pi = 1, pj = 1;
    size_t i0 = i;
    if (i < in.size()) pi *= in[i++];
    if (j < out.size()) pj *= out[j++];
    while (pi != pj) {
      if (pi < pj && i < in.size()) pi *= in[i++];
      else if (pj < pi && j < out.size()) pj *= out[j++];
      else return m;  // unreachable for a valid reshape
    }
    size_t inner = i;
    for (size_t k = i; k-- > i0;)
      if (in[k] > 1) {
        inner = k;
        break;
      }
    if (inner == i) continue;
    int64_t stride = 1;
    for (size_t k = j; k-- > j0;) {
      m.at(inner, k) = stride;
      stride *= out[k];
    }
  }
  return m;
}

struct Read {
  size_t input;  // the node's input slot
  Mat map;       // rank(input) x rank(output)
};

// The linear parts of a node's reads of its inputs, per input slot; nullopt
// without a rule.
std::optional<std::vector<Read>> node_maps(const Graph& g, const Node& n, size_t out_index) {
  const Shape& out = g.type(n.outputs[out_index]).shape;
  size_t r = out.size();
  auto in_shape = [&](size_t i) -> const Shape& { return g.type(n.inputs[i]).shape; };
  auto present = [&](size_t i) { return i < n.inputs.size() && n.inputs[i] != kNoValue; };
  std::vector<Read> reads;
  auto identity_all = [&] {
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (present(i)) reads.push_back({i, aligned(in_shape(i), out)});
  };
  if (op_def(n.kind).elementwise()) {
    identity_all();
    return reads;
  }
  switch (n.kind) {
    case OpKind::kReshape: case OpKind::kFlatten: case OpKind::kSqueeze: case OpKind::kUnsqueeze:
      reads.push_back({0, reshape_map(in_shape(0), out)});
      return reads;
    case OpKind::kTranspose: {
      const auto& perm = n.attrs.ints("perm");
      Mat m(r, r);
      for (size_t d = 0; d < r; ++d) m.at(static_cast<size_t>(perm[d]), d) = 1;
      reads.push_back({0, m});
      return reads;
    }
    case OpKind::kSlice: {
      Mat m(r, r);
      const auto& axes = n.attrs.ints("axes");
      const auto& steps = n.attrs.ints("steps");
      for (size_t d = 0; d < r; ++d) m.at(d, d) = 1;
      for (size_t k = 0; k < axes.size(); ++k) {
        auto a = static_cast<size_t>(axes[k] < 0 ? axes[k] + static_cast<int64_t>(r) : axes[k]);
        m.at(a, a) = out[a] <= 1 ? 1 : steps[k];
      }
      reads.push_back({0, m});
      return reads;
    }
    case OpKind::kExpand:
      identity_all();
      return reads;
    case OpKind::kPad: case OpKind::kConcat: case OpKind::kSplit: case OpKind::kTile:
      // Offsets only (per input, per part, per tile inside a box).
      for (size_t i = 0; i < n.inputs.size(); ++i) reads.push_back({i, identity_without(r, std::vector<bool>(r, false))});
      return reads;
    case OpKind::kMatMul: {
      const Shape &a = in_shape(0), &b = in_shape(1);
      bool a1 = a.size() == 1, b1 = b.size() == 1;
      size_t batch = r - (a1 ? 0 : 1) - (b1 ? 0 : 1);
      Shape ob(out.begin(), out.begin() + static_cast<int64_t>(batch));
      auto with_batch = [&](const Shape& s, size_t core) {
        Mat m(s.size(), r);
        if (s.size() > core) {
          Mat bm = aligned(Shape(s.begin(), s.end() - static_cast<int64_t>(core)), ob);
          for (size_t i = 0; i < bm.rows; ++i)
            for (size_t c = 0; c < bm.cols; ++c) m.at(i, c) = bm.at(i, c);
        }
        return m;
      };
      Mat ma = with_batch(a, a1 ? 1 : 2), mb = with_batch(b, b1 ? 1 : 2);
      if (!a1) ma.at(a.size() - 2, batch) = 1;
      if (!b1) mb.at(b.size() - 1, r - 1) = 1;
      reads.push_back({0, ma});
      reads.push_back({1, mb});
      return reads;
    }
    case OpKind::kGemm: {
      bool ta = n.attrs.i("transA") != 0, tb = n.attrs.i("transB") != 0;
      Mat ma(2, 2), mb(2, 2);
      ma.at(ta ? 1 : 0, 0) = 1;
      mb.at(tb ? 0 : 1, 1) = 1;
      reads.push_back({0, ma});
      reads.push_back({1, mb});
      if (present(2)) reads.push_back({2, aligned(in_shape(2), out)});
      return reads;
    }
    case OpKind::kConv: case OpKind::kMaxPool: case OpKind::kAveragePool: case OpKind::kGlobalAveragePool:
    case OpKind::kGlobalMaxPool: {
      bool conv = n.kind == OpKind::kConv;
      bool global = n.kind == OpKind::kGlobalAveragePool || n.kind == OpKind::kGlobalMaxPool;
      Mat mx(r, r);
      mx.at(0, 0) = 1;
      if (!conv) mx.at(1, 1) = 1;
      if (!global) {
        const auto& st = n.attrs.ints("strides");
        for (size_t d = 2; d < r; ++d) mx.at(d, d) = st[d - 2];
      }
      reads.push_back({0, mx});
      if (conv) {
        Mat mw(r, r);
        mw.at(0, 1) = 1;
        reads.push_back({1, mw});
        if (present(2)) {
          Mat mb(1, r);
          mb.at(0, 1) = 1;
          reads.push_back({2, mb});
        }
      }
      return reads;
    }
    case OpKind::kSoftmax: case OpKind::kLogSoftmax: case OpKind::kCumSum: {
      int64_t axis = n.attrs.i("axis");
      auto a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(r) : axis);
      std::vector<bool> zero(r, false);
      reads.push_back({0, identity_without(r, zero)});
      zero[a] = true;  // the sum along the axis
      reads.push_back({0, identity_without(r, zero)});
      return reads;
    }
    case OpKind::kLayerNormalization: {
      int64_t axis = n.attrs.i("axis");
      auto a = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(in_shape(0).size()) : axis);
      std::vector<bool> zero(in_shape(0).size(), false);
      for (size_t d = a; d < zero.size(); ++d) zero[d] = true;
      if (out_index == 0) {
        identity_all();
        reads.push_back({0, identity_without(r, zero)});
      } else {
        reads.push_back({0, aligned(in_shape(0), out)});
      }
      return reads;
    }
    case OpKind::kBatchNormalization: {
      reads.push_back({0, aligned(in_shape(0), out)});
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        Mat m(1, r);
        m.at(0, 1) = 1;
        reads.push_back({i, m});
      }
      return reads;
    }
    case OpKind::kReduceSum: case OpKind::kReduceMean: case OpKind::kReduceMax: case OpKind::kReduceMin:
    case OpKind::kReduceProd: case OpKind::kReduceL2: case OpKind::kReduceSumSquare: {
      const Shape& x = in_shape(0);
      std::vector<int64_t> axes = n.attrs.ints("axes");
      std::vector<bool> reduced(x.size(), axes.empty());
      for (int64_t ax : axes) reduced[static_cast<size_t>(ax < 0 ? ax + static_cast<int64_t>(x.size()) : ax)] = true;
      bool keep = n.attrs.i("keepdims") != 0;
      Mat m(x.size(), r);
      for (size_t d = 0, o = 0; d < x.size(); ++d) {
        if (!reduced[d]) m.at(d, o) = 1;
        if (!reduced[d] || keep) ++o;
      }
      reads.push_back({0, m});
      return reads;
    }
    case OpKind::kConstantOfShape: case OpKind::kSize:
      return reads;
    default:
      return std::nullopt;
  }
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
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      std::optional<std::vector<Read>> maps = node_maps(g, n, o);
      if (!maps) return std::nullopt;
      LinearReads& out = reads[static_cast<size_t>(n.outputs[o])];
      for (const Read& rd : *maps) {
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
