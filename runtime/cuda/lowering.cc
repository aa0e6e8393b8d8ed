// Reductions, GEMM batching, window geometry and the host evaluation of the
// descriptors (lowering.h).
#include "runtime/cuda/lowering.h"

#include "graph/halo_rows.h"

#include <algorithm>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/ops/op_util.h"
#include "runtime/cpu/strided_copy.h"

namespace tessera::runtime::cuda {
namespace {

bool device_float(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

// The CPU's block permutation (4-D) as the device copy kernel's descriptor.
CopyDesc block_copy(const Shape& shape, int64_t axis, int64_t n, int64_t elem, bool to_blocks) {
  cpu::StridedCopy c = cpu::block_permutation(shape, axis, n, elem, to_blocks);
  CopyDesc d;
  d.rank = static_cast<int>(c.shape.size());
  for (size_t i = 0; i < c.shape.size(); ++i) {
    d.shape[i] = c.shape[i];
    d.src_strides[i] = c.src_strides[i];
    d.dst_strides[i] = c.dst_strides[i];
    d.numel *= c.shape[i];
  }
  d.elem_bytes = static_cast<int>(elem);
  return d;
}

}  // namespace

std::optional<CollectiveLowering> lower_collective(const Graph& g, const Node& n) {
  if (!op_def(n.kind).is_collective()) return std::nullopt;
  const TensorType& x = g.type(n.inputs[0]);
  const TensorType& y = g.type(n.outputs[0]);
  if (x.rank() > kMaxRank) return std::nullopt;
  int64_t group = CollectiveAttrs::of(n).group_size;
  int64_t elem = static_cast<int64_t>(dtype_size(x.dtype));
  auto axis = [&](int64_t a) { return ops::normalize_axis(a, x.rank()); };
  CollectiveLowering l;
  switch (n.kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter: {
      DType t = x.dtype;
      if (t != DType::kF32 && t != DType::kF64 && t != DType::kF16 && t != DType::kBF16 && t != DType::kI32 &&
          t != DType::kI64)
        return std::nullopt;
      l.widen = t == DType::kF16 || t == DType::kBF16;
      l.count = y.numel();
      if (n.kind == OpKind::kReduceScatter && !cpu::blocks_are_contiguous(x.shape, axis(AxisCollectiveAttrs::of(n).axis)))
        l.pack = block_copy(x.shape, axis(AxisCollectiveAttrs::of(n).axis), group, elem, /*to_blocks=*/true);
      return l;
    }
    case OpKind::kAllGather:
      l.count = x.nbytes();
      if (!cpu::blocks_are_contiguous(y.shape, axis(AxisCollectiveAttrs::of(n).axis)))
        l.unpack = block_copy(y.shape, axis(AxisCollectiveAttrs::of(n).axis), group, elem, /*to_blocks=*/false);
      return l;
    case OpKind::kAllToAll:
      l.count = x.nbytes() / group;
      if (!cpu::blocks_are_contiguous(x.shape, axis(AllToAllAttrs::of(n).split_axis)))
        l.pack = block_copy(x.shape, axis(AllToAllAttrs::of(n).split_axis), group, elem, /*to_blocks=*/true);
      if (!cpu::blocks_are_contiguous(y.shape, axis(AllToAllAttrs::of(n).concat_axis)))
        l.unpack = block_copy(y.shape, axis(AllToAllAttrs::of(n).concat_axis), group, elem, /*to_blocks=*/false);
      return l;
    default: return std::nullopt;
  }
}

namespace {

// Rows [from, from + count) of a [outer, rows, inner] tensor at element
// offset `src_at`, into rows [to, to + count) of a [outer, dst_rows, inner]
// one at `dst_at`: a 3-D strided copy.
CopyPart row_block(size_t src, size_t dst, int64_t outer, int64_t inner, int64_t src_rows, int64_t from,
                   int64_t dst_rows, int64_t to, int64_t count, int64_t src_at, int64_t dst_at, int elem_bytes) {
  CopyPart p;
  p.src = src;
  p.dst = dst;
  CopyDesc& d = p.desc;
  d.rank = 3;
  d.shape[0] = outer;
  d.shape[1] = count;
  d.shape[2] = inner;
  d.src_strides[0] = src_rows * inner;
  d.src_strides[1] = inner;
  d.src_strides[2] = 1;
  d.dst_strides[0] = dst_rows * inner;
  d.dst_strides[1] = inner;
  d.dst_strides[2] = 1;
  d.src_offset = src_at + from * inner;
  d.dst_offset = dst_at + to * inner;
  d.numel = outer * count * inner;
  d.elem_bytes = elem_bytes;
  return p;
}

}  // namespace

std::optional<HaloLowering> lower_halo(const Graph& g, const Node& n) {
  if (n.kind != OpKind::kHaloExchange) return std::nullopt;
  const TensorType& x = g.type(n.inputs[0]);
  if (x.rank() > kMaxRank) return std::nullopt;
  int64_t dim = 0;
  HaloBand band = halo_band_of(g, n, &dim);
  const HaloExchangeAttrs halo = HaloExchangeAttrs::of(n);
  const std::vector<int64_t> &before = halo.before, &after = halo.after;
  auto me = static_cast<size_t>(halo.coordinate);
  int64_t send_prev = me > 0 ? after[me - 1] : 0, send_next = me + 1 < before.size() ? before[me + 1] : 0;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d < dim) outer *= x.shape[static_cast<size_t>(d)];
    if (d > dim) inner *= x.shape[static_cast<size_t>(d)];
  }
  int elem = static_cast<int>(dtype_size(x.dtype));
  int64_t rows = band.rows, total = band.total();
  HaloLowering l;
  l.send_elems = (send_prev + send_next) * outer * inner;
  l.recv_elems = (band.before + band.after) * outer * inner;
  l.send_prev = send_prev * outer * inner * elem;
  l.send_next = send_next * outer * inner * elem;
  l.recv_prev = band.before * outer * inner * elem;
  l.recv_next = band.after * outer * inner * elem;
  if (send_prev > 0) l.pack.push_back(row_block(0, 0, outer, inner, rows, 0, send_prev, 0, send_prev, 0, 0, elem));
  if (send_next > 0)
    l.pack.push_back(row_block(0, 0, outer, inner, rows, rows - send_next, send_next, 0, send_next, 0,
                               send_prev * outer * inner, elem));
  l.unpack.push_back(row_block(0, 0, outer, inner, rows, 0, total, band.before, rows, 0, 0, elem));
  if (band.before > 0)
    l.unpack.push_back(row_block(1, 0, outer, inner, band.before, 0, total, 0, band.before, 0, 0, elem));
  if (band.after > 0)
    l.unpack.push_back(row_block(1, 0, outer, inner, band.after, 0, total, band.before + rows, band.after,
                                 band.before * outer * inner, 0, elem));
  return l;
}

std::optional<ReduceDesc> lower_reduce(const Graph& g, const Node& n) {
  const TensorType& x = g.type(n.inputs[0]);
  if (!device_float(x.dtype) || x.rank() > kMaxRank) return std::nullopt;
  ReduceDesc d;
  d.elem = *elem_of(x.dtype);
  std::vector<int64_t> axes;
  switch (n.kind) {
    case OpKind::kReduceSum: d.code = ReduceCode::kSum; break;
    case OpKind::kReduceMean: d.code = ReduceCode::kMean; break;
    case OpKind::kReduceMax: d.code = ReduceCode::kMax; break;
    case OpKind::kReduceMin: d.code = ReduceCode::kMin; break;
    case OpKind::kReduceProd: d.code = ReduceCode::kProd; break;
    case OpKind::kReduceL2: d.code = ReduceCode::kL2; break;
    case OpKind::kReduceSumSquare: d.code = ReduceCode::kSumSquare; break;
    case OpKind::kGlobalAveragePool: d.code = ReduceCode::kMean; break;
    case OpKind::kGlobalMaxPool: d.code = ReduceCode::kMax; break;
    default: return std::nullopt;
  }
  if (n.kind == OpKind::kGlobalAveragePool || n.kind == OpKind::kGlobalMaxPool) {
    for (int64_t a = 2; a < x.rank(); ++a) axes.push_back(a);
  } else {
    axes = ops::normalize_axes(ReduceAttrs::of(n).axes, x.rank());
    if (axes.empty())
      for (int64_t a = 0; a < x.rank(); ++a) axes.push_back(a);
  }
  auto st = shape_strides(x.shape);
  for (int64_t a = 0; a < x.rank(); ++a) {
    bool reduced = std::find(axes.begin(), axes.end(), a) != axes.end();
    if (reduced) {
      d.red_shape[d.red_rank] = x.shape[a];
      d.red_strides[d.red_rank++] = st[a];
      d.red_numel *= x.shape[a];
    } else {
      d.out_shape[d.out_rank] = x.shape[a];
      d.out_strides[d.out_rank++] = st[a];
      d.out_numel *= x.shape[a];
    }
  }
  return d;
}

std::optional<GatherDesc> lower_gather(const Graph& g, const Node& n) {
  const TensorType& x = g.type(n.inputs[0]);
  const TensorType& idx = g.type(n.inputs[1]);
  if (idx.dtype != DType::kI64 && idx.dtype != DType::kI32) return std::nullopt;
  int64_t axis = ops::normalize_axis(GatherAttrs::of(n).axis, x.rank());
  GatherDesc d;
  d.outer = prod(x.shape, 0, static_cast<size_t>(axis));
  d.axis_dim = x.shape[axis];
  d.inner = prod(x.shape, static_cast<size_t>(axis) + 1, x.shape.size());
  d.num_indices = idx.numel();
  d.numel = d.outer * d.num_indices * d.inner;
  d.elem_bytes = static_cast<int>(dtype_size(x.dtype));
  d.index_elem = idx.dtype == DType::kI64 ? Elem::kI64 : Elem::kI32;
  return d;
}

std::optional<LayerNormDesc> lower_layer_norm(const Graph& g, const Node& n) {
  const TensorType& x = g.type(n.inputs[0]);
  if (!device_float(x.dtype)) return std::nullopt;
  const LayerNormAttrs ln = LayerNormAttrs::of(n);
  int64_t axis = ops::normalize_axis(ln.axis, x.rank());
  LayerNormDesc d;
  d.rows = prod(x.shape, 0, static_cast<size_t>(axis));
  d.cols = prod(x.shape, static_cast<size_t>(axis), x.shape.size());
  d.epsilon = static_cast<float>(ln.epsilon);
  d.elem = *elem_of(x.dtype);
  d.has_bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  // Scale and B must cover the normalized shape (a broadcast one falls back).
  if (g.type(n.inputs[1]).numel() != d.cols || g.type(n.inputs[1]).dtype != x.dtype) return std::nullopt;
  if (d.has_bias && (g.type(n.inputs[2]).numel() != d.cols || g.type(n.inputs[2]).dtype != x.dtype))
    return std::nullopt;
  if (n.outputs.size() > 1) {
    auto stat = elem_of(g.type(n.outputs[1]).dtype);
    if (!stat || !device_float(g.type(n.outputs[1]).dtype)) return std::nullopt;
    d.stat_elem = *stat;
  }
  return d;
}

std::optional<SoftmaxGeometry> lower_softmax(const Graph& g, const Node& n) {
  const TensorType& x = g.type(n.inputs[0]);
  if (x.dtype != DType::kF32 && x.dtype != DType::kF16) return std::nullopt;
  int64_t axis = ops::normalize_axis(SoftmaxAttrs::of(n).axis, x.rank());
  SoftmaxGeometry s;
  s.outer = prod(x.shape, 0, static_cast<size_t>(axis));
  s.axis = x.shape[axis];
  s.inner = prod(x.shape, static_cast<size_t>(axis) + 1, x.shape.size());
  s.log = n.kind == OpKind::kLogSoftmax;
  // cuDNN descriptors take int dimensions.
  if (s.outer > INT32_MAX || s.axis > INT32_MAX || s.inner > INT32_MAX) return std::nullopt;
  return s;
}

// ---- GEMM ----

GemmPlan plan_matmul(const Shape& a, const Shape& b) {
  Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a;
  Shape b2 = b.size() == 1 ? Shape{b[0], 1} : b;
  GemmPlan p;
  p.m = a2[a2.size() - 2];
  p.k = a2[a2.size() - 1];
  p.n = b2[b2.size() - 1];
  TESSERA_CHECK(b2[b2.size() - 2] == p.k, "matmul inner dimensions differ");
  Shape ab(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2);
  size_t r = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), r - ab.size(), 1);
  bb.insert(bb.begin(), r - bb.size(), 1);
  // Per batch dim: size and the element stride of A, B and C (0: broadcast).
  struct Dim {
    int64_t size, sa, sb, sc;
  };
  std::vector<Dim> dims(r);
  int64_t ea = p.m * p.k, eb = p.k * p.n, ec = p.m * p.n;
  for (size_t i = r; i-- > 0;) {
    int64_t size = std::max(ab[i], bb[i]);
    dims[i] = {size, ab[i] == 1 ? 0 : ea, bb[i] == 1 ? 0 : eb, ec};
    ea *= ab[i];
    eb *= bb[i];
    ec *= size;
  }
  // Drop unit dims; merge neighbours that one stride spans on all three.
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (d.size == 1) continue;
    if (!merged.empty()) {
      Dim& o = merged.back();
      if (o.sa == d.sa * d.size && o.sb == d.sb * d.size && o.sc == d.sc * d.size) {
        o = {o.size * d.size, d.sa, d.sb, d.sc};
        continue;
      }
    }
    merged.push_back(d);
  }
  if (!merged.empty()) {
    const Dim& in = merged.back();
    p.batch = in.size;
    p.stride_a = in.sa;
    p.stride_b = in.sb;
    p.stride_c = in.sc;
    merged.pop_back();
  }
  int64_t calls = 1;
  for (const Dim& d : merged) calls *= d.size;
  for (int64_t c = 0; c < calls; ++c) {
    int64_t oa = 0, ob = 0, oc = 0, rem = c;
    for (size_t i = merged.size(); i-- > 0;) {
      int64_t idx = rem % merged[i].size;
      rem /= merged[i].size;
      oa += idx * merged[i].sa;
      ob += idx * merged[i].sb;
      oc += idx * merged[i].sc;
    }
    p.off_a.push_back(oa);
    p.off_b.push_back(ob);
    p.off_c.push_back(oc);
  }
  return p;
}

GemmPlan plan_gemm(const Graph& g, const Node& n) {
  const Shape& a = g.type(n.inputs[0]).shape;
  const Shape& b = g.type(n.inputs[1]).shape;
  GemmPlan p;
  const GemmAttrs attrs = GemmAttrs::of(n);
  p.trans_a = attrs.transA != 0;
  p.trans_b = attrs.transB != 0;
  p.m = p.trans_a ? a[1] : a[0];
  p.k = p.trans_a ? a[0] : a[1];
  p.n = p.trans_b ? b[0] : b[1];
  p.alpha = static_cast<float>(attrs.alpha);
  bool has_c = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  p.beta = has_c ? static_cast<float>(attrs.beta) : 0.0f;
  p.off_a = p.off_b = p.off_c = {0};
  return p;
}

void gemm_on_host(const GemmPlan& p, const float* a, const float* b, float* c) {
  for (size_t call = 0; call < p.off_a.size(); ++call)
    for (int64_t t = 0; t < p.batch; ++t) {
      const float* A = a + p.off_a[call] + t * p.stride_a;
      const float* B = b + p.off_b[call] + t * p.stride_b;
      float* C = c + p.off_c[call] + t * p.stride_c;
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          double s = 0;
          for (int64_t l = 0; l < p.k; ++l)
            s += static_cast<double>(p.trans_a ? A[l * p.m + i] : A[i * p.k + l]) *
                 (p.trans_b ? B[j * p.k + l] : B[l * p.n + j]);
          float prev = p.beta != 0.0f ? C[i * p.n + j] : 0.0f;
          C[i * p.n + j] = static_cast<float>(p.alpha * s) + p.beta * prev;
        }
    }
}

// ---- windows ----

int64_t window_out_size(int64_t in, int64_t k, int64_t stride, int64_t pb, int64_t pe, int64_t dilation) {
  int64_t span = in + pb + pe - dilation * (k - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

std::vector<int> WindowGeometry::cudnn_dims(const std::vector<int64_t>& spatial_dims, int64_t d0, int64_t d1) const {
  std::vector<int> v{static_cast<int>(d0), static_cast<int>(d1)};
  for (int64_t s : spatial_dims) v.push_back(static_cast<int>(s));
  if (spatial == 1) v.push_back(1);
  return v;
}

std::vector<int> WindowGeometry::cudnn_vec(const std::vector<int64_t>& v, int fill) const {
  std::vector<int> out;
  for (int64_t x : v) out.push_back(static_cast<int>(x));
  if (spatial == 1) out.push_back(fill);
  return out;
}

namespace {

WindowGeometry read_window(const Graph& g, const Node& n) {
  const Shape& x = g.type(n.inputs[0]).shape;
  WindowGeometry w;
  w.spatial = static_cast<int>(x.size()) - 2;
  w.n = x[0];
  w.c = x[1];
  w.in.assign(x.begin() + 2, x.end());
  const WindowAttrs window = WindowAttrs::of(n);
  w.kernel = window.kernel_shape;
  w.strides = window.strides;
  w.dilations = window.dilations;
  const auto& pads = window.pads;
  w.pad_begin.assign(pads.begin(), pads.begin() + w.spatial);
  w.pad_end.assign(pads.begin() + w.spatial, pads.end());
  for (int i = 0; i < w.spatial; ++i)
    w.out.push_back(window_out_size(w.in[i], w.kernel[i], w.strides[i], w.pad_begin[i], w.pad_end[i], w.dilations[i]));
  return w;
}

bool int_sized(const WindowGeometry& w) {
  auto small = [](int64_t v) { return v <= INT32_MAX; };
  bool ok = small(w.n) && small(w.c) && small(w.k);
  for (int64_t v : w.in) ok = ok && small(v);
  return ok;
}

}  // namespace

std::optional<WindowGeometry> conv_geometry(const Graph& g, const Node& n) {
  const TensorType& x = g.type(n.inputs[0]);
  if (x.rank() < 3 || x.rank() > 5 || (x.dtype != DType::kF32 && x.dtype != DType::kF16)) return std::nullopt;
  WindowGeometry w = read_window(g, n);
  w.k = g.type(n.inputs[1]).shape[0];
  w.group = ConvAttrs::of(n).group;
  if (!int_sized(w)) return std::nullopt;
  return w;
}

std::optional<WindowGeometry> pool_geometry(const Graph& g, const Node& n) {
  const TensorType& x = g.type(n.inputs[0]);
  if (x.rank() < 3 || x.rank() > 5 || (x.dtype != DType::kF32 && x.dtype != DType::kF16) || n.outputs.size() != 1)
    return std::nullopt;
  WindowGeometry w = read_window(g, n);
  w.k = w.c;
  for (int64_t d : w.dilations)
    if (d != 1) return std::nullopt;
  // cuDNN pools in floor mode with symmetric padding.
  Shape want = g.type(n.outputs[0]).shape;
  if (!w.symmetric() || !int_sized(w) || !std::equal(w.out.begin(), w.out.end(), want.begin() + 2))
    return std::nullopt;
  return w;
}

// ---- host evaluation ----

void ew_on_host(const EwProgram& p, const std::vector<const void*>& in, void* out) {
  for (int64_t o = 0; o < p.numel; ++o) store_elem(p.out_elem, out, o, ew_eval(p, in.data(), o));
}

void copy_on_host(const CopyDesc& d, const void* src, void* dst) {
  for (int64_t i = 0; i < d.numel; ++i) {
    int64_t s, t;
    copy_offsets(d, i, s, t);
    std::memcpy(static_cast<uint8_t*>(dst) + t * d.elem_bytes, static_cast<const uint8_t*>(src) + s * d.elem_bytes,
                static_cast<size_t>(d.elem_bytes));
  }
}

void reduce_on_host(const ReduceDesc& d, const void* in, void* out) {
  for (int64_t o = 0; o < d.out_numel; ++o) store_elem(d.elem, out, o, reduce_one(d, in, o));
}

void gather_on_host(const GatherDesc& d, const void* data, const void* indices, void* out) {
  for (int64_t o = 0; o < d.numel; ++o) {
    int64_t s = gather_source(d, indices, o);
    auto* dst = static_cast<uint8_t*>(out) + o * d.elem_bytes;
    if (s < 0) std::memset(dst, 0, static_cast<size_t>(d.elem_bytes));
    else std::memcpy(dst, static_cast<const uint8_t*>(data) + s * d.elem_bytes, static_cast<size_t>(d.elem_bytes));
  }
}

}  // namespace tessera::runtime::cuda
