#include "runtime/cpu/onednn_kernel.h"

#include <algorithm>
#include <limits>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "runtime/memory_planner.h"

namespace tessera::runtime::cpu {

using dnnl::algorithm;

dnnl::memory::dims to_dims(const Shape& shape) {
  if (shape.empty()) return {1};
  return dnnl::memory::dims(shape.begin(), shape.end());
}

Md plain_md(const Shape& shape, dnnl::memory::data_type dt) {
  dnnl::memory::dims dims = to_dims(shape);
  dnnl::memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * std::max<int64_t>(dims[i + 1], 1);
  return Md(dims, dt, strides);
}

bool is_plain(const Md& md, const Shape& shape) { return md == plain_md(shape, md.data_type()); }

Shape pad_front(const Shape& shape, size_t rank) {
  Shape s(rank > shape.size() ? rank - shape.size() : 0, 1);
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}

void OnednnKernel::run(ExecContext& ctx) {
  for (Step& s : ctx.one_thread && !one_thread_steps_.empty() ? one_thread_steps_ : steps_) {
    if (s.same.first != kNoValue && ctx.ptr[s.same.first] == ctx.ptr[s.same.second]) continue;
    for (Binding& b : s.bindings) {
      if (b.source == Binding::Source::kValue) b.mem.set_data_handle(ctx.ptr[b.value]);
      else if (b.source == Binding::Source::kScratch) b.mem.set_data_handle(ctx.scratch + b.offset);
    }
    if (s.native) s.native(s.args);
    else s.prim.execute(dnn_->stream, s.args);
  }
  dnn_->stream.wait();
}

int64_t OnednnKernel::alloc_scratch(int64_t bytes) {
  int64_t off = scratch_;
  scratch_ += (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  return off;
}

size_t OnednnKernel::add_step(dnnl::primitive prim, const dnnl::primitive_desc_base& pd) {
  steps_.push_back({std::move(prim), nullptr, {}, {}});
  size_t step = steps_.size() - 1;
  Md sp = pd.scratchpad_desc();
  if (sp.get_size() > 0) bind_scratch(step, DNNL_ARG_SCRATCHPAD, alloc_scratch(static_cast<int64_t>(sp.get_size())), sp);
  if (impl_.empty()) impl_ = pd.impl_info_str();
  return step;
}

size_t OnednnKernel::add_native_step(NativeStep fn) {
  steps_.push_back({dnnl::primitive(), std::move(fn), {}, {}});
  return steps_.size() - 1;
}

void OnednnKernel::bind_value(size_t step, int arg, ValueId v, const Md& md) {
  dnnl::memory mem(md, dnn_->engine, DNNL_MEMORY_NONE);
  steps_[step].bindings.push_back({Binding::Source::kValue, v, 0, mem});
  steps_[step].args[arg] = mem;
}

void OnednnKernel::bind_scratch(size_t step, int arg, int64_t offset, const Md& md) {
  dnnl::memory mem(md, dnn_->engine, DNNL_MEMORY_NONE);
  steps_[step].bindings.push_back({Binding::Source::kScratch, kNoValue, offset, mem});
  steps_[step].args[arg] = mem;
}

void OnednnKernel::remap_value(ValueId from, ValueId to) {
  for (std::vector<Step>* steps : {&steps_, &one_thread_steps_})
    for (Step& s : *steps) {
      for (Binding& b : s.bindings)
        if (b.source == Binding::Source::kValue && b.value == from) b.value = to;
      if (s.same.first == from) s.same.first = to;
      if (s.same.second == from) s.same.second = to;
    }
  for (ValueId& v : inputs)
    if (v == from) v = to;
}

bool OnednnKernel::reads(ValueId v) const {
  for (const Step& s : one_thread_steps_)
    for (const Binding& b : s.bindings)
      if (b.source == Binding::Source::kValue && b.value == v) return true;
  for (const Step& s : steps_)
    for (const Binding& b : s.bindings)
      if (b.source == Binding::Source::kValue && b.value == v) return true;
  return false;
}

bool OnednnKernel::adopt_one_thread_form(OnednnKernel& other) {
  if (other.steps_.size() != steps_.size()) return false;
  auto is_bound = [](const Step& s, const dnnl::memory& m) {
    for (const Binding& b : s.bindings)
      if (b.mem.get() == m.get()) return true;
    return false;
  };
  // Fixed arguments (prepacked weights, bias) must match ours to be shared.
  std::vector<std::unordered_map<int, dnnl::memory>> shared(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& theirs = other.steps_[i];
    for (const auto& [arg, mem] : theirs.args) {
      if (is_bound(theirs, mem)) continue;
      auto mine = steps_[i].args.find(arg);
      if (mine == steps_[i].args.end() || is_bound(steps_[i], mine->second) ||
          mine->second.get_desc() != mem.get_desc())
        return false;
      shared[i][arg] = mine->second;
    }
  }
  for (size_t i = 0; i < steps_.size(); ++i)
    for (auto& [arg, mem] : shared[i]) other.steps_[i].args[arg] = mem;
  one_thread_steps_ = std::move(other.steps_);
  other.steps_.clear();
  other.owned_.clear();  // its prepacked copies, if any: ours serve both forms
  other.owned_sources_.clear();
  other.native_owned_.clear();
  scratch_ = std::max(scratch_, other.scratch_);
  return true;
}

void OnednnKernel::bind_fixed(size_t step, int arg, const dnnl::memory& mem) { steps_[step].args[arg] = mem; }

dnnl::memory OnednnKernel::prepack(const Tensor& t, const Md& from, const Md& to) {
  const void* data = t.data();
  if (weights_from_)
    for (size_t i = 0; i < weights_from_->owned_.size(); ++i)
      if (weights_from_->owned_sources_[i] == data && weights_from_->owned_[i].get_desc() == to)
        return weights_from_->owned_[i];
  dnnl::memory src(from, dnn_->engine, const_cast<void*>(data));
  dnnl::memory dst(to, dnn_->engine);
  dnnl::reorder(src, dst).execute(dnn_->stream, src, dst);
  dnn_->stream.wait();
  t.drop_mapped_pages();
  owned_.push_back(dst);
  owned_sources_.push_back(data);
  weight_bytes_ += static_cast<int64_t>(to.get_size());
  return dst;
}

std::shared_ptr<const void> OnednnKernel::prepack_native(const Tensor& t, const std::string& format,
                                                         const NativePack& pack) {
  const void* data = t.data();
  for (const OnednnKernel* k : {weights_from_, static_cast<const OnednnKernel*>(this)})
    if (k)
      for (const NativePacked& p : k->native_owned_)
        if (p.source == data && p.format == format) return p.packed;
  auto [packed, bytes] = pack();
  t.drop_mapped_pages();
  native_owned_.push_back({data, format, packed});
  weight_bytes_ += bytes;
  return packed;
}

std::optional<EltwiseSpec> eltwise_spec(const Node& n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  switch (n.kind) {
    case OpKind::kRelu: return EltwiseSpec{algorithm::eltwise_relu};
    case OpKind::kLeakyRelu: return EltwiseSpec{algorithm::eltwise_relu, static_cast<float>(LeakyReluAttrs::of(n).alpha)};
    case OpKind::kElu: return EltwiseSpec{algorithm::eltwise_elu, static_cast<float>(EluAttrs::of(n).alpha)};
    case OpKind::kSigmoid: return EltwiseSpec{algorithm::eltwise_logistic};
    case OpKind::kTanh: return EltwiseSpec{algorithm::eltwise_tanh};
    case OpKind::kGelu:
      return EltwiseSpec{gelu_tanh_form(GeluAttrs::of(n)) ? algorithm::eltwise_gelu_tanh : algorithm::eltwise_gelu_erf};
    case OpKind::kHardSwish: return EltwiseSpec{algorithm::eltwise_hardswish};
    case OpKind::kSoftplus: return EltwiseSpec{algorithm::eltwise_soft_relu};
    case OpKind::kSqrt: return EltwiseSpec{algorithm::eltwise_sqrt};
    case OpKind::kAbs: return EltwiseSpec{algorithm::eltwise_abs};
    case OpKind::kExp: return EltwiseSpec{algorithm::eltwise_exp};
    case OpKind::kLog: return EltwiseSpec{algorithm::eltwise_log};
    case OpKind::kRound: return EltwiseSpec{algorithm::eltwise_round};
    case OpKind::kNeg: return EltwiseSpec{algorithm::eltwise_linear, -1.0f, 0.0f};
    case OpKind::kReciprocal: return EltwiseSpec{algorithm::eltwise_pow, 1.0f, -1.0f};
    case OpKind::kClip: {
      // clip_v2 is min(max(x, alpha), beta); infinite bounds become the
      // largest finite floats, which clip nothing that is finite.
      const ClipAttrs clip = ClipAttrs::of(n);
      float lo = static_cast<float>(clip.min), hi = static_cast<float>(clip.max);
      if (lo == -kInf) lo = std::numeric_limits<float>::lowest();
      if (hi == kInf) hi = std::numeric_limits<float>::max();
      return EltwiseSpec{algorithm::eltwise_clip_v2, lo, hi};
    }
    default:
      return std::nullopt;
  }
}

namespace {
std::optional<algorithm> binary_alg(OpKind k) {
  switch (k) {
    case OpKind::kAdd: return algorithm::binary_add;
    case OpKind::kSub: return algorithm::binary_sub;
    case OpKind::kMul: return algorithm::binary_mul;
    case OpKind::kDiv: return algorithm::binary_div;
    case OpKind::kMax: return algorithm::binary_max;
    case OpKind::kMin: return algorithm::binary_min;
    default: return std::nullopt;
  }
}
}  // namespace

PostOpsPlan make_post_ops(const Graph& g, const FusedGroup& grp, const Shape& dst_shape,
                          const std::function<Md(ValueId)>& md_of, int sum_index,
                          dnnl::memory::data_type dt) {
  PostOpsPlan p;
  int index = 0;
  for (const PostOp& op : grp.post) {
    const Node& n = g.node(op.node);
    if (index == sum_index) {
      p.ops.append_sum(1.0f);
    } else if (op.gelu_erf) {
      p.ops.append_eltwise(1.0f, algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
    } else if (op.swish) {
      p.ops.append_eltwise(1.0f, algorithm::eltwise_swish, 1.0f, 0.0f);  // x * sigmoid(1 * x)
    } else if (n.kind == OpKind::kHardSigmoid) {
      // max(0, min(1, alpha * x + beta)): oneDNN 2.6 has no hardsigmoid
      // algorithm (2.7 added it), so two post-ops, linear then clip.
      const HardSigmoidAttrs hs = HardSigmoidAttrs::of(n);
      p.ops.append_eltwise(1.0f, algorithm::eltwise_linear, static_cast<float>(hs.alpha), static_cast<float>(hs.beta));
      p.ops.append_eltwise(1.0f, algorithm::eltwise_clip_v2, 0.0f, 1.0f);
    } else if (op.other == kNoValue) {
      std::optional<EltwiseSpec> e = eltwise_spec(n);
      TESSERA_CHECK(e.has_value(), "post-op " << op_name(n.kind) << " has no eltwise algorithm");
      p.ops.append_eltwise(1.0f, e->alg, e->alpha, e->beta);
    } else {
      Shape s = pad_front(g.type(op.other).shape, dst_shape.size());
      if (s.size() != dst_shape.size()) {
        // The kernel views its result with fewer dims (a matmul's batches
        // collapsed into rows): md_of gives the operand in that view.
        dnnl::memory::dims view = md_of(op.other).dims();
        s.assign(view.begin(), view.end());
      }
      Md md = s == dst_shape ? md_of(op.other) : plain_md(s, dt);
      if (s == dst_shape && md.data.ndims != static_cast<int>(s.size())) md = md.reshape(to_dims(s));
      p.ops.append_binary(*binary_alg(n.kind), md);
      p.binary_args.emplace_back(p.ops.len() - 1, op.other);  // a link may take several post-ops
      p.binary_mds.push_back(md);
    }
    ++index;
  }
  return p;
}

void bind_post_ops(OnednnKernel& k, size_t step, const PostOpsPlan& p) {
  for (size_t i = 0; i < p.binary_args.size(); ++i)
    k.bind_value(step, DNNL_ARG_ATTR_MULTIPLE_POST_OP(p.binary_args[i].first) | DNNL_ARG_SRC_1, p.binary_args[i].second,
                 p.binary_mds[i]);
}

}  // namespace tessera::runtime::cpu
