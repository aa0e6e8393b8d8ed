// Per-op conversion of ONNX nodes to IR nodes. ONNX moved many attributes to
// inputs over the opsets (axes, pads, shapes, split sizes); the IR keeps them
// as attributes, so those inputs must be constants once folding has run.
// Ops whose ONNX form equals the IR form go through convert_generic.
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>

#include "onnx_import/node_importer.h"
#include "onnx_import/resize_attrs.h"
#include "onnx_import/spatial_attrs.h"
#include "onnx_import/tensor_proto.h"

namespace tessera::onnx_import {
namespace {

using Converter = std::function<void(NodeImporter&)>;

std::vector<ValueId> all_inputs(const NodeImporter& n) {
  std::vector<ValueId> ins;
  for (int i = 0; i < n.num_inputs(); ++i) ins.push_back(n.input_or_none(i));
  while (!ins.empty() && ins.back() == kNoValue) ins.pop_back();
  return ins;
}

int64_t axis_in(const NodeImporter& n, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    n.fail(ErrorKind::kInvalidGraph, std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
                                         std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

void convert_generic(NodeImporter& n, OpKind kind) {
  Attrs attrs;
  n.copy_schema_attrs(kind, attrs);
  n.emit_outputs(kind, all_inputs(n), std::move(attrs));
}

// Max/Min/Sum/Mean take any number of inputs in ONNX; the IR's are binary.
void convert_variadic(NodeImporter& n, OpKind kind, bool mean) {
  std::vector<ValueId> ins = all_inputs(n);
  if (ins.empty()) n.fail(ErrorKind::kInvalidGraph, "needs at least one input");
  if (ins.size() == 1 && !mean) return n.bind_output(0, ins[0]);
  ValueId acc = ins[0];
  size_t last_binary = mean ? ins.size() : ins.size() - 1;
  for (size_t i = 1; i < ins.size(); ++i) {
    if (i == last_binary) return n.emit_outputs(kind, {acc, ins[i]});
    acc = n.emit_temp(kind, {acc, ins[i]});
  }
  DType dt = n.graph().type(acc).dtype;
  ValueId count = n.add_constant(Tensor::from_doubles(dt, {}, {static_cast<double>(ins.size())}));
  n.emit_outputs(OpKind::kDiv, {acc, count});
}

void convert_constant(NodeImporter& n) {
  std::optional<Tensor> t = n.attr_tensor("value");
  if (!t && n.has_attr("value_float")) t = Tensor::scalar_f32(static_cast<float>(n.attr_float("value_float", 0)));
  if (!t && n.has_attr("value_int")) t = Tensor::from_ints(DType::kI64, {}, {n.attr_int("value_int", 0)});
  if (!t && n.has_attr("value_floats")) {
    std::vector<double> v = *n.attr_floats("value_floats");
    t = Tensor::from_doubles(DType::kF32, {static_cast<int64_t>(v.size())}, v);
  }
  if (!t && n.has_attr("value_ints")) t = Tensor::vector_i64(*n.attr_ints("value_ints"));
  if (!t) {
    for (const char* s : {"sparse_value", "value_string", "value_strings"})
      if (n.has_attr(s)) n.fail(ErrorKind::kUnsupported, std::string("Constant with attribute '") + s + "' is not supported");
    n.fail(ErrorKind::kInvalidGraph, "Constant has no value attribute");
  }
  n.bind_output(0, n.graph().add_constant(n.proto().output(0), std::move(*t)));
}

void convert_dropout(NodeImporter& n, const ImportState& state) {
  for (const onnx::AttributeProto& a : n.proto().attribute()) n.ignore_attr(a.name());  // ratio, seed, is_test
  // A training_mode input that is not a constant false may switch on the
  // random mask at run time, which the inference IR cannot express, unless
  // the ratio is a constant 0: then the mask keeps every element whatever
  // the mode (torchvision's Swin-T exports Dropout(p=0) with
  // training_mode=true).
  const bool zero_ratio =
      n.has_input(1) && n.constant(1) && n.constant(1)->numel() == 1 && n.constant(1)->get_double(0) == 0.0;
  if (!zero_ratio && n.has_input(2) && (!n.constant(2) || n.constant(2)->numel() != 1 || n.constant(2)->get_int(0) != 0))
    n.fail(ErrorKind::kUnsupported, "Dropout with training_mode not a constant false is not supported");
  n.bind_output(0, n.input(0));
  // In inference the mask keeps every element: a constant all-true tensor.
  if (n.proto().output_size() > 1 && !n.proto().output(1).empty() && state.read_names.count(n.proto().output(1))) {
    Tensor mask(DType::kBool, n.input_type(0).shape);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.set_int(i, 1);
    n.bind_output(1, n.graph().add_constant(n.proto().output(1), std::move(mask)));
  }
}

void convert_cast(NodeImporter& n) {
  int64_t to = n.attr_int("to", -1);
  n.ignore_attr("saturate");  // only affects float8 targets, which are refused below
  DType dt;
  try {
    dt = dtype_from_onnx(static_cast<int>(to));
  } catch (const Error& e) {
    n.fail(ErrorKind::kUnsupported, "Cast to " + e.message() + " (output '" + n.proto().output(0) + "')");
  }
  Attrs a;
  a.set("to", std::string(dtype_name(dt)));
  n.emit_outputs(OpKind::kCast, {n.input(0)}, std::move(a));
}

// CastLike(x, like) = Cast(x, to = like's dtype); `like` contributes only its type.
void convert_cast_like(NodeImporter& n) {
  n.ignore_attr("saturate");
  Attrs a;
  a.set("to", std::string(dtype_name(n.input_type(1).dtype)));
  n.emit_outputs(OpKind::kCast, {n.input(0)}, std::move(a));
}

void convert_clip(NodeImporter& n) {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (n.opset() < 11) {
    lo = n.attr_float("min", lo);
    hi = n.attr_float("max", hi);
  } else {
    if (n.has_input(1)) lo = n.const_scalar(1, "min");
    if (n.has_input(2)) hi = n.const_scalar(2, "max");
  }
  Attrs a;
  a.set("min", lo);
  a.set("max", hi);
  n.emit_outputs(OpKind::kClip, {n.input(0)}, std::move(a));
}

void convert_reduce(NodeImporter& n, OpKind kind) {
  bool axes_as_input = kind == OpKind::kReduceSum ? n.opset() >= 13 : n.opset() >= 18;
  std::vector<int64_t> axes;
  if (axes_as_input) {
    if (n.has_input(1)) axes = n.const_ints(1, "axes");
  } else if (auto a = n.attr_ints("axes")) {
    axes = *a;
  }
  int64_t keepdims = n.attr_int("keepdims", 1);
  if (n.attr_int("noop_with_empty_axes", 0) != 0 && axes.empty()) return n.bind_output(0, n.input(0));
  Attrs a;
  a.set("axes", axes);
  a.set("keepdims", keepdims);
  n.emit_outputs(kind, {n.input(0)}, std::move(a));
}

void convert_softmax(NodeImporter& n, OpKind kind) {
  int64_t rank = n.input_type(0).rank();
  int64_t axis = n.attr_int("axis", n.opset() < 13 ? 1 : -1);
  if (n.opset() < 13) {
    // Before opset 13 the op flattened the input to 2-D at `axis`; that equals
    // the opset-13 meaning only when axis is the last dim.
    if (axis_in(n, axis, rank, "axis") != rank - 1)
      n.fail(ErrorKind::kUnsupported, op_name(kind) + std::string(" with axis ") + std::to_string(axis) +
                                          " at opset " + std::to_string(n.opset()) +
                                          " (coerced to 2-D) is only supported on the last dim");
  }
  Attrs a;
  a.set("axis", axis);
  n.emit_outputs(kind, {n.input(0)}, std::move(a));
}

void convert_batch_norm(NodeImporter& n) {
  if (n.attr_int("training_mode", 0) != 0)
    n.fail(ErrorKind::kUnsupported, "BatchNormalization with training_mode=1 is not supported");
  if (n.has_attr("spatial") && n.attr_int("spatial", 1) != 1)
    n.fail(ErrorKind::kUnsupported, "BatchNormalization with spatial=0 is not supported");
  n.ignore_attr("is_test");
  n.ignore_attr("consumed_inputs");
  for (int i = 1; i < n.proto().output_size(); ++i)
    if (!n.proto().output(i).empty())
      n.fail(ErrorKind::kUnsupported, "BatchNormalization training outputs (running mean/var) are not supported");
  Attrs a;
  n.copy_schema_attrs(OpKind::kBatchNormalization, a);
  n.emit_outputs(OpKind::kBatchNormalization, all_inputs(n), std::move(a));
}

void convert_reshape(NodeImporter& n) {
  const Shape& in = n.input_type(0).shape;
  std::vector<int64_t> shape = n.const_ints(1, "shape");
  bool allowzero = n.attr_int("allowzero", 0) != 0;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowzero) {
      if (i >= in.size())
        n.fail(ErrorKind::kInvalidGraph, "shape[" + std::to_string(i) + "] = 0 copies a dim the input " +
                                             shape_str(in) + " does not have");
      shape[i] = in[i];
    }
    if (shape[i] == -1) {
      if (infer_at >= 0) n.fail(ErrorKind::kInvalidGraph, "shape has more than one -1");
      infer_at = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      n.fail(ErrorKind::kInvalidGraph, "shape[" + std::to_string(i) + "] = " + std::to_string(shape[i]) + " is negative");
    } else {
      // Checked, not wrapped (signed overflow; found by fuzz/onnx_import_fuzz).
      if (shape[i] != 0 && known > INT64_MAX / shape[i])
        n.fail(ErrorKind::kInvalidGraph, "shape's dims multiply past 2^63 (shape[" + std::to_string(i) +
                                             "] = " + std::to_string(shape[i]) + ")");
      known *= shape[i];
    }
  }
  int64_t numel = shape_numel(in);
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0)
      n.fail(ErrorKind::kInvalidGraph, "cannot reshape " + shape_str(in) + " to a shape with known dims of product " +
                                           std::to_string(known));
    shape[infer_at] = numel / known;
  }
  Attrs a;
  a.set("shape", shape);
  n.emit_outputs(OpKind::kReshape, {n.input(0)}, std::move(a));
}

void convert_squeeze(NodeImporter& n) {
  const Shape& in = n.input_type(0).shape;
  int64_t rank = static_cast<int64_t>(in.size());
  std::optional<std::vector<int64_t>> axes;
  if (n.opset() >= 13) {
    if (n.has_input(1)) axes = n.const_ints(1, "axes");
  } else {
    axes = n.attr_ints("axes");
  }
  std::vector<int64_t> explicit_axes;
  if (axes) {
    for (int64_t ax : *axes) explicit_axes.push_back(axis_in(n, ax, rank, "axis"));
  } else {
    for (int64_t d = 0; d < rank; ++d)
      if (in[d] == 1) explicit_axes.push_back(d);
  }
  Attrs a;
  a.set("axes", explicit_axes);
  n.emit_outputs(OpKind::kSqueeze, {n.input(0)}, std::move(a));
}

void convert_unsqueeze(NodeImporter& n) {
  std::vector<int64_t> axes;
  if (n.opset() >= 13) axes = n.const_ints(1, "axes");
  else if (auto a = n.attr_ints("axes")) axes = *a;
  else n.fail(ErrorKind::kInvalidGraph, "required attribute 'axes' is missing");
  int64_t out_rank = n.input_type(0).rank() + static_cast<int64_t>(axes.size());
  for (int64_t& ax : axes) ax = axis_in(n, ax, out_rank, "axis");
  Attrs a;
  a.set("axes", axes);
  n.emit_outputs(OpKind::kUnsqueeze, {n.input(0)}, std::move(a));
}

void convert_split(NodeImporter& n) {
  const Shape& in = n.input_type(0).shape;
  int64_t axis = n.attr_int("axis", 0);
  int64_t dim = in[axis_in(n, axis, static_cast<int64_t>(in.size()), "axis")];
  std::optional<std::vector<int64_t>> split;
  if (n.opset() >= 13) {
    if (n.has_input(1)) split = n.const_ints(1, "split");
  } else {
    split = n.attr_ints("split");
  }
  int64_t num_outputs = n.opset() >= 18 ? n.attr_int("num_outputs", 0) : 0;
  // The parts and the node's outputs are one list (ONNX's shape inference
  // refuses a mismatch), checked before a part or an output is made.
  auto parts_mismatch = [&](int64_t parts) {
    n.fail(ErrorKind::kInvalidGraph, "Split makes " + std::to_string(parts) + " parts but the node has " +
                                         std::to_string(n.proto().output_size()) + " outputs");
  };
  if (num_outputs > 0 && num_outputs != n.proto().output_size()) parts_mismatch(num_outputs);
  if (!split) {
    int64_t parts = num_outputs > 0 ? num_outputs : n.proto().output_size();
    if (parts <= 0) n.fail(ErrorKind::kInvalidGraph, "Split has no outputs");
    split.emplace();
    if (num_outputs > 0) {
      // Opset 18: chunks of ceil(dim / n), the last one smaller.
      int64_t chunk = (dim + parts - 1) / parts;
      for (int64_t k = 0, left = dim; k < parts; ++k, left -= chunk) split->push_back(std::max<int64_t>(0, std::min(chunk, left)));
    } else {
      if (dim % parts != 0)
        n.fail(ErrorKind::kInvalidGraph, "dim " + std::to_string(dim) + " cannot be split into " +
                                             std::to_string(parts) + " equal parts");
      split->assign(static_cast<size_t>(parts), dim / parts);
    }
  }
  if (static_cast<int64_t>(split->size()) != n.proto().output_size()) parts_mismatch(static_cast<int64_t>(split->size()));
  Attrs a;
  a.set("axis", axis);
  a.set("split", *split);
  n.emit_outputs(OpKind::kSplit, {n.input(0)}, std::move(a));
}

void convert_slice(NodeImporter& n) {
  std::vector<int64_t> starts, ends, axes, steps;
  bool have_axes = false, have_steps = false;
  if (n.opset() < 10) {
    auto s = n.attr_ints("starts"), e = n.attr_ints("ends");
    if (!s || !e) n.fail(ErrorKind::kInvalidGraph, "attributes 'starts' and 'ends' are required");
    starts = *s;
    ends = *e;
    if (auto a = n.attr_ints("axes")) axes = *a, have_axes = true;
  } else {
    starts = n.const_ints(1, "starts");
    ends = n.const_ints(2, "ends");
    if (n.has_input(3)) axes = n.const_ints(3, "axes"), have_axes = true;
    if (n.has_input(4)) steps = n.const_ints(4, "steps"), have_steps = true;
  }
  if (!have_axes)
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (!have_steps) steps.assign(starts.size(), 1);
  Attrs a;
  a.set("starts", starts);
  a.set("ends", ends);
  a.set("axes", axes);
  a.set("steps", steps);
  n.emit_outputs(OpKind::kSlice, {n.input(0)}, std::move(a));
}

void convert_pad(NodeImporter& n) {
  int64_t rank = n.input_type(0).rank();
  std::string mode = n.attr_string("mode", "constant");
  std::vector<int64_t> pads;
  double value = 0;
  if (n.opset() < 11) {
    if (auto p = n.attr_ints("pads")) pads = *p;
    else n.fail(ErrorKind::kInvalidGraph, "required attribute 'pads' is missing");
    value = n.attr_float("value", 0);
  } else {
    pads = n.const_ints(1, "pads");
    if (n.has_input(2)) value = n.const_scalar(2, "constant_value");
    if (n.has_input(3)) {
      std::vector<int64_t> axes = n.const_ints(3, "axes");
      size_t na = axes.size();
      if (pads.size() != 2 * na)
        n.fail(ErrorKind::kInvalidGraph, "pads has " + std::to_string(pads.size()) + " values, axes needs " +
                                             std::to_string(2 * na));
      std::vector<int64_t> full(static_cast<size_t>(2 * rank), 0);
      for (size_t k = 0; k < na; ++k) {
        int64_t ax = axis_in(n, axes[k], rank, "axis");
        full[ax] = pads[k];
        full[ax + rank] = pads[k + na];
      }
      pads = full;
    }
  }
  Attrs a;
  a.set("pads", pads);
  a.set("mode", mode);
  a.set("value", value);
  n.emit_outputs(OpKind::kPad, {n.input(0)}, std::move(a));
}

// Ops whose one shape-like ONNX input becomes an IR ints attribute.
void convert_with_ints_input(NodeImporter& n, OpKind kind, const char* input_name, const char* attr) {
  Attrs a;
  a.set(attr, n.const_ints(1, input_name));
  n.emit_outputs(kind, {n.input(0)}, std::move(a));
}

void convert_trilu(NodeImporter& n) {
  Attrs a;
  a.set("upper", n.attr_int("upper", 1));
  a.set("k", n.has_input(1) ? n.const_ints(1, "k").at(0) : int64_t{0});
  n.emit_outputs(OpKind::kTrilu, {n.input(0)}, std::move(a));
}

void convert_cumsum(NodeImporter& n) {
  Attrs a;
  n.copy_schema_attrs(OpKind::kCumSum, a);
  std::vector<int64_t> axis = n.const_ints(1, "axis");
  if (axis.size() != 1) n.fail(ErrorKind::kInvalidGraph, "input 'axis' must hold one value");
  a.set("axis", axis[0]);
  n.emit_outputs(OpKind::kCumSum, {n.input(0)}, std::move(a));
}

// Shape and Size depend only on the static type: they fold right away.
void convert_shape(NodeImporter& n) {
  const Shape& in = n.input_type(0).shape;
  int64_t rank = static_cast<int64_t>(in.size());
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  int64_t start = clamp(n.attr_int("start", 0)), end = clamp(n.attr_int("end", rank));
  std::vector<int64_t> dims;
  for (int64_t d = start; d < end; ++d) dims.push_back(in[d]);
  n.bind_output(0, n.add_constant(Tensor::vector_i64(dims)));
}

void convert_size(NodeImporter& n) {
  n.bind_output(0, n.add_constant(Tensor::from_ints(DType::kI64, {}, {n.input_type(0).numel()})));
}

void convert_constant_of_shape(NodeImporter& n) {
  n.const_tensor(0, "input");
  Attrs a;
  std::optional<Tensor> value = n.attr_tensor("value");
  a.set("value", value ? *value : Tensor::from_doubles(DType::kF32, {1}, {0.0}));
  n.emit_outputs(OpKind::kConstantOfShape, {n.input(0)}, std::move(a));
}

void convert_range(NodeImporter& n) {
  n.const_tensor(0, "start");
  n.const_tensor(1, "limit");
  n.const_tensor(2, "delta");
  n.emit_outputs(OpKind::kRange, all_inputs(n));
}

void convert_transpose(NodeImporter& n) {
  std::vector<int64_t> perm;
  if (auto p = n.attr_ints("perm")) perm = *p;
  else
    for (int64_t d = n.input_type(0).rank() - 1; d >= 0; --d) perm.push_back(d);
  Attrs a;
  a.set("perm", perm);
  n.emit_outputs(OpKind::kTranspose, {n.input(0)}, std::move(a));
}

// DepthToSpace / SpaceToDepth as the Reshape -> Transpose -> Reshape their
// definitions are written in (the exporter writes that chain back as the op).
void convert_depth_space(NodeImporter& n, bool to_space) {
  const TensorType& t = n.input_type(0);
  int64_t bs = n.attr_int("blocksize", 0);
  std::string mode = n.attr_string("mode", "DCR");
  if (t.rank() != 4) n.fail(ErrorKind::kInvalidGraph, "input must have rank 4, got " + shape_str(t.shape));
  if (bs < 1) n.fail(ErrorKind::kInvalidGraph, "blocksize must be at least 1, got " + std::to_string(bs));
  if (mode != "DCR" && mode != "CRD") n.fail(ErrorKind::kInvalidGraph, "mode must be DCR or CRD, got '" + mode + "'");
  int64_t b = t.shape[0], c = t.shape[1], h = t.shape[2], w = t.shape[3];
  Shape six, out;
  std::vector<int64_t> perm;
  if (to_space) {
    if (c % (bs * bs) != 0)
      n.fail(ErrorKind::kInvalidGraph, "channels " + std::to_string(c) + " are not a multiple of blocksize^2 = " +
                                    std::to_string(bs * bs));
    int64_t oc = c / (bs * bs);
    six = mode == "DCR" ? Shape{b, bs, bs, oc, h, w} : Shape{b, oc, bs, bs, h, w};
    perm = mode == "DCR" ? std::vector<int64_t>{0, 3, 4, 1, 5, 2} : std::vector<int64_t>{0, 1, 4, 2, 5, 3};
    out = {b, oc, h * bs, w * bs};
  } else {
    if (h % bs != 0 || w % bs != 0)
      n.fail(ErrorKind::kInvalidGraph, "spatial size " + shape_str(t.shape) + " is not a multiple of blocksize " +
                                    std::to_string(bs));
    six = {b, c, h / bs, bs, w / bs, bs};
    perm = mode == "DCR" ? std::vector<int64_t>{0, 3, 5, 1, 2, 4} : std::vector<int64_t>{0, 1, 3, 5, 2, 4};
    out = {b, c * bs * bs, h / bs, w / bs};
  }
  Attrs r6, tr, r4;
  r6.set("shape", std::vector<int64_t>(six.begin(), six.end()));
  tr.set("perm", perm);
  r4.set("shape", std::vector<int64_t>(out.begin(), out.end()));
  ValueId x = n.emit_temp(OpKind::kReshape, {n.input(0)}, std::move(r6));
  x = n.emit_temp(OpKind::kTranspose, {x}, std::move(tr));
  n.emit_outputs(OpKind::kReshape, {x}, std::move(r4));
}

void convert_conv(NodeImporter& n, OpKind kind) {
  Attrs a = resolve_spatial_attrs(n, kind);
  n.emit_outputs(kind, all_inputs(n), std::move(a));
}

void convert_max_pool(NodeImporter& n) {
  if (n.proto().output_size() > 1 && !n.proto().output(1).empty())
    n.fail(ErrorKind::kUnsupported, "MaxPool with an Indices output is not supported");
  n.ignore_attr("storage_order");  // only changes Indices
  convert_conv(n, OpKind::kMaxPool);
}

const std::unordered_map<std::string, Converter>& converters() {
  static const std::unordered_map<std::string, Converter> table = [] {
    std::unordered_map<std::string, Converter> m;
    m["Constant"] = convert_constant;
    m["Identity"] = [](NodeImporter& n) { n.bind_output(0, n.input(0)); };
    m["Dropout"] = [](NodeImporter& n) { convert_dropout(n, n.state()); };
    m["Cast"] = convert_cast;
    m["CastLike"] = convert_cast_like;
    m["Clip"] = convert_clip;
    m["Max"] = [](NodeImporter& n) { convert_variadic(n, OpKind::kMax, false); };
    m["Min"] = [](NodeImporter& n) { convert_variadic(n, OpKind::kMin, false); };
    m["Sum"] = [](NodeImporter& n) { convert_variadic(n, OpKind::kAdd, false); };
    m["Mean"] = [](NodeImporter& n) { convert_variadic(n, OpKind::kAdd, true); };
    for (OpKind k : {OpKind::kReduceSum, OpKind::kReduceMean, OpKind::kReduceMax, OpKind::kReduceMin,
                     OpKind::kReduceProd, OpKind::kReduceL2, OpKind::kReduceSumSquare})
      m[op_name(k)] = [k](NodeImporter& n) { convert_reduce(n, k); };
    m["Softmax"] = [](NodeImporter& n) { convert_softmax(n, OpKind::kSoftmax); };
    m["LogSoftmax"] = [](NodeImporter& n) { convert_softmax(n, OpKind::kLogSoftmax); };
    m["BatchNormalization"] = convert_batch_norm;
    m["CumSum"] = convert_cumsum;
    m["Conv"] = [](NodeImporter& n) { convert_conv(n, OpKind::kConv); };
    m["ConvTranspose"] = [](NodeImporter& n) { convert_conv(n, OpKind::kConvTranspose); };
    m["AveragePool"] = [](NodeImporter& n) { convert_conv(n, OpKind::kAveragePool); };
    m["MaxPool"] = convert_max_pool;
    m["Reshape"] = convert_reshape;
    m["Squeeze"] = convert_squeeze;
    m["Unsqueeze"] = convert_unsqueeze;
    m["Split"] = convert_split;
    m["Slice"] = convert_slice;
    m["Pad"] = convert_pad;
    m["Expand"] = [](NodeImporter& n) { convert_with_ints_input(n, OpKind::kExpand, "shape", "shape"); };
    m["Tile"] = [](NodeImporter& n) { convert_with_ints_input(n, OpKind::kTile, "repeats", "repeats"); };
    m["Trilu"] = convert_trilu;
    m["Resize"] = [](NodeImporter& n) { n.emit_outputs(OpKind::kResize, {n.input(0)}, resolve_resize_attrs(n)); };
    m["Shape"] = convert_shape;
    m["Size"] = convert_size;
    m["ConstantOfShape"] = convert_constant_of_shape;
    m["Range"] = convert_range;
    m["Transpose"] = convert_transpose;
    // Scatter (opsets 9 and 10) is ScatterElements under its old name, with
    // no reduction attribute.
    m["Scatter"] = [](NodeImporter& n) {
      Attrs a;
      a.set("axis", n.attr_int("axis", 0));
      n.emit_outputs(OpKind::kScatterElements, all_inputs(n), std::move(a));
    };
    m["DepthToSpace"] = [](NodeImporter& n) { convert_depth_space(n, true); };
    m["SpaceToDepth"] = [](NodeImporter& n) { convert_depth_space(n, false); };
    return m;
  }();
  return table;
}

}  // namespace

void convert_node(NodeImporter& n) {
  const std::string& domain = n.proto().domain();
  if (domain == "tessera") {
    // Per-rank programs that Tessera itself exported carry collectives here.
    std::optional<OpKind> k = op_from_name(n.op_type());
    if (!k || !op_def(*k).is_collective())
      n.fail(ErrorKind::kUnsupported, "unknown op '" + n.op_type() + "' (domain 'tessera', opset 1)");
    convert_generic(n, *k);
  } else {
    const auto& table = converters();
    auto it = table.find(n.op_type());
    std::optional<OpKind> k = op_from_name(n.op_type());
    if (it != table.end()) it->second(n);
    else if (k && !op_def(*k).is_collective()) convert_generic(n, *k);
    else
      n.fail(ErrorKind::kUnsupported, "unknown op '" + n.op_type() + "' (domain '" + domain + "', opset " +
                                          std::to_string(n.opset()) + ")");
  }
  n.finish();
}

}  // namespace tessera::onnx_import
