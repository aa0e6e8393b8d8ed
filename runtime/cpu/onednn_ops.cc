#include "runtime/cpu/onednn_ops.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <string>

#include <omp.h>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/ops/op_util.h"
#include "runtime/cpu/native_swish.h"
#include "runtime/cpu/onednn_ops_internal.h"
#include "runtime/cpu/skinny_matmul.h"

namespace tessera::runtime::cpu {
namespace detail {

const Tensor* constant_of(const BuildContext& c, ValueId v) {
  if (v == kNoValue) return nullptr;
  if (c.constant) return c.constant(v);
  return c.g.value(v).constant ? &*c.g.value(v).constant : nullptr;
}

dnnl::memory::data_type tensor_type(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::kF32: return dt::f32;
    case DType::kBF16: return dt::bf16;
    case DType::kF16: return dt::f16;
    default: TESSERA_CHECK(false, "no oneDNN type for " << dtype_name(t)); return dt::undef;
  }
}

dnnl::primitive_attr make_attr(const PostOpsPlan* p) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (p) attr.set_post_ops(p->ops);
  return attr;
}

}  // namespace detail

namespace {

using detail::constant_of;
using detail::make_attr;
using detail::make_batch_norm;
using detail::make_concat;
using detail::make_layer_norm;
using detail::make_reduce;
using detail::make_softmax;
using detail::tensor_type;

using dnnl::algorithm;
using dnnl::prop_kind;
using dt = dnnl::memory::data_type;
using Dims = dnnl::memory::dims;

Md any_md(const Shape& s, dt t) { return Md(to_dims(s), t, dnnl::memory::format_tag::any); }

// Adds the op's primitive, preceded by a reorder of its data input into the
// kernel's scratch when the layout the primitive chose differs from the one
// the value has. Returns the op's step.
size_t add_main(const BuildContext& c, OnednnKernel& k, dnnl::primitive prim, const dnnl::primitive_desc_base& pd,
                ValueId src, const Md& have, const Md& want, int src_arg = DNNL_ARG_SRC) {
  if (have == want) {
    size_t s = k.add_step(std::move(prim), pd);
    k.bind_value(s, src_arg, src, want);
    return s;
  }
  dnnl::reorder::primitive_desc rpd(c.dnn->engine, have, c.dnn->engine, want);
  int64_t off = k.alloc_scratch(static_cast<int64_t>(want.get_size()));
  size_t r = k.add_step(dnnl::reorder(rpd), rpd);
  k.bind_value(r, DNNL_ARG_FROM, src, have);
  k.bind_scratch(r, DNNL_ARG_TO, off, want);
  k.set_impl("");  // the op's implementation names the kernel, not the reorder's
  size_t s = k.add_step(std::move(prim), pd);
  k.bind_scratch(s, src_arg, off, want);
  return s;
}

Built make_skinny_matmul(const BuildContext& c, const Node& n, const Md& a_md, const Md& b_md, const Tensor* w,
                         ValueId bias, const Md& bias_md, const dnnl::post_ops& ops, const PostOpsPlan& post,
                         const Shape& dst, ValueId out, const Shape& ys);

// Whether a [1, C, 1, ...] value laid out as `md` holds its C elements in a
// row, as a row-major [1, C] would: row-major, or channel blocks (nChw16c)
// one block apart.
bool channels_in_a_row(const Md& md) {
  if (md.data.format_kind != dnnl_blocked || md.data.offset0 != 0) return false;
  const dnnl_blocking_desc_t& b = md.data.format_desc.blocking;
  if (b.inner_nblks == 0) return b.strides[1] == 1;
  return b.inner_nblks == 1 && b.inner_idxs[0] == 1 && b.strides[1] == b.inner_blks[0];
}

// A 1x1 convolution of one 1x1 image (squeeze-excite's two FC layers in
// MobileNetV3, EfficientNet, RegNetY: global pool, then these) is a
// matrix-vector product [1, Cin] x [Cin, Cout]: it runs as one
// (make_skinny_matmul, which streams the weight at the memory's rate)
// rather than through oneDNN's 1x1 convolution, which ran MobileNetV3's
// 960x240 and 240x960 ones at about 12 GB/s (75 us each at 2 threads).
// Element-wise chains only; empty where this does not apply.
Built make_matvec_conv(const BuildContext& c, const FusedGroup& grp, const Tensor* w, ValueId bias,
                       const Tensor* b) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  const Shape& xs = g.type(n.inputs[0]).shape;
  const Shape& ws = w->shape();
  auto ones = [](auto first, auto last) { return std::all_of(first, last, [](int64_t d) { return d == 1; }); };
  const ConvAttrs attrs = ConvAttrs::of(n);
  const Dims pads = attrs.pads;
  if (xs.size() < 3 || xs[0] != 1 || !ones(xs.begin() + 2, xs.end()) || !ones(ws.begin() + 2, ws.end()) ||
      attrs.group != 1 || !std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; }))
    return {};
  if (b && b->dtype() != w->dtype()) return {};
  for (const PostOp& p : grp.post)
    if (p.other != kNoValue) return {};
  if (!channels_in_a_row(c.md_of(n.inputs[0]))) return {};
  dt t = compute_type(c.dtype);
  int64_t cin = ws[1], cout = ws[0];
  Shape dst = {1, cout};
  PostOpsPlan post = make_post_ops(g, grp, dst, c.md_of, -1, t);
  Md a_md = plain_md({1, cin}, t), w_md({cin, cout}, t, Dims{1, cin});  // W(k, n) = w[n, k]
  return make_skinny_matmul(c, n, a_md, w_md, w, bias, plain_md({1, cout}, t), post.ops, post, dst, grp.output(g),
                            g.type(grp.output(g)).shape);
}

// Below this many elements a convolution's SiLU stays oneDNN's post-op: the
// pass's parallel region and second sweep are not paid back (the smallest
// measured gain, 0.33 -> 0.29 ms, was at 131 K elements).
constexpr int64_t kSwishPassMinElements = 16384;

// SiLU in place over `out` (laid out as `md`, whose padding holds zeros,
// which it keeps) after the kernel's last step.
void add_swish_pass(OnednnKernel& k, ValueId out, const Md& md) {
  size_t s = k.add_native_step([](const auto& args) {
    const dnnl::memory& m = args.at(DNNL_ARG_DST);
    swish_in_place(static_cast<float*>(m.get_data_handle()), static_cast<int64_t>(m.get_desc().get_size() / 4));
  });
  k.bind_value(s, DNNL_ARG_DST, out, md);
  k.add_impl_suffix("+native_swish");
}

Built make_conv(const BuildContext& c, const FusedGroup& grp) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  const Tensor* w = constant_of(c, n.inputs[1]);
  ValueId bias = n.inputs.size() > 2 ? n.inputs[2] : kNoValue;
  const Tensor* b = constant_of(c, bias);
  if (!w || (bias != kNoValue && !b)) return {};
  if (Built mv = make_matvec_conv(c, grp, w, bias, b); mv.kernel) return mv;
  const Shape& xs = g.type(n.inputs[0]).shape;
  const Shape& ws = w->shape();
  Shape ys = g.type(grp.output(g)).shape;
  const ConvAttrs attrs = ConvAttrs::of(n);
  int64_t groups = attrs.group;
  size_t sp = xs.size() - 2;
  Dims strides = attrs.strides, dil = attrs.dilations, pads = attrs.pads;
  for (auto& d : dil) d -= 1;
  Dims pl(pads.begin(), pads.begin() + static_cast<long>(sp)), pr(pads.begin() + static_cast<long>(sp), pads.end());
  Shape wdims = ws;
  if (groups > 1) {
    wdims = {groups, ws[0] / groups};
    wdims.insert(wdims.end(), ws.begin() + 1, ws.end());
  }
  // The convolution picks its source layout even when its input already has
  // a blocked one (add_main reorders on a mismatch): taking the producer's
  // layout let resnext's grouped convolutions (nChw8c, AVX2) pull every 1x1
  // convolution after them onto AVX2 kernels, 52 ms of a 73 ms run.
  Md x_have = c.md_of(n.inputs[0]);
  dt t = compute_type(c.dtype);
  Md x_want = any_md(xs, t);
  // The output takes the blocked layout the fast kernels write even for a
  // graph output (the compiler copies that to row-major): asked for a
  // row-major destination, oneDNN falls back to its GEMM-based convolution,
  // 2-5x slower (ResNet-style 64x56x56 3x3: 2.0 ms against 1.0 ms plus a
  // 30 us reorder).
  Md y_md = any_md(ys, t);
  // A residual Add (full-size operand) becomes the sum post-op: the operand
  // is copied into dst first, or already lives there when the planner put dst
  // in its buffer. oneDNN's binary post-op with a blocked full-size operand
  // falls back to its reference convolution (measured 4 s vs 10 ms on a
  // ResNet-18 block), the sum post-op keeps the JIT kernels.
  int sum_index = -1, operand_pos = -1, binaries = 0;
  for (size_t i = 0; i < grp.post.size(); ++i) {
    const PostOp& p = grp.post[i];
    if (p.other == kNoValue) continue;
    if (sum_index < 0 && g.node(p.node).kind == OpKind::kAdd && g.type(p.other).shape == ys) {
      sum_index = static_cast<int>(i);
      operand_pos = static_cast<int>(n.inputs.size()) + binaries;
    }
    ++binaries;
  }
  // A trailing SiLU over an f32 result of some size runs as our own pass
  // after the convolution (native_swish.h: oneDNN's swish post-op made the
  // convolution compute-bound); a small result stays with the post-op.
  bool swish_pass = t == dt::f32 && !grp.post.empty() && grp.post.back().swish && native_swish_available() &&
                    shape_numel(ys) >= kSwishPassMinElements;
  FusedGroup chain = grp;
  if (swish_pass) chain.post.pop_back();
  PostOpsPlan post = make_post_ops(g, chain, ys, c.md_of, sum_index, t);
  // The bias in f32 whatever the data type (oneDNN adds it to the f32
  // accumulators; a bf16 model's bias is widened once, here).
  Md b_md = b ? plain_md({ws[0]}) : Md();
  dnnl::convolution_forward::desc d(prop_kind::forward_inference, algorithm::convolution_direct, x_want,
                                    any_md(wdims, t), b_md, y_md, strides, dil, pl, pr);
  dnnl::convolution_forward::primitive_desc pd(d, make_attr(&post), c.dnn->engine);
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  dnnl::memory wm = k->prepack(*w, plain_md(wdims, tensor_type(w->dtype())), pd.weights_desc());
  if (sum_index >= 0) {
    ValueId res = grp.post[static_cast<size_t>(sum_index)].other;
    dnnl::reorder::primitive_desc rpd(c.dnn->engine, c.md_of(res), c.dnn->engine, pd.dst_desc());
    size_t r = k->add_step(dnnl::reorder(rpd), rpd);
    k->bind_value(r, DNNL_ARG_FROM, res, c.md_of(res));
    k->bind_value(r, DNNL_ARG_TO, grp.output(g), pd.dst_desc());
    k->skip_when_same(r, res, grp.output(g));
    k->set_impl("");
    // dst may take the operand's buffer unless the convolution also reads
    // it (y = b + conv(b)): it would overwrite its own source while reading it.
    if (c.md_of(res) == pd.dst_desc() && std::find(n.inputs.begin(), n.inputs.end(), res) == n.inputs.end())
      k->in_place_input = operand_pos;
  }
  size_t s = add_main(c, *k, dnnl::convolution_forward(pd), pd, n.inputs[0], x_have, pd.src_desc());
  k->bind_fixed(s, DNNL_ARG_WEIGHTS, wm);
  if (b) k->bind_fixed(s, DNNL_ARG_BIAS, k->prepack(*b, plain_md({ws[0]}, tensor_type(b->dtype())), b_md));
  k->bind_value(s, DNNL_ARG_DST, grp.output(g), pd.dst_desc());
  bind_post_ops(*k, s, post);
  if (swish_pass) add_swish_pass(*k, grp.output(g), pd.dst_desc());
  return {std::move(k), pd.dst_desc()};
}

// Weights below this many bytes stay with oneDNN: they are read from cache
// and the product is short either way.
constexpr int64_t kSkinnyMinBytes = 256 << 10;

// A product of at most kSkinnyMaxRows rows by a constant weight, run by
// skinny_matmul.h's kernel (+ bias); the post-op chain (Gemm's alpha and C
// among it), if any, by one binary primitive (+ 0) from the kernel's result
// in scratch to the output. Empty where the kernel does not apply.
Built make_skinny_matmul(const BuildContext& c, const Node& n, const Md& a_md, const Md& b_md, const Tensor* w,
                         ValueId bias, const Md& bias_md, const dnnl::post_ops& ops, const PostOpsPlan& post,
                         const Shape& dst, ValueId out, const Shape& ys) {
  dt t = compute_type(c.dtype);
  DType wt = t == dt::f32 ? DType::kF32 : t == dt::bf16 ? DType::kBF16 : DType::kF16;
  if (!w || w->dtype() != wt || !skinny_supported(wt) || a_md.data.ndims != 2 || b_md.data.ndims != 2) return {};
  int64_t m = a_md.dims()[0], k = a_md.dims()[1], nn = b_md.dims()[1];
  if (m > kSkinnyMaxRows || !is_plain(a_md, {m, k}) || k * nn * dtype_size(wt) < kSkinnyMinBytes) return {};
  if (b_md.data.format_kind != dnnl_blocked || b_md.data.format_desc.blocking.inner_nblks != 0) return {};
  int64_t ks = b_md.data.format_desc.blocking.strides[0], ns = b_md.data.format_desc.blocking.strides[1];
  auto kernel = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  auto packed = std::static_pointer_cast<const SkinnyWeights>(
      kernel->prepack_native(*w, "skinny" + std::to_string(m) + "/" + std::to_string(ks) + "/" + std::to_string(ns),
                             [&]() -> std::pair<std::shared_ptr<const void>, int64_t> {
                               auto p = std::make_shared<const SkinnyWeights>(wt, w->data(), k, nn, ks, ns, m);
                               return {p, p->bytes()};
                             }));
  bool has_bias = bias != kNoValue;
  int threads = omp_get_max_threads();  // fixed at creation, as oneDNN's primitives
  size_t s = kernel->add_native_step([packed, threads, has_bias](const auto& args) {
    packed->run(args.at(DNNL_ARG_SRC).get_data_handle(), has_bias ? args.at(DNNL_ARG_BIAS).get_data_handle() : nullptr,
                args.at(DNNL_ARG_DST).get_data_handle(), /*f32_out=*/false, threads);
  });
  kernel->set_impl(wt == DType::kF32 ? "native:skinny_avx512" : "native:skinny_avx512_bf16");
  kernel->streamed_bytes = packed->weight_bytes();
  kernel->bind_value(s, DNNL_ARG_SRC, n.inputs[0], a_md);
  if (has_bias) kernel->bind_value(s, DNNL_ARG_BIAS, bias, bias_md);
  Md y_md = plain_md(dst, t);
  if (ops.len() == 0) {
    kernel->bind_value(s, DNNL_ARG_DST, out, y_md);
    return {std::move(kernel), plain_md(ys, t)};
  }
  // The product in scratch, in the output's type (the rounding an unfused
  // graph does too): oneDNN 2.6 runs a binary from f32 to bf16 with post-ops
  // in its reference loop (0.27 ms for 2816 columns), bf16 to bf16 in JIT code.
  Md zero_md = plain_md(Shape(dst.size(), 1), t);
  int64_t off = kernel->alloc_scratch(static_cast<int64_t>(y_md.get_size()));
  kernel->bind_scratch(s, DNNL_ARG_DST, off, y_md);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(ops);
  dnnl::binary::desc d(algorithm::binary_add, y_md, zero_md, y_md);
  dnnl::binary::primitive_desc pd(d, attr, c.dnn->engine);
  dnnl::memory zero(zero_md, c.dnn->engine);
  std::memset(zero.get_data_handle(), 0, zero_md.get_size());
  size_t s2 = kernel->add_step(dnnl::binary(pd), pd);
  kernel->bind_scratch(s2, DNNL_ARG_SRC_0, off, y_md);
  kernel->bind_fixed(s2, DNNL_ARG_SRC_1, zero);
  kernel->bind_value(s2, DNNL_ARG_DST, out, y_md);
  bind_post_ops(*kernel, s2, post);
  return {std::move(kernel), plain_md(ys, t)};
}

// MatMul with numpy semantics (1-D promotion, batch broadcast) and Gemm
// (transposes as strides, alpha as a linear post-op, C as bias or an add).
Built make_matmul(const BuildContext& c, const FusedGroup& grp) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  Shape as = g.type(n.inputs[0]).shape, bs = g.type(n.inputs[1]).shape;
  Shape ys = g.type(grp.output(g)).shape;
  Md a_md, b_md;
  Shape dst;
  // A post-op operand's shape against dst.
  std::function<Shape(ValueId)> operand_shape = [&](ValueId v) { return pad_front(g.type(v).shape, dst.size()); };
  float alpha = 1.0f;
  ValueId cval = kNoValue;
  dt t = compute_type(c.dtype);
  if (n.kind == OpKind::kMatMul) {
    if (as.size() == 1) as.insert(as.begin(), 1);
    if (bs.size() == 1) bs.push_back(1);
    size_t r = std::max(as.size(), bs.size());
    as = pad_front(as, r);
    bs = pad_front(bs, r);
    dst = as;
    for (size_t i = 0; i + 2 < r; ++i) dst[i] = std::max(as[i], bs[i]);
    dst[r - 1] = bs[r - 1];
    // A weight without batch dims: the batches are rows of one product
    // ([197, 1, 768] x [768, 2304], as PyTorch's MultiheadAttention exports
    // it, would otherwise be 197 matrix-vector products each reading the
    // whole weight: 6x slower). Post-op operands must collapse with it.
    bool collapse = r > 2 && std::all_of(bs.begin(), bs.end() - 2, [](int64_t d) { return d == 1; });
    auto flat = [&](const Shape& o) {  // o padded to rank r
      bool ones = std::all_of(o.begin(), o.end() - 1, [](int64_t d) { return d == 1; });
      return Shape{ones ? 1 : shape_numel(o) / o.back(), o.back()};
    };
    for (const PostOp& p : grp.post)
      if (collapse && p.other != kNoValue) {
        Shape o = pad_front(g.type(p.other).shape, r);
        collapse = o.size() == r && (std::all_of(o.begin(), o.end() - 1, [](int64_t d) { return d == 1; }) ||
                                     std::equal(o.begin(), o.end() - 1, dst.begin()));
      }
    if (collapse) {
      as = {shape_numel(as) / as.back(), as.back()};
      bs = {bs[r - 2], bs[r - 1]};
      dst = {as[0], dst[r - 1]};
      operand_shape = [&g, flat, r](ValueId v) { return flat(pad_front(g.type(v).shape, r)); };
    }
    a_md = plain_md(as, t);
    b_md = plain_md(bs, t);
  } else {
    const GemmAttrs gemm = GemmAttrs::of(n);
    bool ta = gemm.transA != 0, tb = gemm.transB != 0;
    int64_t m = ta ? as[1] : as[0], kk = ta ? as[0] : as[1], nn = tb ? bs[0] : bs[1];
    a_md = ta ? Md({m, kk}, t, Dims{1, m}) : plain_md({m, kk}, t);
    b_md = tb ? Md({kk, nn}, t, Dims{1, kk}) : plain_md({kk, nn}, t);
    dst = {m, nn};
    alpha = static_cast<float>(gemm.alpha);
    if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
      cval = n.inputs[2];
      if (gemm.beta != 1.0) return {};
    }
  }
  if (shape_numel(dst) != shape_numel(ys)) return {};
  // Post-op operands broadcast against the promoted shape: only when it is the
  // output's own (no 1-D promotion dropped a dim).
  if (!grp.post.empty() && operand_shape(grp.output(g)) != dst) return {};
  const Tensor* wconst = constant_of(c, n.inputs[1]);
  Md b_want = wconst && b_md.data.ndims == 2 ? any_md({b_md.dims()[0], b_md.dims()[1]}, t) : b_md;
  // A bias, one value per output column added right after the product
  // (Gemm's C of shape [N] or [1, N], or the chain's first link adding one:
  // is_column_bias, which the cost model prices by too), is the primitive's
  // bias argument, not a binary post-op: oneDNN 2.6's brgemm matmul adds it
  // with the accumulators. One thread, medians of 600 runs: 128x64x1024
  // 148-163 us bare, 147-165 with the bias argument, 188-192 with the
  // post-op; 128x768x768 1343-1352, 1347-1372, 1352-1407.
  auto is_bias = [&](ValueId v) { return v != kNoValue && is_column_bias(g, n.outputs[0], v); };
  ValueId bias = kNoValue;
  FusedGroup chain = grp;
  if (alpha == 1.0f && cval != kNoValue && is_bias(cval)) {
    bias = cval;
    cval = kNoValue;
  } else if (alpha == 1.0f && cval == kNoValue && !chain.post.empty() &&
             g.node(chain.post[0].node).kind == OpKind::kAdd && is_bias(chain.post[0].other)) {
    bias = chain.post[0].other;
    chain.post.erase(chain.post.begin());
  }
  dnnl::post_ops ops;
  std::vector<std::pair<int, ValueId>> extra;  // binary post-ops before the chain's
  std::vector<Md> extra_md;
  if (alpha != 1.0f) ops.append_eltwise(1.0f, algorithm::eltwise_linear, alpha, 0.0f);
  if (cval != kNoValue) {
    Shape cs = pad_front(g.type(cval).shape, 2);
    Md cm = plain_md(cs, t);
    ops.append_binary(algorithm::binary_add, cm);
    extra.emplace_back(ops.len() - 1, cval);
    extra_md.push_back(cm);
  }
  PostOpsPlan post =
      make_post_ops(g, chain, dst, [&](ValueId v) { return plain_md(operand_shape(v), t); }, -1, t);
  for (int i = 0; i < post.ops.len(); ++i) {
    if (post.ops.kind(i) == dnnl::primitive::kind::eltwise) {
      float scale, a, b;
      algorithm alg;
      post.ops.get_params_eltwise(i, scale, alg, a, b);
      ops.append_eltwise(scale, alg, a, b);
    } else {
      algorithm alg;
      Md m;
      post.ops.get_params_binary(i, alg, m);
      ops.append_binary(alg, m);
    }
  }
  int shift = ops.len() - post.ops.len();
  for (auto& [idx, v] : post.binary_args) idx += shift;
  post.binary_args.insert(post.binary_args.begin(), extra.begin(), extra.end());
  post.binary_mds.insert(post.binary_mds.begin(), extra_md.begin(), extra_md.end());
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(ops);
  Md y_md = plain_md(dst, t);
  Shape bias_shape(dst.size(), 1);
  bias_shape.back() = dst.back();
  Md bias_md = plain_md(bias_shape, t);
  if (Built skinny = make_skinny_matmul(c, n, a_md, b_md, wconst, bias, bias_md, ops, post, dst, grp.output(g), ys);
      skinny.kernel)
    return skinny;
  dnnl::matmul::desc d = bias == kNoValue ? dnnl::matmul::desc(a_md, b_want, y_md)
                                          : dnnl::matmul::desc(a_md, b_want, bias_md, y_md);
  dnnl::matmul::primitive_desc pd(d, attr, c.dnn->engine);
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  size_t s = k->add_step(dnnl::matmul(pd), pd);
  k->bind_value(s, DNNL_ARG_SRC, n.inputs[0], a_md);
  if (bias != kNoValue) k->bind_value(s, DNNL_ARG_BIAS, bias, bias_md);
  if (wconst) k->bind_fixed(s, DNNL_ARG_WEIGHTS, k->prepack(*wconst, b_md, pd.weights_desc()));
  else k->bind_value(s, DNNL_ARG_WEIGHTS, n.inputs[1], b_md);
  k->bind_value(s, DNNL_ARG_DST, grp.output(g), y_md);
  bind_post_ops(*k, s, post);
  return {std::move(k), plain_md(ys, t)};
}

// Pooling windows, with ceil_mode as extra right padding (excluded from
// averages, as ONNX excludes it).
Built make_pool(const BuildContext& c, const FusedGroup& grp) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  if (n.outputs.size() != 1 || !grp.post.empty()) return {};
  const Shape& xs = g.type(n.inputs[0]).shape;
  const Shape& ys = g.type(n.outputs[0]).shape;
  size_t sp = xs.size() - 2;
  Dims kernel, strides, dil, pl, pr;
  algorithm alg = algorithm::pooling_max;
  if (n.kind == OpKind::kGlobalAveragePool || n.kind == OpKind::kGlobalMaxPool) {
    kernel.assign(xs.begin() + 2, xs.end());
    strides.assign(sp, 1);
    dil.assign(sp, 0);
    pl.assign(sp, 0);
    pr.assign(sp, 0);
    if (n.kind == OpKind::kGlobalAveragePool) alg = algorithm::pooling_avg_exclude_padding;
  } else {
    const WindowAttrs window = WindowAttrs::of(n);
    kernel = window.kernel_shape;
    strides = window.strides;
    dil = window.dilations;
    const auto& pads = window.pads;
    pl.assign(pads.begin(), pads.begin() + static_cast<long>(sp));
    pr.assign(pads.begin() + static_cast<long>(sp), pads.end());
    bool include_pad = n.kind == OpKind::kAveragePool && AveragePoolAttrs::of(n).count_include_pad != 0;
    if (n.kind == OpKind::kAveragePool)
      alg = include_pad ? algorithm::pooling_avg_include_padding : algorithm::pooling_avg_exclude_padding;
    for (size_t i = 0; i < sp; ++i) {
      int64_t need = (ys[i + 2] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - xs[i + 2] - pl[i];
      if (need > pr[i]) {
        if (include_pad) return {};  // ceil-mode windows would count the extra padding
        pr[i] = need;
      }
      dil[i] -= 1;
    }
  }
  Md x_md = c.md_of(n.inputs[0]);
  dt t = compute_type(c.dtype);
  Md y_md = c.plain_output || is_plain(x_md, xs) ? plain_md(ys, t) : any_md(ys, t);
  dnnl::pooling_v2_forward::desc d(prop_kind::forward_inference, alg, x_md, y_md, strides, kernel, dil, pl, pr);
  dnnl::pooling_v2_forward::primitive_desc pd(d, make_attr(nullptr), c.dnn->engine);
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  size_t s = k->add_step(dnnl::pooling_v2_forward(pd), pd);
  k->bind_value(s, DNNL_ARG_SRC, n.inputs[0], x_md);
  k->bind_value(s, DNNL_ARG_DST, n.outputs[0], pd.dst_desc());
  return {std::move(k), pd.dst_desc()};
}

// Pow by 2 or 0.5 as oneDNN's square and sqrt. Not other exponents: its
// eltwise_pow calls powf per element (gpt2's x^3: 3.4 ms per 128x3072 tensor);
// the native kernel multiplies instead.
std::optional<EltwiseSpec> constant_pow(const Graph& g, const Node& n) {
  if (n.kind != OpKind::kPow) return std::nullopt;
  const Tensor* e = g.value(n.inputs[1]).constant ? &*g.value(n.inputs[1]).constant : nullptr;
  if (!e || e->numel() != 1 || g.type(n.inputs[0]).shape != g.type(n.outputs[0]).shape) return std::nullopt;
  double p = e->get_double(0);
  if (p == 2.0) return EltwiseSpec{algorithm::eltwise_square};
  if (p == 0.5) return EltwiseSpec{algorithm::eltwise_sqrt};
  return std::nullopt;
}

// The oneDNN tag of a channel-blocked or channels-last layout, if md has one.
std::optional<dnnl::memory::format_tag> layout_tag(const Md& md) {
  using tag = dnnl::memory::format_tag;
  for (tag t : {tag::nChw16c, tag::nChw8c, tag::nhwc, tag::nCdhw16c, tag::nCdhw8c, tag::ndhwc, tag::nCw16c,
                tag::nCw8c, tag::nwc}) {
    try {
      if (Md(md.dims(), md.data_type(), t) == md) return t;
    } catch (const dnnl::error&) {
      // a tag of another rank
    }
  }
  return std::nullopt;
}

// The 16-channel blocking of a rank (4: nChw16c, 5: nCdhw16c, 3: nCw16c).
std::optional<dnnl::memory::format_tag> blocked16_tag(size_t rank) {
  using tag = dnnl::memory::format_tag;
  if (rank == 4) return tag::nChw16c;
  if (rank == 5) return tag::nCdhw16c;
  if (rank == 3) return tag::nCw16c;
  return std::nullopt;
}

bool is_reference_impl(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

// Element-wise ops keep their input's layout; a graph output must be plain.
Built make_binary_or_eltwise(const BuildContext& c, const FusedGroup& grp) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  Shape ys = g.type(n.outputs[0]).shape;
  const Shape ys_final = g.type(grp.output(g)).shape;
  if (ys.empty()) ys = {1};
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  ValueId src0 = n.inputs[0];
  Md src0_md;
  size_t s;
  dnnl::primitive_attr attr;
  dt t = compute_type(c.dtype);
  // HardSigmoid has no oneDNN 2.6 algorithm: it is its own first link
  // (make_post_ops: linear, then clip) after an identity.
  bool hard_sigmoid = n.kind == OpKind::kHardSigmoid;
  FusedGroup links = grp;
  if (hard_sigmoid) links.post.insert(links.post.begin(), PostOp{grp.root});
  PostOpsPlan post = make_post_ops(g, links, ys, c.md_of, -1, t);
  attr = make_attr(&post);
  std::optional<EltwiseSpec> pow = constant_pow(g, n);
  if (n.inputs.size() == 1 || pow) {
    std::optional<EltwiseSpec> e =
        pow ? pow : hard_sigmoid ? EltwiseSpec{algorithm::eltwise_linear, 1.0f, 0.0f} : eltwise_spec(n);
    if (!e) return {};
    src0_md = c.md_of(src0);
    dnnl::eltwise_forward::desc d(prop_kind::forward_inference, e->alg, src0_md, e->alpha, e->beta);
    dnnl::eltwise_forward::primitive_desc pd(d, attr, c.dnn->engine);
    // oneDNN 2.6's reference eltwise (a shape its JIT code does not take,
    // such as 3 elements) drops the linear post-op: ONNX's hardsigmoid
    // example came out clipped at 0. The native kernel runs those.
    if (hard_sigmoid && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return {};
    s = k->add_step(dnnl::eltwise_forward(pd), pd);
    k->bind_value(s, DNNL_ARG_SRC, src0, src0_md);
  } else {
    if (n.inputs.size() != 2 || !is_binary_post_op(n.kind)) return {};
    ValueId src1 = n.inputs[1];
    Shape s0 = pad_front(g.type(src0).shape, ys.size()), s1 = pad_front(g.type(src1).shape, ys.size());
    if (s0 != ys) {
      // oneDNN broadcasts only the second operand.
      bool commutative = n.kind == OpKind::kAdd || n.kind == OpKind::kMul || n.kind == OpKind::kMax ||
                         n.kind == OpKind::kMin;
      if (!commutative || s1 != ys) return {};
      std::swap(src0, src1);
      std::swap(s0, s1);
    }
    src0_md = c.md_of(src0);
    if (src0_md.data.ndims != static_cast<int>(ys.size())) src0_md = plain_md(ys, t);
    Md src1_md = s1 == ys ? c.md_of(src1) : plain_md(s1, t);
    if (src1_md.data.ndims != static_cast<int>(s1.size())) src1_md = plain_md(s1, t);
    if (s1 == ys && src1_md != src0_md) return {};
    algorithm alg = n.kind == OpKind::kAdd   ? algorithm::binary_add
                    : n.kind == OpKind::kSub ? algorithm::binary_sub
                    : n.kind == OpKind::kMul ? algorithm::binary_mul
                    : n.kind == OpKind::kDiv ? algorithm::binary_div
                    : n.kind == OpKind::kMax ? algorithm::binary_max
                                             : algorithm::binary_min;
    dnnl::binary::desc d(alg, src0_md, src1_md, src0_md);
    dnnl::binary::primitive_desc pd(d, attr, c.dnn->engine);
    // oneDNN 2.6 runs a blocked operand against a row-major broadcast one (an
    // SE block's x * scale[1, C, 1, 1]) in its reference implementation, and
    // any 8-channel-blocked operands too (grouped convolutions write them):
    // 20-50x slower than its JIT one. That one needs both operands in the
    // same blocking, of 16 channels on AVX-512: the small broadcast operand
    // is reordered (prepacked when constant) into src0's blocking, or both
    // into 16-channel blocks, and the output keeps that layout.
    Md x_md = src0_md, b_md = src1_md;
    if (grp.post.empty() && !is_plain(src0_md, ys) && is_reference_impl(pd))
      if (std::optional<dnnl::memory::format_tag> t0 = layout_tag(src0_md))
        for (std::optional<dnnl::memory::format_tag> tag : {t0, blocked16_tag(ys.size())}) {
          if (!tag) continue;
          Md xt(to_dims(ys), t, *tag), bt(to_dims(s1), t, *tag);
          dnnl::binary::primitive_desc pdt(dnnl::binary::desc(alg, xt, bt, xt), attr, c.dnn->engine);
          if (is_reference_impl(pdt)) continue;
          pd = pdt;
          x_md = xt;
          b_md = bt;
          break;
        }
    // Operands reordered into the kernel's scratch, or bound as they are.
    auto operand = [&](ValueId v, const Md& have, const Md& want) -> std::optional<int64_t> {
      if (have == want) return std::nullopt;
      dnnl::reorder::primitive_desc rpd(c.dnn->engine, have, c.dnn->engine, want);
      int64_t off = k->alloc_scratch(static_cast<int64_t>(want.get_size()));
      size_t r = k->add_step(dnnl::reorder(rpd), rpd);
      k->bind_value(r, DNNL_ARG_FROM, v, have);
      k->bind_scratch(r, DNNL_ARG_TO, off, want);
      k->set_impl("");
      return off;
    };
    std::optional<int64_t> x_off = operand(src0, src0_md, x_md);
    const Tensor* b_const = b_md != src1_md ? constant_of(c, src1) : nullptr;
    std::optional<int64_t> b_off = b_const ? std::nullopt : operand(src1, src1_md, b_md);
    s = k->add_step(dnnl::binary(pd), pd);
    if (x_off) k->bind_scratch(s, DNNL_ARG_SRC_0, *x_off, x_md);
    else k->bind_value(s, DNNL_ARG_SRC_0, src0, x_md);
    if (b_const) k->bind_fixed(s, DNNL_ARG_SRC_1, k->prepack(*b_const, src1_md, b_md));
    else if (b_off) k->bind_scratch(s, DNNL_ARG_SRC_1, *b_off, b_md);
    else k->bind_value(s, DNNL_ARG_SRC_1, src1, b_md);
    if (x_md != src0_md) {
      if (c.plain_output) return {};
      k->bind_value(s, DNNL_ARG_DST, grp.output(g), x_md);
      return {std::move(k), x_md};  // read from scratch: nothing to share a buffer with
    }
  }
  if (c.plain_output && !is_plain(src0_md, ys)) return {};
  k->bind_value(s, DNNL_ARG_DST, grp.output(g), src0_md);
  bind_post_ops(*k, s, post);
  // Reading and writing the same index: the output may take src0's buffer.
  k->in_place_input = src0 == n.inputs[0] ? 0 : 1;
  (void)ys_final;
  return {std::move(k), src0_md};
}

// Every tensor the group reads or writes (the root's inputs, the post-ops'
// operands, the output) has the group's type. Not the root's other outputs:
// only LayerNormalization has any (its Mean and InvStdDev, f32 in a 16-bit
// model), and its kernel is built only where nothing reads them.
bool all_of_type(const Graph& g, const FusedGroup& grp, DType t) {
  const Node& n = g.node(grp.root);
  for (ValueId v : n.inputs)
    if (v != kNoValue && g.type(v).dtype != t) return false;
  if (g.type(n.outputs[0]).dtype != t) return false;
  for (const PostOp& p : grp.post)
    if ((p.other != kNoValue && g.type(p.other).dtype != t) || g.type(grp.output(g)).dtype != t) return false;
  return true;
}

}  // namespace

dnnl::memory::data_type compute_type(DType dtype) { return dtype == DType::kBF16 ? dt::bf16 : dt::f32; }

Built make_onednn_kernel(const BuildContext& c, const FusedGroup& grp) {
  const Node& n = c.g.node(grp.root);
  bool typed = c.dtype == DType::kF32 || c.dtype == DType::kBF16 || c.dtype == DType::kF16;
  if (!typed || !all_of_type(c.g, grp, c.dtype)) return {};
  switch (n.kind) {
    case OpKind::kConv: return make_conv(c, grp);
    case OpKind::kMatMul:
    case OpKind::kGemm: return make_matmul(c, grp);
    case OpKind::kMaxPool:
    case OpKind::kAveragePool:
    case OpKind::kGlobalAveragePool:
    case OpKind::kGlobalMaxPool: return make_pool(c, grp);
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax: return make_softmax(c, grp);
    case OpKind::kLayerNormalization: return make_layer_norm(c, grp);
    case OpKind::kBatchNormalization: return make_batch_norm(c, grp);
    case OpKind::kConcat: return make_concat(c, grp);
    case OpKind::kReduceSum: case OpKind::kReduceMean: case OpKind::kReduceMax: case OpKind::kReduceMin:
    case OpKind::kReduceProd: case OpKind::kReduceL2: case OpKind::kReduceSumSquare:
      return make_reduce(c, grp);
    default:
      return make_binary_or_eltwise(c, grp);
  }
}

std::unique_ptr<OnednnKernel> make_reorder(std::shared_ptr<Onednn> dnn, ValueId from, const Md& from_md, ValueId to,
                                           const Md& to_md) {
  auto k = std::make_unique<OnednnKernel>(dnn);
  dnnl::reorder::primitive_desc pd(k->dnn().engine, from_md, k->dnn().engine, to_md);
  size_t s = k->add_step(dnnl::reorder(pd), pd);
  k->bind_value(s, DNNL_ARG_FROM, from, from_md);
  k->bind_value(s, DNNL_ARG_TO, to, to_md);
  k->inputs = {from};
  k->outputs = {to};
  k->op = "Reorder";
  return k;
}

}  // namespace tessera::runtime::cpu
