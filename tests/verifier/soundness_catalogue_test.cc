// The soundness catalogue: deliberately wrong mutants, each named, must all be
// rejected; the correct mutants next to them must all be accepted. Graph
// mutants go through the multilinear test, wrong rules through Z3.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include "graph/sharding.h"
#include "tests/verifier/test_graphs.h"
#include "verifier/multilinear.h"
#include "verifier/proofs.h"

namespace tessera::verifier {
namespace {

using testing::concat;
using testing::conv;
using testing::f32;
using testing::Ints;
using testing::make_attrs;
using testing::slice;
using testing::transpose;

struct Case {
  std::string name;
  std::function<Graph()> original;
  std::function<Graph()> candidate;
  bool equivalent;
};

// Concat(X, Y) then the slice that should give back Y; `start` N1 is right.
Graph concat_then_slice(int64_t start) {
  Graph g;
  ValueId x = g.add_input("x", f32({3, 4})), y = g.add_input("y", f32({5, 4}));
  g.set_outputs({slice(g, concat(g, {x, y}, 0), {start}, {start + 5}, {0})});
  return g;
}
Graph just_y() {
  Graph g;
  g.add_input("x", f32({3, 4}));
  ValueId y = g.add_input("y", f32({5, 4}));
  g.set_outputs({g.add(OpKind::kIdentity, {y})});
  return g;
}

Graph double_transpose(Ints p1, Ints p2) {
  Graph g;
  ValueId x = g.add_input("x", f32({2, 3, 4}));
  g.set_outputs({transpose(g, transpose(g, x, p1), p2)});
  return g;
}
Graph single_transpose(Ints q) {
  Graph g;
  g.set_outputs({transpose(g, g.add_input("x", f32({2, 3, 4})), q)});
  return g;
}

Graph two_matmuls(bool fused, bool swapped) {
  Graph g;
  ValueId a = g.add_input("a", f32({2, 3})), w1 = g.add_input("w1", f32({3, 2})), w2 = g.add_input("w2", f32({3, 2}));
  if (!fused) {
    g.set_outputs({g.add(OpKind::kMatMul, {a, w1}), g.add(OpKind::kMatMul, {a, w2})});
    return g;
  }
  ValueId w = swapped ? concat(g, {w2, w1}, 1) : concat(g, {w1, w2}, 1);
  NodeId s = g.add_node(OpKind::kSplit, {g.add(OpKind::kMatMul, {a, w})},
                        make_attrs({{"axis", int64_t{1}}, {"split", Ints{2, 2}}}));
  g.set_outputs({g.node(s).outputs[0], g.node(s).outputs[1]});
  return g;
}

// Conv with pad 1 as Conv(Pad(X)) with pad 0; `begin` 1 is right.
Graph padded_conv(bool explicit_pad, int64_t begin) {
  Graph g;
  ValueId x = g.add_input("x", f32({1, 2, 5, 5})), w = g.add_input("w", f32({2, 2, 3, 3}));
  if (!explicit_pad) {
    g.set_outputs({conv(g, x, w, {3, 3}, {1, 1, 1, 1})});
    return g;
  }
  ValueId p = g.add(OpKind::kPad, {x}, make_attrs({{"pads", Ints{0, 0, begin, 1, 0, 0, 2 - begin, 1}}}));
  g.set_outputs({conv(g, p, w, {3, 3}, {0, 0, 0, 0})});
  return g;
}

// Grouped conv (group 2) against its split into two convs on channel halves;
// `wrong` runs both halves' weights on the first half of the channels.
Graph grouped_conv(bool split, bool wrong) {
  Graph g;
  ValueId x = g.add_input("x", f32({1, 4, 5, 5})), w = g.add_input("w", f32({4, 2, 3, 3}));
  Ints k = {3, 3}, p = {1, 1, 1, 1};
  if (!split) {
    g.set_outputs({conv(g, x, w, k, p, {1, 1}, 2)});
    return g;
  }
  if (wrong) {
    g.set_outputs({conv(g, slice(g, x, {0}, {2}, {1}), w, k, p, {1, 1}, 1)});
    return g;
  }
  ValueId y0 = conv(g, slice(g, x, {0}, {2}, {1}), slice(g, w, {0}, {2}, {0}), k, p);
  ValueId y1 = conv(g, slice(g, x, {2}, {4}, {1}), slice(g, w, {2}, {4}, {0}), k, p);
  g.set_outputs({concat(g, {y0, y1}, 1)});
  return g;
}

// Dilation-2 conv (pad 2 on H) against space-to-batch along H: the two row
// phases through a plain conv, interleaved back. `phases` gives the order the
// phases are read in ({0, 1} right); `dilation` 1 is the wrong-dilation mutant.
Graph dilated_conv(bool space_to_batch, Ints phases, int64_t dilation) {
  const int64_t H = 6, W = 4;
  Graph g;
  ValueId x = g.add_input("x", f32({1, 2, H, W})), w = g.add_input("w", f32({3, 2, 3, 3}));
  if (!space_to_batch) {
    g.set_outputs({conv(g, x, w, {3, 3}, {2, 1, 2, 1}, {2, 1})});
    return g;
  }
  std::vector<ValueId> outs;
  for (int64_t ph : phases) {
    ValueId xp = slice(g, x, {ph}, {H}, {2}, {2});
    ValueId y = conv(g, xp, w, {3, 3}, {dilation, 1, dilation, 1}, {dilation, 1});
    outs.push_back(g.add(OpKind::kUnsqueeze, {y}, make_attrs({{"axes", Ints{3}}})));
  }
  ValueId stacked = concat(g, outs, 3);  // [1, 3, H/2, 2, W]
  g.set_outputs({g.add(OpKind::kReshape, {stacked}, make_attrs({{"shape", Ints{1, 3, H, W}}}))});
  return g;
}

// A spatial split of a chain of `depth` 3x3 pad-1 convolutions over an
// image of `rows` rows, cut into `ranks` bands of output rows as the
// sharding search cuts them (uneven: the first rows % ranks one row more),
// with one exchange for the whole chain (depth > 1: a deeper halo, the sum
// of the layers' halos, the overlap recomputed): rank r runs the chain on
// the image with every row outside [own.lo - halo, own.hi + halo) zeroed
// and keeps its band; the bands are concatenated. `thin` takes that many
// rows off the halo each rank receives from the next (the wrong plan).
Graph conv_chain(int64_t rows, int64_t depth) {
  Graph g;
  ValueId y = g.add_input("x", f32({1, 2, rows, 4}));
  for (int64_t l = 0; l < depth; ++l)
    y = conv(g, y, g.add_input("w" + std::to_string(l), f32({2, 2, 3, 3})), {3, 3}, {1, 1, 1, 1});
  g.set_outputs({y});
  return g;
}
Graph banded_chain(int64_t rows, int64_t depth, int64_t ranks, int64_t thin) {
  Graph g;
  ValueId x = g.add_input("x", f32({1, 2, rows, 4}));
  std::vector<ValueId> w;
  for (int64_t l = 0; l < depth; ++l) w.push_back(g.add_input("w" + std::to_string(l), f32({2, 2, 3, 3})));
  std::vector<ValueId> bands;
  for (int64_t r = 0; r < ranks; ++r) {
    int64_t lo = block_start(rows, ranks, r), hi = block_start(rows, ranks, r + 1);
    int64_t from = std::max<int64_t>(0, lo - depth), to = std::min(rows, hi + (r + 1 < ranks ? depth - thin : 0));
    std::vector<double> mask(static_cast<size_t>(rows), 0.0);
    for (int64_t i = from; i < to; ++i) mask[static_cast<size_t>(i)] = 1.0;
    ValueId m = g.add_constant("mask" + std::to_string(r), Tensor::from_doubles(DType::kF32, {1, 1, rows, 1}, mask));
    ValueId y = g.add(OpKind::kMul, {x, m});
    for (int64_t l = 0; l < depth; ++l) y = conv(g, y, w[static_cast<size_t>(l)], {3, 3}, {1, 1, 1, 1});
    bands.push_back(slice(g, y, {lo}, {hi}, {2}));
  }
  g.set_outputs({concat(g, bands, 2)});
  return g;
}

std::vector<Case> graph_cases() {
  return {
      {"slice-after-concat", [] { return just_y(); }, [] { return concat_then_slice(3); }, true},
      {"off-by-one-slice", [] { return just_y(); }, [] { return concat_then_slice(2); }, false},
      {"transpose-compose", [] { return double_transpose({1, 0, 2}, {0, 2, 1}); },
       [] { return single_transpose({1, 2, 0}); }, true},
      {"wrong-transpose-perm", [] { return double_transpose({1, 0, 2}, {0, 2, 1}); },
       [] { return single_transpose({2, 0, 1}); }, false},
      {"matmul-concat-weights", [] { return two_matmuls(false, false); }, [] { return two_matmuls(true, false); },
       true},
      {"swapped-concat-order", [] { return two_matmuls(false, false); }, [] { return two_matmuls(true, true); },
       false},
      {"pad-into-conv", [] { return padded_conv(false, 1); }, [] { return padded_conv(true, 1); }, true},
      {"wrong-pad", [] { return padded_conv(false, 1); }, [] { return padded_conv(true, 2); }, false},
      {"group-split", [] { return grouped_conv(false, false); }, [] { return grouped_conv(true, false); }, true},
      {"wrong-group-count", [] { return grouped_conv(false, false); }, [] { return grouped_conv(true, true); },
       false},
      {"dilation-space-to-batch", [] { return dilated_conv(false, {0, 1}, 2); },
       [] { return dilated_conv(true, {0, 1}, 1); }, true},
      {"wrong-dilation", [] { return dilated_conv(false, {0, 1}, 2); },
       [] { return dilated_conv(true, {0, 1}, 2); }, false},
      {"swapped-phases", [] { return dilated_conv(false, {0, 1}, 2); },
       [] { return dilated_conv(true, {1, 0}, 1); }, false},
      // Spatial bands (issue 43): 11 rows on 3 ranks (4, 4, 3) with a
      // one-row halo each way; a chain of three convolutions exchanging
      // once, a three-row halo; each one row too thin is wrong.
      {"spatial-halo-uneven", [] { return conv_chain(11, 1); }, [] { return banded_chain(11, 1, 3, 0); }, true},
      {"wrong-spatial-halo-thin-uneven", [] { return conv_chain(11, 1); }, [] { return banded_chain(11, 1, 3, 1); },
       false},
      {"spatial-halo-deep", [] { return conv_chain(13, 3); }, [] { return banded_chain(13, 3, 2, 0); }, true},
      {"wrong-spatial-halo-thin-deep", [] { return conv_chain(13, 3); }, [] { return banded_chain(13, 3, 2, 1); },
       false},
  };
}

class GraphMutant : public ::testing::TestWithParam<Case> {};

TEST_P(GraphMutant, VerdictMatchesCatalogue) {
  const Case& c = GetParam();
  Graph orig = c.original(), cand = c.candidate();
  Verdict v = check_equivalence(orig, cand);
  if (c.equivalent) {
    EXPECT_EQ(v.kind, Verdict::kEquivalent) << c.name << ": " << v.summary();
    EXPECT_LT(v.error_bound, 1e-9);
  } else {
    EXPECT_EQ(v.kind, Verdict::kDiffers) << c.name << ": " << v.summary();
    EXPECT_FALSE(v.differing.empty()) << c.name;
  }
}

// The box-sampling fast path must reach the verdict and the boxes of the
// whole-output evaluation on every case (or decline and fall back to it).
TEST_P(GraphMutant, SampledBoxesMatchFullEvaluation) {
  const Case& c = GetParam();
  Graph orig = c.original(), cand = c.candidate();
  CheckOptions full, sampled;
  full.evaluation = CheckOptions::Evaluation::kFull;
  sampled.evaluation = CheckOptions::Evaluation::kBoxes;
  Verdict vf = check_equivalence(orig, cand, full), vs = check_equivalence(orig, cand, sampled);
  EXPECT_EQ(vf.sampled_boxes, 0);
  EXPECT_EQ(vs.kind, vf.kind) << c.name << ": " << vs.summary() << " vs " << vf.summary();
  ASSERT_EQ(vs.differing.size(), vf.differing.size()) << c.name;
  for (size_t j = 0; j < vs.differing.size(); ++j) {
    EXPECT_EQ(vs.differing[j].output, vf.differing[j].output);
    EXPECT_EQ(vs.differing[j].boxes, vf.differing[j].boxes) << c.name;
  }
}

// Which cases the fast path decides by itself: everything but the wrong
// transpose (its index maps meet on part of a box, so the box is mixed and
// the whole output is evaluated).
TEST(Catalogue, SampledBoxesDecideTheGeometricCases) {
  CheckOptions sampled;
  sampled.evaluation = CheckOptions::Evaluation::kBoxes;
  for (const Case& c : graph_cases()) {
    Verdict v = check_equivalence(c.original(), c.candidate(), sampled);
    if (c.name == "wrong-transpose-perm") EXPECT_EQ(v.sampled_boxes, 0) << c.name;
    else EXPECT_GT(v.sampled_boxes, 0) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Catalogue, GraphMutant, ::testing::ValuesIn(graph_cases()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// Missing AllReduce: the row-parallel program without its collective leaves
// each rank with a partial sum that it claims is the replicated result.
TEST(Catalogue, MissingAllReduceIsRejected) {
  Graph g;
  ValueId a = g.add_input("a", f32({4, 8})), w = g.add_input("w", f32({8, 6}));
  g.set_outputs({g.add(OpKind::kMatMul, {a, w})});
  ShardedProgram p;
  p.mesh = DeviceMesh::parse("tp=2");
  ValueId la = p.local.add_input("a", f32({4, 4})), lw = p.local.add_input("w", f32({4, 6}));
  p.local.set_outputs({p.local.add(OpKind::kMatMul, {la, lw})});
  p.input_shardings = {Sharding::parse("[S(1)]"), Sharding::parse("[S(0)]")};
  p.output_shardings = {Sharding::parse("[R]")};
  Verdict v = check_equivalence(Program(g), Program(p));
  EXPECT_EQ(v.kind, Verdict::kDiffers) << v.summary();
  ASSERT_EQ(v.differing.size(), 1u);
  EXPECT_EQ(v.differing[0].boxes, (std::vector<Box>{Box{{0, 0}, {4, 6}}}));
}

// Every wrong obligation, one test each: Z3 must refute the claim itself. A
// failing side goal would only say the proof's instances do not hold, not
// that the claim is false; the wrong twins keep their correct twins' true
// instances so that the claim is what fails.
class WrongObligation : public ::testing::TestWithParam<std::string> {};

TEST_P(WrongObligation, IsRefutedByZ3) {
  ProofResult r = prove(GetParam());
  EXPECT_EQ(r.status, ProofStatus::kRefuted) << GetParam() << ": " << proof_status_name(r.status) << " " << r.detail;
  EXPECT_EQ(r.detail.rfind("counterexample: ", 0), 0u) << GetParam() << ": " << r.detail;
}

std::vector<std::string> wrong_names() {
  std::vector<std::string> names;
  for (const ObligationInfo& o : wrong_obligations()) names.push_back(o.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, WrongObligation, ::testing::ValuesIn(wrong_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// Every rule obligation has a wrong twin in the catalogue (refuted above),
// and every twin names an obligation that exists.
TEST(Catalogue, EveryRuleObligationHasAWrongTwin) {
  std::set<std::string> rules, twinned, all;
  for (const ObligationInfo& o : proof_obligations()) {
    all.insert(o.name);
    if (o.category == "rule") rules.insert(o.name);
  }
  for (const ObligationInfo& w : wrong_obligations()) {
    if (w.twin_of.empty()) continue;
    EXPECT_TRUE(all.count(w.twin_of)) << w.name << " is the twin of " << w.twin_of << ", which does not exist";
    twinned.insert(w.twin_of);
  }
  for (const std::string& r : rules) EXPECT_TRUE(twinned.count(r)) << r << " has no wrong twin";
  EXPECT_GE(rules.size(), 13u);
}

// The mistakes the catalogue must hold, by name: each is a known way to
// shard wrongly, and its obligation must stay in the list that Z3 refutes.
TEST(Catalogue, WrongShardingsAreCatalogued) {
  std::vector<std::string> names = wrong_names();
  EXPECT_GE(names.size(), 34u);
  for (const char* required : {
           "wrong-missing-allreduce",                // row parallel without the AllReduce
           "wrong-softmax-reduced-axis",             // Softmax sharded on its reduced axis
           "wrong-reshape-merge-minor-shard",        // Reshape splitting a sharded dim the wrong way
           "wrong-reshape-split-shard-minor",
           "wrong-gather-no-mask",                   // Gather that forgets its mask
           "wrong-conv-in-channels-no-reduction",    // Conv on input channels without the reduction
           "wrong-gemm-bias-every-rank",             // bias counted on every rank
           "wrong-partial-relu",                     // non-linear op on a Partial
           "wrong-partial-add-replicated",
           "wrong-all-gather-block-order",           // gather with the blocks in the wrong order
           "wrong-all-to-all-chunk",                 // AllToAll with the wrong chunk
           "wrong-scatter-elements-written-axis-local-indices",  // a KV cache split along the axis written
           "wrong-grouped-kv-heads-cyclic",          // a rank given another group's KV head
           "wrong-spatial-halo-thin",                // a spatial band's halo one row too thin
       })
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
}

}  // namespace
}  // namespace tessera::verifier
