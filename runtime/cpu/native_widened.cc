// Native kernels for 16-bit floats: the node's f32 kernel run on widened
// copies. A node whose float tensors are f16 or bf16 is rebuilt over f32 in a
// one-node graph (constants widened once, here); at run time its 16-bit
// inputs are widened into the kernel's scratch, the f32 kernel runs there,
// and its outputs are narrowed into place. Math is f32 with one rounding per
// output, as the interpreter computes a 16-bit node; the f32 kernels' own
// code (broadcast maps, resize taps) is not repeated per type.
#include <algorithm>

#include "runtime/cpu/half_convert.h"
#include "runtime/cpu/native_kernels.h"
#include "runtime/memory_planner.h"

namespace tessera::runtime::cpu {
namespace {

class WidenedKernel : public Kernel {
 public:
  Graph sub;  // the node over f32; keeps the widened constants
  std::unique_ptr<Kernel> inner;
  // Per position of inputs / outputs: the sub-graph's value, and where its
  // f32 copy lives in scratch (-1: not a 16-bit float, used as it is).
  std::vector<ValueId> sub_in, sub_out;
  std::vector<int64_t> in_off, out_off;
  std::vector<DType> in_t, out_t;
  int64_t inner_scratch_off = 0, scratch = 0;

  void run(ExecContext& ctx) override {
    ExecContext c;
    c.ptr.assign(static_cast<size_t>(sub.num_values()), nullptr);
    c.communicator = ctx.communicator;
    c.one_thread = ctx.one_thread;
    c.scratch = ctx.scratch + inner_scratch_off;
    for (ValueId v = 0; v < sub.num_values(); ++v)
      if (sub.value(v).constant) c.ptr[v] = const_cast<uint8_t*>(sub.value(v).constant->data());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i] == kNoValue || sub.value(sub_in[i]).constant) continue;
      if (in_off[i] < 0) {
        if (c.ptr[sub_in[i]]) continue;  // a repeated input, widened at its first position
        c.ptr[sub_in[i]] = ctx.ptr[inputs[i]];
        continue;
      }
      auto* wide = reinterpret_cast<float*>(ctx.scratch + in_off[i]);
      widen_to_f32(in_t[i], ctx.ptr[inputs[i]], wide, sub.type(sub_in[i]).numel());
      c.ptr[sub_in[i]] = reinterpret_cast<uint8_t*>(wide);
    }
    for (size_t i = 0; i < outputs.size(); ++i)
      c.ptr[sub_out[i]] = out_off[i] < 0 ? ctx.ptr[outputs[i]] : ctx.scratch + out_off[i];
    inner->run(c);
    for (size_t i = 0; i < outputs.size(); ++i)
      if (out_off[i] >= 0)
        narrow_from_f32(out_t[i], reinterpret_cast<const float*>(ctx.scratch + out_off[i]), ctx.ptr[outputs[i]],
                        sub.type(sub_out[i]).numel());
  }
  std::string impl() const override { return inner->impl() + " (16-bit via f32)"; }
  int64_t scratch_bytes() const override { return scratch; }
  int64_t weight_bytes() const override { return inner->weight_bytes(); }

  int64_t alloc(int64_t bytes) {
    int64_t off = scratch;
    scratch += (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    return off;
  }
};

}  // namespace

std::unique_ptr<Kernel> make_widened_kernel(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  bool any = false;
  for (ValueId v : n.inputs) any = any || (v != kNoValue && is_float16(g.type(v).dtype));
  for (ValueId v : n.outputs) any = any || is_float16(g.type(v).dtype);
  if (!any || op_def(n.kind).is_collective()) return nullptr;
  auto k = std::make_unique<WidenedKernel>();
  std::vector<ValueId> ins;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    ValueId v = n.inputs[i];
    ValueId s = kNoValue;
    auto seen = std::find(n.inputs.begin(), n.inputs.begin() + static_cast<long>(i), v);
    if (v != kNoValue && seen != n.inputs.begin() + static_cast<long>(i)) {
      // x * x: one sub-graph value, widened once.
      size_t j = static_cast<size_t>(seen - n.inputs.begin());
      s = k->sub_in[j];
      k->in_off.push_back(-1);
      k->in_t.push_back(DType::kF32);
    } else if (v != kNoValue) {
      const Value& val = g.value(v);
      bool wide = is_float16(val.type.dtype);
      TensorType t = val.type;
      if (wide) t.dtype = DType::kF32;
      if (val.constant) s = k->sub.add_constant(val.name, wide ? widen_tensor(*val.constant) : *val.constant);
      else s = k->sub.add_input(val.name, t);
      k->in_off.push_back(wide && !val.constant ? k->alloc(t.nbytes()) : -1);
      k->in_t.push_back(val.type.dtype);
    } else {
      k->in_off.push_back(-1);
      k->in_t.push_back(DType::kF32);
    }
    k->sub_in.push_back(s);
    ins.push_back(s);
  }
  NodeId sn = k->sub.add_node(n.kind, ins, n.attrs, n.name);
  const Node& sub_node = k->sub.node(sn);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    ValueId so = sub_node.outputs[i];
    DType want = g.type(n.outputs[i]).dtype;
    // Shape inference over f32 inputs gives f32 where the node gives 16 bits;
    // anything else (an index output) must agree as it is.
    bool wide = is_float16(want) && k->sub.type(so).dtype == DType::kF32;
    if (!wide && k->sub.type(so).dtype != want) return nullptr;
    k->sub_out.push_back(so);
    k->out_off.push_back(wide ? k->alloc(k->sub.type(so).nbytes()) : -1);
    k->out_t.push_back(want);
  }
  k->sub.set_outputs(sub_node.outputs);
  k->inner = make_native_kernel(k->sub, sn);
  if (!k->inner) return nullptr;
  k->inner_scratch_off = k->alloc(k->inner->scratch_bytes());
  // Inputs are widened before anything is written: the output may take an
  // input's buffer wherever the f32 kernel's may.
  k->in_place_input = k->inner->in_place_input;
  k->max_threads = k->inner->max_threads;
  return finish_node_kernel(std::move(k), n);
}

std::unique_ptr<Kernel> make_native_kernel_as_f32(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  Graph sub;
  std::vector<ValueId> ins;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    ValueId v = n.inputs[i];
    if (v == kNoValue || g.value(v).constant) return nullptr;
    auto seen = std::find(n.inputs.begin(), n.inputs.begin() + static_cast<long>(i), v);
    if (seen != n.inputs.begin() + static_cast<long>(i)) {
      ins.push_back(ins[static_cast<size_t>(seen - n.inputs.begin())]);
      continue;
    }
    TensorType t = g.type(v);
    if (is_float16(t.dtype)) t.dtype = DType::kF32;
    ins.push_back(sub.add_input(g.value(v).name, t));
  }
  NodeId sn = sub.add_node(n.kind, ins, n.attrs, n.name);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    DType want = g.type(n.outputs[i]).dtype;
    DType got = sub.type(sub.node(sn).outputs[i]).dtype;
    if (got != (is_float16(want) ? DType::kF32 : want)) return nullptr;
  }
  sub.set_outputs(sub.node(sn).outputs);
  std::unique_ptr<Kernel> k = make_native_kernel(sub, sn);
  if (!k) return nullptr;
  // The kernel reads its buffers by position in inputs / outputs: the
  // node's own values, which the caller maps onto the copies.
  return finish_node_kernel(std::move(k), n);
}

}  // namespace tessera::runtime::cpu
