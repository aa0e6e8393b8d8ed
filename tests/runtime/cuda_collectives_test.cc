// The CUDA backend's collectives. Part 1 runs everywhere: lower_collective
// (runtime/cuda/lowering.h), the pack and unpack copies evaluated on the host
// around an emulated flat-block exchange, against interpret_ranks. Part 2
// runs mesh plans on GPUs over NCCL, one GPU per rank as threads of this
// process, and skips with a message where there are not two GPUs and NCCL.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstring>
#include <random>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "graph/text_form.h"
#include "runtime/communicator.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/lowering.h"
#include "runtime/cuda/nccl_communicator.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using namespace tessera::runtime::cuda;
using testing::random_tensor;

using testing::collective_attrs;

// y = kind(x) over `axis` of `mesh`, on random shapes whose split axes divide.
Graph random_program(OpKind kind, const DeviceMesh& mesh, int axis, std::mt19937& rng) {
  int64_t n = mesh.axes()[static_cast<size_t>(axis)].size;
  std::uniform_int_distribution<int64_t> rank_d(1, 4), dim_d(1, 3);
  int64_t rank = rank_d(rng);
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) shape.push_back(dim_d(rng));
  std::uniform_int_distribution<int64_t> axis_d(0, rank - 1);
  int64_t a = axis_d(rng), b = axis_d(rng);
  Attrs at = collective_attrs(mesh, axis, {});
  if (kind == OpKind::kAllGather) at = collective_attrs(mesh, axis, {{"axis", a}});
  if (kind == OpKind::kReduceScatter || kind == OpKind::kAllToAll) shape[a] *= n;
  if (kind == OpKind::kReduceScatter) at = collective_attrs(mesh, axis, {{"axis", a}});
  if (kind == OpKind::kAllToAll) at = collective_attrs(mesh, axis, {{"split_axis", a}, {"concat_axis", b}});
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, shape});
  g.set_outputs({g.add(kind, {x}, at, "c")});
  return g;
}

std::vector<std::vector<Tensor>> reference(const Graph& g, const DeviceMesh& mesh, const std::vector<Tensor>& in) {
  std::vector<std::vector<RefTensor<double>>> ref_in;
  for (const Tensor& t : in) ref_in.push_back({to_ref<double>(t)});
  std::vector<const Graph*> programs(in.size(), &g);
  std::vector<std::vector<Tensor>> out;
  for (auto& rank_out : interpret_ranks<double>(programs, mesh, ref_in)) out.push_back({from_ref(rank_out[0])});
  return out;
}

// What the device program does, on the host: pack, the flat exchange the
// NCCL call makes (sums in f32), unpack.
std::vector<Tensor> emulate(const Graph& g, const DeviceMesh& mesh, int axis, const std::vector<Tensor>& in) {
  const Node& n = g.node(0);
  std::optional<CollectiveLowering> l = lower_collective(g, n);
  EXPECT_TRUE(l.has_value());
  if (!l) return {};
  const TensorType& y = g.type(n.outputs[0]);
  std::vector<Tensor> src;
  for (const Tensor& t : in) {
    Tensor p = t;
    if (l->pack) copy_on_host(*l->pack, t.data(), p.mutable_data());
    src.push_back(p);
  }
  std::vector<Tensor> out;
  for (int64_t r = 0; r < mesh.num_devices(); ++r) {
    std::vector<int64_t> group = mesh.group(r, axis);
    int64_t me = mesh.coords(r)[static_cast<size_t>(axis)];
    int64_t gs = static_cast<int64_t>(group.size());
    Tensor recv(y.dtype, y.shape);
    auto* o = recv.mutable_data_as<float>();
    for (int64_t k = 0; k < gs; ++k) {
      const float* s = src[static_cast<size_t>(group[static_cast<size_t>(k)])].data_as<float>();
      int64_t c = l->count;
      switch (n.kind) {
        case OpKind::kAllReduce: for (int64_t i = 0; i < c; ++i) o[i] = (k ? o[i] : 0.0f) + s[i]; break;
        case OpKind::kReduceScatter: for (int64_t i = 0; i < c; ++i) o[i] = (k ? o[i] : 0.0f) + s[me * c + i]; break;
        case OpKind::kAllGather: std::memcpy(o + k * c / 4, s, static_cast<size_t>(c)); break;
        default: std::memcpy(o + k * c / 4, s + me * c / 4, static_cast<size_t>(c)); break;  // all-to-all
      }
    }
    Tensor final_out = recv;
    if (l->unpack) copy_on_host(*l->unpack, recv.data(), final_out.mutable_data());
    out.push_back(final_out);
  }
  return out;
}

TEST(CudaCollectiveLowering, PackExchangeUnpackMatchesInterpretRanks) {
  std::mt19937 rng(3);
  struct M {
    const char* mesh;
    int axis;
  };
  for (M m : {M{"tp=2", 0}, M{"tp=3", 0}, M{"dp=2,tp=2", 0}, M{"dp=2,tp=2", 1}})
    for (OpKind kind : {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather, OpKind::kAllToAll})
      for (int i = 0; i < 8; ++i) {
        DeviceMesh mesh = DeviceMesh::parse(m.mesh);
        Graph g = random_program(kind, mesh, m.axis, rng);
        SCOPED_TRACE(std::string(m.mesh) + " axis " + std::to_string(m.axis) + "\n" + print_graph(g));
        std::vector<Tensor> in;
        for (int64_t r = 0; r < mesh.num_devices(); ++r) in.push_back(random_tensor(DType::kF32, g.type(0).shape, rng));
        std::vector<std::vector<Tensor>> want = reference(g, mesh, in);
        std::vector<Tensor> got = emulate(g, mesh, m.axis, in);
        ASSERT_EQ(got.size(), want.size());
        for (size_t r = 0; r < got.size(); ++r)
          for (int64_t k = 0; k < got[r].numel(); ++k)
            ASSERT_NEAR(got[r].get_double(k), want[r][0].get_double(k), 1e-5) << "rank " << r << " at " << k;
      }
}

// HaloExchange rank programs over uneven bands along a random axis (the
// halo table shared, each rank its own band and coordinate), as
// collective_kernels_test's.
std::vector<Graph> halo_programs(const DeviceMesh& mesh, int axis, DType dt, std::mt19937& rng, int trial) {
  int64_t n = mesh.axes()[static_cast<size_t>(axis)].size;
  std::uniform_int_distribution<int64_t> rank_d(1, 4), dim_d(1, 4), halo_d(0, 2);
  int64_t rank = rank_d(rng);
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) shape.push_back(dim_d(rng));
  int64_t a = std::uniform_int_distribution<int64_t>(0, rank - 1)(rng);
  Ints before(static_cast<size_t>(n), 0), after(static_cast<size_t>(n), 0);
  for (int64_t c = 0; c < n; ++c) {
    if (c > 0) before[static_cast<size_t>(c)] = halo_d(rng);
    if (c + 1 < n) after[static_cast<size_t>(c)] = halo_d(rng);
  }
  std::vector<Graph> out;
  for (int64_t r = 0; r < mesh.num_devices(); ++r) {
    int64_t c = mesh.coords(r)[static_cast<size_t>(axis)];
    Shape mine = shape;
    mine[static_cast<size_t>(a)] = 2 + (c + trial) % 2;  // uneven bands, deeper than any halo
    Attrs at = collective_attrs(mesh, axis, {{"axis", a}, {"coordinate", c}});
    at.set("before", before);
    at.set("after", after);
    Graph g;
    ValueId x = g.add_input("x", {dt, mine});
    g.set_outputs({g.add(OpKind::kHaloExchange, {x}, at, "halo")});
    out.push_back(std::move(g));
  }
  return out;
}

// lower_halo's device program on the host: every rank packs, the grouped
// send/recv moves each rank's blocks to its neighbours' receive buffers
// (the previous rank's block for me is the end of its send buffer, the
// next rank's the start of its own), every rank unpacks. Bit for bit the
// reference interpreter's HaloExchange, on many shapes, axes, halos, dtypes.
TEST(CudaCollectiveLowering, HaloPackSendRecvUnpackMatchesInterpretRanks) {
  std::mt19937 rng(43);
  struct M {
    const char* mesh;
    int axis;
  };
  int checked = 0;
  for (M m : {M{"tp=2", 0}, M{"tp=3", 0}, M{"tp=4", 0}, M{"dp=2,tp=2", 1}, M{"dp=3,tp=2", 0}})
    for (DType dt : {DType::kF32, DType::kF16, DType::kI64, DType::kU8})
      for (int trial = 0; trial < 6; ++trial) {
        DeviceMesh mesh = DeviceMesh::parse(m.mesh);
        std::vector<Graph> programs = halo_programs(mesh, m.axis, dt, rng, trial);
        SCOPED_TRACE(std::string(m.mesh) + " axis " + std::to_string(m.axis) + "\n" + print_graph(programs[0]));
        size_t nr = programs.size();
        std::vector<Tensor> in;
        std::vector<std::vector<RefTensor<double>>> ref_in(nr);
        std::vector<const Graph*> ptrs;
        for (size_t r = 0; r < nr; ++r) {
          in.push_back(random_tensor(dt, programs[r].type(0).shape, rng));
          ref_in[r].push_back(to_ref<double>(in[r]));
          ptrs.push_back(&programs[r]);
        }
        auto want = interpret_ranks<double>(ptrs, mesh, ref_in);
        std::vector<HaloLowering> l;
        std::vector<std::vector<uint8_t>> send(nr);
        for (size_t r = 0; r < nr; ++r) {
          std::optional<HaloLowering> lr = lower_halo(programs[r], programs[r].node(0));
          ASSERT_TRUE(lr.has_value());
          l.push_back(*lr);
          send[r].assign(static_cast<size_t>(lr->send_prev + lr->send_next), 0xAB);
          EXPECT_EQ(lr->send_elems * static_cast<int64_t>(dtype_size(dt)), lr->send_prev + lr->send_next);
          for (const CopyPart& p : lr->pack) copy_on_host(p.desc, in[r].data(), send[r].data());
        }
        for (size_t r = 0; r < nr; ++r) {
          std::vector<int64_t> group = mesh.group(static_cast<int64_t>(r), m.axis);
          int64_t me = mesh.coords(static_cast<int64_t>(r))[static_cast<size_t>(m.axis)];
          std::vector<uint8_t> recv(static_cast<size_t>(l[r].recv_prev + l[r].recv_next), 0xCD);
          if (l[r].recv_prev > 0) {
            auto prev = static_cast<size_t>(group[static_cast<size_t>(me - 1)]);
            ASSERT_EQ(l[prev].send_next, l[r].recv_prev);  // the two sides agree on the block
            std::memcpy(recv.data(), send[prev].data() + l[prev].send_prev, static_cast<size_t>(l[r].recv_prev));
          }
          if (l[r].recv_next > 0) {
            auto next = static_cast<size_t>(group[static_cast<size_t>(me + 1)]);
            ASSERT_EQ(l[next].send_prev, l[r].recv_next);
            std::memcpy(recv.data() + l[r].recv_prev, send[next].data(), static_cast<size_t>(l[r].recv_next));
          }
          Tensor out(dt, programs[r].type(programs[r].outputs()[0]).shape);
          std::vector<const void*> reads = {in[r].data(), recv.data()};
          for (const CopyPart& p : l[r].unpack) copy_on_host(p.desc, reads[p.src], out.mutable_data());
          Tensor w = from_ref(want[r][0]);
          ASSERT_EQ(out.type(), w.type());
          // from_ref of f16 rounds the same values back: the moves are exact.
          EXPECT_EQ(std::memcmp(out.data(), w.data(), static_cast<size_t>(w.nbytes())), 0) << "rank " << r;
          ++checked;
        }
      }
  EXPECT_GT(checked, 300);
  Graph g;
  g.add_input("x", {DType::kF32, {2, 2}});
  g.set_outputs({g.add(OpKind::kRelu, {0}, {}, "r")});
  EXPECT_FALSE(lower_halo(g, g.node(0)));
}

TEST(CudaCollectiveLowering, HalfSumsWidenAndBoolSumsHaveNoForm) {
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  for (DType dt : {DType::kF16, DType::kBF16, DType::kBool}) {
    Graph g;
    ValueId x = g.add_input("x", {dt, {4}});
    g.set_outputs({g.add(OpKind::kAllReduce, {x}, collective_attrs(mesh, 0, {}), "c")});
    std::optional<CollectiveLowering> l = lower_collective(g, g.node(0));
    if (dt == DType::kBool) {
      EXPECT_FALSE(l.has_value());
      continue;
    }
    ASSERT_TRUE(l.has_value());
    EXPECT_TRUE(l->widen);
    EXPECT_EQ(l->count, 4);
  }
}

// A plan with collectives on the CUDA backend needs NCCL's communicator.
TEST(CudaCollectiveLowering, CudaPlanWithInProcessCommunicatorIsUsageError) {
  InProcessWorld world(DeviceMesh::parse("tp=2"));
  std::mt19937 rng(1);
  Graph g = random_program(OpKind::kAllReduce, world.mesh(), 0, rng);
  RunOptions o;
  o.backend = Backend::kCuda;
  o.communicator = world.communicator(0);
  try {
    ExecutablePlan::compile(g, o);
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    // Without a GPU, compile_cuda stops before it looks at the collectives.
    if (cuda_unavailable_reason().empty()) {
      EXPECT_NE(std::string(e.what()).find("NCCL"), std::string::npos) << e.what();
    }
  }
}

// Part 2: GPUs. Named apart from the Cuda* tests, which bench/gpu_check.sh
// requires to run on a GPU machine: this one needs two GPUs.
std::string why_no_gpus() {
  if (std::string why = nccl_unavailable_reason(); !why.empty()) return why;
  if (int n = cuda_device_count(); n < 2)
    return "NCCL ranks need a GPU each and " + std::to_string(n) + " was found (two ranks on one GPU: NCCL refuses)";
  return "";
}

// NCCL is opened when a GPU plan first needs it, never at load time: a
// process that also uses PyTorch must get torch's own NCCL (the first one
// loaded is everyone's). This binary links tessera_runtime as the CLI and
// the Python module do; every TEST is its own process.
TEST(NcclOnDemand, NotLoadedUntilAGpuPlanAsks) {
  EXPECT_EQ(dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD), nullptr) << "libnccl was loaded with the process";
  if (nccl_unavailable_reason().empty()) {  // a GPU and NCCL: the first use loads it
    nccl_unique_id();
    EXPECT_NE(dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD), nullptr);
  }
}

TEST(NcclMultiGpu, MeshPlansOverNcclMatchInterpretRanks) {
  if (std::string why = why_no_gpus(); !why.empty()) GTEST_SKIP() << why;
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  std::mt19937 rng(9);
  for (OpKind kind : {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather, OpKind::kAllToAll})
    for (int i = 0; i < 4; ++i) {
      Graph g = random_program(kind, mesh, 0, rng);
      SCOPED_TRACE(print_graph(g));
      std::vector<Tensor> in;
      for (int r = 0; r < 2; ++r) in.push_back(random_tensor(DType::kF32, g.type(0).shape, rng));
      std::vector<std::vector<Tensor>> want = reference(g, mesh, in);
      NcclId id = nccl_unique_id();
      InProcessWorld world(mesh);
      std::vector<std::vector<Tensor>> got(2);
      world.run([&](int64_t r) {
        std::unique_ptr<Communicator> comm = make_nccl_communicator(mesh, r, static_cast<int>(r), id);
        RunOptions o;
        o.backend = Backend::kCuda;
        o.communicator = comm.get();
        ExecutablePlan plan = ExecutablePlan::compile(g, o);
        got[r] = plan.run({in[r]});
        got[r] = plan.run({in[r]});
      });
      for (size_t r = 0; r < 2; ++r)
        for (int64_t k = 0; k < got[r][0].numel(); ++k)
          ASSERT_NEAR(got[r][0].get_double(k), want[r][0].get_double(k), 1e-5) << "rank " << r << " at " << k;
    }
}

// HaloExchange rank programs on two GPUs: pack, one NCCL group of
// send/recv, unpack (DeviceProgram::add_halo), against interpret_ranks.
TEST(NcclMultiGpu, HaloExchangeOverNcclMatchesInterpretRanks) {
  if (std::string why = why_no_gpus(); !why.empty()) GTEST_SKIP() << why;
  DeviceMesh mesh = DeviceMesh::parse("tp=2");
  std::mt19937 rng(11);
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<Graph> programs = halo_programs(mesh, 0, DType::kF32, rng, trial);
    SCOPED_TRACE(print_graph(programs[0]));
    std::vector<Tensor> in;
    std::vector<std::vector<RefTensor<double>>> ref_in(2);
    std::vector<const Graph*> ptrs;
    for (size_t r = 0; r < 2; ++r) {
      in.push_back(random_tensor(DType::kF32, programs[r].type(0).shape, rng));
      ref_in[r].push_back(to_ref<double>(in[r]));
      ptrs.push_back(&programs[r]);
    }
    auto want = interpret_ranks<double>(ptrs, mesh, ref_in);
    NcclId id = nccl_unique_id();
    InProcessWorld world(mesh);
    std::vector<std::vector<Tensor>> got(2);
    world.run([&](int64_t r) {
      std::unique_ptr<Communicator> comm = make_nccl_communicator(mesh, r, static_cast<int>(r), id);
      RunOptions o;
      o.backend = Backend::kCuda;
      o.communicator = comm.get();
      ExecutablePlan plan = ExecutablePlan::compile(programs[static_cast<size_t>(r)], o);
      got[r] = plan.run({in[r]});
      got[r] = plan.run({in[r]});
    });
    for (size_t r = 0; r < 2; ++r) {
      Tensor w = from_ref(want[r][0]);
      ASSERT_EQ(got[r][0].type(), w.type());
      EXPECT_EQ(std::memcmp(got[r][0].data(), w.data(), static_cast<size_t>(w.nbytes())), 0) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace tessera::runtime
