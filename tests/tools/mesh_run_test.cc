// `tessera run PLAN_DIR` for mesh plans, end to end: real mpirun jobs (the
// MPIEXEC that FindMPI found, TESSERA_MPIEXEC) and thread runs of a plan
// that `tessera optimize --mesh tp=2` makes from the tiny transformer,
// against the single-device run; and the faults: an mpirun -np that is not
// the plan's, rank files that are corrupt, missing or make other
// collectives, a rank that fails during its run (also while a collective
// it started is in flight). Collectives that overlap other kernels give the
// results of blocking ones, bit for bit, and every rank's plan the same
// schedule. A static KV cache written by ScatterElements, split by KV
// heads, runs on two ranks as on one device (spatial halo plans:
// mesh_run_spatial_test.cc). No test depends on timing:
// each command ends by itself or is a hang, which CTest's TIMEOUT catches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <sys/wait.h>

#include "graph/graph.h"
#include "mutator/plan_files.h"
#include "onnx_import/tensor_proto.h"
#include "runtime/communicator.h"
#include "runtime/runtime.h"
#include "tests/graph/op_test_util.h"
#include "tests/plan_schema.h"
#include "tools/api/tessera.h"
#include "tests/tools/mesh_run_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Ints = std::vector<int64_t>;
using test::make_attrs;
using test::kMpirun;
using test::kTessera;
using test::expect_same_outputs;
using test::mpirun;
using test::ramp;
using test::read_file;
using test::Result;
using test::run;
using test::scratch;

const std::string kModel = std::string(TESSERA_SOURCE_DIR) + "/examples/tiny_transformer.onnx";

// The bytes of every output_<i>.pb in `dir`.
std::vector<std::string> output_bytes(const fs::path& dir) {
  std::vector<std::string> out;
  for (int i = 0; fs::exists(dir / ("output_" + std::to_string(i) + ".pb")); ++i)
    out.push_back(read_file(dir / ("output_" + std::to_string(i) + ".pb")));
  return out;
}

// `args` run with overlap and with --no-overlap, as threads and under
// mpirun, write the same bytes.
void expect_overlap_changes_no_bit(const std::string& args) {
  for (bool mpi : {false, true}) {
    std::vector<std::string> got[2];
    for (bool overlap : {false, true}) {
      fs::path out = scratch(std::string("bits_") + (mpi ? "mpi" : "threads") + (overlap ? "_on" : "_off"));
      std::string a = args + " --threads 1 --output-dir " + out.string() + (overlap ? "" : " --no-overlap");
      Result r = mpi ? mpirun(2, a) : run("", a);
      ASSERT_EQ(r.code, 0) << r.err;
      got[overlap] = output_bytes(out);
      fs::remove_all(out);
    }
    ASSERT_FALSE(got[0].empty());
    EXPECT_TRUE(got[0] == got[1]) << (mpi ? "mpirun" : "threads") << ": overlap changed the outputs";
  }
}

// Every rank's plan compiled as `tessera run` does, and its collective steps.
std::vector<std::string> rank_schedules(const fs::path& dir) {
  api::MeshPlan plan = api::read_mesh_plan(dir.string());
  runtime::InProcessWorld world(DeviceMesh::parse(plan.mesh));
  std::vector<std::string> steps;
  for (int64_t r = 0; r < plan.ranks; ++r) {
    runtime::RunOptions o;
    o.threads = 1;
    o.communicator = world.communicator(r);
    steps.push_back(runtime::ExecutablePlan::compile(api::load_rank(plan, r), o).collective_steps());
  }
  return steps;
}

// plan.json for a plan folder made by hand: the two ranks and their files'
// digests, as `tessera run` needs them (no search, costs or shardings).
void write_hand_plan_json(const fs::path& p) {
  nlohmann::json files = nlohmann::json::object();
  for (const mutator::PlanFile& f : mutator::describe_plan_files(p.string(), {"rank0.onnx", "rank1.onnx"}))
    files[f.name] = {{"sha256", f.sha256}, {"bytes", f.bytes}};
  nlohmann::json j = {{"format_version", mutator::kPlanFormatVersion},
                      {"mesh", "tp=2"},
                      {"ranks", {{{"rank", 0}}, {{"rank", 1}}}},
                      {"files", files}};
  std::ofstream(p / "plan.json") << j.dump(2);
}

// A plan folder made by hand from one program per rank (`make(rank)`).
fs::path hand_plan(const std::string& name, const std::function<Graph(int)>& make) {
  fs::path p = scratch(name);
  fs::create_directories(p);
  for (int r = 0; r < 2; ++r) api::export_onnx(make(r), (p / ("rank" + std::to_string(r) + ".onnx")).string());
  write_hand_plan_json(p);
  return p;
}

Attrs all_reduce_over_tp() {
  Attrs ar;
  ar.set("mesh_axis", std::string("tp"));
  ar.set("group_size", int64_t{2});
  return ar;
}


// y = AllReduce(x w_r) + Relu(x v) v: the AllReduce is in flight while the
// branch runs (rank r holds its own w_r).
Graph two_branches(int rank) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {16, 32}});
  ValueId a = g.add(OpKind::kMatMul, {x, g.add_constant("w", ramp({32, 32}, 0.1 + rank))}, {}, "mm");
  ValueId v = g.add_constant("v", ramp({32, 32}, 0.05));
  ValueId b = g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {x, v}, {}, "branch1")}, {}, "branch_relu");
  b = g.add(OpKind::kMatMul, {b, v}, {}, "branch2");
  ValueId ar = g.add(OpKind::kAllReduce, {a}, all_reduce_over_tp(), "sum");
  g.set_outputs({g.add(OpKind::kAdd, {ar, b}, {}, "y")});
  return g;
}

class MeshRunTest : public ::testing::Test {
 protected:
  // The plan (Megatron: qkv and fc1 by columns, proj and fc2 by rows) and
  // the single-device outputs on the same seeded inputs.
  void SetUp() override {
    plan_ = scratch("plan");
    Result r = run("", "optimize " + kModel + " -o " + plan_.string() +
                           " --mesh tp=2 --no-calibrate --shard 'qkv_w_5=[S(1)]' --shard 'fc1_w_131=[S(1)]'"
                           " --shard 'fc2_w_150=[S(0)]' --shard 'proj_w_101=[S(0)]'");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_PLAN_MATCHES_SCHEMA(plan_);
    EXPECT_TRUE(fs::exists(plan_ / "report.html"));
    single_ = scratch("single");
    r = run("", "run " + kModel + " --seed 4 --output-dir " + single_.string());
    ASSERT_EQ(r.code, 0) << r.err;
  }
  void TearDown() override {
    fs::remove_all(plan_);
    fs::remove_all(single_);
  }
  // A copy of the plan with rank1.onnx replaced by `bytes`, or removed.
  // `recorded`: plan.json records the new file's digest, as if the plan had
  // been written with it (what the faults past the folder check need).
  fs::path broken_plan(const std::string& name, const std::optional<std::string>& bytes, bool recorded = false) {
    fs::path p = scratch(name);
    fs::copy(plan_, p, fs::copy_options::recursive);
    fs::remove(p / "rank1.onnx");
    if (bytes) std::ofstream(p / "rank1.onnx", std::ios::binary) << *bytes;
    if (recorded) {
      nlohmann::json j = nlohmann::json::parse(read_file(p / "plan.json"));
      mutator::PlanFile f = mutator::describe_plan_files(p.string(), {"rank1.onnx"})[0];
      j["files"]["rank1.onnx"] = {{"sha256", f.sha256}, {"bytes", f.bytes}};
      std::ofstream(p / "plan.json") << j.dump(2);
    }
    return p;
  }
  fs::path plan_, single_;
};

TEST_F(MeshRunTest, MpiTwoRanksMatchSingleDevice) {
  fs::path out = scratch("mpi_out");
  Result r = mpirun(2, "run " + plan_.string() + " --seed 4 --output-dir " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_outputs(out, single_);
  // Rank 0 alone reports: one line per output.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  fs::remove_all(out);
}

// A plan.json of format 4 (before the boundary and the carried state were
// recorded: no "carry", no "sharding.inputs"/"outputs") is still read: its
// inputs and outputs cross whole, as its rank files take them.
TEST_F(MeshRunTest, FormatVersion4PlanIsStillRead) {
  fs::path p = scratch("version4");
  fs::copy(plan_, p, fs::copy_options::recursive);
  nlohmann::json j = nlohmann::json::parse(read_file(p / "plan.json"));
  ASSERT_EQ(j["format_version"], mutator::kPlanFormatVersion);
  ASSERT_TRUE(j.contains("carry") && j["sharding"].contains("inputs") && j["sharding"].contains("outputs"));
  j["format_version"] = 4;
  j.erase("carry");
  j["sharding"].erase("inputs");
  j["sharding"].erase("outputs");
  std::ofstream(p / "plan.json") << j.dump(2);
  fs::path out = scratch("version4_out");
  Result r = run("", "run " + p.string() + " --seed 4 --output-dir " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_outputs(out, single_);
  fs::remove_all(out);
  fs::remove_all(p);
}

TEST_F(MeshRunTest, ThreadsMatchSingleDevice) {
  fs::path out = scratch("threads_out");
  Result r = run("", "run " + plan_.string() + " --seed 4 --output-dir " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_outputs(out, single_);
  fs::remove_all(out);
}

TEST_F(MeshRunTest, ReferenceBackendThreadsMatchSingleDevice) {
  fs::path out = scratch("ref_out");
  Result r = run("", "run " + plan_.string() + " --backend reference --seed 4 --output-dir " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_outputs(out, single_);
  fs::remove_all(out);
}

TEST_F(MeshRunTest, OverlapChangesNoBitAndEveryRankHasTheSameSchedule) {
  expect_overlap_changes_no_bit("run " + plan_.string() + " --seed 4");
  std::vector<std::string> steps = rank_schedules(plan_);
  EXPECT_EQ(steps[0], steps[1]);
  EXPECT_FALSE(steps[0].empty());
}

TEST(MeshRunOverlapTest, TwoBranchesOverlapAndChangeNoBit) {
  fs::path p = hand_plan("branches", two_branches);
  std::vector<std::string> steps = rank_schedules(p);
  EXPECT_EQ(steps[0], "start 0 AllReduce 'sum'\nfinish 0 AllReduce 'sum'\n");
  EXPECT_EQ(steps[1], steps[0]);
  expect_overlap_changes_no_bit("run " + p.string() + " --seed 2");
  for (bool mpi : {false, true}) {
    std::string args = "run " + p.string() + " --threads 1 --repeat 2 --profile";
    Result on = mpi ? mpirun(2, args) : run("", args), off = mpi ? mpirun(2, args + " --no-overlap") : run("", args + " --no-overlap");
    EXPECT_NE(on.out.find("1 of 1 overlap other kernels"), std::string::npos) << on.out << on.err;
    EXPECT_NE(off.out.find("0 of 1 overlap other kernels"), std::string::npos) << off.out << off.err;
  }
  fs::remove_all(p);
}

TEST_F(MeshRunTest, RepeatAndProfileReportRankZero) {
  for (bool mpi : {false, true}) {
    std::string args = "run " + plan_.string() + " --repeat 3 --threads 1 --profile";
    Result r = mpi ? mpirun(2, args) : run("", args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("over 3 runs"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(mpi ? "2 MPI processes" : "2 ranks as threads"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("threads 1 per rank"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("AllReduce"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("collectives: "), std::string::npos) << r.out;
  }
}

TEST_F(MeshRunTest, MpiRankCountNotThePlansFailsOnEveryRank) {
  Result r = mpirun(3, "run " + plan_.string());
  EXPECT_NE(r.code, 0);
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.err.find("rank " + std::to_string(rank) + ": mpirun started 3 processes but the plan"), std::string::npos)
        << r.err;
  EXPECT_NE(r.err.find("mpirun -np 2"), std::string::npos) << r.err;
}

TEST_F(MeshRunTest, CorruptRankFileFailsEveryRank) {
  std::string bytes = read_file(plan_ / "rank1.onnx");
  fs::path p = broken_plan("corrupt", bytes.substr(0, bytes.size() / 3), /*recorded=*/true);
  Result m = mpirun(2, "run " + p.string());
  EXPECT_NE(m.code, 0);
  EXPECT_NE(m.err.find("rank 1: " + (p / "rank1.onnx").string()), std::string::npos) << m.err;
  EXPECT_NE(m.err.find("rank 0: stopped: rank 1 failed"), std::string::npos) << m.err;
  Result t = run("", "run " + p.string());
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.err.find((p / "rank1.onnx").string()), std::string::npos) << t.err;
  fs::remove_all(p);
}

// The folder check (mutator/plan_files.h) refuses, before any rank loads
// anything, with one line naming the file: every process under mpirun.
void expect_refused(const fs::path& p, const std::string& message) {
  Result t = run("", "run " + p.string());
  EXPECT_EQ(t.code, 1) << t.err;
  EXPECT_NE(t.err.find(message), std::string::npos) << t.err;
  EXPECT_EQ(std::count(t.err.begin(), t.err.end(), '\n'), 1) << t.err;
  Result m = mpirun(2, "run " + p.string());
  EXPECT_NE(m.code, 0);
  EXPECT_NE(m.err.find(message), std::string::npos) << m.err;
}

TEST_F(MeshRunTest, MissingRankFileIsRefused) {
  fs::path p = broken_plan("missing", std::nullopt);
  expect_refused(p, (p / "rank1.onnx").string() + ": missing; plan.json lists it");
  fs::remove_all(p);
}

TEST_F(MeshRunTest, SwappedRankFilesAreRefused) {
  fs::path p = broken_plan("swapped", read_file(plan_ / "rank0.onnx"));
  fs::copy_file(plan_ / "rank1.onnx", p / "rank0.onnx", fs::copy_options::overwrite_existing);
  expect_refused(p, (p / "rank0.onnx").string() + ": does not match the plan");
  fs::remove_all(p);
}

// A rank file that is another valid program (rank 0's, or the model) is
// refused by its digest before anyone notices what it computes.
TEST_F(MeshRunTest, ReplacedRankFileIsRefused) {
  fs::path p = broken_plan("replaced", read_file(kModel));
  expect_refused(p, (p / "rank1.onnx").string() + ": does not match the plan");
  fs::remove_all(p);
}

TEST_F(MeshRunTest, UnknownFormatVersionIsRefused) {
  fs::path p = broken_plan("version", read_file(plan_ / "rank1.onnx"));
  nlohmann::json j = nlohmann::json::parse(read_file(p / "plan.json"));
  for (int version : {3, 6}) {
    j["format_version"] = version;
    std::ofstream(p / "plan.json") << j.dump(2);
    expect_refused(p, "plan format version " + std::to_string(version) + " is not one this Tessera reads");
  }
  j["format_version"] = mutator::kPlanFormatVersion;
  j.erase("files");
  std::ofstream(p / "plan.json") << j.dump(2);
  expect_refused(p, "the plan lists no \"files\"");
  fs::remove_all(p);
}

// rank1.onnx is the single-device model: it would finish without a
// collective while rank 0 waits in one.
TEST_F(MeshRunTest, RankProgramWithOtherCollectivesFailsBeforeRunning) {
  fs::path p = broken_plan("other", read_file(kModel), /*recorded=*/true);
  for (bool mpi : {false, true}) {
    Result r = mpi ? mpirun(2, "run " + p.string()) : run("", "run " + p.string());
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("its collectives are not rank0.onnx's"), std::string::npos) << r.err;
  }
  fs::remove_all(p);
}

// A plan folder made by hand: y = AllReduce(Gather(w, idx)), where rank 1's
// w has 2 rows and rank 0's 8, so that idx = 5 fails on rank 1 only, during
// the run, while rank 0 waits in the all-reduce.
fs::path gather_plan() {
  fs::path p = scratch("gather");
  fs::create_directories(p);
  for (int r = 0; r < 2; ++r) {
    Graph g;
    ValueId idx = g.add_input("idx", {DType::kI64, {1}});
    int64_t rows = r == 0 ? 8 : 2;
    ValueId w = g.add_constant("w", Tensor::from_doubles(DType::kF32, {rows, 3}, std::vector<double>(rows * 3, 1.0)));
    Attrs ga;
    ga.set("axis", int64_t{0});
    ValueId row = g.add(OpKind::kGather, {w, idx}, ga, "gather");
    Attrs ar;
    ar.set("mesh_axis", std::string("tp"));
    ar.set("group_size", int64_t{2});
    g.set_outputs({g.add(OpKind::kAllReduce, {row}, ar, "sum")});
    api::export_onnx(g, (p / ("rank" + std::to_string(r) + ".onnx")).string());
  }
  write_hand_plan_json(p);
  write_tensor_file(Tensor::vector_i64({5}), "idx", (p / "idx.pb").string());
  return p;
}

// Rank 1's Gather reads index 5 of its 2 rows: under mpirun and as threads
// the job fails, naming the rank, the node and the op.
void expect_gather_failure_ends_the_job(const std::string& args) {
  Result m = mpirun(2, args);
  EXPECT_NE(m.code, 0);
  EXPECT_NE(m.err.find("rank 1: node 'gather' (Gather): gather index 5 is out of range"), std::string::npos) << m.err;
  Result t = run("", args);
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.err.find("rank 1: node 'gather' (Gather): gather index 5"), std::string::npos) << t.err;
}

TEST(MeshRunFaultTest, RankFailingDuringItsRunEndsTheJob) {
  fs::path p = gather_plan();
  std::string args = "run " + p.string() + " --input idx=" + (p / "idx.pb").string();
  expect_gather_failure_ends_the_job(args);
  // With an index both ranks hold, the same folder runs.
  write_tensor_file(Tensor::vector_i64({1}), "idx", (p / "idx.pb").string());
  Result ok = mpirun(2, args);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("sum=6 "), std::string::npos) << ok.out;  // 2 ranks x 3 ones
  fs::remove_all(p);
}

// y = AllReduce(x w) + Gather(t, idx), where rank 1's t has 2 rows and
// rank 0's 8: idx = 5 fails on rank 1 only, in the Gather, which runs while
// the AllReduce that both ranks started is in flight.
TEST(MeshRunFaultTest, RankFailingWhileACollectiveIsInFlightEndsTheJob) {
  fs::path p = hand_plan("inflight", [](int r) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 3}});
    ValueId idx = g.add_input("idx", {DType::kI64, {1}});
    ValueId mm = g.add(OpKind::kMatMul, {x, g.add_constant("w", ramp({3, 3}, 1.0))}, {}, "mm");
    ValueId sum = g.add(OpKind::kAllReduce, {mm}, all_reduce_over_tp(), "sum");
    int64_t rows = r == 0 ? 8 : 2;
    Attrs ga;
    ga.set("axis", int64_t{0});
    ValueId row = g.add(OpKind::kGather, {g.add_constant("t", ramp({rows, 3}, 2.0)), idx}, ga, "gather");
    g.set_outputs({g.add(OpKind::kAdd, {sum, row}, {}, "y")});
    return g;
  });
  EXPECT_EQ(rank_schedules(p)[1], "start 0 AllReduce 'sum'\nfinish 0 AllReduce 'sum'\n");
  write_tensor_file(Tensor::vector_i64({5}), "idx", (p / "idx.pb").string());
  std::string args = "run " + p.string() + " --input idx=" + (p / "idx.pb").string();
  expect_gather_failure_ends_the_job(args);
  write_tensor_file(Tensor::vector_i64({1}), "idx", (p / "idx.pb").string());
  EXPECT_EQ(mpirun(2, args).code, 0);
  EXPECT_EQ(run("", args).code, 0);
  fs::remove_all(p);
}

// One attention step over a static KV cache, as a compiled LLM server runs
// it: caches past_k / past_v [1, 2 KV heads, 8 positions, 4] come in, the
// new key and value are written at cache_position by ScatterElements along
// the positions (torch's index_copy_ as exported: the position expanded over
// the new entry), 4 query heads (2 per KV head, the cache repeated as
// repeat_kv does) attend over the whole cache with a mask of the positions
// written so far, and the updated caches go out as present_k / present_v.
Graph static_cache_attention() {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 1, 16}});
  ValueId pos = g.add_input("cache_position", {DType::kI64, {1}});
  ValueId past_k = g.add_input("past_k", {DType::kF32, {1, 2, 8, 4}});
  ValueId past_v = g.add_input("past_v", {DType::kF32, {1, 2, 8, 4}});
  auto op = [&](OpKind kind, std::vector<ValueId> in, const char* attr = nullptr, Ints value = {}) {
    return g.add(kind, std::move(in), attr ? make_attrs({{attr, value}}) : Attrs{});
  };
  auto scalar = [&](const char* name, double v) {
    return g.add_constant(name, Tensor::from_doubles(DType::kF32, {}, {v}));
  };
  auto heads = [&](const char* name, int64_t n, double scale) {  // x W as [1, n heads, 1, 4]
    ValueId y = op(OpKind::kMatMul, {x, g.add_constant(std::string("w") + name, ramp({16, 4 * n}, scale))});
    return op(OpKind::kTranspose, {op(OpKind::kReshape, {y}, "shape", {1, 1, n, 4})}, "perm", {0, 2, 1, 3});
  };
  ValueId at = op(OpKind::kExpand, {op(OpKind::kReshape, {pos}, "shape", {1, 1, 1, 1})}, "shape", {1, 2, 1, 4});
  auto write = [&](ValueId past, ValueId entry, const std::string& name) {
    NodeId n = g.add_node(OpKind::kScatterElements, {past, at, entry}, make_attrs({{"axis", int64_t{2}}}),
                          "write_" + name, {"present_" + name});
    return g.node(n).outputs[0];
  };
  ValueId present_k = write(past_k, heads("k", 2, 0.3), "k"), present_v = write(past_v, heads("v", 2, 0.4), "v");
  auto repeat_kv = [&](ValueId cache) {
    ValueId c = op(OpKind::kExpand, {op(OpKind::kUnsqueeze, {cache}, "axes", {2})}, "shape", {1, 2, 2, 8, 4});
    return op(OpKind::kReshape, {c}, "shape", {1, 4, 8, 4});
  };
  ValueId kt = op(OpKind::kTranspose, {repeat_kv(present_k)}, "perm", {0, 1, 3, 2});
  ValueId scores = op(OpKind::kMul, {op(OpKind::kMatMul, {heads("q", 4, 0.2), kt}), scalar("scale", 0.5)});
  ValueId positions = g.add_constant("positions", Tensor::from_ints(DType::kI64, {8}, {0, 1, 2, 3, 4, 5, 6, 7}));
  scores = op(OpKind::kWhere, {op(OpKind::kLessOrEqual, {positions, pos}), scores, scalar("masked", -1e4)});
  ValueId p = g.add(OpKind::kSoftmax, {scores}, make_attrs({{"axis", int64_t{-1}}}));
  ValueId a = op(OpKind::kTranspose, {op(OpKind::kMatMul, {p, repeat_kv(present_v)})}, "perm", {0, 2, 1, 3});
  a = op(OpKind::kReshape, {a}, "shape", {1, 1, 16});
  NodeId out = g.add_node(OpKind::kMatMul, {a, g.add_constant("wo", ramp({16, 16}, 0.5))}, {}, "out", {"y"});
  g.set_outputs({g.node(out).outputs[0], present_k, present_v});
  return g;
}

// Imported from ONNX, planned for tp=2 with the caches in and out split by
// KV heads (propagation carries the split through the writes and the
// attention; the caches cross the plan's boundary as each rank's block, and
// `tessera run` cuts and assembles the global files at the edges), run
// under mpirun and as threads at position 5: the output and the updated
// caches are the single-device run's.
TEST(MeshRunStaticCacheTest, KvHeadSplitCacheMatchesSingleDevice) {
  fs::path dir = scratch("static_cache");
  fs::create_directories(dir);
  std::string model = (dir / "model.onnx").string(), plan = (dir / "plan").string();
  api::export_onnx(static_cache_attention(), model);
  std::string position = (dir / "position.pb").string(), cache = (dir / "cache.pb").string();
  write_tensor_file(Tensor::vector_i64({5}), "cache_position", position);
  write_tensor_file(Tensor::from_doubles(DType::kF32, {1, 2, 8, 4}, std::vector<double>(64, 7.0)), "past", cache);
  Result r = run("", "optimize " + model + " -o " + plan + " --mesh tp=2 --no-calibrate --budget 3"
                     " --shard 'past_*=[S(1)]' --shard 'present_*=[S(1)]'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_PLAN_MATCHES_SCHEMA(fs::path(plan));
  nlohmann::json j = nlohmann::json::parse(read_file(fs::path(plan) / "plan.json"));
  EXPECT_EQ(j["mesh"], "tp=2");
  for (const char* t : {"past_k", "past_v", "present_k", "present_v"})
    EXPECT_EQ(j["sharding"]["tensors"][t], "[S(1)]") << t;
  // The caches cross the plan's boundary as each rank's block: rank files
  // take and give back half the KV heads, and nothing gathers them.
  for (const char* t : {"past_k", "past_v"}) EXPECT_EQ(j["sharding"]["inputs"][t], "[S(1)]") << t;
  for (const char* t : {"present_k", "present_v"}) EXPECT_EQ(j["sharding"]["outputs"][t], "[S(1)]") << t;
  EXPECT_EQ(j["sharding"]["inputs"]["x"], "[R]");
  EXPECT_EQ(j["sharding"]["outputs"]["y"], "[R]");
  api::MeshPlan mp = api::read_mesh_plan(plan);
  EXPECT_EQ(mp.input_shardings["past_k"], "[S(1)]");
  for (int64_t rank = 0; rank < 2; ++rank) {
    Graph rg = api::load_rank(mp, rank);
    for (ValueId v : rg.inputs())
      if (rg.value(v).name.rfind("past_", 0) == 0) EXPECT_EQ(rg.type(v).shape, (Shape{1, 1, 8, 4})) << rg.value(v).name;
    for (ValueId v : rg.outputs())
      if (rg.value(v).name.rfind("present_", 0) == 0) EXPECT_EQ(rg.type(v).shape, (Shape{1, 1, 8, 4})) << rg.value(v).name;
    for (NodeId n = 0; n < rg.num_nodes(); ++n) {  // no collective moves a cache's positions
      const Node& node = rg.node(n);
      if (!op_def(node.kind).is_collective()) continue;
      const Shape& moved = rg.type(node.inputs[0]).shape;
      EXPECT_FALSE(moved.size() == 4 && moved[2] == 8) << node.name << " moves " << type_str(rg.type(node.inputs[0]));
    }
  }
  for (const char* n : {"write_k", "write_v"}) {
    std::string strategy = j["sharding"]["nodes"][n];
    EXPECT_EQ(strategy.rfind("[S(1)] x [S(1)] x [S(1)] -> [S(1)] (shard", 0), 0u) << n << ": " << strategy;
  }
  std::string inputs = " --seed 3 --input cache_position=" + position + " --input past_k=" + cache +
                       " --input past_v=" + cache + " --output-dir ";
  fs::path single = dir / "single", mpi = dir / "mpi", threads = dir / "threads";
  r = run("", "run " + model + inputs + single.string());
  ASSERT_EQ(r.code, 0) << r.err;
  r = mpirun(2, "run " + plan + inputs + mpi.string());
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_outputs(mpi, single);
  r = run("", "run " + plan + inputs + threads.string());
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_outputs(threads, single);
  // The caches changed at position 5, on every head, and nowhere else.
  for (const char* f : {"output_1.pb", "output_2.pb"}) {
    Tensor present = read_tensor_file((mpi / f).string());
    ASSERT_EQ(present.shape(), (Shape{1, 2, 8, 4})) << f;
    for (int64_t i = 0; i < present.numel(); ++i)
      EXPECT_EQ(present.get_double(i) != 7.0, (i / 4) % 8 == 5) << f << " element " << i;
  }
  fs::remove_all(dir);
}

// static_cache_attention planned for tp=2 with its caches carried and
// split by KV heads.
api::OptimizeConfig carried_cache_config() {
  api::OptimizeConfig c;
  c.budget_s = 5;
  c.measure = false;
  c.mesh = "tp=2";
  c.shards = {"past_*=[S(1)]"};
  c.carry = {"present_*=past_*"};
  return c;
}

// A session over the static-cache step planned for tp=2 with the caches
// carried and split by KV heads: step after step its outputs are one
// device's session's, each rank holds its half of the caches (its blocks,
// kept between steps), and the state assembled is one device's.
TEST(SessionTest, CarriedCacheStaysSplitAndMatchesOneDevice) {
  Graph g = static_cache_attention();
  api::OptimizeConfig c = carried_cache_config();
  api::Plan mesh = api::optimize(g, c);
  ASSERT_TRUE(mesh.is_mesh());
  ASSERT_EQ(mesh.carry.size(), 2u);
  EXPECT_EQ(mesh.output_shardings["present_k"], "[S(1)]") << "the carry gives the output its input's sharding";
  api::OptimizeConfig one_c = c;
  one_c.mesh = "";
  one_c.shards.clear();
  api::Plan one = api::optimize(g, one_c);
  ASSERT_FALSE(one.is_mesh());
  api::SessionOptions so;
  so.run.threads = 1;
  api::Session split(mesh, so), whole(one, so);
  EXPECT_EQ(split.carried().size(), 2u);
  for (int64_t pos = 0; pos < 4; ++pos) {
    std::map<std::string, Tensor> feeds{
        {"x", Tensor::from_doubles(DType::kF32, {1, 1, 16}, std::vector<double>(16, 0.1 * static_cast<double>(pos + 1)))},
        {"cache_position", Tensor::vector_i64({pos})}};
    std::map<std::string, Tensor> a = split.step(feeds), b = whole.step(feeds);
    ASSERT_EQ(a.size(), 1u) << "only y: the caches are carried, not returned";
    for (int64_t i = 0; i < 16; ++i) EXPECT_NEAR(a["y"].get_double(i), b["y"].get_double(i), 1e-5) << pos;
  }
  EXPECT_EQ(split.steps(), 4);
  for (const char* name : {"past_k", "past_v"}) {
    std::vector<Tensor> blocks = split.state_blocks(name);
    ASSERT_EQ(blocks.size(), 2u);
    for (const Tensor& b : blocks) EXPECT_EQ(b.shape(), (Shape{1, 1, 8, 4})) << name << ": half the KV heads";
    Tensor s = split.state(name), w = whole.state(name);
    ASSERT_EQ(s.shape(), (Shape{1, 2, 8, 4}));
    int64_t written = 0;
    for (int64_t i = 0; i < s.numel(); ++i) {
      EXPECT_NEAR(s.get_double(i), w.get_double(i), 1e-5) << name << " " << i;
      written += s.get_double(i) != 0.0;
    }
    EXPECT_GT(written, 0) << name << ": the steps wrote the cache";
  }
  // A carried input fed with the wrong shape: one line naming it.
  try {
    split.step({{"x", Tensor(DType::kF32, {1, 1, 16})}, {"cache_position", Tensor::vector_i64({0})},
                {"past_k", Tensor(DType::kF32, {1, 2, 4, 4})}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("carried tensor 'past_k'"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // An input neither fed nor carried.
  EXPECT_THROW(split.step({{"x", Tensor(DType::kF32, {1, 1, 16})}}), Error);
}

// The carried caches are written in place: each rank holds one buffer per
// cache for the whole session (the step writes only the new position; its
// block's data pointer does not change from step to step), on one device
// and on 2 ranks as threads, with one device's outputs. A block held by
// the caller across a step is a snapshot: that step writes a copy.
TEST(SessionTest, CarriedCacheIsWrittenInPlaceOnEveryRank) {
  Graph g = static_cache_attention();
  api::OptimizeConfig c = carried_cache_config();
  api::Plan mesh = api::optimize(g, c);
  api::OptimizeConfig one_c = c;
  one_c.mesh = "";
  one_c.shards.clear();
  api::Plan one = api::optimize(g, one_c);
  api::SessionOptions so;
  so.run.threads = 1;
  api::Session split(mesh, so), whole(one, so);
  auto buffers = [](const api::Session& s, const char* name) {
    std::vector<const uint8_t*> p;
    for (const Tensor& b : s.state_blocks(name)) p.push_back(b.data());
    return p;  // the blocks themselves are dropped here: the next step may write them
  };
  std::map<std::string, std::vector<const uint8_t*>> first;
  for (int64_t pos = 0; pos < 5; ++pos) {
    std::map<std::string, Tensor> feeds{
        {"x", Tensor::from_doubles(DType::kF32, {1, 1, 16}, std::vector<double>(16, 0.2 * static_cast<double>(pos + 1)))},
        {"cache_position", Tensor::vector_i64({pos})}};
    std::map<std::string, Tensor> a = split.step(feeds), b = whole.step(feeds);
    for (int64_t i = 0; i < 16; ++i) ASSERT_NEAR(a["y"].get_double(i), b["y"].get_double(i), 1e-5) << pos;
    for (const char* name : {"past_k", "past_v"})
      for (const api::Session* s : {&split, &whole}) {
        std::string key = std::string(name) + (s == &split ? "/split" : "/whole");
        if (pos == 0) first[key] = buffers(*s, name);
        else EXPECT_EQ(buffers(*s, name), first[key]) << key << " moved at step " << pos;
      }
  }
  for (const char* name : {"past_k", "past_v"}) {
    Tensor s = split.state(name), w = whole.state(name);
    for (int64_t i = 0; i < s.numel(); ++i) ASSERT_NEAR(s.get_double(i), w.get_double(i), 1e-5) << name << " " << i;
  }
  // Held across a step: the step writes elsewhere and the held block keeps
  // the values it had.
  Tensor held = whole.state_blocks("past_k")[0];
  std::vector<double> before;
  for (int64_t i = 0; i < held.numel(); ++i) before.push_back(held.get_double(i));
  whole.step({{"x", Tensor::from_doubles(DType::kF32, {1, 1, 16}, std::vector<double>(16, 3.0))},
              {"cache_position", Tensor::vector_i64({6})}});
  EXPECT_NE(buffers(whole, "past_k")[0], held.data());
  for (int64_t i = 0; i < held.numel(); ++i) ASSERT_EQ(held.get_double(i), before[static_cast<size_t>(i)]) << i;
}

// A vocab-parallel argmax: y split over its last dim at the boundary, each
// rank's (max, index) pair picked and combined as one device's argmax does,
// the lowest index on ties (across ranks and within one).
TEST(SessionTest, VocabParallelArgmaxBreaksTiesAsOneDevice) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 2, 8}});
  NodeId n = g.add_node(OpKind::kMul, {x, g.add_constant("two", Tensor::from_doubles(DType::kF32, {}, {2.0}))}, {},
                        "scale", {"logits"});
  g.set_outputs({g.node(n).outputs[0]});
  api::OptimizeConfig c;
  c.budget_s = 3;
  c.measure = false;
  c.mesh = "tp=2";
  c.shard_search = false;
  c.shards = {"x=[S(2)]", "logits=[S(2)]"};
  api::Plan split_plan = api::optimize(g, c);
  ASSERT_TRUE(split_plan.is_mesh());
  EXPECT_EQ(split_plan.output_shardings["logits"], "[S(2)]");
  api::Session split(split_plan);
  // The last row is read; the first row's larger values are not.
  for (auto [row, want] : std::vector<std::pair<std::vector<double>, int64_t>>{
           {{0, 1, 5, 0, 0, 1, 5, 0}, 2},  // tie across the ranks: rank 0's
           {{0, 1, 2, 0, 0, 7, 7, 0}, 5},  // tie within rank 1
           {{0, 1, 2, 0, 0, 1, 2, 9}, 7},  // rank 1's last column
           {{3, 3, 3, 3, 3, 3, 3, 3}, 0}}) {
    std::vector<double> v(8, 100.0);
    v.insert(v.end(), row.begin(), row.end());
    int64_t got = split.step_argmax({{"x", Tensor::from_doubles(DType::kF32, {1, 2, 8}, v)}}, "logits");
    EXPECT_EQ(got, want);
  }
  EXPECT_EQ(split.output_names(), std::vector<std::string>{"logits"});
}

}  // namespace
}  // namespace tessera
