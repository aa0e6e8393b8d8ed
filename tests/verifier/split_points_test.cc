// Splitting points and linear reads read off the dim maps, over every op case
// of the op table (tests/graph/op_cases.h): the boxes they cut must be ones
// where the box samples decide as the whole evaluation does, and where a
// linear op's coefficients translate along the linear part.
#include "verifier/split_points.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "graph/interpreter.h"
#include "tests/graph/op_cases.h"
#include "tests/verifier/test_graphs.h"
#include "verifier/degree.h"
#include "verifier/index_maps.h"
#include "verifier/multilinear.h"

namespace tessera::verifier {
namespace {

using testing::f32;
using testing::Ints;
using testing::make_attrs;

std::string kind_of(const tessera::testing::OpCase& c) { return op_name(c.graph.node(c.node).kind); }

// The case's node with input `k` replaced, in `mutant`, by Where(mask, y, x_k):
// equal outside a random box of x_k, a fresh input y inside it. Both graphs
// take y, so they take the same inputs.
std::pair<Graph, Graph> region_mutant(const Graph& g, NodeId node, size_t k, std::mt19937_64& rng) {
  auto build = [&](bool mutant) {
    Graph h;
    std::map<ValueId, ValueId> to;
    for (ValueId v : g.inputs()) to[v] = h.add_input(g.value(v).name, g.type(v));
    ValueId x = g.inputs()[k];
    ValueId y = h.add_input("y", g.type(x));
    for (ValueId v = 0; v < g.num_values(); ++v)
      if (g.value(v).constant) to[v] = h.add_constant(g.value(v).name, *g.value(v).constant);
    if (mutant) {
      const Shape& s = g.type(x).shape;
      std::vector<int64_t> lo, hi;
      for (int64_t d : s) {
        int64_t a = std::uniform_int_distribution<int64_t>(0, d - 1)(rng);
        lo.push_back(a);
        hi.push_back(std::uniform_int_distribution<int64_t>(a + 1, d)(rng));
      }
      std::vector<int64_t> mask(static_cast<size_t>(shape_numel(s)));
      std::vector<int64_t> strides = shape_strides(s);
      for (size_t f = 0; f < mask.size(); ++f) {
        bool in = true;
        for (size_t d = 0; d < s.size(); ++d) {
          int64_t i = (static_cast<int64_t>(f) / strides[d]) % s[d];
          in = in && i >= lo[d] && i < hi[d];
        }
        mask[f] = in;
      }
      ValueId m = h.add_constant("mask", Tensor::from_ints(DType::kBool, s, mask));
      to[x] = h.add(OpKind::kWhere, {m, y, to[x]});
    }
    const Node& n = g.node(node);
    std::vector<ValueId> ins;
    for (ValueId v : n.inputs) ins.push_back(v == kNoValue ? kNoValue : to.at(v));
    NodeId id = h.add_node(n.kind, ins, n.attrs, n.name);
    h.set_outputs(h.node(id).outputs);
    return h;
  };
  return {build(false), build(true)};
}

// A candidate that differs from the original exactly where the op reads a
// changed region of one input: sampling the boxes must find the same
// differing boxes as evaluating everything. Not for ops that compare
// residues or read integer inputs: whether their output changes depends on
// the data at each position (Min takes the changed operand at some
// positions only), which no grid of boxes can make uniform.
TEST(SplitPoints, BoxSamplesDecideAsWholeEvaluationOnEveryOpCase) {
  CheckOptions full, sampled;
  full.evaluation = CheckOptions::Evaluation::kFull;
  sampled.evaluation = CheckOptions::Evaluation::kBoxes;
  full.max_trials = sampled.max_trials = 2;
  std::map<std::string, int> decided;
  int differing = 0;
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937_64 rng(seed);
    for (const tessera::testing::OpCase& c : tessera::testing::op_cases(seed))
      for (size_t k = 0; k < c.graph.inputs().size(); ++k) {
        if (c.graph.type(c.graph.inputs()[k]).numel() == 0) continue;
        auto [a, b] = region_mutant(c.graph, c.node, k, rng);
        ProgramAnalysis pa = analyze_program(a);
        if (pa.order_based || pa.integer_inputs) continue;
        Verdict vf = check_equivalence(a, b, full), vs = check_equivalence(a, b, sampled);
        ASSERT_EQ(vs.kind, vf.kind) << c.name << " input " << k << ": " << vs.summary() << " vs " << vf.summary();
        ASSERT_EQ(vs.differing.size(), vf.differing.size()) << c.name;
        for (size_t j = 0; j < vs.differing.size(); ++j)
          EXPECT_EQ(vs.differing[j].boxes, vf.differing[j].boxes) << c.name << " input " << k << " output " << j;
        if (vs.sampled_boxes > 0) ++decided[kind_of(c)];
        differing += vf.kind == Verdict::kDiffers;
      }
  }
  EXPECT_GT(differing, 300);
  // The sampled path itself decides for every kind of index geometry (Softmax
  // never: its row read and its element read are two linear parts, so a
  // differing box is left to the whole evaluation).
  for (const char* k : {"Add", "Transpose", "Slice", "Pad", "Concat", "Split", "Reshape", "Flatten", "Expand", "Tile",
                        "MatMul", "Gemm", "Conv", "AveragePool", "ReduceSum", "CumSum",
                        "LayerNormalization", "BatchNormalization", "GlobalAveragePool"})
    EXPECT_GT(decided[k], 0) << k;
}

// Output i of a one-node graph as a linear function of input k:
// coefficient[i][q], the other inputs fixed.
std::vector<std::vector<uint64_t>> coefficients(const Graph& g, size_t k, size_t out,
                                                const std::vector<RefTensor<Zp>>& fixed) {
  std::vector<RefTensor<Zp>> in = fixed;
  RefTensor<Zp>& x = in[k];
  std::fill(x.num.begin(), x.num.end(), Zp{});
  RefTensor<Zp> base = interpret<Zp>(g, in)[out];
  std::vector<std::vector<uint64_t>> c(static_cast<size_t>(base.numel()), std::vector<uint64_t>(x.num.size()));
  for (size_t q = 0; q < x.num.size(); ++q) {
    x.num[q] = Zp::from_u64(1);
    RefTensor<Zp> y = interpret<Zp>(g, in)[out];
    x.num[q] = Zp{};
    for (size_t i = 0; i < c.size(); ++i) c[i][q] = (y.num[i] - base.num[i]).v;
  }
  return c;
}

// Inside every box of the grid, a linear op's output at i + e_j reads what
// it reads at i, moved by column j of the linear part: the coefficients of
// input k translate, none crossing the input's edges. Checked for inputs
// the op reads through a single linear part; the other inputs are ones
// (bilinear ops: their reads of those inputs then weigh every element alike).
// Not for graphs with integer inputs (Where's condition), whose values steer
// the coefficients at each position. Returns the number of (input, output)
// pairs checked, -1 on a failure.
int check_translation(const Graph& g, NodeId node, const std::string& name) {
  const Node& n = g.node(node);
  const OpDef& def = op_def(n.kind);
  Linearity lin = def.linearity ? def.linearity(n) : Linearity{};
  std::optional<std::vector<DimSplits>> sp = split_points(g);
  std::optional<std::vector<LinearReads>> lr = linear_reads(g);
  if (!sp || !lr || !lin.any()) return 0;
  for (ValueId v : g.inputs())
    if (!is_float(g.type(v).dtype)) return 0;
  std::vector<RefTensor<Zp>> fixed;
  std::mt19937_64 rng(7);
  for (ValueId v : g.inputs()) {
    RefTensor<Zp> t;
    t.type = g.type(v);
    for (int64_t e = 0; e < t.numel(); ++e) t.num.push_back(lin.separately ? Zp::from_u64(1) : Zp::from_u64(rng()));
    fixed.push_back(std::move(t));
  }
  int checked = 0;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    ValueId xv = g.inputs()[k];
    auto slot = std::find(n.inputs.begin(), n.inputs.end(), xv) - n.inputs.begin();
    if (!lin.linear_in(static_cast<int>(slot)) || !is_float(g.type(xv).dtype) || g.type(xv).numel() > 400) continue;
    const Shape& xs = g.type(xv).shape;
    for (size_t o = 0; o < g.outputs().size(); ++o) {
      ValueId ov = g.outputs()[o];
      const Shape& os = g.type(ov).shape;
      std::set<std::vector<int64_t>> parts;
      for (const LinearRead& r : (*lr)[static_cast<size_t>(ov)])
        if (r.first == static_cast<int>(k)) parts.insert(r.second);
      if (parts.size() != 1 || shape_numel(os) > 4000) continue;
      const std::vector<int64_t>& l = *parts.begin();  // rank(x) x rank(out)
      std::vector<std::vector<uint64_t>> c = coefficients(g, k, o, fixed);
      std::vector<int64_t> ost = shape_strides(os), xst = shape_strides(xs);
      for (const Box& box : grid_boxes(os, (*sp)[static_cast<size_t>(ov)]))
        for (int64_t e = 0; e < box.numel(); ++e) {
          std::vector<int64_t> i(os.size());
          int64_t rem = e;
          for (size_t d = os.size(); d-- > 0;) {
            i[d] = box.lo[d] + rem % (box.hi[d] - box.lo[d]);
            rem /= box.hi[d] - box.lo[d];
          }
          int64_t fi = 0;
          for (size_t d = 0; d < os.size(); ++d) fi += i[d] * ost[d];
          for (size_t j = 0; j < os.size(); ++j) {
            if (i[j] + 1 >= box.hi[j]) continue;
            const std::vector<uint64_t>& now = c[static_cast<size_t>(fi)];
            const std::vector<uint64_t>& next = c[static_cast<size_t>(fi + ost[j])];
            // q moved by column j of L, or -1 outside the input.
            auto moved = [&](size_t q, int64_t sign) {
              int64_t f = 0;
              for (size_t d = 0; d < xs.size(); ++d) {
                int64_t a = (static_cast<int64_t>(q) / xst[d]) % xs[d] + sign * l[d * os.size() + j];
                if (a < 0 || a >= xs[d]) return int64_t{-1};
                f += a * xst[d];
              }
              return f;
            };
            // Every coefficient of one moves onto an equal one of the other.
            auto onto = [&](const std::vector<uint64_t>& from, const std::vector<uint64_t>& to, int64_t sign) {
              for (size_t q = 0; q < from.size(); ++q) {
                if (from[q] == 0) continue;
                int64_t m = moved(q, sign);
                if (m < 0 || to[static_cast<size_t>(m)] != from[q]) return false;
              }
              return true;
            };
            if (!onto(now, next, 1) || !onto(next, now, -1)) {
              ADD_FAILURE() << name << ": input " << k << "'s coefficients at output " << fi
                            << " do not move along the linear part to output " << fi + ost[j] << " inside box "
                            << box.str();
              return -1;
            }
          }
        }
      ++checked;
    }
  }
  return checked;
}

TEST(SplitPoints, LinearOpsReadUniformlyInsideEveryBox) {
  std::map<std::string, int> checked;
  for (uint64_t seed = 1; seed <= 8; ++seed)
    for (const tessera::testing::OpCase& c : tessera::testing::op_cases(seed)) {
      checked[kind_of(c)] += check_translation(c.graph, c.node, c.name);
      if (HasFatalFailure()) return;
    }
  for (const char* k : {"Add", "Neg", "Transpose", "Slice", "Pad", "Concat", "Split", "Reshape", "Expand", "Tile",
                        "MatMul", "Gemm", "Conv", "AveragePool", "ReduceSum", "ReduceMean", "GlobalAveragePool"})
    EXPECT_GT(checked[k], 0) << k;
}

// AveragePool with count_include_pad divides by the taps inside the input
// and its padding. Input 6, kernel 3, stride 2, dilation 3, pads (0, 2),
// ceil_mode: windows 0 and 1 read taps {0, 3} and {2, 5} of the input (the
// same guard pattern: the third tap, 6 or 8, outside), but 8 also lies
// beyond the padding, so window 1 divides by 2 where window 0 divides by 3.
TEST(SplitPoints, AveragePoolCountsItsPaddingEdges) {
  Graph g;
  ValueId x = g.add_input("x", f32({1, 1, 6}));
  ValueId y = g.add(OpKind::kAveragePool, {x},
                    make_attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{0, 2}},
                                {"dilations", Ints{3}}, {"ceil_mode", int64_t{1}}, {"count_include_pad", int64_t{1}}}));
  g.set_outputs({y});
  ASSERT_EQ(g.type(y).shape, (Shape{1, 1, 2}));
  auto sp = split_points(g);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ((*sp)[static_cast<size_t>(y)], (DimSplits{{}, {}, {1}}));
  EXPECT_EQ(check_translation(g, g.value(y).producer, "AveragePool"), 1);
}

// A merged input dim crossing a point: flat 5 of [12] is (1, 1) in [3, 4],
// so rows split at 1 and 2 and, within row 1, columns at 1.
TEST(SplitPoints, MergedInputDimsSplitLexicographically) {
  Graph g;
  ValueId a = g.add_input("a", f32({5})), b = g.add_input("b", f32({7}));
  ValueId r = g.add(OpKind::kReshape, {testing::concat(g, {a, b}, 0)}, make_attrs({{"shape", Ints{3, 4}}}));
  g.set_outputs({r});
  auto sp = split_points(g);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ((*sp)[static_cast<size_t>(r)], (DimSplits{{1, 2}, {1}}));
}

// Reshape [6, 4] -> [4, 6] shares no chain of factors: its map is one
// positional factor, read as the flat index (the op is a view). Inside a box
// the input's column may not wrap: its periods (flat 4, 8, ..., 20, the
// Concat seam at row 3 among them) come back as output positions.
TEST(SplitPoints, ViewRunsSplitAtTheirFlatPoints) {
  Graph g;
  ValueId a = g.add_input("a", f32({3, 4})), b = g.add_input("b", f32({3, 4}));
  ValueId c = testing::concat(g, {a, b}, 0);
  ValueId r = g.add(OpKind::kReshape, {c}, make_attrs({{"shape", Ints{4, 6}}}));
  g.set_outputs({r});
  auto sp = split_points(g);
  ASSERT_TRUE(sp.has_value());
  // Flat 4 = (0, 4), 8 = (1, 2), 12 = (2, 0), 16 = (2, 4), 20 = (3, 2).
  EXPECT_EQ((*sp)[static_cast<size_t>(r)], (DimSplits{{1, 2, 3}, {2, 4}}));
  auto reads = linear_reads(g);
  ASSERT_TRUE(reads.has_value());
  // Inside a box only the input's column moves: by 6 per output row, 1 per column.
  EXPECT_EQ((*reads)[static_cast<size_t>(r)], (LinearReads{{0, {0, 0, 6, 1}}, {1, {0, 0, 6, 1}}}));
}

// Which kinds the analyses cover: all but those whose maps read through an
// index that is no affine function of the position, and collectives.
TEST(SplitPoints, AnswerForEveryKindWithAnAffineMap) {
  std::set<std::string> declines = {"Gather", "GatherElements", "ScatterND", "ScatterElements",
                                    "Trilu",   "Resize",         "ConvTranspose", "Shape"};
  for (uint64_t seed : {1u, 2u, 3u})
    for (const tessera::testing::OpCase& c : tessera::testing::op_cases(seed)) {
      const Node& n = c.graph.node(c.node);
      bool affine_pad = n.kind != OpKind::kPad || n.attrs.s("mode") == "constant";
      bool want = !declines.count(kind_of(c)) && affine_pad;
      EXPECT_EQ(split_points(c.graph).has_value(), want) << c.name;
      if (want) {
        EXPECT_TRUE(linear_reads(c.graph).has_value()) << c.name;
      }
    }
}

TEST(SplitPoints, EmptyTensorsHaveNoPoints) {
  Graph g;
  ValueId x = g.add_input("x", f32({0, 3}));
  ValueId t = g.add(OpKind::kTile, {x}, make_attrs({{"repeats", Ints{2, 2}}}));
  g.set_outputs({t});
  auto sp = split_points(g);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ((*sp)[static_cast<size_t>(t)], (DimSplits{{}, {3}}));
}

TEST(SplitPoints, CollectivesHaveNoRule) {
  Graph g;
  ValueId x = g.add_input("x", f32({4, 4}));
  g.set_outputs({g.add(OpKind::kAllReduce, {x}, make_attrs({{"mesh_axis", std::string("tp")}, {"group_size", int64_t{2}}}))});
  EXPECT_FALSE(split_points(g).has_value());
  EXPECT_FALSE(linear_reads(g).has_value());
}

}  // namespace
}  // namespace tessera::verifier
