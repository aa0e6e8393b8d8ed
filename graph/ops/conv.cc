// Windowed ops of the nn family (ONNX NCHW layout, 1 to 3 spatial dims):
//
//   Conv(X[N,C,d..], W[M,C/group,k..], [B[M]])
//       out = (d + pad_begin + pad_end - dilation*(k-1) - 1) / stride + 1
//   ConvTranspose(X[N,C,d..], W[C,M/group,k..], [B[M]])
//       out = (d-1)*stride - pad_begin - pad_end + dilation*(k-1) + output_padding + 1
//   MaxPool / AveragePool(X) with ceil_mode; a ceil-mode window that would
//       start past the input and its left padding is dropped (ONNX's rule).
//
// Kernels lift every op to 3 spatial dims (missing leading dims have size 1,
// kernel 1, stride 1, no padding), so one loop nest serves 1-D to 3-D. Conv
// is im2col + the blocked product of dense_kernels.h; the others stay naive.
#include <algorithm>

#include "graph/attr_views.h"
#include "graph/interpreter.h"
#include "graph/number.h"
#include "graph/ops/dense_kernels.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"

namespace tessera {
namespace {

constexpr int kMaxSpatial = 3;

// Window attributes, checked against the spatial rank. pads: begins then ends.
struct Window {
  int64_t spatial = 0;
  std::vector<int64_t> kernel, strides, pads, dilations;
};

const std::vector<int64_t>& spatial_attr(const Node& node, const char* name, int64_t want) {
  const std::vector<int64_t>& v = node.attrs.ints(name);
  if (static_cast<int64_t>(v.size()) != want)
    TESSERA_SHAPE_ERROR("attribute '" << name << "' has " << v.size() << " values, expected " << want);
  return v;
}

void require_at_least(const std::vector<int64_t>& v, const char* name, int64_t lo) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < lo) TESSERA_SHAPE_ERROR("attribute '" << name << "'[" << i << "] is " << v[i] << ", must be >= " << lo);
}

Window read_window(const Node& node, int64_t spatial) {
  Window w;
  w.spatial = spatial;
  w.kernel = spatial_attr(node, "kernel_shape", spatial);
  w.strides = spatial_attr(node, "strides", spatial);
  w.pads = spatial_attr(node, "pads", 2 * spatial);
  w.dilations = spatial_attr(node, "dilations", spatial);
  require_at_least(w.kernel, "kernel_shape", 1);
  require_at_least(w.strides, "strides", 1);
  require_at_least(w.pads, "pads", 0);
  require_at_least(w.dilations, "dilations", 1);
  return w;
}

// The spatial rank of an [N, C, d...] input, which must be floating.
int64_t spatial_rank(const TensorType& x, const char* what) {
  if (!is_float(x.dtype)) TESSERA_SHAPE_ERROR(what << " must have a floating dtype, got " << type_str(x));
  if (x.rank() < 3 || x.rank() > 2 + kMaxSpatial)
    TESSERA_SHAPE_ERROR(what << " must be [N, C, d1..dk] with 1 to 3 spatial dims, got " << shape_str(x.shape));
  return x.rank() - 2;
}

// The window geometry of one op call, lifted to 3 spatial dims.
struct Geometry {
  int64_t in[kMaxSpatial], out[kMaxSpatial], k[kMaxSpatial], s[kMaxSpatial];
  int64_t pb[kMaxSpatial], pe[kMaxSpatial], d[kMaxSpatial];
};

Geometry lift(const Window& w, const Shape& x, const Shape& y) {
  Geometry g;
  int64_t off = kMaxSpatial - w.spatial;
  for (int64_t i = 0; i < kMaxSpatial; ++i) {
    bool real = i >= off;
    int64_t j = i - off;
    g.in[i] = real ? x[2 + j] : 1;
    g.out[i] = real ? y[2 + j] : 1;
    g.k[i] = real ? w.kernel[j] : 1;
    g.s[i] = real ? w.strides[j] : 1;
    g.pb[i] = real ? w.pads[j] : 0;
    g.pe[i] = real ? w.pads[w.spatial + j] : 0;
    g.d[i] = real ? w.dilations[j] : 1;
  }
  return g;
}

// Span of a dilated window minus one: the `dilation*(k-1)` of the formulas.
int64_t reach(const Window& w, int64_t i) { return w.dilations[i] * (w.kernel[i] - 1); }

void check_bias(const InferContext& c, int64_t channels, DType dtype) {
  if (!c.has_input(2)) return;
  const TensorType& b = c.inputs[2];
  if (b.dtype != dtype || b.shape != Shape{channels})
    TESSERA_SHAPE_ERROR("bias must be " << dtype_name(dtype) << "[" << channels << "], got " << type_str(b));
}

// Checks shared by Conv and ConvTranspose: W has X's dtype and rank.
void check_weight(const TensorType& x, const TensorType& w, const char* op) {
  if (w.dtype != x.dtype)
    TESSERA_SHAPE_ERROR(op << " weight has dtype " << dtype_name(w.dtype) << ", X has " << dtype_name(x.dtype));
  if (w.rank() != x.rank())
    TESSERA_SHAPE_ERROR(op << " weight " << shape_str(w.shape) << " must have rank " << x.rank() << " like X");
}

// The group count is positive and divides the input channels.
void check_group(int64_t group, int64_t channels) {
  if (group < 1) TESSERA_SHAPE_ERROR("group is " << group << ", must be >= 1");
  if (channels % group != 0) TESSERA_SHAPE_ERROR("group " << group << " does not divide the " << channels
                                                          << " input channels");
}

// kernel_shape[i] agrees with W's spatial dim i.
void check_kernel_dim(const Window& win, const TensorType& w, int64_t i) {
  if (win.kernel[i] != w.shape[2 + i])
    TESSERA_SHAPE_ERROR("kernel_shape[" << i << "] is " << win.kernel[i] << " but W " << shape_str(w.shape)
                                        << " has " << w.shape[2 + i]);
}

std::vector<TensorType> infer_conv(const InferContext& c) {
  const TensorType &x = c.inputs[0], &w = c.inputs[1];
  int64_t spatial = spatial_rank(x, "Conv input X");
  check_weight(x, w, "Conv");
  Window win = read_window(c.node, spatial);
  int64_t group = c.node.attrs.i("group");
  int64_t channels = x.shape[1], maps = w.shape[0];
  check_group(group, channels);
  if (maps % group != 0) TESSERA_SHAPE_ERROR("group " << group << " does not divide the " << maps
                                                      << " output channels of W");
  if (channels != w.shape[1] * group)
    TESSERA_SHAPE_ERROR("X has " << channels << " channels but W " << shape_str(w.shape) << " with group " << group
                                 << " expects " << w.shape[1] * group);
  Shape out{x.shape[0], maps};
  for (int64_t i = 0; i < spatial; ++i) {
    check_kernel_dim(win, w, i);
    int64_t span = x.shape[2 + i] + win.pads[i] + win.pads[spatial + i] - reach(win, i) - 1;
    if (span < 0)
      TESSERA_SHAPE_ERROR("spatial dim " << i << " of size " << x.shape[2 + i]
                                         << " (with padding) is smaller than the dilated kernel "
                                         << reach(win, i) + 1);
    out.push_back(span / win.strides[i] + 1);
  }
  check_bias(c, maps, x.dtype);
  return ops::one(x.dtype, out);
}

// Columns of the im2col matrix per call: bounds its memory (4 MiB in float)
// on large 3-D convolutions.
constexpr int64_t kColumnElements = int64_t{1} << 20;

// Rows [ic, k0, k1, k2] of the im2col matrix of one group, for the output
// lines (o0, o1) numbered [l0, l1): col[row][(l - l0) * out2 + o2] is the
// input tap of that output position, 0 where it falls into the padding.
template <class T>
void im2col(const T* x, const Geometry& g, int64_t cg, int64_t l0, int64_t l1, T* col) {
  int64_t in_area = g.in[0] * g.in[1] * g.in[2], width = g.out[2], cols = (l1 - l0) * width;
  T* dst = col;
  for (int64_t ic = 0; ic < cg; ++ic)
    for (int64_t k0 = 0; k0 < g.k[0]; ++k0)
      for (int64_t k1 = 0; k1 < g.k[1]; ++k1)
        for (int64_t k2 = 0; k2 < g.k[2]; ++k2, dst += cols)
          for (int64_t l = l0; l < l1; ++l) {
            T* line = dst + (l - l0) * width;
            int64_t i0 = l / g.out[1] * g.s[0] - g.pb[0] + k0 * g.d[0];
            int64_t i1 = l % g.out[1] * g.s[1] - g.pb[1] + k1 * g.d[1];
            if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) {
              std::fill(line, line + width, T{});
              continue;
            }
            const T* row = x + ic * in_area + (i0 * g.in[1] + i1) * g.in[2];
            for (int64_t o2 = 0; o2 < width; ++o2) {
              int64_t i2 = o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
              line[o2] = i2 >= 0 && i2 < g.in[2] ? row[i2] : T{};
            }
          }
}

// Y[n, group] += W[group] x im2col(X[n, group]): the reduction runs over
// (ic, k0, k1, k2) in the order of the naive loop nest, so that float results
// keep its summation order (padding taps add an exact zero).
template <class T>
void eval_conv(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  const RefTensor<T>& w = *a.inputs[1];
  const RefTensor<T>* b = a.inputs.size() > 2 ? a.inputs[2] : nullptr;
  RefTensor<T>& y = (*a.outputs)[0];
  ops::alloc(y);
  Window win = read_window(a.node, x.type.rank() - 2);
  Geometry g = lift(win, x.type.shape, y.type.shape);
  int64_t batch = x.type.shape[0], channels = x.type.shape[1], maps = y.type.shape[1];
  int64_t group = a.node.attrs.i("group");
  int64_t cg = channels / group, mg = maps / group;
  int64_t in_area = g.in[0] * g.in[1] * g.in[2], k_area = g.k[0] * g.k[1] * g.k[2];
  int64_t out_area = g.out[0] * g.out[1] * g.out[2], depth = cg * k_area;
  if (b)
    for (int64_t i = 0; i < batch * maps; ++i) std::fill_n(y.num.data() + i * out_area, out_area, b->num[i % maps]);
  bool pointwise = k_area == 1;
  for (int i = 0; i < kMaxSpatial; ++i) pointwise = pointwise && g.s[i] == 1 && g.pb[i] == 0 && g.pe[i] == 0;
  int64_t lines = g.out[0] * g.out[1];
  int64_t chunk = std::clamp<int64_t>(kColumnElements / std::max<int64_t>(1, depth * g.out[2]), 1, lines);
  double macs = static_cast<double>(mg) * depth * out_area;
  ops::for_each_product(batch * group, macs, [&](int64_t item, bool parallel) {
    int64_t n = item / group, grp = item % group;
    const T* src = x.num.data() + (n * channels + grp * cg) * in_area;
    T* dst = y.num.data() + (n * maps + grp * mg) * out_area;
    ops::MatrixView<T> ker{w.num.data() + grp * mg * depth, depth, 1};
    if (pointwise) {
      ops::gemm_accumulate<T>(mg, out_area, depth, ker, {src, in_area, 1}, dst, out_area, parallel);
      return;
    }
    thread_local std::vector<T> col;
    col.resize(static_cast<size_t>(depth * chunk * g.out[2]));
    for (int64_t l0 = 0; l0 < lines; l0 += chunk) {
      int64_t l1 = std::min(lines, l0 + chunk), cols = (l1 - l0) * g.out[2];
      im2col(src, g, cg, l0, l1, col.data());
      ops::gemm_accumulate<T>(mg, cols, depth, ker, {col.data(), cols, 1}, dst + l0 * g.out[2], out_area, parallel);
    }
  });
}

std::vector<TensorType> infer_conv_transpose(const InferContext& c) {
  const TensorType &x = c.inputs[0], &w = c.inputs[1];
  int64_t spatial = spatial_rank(x, "ConvTranspose input X");
  check_weight(x, w, "ConvTranspose");
  Window win = read_window(c.node, spatial);
  const std::vector<int64_t>& extra = spatial_attr(c.node, "output_padding", spatial);
  require_at_least(extra, "output_padding", 0);
  int64_t group = c.node.attrs.i("group");
  int64_t channels = x.shape[1];
  check_group(group, channels);
  if (w.shape[0] != channels)
    TESSERA_SHAPE_ERROR("X has " << channels << " channels but W " << shape_str(w.shape) << " expects "
                                 << w.shape[0]);
  int64_t maps = w.shape[1] * group;
  Shape out{x.shape[0], maps};
  for (int64_t i = 0; i < spatial; ++i) {
    check_kernel_dim(win, w, i);
    if (extra[i] >= win.strides[i] && extra[i] >= win.dilations[i])
      TESSERA_SHAPE_ERROR("output_padding[" << i << "] is " << extra[i] << ", must be smaller than stride "
                                            << win.strides[i] << " or dilation " << win.dilations[i]);
    int64_t size = (x.shape[2 + i] - 1) * win.strides[i] - win.pads[i] - win.pads[spatial + i] + reach(win, i) +
                   extra[i] + 1;
    if (size < 1)
      TESSERA_SHAPE_ERROR("output spatial dim " << i << " would have size " << size << " (pads too large)");
    out.push_back(size);
  }
  check_bias(c, maps, x.dtype);
  return ops::one(x.dtype, out);
}

// Scatter form: each input pixel adds its weighted kernel into the output.
template <class T>
void eval_conv_transpose(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  const RefTensor<T>& w = *a.inputs[1];
  const RefTensor<T>* b = a.inputs.size() > 2 ? a.inputs[2] : nullptr;
  RefTensor<T>& y = (*a.outputs)[0];
  ops::alloc(y);
  Window win = read_window(a.node, x.type.rank() - 2);
  Geometry g = lift(win, x.type.shape, y.type.shape);
  int64_t batch = x.type.shape[0], channels = x.type.shape[1], maps = y.type.shape[1];
  int64_t group = a.node.attrs.i("group");
  int64_t cg = channels / group, mg = maps / group;
  int64_t in_area = g.in[0] * g.in[1] * g.in[2], k_area = g.k[0] * g.k[1] * g.k[2];
  int64_t out_area = g.out[0] * g.out[1] * g.out[2];
  if (b)
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t m = 0; m < maps; ++m)
        for (int64_t i = 0; i < out_area; ++i) y.num[(n * maps + m) * out_area + i] = b->num[m];
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < channels; ++c) {
      int64_t grp = c / cg;
      const T* src = x.num.data() + (n * channels + c) * in_area;
      for (int64_t om = 0; om < mg; ++om) {
        const T* ker = w.num.data() + (c * mg + om) * k_area;
        T* dst = y.num.data() + (n * maps + grp * mg + om) * out_area;
        for (int64_t i0 = 0; i0 < g.in[0]; ++i0)
          for (int64_t i1 = 0; i1 < g.in[1]; ++i1)
            for (int64_t i2 = 0; i2 < g.in[2]; ++i2) {
              T v = src[(i0 * g.in[1] + i1) * g.in[2] + i2];
              for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
                int64_t o0 = i0 * g.s[0] - g.pb[0] + k0 * g.d[0];
                if (o0 < 0 || o0 >= g.out[0]) continue;
                for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
                  int64_t o1 = i1 * g.s[1] - g.pb[1] + k1 * g.d[1];
                  if (o1 < 0 || o1 >= g.out[1]) continue;
                  for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                    int64_t o2 = i2 * g.s[2] - g.pb[2] + k2 * g.d[2];
                    if (o2 < 0 || o2 >= g.out[2]) continue;
                    T& slot = dst[(o0 * g.out[1] + o1) * g.out[2] + o2];
                    slot = slot + v * ker[(k0 * g.k[1] + k1) * g.k[2] + k2];
                  }
                }
              }
            }
      }
    }
}

// Output size of a pooling window along one dim, as ONNX defines it.
int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe, int64_t d, bool ceil_mode) {
  int64_t span = in + pb + pe - d * (k - 1) - 1;
  if (span < 0) return -1;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pb) --out;
  return out;
}

std::vector<TensorType> infer_pool(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  int64_t spatial = spatial_rank(x, "pooling input");
  Window win = read_window(c.node, spatial);
  bool ceil_mode = c.node.attrs.i("ceil_mode") != 0;
  Shape out{x.shape[0], x.shape[1]};
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t in = x.shape[2 + i], s = win.strides[i], pb = win.pads[i], d = win.dilations[i];
    int64_t size = pool_out_size(in, win.kernel[i], s, pb, win.pads[spatial + i], d, ceil_mode);
    if (size < 1)
      TESSERA_SHAPE_ERROR("spatial dim " << i << " of size " << in << " (with padding) is smaller than the window "
                                         << reach(win, i) + 1);
    // A window that sees only padding has no defined max or average.
    for (int64_t o = 0; o < size; ++o) {
      bool hit = false;
      for (int64_t k = 0; k < win.kernel[i] && !hit; ++k) {
        int64_t pos = o * s - pb + k * d;
        hit = pos >= 0 && pos < in;
      }
      if (!hit) TESSERA_SHAPE_ERROR("pooling window " << o << " along spatial dim " << i << " covers only padding");
    }
    out.push_back(size);
  }
  return ops::one(x.dtype, out);
}

template <class T, bool kMax>
void eval_pool(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  RefTensor<T>& y = (*a.outputs)[0];
  ops::alloc(y);
  Window win = read_window(a.node, x.type.rank() - 2);
  Geometry g = lift(win, x.type.shape, y.type.shape);
  bool include_pad = !kMax && a.node.attrs.i("count_include_pad") != 0;
  int64_t planes = x.type.shape[0] * x.type.shape[1];
  int64_t in_area = g.in[0] * g.in[1] * g.in[2], out_area = g.out[0] * g.out[1] * g.out[2];
  // Per dim, whether a tap position is inside the input, and inside input plus
  // its explicit padding (ceil-mode windows may reach beyond both).
  auto inside = [&](int dim, int64_t pos) { return pos >= 0 && pos < g.in[dim]; };
  auto padded = [&](int dim, int64_t pos) { return pos >= -g.pb[dim] && pos < g.in[dim] + g.pe[dim]; };
  for (int64_t p = 0; p < planes; ++p) {
    const T* src = x.num.data() + p * in_area;
    T* dst = y.num.data() + p * out_area;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          T acc{};
          bool first = true;
          int64_t count[kMaxSpatial] = {0, 0, 0}, padded_count[kMaxSpatial] = {0, 0, 0};
          const int64_t o[kMaxSpatial] = {o0, o1, o2};
          for (int dim = 0; dim < kMaxSpatial; ++dim)
            for (int64_t k = 0; k < g.k[dim]; ++k) {
              int64_t pos = o[dim] * g.s[dim] - g.pb[dim] + k * g.d[dim];
              count[dim] += inside(dim, pos);
              padded_count[dim] += padded(dim, pos);
            }
          for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
            int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
            if (!inside(0, i0)) continue;
            for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
              int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
              if (!inside(1, i1)) continue;
              for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                int64_t i2 = o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
                if (!inside(2, i2)) continue;
                T v = src[(i0 * g.in[1] + i1) * g.in[2] + i2];
                if constexpr (kMax) {
                  if (first || num_less(acc, v)) acc = v;
                } else {
                  acc = acc + v;
                }
                first = false;
              }
            }
          }
          TESSERA_CHECK(!first, "pooling window without input taps passed shape inference");
          if constexpr (!kMax) {
            const int64_t* n = include_pad ? padded_count : count;
            acc = num_div(acc, num_from_int<T>(n[0] * n[1] * n[2]));
          }
          dst[(o0 * g.out[1] + o1) * g.out[2] + o2] = acc;
        }
  }
}

template <class T>
void eval_max_pool(const EvalArgs<T>& a) { eval_pool<T, true>(a); }
template <class T>
void eval_average_pool(const EvalArgs<T>& a) { eval_pool<T, false>(a); }

// Dim maps. A window read along a spatial dim is s·o + d·t - p, guarded
// (the taps that fall into the padding read zero).
DimExpr window_dim(int o, int t, int64_t stride, int64_t dilation, int64_t pad) {
  return dims::affine({{o, stride}, {t, dilation}}, -pad, true);
}

// out [n, g·Mg + m, o..] = Σ_{c, t..} x[n, g·Cg + c, s·o + d·t - p ..] · w[g·Mg + m, c, t..] + b[g·Mg + m]
DimMap conv_dim_map(const DimMapContext& c) {
  const Shape &x = c.in[0], &w = c.in[1], &out = c.out[0];
  const Node& n = c.node;
  int64_t group = n.attrs.i("group");
  const auto& st = n.attrs.ints("strides");
  const auto& pads = n.attrs.ints("pads");
  const auto& dil = n.attrs.ints("dilations");
  DimMap m;
  int fn = dims::add_factor(m, x[0]), fg = dims::add_factor(m, group), fm = dims::add_factor(m, w[0] / group);
  int fc = dims::add_factor(m, w[1], FactorKind::kSum);
  std::vector<DimExpr> od{dims::factor(fn), dims::merge(m, {fg, fm})};
  std::vector<DimExpr> xd{dims::factor(fn), dims::merge(m, {fg, fc})};
  std::vector<DimExpr> wd{dims::merge(m, {fg, fm}), dims::factor(fc)};
  for (size_t i = 2; i < x.size(); ++i) {
    int fo = dims::add_factor(m, out[i]), ft = dims::add_factor(m, w[i], FactorKind::kSum);
    od.push_back(dims::factor(fo));
    xd.push_back(window_dim(fo, ft, st[i - 2], dil[i - 2], pads[i - 2]));
    wd.push_back(dims::factor(ft));
  }
  Piece p{od, {{0, xd, false}, {1, wd, false}}};
  if (c.has_input(2)) p.reads.push_back({2, {dims::merge(m, {fg, fm})}, true});
  m.outputs.push_back({std::move(p)});
  m.products = true;
  return m;
}

// out [n, g·Mg + m, o..] = Σ_{c, t..: i·s + t·d - p = o} x[n, g·Cg + c, i..] · w[g·Cg + c, m, t..] + b:
// the input position is no affine function of the output's, so the spatial
// dims are positional.
DimMap conv_transpose_dim_map(const DimMapContext& c) {
  const Shape &x = c.in[0], &w = c.in[1], &out = c.out[0];
  int64_t group = c.node.attrs.i("group");
  DimMap m;
  int fn = dims::add_factor(m, x[0]), fg = dims::add_factor(m, group), fm = dims::add_factor(m, w[1]);
  int fc = dims::add_factor(m, x[1] / group, FactorKind::kSum);
  std::vector<DimExpr> od{dims::factor(fn), dims::merge(m, {fg, fm})};
  std::vector<DimExpr> xd{dims::factor(fn), dims::merge(m, {fg, fc})};
  std::vector<DimExpr> wd{dims::merge(m, {fg, fc}), dims::factor(fm)};
  for (size_t i = 2; i < x.size(); ++i) {
    int fo = dims::add_factor(m, out[i]);
    od.push_back(dims::factor(fo));
    xd.push_back(dims::positional({fo}));
    wd.push_back(dims::positional({fo}));
  }
  Piece p{od, {{0, xd, false}, {1, wd, false}}};
  if (c.has_input(2)) p.reads.push_back({2, {dims::merge(m, {fg, fm})}, true});
  m.outputs.push_back({std::move(p)});
  return m;
}

// out [n, c, o..] = max (mean) over t.. of x[n, c, s·o + d·t - p ..].
DimMap pool_dim_map(const DimMapContext& c) {
  const Shape &x = c.in[0], &out = c.out[0];
  const Node& n = c.node;
  const auto& st = n.attrs.ints("strides");
  const auto& pads = n.attrs.ints("pads");
  const auto& dil = n.attrs.ints("dilations");
  const auto& k = n.attrs.ints("kernel_shape");
  FactorKind kind = n.kind == OpKind::kAveragePool ? FactorKind::kMean : FactorKind::kReduce;
  bool counts_padding = n.kind == OpKind::kAveragePool && n.attrs.i("count_include_pad") != 0;
  size_t spatial = x.size() - 2;
  DimMap m;
  int fn = dims::add_factor(m, x[0]), fc = dims::add_factor(m, x[1]);
  std::vector<DimExpr> od{dims::factor(fn), dims::factor(fc)}, xd = od;
  for (size_t i = 2; i < x.size(); ++i) {
    int fo = dims::add_factor(m, out[i]), ft = dims::add_factor(m, k[i - 2], kind);
    od.push_back(dims::factor(fo));
    xd.push_back(window_dim(fo, ft, st[i - 2], dil[i - 2], pads[i - 2]));
    // Counting the padding, the divisor is the taps inside the padded input.
    if (counts_padding) xd.back().edges = {-pads[i - 2], x[i] + pads[spatial + i - 2]};
  }
  m.outputs.push_back({Piece{od, {{0, xd, false}}}});
  return m;
}

// A rank's convolution holds its share of the groups. W's dim 1 is whole
// per group (Conv: the input channels of a group; ConvTranspose: the output
// channels), so the local group count is the local channels over it.
void localize_group(const DimMapContext& g, Attrs& attrs, const std::vector<Shape>& local_in,
                    const std::vector<Shape>& local_out) {
  int64_t channels = g.node.kind == OpKind::kConv ? local_in[0][1] : local_out[0][1];
  if (local_in[1][1] > 0) attrs.set("group", channels / local_in[1][1]);
}

bool has_bias(const Node& n) { return n.inputs.size() > 2 && n.inputs[2] != kNoValue; }
Linearity conv_linearity(const Node& n) { return has_bias(n) ? Linearity{} : Linearity{0b11u, true}; }

// FLOPs: a Conv output element is a dot product over (C_in / group) x
// prod(kernel); a ConvTranspose input element scatters into (C_out / group)
// x prod(kernel) outputs; a bias adds one per output element; a pool reads
// its window once per output element.
int64_t bias_flops(const Graph& g, const Node& n) {
  bool bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  return bias ? g.type(n.outputs[0]).numel() : 0;
}
int64_t weight_taps(const Graph& g, const Node& n) {
  const Shape& w = g.type(n.inputs[1]).shape;
  int64_t p = 1;
  for (size_t i = 1; i < w.size(); ++i) p *= w[i];
  return p;
}
int64_t conv_flops(const Graph& g, const Node& n) {
  return 2 * g.type(n.outputs[0]).numel() * weight_taps(g, n) + bias_flops(g, n);
}
int64_t conv_transpose_flops(const Graph& g, const Node& n) {
  return 2 * g.type(n.inputs[0]).numel() * weight_taps(g, n) + bias_flops(g, n);
}
int64_t pool_flops(const Graph& g, const Node& n) {
  int64_t window = 1;
  for (int64_t k : WindowAttrs::of(n).kernel_shape) window *= k;
  return g.type(n.outputs[0]).numel() * window;
}

}  // namespace

void register_conv_ops(std::vector<OpDef>& defs) {
  auto def = [&](OpKind k) -> OpDef& { return defs[static_cast<int>(k)]; };

  OpDef& conv = def(OpKind::kConv);
  conv.min_inputs = 2;
  conv.max_inputs = 3;
  conv.attrs = ConvAttrs::schema();
  conv.flops = conv_flops;
  conv.infer = infer_conv;
  conv.dim_map = conv_dim_map;
  conv.localize = localize_group;
  TESSERA_SET_KERNELS(conv, eval_conv);
  conv.linearity = conv_linearity;

  OpDef& convt = def(OpKind::kConvTranspose);
  convt.min_inputs = 2;
  convt.max_inputs = 3;
  convt.attrs = ConvTransposeAttrs::schema();
  convt.flops = conv_transpose_flops;
  convt.infer = infer_conv_transpose;
  convt.dim_map = conv_transpose_dim_map;
  convt.localize = localize_group;
  TESSERA_SET_KERNELS(convt, eval_conv_transpose);
  convt.linearity = conv_linearity;

  OpDef& maxp = def(OpKind::kMaxPool);
  maxp.attrs = MaxPoolAttrs::schema();
  maxp.orders_values = true;
  maxp.flops = pool_flops;
  maxp.infer = infer_pool;
  maxp.dim_map = pool_dim_map;
  TESSERA_SET_KERNELS(maxp, eval_max_pool);

  OpDef& avgp = def(OpKind::kAveragePool);
  avgp.attrs = AveragePoolAttrs::schema();
  avgp.flops = pool_flops;
  avgp.infer = infer_pool;
  avgp.dim_map = pool_dim_map;
  TESSERA_SET_KERNELS(avgp, eval_average_pool);
  avgp.linearity = ops::linear_in_input0;
}

}  // namespace tessera
