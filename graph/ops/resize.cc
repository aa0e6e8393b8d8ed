// Resize: ONNX's interpolation (opsets 11-19) in one explicit IR form. The
// importer resolves ONNX's scales/sizes/axes/keep_aspect_ratio_policy inputs
// into two full-rank attributes:
//
//   sizes   the output shape
//   scales  the scale of each axis as the coordinate transform uses it (the
//           given scale, or sizes/in where ONNX derives it from sizes)
//
// plus roi (2 x rank: starts then ends, tf_crop_and_resize only) and ONNX's
// own attributes. Each output coordinate y along a resized axis maps to a
// source coordinate x (coordinate_transformation_mode), and reads input
// elements around x with weights:
//
//   nearest  one element, x rounded by nearest_mode
//   linear   max(0, 1 - |i - x|) over the two neighbours (N-D: one axis at a
//            time, so bilinear, trilinear, ...)
//   cubic    Keys' kernel with coefficient cubic_coeff_a over four neighbours
//   antialias (linear, cubic): when downscaling by s < 1 the kernel is
//            stretched by 1/s and the weights are normalized to sum 1
//
// Neighbours outside the input read the edge element, or are dropped (and the
// weights renormalized) with exclude_outside. With tf_crop_and_resize an
// output whose source coordinate lies outside the input on any axis is
// extrapolation_value. The numbers follow ONNX's reference implementation
// (onnx/reference/ops/op_resize.py): coordinates in double, one axis at a
// time in axis order.
//
// Resize is linear in its data, except with tf_crop_and_resize and a non-zero
// extrapolation_value (affine there).
#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/attr_views.h"
#include "graph/interpreter.h"
#include "graph/ops/resize.h"
#include "graph/number.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"

namespace tessera {
namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Ctm {
  kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfHalfPixelForNn,
  kTfCropAndResize
};
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

struct ResizeSpec {
  Mode mode = Mode::kNearest;
  Ctm ctm = Ctm::kHalfPixel;
  Nearest nearest = Nearest::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
  double extrapolation = 0;
  std::vector<double> scales, roi;
  Shape sizes;
};

template <class E>
E parse_enum(const std::string& what, const std::string& s, std::initializer_list<std::pair<const char*, E>> names) {
  std::string list;
  for (const auto& [name, value] : names) {
    if (s == name) return value;
    list += (list.empty() ? "" : ", ") + std::string(name);
  }
  TESSERA_SHAPE_ERROR("Resize " << what << " '" << s << "' is not one of " << list);
}

ResizeSpec resize_spec(const Node& n) {
  ResizeSpec s;
  s.mode = parse_enum<Mode>("mode", n.attrs.s("mode"),
                            {{"nearest", Mode::kNearest}, {"linear", Mode::kLinear}, {"cubic", Mode::kCubic}});
  s.ctm = parse_enum<Ctm>("coordinate_transformation_mode", n.attrs.s("coordinate_transformation_mode"),
                          {{"half_pixel", Ctm::kHalfPixel},
                           {"half_pixel_symmetric", Ctm::kHalfPixelSymmetric},
                           {"pytorch_half_pixel", Ctm::kPytorchHalfPixel},
                           {"align_corners", Ctm::kAlignCorners},
                           {"asymmetric", Ctm::kAsymmetric},
                           {"tf_half_pixel_for_nn", Ctm::kTfHalfPixelForNn},
                           {"tf_crop_and_resize", Ctm::kTfCropAndResize}});
  s.nearest = parse_enum<Nearest>("nearest_mode", n.attrs.s("nearest_mode"),
                                  {{"round_prefer_floor", Nearest::kRoundPreferFloor},
                                   {"round_prefer_ceil", Nearest::kRoundPreferCeil},
                                   {"floor", Nearest::kFloor},
                                   {"ceil", Nearest::kCeil}});
  s.cubic_a = n.attrs.f("cubic_coeff_a");
  s.exclude_outside = n.attrs.i("exclude_outside") != 0;
  s.antialias = n.attrs.i("antialias") != 0 && s.mode != Mode::kNearest;  // no effect on nearest (ONNX)
  s.extrapolation = n.attrs.f("extrapolation_value");
  s.scales = n.attrs.floats("scales");
  s.roi = n.attrs.floats("roi");
  s.sizes = n.attrs.ints("sizes");
  return s;
}

void check_spec(const ResizeSpec& s, const Shape& in) {
  size_t rank = in.size();
  if (s.scales.size() != rank)
    TESSERA_SHAPE_ERROR("Resize scales has " << s.scales.size() << " values, expected " << rank << " for input "
                                             << shape_str(in));
  if (s.sizes.size() != rank)
    TESSERA_SHAPE_ERROR("Resize sizes has " << s.sizes.size() << " values, expected " << rank << " for input "
                                            << shape_str(in));
  for (size_t d = 0; d < rank; ++d) {
    double scale = s.scales[d];
    if (!(scale > 0) || !std::isfinite(scale))
      TESSERA_SHAPE_ERROR("Resize scales[" << d << "] must be positive and finite, got " << scale);
    if (s.sizes[d] < 0) TESSERA_SHAPE_ERROR("Resize sizes[" << d << "] is negative: " << s.sizes[d]);
    // ONNX sizes are floor(in * scale), or round(in * scale) under a
    // keep_aspect_ratio_policy: in (exact - 1, exact + 0.5].
    double exact = scale * static_cast<double>(in[d]), size = static_cast<double>(s.sizes[d]);
    double tol = 1e-6 * std::max(1.0, exact);
    if (!(size > exact - 1 - tol && size <= exact + 0.5 + tol))
      TESSERA_SHAPE_ERROR("Resize sizes[" << d << "] = " << s.sizes[d] << " does not match scale " << scale
                                          << " of input dim " << in[d]);
  }
  bool crop = s.ctm == Ctm::kTfCropAndResize;
  if (crop ? s.roi.size() != 2 * rank : !s.roi.empty())
    TESSERA_SHAPE_ERROR("Resize roi has " << s.roi.size() << " values, expected " << (crop ? 2 * rank : 0)
                                          << (crop ? " (starts and ends per axis) with tf_crop_and_resize"
                                                   : " without tf_crop_and_resize"));
  for (double r : s.roi)
    if (!std::isfinite(r)) TESSERA_SHAPE_ERROR("Resize roi values must be finite, got " << r);
}

std::vector<TensorType> infer_resize(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  ResizeSpec s = resize_spec(c.node);
  check_spec(s, x.shape);
  shape_numel(s.sizes);  // raises kResource when the product overflows
  return ops::one(x.dtype, s.sizes);
}

// Where output coordinate y of an axis reads the input: source coordinate x
// in input units (ONNX's coordinate_transformation_mode).
double source_coordinate(const ResizeSpec& s, size_t axis, int64_t y, int64_t in, int64_t out) {
  double scale = s.scales[axis], yd = static_cast<double>(y), ind = static_cast<double>(in);
  // ONNX's "length_resized" is scale * in, not the rounded size (they differ
  // when the scale does not divide evenly): so ONNX's reference and backend
  // tests; ONNX Runtime takes the rounded size for align_corners.
  double length = scale * ind;
  switch (s.ctm) {
    case Ctm::kHalfPixel: return (yd + 0.5) / scale - 0.5;
    case Ctm::kHalfPixelSymmetric: {
      double adjustment = static_cast<double>(out) / length;
      double offset = ind / 2 * (1 - adjustment);
      return offset + (yd + 0.5) / scale - 0.5;
    }
    case Ctm::kPytorchHalfPixel: return length > 1 ? (yd + 0.5) / scale - 0.5 : 0.0;
    case Ctm::kAlignCorners: return length == 1 ? 0.0 : yd * (ind - 1) / (length - 1);
    case Ctm::kAsymmetric: return yd / scale;
    case Ctm::kTfHalfPixelForNn: return (yd + 0.5) / scale;
    case Ctm::kTfCropAndResize: {
      size_t rank = s.scales.size();
      double start = s.roi[axis], end = s.roi[rank + axis];
      double x = length == 1 ? (end - start) * (ind - 1) / 2 : yd * (end - start) * (ind - 1) / (length - 1);
      return x + start * (ind - 1);
    }
  }
  return 0;
}

// The input elements one axis reads for each output coordinate: `taps`
// (index, weight) pairs per coordinate, indices already clamped to the input.
struct AxisTaps {
  int64_t taps = 1;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<bool> outside;  // tf_crop_and_resize: the output is extrapolation_value
  bool identity = true;
};

int64_t nearest_index(Nearest mode, double x) {
  double x0 = std::floor(x), r = x - x0;
  if (r == 0) return static_cast<int64_t>(x0);
  bool up = false;
  switch (mode) {
    case Nearest::kRoundPreferFloor: up = r > 0.5; break;
    case Nearest::kRoundPreferCeil: up = r >= 0.5; break;
    case Nearest::kFloor: up = false; break;
    case Nearest::kCeil: up = true; break;
  }
  return static_cast<int64_t>(x0) + (up ? 1 : 0);
}

double cubic_kernel(double a, double x) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

AxisTaps axis_taps(const ResizeSpec& s, size_t axis, int64_t in, int64_t out) {
  AxisTaps t;
  // The kernel's support is 1 (linear) or 2 (cubic) input steps, stretched
  // by 1/scale when antialiasing a downscale: `taps` neighbours from
  // floor(x) + first on.
  double stretch = s.antialias ? std::min(s.scales[axis], 1.0) : 1.0;
  double support = s.mode == Mode::kCubic ? 2.0 : 1.0;
  int64_t first = s.mode == Mode::kNearest ? 0 : static_cast<int64_t>(std::floor(-support / stretch)) + 1;
  t.taps = s.mode == Mode::kNearest ? 1 : 2 - 2 * first;
  t.index.resize(static_cast<size_t>(out * t.taps));
  t.weight.assign(static_cast<size_t>(out * t.taps), 1.0);
  t.outside.assign(static_cast<size_t>(out), false);
  t.identity = in == out;
  for (int64_t y = 0; y < out; ++y) {
    double x = source_coordinate(s, axis, y, in, out);
    if (s.ctm == Ctm::kTfCropAndResize && (x < 0 || x > static_cast<double>(in - 1))) {
      t.outside[y] = true;
      t.identity = false;
    }
    int64_t* idx = &t.index[static_cast<size_t>(y * t.taps)];
    double* w = &t.weight[static_cast<size_t>(y * t.taps)];
    if (s.mode == Mode::kNearest) {
      idx[0] = std::clamp<int64_t>(nearest_index(s.nearest, x), 0, in - 1);
      t.identity = t.identity && idx[0] == y;
      continue;
    }
    // As ONNX: at an integral x the neighbours are taken left of it (x - 1
    // with ratio 1), which matters for antialias and exclude_outside.
    double x0 = std::floor(x);
    if (x0 == x) x0 -= 1;
    double sum = 0;
    for (int64_t j = 0; j < t.taps; ++j) {
      double i = x0 + static_cast<double>(first + j);
      double arg = (i - x) * stretch;
      w[j] = s.mode == Mode::kLinear ? std::clamp(1 - std::fabs(arg), 0.0, 1.0) : cubic_kernel(s.cubic_a, arg);
      if (s.exclude_outside && (i < 0 || i >= static_cast<double>(in))) w[j] = 0;
      idx[j] = std::clamp<int64_t>(static_cast<int64_t>(i), 0, in - 1);
      sum += w[j];
    }
    if ((s.antialias || s.exclude_outside) && sum != 0)
      for (int64_t j = 0; j < t.taps; ++j) w[j] /= sum;
    // Identity along the axis: all weight exactly on element y (the pass is
    // skipped, as ONNX skips it).
    double on_y = 0;
    for (int64_t j = 0; j < t.taps && t.identity; ++j) {
      if (idx[j] == y) on_y += w[j];
      else t.identity = w[j] == 0;
    }
    t.identity = t.identity && on_y == 1;
  }
  return t;
}

// One axis of the separable interpolation: src has shape `shape`, dst the
// same with shape[axis] = out. V is the element type the pass computes in;
// `weight` converts a double weight to it.
template <class V, class W>
std::vector<V> resize_axis(const std::vector<V>& src, Shape& shape, size_t axis, const AxisTaps& t, int64_t out,
                           W weight) {
  int64_t outer = 1, inner = 1, in = shape[axis];
  for (size_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<V> dst(static_cast<size_t>(outer * out * inner), V{});
  std::vector<V> w(t.weight.size());
  if (t.taps > 1)
    for (size_t k = 0; k < w.size(); ++k) w[k] = weight(t.weight[k]);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t y = 0; y < out; ++y) {
      V* d = &dst[static_cast<size_t>((o * out + y) * inner)];
      for (int64_t j = 0; j < t.taps; ++j) {
        size_t k = static_cast<size_t>(y * t.taps + j);
        const V* s = &src[static_cast<size_t>((o * in + t.index[k]) * inner)];
        if (t.taps == 1) std::copy(s, s + inner, d);  // nearest: an exact copy
        else
          for (int64_t i = 0; i < inner; ++i) d[i] += w[k] * s[i];
      }
    }
  shape[axis] = out;
  return dst;
}

// Resizes `data` (in shape `in`) axis by axis; positions that any axis
// extrapolates get `fill`.
template <class V, class W>
std::vector<V> resize_all(std::vector<V> data, const Shape& in, const ResizeSpec& s, V fill, W weight) {
  Shape shape = in;
  std::vector<AxisTaps> taps;
  for (size_t a = 0; a < in.size(); ++a) {
    taps.push_back(axis_taps(s, a, in[a], s.sizes[a]));
    if (!taps.back().identity) data = resize_axis(data, shape, a, taps.back(), s.sizes[a], weight);
  }
  if (s.ctm != Ctm::kTfCropAndResize) return data;
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < static_cast<int64_t>(data.size()); ++i) {
    ops::unravel(i, s.sizes, idx);
    for (size_t a = 0; a < in.size(); ++a)
      if (taps[a].outside[static_cast<size_t>(idx[a])]) {
        data[static_cast<size_t>(i)] = fill;
        break;
      }
  }
  return data;
}

// Integer data: interpolated in double, then rounded half to even and
// saturated to the dtype, as ONNX's saturate_cast.
int64_t saturate(DType t, double v) {
  double lo = 0, hi = 1;
  switch (t) {
    case DType::kI8: lo = -128, hi = 127; break;
    case DType::kU8: lo = 0, hi = 255; break;
    case DType::kI32: lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max(); break;
    case DType::kI64: lo = -0x1p63, hi = 0x1p63 - 1024; break;
    default: break;  // bool
  }
  if (std::isnan(v)) return 0;
  return static_cast<int64_t>(std::clamp(std::nearbyint(v), lo, hi));
}

template <class T>
void eval_resize(const EvalArgs<T>& a) {
  const RefTensor<T>& x = *a.inputs[0];
  RefTensor<T>& out = (*a.outputs)[0];
  ResizeSpec s = resize_spec(a.node);
  const Shape& in = x.type.shape;
  if (out.numel() == 0) return ops::alloc(out);
  if (x.is_num()) {
    out.num = resize_all<T>(x.num, in, s, num_from_double<T>(s.extrapolation),
                            [](double w) { return num_from_double<T>(w); });
  } else if (s.mode == Mode::kNearest) {
    out.ints = resize_all<int64_t>(x.ints, in, s, saturate(x.type.dtype, s.extrapolation), [](double) { return 0; });
  } else {
    std::vector<double> d(x.ints.begin(), x.ints.end());
    d = resize_all<double>(std::move(d), in, s, s.extrapolation, [](double w) { return w; });
    out.ints.resize(d.size());
    for (size_t i = 0; i < d.size(); ++i) out.ints[i] = saturate(x.type.dtype, d[i]);
  }
}

Linearity resize_linearity(const Node& n) {
  bool affine = n.attrs.s("coordinate_transformation_mode") == "tf_crop_and_resize" &&
                n.attrs.f("extrapolation_value") != 0.0;
  return affine ? Linearity{} : Linearity{1u, false};
}

}  // namespace

namespace ops {

std::optional<std::vector<ResizeAxis>> resize_axes(const Node& n, const Shape& in) {
  ResizeSpec s = resize_spec(n);
  check_spec(s, in);
  if (s.ctm == Ctm::kTfCropAndResize) return std::nullopt;
  std::vector<ResizeAxis> axes;
  for (size_t a = 0; a < in.size(); ++a) {
    AxisTaps t = axis_taps(s, a, in[a], s.sizes[a]);
    axes.push_back({in[a], s.sizes[a], t.taps, std::move(t.index), std::move(t.weight), t.identity});
  }
  return axes;
}

}  // namespace ops

namespace {

// An axis whose taps are the identity (same size, each output reads its own
// input element with weight 1) passes through; the others are positional.
DimMap resize_dim_map(const DimMapContext& c) {
  const Shape &x = c.in[0], &out = c.out[0];
  std::optional<std::vector<ops::ResizeAxis>> axes = ops::resize_axes(c.node, x);
  DimMap m;
  Piece p;
  Read r{0, {}, false};
  for (size_t d = 0; d < x.size(); ++d) {
    int f = dims::add_factor(m, out[d]);
    p.dims.push_back(dims::factor(f));
    r.dims.push_back(axes && (*axes)[d].identity ? dims::factor(f) : dims::positional({f}));
  }
  p.reads.push_back(std::move(r));
  m.outputs.push_back({std::move(p)});
  return m;
}

void localize_resize(const DimMapContext&, Attrs& attrs, const std::vector<Shape>&, const std::vector<Shape>& out) {
  attrs.set("sizes", out[0]);
}

// FLOPs: Resize runs one axis at a time: a resized axis costs a
// multiply-add per tap for every element of its pass's output. Taps: 2
// (linear) or 4 (cubic), stretched by 1/scale when antialiasing a
// downscale; nearest only copies.
int64_t resize_flops(const Graph& g, const Node& n) {
  const ResizeAttrs attrs = ResizeAttrs::of(n);
  if (attrs.mode == "nearest") return 0;
  double support = attrs.mode == "cubic" ? 2.0 : 1.0;
  const Shape& in = g.type(n.inputs[0]).shape;
  Shape cur = in;
  int64_t flops = 0;
  for (size_t a = 0; a < in.size(); ++a) {
    if (attrs.scales[a] == 1.0 && attrs.sizes[a] == in[a]) continue;
    double stretch = attrs.antialias != 0 ? std::min(attrs.scales[a], 1.0) : 1.0;
    int64_t taps = 2 * static_cast<int64_t>(std::ceil(support / stretch));
    cur[a] = attrs.sizes[a];
    flops += 2 * taps * shape_numel(cur);
  }
  return flops;
}

}  // namespace

void register_resize_ops(std::vector<OpDef>& defs) {
  OpDef& d = defs[static_cast<int>(OpKind::kResize)];
  d.attrs = ResizeAttrs::schema();
  d.flops = resize_flops;
  d.infer = infer_resize;
  d.linearity = resize_linearity;
  d.dim_map = resize_dim_map;
  d.localize = localize_resize;
  TESSERA_SET_KERNELS(d, eval_resize);
}

}  // namespace tessera
