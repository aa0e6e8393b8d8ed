// api::run_mesh: the ranks of a mesh plan (a folder's rank<i>.onnx, or a
// Plan's rank programs in memory) as threads of this process (InProcessWorld,
// or NCCL between threads for the CUDA backend) or, under mpirun, this
// process's rank (MpiCommunicator, or NCCL bootstrapped over MPI). Every rank
// compiles its own program with its communicator and runs it on the global
// inputs.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <atomic>
#include <mutex>
#include <thread>

#include "graph/error.h"
#include "graph/strategy.h"
#include "mutator/plan_files.h"
#include "onnx_import/onnx_import.h"
#include "runtime/communicator.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/mpi_communicator.h"
#include "tools/api/mesh_detail.h"
#include "tools/api/run_detail.h"
#include "tools/api/tessera.h"

namespace tessera::api {

namespace fs = std::filesystem;
using namespace detail;

MeshPlan read_mesh_plan(const std::string& dir) {
  if (!is_sharded_plan_folder(dir))
    TESSERA_THROW(ErrorKind::kUsage, dir << " is not a plan folder for a device mesh (plan.json and rank<i>.onnx)");
  mutator::check_plan_folder(dir);
  fs::path path = fs::path(dir) / "plan.json";
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("mesh") || !j["mesh"].is_string() || !j.contains("ranks") ||
      !j["ranks"].is_array())
    throw Error(ErrorKind::kParse, "not a mesh plan: no \"mesh\" and \"ranks\"", {path.string(), "", ""});
  MeshPlan p;
  p.dir = dir;
  p.mesh = j["mesh"].get<std::string>();
  p.ranks = static_cast<int64_t>(j["ranks"].size());
  int64_t devices = 0;
  try {
    devices = DeviceMesh::parse(p.mesh).num_devices();
  } catch (const Error& e) {
    throw Error(ErrorKind::kParse, "bad mesh: " + e.message(), {path.string(), "", ""});
  }
  if (devices != p.ranks)
    throw Error(ErrorKind::kParse,
                "mesh " + p.mesh + " has " + std::to_string(devices) + " ranks but the plan lists " +
                    std::to_string(p.ranks),
                {path.string(), "", ""});
  if (j.contains("carry") && j["carry"].is_array())
    for (const nlohmann::json& c : j["carry"]) {
      if (!c.is_object() || !c.contains("output") || !c.contains("input") || !c["output"].is_string() ||
          !c["input"].is_string())
        throw Error(ErrorKind::kParse, "carry: expected {\"output\": NAME, \"input\": NAME} pairs", {path.string(), "", ""});
      p.carry.push_back({c["output"].get<std::string>(), c["input"].get<std::string>()});
    }
  // The boundary (plans written before it had one cross whole).
  if (j.contains("sharding") && j["sharding"].is_object())
    for (auto [key, into] : {std::pair{"inputs", &p.input_shardings}, std::pair{"outputs", &p.output_shardings}})
      if (j["sharding"].contains(key) && j["sharding"][key].is_object())
        for (auto it = j["sharding"][key].begin(); it != j["sharding"][key].end(); ++it) {
          if (!it.value().is_string())
            throw Error(ErrorKind::kParse, std::string("sharding.") + key + "." + it.key() + " is not a sharding",
                        {path.string(), "", ""});
          (*into)[it.key()] = it.value().get<std::string>();
        }
  return p;
}

Graph load_rank(const MeshPlan& plan, int64_t rank, const LoadOptions& options) {
  ImportOptions import;
  import.input_shapes = options.input_shapes;
  return import_onnx_file((fs::path(plan.dir) / mutator::rank_file(rank)).string(), import);
}

bool launched_by_mpi() { return runtime::MpiSession::launched(); }

namespace detail {

using InputsFn = std::function<std::vector<Tensor>(const Graph&)>;

Sharding boundary_sharding(const std::map<std::string, std::string>& listed, const std::string& name,
                           const DeviceMesh& mesh, const std::string& plan_name) {
  auto it = listed.find(name);
  if (it == listed.end()) return Sharding::replicated(mesh);
  try {
    return Sharding::parse(it->second);
  } catch (const Error& e) {
    TESSERA_THROW(ErrorKind::kParse, plan_name << ": the boundary sharding of '" << name << "': " << e.what());
  }
}

Boundary boundary_of(const RankSource& plan, const DeviceMesh& mesh, const Graph& rank0) {
  Boundary b;
  b.mesh = mesh;
  for (ValueId v : rank0.inputs()) {
    const std::string& name = rank0.value(v).name;
    b.in.push_back(boundary_sharding(plan.input_shardings, name, mesh, plan.plan_name));
    TensorType t = rank0.type(v);
    t.shape = global_shape(b.in.back(), mesh, t.shape);
    b.global.add_input(name, t);
  }
  for (ValueId v : rank0.outputs()) {
    const std::string& name = rank0.value(v).name;
    b.out.push_back(boundary_sharding(plan.output_shardings, name, mesh, plan.plan_name));
    b.out_names.push_back(name);
    b.out_shapes.push_back(global_shape(b.out.back(), mesh, rank0.type(v).shape));
  }
  return b;
}

// Threads per rank: the flag, or the cores shared among the ranks that run
// on this machine (each rank's plan would otherwise run one thread per core,
// ranks times more threads than cores).
int threads_per_rank(const RunConfig& config, int64_t ranks_here) {
  if (config.threads > 0) return config.threads;
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / static_cast<int>(std::max<int64_t>(1, ranks_here)));
}

// ms per run in the plan's collective kernels (profile on).
double collective_ms(const runtime::ExecutablePlan& plan) {
  double ms = 0;
  for (const runtime::KernelProfile& k : plan.profile().kernels)
    if (k.impl == "collective" && k.calls > 0) ms += k.total_ms / static_cast<double>(k.calls);
  return ms;
}

// ms per run rank 0 waits for its halos (profile on): an overlapped
// exchange's wait after its window op's interior (KernelProfile::wait_ms), an
// unoverlapped one's whole kernel; and how many exchanges of each kind.
void halo_wait(const runtime::ExecutablePlan& plan, MeshRunResult& m) {
  for (const runtime::KernelProfile& k : plan.profile().kernels) {
    if (k.calls == 0) continue;
    bool overlapped = k.op.rfind("HaloExchange+", 0) == 0;
    if (!overlapped && k.op != "HaloExchange") continue;
    ++m.halo_exchanges;
    m.halo_overlapped += overlapped;
    m.halo_wait_ms += (overlapped ? k.wait_ms : k.total_ms) / static_cast<double>(k.calls);
  }
}

// Rank 0's collectives and those that start before other kernels run.
void count_collectives(const runtime::ExecutablePlan& plan, MeshRunResult& m) {
  std::istringstream steps(plan.collective_steps());
  for (std::string line; std::getline(steps, line);) {
    bool started = line.rfind("start ", 0) == 0;
    m.collectives += started || line.rfind("run ", 0) == 0;
    m.overlapped += started;
  }
}

// NCCL puts one rank on each GPU (it refuses two ranks on one device).
void require_nccl(const runtime::RunOptions& options, int64_t ranks_here) {
  if (options.backend != runtime::Backend::kCuda) return;
  if (std::string why = runtime::nccl_unavailable_reason(); !why.empty())
    TESSERA_THROW(ErrorKind::kUsage, "the CUDA backend runs a mesh plan's collectives over NCCL: " << why);
  if (int gpus = runtime::cuda_device_count(); gpus < ranks_here)
    TESSERA_THROW(ErrorKind::kUsage, "NCCL needs one GPU per rank: " << ranks_here << " ranks on this machine and "
                                                                     << gpus << " GPU" << (gpus == 1 ? "" : "s"));
}

std::atomic<int64_t> rank_compilations{0};

}  // namespace detail

namespace detail {

void compile_threads(MeshExecutable::State& st, const RankSource& plan) {
  st.options = detail::run_options(st.config);
  st.options.threads = threads_per_rank(st.config, plan.ranks);
  require_nccl(st.options, plan.ranks);
  std::vector<Graph> graphs;
  for (int64_t r = 0; r < plan.ranks; ++r) graphs.push_back(plan.load(r));
  for (int64_t r = 1; r < plan.ranks; ++r) {
    const Graph& g = graphs[static_cast<size_t>(r)];
    bool same = g.inputs().size() == graphs[0].inputs().size();
    for (size_t i = 0; same && i < g.inputs().size(); ++i) same = g.type(g.inputs()[i]) == graphs[0].type(graphs[0].inputs()[i]);
    if (!same)
      throw Error(ErrorKind::kInvalidGraph, "its inputs are not rank0.onnx's (every rank takes the global inputs)",
                  {plan.where(r), "", ""});
  }
  st.boundary = boundary_of(plan, st.mesh, graphs[0]);
  std::string sig = runtime::collective_signature(graphs[0]);
  for (int64_t r = 1; r < plan.ranks; ++r)
    if (std::string d = runtime::signature_difference(runtime::collective_signature(graphs[static_cast<size_t>(r)]), sig);
        !d.empty())
      throw Error(ErrorKind::kInvalidGraph, "its collectives are not rank0.onnx's, so the ranks would wait for each other: " + d,
                  {plan.where(r), "", ""});
  bool cuda = st.options.backend == runtime::Backend::kCuda;
  runtime::NcclId id;
  if (cuda) id = runtime::nccl_unique_id();
  st.world = std::make_unique<runtime::InProcessWorld>(st.mesh);
  st.nccl.resize(static_cast<size_t>(plan.ranks));
  st.plans.resize(static_cast<size_t>(plan.ranks));
  st.world->run([&](int64_t r) {
    runtime::RunOptions o = st.options;
    auto k = static_cast<size_t>(r);
    if (cuda) st.nccl[k] = runtime::make_nccl_communicator(st.mesh, r, static_cast<int>(r % runtime::cuda_device_count()), id);
    o.communicator = cuda ? st.nccl[k].get() : st.world->communicator(r);
    st.plans[k].emplace(runtime::ExecutablePlan::compile(std::move(graphs[k]), o));
    rank_compilations.fetch_add(1);
  });
}

// Every rank on its own inputs; rank 0's result, and every rank's outputs.
MeshRunResult run_rank_threads(MeshExecutable::State& st, const std::vector<std::vector<Tensor>>& per_rank,
                               const RunConfig& config, std::vector<std::vector<Tensor>>& outputs) {
  std::lock_guard<std::mutex> lock(st.mutex);
  TESSERA_CHECK(per_rank.size() == st.plans.size(), per_rank.size() << " input sets for " << st.plans.size() << " ranks");
  std::vector<RunResult> results(st.plans.size());
  double comm_ms = 0;
  MeshRunResult m;
  st.world->run([&](int64_t r) {
    runtime::ExecutablePlan& p = *st.plans[static_cast<size_t>(r)];
    results[static_cast<size_t>(r)] = detail::run_compiled(p, per_rank[static_cast<size_t>(r)], config);
    if (r == 0 && config.profile) comm_ms = collective_ms(p);
    if (r == 0 && config.profile) halo_wait(p, m);
    if (r == 0) count_collectives(p, m);
  });
  outputs.clear();
  for (RunResult& r : results) outputs.push_back(std::move(r.outputs));
  static_cast<RunResult&>(m) = std::move(results[0]);
  m.outputs = outputs[0];
  m.threads_per_rank = st.options.threads;
  m.collective_ms = comm_ms;
  m.output_names = st.boundary.out_names;
  return m;
}

// Global inputs scattered to the ranks' blocks, sharded outputs assembled.
MeshRunResult run_compiled_threads(MeshExecutable::State& st, const std::vector<Tensor>& inputs,
                                   const RunConfig& config) {
  const Boundary& b = st.boundary;
  std::vector<std::vector<Tensor>> per_rank, outs;
  for (int64_t r = 0; r < static_cast<int64_t>(st.plans.size()); ++r) per_rank.push_back(b.scatter(inputs, r));
  MeshRunResult m = run_rank_threads(st, per_rank, config, outs);
  for (size_t k = 0; k < b.out.size(); ++k) {
    if (!b.sharded_output(k)) continue;
    std::vector<Tensor> blocks;
    for (const std::vector<Tensor>& o : outs) blocks.push_back(o[k]);
    m.outputs[k] = unshard(blocks, b.out[k], b.mesh, b.out_shapes[k]);
  }
  return m;
}

// Every rank of the plan as a thread of this process, compiled for this run.
MeshRunResult run_threads(const RankSource& plan, const DeviceMesh& mesh, const InputsFn& inputs_of,
                          const RunConfig& config) {
  MeshExecutable::State st;
  st.mesh = mesh;
  st.config = config;
  compile_threads(st, plan);
  return run_compiled_threads(st, inputs_of(st.boundary.global), config);
}

// Under mpirun: every rank throws when one failed (Failure from
// MpiSession::first_failure), the failed one with its own error.
void agree(const runtime::MpiSession& session, const std::optional<Error>& mine) {
  runtime::MpiSession::Failure f =
      session.first_failure(mine.has_value(), mine ? static_cast<int>(mine->kind()) : 0, mine ? mine->what() : "");
  if (f.rank < 0) return;
  std::string who = "rank " + std::to_string(session.rank()) + ": ";
  if (f.rank == session.rank()) throw Error(mine->kind(), who + mine->what());
  throw Error(static_cast<ErrorKind>(f.code), who + "stopped: rank " + std::to_string(f.rank) + " failed: " + f.message);
}

template <class F>
std::optional<Error> attempt(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    return Error(ErrorKind::kInternal, e.what());
  }
  return std::nullopt;
}

// A rank that fails once the ranks run cannot tell its peers, which wait in
// a collective: it says why and ends the job.
[[noreturn]] void fail_job(int64_t rank, const std::string& why) {
  std::fprintf(stderr, "tessera: error: rank %lld: %s\n", static_cast<long long>(rank), why.c_str());
  std::fflush(stderr);
  runtime::MpiSession::abort(1);
}

// The global tensor from every rank's block of it, on every rank: an
// all-gather over each mesh axis, the last first, leaves every rank's block
// in rank order (CPU ranks: the MPI communicator).
Tensor gather_pairs(runtime::Communicator& comm, const Tensor& mine, const DeviceMesh& mesh) {
  std::vector<uint8_t> have(mine.data(), mine.data() + mine.nbytes());
  for (size_t a = mesh.axes().size(); a-- > 0;) {
    std::vector<uint8_t> more(have.size() * static_cast<size_t>(mesh.axes()[a].size));
    comm.all_gather(static_cast<int>(a), have.data(), more.data(), static_cast<int64_t>(have.size()));
    have = std::move(more);
  }
  auto n = static_cast<int64_t>(have.size());
  return Tensor::from_bytes(DType::kU8, {n}, std::move(have));
}

Tensor gather_blocks(runtime::Communicator& comm, const Tensor& mine, const Sharding& s, const DeviceMesh& mesh,
                     const Shape& global) {
  auto bytes = static_cast<int64_t>(mine.nbytes());
  Tensor all = gather_pairs(comm, mine, mesh);
  std::vector<uint8_t> have(all.data(), all.data() + all.nbytes());
  std::vector<Tensor> blocks;
  for (int64_t r = 0; r < mesh.num_devices(); ++r)
    blocks.push_back(Tensor::from_bytes(mine.dtype(), mine.shape(),
                                        std::vector<uint8_t>(have.begin() + r * bytes, have.begin() + (r + 1) * bytes)));
  return unshard(blocks, s, mesh, global);
}

// This process's rank of an mpirun job, compiled with its communicator:
// every rank throws when one fails (before any rank runs).
std::unique_ptr<MpiRank> compile_mpi_rank(const RankSource& plan, const DeviceMesh& mesh, const RunConfig& config) {
  auto me = std::make_unique<MpiRank>();
  me->options = detail::run_options(config);  // the same check on every rank
  runtime::MpiSession& session = runtime::MpiSession::get();
  int64_t rank = session.rank();
  me->rank = rank;
  // The process count is a resource the job was given, not a flag of this
  // command: the same error (exit 1) on every rank.
  if (session.size() != plan.ranks)
    TESSERA_THROW(ErrorKind::kResource, "rank " << rank << ": mpirun started " << session.size()
                                                << " processes but " << plan.plan_name << " is for mesh "
                                                << plan.mesh << " of " << plan.ranks << " ranks: run it with mpirun -np "
                                                << plan.ranks);
  me->mpi = std::make_unique<runtime::MpiCommunicator>(session, mesh);
  runtime::RunOptions& options = me->options;
  options.threads = threads_per_rank(config, session.local_size());
  bool cuda = options.backend == runtime::Backend::kCuda;

  std::optional<Graph> g;
  agree(session, attempt([&] {
          require_nccl(options, session.local_size());
          g = plan.load(rank);
          me->boundary = boundary_of(plan, mesh, *g);
        }));
  // Rank 0's collectives against this rank's (exactly, as text).
  std::string sig = runtime::collective_signature(*g), sig0 = sig;
  int64_t len = static_cast<int64_t>(sig0.size());
  session.broadcast(&len, sizeof len);
  sig0.resize(static_cast<size_t>(len));
  session.broadcast(sig0.data(), len);
  agree(session, attempt([&] {
          if (std::string d = runtime::signature_difference(sig, sig0); !d.empty())
            throw Error(ErrorKind::kInvalidGraph,
                        "its collectives are not rank0.onnx's, so the ranks would wait for each other: " + d,
                        {plan.where(rank), "", ""});
        }));
  if (cuda) {
    runtime::NcclId id;
    agree(session, attempt([&] {
            if (rank == 0) id = runtime::nccl_unique_id();
          }));
    session.broadcast(id.bytes.data(), static_cast<int64_t>(id.bytes.size()));
    // ncclCommInitRank waits for every rank: one that fails here ends the job.
    if (auto e = attempt([&] {
          me->nccl = runtime::make_nccl_communicator(
              mesh, rank, static_cast<int>(session.local_rank() % runtime::cuda_device_count()), id);
        }))
      fail_job(rank, e->what());
  }
  options.communicator = cuda ? me->nccl.get() : me->mpi.get();
  agree(session, attempt([&] { me->plan.emplace(runtime::ExecutablePlan::compile(std::move(*g), options)); }));
  return me;
}

// This process's rank of an mpirun job.
MeshRunResult run_mpi(const RankSource& plan, const DeviceMesh& mesh, const InputsFn& inputs_of,
                      const RunConfig& config) {
  std::unique_ptr<MpiRank> me = compile_mpi_rank(plan, mesh, config);
  std::vector<Tensor> inputs;
  agree(runtime::MpiSession::get(),
        attempt([&] { inputs = me->boundary.scatter(inputs_of(me->boundary.global), me->rank); }));
  MeshRunResult m;
  if (auto e = attempt([&] { static_cast<RunResult&>(m) = detail::run_compiled(*me->plan, inputs, config); }))
    fail_job(me->rank, e->what());
  const Boundary& boundary = me->boundary;
  for (size_t k = 0; k < boundary.out.size(); ++k)
    if (boundary.sharded_output(k))
      m.outputs[k] = gather_blocks(*me->mpi, m.outputs[k], boundary.out[k], mesh, boundary.out_shapes[k]);
  m.output_names = boundary.out_names;
  m.mpi = true;
  m.rank = me->rank;
  m.threads_per_rank = me->options.threads;
  if (config.profile) m.collective_ms = collective_ms(*me->plan);
  if (config.profile) halo_wait(*me->plan, m);
  count_collectives(*me->plan, m);
  return m;
}

MeshRunResult run_mesh_ranks(const RankSource& plan, const InputsFn& inputs, const RunConfig& config) {
  DeviceMesh mesh = DeviceMesh::parse(plan.mesh);
  if (launched_by_mpi()) return run_mpi(plan, mesh, inputs, config);
  return run_threads(plan, mesh, inputs, config);
}

}  // namespace detail

MeshRunResult run_mesh(const MeshPlan& plan, const InputsFn& inputs, const RunConfig& config, const LoadOptions& load) {
  return run_mesh_ranks(folder_source(plan, load), inputs, config);
}

namespace detail {

RankSource folder_source(const MeshPlan& plan, const LoadOptions& load) {
  return {plan.mesh, plan.ranks, "the plan in " + plan.dir,
          [plan, load](int64_t r) { return load_rank(plan, r, load); },
          [plan](int64_t r) { return (fs::path(plan.dir) / mutator::rank_file(r)).string(); },
          plan.input_shardings, plan.output_shardings};
}

RankSource memory_source(const Plan& plan) {
  return {plan.mesh, static_cast<int64_t>(plan.ranks.size()), "the plan",
          [&plan](int64_t r) { return plan.ranks[static_cast<size_t>(r)]; },
          [](int64_t r) { return "rank " + std::to_string(r) + "'s program"; }, plan.input_shardings,
          plan.output_shardings};
}

bool same_run_config(const RunConfig& a, const RunConfig& b) {
  return a.backend == b.backend && a.threads == b.threads && a.overlap == b.overlap && a.repeat == b.repeat &&
         a.profile == b.profile;
}

}  // namespace detail

MeshExecutable::MeshExecutable(const Plan& plan, const RunConfig& config) {
  if (!plan.is_mesh()) TESSERA_THROW(ErrorKind::kUsage, "a mesh executable needs a plan for a device mesh (optimize with a mesh)");
  if (launched_by_mpi())
    TESSERA_THROW(ErrorKind::kUsage, "under mpirun each process runs its own rank: use run_mesh, not a MeshExecutable");
  state_ = std::make_shared<State>();
  state_->mesh = DeviceMesh::parse(plan.mesh);
  state_->config = config;
  compile_threads(*state_, memory_source(plan));
}

MeshRunResult MeshExecutable::run(const std::vector<Tensor>& inputs) const {
  return run_compiled_threads(*state_, inputs, state_->config);
}

std::vector<std::vector<Tensor>> MeshExecutable::run_blocks(const std::vector<std::vector<Tensor>>& per_rank) const {
  if (per_rank.size() != state_->plans.size())
    TESSERA_THROW(ErrorKind::kUsage, "the plan has " << state_->plans.size() << " ranks, " << per_rank.size()
                                                     << " input sets given");
  std::vector<std::vector<Tensor>> outs;
  RunConfig once = state_->config;
  once.repeat = 0;
  run_rank_threads(*state_, per_rank, once, outs);
  return outs;
}

const RunConfig& MeshExecutable::config() const { return state_->config; }

int64_t MeshExecutable::rank_programs_compiled() { return rank_compilations.load(); }

MeshRunResult run_mesh(const Plan& plan, const std::vector<Tensor>& inputs, const RunConfig& config) {
  if (!plan.is_mesh()) TESSERA_THROW(ErrorKind::kUsage, "run_mesh needs a plan for a device mesh (optimize with a mesh)");
  if (launched_by_mpi()) return run_mesh_ranks(memory_source(plan), [&](const Graph&) { return inputs; }, config);
  // Compiled once per plan and run options, then reused run after run.
  std::lock_guard<std::mutex> lock(plan.compiled_->mutex);
  std::shared_ptr<MeshExecutable>& e = plan.compiled_->mesh;
  if (!e || !same_run_config(e->config(), config)) e = std::make_shared<MeshExecutable>(plan, config);
  std::shared_ptr<MeshExecutable> keep = e;
  return keep->run(inputs);
}

}  // namespace tessera::api
