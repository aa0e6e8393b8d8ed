// Concat of values in oneDNN's layouts. Row-major inputs take the native
// strided copy (native_kernels.cc); channels-last and channel-blocked ones
// are concatenated in their layout, by rows of contiguous bytes where the
// layout has them, else by oneDNN's concat.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "graph/attr_views.h"
#include "graph/ops/op_util.h"
#include "runtime/cpu/onednn_ops_internal.h"

namespace tessera::runtime::cpu::detail {
namespace {

using tag = dnnl::memory::format_tag;

// How a layout stores a channel concatenation's pieces (axis 1): as `rows`
// rows of the destination, each holding every source's channels times
// `inner` elements one after another, like row-major data around the axis.
// Channels-last (nhwc, ndhwc, nwc): a row per batch index and position,
// inner 1. Channel-blocked (nChw16c and kin) with whole blocks: a row per
// batch index, inner the spatial size. `block`: the channel multiple every
// source must have (1 for channels-last).
struct RowLayout {
  tag t;
  bool channels_last;
  int64_t block;
};

std::optional<RowLayout> row_layout(const Md& md) {
  for (RowLayout r : {RowLayout{tag::nhwc, true, 1}, {tag::ndhwc, true, 1}, {tag::nwc, true, 1},
                      {tag::nChw16c, false, 16}, {tag::nChw8c, false, 8}, {tag::nCdhw16c, false, 16},
                      {tag::nCdhw8c, false, 8}, {tag::nCw16c, false, 16}, {tag::nCw8c, false, 8}}) {
    try {
      if (Md(md.dims(), md.data_type(), r.t) == md) return r;
    } catch (const dnnl::error&) {
      // a tag of another rank
    }
  }
  return std::nullopt;
}

// A channel concatenation as row copies: row r of source i (bytes[i] long)
// goes to row r of the destination at offset[i].
struct RowConcat {
  int64_t rows = 0, dst_row = 0;
  std::vector<int64_t> bytes, offset;

  void run(uint8_t* dst, const std::vector<const uint8_t*>& srcs) const {
    const int64_t pieces = static_cast<int64_t>(srcs.size());
    // Rows across the threads; fewer rows than threads (batch 1 in a
    // channel-blocked layout: one row) take the pieces across them instead.
    if (rows >= omp_get_max_threads()) {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < pieces; ++i)
          std::memcpy(dst + r * dst_row + offset[i], srcs[i] + r * bytes[i], static_cast<size_t>(bytes[i]));
    } else {
#pragma omp parallel for schedule(dynamic)
      for (int64_t k = 0; k < rows * pieces; ++k) {
        int64_t r = k / pieces, i = k % pieces;
        std::memcpy(dst + r * dst_row + offset[i], srcs[i] + r * bytes[i], static_cast<size_t>(bytes[i]));
      }
    }
  }
};

// The row copies of a channel concatenation whose sources and destination
// share one row layout, or nothing.
std::optional<RowConcat> row_concat(const std::vector<Md>& srcs, const Md& dst, int axis) {
  std::optional<RowLayout> layout = row_layout(dst);
  if (axis != 1 || !layout) return std::nullopt;
  dnnl::memory::dims dd = dst.dims();
  int64_t spatial = 1;
  for (size_t i = 2; i < dd.size(); ++i) spatial *= dd[i];
  const int64_t elem = static_cast<int64_t>(dnnl::memory::data_type_size(dst.data_type()));
  const int64_t inner = layout->channels_last ? 1 : spatial;
  RowConcat rc;
  rc.rows = layout->channels_last ? dd[0] * spatial : dd[0];
  rc.dst_row = dd[1] * inner * elem;
  int64_t at = 0;
  for (const Md& s : srcs) {
    std::optional<RowLayout> l = row_layout(s);
    int64_t channels = s.dims()[1];
    if (!l || l->t != layout->t || s.data_type() != dst.data_type() || channels % layout->block != 0)
      return std::nullopt;
    rc.bytes.push_back(channels * inner * elem);
    rc.offset.push_back(at);
    at += rc.bytes.back();
  }
  return rc;
}

// A BatchNormalization's inference form per channel, y = x * scale + shift
// (scale = gamma / sqrt(var + eps), shift = beta - mean * scale), and its
// Relu link: the norm links a concatenation's group may carry
// (form_groups' concat_norms). Empty unless its parameters are f32 constants.
struct ChannelAffine {
  std::vector<float> scale, shift;
  bool relu = false;
};

std::optional<ChannelAffine> norm_links(const BuildContext& c, const FusedGroup& grp, int64_t channels) {
  const Graph& g = c.g;
  if (grp.post.empty() || grp.post.size() > 2) return std::nullopt;
  const Node& bn = g.node(grp.post[0].node);
  if (bn.kind != OpKind::kBatchNormalization || bn.inputs.size() != 5) return std::nullopt;
  ChannelAffine a;
  if (grp.post.size() == 2) {
    if (g.node(grp.post[1].node).kind != OpKind::kRelu) return std::nullopt;
    a.relu = true;
  }
  const Tensor* p[4];
  for (int i = 0; i < 4; ++i) {
    p[i] = constant_of(c, bn.inputs[static_cast<size_t>(i) + 1]);
    if (!p[i] || p[i]->dtype() != DType::kF32 || p[i]->numel() != channels) return std::nullopt;
  }
  const double eps = BatchNormAttrs::of(bn).epsilon;
  const float *gamma = p[0]->data_as<float>(), *beta = p[1]->data_as<float>(), *mean = p[2]->data_as<float>(),
              *var = p[3]->data_as<float>();
  for (int64_t ch = 0; ch < channels; ++ch) {
    double sc = gamma[ch] / std::sqrt(static_cast<double>(var[ch]) + eps);
    a.scale.push_back(static_cast<float>(sc));
    a.shift.push_back(static_cast<float>(beta[ch] - mean[ch] * sc));
  }
  return a;
}

// Row r of source i, `count` f32 elements whose first is channel `first` of
// the destination, normalized into `to`. Channels-last rows are channels
// in a row; channel-blocked ones are `inner` positions of `block` channels
// per block.
void affine_piece(float* to, const float* from, int64_t count, int64_t first, int64_t inner, int64_t block,
                  const ChannelAffine& a) {
  const float* scale = a.scale.data() + first;
  const float* shift = a.shift.data() + first;
  const float low = a.relu ? 0.0f : -std::numeric_limits<float>::infinity();
  if (block == 1) {
    for (int64_t j = 0; j < count; ++j) to[j] = std::max(low, from[j] * scale[j] + shift[j]);
    return;
  }
  for (int64_t b = 0; b * inner * block < count; ++b)
    for (int64_t x = 0; x < inner; ++x) {
      const int64_t at = (b * inner + x) * block;
      for (int64_t l = 0; l < block; ++l)
        to[at + l] = std::max(low, from[at + l] * scale[b * block + l] + shift[b * block + l]);
    }
}

// Concat -> BatchNormalization (-> Relu) in one pass over f32 sources that
// share one row layout: each piece is normalized on its way into the
// result, which the concatenation never is stored as. densenet121, 1
// thread: see docs/performance_issue40.md (third pass).
Built make_concat_norm(const BuildContext& c, const FusedGroup& grp, const std::vector<Md>& srcs) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  const Shape& ys = g.type(n.outputs[0]).shape;
  int axis = static_cast<int>(ops::normalize_axis(ConcatAttrs::of(n).axis, static_cast<int64_t>(ys.size())));
  if (axis != 1 || ys.size() < 3 || c.dtype != DType::kF32 || c.plain_output) return {};
  std::optional<ChannelAffine> affine = norm_links(c, grp, ys[1]);
  if (!affine) return {};
  dnnl::concat::primitive_desc pd(axis, srcs, c.dnn->engine, make_attr(nullptr));
  Md dst = pd.dst_desc();
  std::optional<RowConcat> rows = row_concat(srcs, dst, axis);
  std::optional<RowLayout> layout = row_layout(dst);
  if (!rows || !layout) return {};
  int64_t spatial = 1;
  for (size_t i = 2; i < ys.size(); ++i) spatial *= ys[i];
  const int64_t inner = layout->channels_last ? 1 : spatial, block = layout->block;
  std::vector<int64_t> first;  // each source's first channel
  int64_t at = 0;
  for (ValueId v : n.inputs) {
    first.push_back(at);
    at += g.type(v).shape[1];
  }
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  size_t s = k->add_native_step([rc = *rows, a = std::move(*affine), first, inner, block](const auto& args) {
    const int64_t pieces = static_cast<int64_t>(rc.bytes.size());
    std::vector<const float*> from;
    for (int64_t i = 0; i < pieces; ++i)
      from.push_back(static_cast<const float*>(args.at(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)).get_data_handle()));
    uint8_t* dst = static_cast<uint8_t*>(args.at(DNNL_ARG_DST).get_data_handle());
    auto piece = [&](int64_t r, int64_t i) {
      const int64_t count = rc.bytes[i] / 4;
      affine_piece(reinterpret_cast<float*>(dst + r * rc.dst_row + rc.offset[i]), from[i] + r * count, count,
                   first[i], inner, block, a);
    };
    if (rc.rows >= omp_get_max_threads()) {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rc.rows; ++r)
        for (int64_t i = 0; i < pieces; ++i) piece(r, i);
    } else {
#pragma omp parallel for schedule(dynamic)
      for (int64_t q = 0; q < rc.rows * pieces; ++q) piece(q / pieces, q % pieces);
    }
  });
  k->set_impl(affine->relu ? "native:concat_rows+bn_relu" : "native:concat_rows+bn");
  for (size_t i = 0; i < srcs.size(); ++i)
    k->bind_value(s, DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), n.inputs[i], srcs[i]);
  k->bind_value(s, DNNL_ARG_DST, grp.output(g), dst);
  return {std::move(k), dst};
}

}  // namespace

// Blocked channel concatenation (inception's branches) without reordering
// every branch to row-major and back (44 reorders and 11 native concats, 1.8
// ms of a 54 ms inception_v3 run), by rows of contiguous bytes where the
// layout has them (DenseNet-121: 62 concatenations of up to 25 sources in
// nhwc, 3.7 ms per run in oneDNN's simple concat, 2.5 ms as rows, at 1
// thread); elsewhere by oneDNN's concat.
Built make_concat(const BuildContext& c, const FusedGroup& grp) {
  const Graph& g = c.g;
  const Node& n = g.node(grp.root);
  const Shape& ys = g.type(n.outputs[0]).shape;
  if (ys.empty() || shape_numel(ys) == 0) return {};
  int axis = static_cast<int>(ops::normalize_axis(ConcatAttrs::of(n).axis, static_cast<int64_t>(ys.size())));
  std::vector<Md> srcs;
  bool all_plain = true;
  for (ValueId v : n.inputs) {
    const Shape& s = g.type(v).shape;
    if (shape_numel(s) == 0) return {};  // oneDNN takes no empty sources
    srcs.push_back(c.md_of(v));
    all_plain = all_plain && is_plain(srcs.back(), s);
  }
  if (!grp.post.empty()) return all_plain ? Built{} : make_concat_norm(c, grp, srcs);
  // Row-major inputs: the native strided copy (runtime/cpu/native_kernels.cc),
  // a copy per input of contiguous runs. oneDNN's simple concat copies them
  // at about a twentieth of that: 0.63 ms against 0.03 ms for two
  // 1x64x56x56 f32 inputs on one Zen 5 core.
  if (all_plain) return {};
  dnnl::primitive_attr attr = make_attr(nullptr);
  std::optional<dnnl::concat::primitive_desc> pd;
  if (c.plain_output) pd.emplace(plain_md(ys, compute_type(c.dtype)), axis, srcs, c.dnn->engine, attr);
  else pd.emplace(axis, srcs, c.dnn->engine, attr);
  Md dst = pd->dst_desc();
  // Sources in different layouts (ShuffleNet's pass-through half, a Slice
  // in row-major, beside its branch in nhwc) get oneDNN's reference concat:
  // reading them row-major for the native strided copy instead measured no
  // faster (shufflenet_v2, 1 thread: 13 concats 0.24 -> 0.13 ms, 13 more
  // reorders +0.15 ms).
  std::optional<RowConcat> rows = row_concat(srcs, dst, axis);
  auto k = std::make_unique<OnednnKernel>(c.dnn, c.weights_from);
  size_t s;
  if (rows) {
    s = k->add_native_step([rc = *rows](const auto& args) {
      std::vector<const uint8_t*> from;
      for (size_t i = 0; i < rc.bytes.size(); ++i)
        from.push_back(static_cast<const uint8_t*>(args.at(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)).get_data_handle()));
      rc.run(static_cast<uint8_t*>(args.at(DNNL_ARG_DST).get_data_handle()), from);
    });
    k->set_impl("native:concat_rows");
  } else {
    s = k->add_step(dnnl::concat(*pd), *pd);
  }
  for (size_t i = 0; i < srcs.size(); ++i)
    k->bind_value(s, DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), n.inputs[i], srcs[i]);
  k->bind_value(s, DNNL_ARG_DST, n.outputs[0], dst);
  return {std::move(k), dst};
}

}  // namespace tessera::runtime::cpu::detail
