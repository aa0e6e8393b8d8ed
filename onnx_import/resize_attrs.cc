#include "onnx_import/resize_attrs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "graph/attr_views.h"

namespace tessera::onnx_import {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The resized axes (opset 18's `axes`, all axes before), normalized.
std::vector<int64_t> resized_axes(NodeImporter& n, int64_t rank) {
  std::vector<int64_t> axes;
  std::optional<std::vector<int64_t>> given = n.opset() >= 18 ? n.attr_ints("axes") : std::nullopt;
  if (!given) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    return axes;
  }
  std::set<int64_t> seen;
  for (int64_t a : *given) {
    if (a < -rank || a >= rank)
      n.fail(ErrorKind::kInvalidGraph, "axis " + str(a) + " is out of range for rank " + str(rank));
    int64_t d = a < 0 ? a + rank : a;
    if (!seen.insert(d).second) n.fail(ErrorKind::kInvalidGraph, "axis " + str(a) + " appears twice in 'axes'");
    axes.push_back(d);
  }
  return axes;
}

// An operand that is present and not empty (PyTorch exports write an empty
// constant for the one of scales and sizes they do not use).
bool given(const NodeImporter& n, int i) { return n.has_input(i) && n.input_type(i).numel() > 0; }

std::vector<double> float_operand(const NodeImporter& n, int i, const char* what, size_t want) {
  const Tensor& t = n.const_tensor(i, what);
  if (!is_float(t.dtype()))
    n.fail(ErrorKind::kInvalidGraph,
           std::string("input '") + what + "' must be a float tensor, got " + type_str(t.type()));
  if (static_cast<size_t>(t.numel()) != want)
    n.fail(ErrorKind::kInvalidGraph, std::string("input '") + what + "' has " + str(t.numel()) + " values, expected " +
                                         str(static_cast<int64_t>(want)));
  return t.to_doubles();
}

}  // namespace

Attrs resolve_resize_attrs(NodeImporter& n) {
  if (n.opset() < 11)
    n.fail(ErrorKind::kUnsupported, "Resize at opset " + str(n.opset()) + " (inputs X, scales) is not supported; "
                                    "opsets 11 to 19 are");
  const Shape& in = n.input_type(0).shape;
  int64_t rank = static_cast<int64_t>(in.size());
  Attrs a;
  for (const char* s : {"mode", "coordinate_transformation_mode", "nearest_mode"})
    if (n.has_attr(s)) a.set(s, n.attr_string(s, ""));
  if (n.has_attr("cubic_coeff_a")) a.set("cubic_coeff_a", n.attr_float("cubic_coeff_a", 0));
  if (n.has_attr("exclude_outside")) a.set("exclude_outside", n.attr_int("exclude_outside", 0));
  if (n.has_attr("extrapolation_value")) a.set("extrapolation_value", n.attr_float("extrapolation_value", 0));
  std::string policy = "stretch";
  if (n.opset() >= 18) {
    a.set("antialias", n.attr_int("antialias", 0));
    policy = n.attr_string("keep_aspect_ratio_policy", policy);
  }
  std::vector<int64_t> axes = resized_axes(n, rank);

  bool by_scales = given(n, 2), by_sizes = given(n, 3);
  if (by_scales == by_sizes)
    n.fail(ErrorKind::kInvalidGraph, by_scales ? "only one of the inputs 'scales' and 'sizes' may be given"
                                               : "one of the inputs 'scales' and 'sizes' must be given");
  std::vector<double> scales(static_cast<size_t>(rank), 1.0);
  std::vector<int64_t> sizes(in.begin(), in.end());
  if (by_scales) {
    std::vector<double> v = float_operand(n, 2, "scales", axes.size());
    for (size_t k = 0; k < axes.size(); ++k) {
      if (!(v[k] > 0) || !std::isfinite(v[k]))
        n.fail(ErrorKind::kInvalidGraph, "scales[" + str(static_cast<int64_t>(k)) + "] must be positive, got " +
                                             std::to_string(v[k]));
      size_t d = static_cast<size_t>(axes[k]);
      scales[d] = v[k];
      sizes[d] = static_cast<int64_t>(std::floor(v[k] * static_cast<double>(in[d])));
    }
  } else {
    std::vector<int64_t> v = n.const_ints(3, "sizes");
    if (v.size() != axes.size())
      n.fail(ErrorKind::kInvalidGraph, "input 'sizes' has " + str(static_cast<int64_t>(v.size())) +
                                           " values, expected " + str(static_cast<int64_t>(axes.size())));
    std::vector<double> ratio;
    for (size_t k = 0; k < axes.size(); ++k) {
      int64_t dim = in[static_cast<size_t>(axes[k])];
      if (v[k] < 1 || dim < 1)
        n.fail(ErrorKind::kInvalidGraph, "cannot resize dim " + str(axes[k]) + " of size " + str(dim) + " to " +
                                             str(v[k]));
      ratio.push_back(static_cast<double>(v[k]) / static_cast<double>(dim));
    }
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
      n.fail(ErrorKind::kInvalidGraph,
             "keep_aspect_ratio_policy '" + policy + "' is not one of stretch, not_larger, not_smaller");
    // Under a policy one scale (the smallest or largest) serves every resized
    // axis and the sizes are rounded from it, half up (ONNX's reference).
    double common = policy == "not_larger" ? *std::min_element(ratio.begin(), ratio.end())
                                           : *std::max_element(ratio.begin(), ratio.end());
    for (size_t k = 0; k < axes.size(); ++k) {
      size_t d = static_cast<size_t>(axes[k]);
      scales[d] = policy == "stretch" ? ratio[k] : common;
      sizes[d] = policy == "stretch" ? v[k] : static_cast<int64_t>(common * static_cast<double>(in[d]) + 0.5);
    }
  }
  a.set("scales", scales);
  a.set("sizes", sizes);

  std::string ctm = a.has("coordinate_transformation_mode") ? a.s("coordinate_transformation_mode") : "";
  if (ctm == "tf_crop_and_resize") {
    if (!given(n, 1)) n.fail(ErrorKind::kInvalidGraph, "tf_crop_and_resize needs the input 'roi'");
    std::vector<double> v = float_operand(n, 1, "roi", 2 * axes.size());
    std::vector<double> roi(static_cast<size_t>(rank), 0.0);
    roi.resize(static_cast<size_t>(2 * rank), 1.0);
    for (size_t k = 0; k < axes.size(); ++k) {
      roi[static_cast<size_t>(axes[k])] = v[k];
      roi[static_cast<size_t>(rank + axes[k])] = v[axes.size() + k];
    }
    a.set("roi", roi);
  }
  return a;
}

namespace {

// Sizes, for the resized axes, under which ONNX's keep_aspect_ratio_policy
// picks scale `s` and rounds out exactly `sizes` (opset 18); empty if none.
std::vector<int64_t> aspect_sizes(const Shape& in, const std::vector<int64_t>& sizes, const std::vector<int64_t>& axes,
                                  double s, bool not_larger) {
  auto dim = [&](int64_t a) { return static_cast<double>(in[static_cast<size_t>(a)]); };
  auto size = [&](int64_t a) { return sizes[static_cast<size_t>(a)]; };
  std::vector<int64_t> v;
  double chosen = not_larger ? std::numeric_limits<double>::infinity() : 0;
  for (int64_t a : axes) {
    // The axis that sets the scale gives its size; the others any size whose
    // ratio is on the far side of s (ONNX recomputes their sizes from s).
    double far = not_larger ? std::ceil(s * dim(a)) : std::floor(s * dim(a));
    v.push_back(static_cast<double>(size(a)) / dim(a) == s ? size(a) : static_cast<int64_t>(far));
    if (v.back() < 1) return {};
    double r = static_cast<double>(v.back()) / dim(a);
    chosen = not_larger ? std::min(chosen, r) : std::max(chosen, r);
  }
  if (chosen != s) return {};
  for (int64_t a : axes)
    if (static_cast<int64_t>(s * dim(a) + 0.5) != size(a)) return {};
  return v;
}

}  // namespace

ResizeOnnxForm resize_onnx_form(const Node& n, const Shape& in, int64_t opset) {
  ResizeOnnxForm f;
  const ResizeAttrs attrs = ResizeAttrs::of(n);
  const std::vector<double>& scales = attrs.scales;
  const std::vector<int64_t>& sizes = attrs.sizes;
  f.ctm = attrs.coordinate_transformation_mode;
  f.roi = attrs.roi;
  // sizes when the scales are exactly sizes / input (what ONNX derives from
  // sizes); scales when the sizes are floor(input x scale) (what ONNX
  // derives from scales).
  bool by_sizes = true, by_scales = true, downscales = false;
  std::vector<int64_t> resized;
  for (size_t d = 0; d < in.size(); ++d) {
    double dim = static_cast<double>(in[d]);
    by_sizes = by_sizes && in[d] > 0 && scales[d] == static_cast<double>(sizes[d]) / dim;
    by_scales = by_scales && static_cast<double>(static_cast<float>(scales[d])) == scales[d] &&
                static_cast<int64_t>(std::floor(scales[d] * dim)) == sizes[d];
    downscales = downscales || scales[d] < 1;
    bool cropped = !f.roi.empty() && (f.roi[d] != 0 || f.roi[in.size() + d] != 1);
    if (scales[d] != 1.0 || sizes[d] != in[d] || cropped) resized.push_back(static_cast<int64_t>(d));
  }
  auto need = [&](int64_t version, const std::string& what) {
    f.min_opset = std::max(f.min_opset, version);
    if (opset < version && f.unsupported.empty()) f.unsupported = what;
  };
  if (by_sizes) {
    f.sizes = sizes;
  } else if (by_scales) {
    f.scales = scales;
  } else {
    // A keep_aspect_ratio_policy result: one scale on every resized axis,
    // sizes rounded from it.
    double s = resized.empty() ? 0 : scales[static_cast<size_t>(resized[0])];
    bool one_scale = !resized.empty();
    for (int64_t a : resized) one_scale = one_scale && scales[static_cast<size_t>(a)] == s;
    for (bool not_larger : {true, false}) {
      if (!one_scale || !f.sizes.empty()) break;
      f.sizes = aspect_sizes(in, sizes, resized, s, not_larger);
      if (!f.sizes.empty()) f.policy = not_larger ? "not_larger" : "not_smaller";
    }
    if (f.sizes.empty()) {
      f.unsupported = "Resize whose sizes are neither given, nor floor(input x scales), nor rounded from one scale";
      return f;
    }
    f.axes = resized;
    if (!f.roi.empty()) {  // roi then covers the listed axes only
      std::vector<double> roi;
      for (int64_t a : resized) roi.push_back(f.roi[static_cast<size_t>(a)]);
      for (int64_t a : resized) roi.push_back(f.roi[in.size() + static_cast<size_t>(a)]);
      f.roi = roi;
    }
    need(18, "Resize with a keep_aspect_ratio_policy");
  }
  // half_pixel_symmetric (opset 19) equals half_pixel where every scale
  // gives a whole output size.
  if (f.ctm == "half_pixel_symmetric") {
    if (by_sizes) f.ctm = "half_pixel";
    else need(19, "Resize with half_pixel_symmetric and a fractional output size");
  }
  if (f.ctm == "tf_half_pixel_for_nn") f.unsupported = "Resize with tf_half_pixel_for_nn (opset 11 only)";
  // antialias (opset 18) only changes linear and cubic downscales.
  if (attrs.antialias != 0 && attrs.mode != "nearest" && downscales) {
    f.antialias = true;
    need(18, "Resize with antialias");
  }
  return f;
}

}  // namespace tessera::onnx_import
