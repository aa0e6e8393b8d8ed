#include "cost/graph_cost.h"

#include <algorithm>

#include "graph/fusion_groups.h"

namespace tessera::cost {

namespace {

// Groups the CPU backend forms but oneDNN does not run fused, so that the
// runtime runs their links one by one (runtime/cpu/cpu_compiler.cc,
// add_group): a binary root whose first operand broadcasts (oneDNN's binary
// primitive needs src0 of the destination's shape; a commutative one whose
// second operand has it runs swapped, onednn_ops.cc), and a unary root with a
// binary link (only oneDNN's reference eltwise takes binary post-ops, and
// the runtime refuses fused reference kernels).
bool runtime_splits(const Graph& g, const FusedGroup& grp) {
  if (grp.post.empty()) return false;
  const Node& root = g.node(grp.root);
  if (is_binary_post_op(root.kind)) {
    // An operand that broadcasts into the output has its element count only
    // when it is the output's shape, up to leading ones.
    const int64_t y = g.type(root.outputs[0]).numel();
    if (g.type(root.inputs[0]).numel() == y) return false;
    bool commutative = root.kind == OpKind::kAdd || root.kind == OpKind::kMul || root.kind == OpKind::kMax ||
                       root.kind == OpKind::kMin;
    return !commutative || g.type(root.inputs[1]).numel() != y;
  }
  if (is_eltwise_post_op(root))
    for (const PostOp& p : grp.post)
      if (p.other != kNoValue) return true;
  return false;
}

// Walks the groups in order: which values end up blocked, and (reorders
// not null) the reorder each row-major reader of a blocked value needs.
std::vector<char> walk_layouts(const Graph& g, const std::vector<std::vector<NodeId>>& groups,
                               const DeviceProfile& device, const CostOptions& options,
                               std::vector<KernelCost>* reorders) {
  std::vector<char> blocked(static_cast<size_t>(g.num_values()), 0), plain_copy(blocked.size(), 0);
  std::vector<char> is_output(blocked.size(), 0);
  for (ValueId v : g.outputs()) is_output[static_cast<size_t>(v)] = 1;
  for (ValueId v : g.inputs())
    for (const std::string& name : options.blocked_inputs)
      if (g.value(v).name == name) blocked[static_cast<size_t>(v)] = 1;
  for (const auto& group : groups) {
    const Node& root = g.node(group[0]);
    bool conv = root.kind == OpKind::kConv && is_float(g.type(root.outputs[0]).dtype) &&
                g.type(root.outputs[0]).rank() >= 3;
    bool output = false;
    for (ValueId v : g.node(group.back()).outputs) output = output || is_output[static_cast<size_t>(v)];
    // A graph output is row-major: a convolution writes it blocked and the
    // runtime copies it; other kernels read their blocked inputs row-major.
    // Which kinds pass a blocked layout on: the runtime's list
    // (graph/fusion_groups.h, keeps_blocked_layout).
    bool keeps = keeps_blocked_layout(root.kind) && (conv || !output);
    auto reorder = [&](ValueId v) {
      if (plain_copy[static_cast<size_t>(v)]) return;
      plain_copy[static_cast<size_t>(v)] = 1;
      if (reorders) reorders->push_back(reorder_cost(g, v, device, options));
    };
    // The convolution reads its data input in the blocked layout it picks:
    // a row-major one (a graph input, a Transpose's or Reshape's result) is
    // reordered into the kernel's scratch first, every run (onednn_ops.cc,
    // add_main; 45 us of a 64x56x56 one at one thread here). With one
    // channel, or one pixel, both layouts are the same.
    if (conv && reorders && !blocked[static_cast<size_t>(root.inputs[0])]) {
      const Shape& xs = g.type(root.inputs[0]).shape;
      if (xs[1] > 1 && g.type(root.inputs[0]).numel() > xs[0] * xs[1]) {
        reorders->push_back(reorder_cost(g, root.inputs[0], device, options));
        reorders->back().label = "Reorder to blocked";
      }
    }
    bool reads_blocked = false;
    for (NodeId id : group)
      for (ValueId v : g.node(id).inputs)
        if (v != kNoValue && blocked[static_cast<size_t>(v)]) {
          reads_blocked = true;
          if (!keeps) reorder(v);
        }
    for (ValueId v : g.node(group.back()).outputs) {
      if (!conv && !(keeps && reads_blocked)) continue;
      blocked[static_cast<size_t>(v)] = 1;
      if (is_output[static_cast<size_t>(v)]) reorder(v);
    }
  }
  return blocked;
}

// The values a kernel touches in memory: what its nodes read from outside
// it (weights included) and what its last node writes (a fused chain's
// links stay in registers). A view (a reshape, a Cast to the same type)
// touches nothing.
std::vector<ValueId> touched_values(const Graph& g, const std::vector<NodeId>& group) {
  if (group.size() == 1 && is_view_node(g, g.node(group[0]))) return {};
  std::vector<ValueId> inside, out;
  for (NodeId id : group) {
    for (ValueId v : g.node(id).inputs)
      if (v != kNoValue && std::find(inside.begin(), inside.end(), v) == inside.end() &&
          std::find(out.begin(), out.end(), v) == out.end())
        out.push_back(v);
    for (ValueId v : g.node(id).outputs) inside.push_back(v);
  }
  for (ValueId v : g.node(group.back()).outputs) out.push_back(v);
  return out;
}

double bytes_of_values(const Graph& g, const DeviceProfile& d, const std::vector<ValueId>& values) {
  double b = 0;
  for (ValueId v : values) b += d.stored_bytes(g.type(v));
  return b;
}

}  // namespace

// A reorder of v between blocked and row-major form (either way): a streaming copy (whole channel
// blocks move at a time), costed as an element-wise pass of its size.
KernelCost reorder_cost(const Graph& g, ValueId v, const DeviceProfile& device, const CostOptions& options) {
  const TensorType& t = g.type(v);
  Graph r;
  ValueId x = r.add_input("x", {t.dtype, {t.numel()}});
  r.set_outputs({r.add(OpKind::kRelu, {x}, {}, "reorder")});
  KernelCost k = kernel_cost(r, {0}, device, options);
  k.label = "Reorder";
  if (device.reorder_bandwidth > 0) {
    // As the runtime runs it (cpu_compiler.cc, ensure_plain): on one core
    // when small, else on every core.
    bool one_core = device.kind == DeviceKind::kCpu && device.units > 1 && t.numel() < one_thread_line(device).elements;
    double s = device.stored_bytes(t) / device.reorder_bandwidth *
               (one_core ? static_cast<double>(device.units) : 1.0);
    k.time_s = k.launch_s + s;
    k.compute_s = s;
    k.bound = "reorder";
  }
  return k;
}

std::vector<std::vector<NodeId>> kernel_groups(const Graph& g, bool fuse) {
  std::vector<std::vector<NodeId>> out;
  for (const FusedGroup& grp : form_groups(g, g.topo_order(), fuse, /*match_gelu=*/true, /*concat_norms=*/true)) {
    if (!runtime_splits(g, grp)) {
      out.push_back(grp.nodes());
      continue;
    }
    for (NodeId id : grp.nodes()) out.push_back({id});
  }
  return out;
}

GraphCost graph_cost(const Graph& g, const DeviceProfile& device, const CostOptions& options,
                     const std::vector<std::vector<NodeId>>& groups) {
  GraphCost c;
  c.groups = groups;
  c.level_bytes.assign(device.memory.size(), 0.0);
  // Reuse distances (CostOptions::reuse_distance): the bytes the kernels
  // touched since each value was last touched, counted as the groups run
  // (bytes as each kernel touches them, a value read twice counted twice); a
  // graph input was last read a whole run before (the program runs again
  // and again): every kernel's and every reorder's bytes but its own.
  std::vector<std::vector<ValueId>> touched;
  std::vector<double> touched_bytes;
  double run_bytes = 0;
  for (const auto& group : groups) {
    touched.push_back(touched_values(g, group));
    touched_bytes.push_back(bytes_of_values(g, device, touched.back()));
    run_bytes += touched_bytes.back();
  }
  std::vector<KernelCost> reorders;
  if (device.kind == DeviceKind::kCpu) walk_layouts(g, groups, device, options, &reorders);
  for (const KernelCost& r : reorders) run_bytes += r.level_bytes.empty() ? 0.0 : r.level_bytes[0];
  std::vector<double> last(static_cast<size_t>(g.num_values()), -1.0), distance(last.size(), -1.0);
  CostOptions o = options;
  if (o.warm_cache && !o.reuse_distance) o.reuse_distance = &distance;
  double clock = 0;
  // Every kernel runs once a run: a run that touches more than the last
  // cache holds leaves each kernel's code and state in main memory for its
  // next run (DeviceProfile::cold_launch_s).
  bool cold_launches = device.cold_launch_s > 0 && o.warm_cache && device.memory.size() > 1 &&
                       run_bytes > static_cast<double>(device.memory[device.memory.size() - 2].capacity_bytes) *
                                       (device.memory[device.memory.size() - 2].per_unit ? device.units : 1);
  auto launch_cold = [&](KernelCost& k) {
    if (!cold_launches || k.launch_s <= 0) return;
    k.launch_s += device.cold_launch_s;
    k.time_s += device.cold_launch_s;
  };
  // One-thread work since the last parallel kernel: past the pool's spin
  // window, the next parallel kernel wakes sleeping threads (measured in
  // runtime/pool_probe.h).
  double serial_s = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const auto& group = groups[gi];
    for (ValueId v : touched[gi]) {
      auto i = static_cast<size_t>(v);
      distance[i] = last[i] >= 0                ? clock - last[i]
                    : g.value(v).is_constant() ? -1.0
                                               : std::max(0.0, run_bytes - device.stored_bytes(g.type(v)));
    }
    KernelCost k = kernel_cost(g, group, device, o);
    launch_cold(k);
    if (touched[gi].empty()) {
      // A view: its result is its input, last touched when that was.
      const Node& n = g.node(group[0]);
      if (!n.inputs.empty() && n.inputs[0] != kNoValue)
        for (ValueId v : n.outputs) last[static_cast<size_t>(v)] = last[static_cast<size_t>(n.inputs[0])];
    } else {
      clock += touched_bytes[gi];
      for (ValueId v : touched[gi]) last[static_cast<size_t>(v)] = clock;
    }
    if (device.wake_overhead_s > 0 && k.parallel) {
      if (serial_s > device.spin_window_s) {
        k.launch_s += device.wake_overhead_s;
        k.time_s += device.wake_overhead_s;
      }
      serial_s = 0;
    } else {
      serial_s += k.time_s;
    }
    c.time_s += k.time_s;
    c.flops += k.total_flops();
    for (size_t i = 0; i < k.level_bytes.size(); ++i) c.level_bytes[i] += k.level_bytes[i];
    c.kernels.push_back(std::move(k));
  }
  if (device.kind == DeviceKind::kCpu) {
    c.reorders = std::move(reorders);
    for (KernelCost& k : c.reorders) {
      launch_cold(k);
      c.time_s += k.time_s;
      for (size_t i = 0; i < k.level_bytes.size(); ++i) c.level_bytes[i] += k.level_bytes[i];
    }
  }
  return c;
}

std::vector<char> blocked_values(const Graph& g, const DeviceProfile& device) {
  if (device.kind != DeviceKind::kCpu) return std::vector<char>(static_cast<size_t>(g.num_values()), 0);
  return walk_layouts(g, kernel_groups(g, true), device, {}, nullptr);
}

}  // namespace tessera::cost
