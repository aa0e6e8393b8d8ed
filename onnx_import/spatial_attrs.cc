#include "onnx_import/spatial_attrs.h"

namespace tessera::onnx_import {
namespace {

std::vector<int64_t> ints_or(NodeImporter& n, const char* name, size_t len, int64_t fill) {
  std::optional<std::vector<int64_t>> v = n.attr_ints(name);
  if (!v) return std::vector<int64_t>(len, fill);
  if (v->size() != len)
    n.fail(ErrorKind::kInvalidGraph, std::string("attribute '") + name + "' has " + std::to_string(v->size()) +
                                         " values, expected " + std::to_string(len));
  return *v;
}

// Padding that makes out = ceil(in / stride) (SAME_UPPER puts the extra
// element at the end, SAME_LOWER at the beginning).
void same_pads(const Shape& x, const std::vector<int64_t>& k, const std::vector<int64_t>& s,
               const std::vector<int64_t>& d, bool upper, std::vector<int64_t>& pads) {
  size_t sp = k.size();
  for (size_t i = 0; i < sp; ++i) {
    int64_t in = x[i + 2];
    int64_t out = (in + s[i] - 1) / s[i];
    int64_t total = std::max<int64_t>(0, (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in);
    int64_t small = total / 2, big = total - small;
    pads[i] = upper ? small : big;
    pads[i + sp] = upper ? big : small;
  }
}

}  // namespace

Attrs resolve_spatial_attrs(NodeImporter& n, OpKind kind) {
  const Shape& x = n.input_type(0).shape;
  int64_t rank = static_cast<int64_t>(x.size());
  if (rank < 3)
    n.fail(ErrorKind::kInvalidGraph, "input " + shape_str(x) + " needs a batch, a channel and at least one spatial dim");
  size_t sp = static_cast<size_t>(rank - 2);
  bool conv = kind == OpKind::kConv || kind == OpKind::kConvTranspose;
  std::vector<int64_t> kernel;
  if (auto k = n.attr_ints("kernel_shape")) {
    kernel = *k;
  } else if (conv) {
    const Shape& w = n.input_type(1).shape;
    if (w.size() != x.size())
      n.fail(ErrorKind::kInvalidGraph, "weight " + shape_str(w) + " and input " + shape_str(x) + " differ in rank");
    kernel.assign(w.begin() + 2, w.end());
  } else {
    n.fail(ErrorKind::kInvalidGraph, "required attribute 'kernel_shape' is missing");
  }
  if (kernel.size() != sp)
    n.fail(ErrorKind::kInvalidGraph, "attribute 'kernel_shape' has " + std::to_string(kernel.size()) +
                                         " values, the input has " + std::to_string(sp) + " spatial dims");
  std::vector<int64_t> strides = ints_or(n, "strides", sp, 1);
  std::vector<int64_t> dilations = ints_or(n, "dilations", sp, 1);
  for (size_t i = 0; i < sp; ++i)
    if (strides[i] <= 0 || dilations[i] <= 0 || kernel[i] <= 0)
      n.fail(ErrorKind::kInvalidGraph, "kernel_shape, strides and dilations must be positive");
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads = ints_or(n, "pads", 2 * sp, 0);
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    n.fail(ErrorKind::kInvalidGraph, "attribute 'auto_pad' has unknown value '" + auto_pad + "'");
  if (auto_pad == "VALID") pads.assign(2 * sp, 0);

  Attrs a;
  if (kind == OpKind::kConvTranspose) {
    std::vector<int64_t> output_padding = ints_or(n, "output_padding", sp, 0);
    std::optional<std::vector<int64_t>> output_shape = n.attr_ints("output_shape");
    if (output_shape && output_shape->size() == static_cast<size_t>(rank))
      output_shape->erase(output_shape->begin(), output_shape->begin() + 2);
    if (output_shape && output_shape->size() != sp)
      n.fail(ErrorKind::kInvalidGraph, "attribute 'output_shape' has " + std::to_string(output_shape->size()) +
                                           " values, expected " + std::to_string(sp));
    bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
    if (output_shape || same) {
      // ONNX's formula: total = stride*(in-1) + output_padding + (k-1)*d + 1 - out.
      for (size_t i = 0; i < sp; ++i) {
        int64_t out = output_shape ? (*output_shape)[i] : x[i + 2] * strides[i];
        int64_t total = strides[i] * (x[i + 2] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1 - out;
        if (total < 0) {
          // The requested output is larger than the natural one: the extra
          // rows lie past the end, which is what output_padding adds.
          output_padding[i] -= total;
          total = 0;
        }
        int64_t half = total / 2;
        bool upper = auto_pad == "SAME_UPPER";
        pads[i] = upper ? half : total - half;
        pads[i + sp] = upper ? total - half : half;
      }
    }
    a.set("output_padding", output_padding);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    same_pads(x, kernel, strides, dilations, auto_pad == "SAME_UPPER", pads);
  }
  a.set("kernel_shape", kernel);
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("dilations", dilations);
  if (conv) a.set("group", n.attr_int("group", 1));
  if (kind == OpKind::kMaxPool || kind == OpKind::kAveragePool) a.set("ceil_mode", n.attr_int("ceil_mode", 0));
  if (kind == OpKind::kAveragePool) a.set("count_include_pad", n.attr_int("count_include_pad", 0));
  return a;
}

}  // namespace tessera::onnx_import
