// Graph -> ONNX. The IR keeps shape-like operands as attributes; ONNX moved
// them to inputs at various opsets, so each such op is written in the form of
// the target opset (see write_node). Constants become initializers.
#include "onnx_import/onnx_export.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <unordered_set>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/permute.h"
#include "graph/sha256.h"
#include "onnx/onnx_pb.h"
#include "onnx_import/resize_attrs.h"
#include "onnx_import/tensor_proto.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTesseraDomain = "tessera";

int64_t ir_version_for(int64_t opset) {
  if (opset >= 21) return 10;
  if (opset >= 19) return 9;
  if (opset >= 15) return 8;
  if (opset >= 13) return 7;
  return 6;
}

void set_attr(onnx::NodeProto& p, const std::string& name, const AttrValue& v) {
  onnx::AttributeProto* a = p.add_attribute();
  a->set_name(name);
  switch (attr_type_of(v)) {
    case AttrType::kInt: a->set_type(onnx::AttributeProto::INT); a->set_i(std::get<int64_t>(v)); break;
    case AttrType::kFloat:
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(static_cast<float>(std::get<double>(v)));
      break;
    case AttrType::kString: a->set_type(onnx::AttributeProto::STRING); a->set_s(std::get<std::string>(v)); break;
    case AttrType::kInts:
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t x : std::get<std::vector<int64_t>>(v)) a->add_ints(x);
      break;
    case AttrType::kFloats:
      a->set_type(onnx::AttributeProto::FLOATS);
      for (double x : std::get<std::vector<double>>(v)) a->add_floats(static_cast<float>(x));
      break;
    case AttrType::kTensor:
      a->set_type(onnx::AttributeProto::TENSOR);
      *a->mutable_t() = tensor_to_proto(std::get<Tensor>(v), "");
      break;
  }
}

// The DepthToSpace / SpaceToDepth node a Reshape(six) -> Transpose(perm) ->
// Reshape(out) chain computes, if any: op, mode, blocksize and the 4-D
// input shape it takes.
struct DepthSpace {
  std::string op, mode;
  int64_t blocksize = 0;
  std::vector<int64_t> input;
};

std::optional<DepthSpace> match_depth_space(const std::vector<int64_t>& six, const std::vector<int64_t>& perm,
                                            const std::vector<int64_t>& out) {
  if (out.size() != 4) return std::nullopt;
  CanonicalPermute have = canonical_permute(six, perm);
  if (have.perm.size() < 2) return std::nullopt;  // a reshape, not a permutation
  int64_t b = out[0], c = out[1], h = out[2], w = out[3];
  for (int64_t bs = 2; bs <= 16; ++bs) {
    if (h % bs == 0 && w % bs == 0) {
      int64_t ic = c * bs * bs, ih = h / bs, iw = w / bs;
      if (have == canonical_permute({b, bs, bs, c, ih, iw}, {0, 3, 4, 1, 5, 2}))
        return DepthSpace{"DepthToSpace", "DCR", bs, {b, ic, ih, iw}};
      if (have == canonical_permute({b, c, bs, bs, ih, iw}, {0, 1, 4, 2, 5, 3}))
        return DepthSpace{"DepthToSpace", "CRD", bs, {b, ic, ih, iw}};
    }
    // SpaceToDepth's default (DCR) order only: its mode attribute is recent.
    if (c % (bs * bs) == 0 &&
        have == canonical_permute({b, c / (bs * bs), h, bs, w, bs}, {0, 3, 5, 1, 2, 4}))
      return DepthSpace{"SpaceToDepth", "", bs, {b, c / (bs * bs), h * bs, w * bs}};
  }
  return std::nullopt;
}

void set_type(onnx::ValueInfoProto& vi, const std::string& name, const TensorType& t) {
  vi.set_name(name);
  auto* tt = vi.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtype_to_onnx(t.dtype));
  auto* shape = tt->mutable_shape();
  for (int64_t d : t.shape) shape->add_dim()->set_dim_value(d);
}

// An initializer left without its bytes (the model's `index`-th), to be
// written from `tensor` by whoever writes the model: a large weight is never
// copied into the proto.
struct DeferredInitializer {
  int index;
  Tensor tensor;
};

class Exporter {
 public:
  // With `deferred`, initializers of kDeferMinBytes or more get no raw_data
  // and are listed there instead.
  Exporter(const Graph& g, const ExportOptions& options, std::vector<DeferredInitializer>* deferred = nullptr)
      : g_(g), opset_(options.opset), users_(g.users()), deferred_(deferred) {
    model_.set_ir_version(ir_version_for(opset_));
    model_.set_producer_name(options.producer_name);
    gp_ = model_.mutable_graph();
    gp_->set_name(g.name);
    for (ValueId v = 0; v < g.num_values(); ++v) names_.insert(g.value(v).name);
  }

  onnx::ModelProto run() {
    if (opset_ < 13) TESSERA_THROW(ErrorKind::kUnsupported, "export opset " << opset_ << " is below 13, the oldest supported");
    // Nodes that ONNX has only in a newer opset raise the written one.
    for (NodeId n = 0; n < g_.num_nodes(); ++n) opset_ = std::max(opset_, min_opset(g_.node(n)));
    model_.set_ir_version(ir_version_for(opset_));
    std::vector<bool> is_input(static_cast<size_t>(g_.num_values()), false);
    for (ValueId v : g_.inputs()) {
      is_input[v] = true;
      set_type(*gp_->add_input(), g_.value(v).name, g_.type(v));
    }
    std::vector<bool> used(static_cast<size_t>(g_.num_values()), false);
    for (NodeId n = 0; n < g_.num_nodes(); ++n)
      for (ValueId in : g_.node(n).inputs)
        if (in != kNoValue) used[in] = true;
    for (ValueId v = 0; v < g_.num_values(); ++v)
      if (g_.value(v).constant && used[v]) add_initializer(*g_.value(v).constant, g_.value(v).name);
    std::vector<bool> written(static_cast<size_t>(g_.num_nodes()), false);
    for (NodeId n : g_.topo_order()) {
      if (written[static_cast<size_t>(n)]) continue;
      if (!write_depth_space(n, written)) write_node(g_.node(n));
    }
    write_outputs(is_input);
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset_);
    if (uses_tessera_) {
      op = model_.add_opset_import();
      op->set_domain(kTesseraDomain);
      op->set_version(1);
    }
    return std::move(model_);
  }

 private:
  // Below this an initializer stays in the proto's raw_data even when the
  // model is written with external data (ONNX's own threshold).
  static constexpr int64_t kDeferMinBytes = 1024;

  void add_initializer(const Tensor& t, const std::string& name) {
    if (!deferred_ || t.nbytes() < kDeferMinBytes) {
      *gp_->add_initializer() = tensor_to_proto(t, name);
      return;
    }
    onnx::TensorProto* p = gp_->add_initializer();
    p->set_name(name);
    p->set_data_type(dtype_to_onnx(t.dtype()));
    for (int64_t d : t.shape()) p->add_dims(d);
    deferred_->push_back({gp_->initializer_size() - 1, t});
  }

  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 0; names_.count(name); ++k) name = base + "_" + std::to_string(k);
    names_.insert(name);
    return name;
  }

  std::string initializer(const Tensor& t, const std::string& base) {
    std::string name = fresh(base);
    add_initializer(t, name);
    return name;
  }

  std::string ints_input(const std::vector<int64_t>& v, const std::string& base) {
    return initializer(Tensor::vector_i64(v), base);
  }

  std::string scalar_input(DType dt, double v, const std::string& base) {
    return initializer(Tensor::from_doubles(dt, {}, {v}), base);
  }

  onnx::NodeProto* new_node(const std::string& op, const std::string& name) {
    onnx::NodeProto* p = gp_->add_node();
    p->set_op_type(op);
    std::string unique = name;
    for (int k = 0; node_names_.count(unique); ++k) unique = name + "_" + std::to_string(k);
    node_names_.insert(unique);
    p->set_name(unique);
    return p;
  }

  [[noreturn]] void unsupported(const Node& n, const std::string& msg) {
    throw Error(ErrorKind::kUnsupported, msg + " at export opset " + std::to_string(opset_), {"", n.name, op_name(n.kind)});
  }

  int64_t min_opset(const Node& n) const;
  static int64_t scatter_reduction_opset(const Node& n);
  void write_node(const Node& n);
  void resize_operands(const Node& n, std::vector<std::string>& extra_inputs, std::unordered_set<std::string>& skip,
                       std::vector<std::pair<std::string, AttrValue>>& added);
  void write_gelu(const Node& n);
  bool write_depth_space(NodeId first, std::vector<bool>& written);
  void write_outputs(const std::vector<bool>& is_input);

  const Graph& g_;
  int64_t opset_;
  std::vector<std::vector<NodeId>> users_;
  onnx::ModelProto model_;
  onnx::GraphProto* gp_ = nullptr;
  std::unordered_set<std::string> names_, node_names_;
  bool uses_tessera_ = false;
  std::vector<DeferredInitializer>* deferred_;
};

bool is_reduce(OpKind k) {
  switch (k) {
    case OpKind::kReduceSum: case OpKind::kReduceMean: case OpKind::kReduceMax: case OpKind::kReduceMin:
    case OpKind::kReduceProd: case OpKind::kReduceL2: case OpKind::kReduceSumSquare: return true;
    default: return false;
  }
}

// Gelu is an ONNX op only from opset 20; below that it is written as its
// formula: 0.5 x (1 + erf(x / sqrt 2)), or with tanh for approximate="tanh".
void Exporter::write_gelu(const Node& n) {
  DType dt = g_.type(n.inputs[0]).dtype;
  const std::string& x = g_.value(n.inputs[0]).name;
  const std::string& y = g_.value(n.outputs[0]).name;
  auto op = [&](const char* type, std::vector<std::string> ins, const std::string& out = "") {
    onnx::NodeProto* p = new_node(type, n.name + "/" + type);
    for (auto& s : ins) p->add_input(s);
    std::string o = out.empty() ? fresh(n.name + "/" + type) : out;
    p->add_output(o);
    return o;
  };
  std::string inner;
  if (gelu_tanh_form(GeluAttrs::of(n))) {
    std::string x3 = op("Mul", {op("Mul", {x, x}), x});
    std::string t = op("Add", {x, op("Mul", {x3, scalar_input(dt, 0.044715, n.name + "/c")})});
    inner = op("Tanh", {op("Mul", {t, scalar_input(dt, std::sqrt(2.0 / M_PI), n.name + "/k")})});
  } else {
    inner = op("Erf", {op("Mul", {x, scalar_input(dt, M_SQRT1_2, n.name + "/k")})});
  }
  std::string one_plus = op("Add", {inner, scalar_input(dt, 1.0, n.name + "/one")});
  op("Mul", {op("Mul", {x, scalar_input(dt, 0.5, n.name + "/half")}), one_plus}, y);
}

// Reshape -> Transpose -> Reshape that moves elements as DepthToSpace or
// SpaceToDepth does is written as that op (after a Reshape to its 4-D
// input): runtimes run it as one blocked copy, where a 6-D Transpose takes
// their general, element-by-element path (ONNX Runtime: 4-5x slower).
bool Exporter::write_depth_space(NodeId first, std::vector<bool>& written) {
  const Node& r1 = g_.node(first);
  if (r1.kind != OpKind::kReshape) return false;
  // One reader, read once (users_ lists a node once per use).
  auto users = [&](ValueId v) -> const std::vector<NodeId>& { return users_[static_cast<size_t>(v)]; };
  auto is_output = [&](ValueId v) { return std::find(g_.outputs().begin(), g_.outputs().end(), v) != g_.outputs().end(); };
  ValueId mid = r1.outputs[0];
  const std::vector<NodeId>& u1 = users(mid);
  if (is_output(mid) || u1.size() != 1 || g_.node(u1[0]).kind != OpKind::kTranspose) return false;
  const Node& t = g_.node(u1[0]);
  const std::vector<NodeId>& u2 = users(t.outputs[0]);
  if (is_output(t.outputs[0]) || u2.size() != 1 || g_.node(u2[0]).kind != OpKind::kReshape) return false;
  const Node& r2 = g_.node(u2[0]);
  // [X, 1, h, w] holds its elements as [1, X, h, w] does (channels as batch:
  // a Winograd input transform's phases): matched in that view, reshaped back.
  std::vector<int64_t> out = g_.type(r2.outputs[0]).shape;
  const std::vector<int64_t> perm = TransposeAttrs::of(t).perm;
  std::optional<DepthSpace> m = match_depth_space(g_.type(mid).shape, perm, out);
  bool batch_view = false;
  if (!m && out.size() == 4 && out[1] == 1 && out[0] > 1) {
    m = match_depth_space(g_.type(mid).shape, perm, {1, out[0], out[2], out[3]});
    batch_view = m.has_value();
  }
  if (!m) return false;
  std::string in = g_.value(r1.inputs[0]).name;
  if (g_.type(r1.inputs[0]).shape != m->input) {
    std::string shaped = fresh(r1.name + "/input");
    onnx::NodeProto* p = new_node("Reshape", r1.name);
    p->add_input(in);
    p->add_input(ints_input(m->input, r1.name + "/shape"));
    p->add_output(shaped);
    in = shaped;
  }
  onnx::NodeProto* p = new_node(m->op, t.name);
  p->add_input(in);
  std::string result = g_.value(r2.outputs[0]).name;
  p->add_output(batch_view ? fresh(t.name + "/output") : result);
  set_attr(*p, "blocksize", AttrValue{m->blocksize});
  if (!m->mode.empty()) set_attr(*p, "mode", AttrValue{m->mode});
  if (batch_view) {
    onnx::NodeProto* back = new_node("Reshape", r2.name);
    back->add_input(p->output(0));
    back->add_input(ints_input(out, r2.name + "/shape"));
    back->add_output(result);
  }
  written[static_cast<size_t>(u1[0])] = written[static_cast<size_t>(u2[0])] = true;
  return true;
}

// The oldest opset whose form of `n` the exporter writes, where that is
// newer than 13: Resize with antialias or a keep_aspect_ratio_policy (18),
// half_pixel_symmetric (19), ScatterND and ScatterElements with a reduction
// (16, 18).
int64_t Exporter::min_opset(const Node& n) const {
  if (n.kind == OpKind::kResize) {
    onnx_import::ResizeOnnxForm f = onnx_import::resize_onnx_form(n, g_.type(n.inputs[0]).shape, INT64_MAX);
    return f.unsupported.empty() ? f.min_opset : 0;  // no form at all: reported when written
  }
  if (n.kind == OpKind::kScatterND || n.kind == OpKind::kScatterElements) return scatter_reduction_opset(n);
  return 0;
}

// The opset from which a scatter's reduction is an attribute: none is the
// default of every version (and written as no attribute), add and mul came
// in 16, max and min in 18.
int64_t Exporter::scatter_reduction_opset(const Node& n) {
  const std::string r =
      n.kind == OpKind::kScatterND ? ScatterNDAttrs::of(n).reduction : ScatterElementsAttrs::of(n).reduction;
  return r == "none" ? 0 : r == "add" || r == "mul" ? 16 : 18;
}

// Resize's roi, scales and sizes operands and its attributes in the ONNX
// form that reproduces the node (onnx_import/resize_attrs.h).
void Exporter::resize_operands(const Node& n, std::vector<std::string>& extra_inputs,
                               std::unordered_set<std::string>& skip,
                               std::vector<std::pair<std::string, AttrValue>>& added) {
  onnx_import::ResizeOnnxForm f = onnx_import::resize_onnx_form(n, g_.type(n.inputs[0]).shape, opset_);
  if (!f.unsupported.empty()) unsupported(n, f.unsupported);
  for (const char* a : {"scales", "sizes", "roi", "antialias", "coordinate_transformation_mode"}) skip.insert(a);
  added.push_back({"coordinate_transformation_mode", f.ctm});
  if (f.antialias) added.push_back({"antialias", int64_t{1}});
  if (!f.axes.empty()) {
    added.push_back({"axes", f.axes});
    added.push_back({"keep_aspect_ratio_policy", f.policy});
  }
  auto floats = [&](const std::vector<double>& v, const char* what) {
    return initializer(Tensor::from_doubles(DType::kF32, {static_cast<int64_t>(v.size())}, v), n.name + "/" + what);
  };
  extra_inputs.push_back(f.roi.empty() ? "" : floats(f.roi, "roi"));
  extra_inputs.push_back(f.scales.empty() ? "" : floats(f.scales, "scales"));
  if (!f.sizes.empty()) extra_inputs.push_back(ints_input(f.sizes, n.name + "/sizes"));
}

void Exporter::write_node(const Node& n) {
  if (n.kind == OpKind::kGelu && opset_ < 20) return write_gelu(n);
  std::string type = op_name(n.kind);
  // Attributes that this opset takes as inputs instead, in input order.
  std::vector<std::string> extra_inputs;
  std::unordered_set<std::string> skip;
  const std::string& base = n.name;
  auto move_ints = [&](const char* attr, const char* input_suffix) {
    extra_inputs.push_back(ints_input(n.attrs.ints(attr), base + "/" + input_suffix));
    skip.insert(attr);
  };
  std::vector<std::pair<std::string, AttrValue>> added;
  DType in_dtype = n.inputs.empty() || n.inputs[0] == kNoValue ? DType::kF32 : g_.type(n.inputs[0]).dtype;

  switch (n.kind) {
    case OpKind::kReshape: {
      move_ints("shape", "shape");
      const std::vector<int64_t> s = ReshapeAttrs::of(n).shape;
      if (std::find(s.begin(), s.end(), 0) != s.end()) added.push_back({"allowzero", int64_t{1}});
      break;
    }
    case OpKind::kSqueeze: case OpKind::kUnsqueeze:
      if (SqueezeAttrs::of(n).axes.empty()) {
        type = "Identity";
        skip.insert("axes");
      } else {
        move_ints("axes", "axes");
      }
      break;
    case OpKind::kSplit: move_ints("split", "split"); break;
    case OpKind::kSlice:
      for (const char* a : {"starts", "ends", "axes", "steps"}) move_ints(a, a);
      break;
    case OpKind::kExpand: move_ints("shape", "shape"); break;
    case OpKind::kTile: move_ints("repeats", "repeats"); break;
    case OpKind::kTrilu:
      extra_inputs.push_back(initializer(Tensor::from_ints(DType::kI64, {}, {TriluAttrs::of(n).k}), base + "/k"));
      skip.insert("k");
      break;
    case OpKind::kResize: resize_operands(n, extra_inputs, skip, added); break;
    case OpKind::kScatterND:
    case OpKind::kScatterElements: {
      const std::string r =
          n.kind == OpKind::kScatterND ? ScatterNDAttrs::of(n).reduction : ScatterElementsAttrs::of(n).reduction;
      skip.insert("reduction");
      if (r != "none") {
        if (opset_ < scatter_reduction_opset(n)) unsupported(n, type + " with reduction '" + r + "'");
        added.push_back({"reduction", r});
      }
      break;
    }
    case OpKind::kCumSum:
      extra_inputs.push_back(initializer(Tensor::from_ints(DType::kI64, {}, {CumSumAttrs::of(n).axis}), base + "/axis"));
      skip.insert("axis");
      break;
    case OpKind::kPad: {
      move_ints("pads", "pads");
      skip.insert("value");
      const PadAttrs pad = PadAttrs::of(n);
      if (pad.mode == "constant") extra_inputs.push_back(scalar_input(in_dtype, pad.value, base + "/value"));
      break;
    }
    case OpKind::kClip: {
      skip.insert("min");
      skip.insert("max");
      const ClipAttrs clip = ClipAttrs::of(n);
      double lo = clip.min, hi = clip.max;
      extra_inputs.push_back(std::isinf(lo) ? "" : scalar_input(in_dtype, lo, base + "/min"));
      extra_inputs.push_back(std::isinf(hi) ? "" : scalar_input(in_dtype, hi, base + "/max"));
      while (!extra_inputs.empty() && extra_inputs.back().empty()) extra_inputs.pop_back();
      break;
    }
    case OpKind::kCast:
      skip.insert("to");
      added.push_back({"to", int64_t{dtype_to_onnx(dtype_from_name(CastAttrs::of(n).to))}});
      break;
    case OpKind::kAveragePool:
      if (opset_ < 19) {
        for (int64_t d : AveragePoolAttrs::of(n).dilations)
          if (d != 1) unsupported(n, "AveragePool with dilations");
        skip.insert("dilations");
      }
      break;
    case OpKind::kLayerNormalization:
      if (opset_ < 17) unsupported(n, "LayerNormalization");
      break;
    case OpKind::kShape:
      skip.insert("start");
      skip.insert("end");
    {
      const ShapeAttrs shape = ShapeAttrs::of(n);
      if (shape.start != 0) added.push_back({"start", shape.start});
      if (shape.end != INT64_MAX) added.push_back({"end", shape.end});
    }
      if (opset_ < 15 && !added.empty()) unsupported(n, "Shape with start/end");
      break;
    default:
      if (is_reduce(n.kind)) {
        skip.insert("axes");
        const std::vector<int64_t> axes = ReduceAttrs::of(n).axes;
        bool as_input = n.kind == OpKind::kReduceSum ? opset_ >= 13 : opset_ >= 18;
        if (!axes.empty()) {
          if (as_input) extra_inputs.push_back(ints_input(axes, base + "/axes"));
          else added.push_back({"axes", axes});
        }
      }
      break;
  }

  onnx::NodeProto* p = new_node(type, n.name);
  if (op_def(n.kind).is_collective()) {
    p->set_domain(kTesseraDomain);
    uses_tessera_ = true;
  }
  for (ValueId in : n.inputs) p->add_input(in == kNoValue ? "" : g_.value(in).name);
  for (const std::string& s : extra_inputs) p->add_input(s);
  for (ValueId out : n.outputs) p->add_output(g_.value(out).name);
  if (type == "Identity") return;
  for (const auto& [name, value] : n.attrs.map())
    if (!skip.count(name)) set_attr(*p, name, value);
  for (const auto& [name, value] : added) set_attr(*p, name, value);
}

// ONNX graph outputs must be produced by nodes and be distinct; outputs that
// are graph inputs, constants or repeats go through an Identity.
void Exporter::write_outputs(const std::vector<bool>& is_input) {
  std::unordered_set<ValueId> seen;
  std::unordered_set<std::string> initializers;
  for (const auto& t : gp_->initializer()) initializers.insert(t.name());
  for (ValueId v : g_.outputs()) {
    const Value& val = g_.value(v);
    std::string name = val.name;
    if (val.constant && !seen.count(v) && !initializers.count(name)) {
      std::string init = initializer(*val.constant, name + "/value");
      onnx::NodeProto* p = new_node("Identity", name + "/output");
      p->add_input(init);
      p->add_output(name);
    } else if (is_input[v] || seen.count(v) || val.constant) {
      name = fresh(name + "_output");
      onnx::NodeProto* p = new_node("Identity", name);
      p->add_input(val.name);
      p->add_output(name);
    }
    seen.insert(v);
    set_type(*gp_->add_output(), name, val.type);
  }
  std::unordered_set<std::string> outs;
  for (const auto& o : gp_->output()) outs.insert(o.name());
  for (NodeId n = 0; n < g_.num_nodes(); ++n)
    for (ValueId v : g_.node(n).outputs)
      if (!outs.count(g_.value(v).name)) set_type(*gp_->add_value_info(), g_.value(v).name, g_.type(v));
}

// Writes what `write` puts out to a temporary file beside `path`, then renames it into place;
// throws Error(kIo) naming `what`, leaving nothing behind.
void write_file_atomic(const std::string& path, const std::string& what,
                       const std::function<void(std::ofstream&)>& write) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) TESSERA_THROW(ErrorKind::kIo, path << ": cannot write " << what);
    errno = 0;
    write(out);
    out.flush();
    if (!out) {
      std::string why = errno ? std::string(": ") + std::strerror(errno) : std::string();
      out.close();
      std::remove(tmp.c_str());
      TESSERA_THROW(ErrorKind::kIo, path << ": writing " << what << " failed" << why);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    TESSERA_THROW(ErrorKind::kIo, path << ": cannot rename temporary file: " << ec.message());
  }
}

// A tensor of at least this many bytes is hashed beside its write, not after.
constexpr int64_t kHashBesideAbove = int64_t{1} << 20;

// Streams `tensors`' bytes to `path`, one tensor at a time straight from its
// storage (a mapped weight is read where it is mapped), each aligned for
// mmap; returns each one's offset. Reports the digest as `name`.
std::vector<int64_t> stream_data(const std::vector<const Tensor*>& tensors, const std::string& path,
                                 const std::function<void(int64_t)>& wrote, const ExportOptions& options) {
  Sha256 sha;
  int64_t offset = 0;
  std::vector<int64_t> offsets;
  write_file_atomic(path, "external data", [&](std::ofstream& out) {
    auto put = [&](const void* p, int64_t n) {
      if (options.digest && n >= kHashBesideAbove) {
        // Hashed on another core while this one copies the bytes into the
        // page cache (GPT-2's 495 MB: 0.8 s of SHA-256 and 0.5 s of write).
        std::future<void> hashed = std::async(std::launch::async, [&] { sha.update(p, static_cast<size_t>(n)); });
        out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
        hashed.get();
        return;
      }
      out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
      if (options.digest) sha.update(p, static_cast<size_t>(n));
    };
    for (const Tensor* t : tensors) {
      static const char kZeros[64] = {};
      int64_t pad = -offset & 63;  // aligned for mmap
      put(kZeros, pad);
      offset += pad;
      int64_t n = t->nbytes();
      // Read once: a mapped weight's pages, a rank's made block, leave memory once written.
      t->read_once([&](const uint8_t* p) { put(p, n); });
      t->drop_mapped_pages();  // made bytes an earlier reader kept
      wrote(n);
      offsets.push_back(offset);
      offset += n;
    }
  });
  if (options.digest) options.digest(fs::path(path).filename().string(), sha.hex_digest(), offset);
  return offsets;
}

void point_at(onnx::TensorProto& t, const ExternalBytes& where) {
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair<std::string, std::string>{"location", where.location},
                      {"offset", std::to_string(where.offset)},
                      {"length", std::to_string(where.length)}}) {
    auto* e = t.add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
}

// Points the deferred initializers that `options.shared` places at their
// shared bytes, and streams the others' to `path`.data.
void write_external(onnx::ModelProto& model, const std::vector<DeferredInitializer>& deferred,
                    const std::string& path, const std::function<void(int64_t)>& wrote, const ExportOptions& options) {
  std::vector<const DeferredInitializer*> own;
  for (const DeferredInitializer& d : deferred) {
    const ExternalBytes* where = options.shared ? options.shared(d.tensor) : nullptr;
    if (!where) {
      own.push_back(&d);
      continue;
    }
    TESSERA_CHECK(where->length == d.tensor.nbytes(), "shared bytes of " << d.tensor.nbytes() << " bytes recorded as "
                                                                         << where->length);
    point_at(*model.mutable_graph()->mutable_initializer(d.index), *where);
    wrote(d.tensor.nbytes());
  }
  if (own.empty()) return;
  std::string data_name = fs::path(path).filename().string() + ".data";
  std::vector<const Tensor*> tensors;
  for (const DeferredInitializer* d : own) tensors.push_back(&d->tensor);
  std::vector<int64_t> offsets = stream_data(tensors, (fs::path(path).parent_path() / data_name).string(), wrote, options);
  for (size_t i = 0; i < own.size(); ++i)
    point_at(*model.mutable_graph()->mutable_initializer(own[i]->index),
             {data_name, offsets[i], own[i]->tensor.nbytes()});
}

}  // namespace

onnx::ModelProto export_onnx(const Graph& g, const ExportOptions& options) { return Exporter(g, options).run(); }

void save_onnx_file(const Graph& g, const std::string& path, const ExportOptions& options) {
  std::vector<DeferredInitializer> deferred;
  onnx::ModelProto model = Exporter(g, options, &deferred).run();
  int64_t bytes = static_cast<int64_t>(model.ByteSizeLong()), weights = 0;
  for (const DeferredInitializer& d : deferred) weights += d.tensor.nbytes();
  bytes += weights;
  int64_t done = 0;
  auto wrote = [&](int64_t n) {
    done += n;
    if (options.written) options.written(done, weights);
  };
  if (bytes > options.external_data_above || options.shared) {
    write_external(model, deferred, path, wrote, options);
  } else {
    // Read once: a rank's made block is not kept beside its copy in the
    // proto (Llama-2-7B on tp=8: 1.7 GB rank files, inline, kept 9 GB).
    for (const DeferredInitializer& d : deferred) {
      d.tensor.read_once([&](const uint8_t* p) {
        model.mutable_graph()->mutable_initializer(d.index)->set_raw_data(reinterpret_cast<const char*>(p),
                                                                           static_cast<size_t>(d.tensor.nbytes()));
      });
      d.tensor.drop_mapped_pages();
      wrote(d.tensor.nbytes());
    }
  }
  std::string serialized;
  if (!model.SerializeToString(&serialized)) TESSERA_THROW(ErrorKind::kInternal, path << ": cannot serialize the model");
  write_file_atomic(path, "the model", [&](std::ofstream& out) {
    out.write(serialized.data(), static_cast<std::streamsize>(serialized.size()));
  });
  if (options.digest)
    options.digest(fs::path(path).filename().string(), sha256_hex(serialized), static_cast<int64_t>(serialized.size()));
}

std::vector<ExternalBytes> save_shared_data(const std::vector<Tensor>& tensors, const std::string& path,
                                            const ExportOptions& options) {
  int64_t total = 0, done = 0;
  for (const Tensor& t : tensors) total += t.nbytes();
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : tensors) ptrs.push_back(&t);
  std::vector<int64_t> offsets = stream_data(ptrs, path, [&](int64_t n) {
    done += n;
    if (options.written) options.written(done, total);
  }, options);
  std::vector<ExternalBytes> out;
  std::string name = fs::path(path).filename().string();
  for (size_t i = 0; i < tensors.size(); ++i) out.push_back({name, offsets[i], tensors[i].nbytes()});
  return out;
}

}  // namespace tessera
