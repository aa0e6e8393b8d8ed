// The blocked reference kernels of Conv, MatMul and Gemm (graph/ops/conv.cc,
// graph/ops/nn.cc over graph/ops/dense_kernels.cc) against plain loop nests,
// in float, double and Z_p (exact), on shapes that reach every path: edge
// tiles, several k and n blocks, threads across products and within one,
// im2col in chunks, pointwise convolutions, and random windows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <type_traits>

#include "graph/graph.h"
#include "graph/interpreter.h"
#include "graph/number.h"
#include "graph/op.h"

namespace tessera {
namespace {

using Ints = std::vector<int64_t>;

template <class T>
DType dtype_of() {
  return std::is_same_v<T, double> ? DType::kF64 : DType::kF32;
}

template <class T>
RefTensor<T> random_tensor(const Shape& shape, std::mt19937_64& rng) {
  RefTensor<T> t;
  t.type = {dtype_of<T>(), shape};
  std::uniform_real_distribution<double> unit(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if constexpr (kIsZp<T>) t.num.push_back(Zp::from_u64(rng()));
    else t.num.push_back(static_cast<T>(unit(rng)));
  }
  return t;
}

template <class T>
RefTensor<T> run_node(OpKind kind, const std::vector<RefTensor<T>>& ins, Attrs attrs) {
  Graph g;
  std::vector<ValueId> ids;
  for (size_t i = 0; i < ins.size(); ++i) ids.push_back(g.add_input("in" + std::to_string(i), ins[i].type));
  g.set_outputs({g.add(kind, ids, std::move(attrs))});
  return interpret<T>(g, ins)[0];
}

// What a plain loop computes: each value, and the sum of the magnitudes of
// its terms, which bounds the rounding error of any summation order.
template <class T>
struct Expected {
  Shape shape;
  std::vector<T> value;
  std::vector<double> magnitude;
  int64_t terms = 0;
};

template <class T>
void expect_matches(const RefTensor<T>& got, const Expected<T>& want) {
  ASSERT_EQ(got.type.shape, want.shape);
  ASSERT_EQ(got.num.size(), want.value.size());
  for (size_t i = 0; i < want.value.size(); ++i) {
    if constexpr (kIsZp<T>) {
      ASSERT_EQ(got.num[i].v, want.value[i].v) << "element " << i;
    } else {
      double bound = 2.0 * (want.terms + 2) * std::numeric_limits<T>::epsilon() * want.magnitude[i];
      ASSERT_NEAR(got.num[i], want.value[i], bound) << "element " << i;
    }
  }
}

template <class T>
double magnitude(T x) {
  if constexpr (kIsZp<T>) return 0;
  else return std::fabs(static_cast<double>(x));
}

// ---- Conv

struct ConvCase {
  int64_t batch, group, cg, mg;
  Ints in, k, s, d, pads;  // pads: begins then ends
  bool bias;
};

Attrs conv_attrs(const ConvCase& c) {
  Attrs a;
  a.set("kernel_shape", c.k);
  a.set("strides", c.s);
  a.set("pads", c.pads);
  a.set("dilations", c.d);
  a.set("group", c.group);
  return a;
}

// The loop nest of the original kernel: per output, bias then (ic, taps).
template <class T>
Expected<T> naive_conv(const ConvCase& c, const RefTensor<T>& x, const RefTensor<T>& w, const RefTensor<T>* b) {
  int64_t rank = static_cast<int64_t>(c.in.size()), channels = c.group * c.cg, maps = c.group * c.mg;
  Expected<T> e;
  e.shape = {c.batch, maps};
  Ints out;
  for (int64_t i = 0; i < rank; ++i)
    out.push_back((c.in[i] + c.pads[i] + c.pads[rank + i] - c.d[i] * (c.k[i] - 1) - 1) / c.s[i] + 1);
  e.shape.insert(e.shape.end(), out.begin(), out.end());
  int64_t out_area = shape_numel(out), k_area = shape_numel(c.k), in_area = shape_numel(c.in);
  e.terms = c.cg * k_area + 1;
  Ints o(rank), kk(rank);
  for (int64_t n = 0; n < c.batch; ++n)
    for (int64_t m = 0; m < maps; ++m)
      for (int64_t op = 0; op < out_area; ++op) {
        for (int64_t i = rank - 1, r = op; i >= 0; r /= out[i], --i) o[i] = r % out[i];
        T acc = b ? b->num[m] : T{};
        double mag = magnitude(acc);
        for (int64_t ic = 0; ic < c.cg; ++ic)
          for (int64_t kp = 0; kp < k_area; ++kp) {
            for (int64_t i = rank - 1, r = kp; i >= 0; r /= c.k[i], --i) kk[i] = r % c.k[i];
            int64_t flat = 0;
            bool inside = true;
            for (int64_t i = 0; i < rank; ++i) {
              int64_t pos = o[i] * c.s[i] - c.pads[i] + kk[i] * c.d[i];
              inside = inside && pos >= 0 && pos < c.in[i];
              flat = flat * c.in[i] + pos;
            }
            if (!inside) continue;
            T term = x.num[(n * channels + m / c.mg * c.cg + ic) * in_area + flat] * w.num[(m * c.cg + ic) * k_area + kp];
            acc = acc + term;
            mag += magnitude(term);
          }
        e.value.push_back(acc);
        e.magnitude.push_back(mag);
      }
  return e;
}

template <class T>
void check_conv(const ConvCase& c, uint64_t seed) {
  SCOPED_TRACE("conv seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Shape xs{c.batch, c.group * c.cg}, ws{c.group * c.mg, c.cg};
  xs.insert(xs.end(), c.in.begin(), c.in.end());
  ws.insert(ws.end(), c.k.begin(), c.k.end());
  std::vector<RefTensor<T>> ins{random_tensor<T>(xs, rng), random_tensor<T>(ws, rng)};
  if (c.bias) ins.push_back(random_tensor<T>({c.group * c.mg}, rng));
  Expected<T> want = naive_conv(c, ins[0], ins[1], c.bias ? &ins[2] : nullptr);
  expect_matches(run_node(OpKind::kConv, ins, conv_attrs(c)), want);
}

// A random valid window of 1 to 3 spatial dims.
ConvCase random_conv(std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int64_t rank = pick(1, 3);
  ConvCase c{pick(1, 2), pick(1, 3), pick(1, 4), pick(1, 3), {}, {}, {}, {}, Ints(2 * rank), pick(0, 1) == 1};
  for (int64_t i = 0; i < rank; ++i) {
    c.k.push_back(pick(1, 3));
    c.s.push_back(pick(1, 3));
    c.d.push_back(pick(1, 2));
    c.pads[i] = pick(0, 2);
    c.pads[rank + i] = pick(0, 2);
    int64_t smallest = std::max<int64_t>(1, c.d[i] * (c.k[i] - 1) + 1 - c.pads[i] - c.pads[rank + i]);
    c.in.push_back(smallest + pick(0, rank == 3 ? 4 : 9));
  }
  return c;
}

// Fixed shapes for the paths random small ones miss.
std::vector<ConvCase> large_convs() {
  return {
      // Pointwise: X is the product's right operand; depth 300 spans two k blocks.
      {1, 1, 300, 20, {10, 10}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, true},
      // Depthwise over a batch: threads across (n, group) products.
      {3, 32, 1, 1, {20, 20}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      // Enough columns that im2col runs in two chunks.
      {1, 1, 16, 7, {98, 98}, {3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}, false},
      // Strided, dilated and grouped, with asymmetric padding, in 2-D and 3-D.
      {2, 2, 5, 7, {17, 13}, {3, 2}, {2, 1}, {1, 2}, {1, 0, 2, 1}, true},
      {1, 1, 3, 4, {6, 7, 5}, {2, 3, 2}, {1, 2, 1}, {2, 1, 1}, {0, 1, 1, 1, 0, 2}, true},
  };
}

template <class T>
void check_convs() {
  uint64_t seed = 0;
  for (const ConvCase& c : large_convs()) check_conv<T>(c, seed++);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 40; ++i) check_conv<T>(random_conv(rng), seed++);
}

TEST(ReferenceKernelsTest, ConvMatchesLoopNestF32) { check_convs<float>(); }
TEST(ReferenceKernelsTest, ConvMatchesLoopNestF64) { check_convs<double>(); }
TEST(ReferenceKernelsTest, ConvMatchesLoopNestZp) { check_convs<Zp>(); }

// ---- MatMul and Gemm

// numpy matmul with 1-D promotion and batch broadcasting, one dot product
// per output in increasing k.
template <class T>
Expected<T> naive_matmul(const RefTensor<T>& a, const RefTensor<T>& b) {
  Shape as = a.type.shape, bs = b.type.shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  size_t batch_rank = std::max(as.size(), bs.size()) - 2;
  auto dim = [&](const Shape& s, size_t i) {  // batch dim i, right-aligned
    size_t lead = batch_rank - (s.size() - 2);
    return i < lead ? int64_t{1} : s[i - lead];
  };
  Shape batch;
  for (size_t i = 0; i < batch_rank; ++i) batch.push_back(std::max(dim(as, i), dim(bs, i)));
  Expected<T> e;
  e.shape = batch;
  if (a.type.shape.size() > 1) e.shape.push_back(m);
  if (b.type.shape.size() > 1) e.shape.push_back(n);
  e.terms = k;
  for (int64_t flat = 0; flat < shape_numel(batch); ++flat) {
    int64_t ai = 0, bi = 0;
    for (size_t i = 0; i < batch_rank; ++i) {
      int64_t stride = shape_numel(Shape(batch.begin() + i + 1, batch.end()));
      int64_t idx = flat / stride % batch[i];
      ai = ai * dim(as, i) + (dim(as, i) == 1 ? 0 : idx);
      bi = bi * dim(bs, i) + (dim(bs, i) == 1 ? 0 : idx);
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T acc{};
        double mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          T term = a.num[(ai * m + i) * k + p] * b.num[(bi * k + p) * n + j];
          acc = acc + term;
          mag += magnitude(term);
        }
        e.value.push_back(acc);
        e.magnitude.push_back(mag);
      }
  }
  return e;
}

template <class T>
void check_matmuls() {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 1, 5, 7}, {3, 7, 9}}, {{7}, {2, 7, 4}}, {{3, 5, 7}, {7}}, {{7}, {7}},
      {{12, 33, 64}, {12, 64, 33}},  // threads across batch entries
      {{130, 300}, {300, 270}},      // several m and k blocks, edge tiles, threads within
      {{8, 270}, {270, 4200}},       // more columns than one n block
  };
  std::mt19937_64 rng(11);
  for (const auto& [as, bs] : cases) {
    SCOPED_TRACE("MatMul " + shape_str(as) + " x " + shape_str(bs));
    RefTensor<T> a = random_tensor<T>(as, rng), b = random_tensor<T>(bs, rng);
    expect_matches(run_node<T>(OpKind::kMatMul, {a, b}, {}), naive_matmul(a, b));
  }
}

TEST(ReferenceKernelsTest, MatMulMatchesLoopNestF32) { check_matmuls<float>(); }
TEST(ReferenceKernelsTest, MatMulMatchesLoopNestF64) { check_matmuls<double>(); }
TEST(ReferenceKernelsTest, MatMulMatchesLoopNestZp) { check_matmuls<Zp>(); }

TEST(ReferenceKernelsTest, IntegerMatMulIsExact) {
  RefTensor<float> a, b;
  a.type = {DType::kI64, {2, 3, 40}};
  b.type = {DType::kI64, {40, 130}};
  for (int64_t i = 0; i < a.numel(); ++i) a.ints.push_back(i % 17 - 8);
  for (int64_t i = 0; i < b.numel(); ++i) b.ints.push_back(i % 13 * 1000003 - 6);
  RefTensor<float> y = run_node<float>(OpKind::kMatMul, {a, b}, {});
  ASSERT_EQ(y.type.shape, (Shape{2, 3, 130}));
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 130; ++j) {
      int64_t want = 0;
      for (int64_t p = 0; p < 40; ++p) want += a.ints[i * 40 + p] * b.ints[p * 130 + j];
      ASSERT_EQ(y.ints[i * 130 + j], want) << i << ", " << j;
    }
}

template <class T>
void check_gemms() {
  const int64_t m = 37, n = 45, k = 300;
  const std::vector<Shape> c_shapes = {{}, {n}, {m, 1}, {m, n}};
  std::mt19937_64 rng(5);
  for (int trans = 0; trans < 4; ++trans)
    for (size_t ci = 0; ci <= c_shapes.size(); ++ci) {
      bool ta = trans & 1, tb = trans & 2, has_c = ci < c_shapes.size();
      SCOPED_TRACE("Gemm transA " + std::to_string(ta) + " transB " + std::to_string(tb) + " C " +
                   (has_c ? shape_str(c_shapes[ci]) : "none"));
      std::vector<RefTensor<T>> ins{random_tensor<T>(ta ? Shape{k, m} : Shape{m, k}, rng),
                                    random_tensor<T>(tb ? Shape{n, k} : Shape{k, n}, rng)};
      if (has_c) ins.push_back(random_tensor<T>(c_shapes[ci], rng));
      Attrs attrs;
      attrs.set("alpha", 2.5);
      attrs.set("beta", -1.5);
      attrs.set("transA", int64_t{ta});
      attrs.set("transB", int64_t{tb});
      T alpha = num_from_double<T>(2.5), beta = num_from_double<T>(-1.5);
      Expected<T> e{{m, n}, {}, {}, k + 2};
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          T acc{};
          double mag = 0;
          for (int64_t p = 0; p < k; ++p) {
            T term = ins[0].num[ta ? p * m + i : i * k + p] * ins[1].num[tb ? j * k + p : p * n + j];
            acc = acc + term;
            mag += magnitude(term);
          }
          T y = alpha * acc;
          mag *= 2.5;
          if (has_c) {
            const Shape& cs = c_shapes[ci];
            int64_t at = cs.size() == 2 ? (cs[1] == 1 ? i : i * n + j) : cs.size() == 1 ? j : 0;
            y = y + beta * ins[2].num[at];
            mag += 1.5 * magnitude(ins[2].num[at]);
          }
          e.value.push_back(y);
          e.magnitude.push_back(mag);
        }
      expect_matches(run_node(OpKind::kGemm, ins, attrs), e);
    }
}

TEST(ReferenceKernelsTest, GemmMatchesLoopNestF32) { check_gemms<float>(); }
TEST(ReferenceKernelsTest, GemmMatchesLoopNestF64) { check_gemms<double>(); }
TEST(ReferenceKernelsTest, GemmMatchesLoopNestZp) { check_gemms<Zp>(); }

}  // namespace
}  // namespace tessera
