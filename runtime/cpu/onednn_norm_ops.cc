// oneDNN's softmax, layer and batch normalization and reductions, in f32 or
// bf16 (the compiler runs f16 groups over f32 copies). oneDNN 2.6 takes a
// normalization's scale, shift and statistics in f32 whatever the data's
// type: a 16-bit model's are widened once, at compile.
#include <algorithm>

#include "graph/attr_views.h"
#include "graph/ops/op_util.h"
#include "runtime/cpu/onednn_ops_internal.h"

namespace tessera::runtime::cpu::detail {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using dt = dnnl::memory::data_type;

// Binds a normalization's per-channel argument (scale, shift, statistics),
// which oneDNN 2.6 takes in f32 whatever the data's type: as it is in f32,
// widened once from a 16-bit constant. False (nothing bound) for a 16-bit
// value computed at run time; f32_vectors_bindable says so up front.
bool f32_vectors_bindable(const BuildContext& c, const std::vector<ValueId>& vs) {
  for (ValueId v : vs)
    if (v != kNoValue && c.g.type(v).dtype != DType::kF32 && !constant_of(c, v)) return false;
  return true;
}

void bind_f32_vector(const BuildContext& c, OnednnKernel& k, size_t step, int arg, ValueId v, const Md& vec) {
  const Tensor* t = constant_of(c, v);
  if (t && t->dtype() != DType::kF32) {
    Md from = vec;
    from.data.data_type = static_cast<dnnl_data_type_t>(tensor_type(t->dtype()));
    k.bind_fixed(step, arg, k.prepack(*t, from, vec));
  } else {
    k.bind_value(step, arg, v, vec);
  }
}

}  // namespace

Built make_softmax(const BuildContext& c, const FusedGroup& grp) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  if (!grp.post.empty()) return {};
  const Shape& xs = g.type(n.inputs[0]).shape;
  if (xs.empty()) return {};
  int axis = static_cast<int>(ops::normalize_axis(SoftmaxAttrs::of(n).axis, static_cast<int64_t>(xs.size())));
  Md md = plain_md(xs, compute_type(c.dtype));
  algorithm alg = n.kind == OpKind::kSoftmax ? algorithm::softmax_accurate : algorithm::softmax_log;
  dnnl::softmax_v2_forward::desc d(prop_kind::forward_inference, alg, md, md, axis);
  dnnl::softmax_v2_forward::primitive_desc pd(d, make_attr(nullptr), c.dnn->engine);
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  size_t s = k->add_step(dnnl::softmax_v2_forward(pd), pd);
  k->bind_value(s, DNNL_ARG_SRC, n.inputs[0], md);
  k->bind_value(s, DNNL_ARG_DST, n.outputs[0], md);
  k->in_place_input = 0;
  return {std::move(k), md};
}

// LayerNormalization over dims [axis, rank) as a 2-D [rows, cols] problem.
Built make_layer_norm(const BuildContext& c, const FusedGroup& grp) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  if (!grp.post.empty()) return {};
  // Mean and InvStdDev (outputs 1, 2) only when nothing reads them.
  if (n.outputs.size() > 1) {
    std::vector<std::vector<NodeId>> users = g.users();
    for (size_t i = 1; i < n.outputs.size(); ++i)
      if (!users[n.outputs[i]].empty() ||
          std::find(g.outputs().begin(), g.outputs().end(), n.outputs[i]) != g.outputs().end())
        return {};
  }
  const Shape& xs = g.type(n.inputs[0]).shape;
  const LayerNormAttrs ln = LayerNormAttrs::of(n);
  int64_t axis = ops::normalize_axis(ln.axis, static_cast<int64_t>(xs.size()));
  int64_t cols = 1, rows = 1;
  for (size_t i = 0; i < xs.size(); ++i) (static_cast<int64_t>(i) < axis ? rows : cols) *= xs[i];
  ValueId scale = n.inputs[1], shift = n.inputs.size() > 2 ? n.inputs[2] : kNoValue;
  if (g.type(scale).numel() != cols || (shift != kNoValue && g.type(shift).numel() != cols)) return {};
  if (!f32_vectors_bindable(c, {scale, shift})) return {};
  Md md = plain_md({rows, cols}, compute_type(c.dtype)), vec = plain_md({cols});
  auto flags = dnnl::normalization_flags::use_scale;
  if (shift != kNoValue) flags = flags | dnnl::normalization_flags::use_shift;
  dnnl::layer_normalization_forward::desc d(prop_kind::forward_inference, md, static_cast<float>(ln.epsilon),
                                            flags);
  dnnl::layer_normalization_forward::primitive_desc pd(d, make_attr(nullptr), c.dnn->engine);
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  size_t s = k->add_step(dnnl::layer_normalization_forward(pd), pd);
  k->bind_value(s, DNNL_ARG_SRC, n.inputs[0], md);
  bind_f32_vector(c, *k, s, DNNL_ARG_SCALE, scale, vec);
  if (shift != kNoValue) bind_f32_vector(c, *k, s, DNNL_ARG_SHIFT, shift, vec);
  k->bind_value(s, DNNL_ARG_DST, n.outputs[0], md);
  return {std::move(k), plain_md(xs, compute_type(c.dtype))};
}

Built make_batch_norm(const BuildContext& c, const FusedGroup& grp) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  // A Relu link (form_groups gives a batch normalization no other) is the
  // primitive's own fuse_norm_relu.
  const bool relu = grp.post.size() == 1 && g.node(grp.post[0].node).kind == OpKind::kRelu;
  if ((!grp.post.empty() && !relu) || n.outputs.size() != 1) return {};
  const Shape& xs = g.type(n.inputs[0]).shape;
  if (xs.size() < 2) return {};
  Md x_md = c.md_of(n.inputs[0]);
  if (c.plain_output) x_md = is_plain(x_md, xs) ? x_md : Md();
  if (!x_md) return {};
  if (!f32_vectors_bindable(c, {n.inputs[1], n.inputs[2], n.inputs[3], n.inputs[4]})) return {};
  Md vec = plain_md({xs[1]});
  auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
               dnnl::normalization_flags::use_shift;
  if (relu) flags |= dnnl::normalization_flags::fuse_norm_relu;
  dnnl::batch_normalization_forward::desc d(prop_kind::forward_inference, x_md,
                                            static_cast<float>(BatchNormAttrs::of(n).epsilon), flags);
  dnnl::batch_normalization_forward::primitive_desc pd(d, make_attr(nullptr), c.dnn->engine);
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  size_t s = k->add_step(dnnl::batch_normalization_forward(pd), pd);
  k->bind_value(s, DNNL_ARG_SRC, n.inputs[0], x_md);
  bind_f32_vector(c, *k, s, DNNL_ARG_SCALE, n.inputs[1], vec);
  bind_f32_vector(c, *k, s, DNNL_ARG_SHIFT, n.inputs[2], vec);
  bind_f32_vector(c, *k, s, DNNL_ARG_MEAN, n.inputs[3], vec);
  bind_f32_vector(c, *k, s, DNNL_ARG_VARIANCE, n.inputs[4], vec);
  k->bind_value(s, DNNL_ARG_DST, grp.output(g), x_md);
  k->in_place_input = 0;
  return {std::move(k), x_md};
}

Built make_reduce(const BuildContext& c, const FusedGroup& grp) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  if (!grp.post.empty()) return {};
  const Shape& xs = g.type(n.inputs[0]).shape;
  if (xs.empty()) return {};
  std::vector<int64_t> axes = ops::normalize_axes(ReduceAttrs::of(n).axes, static_cast<int64_t>(xs.size()));
  if (axes.empty())
    for (size_t i = 0; i < xs.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  Shape ys = xs;
  for (int64_t a : axes) ys[a] = 1;
  algorithm alg;
  float p = 0;
  switch (n.kind) {
    case OpKind::kReduceSum: alg = algorithm::reduction_sum; break;
    case OpKind::kReduceMean: alg = algorithm::reduction_mean; break;
    // Not ReduceMax / ReduceMin: oneDNN starts them from the largest finite
    // floats, so a row of -inf reduces to -FLT_MAX (ONNX's attention masks
    // test rows for -inf).
    case OpKind::kReduceProd: alg = algorithm::reduction_mul; break;
    case OpKind::kReduceL2: alg = algorithm::reduction_norm_lp_sum; p = 2; break;
    case OpKind::kReduceSumSquare: alg = algorithm::reduction_norm_lp_power_p_sum; p = 2; break;
    default: return {};
  }
  if (ys == xs) return {};  // nothing reduced (a copy); the native path handles it
  dt t = compute_type(c.dtype);
  Md x_md = plain_md(xs, t), y_md = plain_md(ys, t);
  dnnl::reduction::desc d(alg, x_md, y_md, p, 0.0f);
  dnnl::reduction::primitive_desc pd(d, make_attr(nullptr), c.dnn->engine);
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  size_t s = k->add_step(dnnl::reduction(pd), pd);
  k->bind_value(s, DNNL_ARG_SRC, n.inputs[0], x_md);
  k->bind_value(s, DNNL_ARG_DST, n.outputs[0], y_md);
  return {std::move(k), plain_md(g.type(n.outputs[0]).shape, t)};
}

}  // namespace tessera::runtime::cpu::detail
