// The steps of plans with collectives (runtime/schedule.cc): where a
// collective starts and finishes, on small graphs (golden, over
// describe_collective_steps); random programs with every collective kind
// whose results with overlap are bitwise those without, whose ranks get the
// same schedule and start their collectives in kernel order; and a
// communicator that moves the data only when waited on, which finds any
// buffer of a started collective that the memory planner gave away early.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <sstream>

#include "graph/error.h"
#include "graph/text_form.h"
#include "runtime/communicator.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using testing::random_tensor;

Attrs over_tp(int64_t n, std::vector<std::pair<const char*, int64_t>> ints = {}) {
  Attrs a;
  a.set("mesh_axis", std::string("tp"));
  a.set("group_size", n);
  for (auto& [k, v] : ints) a.set(k, v);
  return a;
}

ValueId weight(Graph& g, const std::string& name, int64_t rows, int64_t cols, std::mt19937& rng) {
  return g.add_constant(name, random_tensor(DType::kF32, {rows, cols}, rng));
}

// The collective lines of g's plan for rank `rank` of world.
std::string steps_of(const Graph& g, InProcessWorld& world, int64_t rank, bool overlap, bool fuse = false) {
  RunOptions o;
  o.threads = 1;
  o.fuse = fuse;
  o.overlap = overlap;
  o.communicator = world.communicator(rank);
  return ExecutablePlan::compile(g, o).collective_steps();
}

// y = AllReduce(x w) + Relu(x v1) v2: the branch does not read the sum.
// The AllReduce node comes after the branch's, so that in the kernel order
// it is right before its reader; with `branch_first` the branch comes
// before x w too.
Graph two_branches(std::mt19937& rng, bool branch_first) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {8, 16}});
  auto branch = [&] {
    ValueId b = g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {x, weight(g, "v1", 16, 16, rng)}, {}, "b1")}, {}, "b1r");
    return g.add(OpKind::kMatMul, {b, weight(g, "v2", 16, 16, rng)}, {}, "b2");
  };
  ValueId b = branch_first ? branch() : kNoValue;
  ValueId a = g.add(OpKind::kMatMul, {x, weight(g, "w", 16, 16, rng)}, {}, "a");
  if (!branch_first) b = branch();
  ValueId ar = g.add(OpKind::kAllReduce, {a}, over_tp(2), "ar");
  g.set_outputs({g.add(OpKind::kAdd, {ar, b}, {}, "y")});
  return g;
}

// The AllReduce starts as soon as x w is written, not where the kernel
// order has it, and finishes before the Add. The kernels keep their order:
// where the branch comes before x w, nothing runs in between.
TEST(ScheduleTest, CollectiveStartsWhenItsInputIsWritten) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  std::mt19937 rng(1);
  Graph g = two_branches(rng, false);
  EXPECT_EQ(steps_of(g, world, 0, true), "start 0 AllReduce 'ar'\nfinish 0 AllReduce 'ar'\n");
  EXPECT_EQ(steps_of(g, world, 0, true, /*fuse=*/true), "start 0 AllReduce 'ar'\nfinish 0 AllReduce 'ar'\n");
  EXPECT_EQ(steps_of(g, world, 0, false), "run 0 AllReduce 'ar'\n");
  EXPECT_EQ(steps_of(two_branches(rng, true), world, 0, true), "run 0 AllReduce 'ar'\n");
}

// Megatron's pattern: every collective's result feeds the next kernel, so
// each keeps the blocking form; a collective that reads another's result
// starts after that one finishes.
TEST(ScheduleTest, CollectiveWhoseResultIsReadNextBlocks) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  std::mt19937 rng(2);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {8, 16}});
  ValueId ar = g.add(OpKind::kAllReduce, {g.add(OpKind::kMatMul, {x, weight(g, "w", 16, 16, rng)}, {}, "mm")},
                     over_tp(2), "ar");
  ValueId h = g.add(OpKind::kRelu, {ar}, {}, "relu");
  ValueId ag = g.add(OpKind::kAllGather, {h}, over_tp(2, {{"axis", 1}}), "ag");
  ValueId ar2 = g.add(OpKind::kAllReduce, {ag}, over_tp(2), "ar2");
  g.set_outputs({ar2});
  EXPECT_EQ(steps_of(g, world, 0, true),
            "run 0 AllReduce 'ar'\nrun 1 AllGather 'ag'\nrun 2 AllReduce 'ar2'\n");
}

// Two collectives in flight at once; the second reads nothing of the
// first, and its reader comes first: finishes need not follow start order.
TEST(ScheduleTest, CollectivesInFlightTogetherFinishWhereRead) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  std::mt19937 rng(3);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {8, 16}});
  ValueId a = g.add(OpKind::kAllReduce, {g.add(OpKind::kRelu, {x}, {}, "ra")}, over_tp(2), "first");
  ValueId b = g.add(OpKind::kAllReduce, {g.add(OpKind::kNeg, {x}, {}, "rb")}, over_tp(2), "second");
  ValueId c = g.add(OpKind::kMatMul, {x, weight(g, "w", 16, 16, rng)}, {}, "mm");
  ValueId d = g.add(OpKind::kAdd, {b, c}, {}, "reads_second");
  ValueId e = g.add(OpKind::kMatMul, {d, weight(g, "v", 16, 16, rng)}, {}, "mm2");
  g.set_outputs({g.add(OpKind::kAdd, {a, e}, {}, "reads_first")});
  EXPECT_EQ(steps_of(g, world, 0, true),
            "start 0 AllReduce 'first'\nstart 1 AllReduce 'second'\nfinish 1 AllReduce 'second'\n"
            "finish 0 AllReduce 'first'\n");
}

// A random program of [8, 8] tensors: matmuls by constants, element-wise
// ops, and collectives of every kind over tp=2 (ReduceScatter then
// AllGather along axis 1, AllToAll along axis 1: packed through scratch).
// Every rank has the same program with its own constants.
Graph random_program(uint32_t seed, int64_t rank) {
  std::mt19937 shape_rng(seed), data_rng(seed * 31 + static_cast<uint32_t>(rank));
  Graph g;
  std::vector<ValueId> pool = {g.add_input("x", {DType::kF32, {8, 8}})};
  std::uniform_int_distribution<int> op(0, 6);
  for (int i = 0; i < 14; ++i) {
    std::string name = "n" + std::to_string(i);
    ValueId v = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(shape_rng)];
    ValueId w = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(shape_rng)];
    switch (op(shape_rng)) {
      case 0:
      case 1: pool.push_back(g.add(OpKind::kMatMul, {v, weight(g, name + "_w", 8, 8, data_rng)}, {}, name)); break;
      case 2: pool.push_back(g.add(OpKind::kRelu, {v}, {}, name)); break;
      case 3: pool.push_back(g.add(OpKind::kAdd, {v, w}, {}, name)); break;
      case 4: pool.push_back(g.add(OpKind::kAllReduce, {v}, over_tp(2), name)); break;
      case 5: {
        ValueId rs = g.add(OpKind::kReduceScatter, {v}, over_tp(2, {{"axis", 1}}), name + "_rs");
        pool.push_back(g.add(OpKind::kAllGather, {rs}, over_tp(2, {{"axis", 1}}), name + "_ag"));
        break;
      }
      default:
        pool.push_back(g.add(OpKind::kAllToAll, {v}, over_tp(2, {{"split_axis", 1}, {"concat_axis", 1}}), name));
    }
  }
  g.set_outputs({pool.back(), pool[pool.size() / 2]});
  return g;
}

// The collectives of a schedule in the order they start (a "run" starts
// too), each once, and every finish after its start.
std::vector<int> start_order(const std::string& steps) {
  std::vector<int> started;
  std::vector<int> finished;
  std::istringstream in(steps);
  for (std::string kind, op, node; in >> kind;) {
    int k = -1;
    in >> k >> op >> node;
    if (kind == "finish") {
      EXPECT_NE(std::find(started.begin(), started.end(), k), started.end()) << "finish before start: " << steps;
      finished.push_back(k);
    } else {
      started.push_back(k);
      if (kind == "run") finished.push_back(k);
    }
  }
  std::sort(finished.begin(), finished.end());
  EXPECT_EQ(std::adjacent_find(finished.begin(), finished.end()), finished.end()) << steps;
  EXPECT_EQ(finished.size(), started.size()) << steps;
  return started;
}

TEST(ScheduleTest, RandomProgramsSameResultsAndScheduleOnEveryRank) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  int overlapping = 0;
  for (uint32_t seed = 1; seed <= 24; ++seed) {
    std::vector<Graph> programs = {random_program(seed, 0), random_program(seed, 1)};
    SCOPED_TRACE("seed " + std::to_string(seed) + "\n" + print_graph(programs[0]));
    std::mt19937 rng(seed);
    std::vector<Tensor> inputs = {random_tensor(DType::kF32, {8, 8}, rng)};
    std::vector<std::string> steps(2);
    std::vector<std::vector<Tensor>> got[2];
    for (bool overlap : {true, false}) {
      std::vector<std::vector<Tensor>>& out = got[overlap];
      out.assign(2, {});
      world.run([&](int64_t r) {
        RunOptions o;
        o.threads = 1;
        o.overlap = overlap;
        o.communicator = world.communicator(r);
        ExecutablePlan plan = ExecutablePlan::compile(programs[static_cast<size_t>(r)], o);
        if (overlap) steps[static_cast<size_t>(r)] = plan.collective_steps();
        out[static_cast<size_t>(r)] = plan.run(inputs);
        out[static_cast<size_t>(r)] = plan.run(inputs);  // again, over the same arena
      });
    }
    EXPECT_EQ(steps[0], steps[1]);
    std::vector<int> order = start_order(steps[0]);
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i)) << steps[0];
    overlapping += steps[0].find("start ") != std::string::npos;
    for (size_t r = 0; r < 2; ++r)
      for (size_t j = 0; j < got[0][r].size(); ++j) {
        const Tensor &a = got[1][r][j], &b = got[0][r][j];
        ASSERT_EQ(a.type(), b.type());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())), 0)
            << "rank " << r << " output " << j << ": overlap changed the result";
      }
  }
  EXPECT_GE(overlapping, 6) << "too few random programs overlap a collective to test anything";
}

// Rank 0 of tp=2 whose peer holds the same tensors as it does, and which
// moves the data only in wait(), after checking that the input is still
// what start() was given: a buffer of a started collective that the plan
// hands to another kernel before the finish shows up as a changed input
// here, or as a result that differs from the blocking run's.
class LateCommunicator : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  const DeviceMesh& mesh() const override { return mesh_; }
  std::string name() const override { return "late"; }

  void all_reduce_sum(int, DType dtype, const void* in, void* out, int64_t count) override {
    TESSERA_CHECK(dtype == DType::kF32, "f32 only");
    for (int64_t i = 0; i < count; ++i) static_cast<float*>(out)[i] = 2 * static_cast<const float*>(in)[i];
  }
  void reduce_scatter_sum(int, DType dtype, const void* in, void* out, int64_t count) override {
    TESSERA_CHECK(dtype == DType::kF32, "f32 only");
    for (int64_t i = 0; i < count; ++i) static_cast<float*>(out)[i] = 2 * static_cast<const float*>(in)[i];
  }
  void all_gather(int, const void* in, void* out, int64_t bytes) override {
    for (int k = 0; k < 2; ++k) std::memcpy(static_cast<uint8_t*>(out) + k * bytes, in, static_cast<size_t>(bytes));
  }
  void all_to_all(int, const void* in, void* out, int64_t bytes) override {
    std::vector<uint8_t> mine(static_cast<const uint8_t*>(in), static_cast<const uint8_t*>(in) + bytes);
    for (int k = 0; k < 2; ++k) std::memcpy(static_cast<uint8_t*>(out) + k * bytes, mine.data(), mine.size());
  }
  void halo_exchange(const Exchange&) override { TESSERA_CHECK(false, "the late communicator has no halo exchange"); }

  int64_t start(const Exchange& x) override {
    int64_t bytes = x.kind == Exchange::Kind::kAllReduceSum       ? x.count * 4
                    : x.kind == Exchange::Kind::kReduceScatterSum ? x.count * 8
                    : x.kind == Exchange::Kind::kAllGather        ? x.count
                                                                  : x.count * 2;
    const auto* p = static_cast<const uint8_t*>(x.in);
    started_.push_back({x, std::vector<uint8_t>(p, p + bytes)});
    return static_cast<int64_t>(started_.size() - 1);
  }
  void wait(int64_t request) override {
    auto& [x, copy] = started_[static_cast<size_t>(request)];
    if (std::memcmp(copy.data(), x.in, copy.size()) != 0) ++changed_inputs;
    exchange(x);
  }

  int changed_inputs = 0;

 private:
  DeviceMesh mesh_ = DeviceMesh::parse("tp=2");
  std::vector<std::pair<Exchange, std::vector<uint8_t>>> started_;
};

// Every collective's input is an intermediate that dies at its start in
// the kernel order, while the kernels in flight with it make same-sized
// intermediates that could take its buffer, its output's or its scratch.
TEST(ScheduleTest, StartedCollectivesKeepTheirBuffersUntilTheyFinish) {
  std::mt19937 rng(4);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {8, 8}});
  ValueId chain = g.add(OpKind::kNeg, {x}, {}, "c0");
  std::vector<ValueId> results;
  auto collective = [&](OpKind kind, Attrs a, const std::string& name) {
    ValueId in = g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {x, weight(g, name + "_w", 8, 8, rng)}, {}, name + "_mm")},
                       {}, name + "_in");
    results.push_back(g.add(kind, {in}, a, name));
  };
  collective(OpKind::kAllReduce, over_tp(2), "ar");
  collective(OpKind::kAllGather, over_tp(2, {{"axis", 1}}), "ag");
  collective(OpKind::kAllToAll, over_tp(2, {{"split_axis", 1}, {"concat_axis", 1}}), "a2a");
  collective(OpKind::kReduceScatter, over_tp(2, {{"axis", 1}}), "rs");
  for (int i = 1; i < 6; ++i)
    chain = g.add(OpKind::kMatMul, {g.add(OpKind::kNeg, {chain}, {}, "c" + std::to_string(i)),
                                    weight(g, "cw" + std::to_string(i), 8, 8, rng)},
                  {}, "cm" + std::to_string(i));
  std::vector<ValueId> outs;
  for (ValueId r : results) outs.push_back(g.add(OpKind::kAdd, {r, r}, {}, g.value(r).name + "_twice"));
  outs.push_back(chain);
  g.set_outputs(outs);

  std::vector<Tensor> inputs = {random_tensor(DType::kF32, {8, 8}, rng)};
  std::vector<Tensor> got[2];
  for (bool overlap : {false, true}) {
    LateCommunicator comm;
    RunOptions o;
    o.threads = 1;
    o.overlap = overlap;
    o.communicator = &comm;
    ExecutablePlan plan = ExecutablePlan::compile(g, o);
    if (overlap) {
      std::string steps = plan.collective_steps();
      EXPECT_EQ(std::count(steps.begin(), steps.end(), '\n'), 8) << "every collective starts and finishes:\n" << steps;
    }
    got[overlap] = plan.run(inputs);
    got[overlap] = plan.run(inputs);
    EXPECT_EQ(comm.changed_inputs, 0) << "a started collective's input changed before its finish";
  }
  for (size_t j = 0; j < got[0].size(); ++j)
    EXPECT_EQ(std::memcmp(got[0][j].data(), got[1][j].data(), static_cast<size_t>(got[0][j].nbytes())), 0)
        << "output " << j;
}

}  // namespace
}  // namespace tessera::runtime
