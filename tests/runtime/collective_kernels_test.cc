// The collectives as runtime kernels (runtime/cpu/collective_kernels.cc):
// every rank's plan runs on its own thread of an InProcessWorld and its
// outputs must be interpret_ranks' (the reference interpreter in lockstep),
// on random shapes and axes, 2, 3 and 4 ranks and a 2x2 mesh, every dtype a
// collective takes, on the CPU and the reference backends. Then the errors a
// graph with collectives gives at compile time.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "graph/text_form.h"
#include "runtime/communicator.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using testing::attrs;

Tensor random_of(DType dt, const Shape& shape, std::mt19937& rng) {
  Tensor t(dt, shape);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> i(-1000, 1000);
  for (int64_t k = 0; k < t.numel(); ++k) {
    if (is_float(dt)) t.set_double(k, u(rng));
    else if (dt == DType::kBool) t.set_int(k, i(rng) > 0);
    else if (dt == DType::kU8) t.set_int(k, i(rng) & 0x7f);
    else if (dt == DType::kI8) t.set_int(k, i(rng) % 100);
    else t.set_int(k, i(rng));
  }
  return t;
}

// How closely a result of dtype dt must match the reference (sums of f16
// and bf16 accumulate in f32 here and in double there, then round).
double tolerance(DType dt) {
  switch (dt) {
    case DType::kF32: return 1e-6;
    case DType::kF64: return 1e-12;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1e-2;
    default: return 0;
  }
}

struct Case {
  std::vector<Graph> graphs;  // per rank (the same program: one op)
  std::vector<std::vector<Tensor>> inputs;
};

// Runs every rank's program compiled for `backend` as threads, and compares
// with interpret_ranks on the same inputs.
void expect_ranks_match(const Case& c, const DeviceMesh& mesh, Backend backend) {
  size_t n = c.graphs.size();
  std::vector<const Graph*> programs;
  std::vector<std::vector<RefTensor<double>>> ref_in(n);
  for (size_t r = 0; r < n; ++r) {
    programs.push_back(&c.graphs[r]);
    for (const Tensor& t : c.inputs[r]) ref_in[r].push_back(to_ref<double>(t));
  }
  auto want = interpret_ranks<double>(programs, mesh, ref_in);
  InProcessWorld world(mesh);
  std::vector<std::vector<Tensor>> got(n);
  world.run([&](int64_t r) {
    RunOptions o;
    o.backend = backend;
    o.threads = 1;
    o.communicator = world.communicator(r);
    ExecutablePlan plan = ExecutablePlan::compile(c.graphs[r], o);
    got[r] = plan.run(c.inputs[r]);
    got[r] = plan.run(c.inputs[r]);  // again, over the same arena
  });
  for (size_t r = 0; r < n; ++r) {
    ASSERT_EQ(got[r].size(), want[r].size());
    for (size_t j = 0; j < got[r].size(); ++j) {
      Tensor w = from_ref(want[r][j]);
      ASSERT_EQ(got[r][j].type(), w.type()) << "rank " << r << " output " << j;
      double tol = tolerance(w.dtype());
      int64_t bad = 0;
      for (int64_t k = 0; k < w.numel(); ++k) {
        double a = got[r][j].get_double(k), b = w.get_double(k);
        if (!(std::fabs(a - b) <= tol * (std::fabs(b) + 1.0)) && bad++ == 0)
          ADD_FAILURE() << "rank " << r << " output " << j << " at " << k << ": " << a << " vs " << b;
      }
      EXPECT_EQ(bad, 0) << "rank " << r << " output " << j << " of " << w.numel();
    }
  }
}

using testing::collective_attrs;

// One random case of `kind` on `mesh` over `axis`: shape rank 1..4 with the
// axes the op splits divisible by the group; every rank gets its own data.
Case random_case(OpKind kind, DType dt, const DeviceMesh& mesh, int axis, std::mt19937& rng) {
  int64_t n = mesh.axes()[static_cast<size_t>(axis)].size;
  std::uniform_int_distribution<int64_t> rank_d(1, 4), dim_d(1, 4);
  int64_t rank = rank_d(rng);
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) shape.push_back(dim_d(rng));
  std::uniform_int_distribution<int64_t> axis_d(0, rank - 1);
  int64_t a = axis_d(rng), b = axis_d(rng);
  Attrs at;
  switch (kind) {
    case OpKind::kAllReduce: at = collective_attrs(mesh, axis, {}); break;
    case OpKind::kAllGather: at = collective_attrs(mesh, axis, {{"axis", a - (a % 2) * rank}}); break;  // some negative
    case OpKind::kReduceScatter:
      shape[a] *= n;
      at = collective_attrs(mesh, axis, {{"axis", a}});
      break;
    default:
      shape[a] *= n;
      at = collective_attrs(mesh, axis, {{"split_axis", a}, {"concat_axis", b}});
  }
  Case c;
  for (int64_t r = 0; r < mesh.num_devices(); ++r) {
    Graph g;
    ValueId x = g.add_input("x", {dt, shape});
    g.set_outputs({g.add(kind, {x}, at, "c")});
    c.graphs.push_back(std::move(g));
    c.inputs.push_back({random_of(dt, shape, rng)});
  }
  return c;
}

struct MeshAxis {
  const char* mesh;
  int axis;
};
constexpr MeshAxis kMeshes[] = {{"tp=2", 0}, {"tp=3", 0}, {"tp=4", 0}, {"dp=2,tp=2", 0}, {"dp=2,tp=2", 1}};

void random_cases(OpKind kind, const std::vector<DType>& dtypes, int per_mesh) {
  std::mt19937 rng(static_cast<uint32_t>(kind) * 7919u + 1);
  for (const MeshAxis& m : kMeshes) {
    DeviceMesh mesh = DeviceMesh::parse(m.mesh);
    for (DType dt : dtypes)
      for (int i = 0; i < per_mesh; ++i) {
        Case c = random_case(kind, dt, mesh, m.axis, rng);
        const Graph& g = c.graphs[0];
        SCOPED_TRACE(std::string(m.mesh) + " axis " + std::to_string(m.axis) + "\n" + print_graph(g));
        expect_ranks_match(c, mesh, i % 3 == 2 ? Backend::kReference : Backend::kCpu);
      }
  }
}

const std::vector<DType> kSummed = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64, DType::kI32};
const std::vector<DType> kMoved = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64,
                                   DType::kI32, DType::kI8,  DType::kU8,  DType::kBool};

TEST(CollectiveKernelTest, AllReduceMatchesInterpretRanks) { random_cases(OpKind::kAllReduce, kSummed, 3); }
TEST(CollectiveKernelTest, ReduceScatterMatchesInterpretRanks) { random_cases(OpKind::kReduceScatter, kSummed, 6); }
TEST(CollectiveKernelTest, AllGatherMatchesInterpretRanks) { random_cases(OpKind::kAllGather, kMoved, 4); }
TEST(CollectiveKernelTest, AllToAllMatchesInterpretRanks) { random_cases(OpKind::kAllToAll, kMoved, 6); }

// HaloExchange over uneven bands along a random axis: each rank's program
// has its own band's shape and coordinate, the halo table is shared; the
// halo of one rank may differ from its neighbour's (a strided window).
TEST(CollectiveKernelTest, HaloExchangeMatchesInterpretRanks) {
  std::mt19937 rng(43);
  for (const MeshAxis& m : kMeshes) {
    DeviceMesh mesh = DeviceMesh::parse(m.mesh);
    int64_t n = mesh.axes()[static_cast<size_t>(m.axis)].size;
    for (DType dt : {DType::kF32, DType::kF16, DType::kI64, DType::kU8})
      for (int trial = 0; trial < 3; ++trial) {
        std::uniform_int_distribution<int64_t> rank_d(1, 4), dim_d(1, 4), halo_d(0, 2);
        int64_t rank = rank_d(rng);
        Shape shape;
        for (int64_t d = 0; d < rank; ++d) shape.push_back(dim_d(rng));
        int64_t axis = std::uniform_int_distribution<int64_t>(0, rank - 1)(rng);
        Ints before(static_cast<size_t>(n), 0), after(static_cast<size_t>(n), 0);
        for (int64_t c = 0; c < n; ++c) {
          if (c > 0) before[static_cast<size_t>(c)] = halo_d(rng);
          if (c + 1 < n) after[static_cast<size_t>(c)] = halo_d(rng);
        }
        Case cs;
        for (int64_t r = 0; r < mesh.num_devices(); ++r) {
          int64_t c = mesh.coords(r)[static_cast<size_t>(m.axis)];
          Shape mine = shape;
          mine[static_cast<size_t>(axis)] = 2 + (c + trial) % 2;  // uneven bands, deeper than any halo
          Attrs at = collective_attrs(mesh, m.axis, {{"axis", axis}, {"coordinate", c}});
          at.set("before", before);
          at.set("after", after);
          Graph g;
          ValueId x = g.add_input("x", {dt, mine});
          g.set_outputs({g.add(OpKind::kHaloExchange, {x}, at, "halo")});
          cs.graphs.push_back(std::move(g));
          cs.inputs.push_back({random_of(dt, mine, rng)});
        }
        SCOPED_TRACE(std::string(m.mesh) + " axis " + std::to_string(m.axis) + "\n" + print_graph(cs.graphs[0]));
        expect_ranks_match(cs, mesh, trial == 2 ? Backend::kReference : Backend::kCpu);
      }
  }
}

// Collectives between other kernels, over both axes of a 2x2 mesh: blocked
// and fused neighbours, intermediates in the arena, a collective's result
// read by two consumers.
TEST(CollectiveKernelTest, ChainOnTwoAxesMatchesInterpretRanks) {
  DeviceMesh mesh = DeviceMesh::parse("dp=2,tp=2");
  std::mt19937 rng(5);
  Case c;
  for (int64_t r = 0; r < 4; ++r) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {4, 6}});
    ValueId w = g.add_constant("w", random_of(DType::kF32, {6, 8}, rng));  // each rank its own block
    ValueId y = g.add(OpKind::kMatMul, {x, w}, {}, "mm");
    ValueId ar = g.add(OpKind::kAllReduce, {y}, collective_attrs(mesh, 1, {}), "ar");
    ValueId relu = g.add(OpKind::kRelu, {ar}, {}, "relu");
    ValueId rs = g.add(OpKind::kReduceScatter, {relu}, collective_attrs(mesh, 0, {{"axis", 1}}), "rs");
    ValueId a2a = g.add(OpKind::kAllToAll, {rs}, collective_attrs(mesh, 1, {{"split_axis", 0}, {"concat_axis", 1}}), "a2a");
    ValueId ag = g.add(OpKind::kAllGather, {a2a}, collective_attrs(mesh, 0, {{"axis", 0}}), "ag");
    ValueId sum = g.add(OpKind::kAdd, {ar, ar}, {}, "twice");
    g.set_outputs({ag, sum});
    c.graphs.push_back(std::move(g));
    c.inputs.push_back({random_of(DType::kF32, {4, 6}, rng)});
  }
  expect_ranks_match(c, mesh, Backend::kCpu);
}

Graph one_collective(OpKind kind, const std::string& axis, int64_t group, DType dt = DType::kF32) {
  Graph g;
  ValueId x = g.add_input("x", {dt, {4, 2}});
  Attrs a = attrs({{"mesh_axis", axis}, {"group_size", group}});
  if (kind != OpKind::kAllReduce) a.set("axis", int64_t{0});
  ValueId y = g.add(OpKind::kRelu, {x}, {}, "relu");
  g.set_outputs({g.add(kind, {y}, a, "the_collective")});
  return g;
}

std::string compile_error(const Graph& g, const RunOptions& o, ErrorKind want) {
  try {
    ExecutablePlan::compile(g, o);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), want) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "compiled";
  return "";
}

TEST(CollectiveKernelTest, WithoutCommunicatorIsUsageErrorNamingTheNode) {
  for (Backend b : {Backend::kCpu, Backend::kReference}) {
    RunOptions o;
    o.backend = b;
    std::string msg = compile_error(one_collective(OpKind::kAllGather, "tp", 2), o, ErrorKind::kUsage);
    EXPECT_NE(msg.find("the_collective"), std::string::npos) << msg;
    EXPECT_NE(msg.find("AllGather"), std::string::npos) << msg;
    EXPECT_NE(msg.find("communicator"), std::string::npos) << msg;
  }
}

TEST(CollectiveKernelTest, AxisOrGroupSizeNotTheCommunicatorsIsUsageError) {
  InProcessWorld world(DeviceMesh::parse("dp=2,tp=2"));
  RunOptions o;
  o.communicator = world.communicator(0);
  std::string msg = compile_error(one_collective(OpKind::kAllReduce, "pp", 2), o, ErrorKind::kUsage);
  EXPECT_NE(msg.find("'pp'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the_collective"), std::string::npos) << msg;
  msg = compile_error(one_collective(OpKind::kReduceScatter, "tp", 4), o, ErrorKind::kUsage);
  EXPECT_NE(msg.find("group_size 4"), std::string::npos) << msg;
}

TEST(CollectiveKernelTest, SumOfBoolsIsUnsupported) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  RunOptions o;
  o.communicator = world.communicator(1);
  Graph g;
  ValueId x = g.add_input("x", {DType::kBool, {3}});
  g.set_outputs({g.add(OpKind::kAllReduce, {x}, attrs({{"mesh_axis", std::string("tp")}, {"group_size", int64_t{2}}}),
                       "sum_bools")});
  std::string msg = compile_error(g, o, ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("sum_bools"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::runtime
