// What the mesh runs (mesh_run.cc) and sessions (session.cc) share: where
// a mesh plan's rank programs come from, its boundary (how inputs and
// outputs cross it), the ranks compiled as threads or as this process's
// rank under mpirun. Internal to tessera_api (not installed).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graph/sharding.h"
#include "runtime/communicator.h"
#include "runtime/mpi_communicator.h"
#include "runtime/runtime.h"
#include "tools/api/tessera.h"

namespace tessera::api::detail {

// Where a mesh plan's rank programs come from: a plan folder's files or a
// Plan in memory. `where` names rank r's program in errors.
struct RankSource {
  std::string mesh;
  int64_t ranks = 0;
  std::string plan_name;  // "the plan in DIR", "the plan"
  std::function<Graph(int64_t)> load;
  std::function<std::string(int64_t)> where;
  std::map<std::string, std::string> input_shardings, output_shardings;  // the boundary, by name
};

// A mesh plan's boundary on rank 0's program: how each input and output
// crosses it, and the plan's inputs at their global types.
struct Boundary {
  DeviceMesh mesh;
  std::vector<Sharding> in, out;
  Graph global;  // the plan's inputs as the single-device model takes them; no nodes
  std::vector<std::string> out_names;
  std::vector<Shape> out_shapes;  // global

  // Rank r's inputs: its block of each global input.
  std::vector<Tensor> scatter(const std::vector<Tensor>& global_inputs, int64_t r) const {
    if (global_inputs.size() != in.size())
      TESSERA_THROW(ErrorKind::kUsage, "the plan takes " << in.size() << " inputs, " << global_inputs.size() << " given");
    std::vector<Tensor> mine;
    for (size_t i = 0; i < in.size(); ++i) {
      const TensorType& want = global.type(global.inputs()[i]);
      if (global_inputs[i].type() != want)
        TESSERA_THROW(ErrorKind::kUsage, "input '" << global.value(global.inputs()[i]).name << "' is "
                                                   << type_str(want) << ", given " << type_str(global_inputs[i].type()));
      mine.push_back(shard_of(global_inputs[i], in[i], mesh, r));
    }
    return mine;
  }
  bool sharded_output(size_t k) const { return out[k] != Sharding::replicated(mesh); }
};


Boundary boundary_of(const RankSource& plan, const DeviceMesh& mesh, const Graph& rank0);
RankSource folder_source(const MeshPlan& plan, const LoadOptions& load);
// Captures `plan` by reference: it must outlive the source's use.
RankSource memory_source(const Plan& plan);

// The global tensor from every rank's block of it, on every rank (an
// all-gather over each mesh axis).
Tensor gather_blocks(runtime::Communicator& comm, const Tensor& mine, const Sharding& s, const DeviceMesh& mesh,
                     const Shape& global);

// Every rank's `mine` (the same size on every rank), concatenated in rank
// order, on every rank.
Tensor gather_pairs(runtime::Communicator& comm, const Tensor& mine, const DeviceMesh& mesh);

// A rank that fails once the ranks run cannot tell its peers, which wait in
// a collective: it says why and ends the job.
[[noreturn]] void fail_job(int64_t rank, const std::string& why);

// This process's rank of an mpirun job, compiled.
struct MpiRank {
  int64_t rank = 0;
  runtime::RunOptions options;
  std::unique_ptr<runtime::MpiCommunicator> mpi;
  std::unique_ptr<runtime::Communicator> nccl;
  std::optional<runtime::ExecutablePlan> plan;
  Boundary boundary;
};
std::unique_ptr<MpiRank> compile_mpi_rank(const RankSource& plan, const DeviceMesh& mesh, const RunConfig& config);

}  // namespace tessera::api::detail

namespace tessera::api {

// Every rank of a mesh plan as a thread of this process, compiled once: the
// in-process world (CPU) or NCCL over one GPU per rank (CUDA), and each
// rank's executable plan bound to its communicator.
struct MeshExecutable::State {
  DeviceMesh mesh;
  RunConfig config;
  runtime::RunOptions options;
  std::unique_ptr<runtime::InProcessWorld> world;
  std::vector<std::unique_ptr<runtime::Communicator>> nccl;
  std::vector<std::optional<runtime::ExecutablePlan>> plans;
  detail::Boundary boundary;
  std::mutex mutex;  // one run at a time: the plans' buffers are shared by their runs
};


namespace detail {

void compile_threads(MeshExecutable::State& st, const RankSource& plan);
// Every rank on its own inputs; rank 0's result, and every rank's outputs.
MeshRunResult run_rank_threads(MeshExecutable::State& st, const std::vector<std::vector<Tensor>>& per_rank,
                               const RunConfig& config, std::vector<std::vector<Tensor>>& outputs);

}  // namespace detail
}  // namespace tessera::api
