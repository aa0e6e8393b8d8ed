// The CPU backend's plan compiler: fusion groups -> oneDNN kernels where
// oneDNN has the op, our native kernels where it does not, the reference
// kernel as the last resort. Convolutions pick their preferred (blocked)
// layouts; the layout flows through the ops that accept any layout and is
// reordered to row-major once, where a consumer needs it.
#include <dnnl.hpp>

#include <algorithm>

#include "graph/error.h"
#include "runtime/cpu/native_kernels.h"
#include "runtime/cpu/onednn_ops.h"
#include "runtime/fusion.h"
#include "runtime/plan_spec.h"
#include "runtime/reference_kernel.h"

namespace tessera::runtime {
namespace {

using cpu::Md;

bool is_view(OpKind k) {
  return k == OpKind::kReshape || k == OpKind::kFlatten || k == OpKind::kSqueeze || k == OpKind::kUnsqueeze ||
         k == OpKind::kIdentity;
}

class CpuCompiler {
 public:
  CpuCompiler(const Graph& g, const RunOptions& o, PlanSpec& spec)
      : g_(g), opt_(o), spec_(spec), dnn_(std::make_shared<cpu::Onednn>()) {}

  void compile() {
    bind_graph_values(g_, spec_);
    types_.clear();
    for (ValueId v = 0; v < g_.num_values(); ++v) types_.push_back(g_.type(v));
    layout_.assign(types_.size(), std::nullopt);
    plain_copy_.assign(types_.size(), kNoValue);
    is_output_.assign(types_.size(), false);
    for (ValueId v : g_.outputs()) is_output_[v] = true;
    std::vector<NodeId> order = g_.topo_order();
    bool reference = opt_.backend == Backend::kReference;
    for (const FusedGroup& grp : form_groups(g_, order, opt_.fuse && !reference)) {
      if (reference) add_reference(grp.root);
      else add_group(grp);
    }
    for (ValueId v : g_.outputs()) spec_.outputs.push_back(ensure_plain(v));
  }

 private:
  Md md_of(ValueId v) const {
    if (layout_[v]) return *layout_[v];
    return cpu::plain_md(types_[v].shape);
  }

  // A row-major version of v: itself, or a reordered copy made once.
  ValueId ensure_plain(ValueId v) {
    if (!layout_[v]) return v;
    if (plain_copy_[v] != kNoValue) return plain_copy_[v];
    ValueId p = new_value(types_[v], types_[v].nbytes());
    Md from = *layout_[v];
    auto k = cpu::make_reorder(dnn_, v, from, p, cpu::plain_md(types_[v].shape));
    k->node = g_.value(v).name;
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
    if (grp.post.empty() && is_view(root.kind) && !is_output_[root.outputs[0]]) {
      ValueId in = ensure_plain(root.inputs[0]);
      PlanValue& pv = spec_.values[root.outputs[0]];
      pv.kind = PlanValue::Kind::kAlias;
      pv.alias_of = in;
      pv.bytes = types_[in].nbytes();
      return;
    }
    if (try_onednn(grp, false) || try_onednn(grp, true)) return;
    if (!grp.post.empty()) {
      // oneDNN rejected the fused form: run the links one by one.
      add_group(FusedGroup{grp.root, {}});
      for (const PostOp& p : grp.post) add_group(FusedGroup{p.node, {}});
      return;
    }
    add_single(grp.root);
  }

  // With plain_only, blocked operands are read through row-major copies
  // (the second try when oneDNN rejects a blocked form).
  bool try_onednn(const FusedGroup& grp, bool plain_only) {
    const Node& root = g_.node(grp.root);
    std::vector<ValueId> operands = root.inputs;
    for (const PostOp& p : grp.post)
      if (p.other != kNoValue) operands.push_back(p.other);
    bool blocked_ok = cpu::accepts_blocked_layout(root.kind) && !plain_only;
    std::vector<ValueId> blocked;
    for (ValueId v : operands)
      if (v != kNoValue && layout_[v] && std::find(blocked.begin(), blocked.end(), v) == blocked.end())
        blocked.push_back(v);
    if (plain_only && blocked.empty()) return false;  // the first try was this one
    if (!blocked_ok)
      for (ValueId v : blocked) ensure_plain(v);
    bool hide = !blocked_ok;
    auto md = [this, hide](ValueId v) { return hide ? cpu::plain_md(types_[v].shape) : md_of(v); };
    cpu::BuildContext c{g_, dnn_, md, is_output_[grp.output(g_)]};
    cpu::Built built;
    try {
      built = cpu::make_onednn_kernel(c, grp);
    } catch (const dnnl::error&) {
      built = {};
    }
    if (!built.kernel) return false;
    std::unique_ptr<cpu::OnednnKernel> k = std::move(built.kernel);
    k->inputs = operands;
    if (hide)
      for (ValueId v : blocked) k->remap_value(v, plain_copy_[v]);
    // Constants the kernel prepacked are not read at run time: the plan need
    // not keep the graph's copy.
    for (ValueId& v : k->inputs)
      if (v != kNoValue && spec_.values[v].kind == PlanValue::Kind::kConstant && !k->reads(v)) v = kNoValue;
    k->outputs = {grp.output(g_)};
    k->node = root.name;
    k->op = grp.label(g_);
    produced(grp.output(g_), built.out_md);
    spec_.kernels.push_back(std::move(k));
    return true;
  }

  void add_single(NodeId id) {
    const Node& n = g_.node(id);
    std::unique_ptr<Kernel> k;
    std::vector<ValueId> ins = plain_inputs(n);
    if (is_view(n.kind)) {
      k = cpu::make_copy_kernel(ins[0], n.outputs[0], types_[n.outputs[0]].nbytes());
      k->node = n.name;
      k->op = op_name(n.kind);
    } else {
      k = cpu::make_native_kernel(g_, id);
      if (!k) k = make_reference_kernel(g_, id);
      k->inputs = ins;
    }
    for (ValueId v : n.outputs) produced(v, std::nullopt);
    spec_.kernels.push_back(std::move(k));
  }

  void add_reference(NodeId id) {
    const Node& n = g_.node(id);
    auto k = make_reference_kernel(g_, id);
    for (ValueId v : n.outputs) produced(v, std::nullopt);
    spec_.kernels.push_back(std::move(k));
  }

  const Graph& g_;
  const RunOptions& opt_;
  PlanSpec& spec_;
  std::shared_ptr<cpu::Onednn> dnn_;
  std::vector<TensorType> types_;
  std::vector<std::optional<Md>> layout_;
  std::vector<ValueId> plain_copy_;
  std::vector<bool> is_output_;
};

}  // namespace

void compile_cpu(const Graph& g, const RunOptions& options, PlanSpec& spec) { CpuCompiler(g, options, spec).compile(); }

}  // namespace tessera::runtime
