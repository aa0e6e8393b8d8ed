// Plan cost over several ranks: each rank runs its sequence of kernels and
// collectives; a collective starts when every rank of its group has reached
// it and ends for all of them together. The plan's time is the critical
// path, the latest rank's finish.
//
// Without overlap a rank runs one step at a time. With overlap, collectives
// run on a communication stream beside the compute stream, and a step waits
// only for the earlier steps it depends on (its data) and for the previous
// step on its own stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost/kernel_model.h"
#include "graph/sharding.h"

namespace tessera::cost {

struct PlanStep {
  std::string name;
  double time_s = 0;
  // Collectives: the ranks taking part (the same list on every member).
  // The k-th collective over a group on one rank meets the k-th over the
  // same group on every other member.
  bool collective = false;
  std::vector<int64_t> group;
  std::vector<int> deps;  // indices of earlier steps of this rank it reads
};

struct RankProgram {
  std::vector<PlanStep> steps;
};

struct PlanCostOptions {
  bool overlap = false;  // communication on its own stream
};

struct PlanCost {
  double time_s = 0;                  // makespan
  int64_t critical_rank = 0;          // the rank that finishes last
  std::vector<double> finish_s;       // per rank
  std::vector<double> compute_s;      // per rank: busy time of kernels
  std::vector<double> comm_s;         // per rank: time in collectives
  std::vector<std::vector<double>> step_finish_s;  // per rank, per step
};

// Throws Error(kInvalidGraph) when the ranks' collectives do not match
// (a member lacks a collective its group expects, a rank outside the plan)
// or are ordered so that they would deadlock.
PlanCost plan_cost(const std::vector<RankProgram>& ranks, const PlanCostOptions& options = {});

// One program per rank from per-rank graphs (SPMD lowering's output): the
// kernels of graph_cost, and collectives placed on `mesh`.
std::vector<RankProgram> rank_programs(const std::vector<Graph>& rank_graphs, const DeviceMesh& mesh,
                                       const DeviceProfile& device, const CostOptions& options = {});

// The same for an SPMD plan whose ranks run one program (the same nodes on
// the same local shapes; only constant data and slice offsets differ):
// rank 0's graph is costed once and every rank gets its steps, with its own
// collective groups.
std::vector<RankProgram> spmd_rank_programs(const Graph& rank0, const DeviceMesh& mesh, const DeviceProfile& device,
                                            const CostOptions& options = {});

// The options that price rank programs as `tessera run` lowers them on
// `device`: halo_overlap where the runtime overlaps a HaloExchange with its
// window op (the CPU runtime, runtime/cpu/halo_overlap.h; the CUDA lowering
// exchanges, then runs the op).
CostOptions runtime_cost_options(const DeviceProfile& device);

}  // namespace tessera::cost
