// Native kernels for the ops of masks and index arithmetic that oneDNN has no
// primitive for: Cast between any two dtypes, comparisons (bool out), And / Or /
// Xor / Not. Semantics are the reference interpreter's (graph/ops/
// elementwise*.cc): float-to-int casts truncate toward zero then wrap, NaN and
// out-of-range floats become 0; comparisons are false on NaN; narrowing float
// casts round to nearest even.
#include <cmath>
#include <cstring>

#include "graph/error.h"
#include "graph/ops/int_arith.h"
#include "graph/ops/op_util.h"
#include "runtime/cpu/half_convert.h"
#include "runtime/cpu/native_kernels.h"

namespace tessera::runtime::cpu {
namespace {

// Reads element i of a buffer of dtype t as double (floats) or int64 (the rest).
double load_float(const uint8_t* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return reinterpret_cast<const float*>(p)[i];
    case DType::kF64: return reinterpret_cast<const double*>(p)[i];
    case DType::kF16: return half_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    default: return bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
  }
}

int64_t load_int(const uint8_t* p, DType t, int64_t i) {
  switch (t) {
    case DType::kI64: return reinterpret_cast<const int64_t*>(p)[i];
    case DType::kI32: return reinterpret_cast<const int32_t*>(p)[i];
    case DType::kI8: return reinterpret_cast<const int8_t*>(p)[i];
    default: return p[i];  // u8, bool
  }
}

void store_int(uint8_t* p, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::kI64: reinterpret_cast<int64_t*>(p)[i] = v; break;
    case DType::kI32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::kI8: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    default: p[i] = static_cast<uint8_t>(v);  // u8, bool (already 0/1)
  }
}

// `x` is exact in the source dtype's precision; f16/bf16 targets round from
// float as the interpreter does (it computes f16 values in float).
void store_float(uint8_t* p, DType t, int64_t i, double x) {
  switch (t) {
    case DType::kF32: reinterpret_cast<float*>(p)[i] = static_cast<float>(x); break;
    case DType::kF64: reinterpret_cast<double*>(p)[i] = x; break;
    case DType::kF16: reinterpret_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(x)); break;
    default: reinterpret_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(x));
  }
}

int64_t float_to_target_int(double x, DType to) {
  if (to == DType::kBool) return x != 0 ? 1 : 0;  // NaN is true, as in the interpreter
  double d = std::trunc(x);
  if (!(d > -9.2e18 && d < 9.2e18)) return 0;
  return ops::wrap_int(to, static_cast<int64_t>(d));
}

constexpr int64_t kParallelMin = 1 << 16;

class CastKernel : public Kernel {
 public:
  DType from = DType::kF32, to = DType::kF32;
  int64_t n = 0;
  void run(ExecContext& ctx) override {
    const uint8_t* x = ctx.ptr[inputs[0]];
    uint8_t* y = ctx.ptr[outputs[0]];
    if (from == to) {
      if (x != y) std::memcpy(y, x, static_cast<size_t>(n) * dtype_size(to));
      return;
    }
    // The hot cases of mixed-precision graphs (keep_io_types' casts at the
    // boundary, f32 islands such as Llama's RMSNorm) and index math get
    // vectorized loops.
    if (from == DType::kF32 && is_float16(to)) {
      narrow_from_f32(to, reinterpret_cast<const float*>(x), y, n);
      return;
    }
    if (is_float16(from) && to == DType::kF32) {
      widen_to_f32(from, x, reinterpret_cast<float*>(y), n);
      return;
    }
    if (from == DType::kI64 && to == DType::kF32) {
      const int64_t* a = reinterpret_cast<const int64_t*>(x);
      float* b = reinterpret_cast<float*>(y);
      // The if clause names the parallel construct only: a bare one would
      // turn simd off too under the line (native_kernels.cc, UnaryKernel).
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) b[i] = static_cast<float>(a[i]);
      return;
    }
    bool fin = is_float(from), fout = is_float(to);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      if (fin && fout) store_float(y, to, i, load_float(x, from, i));
      else if (fin) store_int(y, to, i, float_to_target_int(load_float(x, from, i), to));
      // Integers into f32/f16/bf16 round through float, as the interpreter's f32 mode.
      else if (fout) store_float(y, to, i, to == DType::kF64 ? static_cast<double>(load_int(x, from, i))
                                                             : static_cast<float>(load_int(x, from, i)));
      else store_int(y, to, i, ops::wrap_int(to, load_int(x, from, i)));
    }
  }
  std::string impl() const override { return "native"; }
};

bool is_compare(OpKind k) {
  return k == OpKind::kEqual || k == OpKind::kLess || k == OpKind::kLessOrEqual || k == OpKind::kGreater ||
         k == OpKind::kGreaterOrEqual;
}

template <class V>
bool compare(OpKind kind, V x, V y) {
  switch (kind) {
    case OpKind::kEqual: return x == y;
    case OpKind::kLess: return x < y;
    case OpKind::kLessOrEqual: return x <= y;
    case OpKind::kGreater: return x > y;
    default: return x >= y;  // kGreaterOrEqual
  }
}

// Comparisons (any numeric dtype in, bool out) and And / Or / Xor (bool in and
// out), with numpy broadcasting through index maps.
class PredicateKernel : public Kernel {
 public:
  OpKind kind = OpKind::kEqual;
  DType dtype = DType::kF32;  // the operands'
  std::vector<int64_t> amap, bmap;
  void run(ExecContext& ctx) override {
    const uint8_t* a = ctx.ptr[inputs[0]];
    const uint8_t* b = ctx.ptr[inputs[1]];
    uint8_t* y = ctx.ptr[outputs[0]];
    const int64_t n = static_cast<int64_t>(amap.size());
    const int64_t* am = amap.data();
    const int64_t* bm = bmap.data();
    if (!is_compare(kind)) {
      OpKind k = kind;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) {
        bool p = a[am[i]] != 0, q = b[bm[i]] != 0;
        y[i] = k == OpKind::kAnd ? (p && q) : k == OpKind::kOr ? (p || q) : (p != q);
      }
      return;
    }
    if (dtype == DType::kF32) {
      const float* fa = reinterpret_cast<const float*>(a);
      const float* fb = reinterpret_cast<const float*>(b);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) y[i] = compare(kind, fa[am[i]], fb[bm[i]]);
    } else if (is_float(dtype)) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) y[i] = compare(kind, load_float(a, dtype, am[i]), load_float(b, dtype, bm[i]));
    } else {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) y[i] = compare(kind, load_int(a, dtype, am[i]), load_int(b, dtype, bm[i]));
    }
  }
  std::string impl() const override { return "native"; }
};

class NotKernel : public Kernel {
 public:
  int64_t n = 0;
  void run(ExecContext& ctx) override {
    const uint8_t* x = ctx.ptr[inputs[0]];
    uint8_t* y = ctx.ptr[outputs[0]];
#pragma omp parallel for simd schedule(static) if (parallel : n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] == 0;
  }
  std::string impl() const override { return "native"; }
};


}  // namespace

std::unique_ptr<Kernel> make_logic_kernel(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const TensorType& y = g.type(n.outputs[0]);
  if (n.kind == OpKind::kCast) {
    auto k = std::make_unique<CastKernel>();
    k->from = g.type(n.inputs[0]).dtype;
    k->to = y.dtype;
    k->n = y.numel();
    if (dtype_size(k->from) == dtype_size(k->to)) k->in_place_input = 0;
    return finish_node_kernel(std::move(k), n);
  }
  if (n.kind == OpKind::kNot) {
    if (g.type(n.inputs[0]).dtype != DType::kBool) return nullptr;
    auto k = std::make_unique<NotKernel>();
    k->n = y.numel();
    k->in_place_input = 0;
    return finish_node_kernel(std::move(k), n);
  }
  bool logic = n.kind == OpKind::kAnd || n.kind == OpKind::kOr || n.kind == OpKind::kXor;
  if (!logic && !is_compare(n.kind)) return nullptr;
  DType dt = g.type(n.inputs[0]).dtype;
  if (g.type(n.inputs[1]).dtype != dt || y.dtype != DType::kBool || (logic && dt != DType::kBool)) return nullptr;
  auto k = std::make_unique<PredicateKernel>();
  k->kind = n.kind;
  k->dtype = dt;
  k->amap = ops::broadcast_index_map(g.type(n.inputs[0]).shape, y.shape);
  k->bmap = ops::broadcast_index_map(g.type(n.inputs[1]).shape, y.shape);
  return finish_node_kernel(std::move(k), n);
}

}  // namespace tessera::runtime::cpu
