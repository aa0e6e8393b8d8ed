// Dimension maps against the reference kernels: a copy op's output is the
// element its map reads; any op's output changes only where its map reads
// the changed input element; strided reads reproduce the copies.
#include "graph/dim_map.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "graph/interpreter.h"
#include "graph/op.h"
#include "tests/graph/op_cases.h"

namespace tessera {
namespace {

using testing::OpCase;
using testing::op_cases;
using testing::random_inputs;

std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs) {
  return evaluate(g, inputs, Precision::kF64);
}

std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + idx[d];
  return f;
}

// The data inputs of the node: its graph-input operands (constants hold
// indices and shapes, which the maps read as data-dependent positions).
std::vector<int> input_slot_of_graph_input(const OpCase& c) {
  const Node& n = c.graph.node(c.node);
  std::vector<int> slot(c.graph.inputs().size(), -1);
  for (size_t i = 0; i < n.inputs.size(); ++i)
    for (size_t k = 0; k < c.graph.inputs().size(); ++k)
      if (n.inputs[i] == c.graph.inputs()[k]) slot[k] = static_cast<int>(i);
  return slot;
}

// The piece of output o that holds position idx, with the factor values of
// its merge dims; nullptr if none does.
const Piece* piece_at(const DimMap& m, size_t o, const std::vector<int64_t>& idx, std::vector<int64_t>& values) {
  for (const Piece& p : m.outputs[o]) {
    values.assign(m.factors.size(), -1);
    bool in = true;
    for (size_t d = 0; d < idx.size() && in; ++d) in = decompose(m, p.dims[d], idx[d], values);
    if (in) return &p;
  }
  return nullptr;
}

// Whether some values of the factors a read leaves free (contracted ones,
// and pass factors the output position does not fix) make dim `e` read `target`.
bool may_read(const DimMap& m, const DimExpr& e, int64_t target, const std::vector<int64_t>& fixed) {
  if (e.form != DimForm::kAffine) return true;
  int64_t rest = target - e.offset;
  std::vector<const DimTerm*> free;
  for (const DimTerm& t : e.terms) {
    if (fixed[static_cast<size_t>(t.factor)] >= 0) rest -= t.coef * fixed[static_cast<size_t>(t.factor)];
    else free.push_back(&t);
  }
  if (free.empty()) return rest == 0;
  if (free.size() > 1) return true;  // not decided here: counted as a read
  int64_t c = free[0]->coef, size = m.factors[static_cast<size_t>(free[0]->factor)].size;
  if (c == 0) return rest == 0;
  return rest % c == 0 && rest / c >= 0 && rest / c < size;
}

TEST(DimMap, EveryKindHasOne) {
  for (int k = 0; k < kNumOpKinds; ++k)
    EXPECT_NE(op_def(static_cast<OpKind>(k)).dim_map, nullptr) << op_name(static_cast<OpKind>(k));
}

TEST(DimMap, ReadsAsWritten) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {2, 3, 4}}), b = g.add_input("b", {DType::kF32, {4, 5}});
  ValueId y = g.add(OpKind::kMatMul, {a, b});
  EXPECT_EQ(dim_map_str(dim_map(g, g.node(g.value(y).producer))),
            "a:2 b:3 c:5 d:4/sum; out0[a, b, c] <- in0[a, b, d] in1[d, c]");
  Attrs shape;
  shape.set("shape", std::vector<int64_t>{2, 16});
  ValueId x = g.add_input("x", {DType::kF32, {8, 4}});
  ValueId r = g.add(OpKind::kReshape, {x}, shape);
  EXPECT_EQ(dim_map_str(dim_map(g, g.node(g.value(r).producer))), "a:2 b:4 c:4; out0[a, 4b+c] <- in0[4a+b, c]");
  Attrs cat;
  cat.set("axis", int64_t{1});
  ValueId c0 = g.add_input("c0", {DType::kF32, {2, 3}}), c1 = g.add_input("c1", {DType::kF32, {2, 5}});
  ValueId c = g.add(OpKind::kConcat, {c0, c1}, cat);
  EXPECT_EQ(dim_map_str(dim_map(g, g.node(g.value(c).producer))),
            "a:2 b:3 c:5; out0[a, b] <- in0[a, b]; out0[a, c+3] <- in1[a, c]");
}

TEST(DimMap, ConvReadsAWindowAndGroups) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 4, 9}}), w = g.add_input("w", {DType::kF32, {6, 2, 3}});
  ValueId b = g.add_input("b", {DType::kF32, {6}});
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{3});
  a.set("strides", std::vector<int64_t>{2});
  a.set("pads", std::vector<int64_t>{1, 1});
  a.set("dilations", std::vector<int64_t>{1});
  a.set("group", int64_t{2});
  ValueId y = g.add(OpKind::kConv, {x, w, b}, a);
  EXPECT_EQ(dim_map_str(dim_map(g, g.node(g.value(y).producer))),
            "a:1 b:2 c:3 d:2/sum e:5 f:3/sum; out0[0, 3b+c, e] <- in0[0, 2b+d, 2e+f-1?] in1[3b+c, d, f] "
            "in2[3b+c](bias)");
}

TEST(DimMap, ReshapeWithoutCommonFactorsIsPositional) {
  Graph g;
  Attrs shape;
  shape.set("shape", std::vector<int64_t>{4, 6});
  ValueId r = g.add(OpKind::kReshape, {g.add_input("x", {DType::kF32, {6, 4}})}, shape);
  EXPECT_EQ(dim_map_str(dim_map(g, g.node(g.value(r).producer))), "a:24; out0[fn(a), fn(a)] <- in0[fn(a), fn(a)]");
}

// Each output element of a copy op is the element its read selects.
TEST(DimMap, CopiesReadWhatTheKernelCopies) {
  int checked = 0;
  for (uint64_t seed : {1u, 2u, 3u})
    for (const OpCase& c : op_cases(seed)) {
      const Node& n = c.graph.node(c.node);
      DimMap m = dim_map(c.graph, n);
      if (!m.copies) continue;
      std::vector<Tensor> in = random_inputs(c.graph, seed);
      std::vector<Tensor> out = run(c.graph, in);
      std::vector<int> slot = input_slot_of_graph_input(c);
      double fill = n.kind == OpKind::kPad ? n.attrs.f("value") : 0.0;
      for (size_t o = 0; o < out.size(); ++o)
        for (int64_t flat = 0; flat < out[o].numel(); ++flat) {
          std::vector<int64_t> idx = unravel(flat, out[o].type().shape), values;
          const Piece* p = piece_at(m, o, idx, values);
          ASSERT_NE(p, nullptr) << c.name << " position " << flat;
          const Read& r = p->reads.at(0);
          if (std::any_of(r.dims.begin(), r.dims.end(), [](const DimExpr& e) { return e.form != DimForm::kAffine; }))
            continue;  // positional: the op's own rule, not an index the map gives
          const Shape& xs = c.graph.type(n.inputs[static_cast<size_t>(r.input)]).shape;
          std::vector<int64_t> src;
          bool inside = true;
          for (size_t d = 0; d < r.dims.size(); ++d) {
            src.push_back(evaluate(r.dims[d], values));
            inside = inside && src.back() >= 0 && src.back() < xs[d];
          }
          double want = fill;
          if (inside) {
            auto k = static_cast<size_t>(std::find(slot.begin(), slot.end(), r.input) - slot.begin());
            want = in.at(k).get_double(ravel(src, xs));
          }
          ASSERT_EQ(out[o].get_double(flat), want) << c.name << " output " << o << " position " << flat;
          ++checked;
        }
    }
  EXPECT_GT(checked, 1000);
}

// Perturbing one input element changes only outputs whose map reads it:
// a map that leaves out a dependency would let a shard miss data.
TEST(DimMap, OutputsChangeOnlyWhereTheyRead) {
  int perturbed = 0;
  for (uint64_t seed : {1u, 2u, 3u})
    for (const OpCase& c : op_cases(seed)) {
      const Node& n = c.graph.node(c.node);
      DimMap m = dim_map(c.graph, n);
      std::vector<Tensor> in = random_inputs(c.graph, seed);
      std::vector<Tensor> base = run(c.graph, in);
      std::vector<int> slot = input_slot_of_graph_input(c);
      std::mt19937_64 rng(seed);
      for (size_t k = 0; k < in.size(); ++k) {
        if (slot[k] < 0 || in[k].numel() == 0 || !is_float(in[k].dtype())) continue;
        for (int trial = 0; trial < 3; ++trial) {
          int64_t q = std::uniform_int_distribution<int64_t>(0, in[k].numel() - 1)(rng);
          std::vector<Tensor> changed = in;
          changed[k].set_double(q, in[k].get_double(q) + 0.75);
          std::vector<Tensor> out = run(c.graph, changed);
          std::vector<int64_t> qi = unravel(q, in[k].type().shape);
          for (size_t o = 0; o < out.size(); ++o)
            for (int64_t flat = 0; flat < out[o].numel(); ++flat) {
              double a = base[o].get_double(flat), b = out[o].get_double(flat);
              if (a == b || (std::isnan(a) && std::isnan(b))) continue;
              std::vector<int64_t> idx = unravel(flat, out[o].type().shape), values;
              const Piece* p = piece_at(m, o, idx, values);
              ASSERT_NE(p, nullptr) << c.name;
              bool reads = false;
              for (const Read& r : p->reads) {
                if (r.input != slot[k]) continue;
                bool all = true;
                for (size_t d = 0; d < r.dims.size() && all; ++d) all = may_read(m, r.dims[d], qi[d], values);
                reads = reads || all;
              }
              EXPECT_TRUE(reads) << c.name << ": output " << o << " at " << flat << " changed with input " << k
                                 << " at " << q << " but its map does not read it: " << dim_map_str(m);
            }
          ++perturbed;
        }
      }
    }
  EXPECT_GT(perturbed, 300);
}

TEST(DimMap, StridedReadsReproduceTheCopies) {
  int ops = 0;
  for (const OpCase& c : op_cases(4)) {
    const Node& n = c.graph.node(c.node);
    DimMap m = dim_map(c.graph, n);
    std::vector<Shape> in;
    for (ValueId v : n.inputs) in.push_back(c.graph.type(v).shape);
    std::vector<Tensor> inputs = random_inputs(c.graph, 4);
    std::vector<Tensor> out = run(c.graph, inputs);
    std::vector<int> slot = input_slot_of_graph_input(c);
    for (size_t o = 0; o < out.size(); ++o) {
      const Shape& os = out[o].type().shape;
      std::vector<StridedRead> reads = strided_reads(m, o, os, in);
      if (reads.empty()) continue;
      ++ops;
      for (const StridedRead& s : reads) {
        auto k = static_cast<size_t>(std::find(slot.begin(), slot.end(), s.input) - slot.begin());
        for (int64_t e = 0; e < shape_numel(s.extent); ++e) {
          std::vector<int64_t> idx = unravel(e, s.extent);
          int64_t src = s.src_offset;
          for (size_t d = 0; d < idx.size(); ++d) {
            src += idx[d] * s.src_strides[d];
            idx[d] += s.dst_lo[d];
          }
          ASSERT_EQ(out[o].get_double(ravel(idx, os)), inputs.at(k).get_double(src)) << c.name;
        }
      }
    }
  }
  EXPECT_GE(ops, 5);  // Transpose, Slice, Concat, Split, Expand at least
}

}  // namespace
}  // namespace tessera
