// PET enumeration (mutator/pet/enumerate.h) and corrections of partially
// equivalent mutants (mutator/pet/correction.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "graph/hash.h"
#include "graph/interpreter.h"
#include "onnx_import/onnx_export.h"
#include "mutator/pet/catalogue.h"
#include "mutator/pet/correction.h"
#include "mutator/pet/enumerate.h"
#include "mutator/search.h"
#include "mutator/verify_mutation.h"
#include "tests/mutator/mutator_test_util.h"
#include "tests/mutator/random_graphs.h"

namespace tessera::mutator {
namespace {

using testing::max_output_diff;

std::vector<Mutation> enumerate_all(const Graph& g, const pet::EnumerateOptions& options = {}) {
  auto users = g.users();
  RuleContext ctx{g, users};
  std::vector<Mutation> out;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    for (Mutation& m : pet::enumerate_mutants(ctx, n, options)) out.push_back(std::move(m));
  return out;
}

Attrs conv(int64_t k, int64_t pad, int64_t dilation, int64_t group = 1) {
  Attrs a = testing::conv_attrs(k, 1, pad);
  a.set("dilations", std::vector<int64_t>{dilation, dilation});
  a.set("group", group);
  return a;
}

// One Conv on input x of `shape`, output y.
Graph conv_graph(Shape shape, int64_t cout, Attrs attrs, uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, shape});
  int64_t cin = shape[1] / attrs.i("group");
  int64_t k = attrs.ints("kernel_shape")[0];
  ValueId y = g.add(OpKind::kConv, {x, testing::weight(g, "w", {cout, cin, k, k}, rng), testing::weight(g, "b", {cout}, rng)},
                    attrs, "conv");
  g.set_outputs({y});
  return g;
}

const Mutation* find_sequence(const std::vector<Mutation>& ms, const std::string& suffix) {
  for (const Mutation& m : ms)
    if (m.description.size() >= suffix.size() &&
        m.description.compare(m.description.size() - suffix.size(), suffix.size(), suffix) == 0)
      return &m;
  return nullptr;
}

int count_kind(const Graph& g, OpKind k) {
  int c = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) c += g.node(n).kind == k;
  return c;
}

TEST(PetEnumeration, DilatedConvBecomesAPlainConvOnTheBatchedPhases) {
  Graph g = conv_graph({1, 4, 8, 8}, 4, conv(3, 2, 2));
  std::vector<Mutation> ms = enumerate_all(g);
  const Mutation* m = find_sequence(ms, ": dilation-to-batch");
  ASSERT_NE(m, nullptr);
  Graph h = apply_mutation(g, *m);
  NodeId c = -1;
  for (NodeId n = 0; n < h.num_nodes(); ++n)
    if (h.node(n).kind == OpKind::kConv) c = n;
  ASSERT_GE(c, 0);
  EXPECT_EQ(h.node(c).attrs.ints("dilations"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(h.type(h.node(c).inputs[0]).shape, (Shape{4, 4, 4, 4}));
  EXPECT_LT(max_output_diff(g, h, 1), 1e-5);
  Mutation copy = *m;
  MutationVerifier v(1);
  v.verify(copy, kNoObligation);
  EXPECT_TRUE(copy.verification.accepted()) << copy.verification.detail;
}

// 7x7 is not divisible by the dilation: only a sequence that pads both axes
// first reaches the dilation move, at depth 3.
TEST(PetEnumeration, OddSizesArePaddedBeforeTheDilationMoves) {
  Graph g = conv_graph({1, 2, 7, 7}, 3, conv(3, 2, 2));
  std::vector<Mutation> ms = enumerate_all(g);
  EXPECT_EQ(find_sequence(ms, ": dilation-to-batch"), nullptr);
  const Mutation* m = find_sequence(ms, "pad-height-to-multiple + pad-width-to-multiple + dilation-to-batch");
  ASSERT_NE(m, nullptr);
  EXPECT_LT(max_output_diff(g, apply_mutation(g, *m), 2), 1e-5);
  pet::EnumerateOptions shallow;
  shallow.depth = 2;
  EXPECT_EQ(find_sequence(enumerate_all(g, shallow), "dilation-to-batch"), nullptr);
}

TEST(PetEnumeration, NoDuplicatesAndNoMoveFollowedByItsInverse) {
  Graph g = conv_graph({2, 2, 6, 6}, 2, conv(3, 1, 1));
  std::vector<Mutation> ms = enumerate_all(g);
  ASSERT_GT(ms.size(), 4u);
  for (size_t i = 0; i < ms.size(); ++i) {
    for (const pet::Move& move : pet::catalogue()) {
      if (!move.inverse.empty()) {
        EXPECT_EQ(ms[i].description.find(move.name + " + " + move.inverse), std::string::npos) << ms[i].description;
      }
    }
    for (size_t j = 0; j < i; ++j)
      EXPECT_FALSE(structurally_equal(ms[i].replacement, ms[j].replacement))
          << ms[i].description << " duplicates " << ms[j].description;
  }
}

TEST(PetEnumeration, TwoIndependentMatMulsBecomeOneBatchedProduct) {
  std::mt19937_64 rng(3);
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {4, 8}});
  ValueId b = g.add_input("b", {DType::kF32, {4, 8}});
  ValueId y1 = g.add(OpKind::kMatMul, {a, testing::weight(g, "w1", {8, 5}, rng)}, {}, "m1");
  ValueId y2 = g.add(OpKind::kMatMul, {b, testing::weight(g, "w2", {8, 5}, rng)}, {}, "m2");
  g.set_outputs({y1, y2});
  std::vector<Mutation> ms = enumerate_all(g);
  const Mutation* m = find_sequence(ms, ": batched-matmul-merge");
  ASSERT_NE(m, nullptr);
  Graph h = apply_mutation(g, *m);
  EXPECT_EQ(count_kind(h, OpKind::kMatMul), 1);
  EXPECT_LT(max_output_diff(g, h, 4), 1e-5);
}

// Batching two images along H: the one output row on each side of the seam
// reads the other image instead of zero padding. The verifier reports
// exactly those rows; the corrections recompute them from the original.
TEST(PetCorrection, BatchingImagesAlongHeightIsCorrectedOnTheSeamRows) {
  Graph g = conv_graph({2, 3, 6, 5}, 4, conv(3, 1, 1));
  std::vector<Mutation> ms = enumerate_all(g);
  const Mutation* found = find_sequence(ms, ": batch-to-height");
  ASSERT_NE(found, nullptr);
  Mutation m = *found;
  MutationVerifier v(2);
  v.verify(m, kNoObligation);
  ASSERT_FALSE(m.verification.accepted());
  ASSERT_EQ(m.verification.differing.size(), 1u);
  int64_t wrong = 0;
  for (const verifier::Box& b : m.verification.differing[0].boxes) {
    wrong += b.numel();
    EXPECT_TRUE(b.hi[2] - b.lo[2] == 1 && (b.lo[2] == 0 || b.lo[2] == 5)) << b.str();
  }
  EXPECT_EQ(wrong, 2 * 4 * 5);  // one row per image and channel: the seam
  EXPECT_GT(max_output_diff(g, apply_mutation(g, m), 3), 1e-3);

  ASSERT_TRUE(pet::add_corrections(m, m.verification.differing));
  EXPECT_EQ(m.corrections.size(), 1u);
  Graph h = apply_mutation(g, m);
  h.validate();
  // Full evaluation of the original against the corrected mutant.
  for (uint64_t seed : {3u, 4u, 5u}) EXPECT_LT(max_output_diff(g, h, seed), 1e-5);
  // Plain ONNX ops only: the corrected program exports as it is.
  const std::set<OpKind> plain = {OpKind::kConv, OpKind::kSlice, OpKind::kConcat, OpKind::kPad,
                                  OpKind::kReshape, OpKind::kTranspose};
  for (NodeId n = 0; n < h.num_nodes(); ++n) EXPECT_TRUE(plain.count(h.node(n).kind)) << op_name(h.node(n).kind);
  EXPECT_GE(count_kind(h, OpKind::kConcat), 1);
  v.verify(m, kNoObligation);
  EXPECT_TRUE(m.verification.accepted()) << m.verification.detail;
}

// The corrected program is standard ONNX: exported, ONNX Runtime runs it and
// matches the original program's reference result.
TEST(PetCorrection, CorrectedMutantRunsInOnnxRuntime) {
  if (std::system("python3 -c 'import onnxruntime, numpy' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with onnxruntime and numpy is not available";
  Graph g = conv_graph({2, 3, 6, 5}, 4, conv(3, 1, 1));
  Mutation m = *find_sequence(enumerate_all(g), ": batch-to-height");
  MutationVerifier v(2);
  v.verify(m, kNoObligation);
  ASSERT_TRUE(pet::add_corrections(m, m.verification.differing));
  Graph h = apply_mutation(g, m);
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("tessera_pet_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  save_onnx_file(h, (dir / "model.onnx").string());
  std::mt19937_64 rng(7);
  Tensor x = testing::random_tensor(DType::kF32, {2, 3, 6, 5}, rng);
  Tensor y = evaluate(g, {x}, Precision::kF64)[0].cast(DType::kF32);
  std::ofstream((dir / "x.bin").string(), std::ios::binary).write(reinterpret_cast<const char*>(x.data()), x.nbytes());
  std::ofstream((dir / "y.bin").string(), std::ios::binary).write(reinterpret_cast<const char*>(y.data()), y.nbytes());
  std::string script =
      "import numpy as np, onnxruntime as ort, sys; d = sys.argv[1]; "
      "s = ort.InferenceSession(d + '/model.onnx', providers=['CPUExecutionProvider']); "
      "x = np.fromfile(d + '/x.bin', dtype=np.float32).reshape(2, 3, 6, 5); "
      "y = np.fromfile(d + '/y.bin', dtype=np.float32).reshape(2, 4, 6, 5); "
      "sys.exit(0 if np.allclose(s.run(None, {'x': x})[0], y, rtol=1e-4, atol=1e-5) else 3)";
  int rc = std::system(("python3 -c \"" + script + "\" " + dir.string()).c_str());
  fs::remove_all(dir);
  EXPECT_EQ(rc, 0);
}

TEST(PetCorrection, RefusesBoxesCoveringMostOfTheOutput) {
  Graph g = conv_graph({2, 3, 6, 5}, 4, conv(3, 1, 1));
  Mutation m = *find_sequence(enumerate_all(g), ": batch-to-height");
  verifier::OutputRegion all{0, {verifier::Box{{0, 0, 0, 0}, {2, 4, 6, 5}}}};
  EXPECT_FALSE(pet::add_corrections(m, {all}));
  EXPECT_TRUE(m.corrections.empty());
  EXPECT_TRUE(pet::add_corrections(m, {all}, 1.0));  // allowed: a whole recomputation
  EXPECT_LT(max_output_diff(g, apply_mutation(g, m), 1), 1e-5);
}

// Property over random graphs: every PET mutant either passes the verifier
// and keeps the reference result, or fails it, really differs, and (when it
// can be corrected) keeps the reference result once corrected.
TEST(PetProperty, EveryAcceptedOrCorrectedMutantKeepsTheReferenceResult) {
  MutationVerifier v(13);
  int equal = 0, corrected = 0;
  // The random graphs' 6x6 images make seams cover a third of the output
  // (more than corrections are allowed); larger ones are added.
  std::vector<Graph> graphs = {conv_graph({2, 3, 8, 6}, 4, conv(3, 1, 1)), conv_graph({1, 2, 8, 8}, 2, conv(3, 1, 1)),
                               conv_graph({2, 2, 8, 8}, 2, conv(3, 2, 2))};
  for (uint64_t seed = 1; seed <= 24; ++seed) graphs.push_back(testing::random_graph(seed));
  for (uint64_t seed = 1; seed <= graphs.size(); ++seed) {
    const Graph& g = graphs[seed - 1];
    for (Mutation& m : enumerate_all(g)) {
      v.verify(m, kNoObligation);
      if (m.verification.accepted()) {
        ++equal;
        EXPECT_LT(max_output_diff(g, apply_mutation(g, m), seed), 1e-5) << m.description;
        continue;
      }
      EXPECT_GT(max_output_diff(g, apply_mutation(g, m), seed), 1e-6) << m.description << " rejected but equal";
      if (m.verification.differing.empty() || !pet::add_corrections(m, m.verification.differing)) continue;
      ++corrected;
      EXPECT_LT(max_output_diff(g, apply_mutation(g, m), seed), 1e-5) << m.description << " corrected";
      v.verify(m, kNoObligation);
      EXPECT_TRUE(m.verification.accepted()) << m.description << ": " << m.verification.detail;
    }
  }
  EXPECT_GT(equal, 0);
  EXPECT_GT(corrected, 0);
}

TEST(PetSearch, NoPartialTurnsCorrectedMutantsOffAndDisablingTheGeneratorRemovesIt) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Graph g = testing::random_graph(seed);
    SearchOptions o;
    o.device = cost::resolve_device("h100");
    o.budget_s = 60;
    o.seed = seed;
    o.threads = 1;
    o.partial = false;
    SearchResult r = search(g, o);
    EXPECT_EQ(r.stats.partial_used, 0);
    for (const AppliedMutation& a : r.applied) EXPECT_FALSE(a.partial);
    o.partial = true;
    o.disabled_rules = {pet::kRuleName};
    for (const AppliedMutation& a : search(g, o).applied) EXPECT_NE(a.rule, pet::kRuleName);
  }
}

}  // namespace
}  // namespace tessera::mutator
