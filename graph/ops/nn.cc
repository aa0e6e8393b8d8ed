// Linear algebra and global pooling: MatMul, Gemm, GlobalAveragePool,
// GlobalMaxPool. The windowed ops (Conv, ConvTranspose, MaxPool, AveragePool)
// live in conv.cc and register through register_conv_ops.
//
//   MatMul(A, B)     numpy matmul: 1-D operands are promoted (A to 1xK, B to
//                    Kx1) and the promoted dim removed again; batch dims broadcast
//   Gemm(A, B, [C])  alpha * op(A) op(B) + beta * C, op = transpose if transX,
//                    C broadcast (unidirectionally) to [M, N]
//   Global*Pool(X)   [N, C, d...] -> [N, C, 1...], mean or max over d...
#include "graph/attr_views.h"
#include "graph/interpreter.h"
#include "graph/number.h"
#include "graph/ops/dense_kernels.h"
#include "graph/ops/op_util.h"
#include "graph/ops/registry.h"

namespace tessera {

// Defined in conv.cc: the windowed half of the nn family.
void register_conv_ops(std::vector<OpDef>& defs);

namespace {

// MatMul operands after 1-D promotion: out = batch + [m] + [n], minus the
// promoted dims.
struct MatMulGeometry {
  Shape a_batch, b_batch, batch, out;
  int64_t m = 0, k = 0, n = 0;
};

MatMulGeometry matmul_geometry(const Shape& a, const Shape& b) {
  if (a.empty() || b.empty())
    TESSERA_SHAPE_ERROR("MatMul inputs must have rank >= 1, got " << shape_str(a) << " and " << shape_str(b));
  Shape pa = a.size() == 1 ? Shape{1, a[0]} : a;
  Shape pb = b.size() == 1 ? Shape{b[0], 1} : b;
  MatMulGeometry g;
  g.m = pa[pa.size() - 2];
  g.k = pa.back();
  g.n = pb.back();
  int64_t kb = pb[pb.size() - 2];
  if (g.k != kb)
    TESSERA_SHAPE_ERROR("MatMul inner dimensions differ: A " << shape_str(a) << " has K=" << g.k << ", B "
                                                               << shape_str(b) << " has K=" << kb);
  g.a_batch.assign(pa.begin(), pa.end() - 2);
  g.b_batch.assign(pb.begin(), pb.end() - 2);
  try {
    g.batch = ops::broadcast_shapes(g.a_batch, g.b_batch);
  } catch (const Error&) {
    TESSERA_SHAPE_ERROR("MatMul batch dimensions of " << shape_str(a) << " and " << shape_str(b)
                                                      << " do not broadcast");
  }
  g.out = g.batch;
  if (a.size() > 1) g.out.push_back(g.m);
  if (b.size() > 1) g.out.push_back(g.n);
  return g;
}

std::vector<TensorType> infer_matmul(const InferContext& c) {
  const TensorType &a = c.inputs[0], &b = c.inputs[1];
  if (a.dtype != b.dtype)
    TESSERA_SHAPE_ERROR("MatMul inputs have different dtypes: " << type_str(a) << " and " << type_str(b));
  if (a.dtype == DType::kBool) TESSERA_SHAPE_ERROR("MatMul does not take bool inputs");
  return ops::one(a.dtype, matmul_geometry(a.shape, b.shape).out);
}

// One product per broadcast batch entry; V is T or int64_t (integer MatMul).
template <class V>
void matmul_batches(const V* a, const V* b, V* out, const MatMulGeometry& g) {
  std::vector<int64_t> a_map = ops::broadcast_index_map(g.a_batch, g.batch);
  std::vector<int64_t> b_map = ops::broadcast_index_map(g.b_batch, g.batch);
  int64_t a_step = g.m * g.k, b_step = g.k * g.n, o_step = g.m * g.n;
  double macs = static_cast<double>(g.m) * g.n * g.k;
  ops::for_each_product(static_cast<int64_t>(a_map.size()), macs, [&](int64_t i, bool parallel) {
    ops::gemm_accumulate<V>(g.m, g.n, g.k, {a + a_map[i] * a_step, g.k, 1}, {b + b_map[i] * b_step, g.n, 1},
                            out + i * o_step, g.n, parallel);
  });
}

template <class T>
void eval_matmul(const EvalArgs<T>& args) {
  const RefTensor<T>& a = *args.inputs[0];
  const RefTensor<T>& b = *args.inputs[1];
  RefTensor<T>& out = (*args.outputs)[0];
  ops::alloc(out);
  MatMulGeometry g = matmul_geometry(a.type.shape, b.type.shape);
  if (out.is_num()) matmul_batches(a.num.data(), b.num.data(), out.num.data(), g);
  else matmul_batches(a.ints.data(), b.ints.data(), out.ints.data(), g);
}

void require_float(const TensorType& t, const char* what) {
  if (!is_float(t.dtype)) TESSERA_SHAPE_ERROR(what << " must have a floating dtype, got " << type_str(t));
}

std::vector<TensorType> infer_gemm(const InferContext& c) {
  const TensorType &a = c.inputs[0], &b = c.inputs[1];
  require_float(a, "Gemm input A");
  if (a.dtype != b.dtype)
    TESSERA_SHAPE_ERROR("Gemm inputs have different dtypes: " << type_str(a) << " and " << type_str(b));
  if (a.rank() != 2 || b.rank() != 2)
    TESSERA_SHAPE_ERROR("Gemm A and B must be 2-D, got " << shape_str(a.shape) << " and " << shape_str(b.shape));
  bool ta = c.node.attrs.i("transA") != 0, tb = c.node.attrs.i("transB") != 0;
  int64_t m = ta ? a.shape[1] : a.shape[0], ka = ta ? a.shape[0] : a.shape[1];
  int64_t kb = tb ? b.shape[1] : b.shape[0], n = tb ? b.shape[0] : b.shape[1];
  if (ka != kb)
    TESSERA_SHAPE_ERROR("Gemm inner dimensions differ: op(A) is " << m << "x" << ka << ", op(B) is " << kb << "x"
                                                                    << n);
  Shape out{m, n};
  if (c.has_input(2)) {
    const TensorType& ct = c.inputs[2];
    if (ct.dtype != a.dtype) TESSERA_SHAPE_ERROR("Gemm C has dtype " << dtype_name(ct.dtype) << ", expected "
                                                                     << dtype_name(a.dtype));
    bool ok = ct.rank() <= 2;
    for (int64_t d = 0; ok && d < ct.rank(); ++d) {
      int64_t want = out[2 - ct.rank() + d];
      ok = ct.shape[d] == want || ct.shape[d] == 1;
    }
    if (!ok) TESSERA_SHAPE_ERROR("Gemm C of shape " << shape_str(ct.shape) << " does not broadcast to "
                                                    << shape_str(out));
  }
  return ops::one(a.dtype, out);
}

template <class T>
void eval_gemm(const EvalArgs<T>& args) {
  const RefTensor<T>& a = *args.inputs[0];
  const RefTensor<T>& b = *args.inputs[1];
  const RefTensor<T>* c = args.inputs.size() > 2 ? args.inputs[2] : nullptr;
  RefTensor<T>& out = (*args.outputs)[0];
  ops::alloc(out);
  bool ta = args.node.attrs.i("transA") != 0, tb = args.node.attrs.i("transB") != 0;
  T alpha = num_from_double<T>(args.node.attrs.f("alpha"));
  T beta = num_from_double<T>(args.node.attrs.f("beta"));
  int64_t m = out.type.shape[0], n = out.type.shape[1];
  int64_t k = ta ? a.type.shape[0] : a.type.shape[1];
  ops::MatrixView<T> av{a.num.data(), ta ? 1 : k, ta ? m : 1};
  ops::MatrixView<T> bv{b.num.data(), tb ? 1 : n, tb ? k : 1};
  ops::gemm_accumulate<T>(m, n, k, av, bv, out.num.data(), n);
  std::vector<int64_t> c_map;
  if (c) c_map = ops::broadcast_index_map(c->type.shape, out.type.shape);
  for (int64_t i = 0; i < m * n; ++i) {
    T y = alpha * out.num[i];
    if (c) y = y + beta * c->num[c_map[i]];
    out.num[i] = y;
  }
}

std::vector<TensorType> infer_global_pool(const InferContext& c) {
  const TensorType& x = c.inputs[0];
  require_float(x, "pooling input");
  if (x.rank() < 3) TESSERA_SHAPE_ERROR("pooling input must be [N, C, spatial...], got " << shape_str(x.shape));
  Shape out = x.shape;
  for (int64_t d = 2; d < x.rank(); ++d) {
    if (x.shape[d] == 0) TESSERA_SHAPE_ERROR("global pooling over an empty spatial dim " << d);
    out[d] = 1;
  }
  return ops::one(x.dtype, out);
}

template <class T, bool kMax>
void eval_global_pool(const EvalArgs<T>& args) {
  const RefTensor<T>& x = *args.inputs[0];
  RefTensor<T>& out = (*args.outputs)[0];
  ops::alloc(out);
  int64_t channels = x.type.shape[0] * x.type.shape[1];
  int64_t area = channels == 0 ? 0 : x.numel() / channels;
  for (int64_t ch = 0; ch < channels; ++ch) {
    const T* p = x.num.data() + ch * area;
    T acc = p[0];
    for (int64_t i = 1; i < area; ++i) {
      if constexpr (kMax) {
        if (num_less(acc, p[i])) acc = p[i];
      } else {
        acc = acc + p[i];
      }
    }
    if constexpr (!kMax) acc = num_div(acc, num_from_int<T>(area));
    out.num[ch] = acc;
  }
}

template <class T>
void eval_global_average_pool(const EvalArgs<T>& a) { eval_global_pool<T, false>(a); }
template <class T>
void eval_global_max_pool(const EvalArgs<T>& a) { eval_global_pool<T, true>(a); }

// out [batch.., m, n] = Σ_k A[batch.., m, k] · B[batch.., k, n]; batch dims
// broadcast, 1-D operands have no m (or n).
DimMap matmul_dim_map(const DimMapContext& c) {
  const Shape &a = c.in[0], &b = c.in[1];
  MatMulGeometry g = matmul_geometry(a, b);
  DimMap m;
  std::vector<int> batch;
  for (int64_t s : g.batch) batch.push_back(dims::add_factor(m, s));
  int fm = dims::add_factor(m, g.m), fn = dims::add_factor(m, g.n), fk = dims::add_factor(m, g.k, FactorKind::kSum);
  std::vector<DimExpr> out = dims::factors(batch);
  if (a.size() > 1) out.push_back(dims::factor(fm));
  if (b.size() > 1) out.push_back(dims::factor(fn));
  auto operand = [&](const Shape& s, const Shape& core_batch, std::vector<DimExpr> core) {
    std::vector<DimExpr> d = dims::broadcast(core_batch, g.batch, batch);
    if (s.size() == 1) return core;
    d.insert(d.end(), core.begin(), core.end());
    return d;
  };
  Read ra{0, operand(a, g.a_batch, a.size() == 1 ? std::vector<DimExpr>{dims::factor(fk)}
                                                  : std::vector<DimExpr>{dims::factor(fm), dims::factor(fk)}),
          false};
  Read rb{1, operand(b, g.b_batch, b.size() == 1 ? std::vector<DimExpr>{dims::factor(fk)}
                                                  : std::vector<DimExpr>{dims::factor(fk), dims::factor(fn)}),
          false};
  m.outputs.push_back({Piece{std::move(out), {std::move(ra), std::move(rb)}}});
  m.products = true;
  return m;
}

// out [m, n] = alpha Σ_k op(A)[m, k] · op(B)[k, n] + beta C[m, n] (C broadcast).
DimMap gemm_dim_map(const DimMapContext& c) {
  bool ta = c.node.attrs.i("transA") != 0, tb = c.node.attrs.i("transB") != 0;
  const Shape &a = c.in[0], &out = c.out[0];
  DimMap m;
  int fm = dims::add_factor(m, out[0]), fn = dims::add_factor(m, out[1]);
  int fk = dims::add_factor(m, ta ? a[0] : a[1], FactorKind::kSum);
  Piece p{{dims::factor(fm), dims::factor(fn)}, {}};
  p.reads.push_back({0, ta ? dims::factors({fk, fm}) : dims::factors({fm, fk}), false});
  p.reads.push_back({1, tb ? dims::factors({fn, fk}) : dims::factors({fk, fn}), false});
  if (c.has_input(2)) p.reads.push_back({2, dims::broadcast(c.in[2], out, {fm, fn}), true});
  m.outputs.push_back({std::move(p)});
  m.products = true;
  m.product_scale = c.node.attrs.f("alpha");
  m.bias_scale = c.node.attrs.f("beta");
  return m;
}

// out [n, c, 1..] = mean (max) over the spatial dims of x [n, c, d..].
DimMap global_pool_dim_map(const DimMapContext& c) {
  const Shape& x = c.in[0];
  FactorKind k = c.node.kind == OpKind::kGlobalAveragePool ? FactorKind::kMean : FactorKind::kReduce;
  DimMap m;
  Piece p;
  Read r{0, {}, false};
  for (size_t d = 0; d < x.size(); ++d) {
    int f = dims::add_factor(m, x[d], d < 2 ? FactorKind::kPass : k);
    r.dims.push_back(dims::factor(f));
    p.dims.push_back(d < 2 ? dims::factor(f) : dims::constant_zero());
  }
  p.reads.push_back(std::move(r));
  m.outputs.push_back({std::move(p)});
  return m;
}

Linearity bilinear(const Node&) { return {0b11u, true}; }
Linearity bilinear_without_c(const Node& n) {
  bool has_c = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  return has_c ? Linearity{} : Linearity{0b11u, true};
}

// FLOPs: a multiply-add per output element and contracted index; Gemm's
// bias one add per output element.
int64_t matmul_flops(const Graph& g, const Node& n) {
  const Shape& a = g.type(n.inputs[0]).shape;
  int64_t k = a.empty() ? 1 : a.back();
  return 2 * g.type(n.outputs[0]).numel() * k;
}
int64_t gemm_flops(const Graph& g, const Node& n) {
  const Shape& a = g.type(n.inputs[0]).shape;
  int64_t out = g.type(n.outputs[0]).numel();
  int64_t k = GemmAttrs::of(n).transA ? a[0] : a[1];
  bool bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  return 2 * out * k + (bias ? out : 0);
}

}  // namespace

void register_nn_ops(std::vector<OpDef>& defs) {
  auto def = [&](OpKind k) -> OpDef& { return defs[static_cast<int>(k)]; };

  OpDef& mm = def(OpKind::kMatMul);
  mm.min_inputs = mm.max_inputs = 2;
  mm.infer = infer_matmul;
  mm.dim_map = matmul_dim_map;
  TESSERA_SET_KERNELS(mm, eval_matmul);
  mm.linearity = bilinear;

  OpDef& gemm = def(OpKind::kGemm);
  gemm.min_inputs = 2;
  gemm.max_inputs = 3;
  gemm.attrs = GemmAttrs::schema();
  gemm.flops = gemm_flops;
  gemm.infer = infer_gemm;
  gemm.dim_map = gemm_dim_map;
  TESSERA_SET_KERNELS(gemm, eval_gemm);
  gemm.linearity = bilinear_without_c;

  OpDef& gap = def(OpKind::kGlobalAveragePool);
  gap.infer = infer_global_pool;
  gap.dim_map = global_pool_dim_map;
  TESSERA_SET_KERNELS(gap, eval_global_average_pool);
  gap.linearity = ops::linear_in_input0;

  OpDef& gmp = def(OpKind::kGlobalMaxPool);
  gmp.orders_values = true;
  gmp.input_arithmetic = {1, 0};  // a compare, an add, per element read
  gap.input_arithmetic = {1, 0};
  def(OpKind::kMatMul).flops = matmul_flops;
  gmp.infer = infer_global_pool;
  gmp.dim_map = global_pool_dim_map;
  TESSERA_SET_KERNELS(gmp, eval_global_max_pool);

  register_conv_ops(defs);
}

}  // namespace tessera
