// Executable plans: movement kernels, aliasing, outputs, options, errors, and
// the memory planner's properties.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "graph/mapped_file.h"
#include "runtime/memory_planner.h"
#include "tests/resident_bytes.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using testing::attrs;
using testing::expect_matches_reference;
using testing::Ints;
using testing::random_tensor;

TEST(MovementTest, TransposeSliceConcatSplit) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3, 4, 5}});
  ValueId t = g.add(OpKind::kTranspose, {x}, attrs({{"perm", Ints{0, 2, 3, 1}}}));
  ValueId s = g.add(OpKind::kSlice, {x}, attrs({{"starts", Ints{-1, 0}}, {"ends", Ints{-100, 5}},
                                                {"axes", Ints{3, 1}}, {"steps", Ints{-2, 2}}}));
  ValueId c = g.add(OpKind::kConcat, {x, x, x}, attrs({{"axis", int64_t{1}}}));
  NodeId sp = g.add_node(OpKind::kSplit, {c}, attrs({{"axis", int64_t{1}}, {"split", Ints{2, 7}}}));
  g.set_outputs({t, s, g.node(sp).outputs[0], g.node(sp).outputs[1]});
  expect_matches_reference(g);
}

TEST(MovementTest, GatherWhereExpand) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {6, 4}});
  ValueId idx = g.add_constant("i", Tensor::from_ints(DType::kI64, {2, 2}, {0, -1, 3, 2}));
  ValueId gath = g.add(OpKind::kGather, {x, idx}, attrs({{"axis", int64_t{0}}}));
  ValueId cond = g.add(OpKind::kGreater, {x, g.add_constant("z", Tensor::scalar_f32(0.0f))});
  ValueId w = g.add(OpKind::kWhere, {cond, x, g.add_constant("m", Tensor::scalar_f32(-5.0f))});
  ValueId e = g.add(OpKind::kExpand, {g.add_input("v", {DType::kF32, {4}})}, attrs({{"shape", Ints{3, 1, 4}}}));
  g.set_outputs({gath, w, e});
  expect_matches_reference(g);
}

// Copies with empty dims (testing::empty_dims_graph) match the reference and
// run as native copies, not the reference kernel.
TEST(MovementTest, EmptyDimsRunNative) {
  for (DType dt : {DType::kF32, DType::kI64}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g = testing::empty_dims_graph(dt);
    EXPECT_EQ(g.type(g.outputs()[0]).shape, (Shape{2, 0, 2}));
    expect_matches_reference(g);
    for (const std::string& op : testing::kernel_ops(g)) EXPECT_NE(op.back(), '!') << op << " runs the reference kernel";
  }
}

// Reshapes share their input's buffer; one that is a graph output is copied.
TEST(PlanTest, ReshapesAliasExceptAtOutputs) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 6}});
  ValueId r = g.add(OpKind::kRelu, {x});
  ValueId a = g.add(OpKind::kReshape, {r}, attrs({{"shape", Ints{3, 4}}}));
  ValueId b = g.add(OpKind::kSigmoid, {a});
  ValueId c = g.add(OpKind::kFlatten, {b}, attrs({{"axis", int64_t{0}}}));
  g.set_outputs({c, a, x});
  ExecutablePlan plan = expect_matches_reference(g);
  // Reshape `a` is a graph output (copied); Flatten `c` is one too. Neither aliases.
  EXPECT_EQ(plan.memory().aliases, 0);
  Graph h;
  ValueId y = h.add_input("y", {DType::kF32, {2, 6}});
  ValueId ry = h.add(OpKind::kReshape, {h.add(OpKind::kRelu, {y})}, attrs({{"shape", Ints{3, 4}}}));
  h.set_outputs({h.add(OpKind::kSigmoid, {ry})});
  EXPECT_EQ(expect_matches_reference(h).memory().aliases, 1);
}

TEST(PlanTest, ThreadCountsAgree) {
  std::mt19937 rng(12);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 64}});
  ValueId m = g.add(OpKind::kMatMul, {x, g.add_constant("w", random_tensor(DType::kF32, {64, 64}, rng))});
  g.set_outputs({g.add(OpKind::kSoftmax, {m}, attrs({{"axis", int64_t{-1}}}))});
  for (int threads : {1, 2}) {
    RunOptions o;
    o.threads = threads;
    expect_matches_reference(g, o);
  }
}

// A plan for several threads keeps one-thread forms of its kernels for runs
// on oversubscribed cores; forced, they compute the same results.
TEST(PlanTest, OneThreadFormsMatch) {
  std::mt19937 rng(14);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 16, 40, 40}});
  ValueId w = g.add_constant("w", random_tensor(DType::kF32, {32, 16, 3, 3}, rng));
  ValueId c = g.add(OpKind::kConv, {x, w},
                    attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}},
                           {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
  ValueId f = g.add(OpKind::kFlatten, {g.add(OpKind::kRelu, {c})});
  ValueId m = g.add(OpKind::kMatMul, {f, g.add_constant("m", random_tensor(DType::kF32, {32 * 40 * 40, 64}, rng))});
  g.set_outputs({g.add(OpKind::kSoftmax, {m}, attrs({{"axis", int64_t{-1}}}))});
  for (auto mode : {RunOptions::OneThreadRuns::kAlways, RunOptions::OneThreadRuns::kNever}) {
    RunOptions o;
    o.threads = 2;
    o.one_thread_runs = mode;
    expect_matches_reference(g, o);
  }
}

// Where the one-thread line lies (RunOptions::one_thread_line, the host's
// from its profile) decides only how many threads a kernel splits over: an
// inverted-residual block (pointwise, depthwise 3x3, pointwise, as MNASNet's)
// with every kernel on one thread, every kernel on two, and the default
// line, matches the reference at 2 threads.
TEST(PlanTest, OneThreadLineKeepsResults) {
  std::mt19937 rng(15);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 16, 28, 28}});
  int layer = 0;
  auto conv = [&](ValueId in, int64_t cin, int64_t cout, int64_t k, int64_t group) {
    std::string i = std::to_string(layer++);
    ValueId w = g.add_constant("w" + i, random_tensor(DType::kF32, {cout, cin / group, k, k}, rng));
    ValueId b = g.add_constant("b" + i, random_tensor(DType::kF32, {cout}, rng));
    int64_t p = k / 2;
    return g.add(OpKind::kConv, {in, w, b},
                 attrs({{"kernel_shape", Ints{k, k}}, {"strides", Ints{1, 1}}, {"pads", Ints{p, p, p, p}},
                        {"dilations", Ints{1, 1}}, {"group", group}}));
  };
  ValueId e = g.add(OpKind::kRelu, {conv(x, 16, 48, 1, 1)});
  ValueId d = g.add(OpKind::kRelu, {conv(e, 48, 48, 3, 48)});
  g.set_outputs({g.add(OpKind::kAdd, {conv(d, 48, 16, 1, 1), x})});
  for (OneThreadLine line : {OneThreadLine{1, 1}, OneThreadLine{}, OneThreadLine{int64_t{1} << 40, int64_t{1} << 40}}) {
    RunOptions o;
    o.threads = 2;
    o.one_thread_runs = RunOptions::OneThreadRuns::kNever;
    o.one_thread_line = line;
    expect_matches_reference(g, o);
  }
}

TEST(PlanTest, ReferenceBackendMatchesAndIsAllFallback) {
  std::mt19937 rng(13);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 8}});
  ValueId m = g.add(OpKind::kMatMul, {x, g.add_constant("w", random_tensor(DType::kF32, {8, 8}, rng))});
  g.set_outputs({g.add(OpKind::kRelu, {m})});
  RunOptions o;
  o.backend = Backend::kReference;
  o.profile = true;
  ExecutablePlan plan = expect_matches_reference(g, o);
  Profile p = plan.profile();
  ASSERT_EQ(p.kernels.size(), 2u);
  for (const KernelProfile& k : p.kernels) EXPECT_TRUE(k.fallback) << k.op;
  EXPECT_NE(p.table().find("[FALLBACK]"), std::string::npos);
}

// The plan shares the constants its kernels read at run time and owns the
// prepacked ones: it runs after the graph is gone, and only the read ones
// count beside the prepacked weights.
// A run writes its outputs into the last run's storage once the caller has
// dropped it, and never into outputs the caller still holds: an output the
// plan writes in place (Relu), one it copies out (an input passed through),
// and the second output of a Split.
TEST(PlanTest, OutputStorageIsReusedOnlyOnceDropped) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 6}});
  NodeId sp = g.add_node(OpKind::kSplit, {g.add(OpKind::kRelu, {x})}, attrs({{"axis", int64_t{1}}, {"split", Ints{2, 4}}}));
  g.set_outputs({g.add(OpKind::kRelu, {x}), x, g.node(sp).outputs[1]});
  ExecutablePlan plan = ExecutablePlan::compile(g);
  std::mt19937 rng(4);
  Tensor a = random_tensor(DType::kF32, {4, 6}, rng), b = random_tensor(DType::kF32, {4, 6}, rng);
  std::vector<Tensor> held = plan.run({a});
  std::vector<Tensor> copy;
  for (const Tensor& t : held) copy.push_back(Tensor::from_bytes(t.dtype(), t.shape(), {t.data(), t.data() + t.nbytes()}));
  std::vector<const uint8_t*> second;
  {
    std::vector<Tensor> out = plan.run({b});
    for (size_t j = 0; j < out.size(); ++j) {
      EXPECT_NE(out[j].data(), held[j].data()) << j;  // held: new storage
      EXPECT_TRUE(held[j].identical(copy[j])) << j;   // and untouched
      second.push_back(out[j].data());
    }
    EXPECT_TRUE(out[1].identical(b));
  }
  // Blocks of the outputs' sizes, taken while the plan runs again: had the
  // plan let run 2's storage go, these would take it, not run 3.
  std::vector<std::vector<uint8_t>> soak;
  for (int i = 0; i < 16; ++i)
    for (size_t bytes : {96, 64}) soak.emplace_back(bytes, uint8_t{1});
  std::vector<Tensor> third = plan.run({a});
  for (size_t j = 0; j < third.size(); ++j) {
    EXPECT_EQ(third[j].data(), second[j]) << j;  // dropped: reused
    EXPECT_TRUE(third[j].identical(copy[j])) << j;
  }
}

TEST(PlanTest, RunsAfterTheGraphIsDestroyed) {
  constexpr int64_t kWeightBytes = 64 * 64 * 4;
  std::mt19937 rng(21);
  std::vector<Tensor> in = {random_tensor(DType::kF32, {4, 64}, rng)};
  std::vector<Tensor> want;
  std::optional<ExecutablePlan> plan;
  {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {4, 64}});
    ValueId w = g.add_constant("w", random_tensor(DType::kF32, {64, 64}, rng));
    ValueId scale = g.add_constant("scale", random_tensor(DType::kF32, {64}, rng));
    ValueId m = g.add(OpKind::kMatMul, {x, w});
    ValueId ln = g.add(OpKind::kLayerNormalization, {m, scale}, attrs({{"axis", int64_t{-1}}}));
    g.set_outputs({g.add(OpKind::kGather, {ln, g.add_constant("idx", Tensor::from_doubles(DType::kI64, {2}, {3, 0}))})});
    want = evaluate(g, in, Precision::kF64);
    plan.emplace(ExecutablePlan::compile(g));
  }
  std::vector<Tensor> got = plan->run(in);
  ASSERT_EQ(got.size(), 1u);
  for (int64_t i = 0; i < want[0].numel(); ++i)
    EXPECT_NEAR(got[0].get_double(i), want[0].get_double(i), 1e-4 * (std::fabs(want[0].get_double(i)) + 1));
  // The prepacked matmul weight is held once; scale and idx are shared.
  EXPECT_LT(plan->memory().weight_bytes, 2 * kWeightBytes);
  EXPECT_GE(plan->memory().weight_bytes, kWeightBytes + 64 * 4 + 2 * 8);
}

// compile(Graph&&) frees constants as their kernels prepack them; the plan
// computes the same and holds the same weights as one compiled from a view.
TEST(PlanTest, CompileTakingTheGraphMatches) {
  std::mt19937 rng(22);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 8, 12, 12}});
  ValueId w = g.add_constant("w", random_tensor(DType::kF32, {16, 8, 3, 3}, rng));
  ValueId b = g.add_constant("b", random_tensor(DType::kF32, {16}, rng));
  ValueId c = g.add(OpKind::kConv, {x, w, b},
                    attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}},
                           {"dilations", Ints{1, 1}}, {"group", int64_t{1}}}));
  ValueId f = g.add(OpKind::kFlatten, {g.add(OpKind::kRelu, {c})});
  ValueId m = g.add(OpKind::kMatMul, {f, g.add_constant("m", random_tensor(DType::kF32, {16 * 12 * 12, 10}, rng))});
  ValueId bias = g.add_constant("bias", random_tensor(DType::kF32, {10}, rng));
  g.set_outputs({g.add(OpKind::kAdd, {m, bias}), bias});
  std::vector<Tensor> in = {random_tensor(DType::kF32, {1, 8, 12, 12}, rng)};
  std::vector<Tensor> want = evaluate(g, in, Precision::kF64);
  ExecutablePlan viewed = ExecutablePlan::compile(g);
  Graph copy = g;
  ExecutablePlan taken = ExecutablePlan::compile(std::move(copy));
  EXPECT_EQ(taken.memory().weight_bytes, viewed.memory().weight_bytes);
  std::vector<Tensor> got = taken.run(in);
  ASSERT_EQ(got.size(), 2u);
  for (size_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < want[o].numel(); ++i)
      EXPECT_NEAR(got[o].get_double(i), want[o].get_double(i), 1e-4 * (std::fabs(want[o].get_double(i)) + 1)) << o;
}

TEST(PlanTest, RejectsWrongInputs) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3}});
  g.set_outputs({g.add(OpKind::kRelu, {x})});
  ExecutablePlan plan = ExecutablePlan::compile(g);
  try {
    plan.run({Tensor(DType::kF32, {3, 2})});
    FAIL() << "a wrong input shape must be rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("f32[2x3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan.run({}), Error);
  EXPECT_THROW(backend_from_name("tpu"), Error);
  RunOptions bad;
  bad.threads = -1;
  EXPECT_THROW(ExecutablePlan::compile(g, bad), Error);
}

TEST(MemoryPlannerTest, LiveBuffersNeverOverlapAndArenaIsBounded) {
  std::mt19937 rng(14);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferRequest> reqs;
    int n = 1 + static_cast<int>(rng() % 40);
    int64_t sum = 0;
    for (int i = 0; i < n; ++i) {
      int32_t a = static_cast<int32_t>(rng() % 30), len = static_cast<int32_t>(rng() % 8);
      int64_t bytes = static_cast<int64_t>(rng() % 5000);
      reqs.push_back({bytes, a, a + len});
      sum += (std::max<int64_t>(bytes, 1) + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    }
    MemoryPlan plan = plan_memory(reqs);
    EXPECT_EQ(find_overlap(reqs, plan), std::make_pair(int64_t{-1}, int64_t{-1}));
    EXPECT_LE(plan.arena_bytes, sum);
    for (int64_t off : plan.offsets) EXPECT_EQ(off % kArenaAlignment, 0);
    // Never below the most bytes live at one step.
    int64_t peak = 0;
    for (int32_t s = 0; s < 40; ++s) {
      int64_t live = 0;
      for (const BufferRequest& r : reqs)
        if (r.first <= s && s <= r.last) live += r.bytes;
      peak = std::max(peak, live);
    }
    EXPECT_GE(plan.arena_bytes, peak);
  }
}

TEST(MemoryPlannerTest, ChainReusesMemory) {
  // A chain a->b->c->d: only neighbours are live together, so two slots do.
  std::vector<BufferRequest> reqs = {{1024, 0, 1}, {1024, 1, 2}, {1024, 2, 3}, {1024, 3, 4}};
  MemoryPlan plan = plan_memory(reqs);
  EXPECT_EQ(plan.arena_bytes, 2048);
  EXPECT_THROW(plan_memory({{10, 3, 2}}), Error);
}

// layout_arena, which both the host plan and the CUDA program lay out their
// arena with: an output takes its operand's buffer only when the operand
// dies at that step, both are arena values and their sizes agree.
TEST(MemoryPlannerTest, ArenaLayoutTakesInPlaceOnlyWhereTheOperandDies) {
  // v0 -> v1 (in place over v0, which dies at step 1) -> v2 (v1 is read
  // again at step 3: its own buffer); v3 is not in the arena (a graph
  // output's own storage).
  std::vector<ArenaValue> values = {
      {4096, 0, 1, true}, {4096, 1, 3, true}, {4096, 2, 3, true}, {4096, 3, 3, false}};
  std::vector<InPlaceCandidate> in_place = {{1, 1, 0}, {2, 2, 1}, {3, 3, 2}};
  std::vector<BufferRequest> scratch = {{100, 2, 2}};
  ArenaLayout a = layout_arena(values, in_place, scratch);
  EXPECT_EQ(a.in_place, 1);
  EXPECT_EQ(a.storage[1], 0);
  EXPECT_EQ(a.storage[2], 2);
  EXPECT_EQ(a.offset[1], a.offset[0]);
  EXPECT_NE(a.offset[2], a.offset[1]);
  EXPECT_EQ(a.offset[3], -1);
  EXPECT_EQ(a.buffers, 2);
  EXPECT_EQ(a.storage_last[0], 3);  // v0's buffer holds v1 until step 3
  ASSERT_EQ(a.scratch_offset.size(), 1u);
  EXPECT_EQ(a.arena_bytes, 4096 * 2 + kArenaAlignment * 2);  // v0/v1, v2 and the scratch live at step 2
  // A size mismatch: no in-place.
  values[1].bytes = 2048;
  EXPECT_EQ(layout_arena(values, in_place, {}).in_place, 0);
}

TEST(MemoryPlannerTest, PlanArenaIsBelowSumOfIntermediates) {
  std::mt19937 rng(15);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {8, 128}});
  ValueId v = x;
  for (int i = 0; i < 6; ++i) {
    v = g.add(OpKind::kMatMul, {v, g.add_constant(std::to_string(i).insert(0, 1, 'w'), random_tensor(DType::kF32, {128, 128}, rng))});
    v = g.add(OpKind::kTanh, {v});
  }
  g.set_outputs({v});
  RunOptions o;
  o.fuse = false;
  ExecutablePlan plan = expect_matches_reference(g, o);
  MemoryReport m = plan.memory();
  EXPECT_GT(m.intermediate_bytes, 0);
  EXPECT_LT(m.arena_bytes, m.intermediate_bytes + m.scratch_bytes);
  EXPECT_GE(m.weight_bytes, 6 * 128 * 128 * 4);
  EXPECT_EQ(m.peak_bytes, m.arena_bytes + m.weight_bytes + m.io_bytes);
}

TEST(CudaBackendTest, SkipsWithoutCuda) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2}});
  g.set_outputs({g.add(OpKind::kRelu, {x})});
  RunOptions o;
  o.backend = Backend::kCuda;
  try {
    ExecutablePlan::compile(g, o);
  } catch (const Error& e) {
    GTEST_SKIP() << "CUDA backend unavailable: " << e.what();
  }
  FAIL() << "the CUDA backend is not part of this build yet, compile must say so";
}

// A weight read from a mapped file and packed by its kernel leaves the
// process's memory: the packed copy replaces the mapped one (DESIGN.md,
// runtime), and the plan computes what the interpreter does.
TEST(PlanTest, PackedMappedWeightsLeaveTheProcessMemory) {
  std::filesystem::path dir = std::filesystem::path(TESSERA_BINARY_DIR) / "plan_test_mapped_weights";
  std::filesystem::create_directories(dir);
  std::string path = std::filesystem::canonical(dir).string() + "/w.bin";
  std::mt19937 rng(9);
  Tensor w0 = random_tensor(DType::kF32, {256, 1024}, rng);  // 1 MiB
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(w0.data()), w0.nbytes());
  }
  auto file = MappedFile::open(path, "w");
  Tensor w = Tensor::mapped(DType::kF32, {256, 1024}, file, 0);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 256}});
  g.set_outputs({g.add(OpKind::kMatMul, {x, g.add_constant("w", w)}, {}, "mm")});
  EXPECT_TRUE(w.to_doubles() == w0.to_doubles());  // reads every page in
  EXPECT_GT(tessera::testing::resident_bytes_of(path), 1000 << 10);
  ExecutablePlan plan = ExecutablePlan::compile(g);
  EXPECT_LE(tessera::testing::resident_bytes_of(path), 8 << 10);
  Tensor in = random_tensor(DType::kF32, {1, 256}, rng);
  Tensor got = plan.run({in})[0];
  Tensor want = evaluate(g, {in})[0];
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.get_double(i), want.get_double(i), 1e-4) << i;
}

}  // namespace
}  // namespace tessera::runtime
