#include "runtime/reference_kernel.h"

#include <cstring>
#include <type_traits>

#include "graph/error.h"
#include "graph/interpreter.h"

namespace tessera::runtime {
namespace {

template <class T>
void load(const uint8_t* p, RefTensor<T>& r) {
  int64_t n = r.numel();
  if (r.is_num()) {
    r.num.resize(static_cast<size_t>(n));
    switch (r.type.dtype) {
      case DType::kF32:
        for (int64_t i = 0; i < n; ++i) r.num[i] = reinterpret_cast<const float*>(p)[i];
        break;
      case DType::kF64:
        for (int64_t i = 0; i < n; ++i) r.num[i] = static_cast<T>(reinterpret_cast<const double*>(p)[i]);
        break;
      case DType::kF16:
        for (int64_t i = 0; i < n; ++i) r.num[i] = half_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
        break;
      default:  // kBF16
        for (int64_t i = 0; i < n; ++i) r.num[i] = bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    }
    return;
  }
  r.ints.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (r.type.dtype) {
      case DType::kI64: r.ints[i] = reinterpret_cast<const int64_t*>(p)[i]; break;
      case DType::kI32: r.ints[i] = reinterpret_cast<const int32_t*>(p)[i]; break;
      case DType::kI8: r.ints[i] = reinterpret_cast<const int8_t*>(p)[i]; break;
      default: r.ints[i] = p[i];  // u8, bool
    }
  }
}

template <class T>
void store(const RefTensor<T>& r, uint8_t* p) {
  int64_t n = r.numel();
  if (r.is_num()) {
    TESSERA_CHECK(static_cast<int64_t>(r.num.size()) == n, "reference kernel output has the wrong size");
    for (int64_t i = 0; i < n; ++i) {
      T x = r.num[i];
      switch (r.type.dtype) {
        case DType::kF32: reinterpret_cast<float*>(p)[i] = static_cast<float>(x); break;
        case DType::kF64: reinterpret_cast<double*>(p)[i] = static_cast<double>(x); break;
        case DType::kF16: reinterpret_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(x)); break;
        default: reinterpret_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(x));
      }
    }
    return;
  }
  TESSERA_CHECK(static_cast<int64_t>(r.ints.size()) == n, "reference kernel output has the wrong size");
  for (int64_t i = 0; i < n; ++i) {
    int64_t x = r.ints[i];
    switch (r.type.dtype) {
      case DType::kI64: reinterpret_cast<int64_t*>(p)[i] = x; break;
      case DType::kI32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(x); break;
      case DType::kI8: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(x); break;
      case DType::kBool: p[i] = x != 0; break;
      default: p[i] = static_cast<uint8_t>(x);
    }
  }
}

// Computes in double when the node touches an f64 value (an f64 graph keeps
// its precision through fallbacks), in float otherwise.
template <class T>
class ReferenceKernel : public Kernel {
 public:
  ReferenceKernel(const Graph& g, const Node& node, EvalFn<T> fn) : node_(node), fn_(fn) {
    for (ValueId v : node.inputs) in_types_.push_back(v == kNoValue ? TensorType{} : g.type(v));
    for (ValueId v : node.outputs) out_types_.push_back(g.type(v));
  }

  void run(ExecContext& ctx) override {
    std::vector<RefTensor<T>> ins(in_types_.size());
    EvalArgs<T> args{node_, {}, nullptr, nullptr};
    for (size_t i = 0; i < ins.size(); ++i) {
      if (node_.inputs[i] == kNoValue) {
        args.inputs.push_back(nullptr);
        continue;
      }
      ins[i].type = in_types_[i];
      load(ctx.ptr[inputs[i]], ins[i]);
      args.inputs.push_back(&ins[i]);
    }
    std::vector<RefTensor<T>> outs(out_types_.size());
    for (size_t i = 0; i < outs.size(); ++i) outs[i].type = out_types_[i];
    args.outputs = &outs;
    fn_(args);
    for (size_t i = 0; i < outs.size(); ++i) store(outs[i], ctx.ptr[outputs[i]]);
  }

  std::string impl() const override { return std::is_same_v<T, double> ? "reference:f64" : "reference"; }

 private:
  Node node_;
  EvalFn<T> fn_;
  std::vector<TensorType> in_types_, out_types_;
};

bool touches_f64(const Graph& g, const Node& node) {
  for (ValueId v : node.inputs)
    if (v != kNoValue && g.type(v).dtype == DType::kF64) return true;
  for (ValueId v : node.outputs)
    if (g.type(v).dtype == DType::kF64) return true;
  return false;
}

}  // namespace

std::unique_ptr<Kernel> make_reference_kernel(const Graph& g, NodeId id) {
  const Node& node = g.node(id);
  const OpDef& def = op_def(node.kind);
  std::unique_ptr<Kernel> k;
  if (touches_f64(g, node) && def.eval_f64) k = std::make_unique<ReferenceKernel<double>>(g, node, def.eval_f64);
  else if (def.eval_f32) k = std::make_unique<ReferenceKernel<float>>(g, node, def.eval_f32);
  else throw Error(ErrorKind::kUnsupported, "no kernel for this op", {"", node.name, op_name(node.kind)});
  k->inputs = node.inputs;
  k->outputs = node.outputs;
  k->node = node.name;
  k->op = op_name(node.kind);
  k->fallback = true;
  return k;
}

}  // namespace tessera::runtime
