// The CPU backend's plan compiler: fusion groups -> oneDNN kernels where
// oneDNN has the op, our native kernels where it does not, the reference
// kernel as the last resort. Convolutions pick their preferred (blocked)
// layouts; the layout flows through the ops that accept any layout and is
// reordered to row-major once, where a consumer needs it.
//
// 16-bit floats: bf16 groups run oneDNN's bf16 primitives. f16 groups, which
// oneDNN 2.6 has no CPU kernels for (and converts at ~200 ns per element in
// its reference reorder), are built over f32: their f16 inputs are widened
// by a native convert kernel into f32 copies (constants once, here) and the
// kernel writes an f32 result. That result is narrowed into the f16 value
// (same layout) only where something reads the f16 value itself (a native
// kernel, a view, a graph output): an f16 group that feeds f16 groups hands
// them its f32 result, as a fused chain skips the rounding between its links.
// On fp16 ConvNeXt-Tiny narrowing every result took 246 convert kernels.
// Native kernels widen inside (native_widened.cc).
#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "graph/error.h"
#include "graph/fusion_groups.h"
#include "runtime/cpu/collective_kernels.h"
#include "runtime/cpu/half_convert.h"
#include "runtime/cpu/halo_overlap.h"
#include "runtime/cpu/native_kernels.h"
#include "runtime/cpu/onednn_ops.h"
#include "runtime/fusion.h"
#include "runtime/plan_spec.h"
#include "runtime/reference_kernel.h"
#include "runtime/thread_scope.h"

namespace tessera::runtime {
namespace {

using cpu::Md;


class CpuCompiler {
 public:
  CpuCompiler(const Graph& g, const RunOptions& o, PlanSpec& spec, const std::function<void(ValueId)>& release)
      : g_(g), opt_(o), spec_(spec), release_(release), dnn_(std::make_shared<cpu::Onednn>()) {}

  void compile() {
    bind_graph_values(g_, spec_);
    types_.clear();
    for (ValueId v = 0; v < g_.num_values(); ++v) types_.push_back(g_.type(v));
    layout_.assign(types_.size(), std::nullopt);
    plain_copy_.assign(types_.size(), kNoValue);
    wide_copy_.assign(types_.size(), kNoValue);
    pending_narrow_.assign(types_.size(), std::nullopt);
    is_output_.assign(types_.size(), false);
    for (ValueId v : g_.outputs()) is_output_[v] = true;
    std::vector<NodeId> order = g_.topo_order();
    bool reference = opt_.backend == Backend::kReference;
    ConstantUses uses(g_);
    std::vector<FusedGroup> groups = form_groups(g_, order, opt_.fuse && !reference, /*match_gelu=*/true,
                                                 /*concat_norms=*/true);
    std::vector<int> halo_of = overlapped_halos(groups, reference);
    for (size_t i = 0; i < groups.size(); ++i) {
      const FusedGroup& grp = groups[i];
      size_t first_kernel = spec_.kernels.size();
      if (halo_of[i] == -2) continue;  // lowered with its consumer
      if (reference) add_reference(grp.root);
      else if (halo_of[i] >= 0) add_halo_overlapped(groups[static_cast<size_t>(halo_of[i])], grp);
      else add_group(grp);
      if (release_) release_done_constants(grp, first_kernel, uses);
    }
    for (ValueId v : g_.outputs()) spec_.outputs.push_back(ensure_plain(v));
  }

 private:
  // Per constant: the node inputs not compiled yet, and whether a kernel
  // reads it at run time (or it is a graph output).
  struct ConstantUses {
    explicit ConstantUses(const Graph& g)
        : pending(static_cast<size_t>(g.num_values()), 0), read(static_cast<size_t>(g.num_values()), false) {
      for (NodeId n = 0; n < g.num_nodes(); ++n)
        for (ValueId v : g.node(n).inputs)
          if (v != kNoValue && g.value(v).constant) ++pending[v];
      for (ValueId v : g.outputs()) read[v] = true;
    }
    std::vector<int32_t> pending;
    std::vector<bool> read;
  };

  void release_done_constants(const FusedGroup& grp, size_t first_kernel, ConstantUses& uses) {
    for (size_t k = first_kernel; k < spec_.kernels.size(); ++k)
      for (ValueId v : spec_.kernels[k]->inputs) {
        while (v != kNoValue && spec_.values[v].kind == PlanValue::Kind::kAlias) v = spec_.values[v].alias_of;
        if (v != kNoValue && v < g_.num_values()) uses.read[v] = true;
      }
    std::vector<NodeId> nodes = {grp.root};
    for (const PostOp& p : grp.post) {
      if (p.members.empty()) nodes.push_back(p.node);
      nodes.insert(nodes.end(), p.members.begin(), p.members.end());
    }
    for (NodeId n : nodes)
      for (ValueId v : g_.node(n).inputs) {
        if (v == kNoValue || !g_.value(v).constant || --uses.pending[v] > 0 || uses.read[v]) continue;
        spec_.values[v].constant = nullptr;
        release_(v);
      }
  }

 private:
  Md md_of(ValueId v) const {
    if (layout_[v]) return *layout_[v];
    return plain_md_of(v);
  }

  // Row-major, in the value's stored type (f32 for non-float values, which
  // no oneDNN kernel reads).
  Md plain_md_of(ValueId v) const {
    DType t = types_[v].dtype;
    dnnl::memory::data_type d = t == DType::kBF16  ? dnnl::memory::data_type::bf16
                                : t == DType::kF16 ? dnnl::memory::data_type::f16
                                                   : dnnl::memory::data_type::f32;
    return cpu::plain_md(types_[v].shape, d);
  }

  // A value's name; the compiler's own values (copies) have none.
  std::string name_of(ValueId v) const { return v < g_.num_values() ? g_.value(v).name : std::string(); }

  static Md with_type(Md md, dnnl::memory::data_type d) {
    md.data.data_type = static_cast<dnnl_data_type_t>(d);
    return md;
  }

  // An f32 copy of f16 value v in the same layout: a constant widened now,
  // anything else by a convert kernel at this point of the plan. Made once.
  ValueId widened(ValueId v) {
    if (wide_copy_[v] != kNoValue) return wide_copy_[v];
    TensorType t = types_[v];
    t.dtype = DType::kF32;
    ValueId w;
    if (spec_.values[v].kind == PlanValue::Kind::kConstant) {
      spec_.constants.push_back(cpu::widen_tensor(*g_.value(v).constant));
      w = new_value(t, t.nbytes());
      spec_.values[w].kind = PlanValue::Kind::kConstant;
      spec_.values[w].constant = spec_.constants.back().data();
    } else {
      std::optional<Md> md;
      if (layout_[v]) md = with_type(*layout_[v], dnnl::memory::data_type::f32);
      int64_t count = md ? static_cast<int64_t>(md->get_size()) / 4 : t.numel();
      w = new_value(t, count * 4);
      auto k = cpu::make_convert_kernel(v, types_[v].dtype, w, DType::kF32, count);
      if (count < opt_.one_thread_line.elements) k->max_threads = 1;
      k->node = name_of(v);
      spec_.kernels.push_back(std::move(k));
      produced(w, md);
    }
    wide_copy_[v] = w;
    return w;
  }

  // Makes f16 value v, whose f32 copy alone exists so far, by narrowing it:
  // before the first kernel that reads v itself.
  void materialize(ValueId v) {
    if (!pending_narrow_[v]) return;
    Md md = *pending_narrow_[v];
    pending_narrow_[v].reset();
    narrow_into(wide_copy_[v], v, md);
  }

  // The f16 value `out` narrowed from its f32 result `wide` (layout md).
  void narrow_into(ValueId wide, ValueId out, const Md& md) {
    int64_t count = static_cast<int64_t>(md.get_size()) / 4;
    auto k = cpu::make_convert_kernel(wide, DType::kF32, out, types_[out].dtype, count);
    if (count < opt_.one_thread_line.elements) k->max_threads = 1;
    k->node = name_of(out);
    spec_.kernels.push_back(std::move(k));
    produced(out, with_type(md, dnnl::memory::data_type::f16));
  }

  // A row-major version of v: itself, or a reordered copy made once.
  ValueId ensure_plain(ValueId v) {
    if (!layout_[v]) {
      materialize(v);
      return v;
    }
    if (plain_copy_[v] != kNoValue) return plain_copy_[v];
    if (types_[v].dtype == DType::kF16) {
      // Through f32: oneDNN's f16 -> f16 reorder is its slow reference one.
      ValueId wide_plain = ensure_plain(widened(v));
      ValueId p = new_value(types_[v], types_[v].nbytes());
      narrow_into(wide_plain, p, cpu::plain_md(types_[v].shape));
      plain_copy_[v] = p;
      return p;
    }
    ValueId p = new_value(types_[v], types_[v].nbytes());
    Md from = *layout_[v];
    bool single = types_[v].numel() < opt_.one_thread_line.elements;
    std::optional<ThreadScope> one_thread;
    if (single) one_thread.emplace(1);
    auto k = cpu::make_reorder(dnn_, v, from, p, plain_md_of(v));
    if (single) k->max_threads = 1;
    k->node = name_of(v);
    spec_.kernels.push_back(std::move(k));
    plain_copy_[v] = p;
    return p;
  }

  ValueId new_value(const TensorType& t, int64_t bytes) {
    PlanValue pv;
    pv.kind = PlanValue::Kind::kIntermediate;
    pv.bytes = bytes;
    spec_.values.push_back(pv);
    types_.push_back(t);
    layout_.emplace_back(std::nullopt);
    plain_copy_.push_back(kNoValue);
    wide_copy_.push_back(kNoValue);
    pending_narrow_.emplace_back(std::nullopt);
    is_output_.push_back(false);
    return static_cast<ValueId>(spec_.values.size() - 1);
  }

  void produced(ValueId v, const std::optional<Md>& md) {
    PlanValue& pv = spec_.values[v];
    pv.kind = PlanValue::Kind::kIntermediate;
    pv.bytes = types_[v].nbytes();
    if (md && !cpu::is_plain(*md, types_[v].shape)) {
      layout_[v] = *md;
      pv.bytes = static_cast<int64_t>(md->get_size());
    }
  }

  // Node inputs, with blocked ones replaced by row-major copies.
  std::vector<ValueId> plain_inputs(const Node& n) {
    std::vector<ValueId> ins;
    for (ValueId v : n.inputs) ins.push_back(v == kNoValue ? v : ensure_plain(v));
    return ins;
  }

  void add_group(const FusedGroup& grp) {
    const Node& root = g_.node(grp.root);
    if (grp.post.empty() && op_def(root.kind).is_view && !is_output_[root.outputs[0]]) {
      if (only_f32_copies(root)) {
        // The view of an f16 value that exists as an f32 copy only: a view
        // of the copy, the f16 output pending too.
        ValueId wide_in = wide_copy_[root.inputs[0]];
        TensorType t = types_[root.outputs[0]];
        t.dtype = DType::kF32;
        ValueId w = new_value(t, t.nbytes());
        spec_.values[w].kind = PlanValue::Kind::kAlias;
        spec_.values[w].alias_of = wide_in;
        wide_copy_[root.outputs[0]] = w;
        pending_narrow_[root.outputs[0]] = cpu::plain_md(t.shape);
        return;
      }
      ValueId in = ensure_plain(root.inputs[0]);
      PlanValue& pv = spec_.values[root.outputs[0]];
      pv.kind = PlanValue::Kind::kAlias;
      pv.alias_of = in;
      pv.bytes = types_[in].nbytes();
      return;
    }
    bool collective = op_def(root.kind).is_collective();
    if (!collective && (try_onednn(grp, false) || try_onednn(grp, true))) return;
    if (!grp.post.empty() && g_.node(grp.post[0].node).kind == OpKind::kBatchNormalization) {
      // A concatenation's norm links (form_groups' concat_norms) that the
      // fused kernel does not take: the concatenation, then the norm group.
      add_group(FusedGroup{grp.root, {}});
      add_group(FusedGroup{grp.post[0].node, {grp.post.begin() + 1, grp.post.end()}});
      return;
    }
    if (!grp.post.empty()) {
      // oneDNN rejected the fused form: run the links one by one.
      add_group(FusedGroup{grp.root, {}});
      for (const PostOp& p : grp.post) {
        if (p.members.empty()) add_group(FusedGroup{p.node, {}});
        for (NodeId m : p.members) add_group(FusedGroup{m, {}});
      }
      return;
    }
    add_single(grp.root);
  }

  // Per group: the index of the HaloExchange group it lowers overlapped
  // with (cpu/halo_overlap.h), -2 for that HaloExchange group, -1 else.
  // Only with overlap on: --no-overlap keeps the unoverlapped lowering.
  std::vector<int> overlapped_halos(const std::vector<FusedGroup>& groups, bool reference) const {
    std::vector<int> halo_of(groups.size(), -1);
    if (reference || !opt_.overlap || opt_.communicator == nullptr) return halo_of;
    std::vector<std::vector<NodeId>> users = g_.users();
    std::unordered_map<NodeId, size_t> group_of_root;
    for (size_t i = 0; i < groups.size(); ++i) group_of_root[groups[i].root] = i;
    for (size_t i = 0; i < groups.size(); ++i) {
      const Node& h = g_.node(groups[i].root);
      if (h.kind != OpKind::kHaloExchange || !groups[i].post.empty() || is_output_[h.outputs[0]]) continue;
      const std::vector<NodeId>& u = users[static_cast<size_t>(h.outputs[0])];
      if (u.size() != 1) continue;
      auto it = group_of_root.find(u[0]);
      if (it == group_of_root.end() || !cpu::halo_overlappable(g_, groups[i].root, groups[it->second])) continue;
      halo_of[it->second] = static_cast<int>(i);
      halo_of[i] = -2;
    }
    return halo_of;
  }

  // HaloExchange group h and its consumer as one overlapped kernel; the two
  // kernels of the unoverlapped lowering where oneDNN has no such form.
  void add_halo_overlapped(const FusedGroup& h, const FusedGroup& grp) {
    const Node& hn = g_.node(h.root);
    std::unique_ptr<Kernel> halo = cpu::make_collective_kernel(g_, h.root, opt_.communicator, true);
    halo->inputs = plain_inputs(hn);
    for (ValueId v : hn.outputs) produced(v, std::nullopt);
    spec_.kernels.push_back(std::move(halo));
    size_t at = spec_.kernels.size();
    if (!try_onednn(grp, false) || spec_.kernels.size() != at + 1) {
      if (spec_.kernels.size() == at) add_group(grp);
      return;
    }
    std::unique_ptr<cpu::OnednnKernel> main(dynamic_cast<cpu::OnednnKernel*>(spec_.kernels.back().get()));
    if (!main) return;
    spec_.kernels.back().release();
    spec_.kernels.pop_back();
    std::unique_ptr<Kernel> halo_k = std::move(spec_.kernels.back());
    spec_.kernels.pop_back();
    ValueId out = grp.output(g_);
    std::unique_ptr<Kernel> k =
        cpu::make_halo_overlap_kernel(g_, h.root, grp, halo_k, main, md_of(out), dnn_);
    if (!k) {  // as built, unoverlapped
      spec_.kernels.push_back(std::move(halo_k));
      spec_.kernels.push_back(std::move(main));
      return;
    }
    spec_.values[hn.outputs[0]].kind = PlanValue::Kind::kUnused;
    spec_.kernels.push_back(std::move(k));
  }

  // With plain_only, blocked operands are read through row-major copies
  // (the second try when oneDNN rejects a blocked form).
  bool try_onednn(const FusedGroup& grp, bool plain_only) {
    const Node& root = g_.node(grp.root);
    std::vector<ValueId> operands = root.inputs;
    for (const PostOp& p : grp.post)
      if (p.other != kNoValue) operands.push_back(p.other);
    bool blocked_ok = keeps_blocked_layout(root.kind) && !plain_only;
    std::vector<ValueId> blocked;
    for (ValueId v : operands)
      if (v != kNoValue && layout_[v] && std::find(blocked.begin(), blocked.end(), v) == blocked.end())
        blocked.push_back(v);
    if (plain_only && blocked.empty()) return false;  // the first try was this one
    if (!blocked_ok)
      for (ValueId v : blocked) ensure_plain(v);
    bool hide = !blocked_ok;
    DType dtype = types_[grp.output(g_)].dtype;
    bool widen = dtype == DType::kF16;
    auto md = [this, hide, widen](ValueId v) {
      Md m = hide ? plain_md_of(v) : md_of(v);
      return widen && types_[v].dtype == DType::kF16 ? with_type(m, dnnl::memory::data_type::f32) : m;
    };
    cpu::BuildContext c{g_, dnn_, md, is_output_[grp.output(g_)]};
    c.dtype = dtype;
    std::unordered_map<ValueId, Tensor> wide_constants;
    if (widen)
      c.constant = [this, &wide_constants](ValueId v) -> const Tensor* {
        const Value& val = g_.value(v);
        if (!val.constant) return nullptr;
        if (val.type.dtype != DType::kF16) return &*val.constant;
        auto it = wide_constants.find(v);
        if (it == wide_constants.end()) it = wide_constants.emplace(v, cpu::widen_tensor(*val.constant)).first;
        return &it->second;
      };
    cpu::Built built;
    bool single = little_work(root, grp.output(g_));
    try {
      std::optional<ThreadScope> one_thread;  // oneDNN splits work for the count current at creation
      if (single) one_thread.emplace(1);
      built = cpu::make_onednn_kernel(c, grp);
    } catch (const dnnl::error&) {
      built = {};
    }
    // oneDNN's reference implementations are scalar loops: a fused group that
    // only they accept runs faster split into its JIT-compiled links (llama's
    // Sigmoid+Mul+Mul: 18 ms fused by ref:any, under 1 ms split).
    // The same holds for one broadcasting binary op whose pattern oneDNN has
    // no JIT form for (Swin's attention mask, [nW, h, 49, 49] + [nW, 1, 49,
    // 49] per window: 9.9 ms in ref:any): the native kernel runs it.
    bool native_binary = grp.post.empty() && is_float(types_[grp.output(g_)].dtype) &&
                         (root.kind == OpKind::kAdd || root.kind == OpKind::kSub || root.kind == OpKind::kMul ||
                          root.kind == OpKind::kDiv || root.kind == OpKind::kMax || root.kind == OpKind::kMin);
    if (built.kernel && (!grp.post.empty() || native_binary) && built.kernel->impl().rfind("onednn:ref", 0) == 0)
      built = {};
    if (!built.kernel) return false;
    std::unique_ptr<cpu::OnednnKernel> k = std::move(built.kernel);
    if (!single && omp_get_max_threads() > 1) add_one_thread_form(*k, c, grp, built.out_md);
    k->inputs = operands;
    if (hide)
      for (ValueId v : blocked) k->remap_value(v, plain_copy_[v]);
    ValueId out = grp.output(g_);
    if (widen) {
      // The f16 values the kernel reads at run time, read as f32 copies.
      std::vector<ValueId> ins = k->inputs;
      for (ValueId v : ins)
        if (v != kNoValue && types_[v].dtype == DType::kF16 && k->reads(v)) k->remap_value(v, widened(v));
      TensorType t = types_[out];
      t.dtype = DType::kF32;
      ValueId wide_out = new_value(t, t.nbytes());
      k->remap_value(out, wide_out);
      out = wide_out;
      // The impl without the "onednn:" that impl() adds (a native step's
      // "native:..." is kept whole).
      std::string impl = k->impl();
      if (impl.rfind("onednn:", 0) == 0) impl = impl.substr(std::string("onednn:").size());
      k->set_impl(impl + " (f16 via f32)");
    }
    // Constants the kernel prepacked are not read at run time: the plan need
    // not keep the graph's copy.
    for (ValueId& v : k->inputs)
      if (v != kNoValue && spec_.values[v].kind == PlanValue::Kind::kConstant && !k->reads(v)) v = kNoValue;
    k->outputs = {out};
    if (single) k->max_threads = 1;
    k->node = root.name;
    k->op = grp.label(g_);
    produced(out, built.out_md);
    spec_.kernels.push_back(std::move(k));
    if (widen) {
      ValueId f16_out = grp.output(g_);
      wide_copy_[f16_out] = out;
      pending_narrow_[f16_out] = built.out_md;
      if (!cpu::is_plain(built.out_md, types_[out].shape))
        layout_[f16_out] = with_type(built.out_md, dnnl::memory::data_type::f16);
    }
    return true;
  }

  // The kernel's primitives made for one thread, for runs on oversubscribed
  // cores (ExecContext::one_thread); none when oneDNN picks another layout or
  // weight format for one thread (the plan's layouts are the threaded form's).
  void add_one_thread_form(cpu::OnednnKernel& k, const cpu::BuildContext& c, const FusedGroup& grp, const Md& out_md) {
    cpu::Built alt;
    cpu::BuildContext shared = c;
    shared.weights_from = &k;
    try {
      ThreadScope one_thread(1);
      alt = cpu::make_onednn_kernel(shared, grp);
    } catch (const dnnl::error&) {
      return;
    }
    if (alt.kernel && alt.out_md == out_md) k.adopt_one_thread_form(*alt.kernel);
  }

  // Whether every tensor of node n is f16 and its inputs exist as f32
  // copies only (pending narrowing; `plain`: row-major ones): a movement op
  // then moves the copies.
  bool only_f32_copies(const Node& n, bool plain = true) const {
    for (ValueId v : n.inputs)
      if (v == kNoValue || types_[v].dtype != DType::kF16 || !pending_narrow_[v] ||
          (plain && !cpu::is_plain(*pending_narrow_[v], types_[v].shape)))
        return false;
    for (ValueId v : n.outputs)
      if (types_[v].dtype != DType::kF16 || is_output_[v]) return false;
    return !n.inputs.empty();
  }

  // A movement op (Transpose, Slice, Concat, ...) of f16 values that exist
  // as f32 copies only, run on the copies: fp16 ConvNeXt-Tiny's Transposes
  // around its LayerNorms narrowed and widened each tensor twice.
  bool add_movement_of_copies(NodeId id) {
    const Node& n = g_.node(id);
    if (op_def(n.kind).family != OpFamily::kMovement || !only_f32_copies(n, /*plain=*/false)) return false;
    std::unique_ptr<Kernel> k = cpu::make_native_kernel_as_f32(g_, id);
    if (!k) return false;
    for (ValueId& v : k->inputs) v = ensure_plain(wide_copy_[v]);  // a blocked copy reordered once
    for (ValueId& v : k->outputs) {
      TensorType t = types_[v];
      t.dtype = DType::kF32;
      ValueId w = new_value(t, t.nbytes());
      produced(w, std::nullopt);
      wide_copy_[v] = w;
      pending_narrow_[v] = cpu::plain_md(t.shape);
      v = w;
    }
    if (little_work(n, n.outputs[0])) k->max_threads = 1;
    spec_.kernels.push_back(std::move(k));
    return true;
  }

  // Which kernels run on the calling thread: graph/fusion_groups.h
  // (runs_on_one_thread) under the host's line, shared with the cost model.
  bool little_work(const Node& root, ValueId out) const {
    return runs_on_one_thread(g_, root, out, opt_.one_thread_line);
  }

  void add_single(NodeId id) {
    const Node& n = g_.node(id);
    if (add_movement_of_copies(id)) return;
    std::unique_ptr<Kernel> k;
    std::vector<ValueId> ins = plain_inputs(n);
    if (op_def(n.kind).is_view) {
      k = cpu::make_copy_kernel(ins[0], n.outputs[0], types_[n.outputs[0]].nbytes());
      k->node = n.name;
      k->op = op_name(n.kind);
    } else if (op_def(n.kind).is_collective()) {
      k = cpu::make_collective_kernel(g_, id, opt_.communicator);
      k->inputs = ins;
    } else {
      k = cpu::make_native_kernel(g_, id);
      if (!k) k = cpu::make_widened_kernel(g_, id);
      if (!k) k = make_reference_kernel(g_, id);
      k->inputs = ins;
    }
    if (!n.outputs.empty() && little_work(n, n.outputs[0])) k->max_threads = 1;
    for (ValueId v : n.outputs) produced(v, std::nullopt);
    spec_.kernels.push_back(std::move(k));
  }

  // Collectives run the communicator's kernel here too: the reference
  // kernel of a collective reads the peers' tensors, which only the
  // communicator has.
  void add_reference(NodeId id) {
    const Node& n = g_.node(id);
    for (ValueId v : n.inputs)
      if (v != kNoValue) materialize(v);
    std::unique_ptr<Kernel> k = op_def(n.kind).is_collective() ? cpu::make_collective_kernel(g_, id, opt_.communicator)
                                                               : make_reference_kernel(g_, id);
    for (ValueId v : n.outputs) produced(v, std::nullopt);
    spec_.kernels.push_back(std::move(k));
  }

  const Graph& g_;
  const RunOptions& opt_;
  PlanSpec& spec_;
  const std::function<void(ValueId)>& release_;
  std::shared_ptr<cpu::Onednn> dnn_;
  std::vector<TensorType> types_;
  std::vector<std::optional<Md>> layout_;
  std::vector<ValueId> plain_copy_;
  std::vector<ValueId> wide_copy_;  // per value: its f32 copy (f16 values read by f32 kernels)
  // Per f16 value computed as an f32 copy and not narrowed yet: the copy's layout.
  std::vector<std::optional<Md>> pending_narrow_;
  std::vector<bool> is_output_;
};

}  // namespace

void compile_cpu(const Graph& g, const RunOptions& options, PlanSpec& spec,
                 const std::function<void(ValueId)>& release) {
  CpuCompiler(g, options, spec, release).compile();
}

}  // namespace tessera::runtime
