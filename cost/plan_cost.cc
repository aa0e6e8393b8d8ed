#include "cost/plan_cost.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

#include "cost/collective_model.h"
#include "cost/graph_cost.h"
#include "graph/attr_views.h"
#include "graph/halo_rows.h"
#include "graph/error.h"

namespace tessera::cost {

namespace {

// A step of one rank, or one collective instance shared by its group.
struct Event {
  double duration = 0;
  std::vector<int> preds;
  double finish = 0;
};

std::string group_str(const std::vector<int64_t>& group) {
  std::string s = "{";
  for (size_t i = 0; i < group.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(group[i]);
  }
  return s + "}";
}

}  // namespace

PlanCost plan_cost(const std::vector<RankProgram>& ranks, const PlanCostOptions& options) {
  int64_t num_ranks = static_cast<int64_t>(ranks.size());
  std::vector<std::vector<int>> event_of(ranks.size());
  std::vector<Event> events;
  // Collective instances: (group, occurrence) -> event, with the members seen.
  std::map<std::pair<std::vector<int64_t>, int>, std::pair<int, std::vector<int64_t>>> instances;
  for (int64_t r = 0; r < num_ranks; ++r) {
    std::map<std::vector<int64_t>, int> seen;
    for (const PlanStep& s : ranks[static_cast<size_t>(r)].steps) {
      if (!s.collective) {
        event_of[static_cast<size_t>(r)].push_back(static_cast<int>(events.size()));
        events.push_back({s.time_s, {}, 0});
        continue;
      }
      std::vector<int64_t> group = s.group;
      std::sort(group.begin(), group.end());
      if (std::find(group.begin(), group.end(), r) == group.end() || group.front() < 0 || group.back() >= num_ranks)
        TESSERA_THROW(ErrorKind::kInvalidGraph, "rank " << r << ": collective '" << s.name << "' over group "
                                                        << group_str(group) << " does not fit a plan of "
                                                        << num_ranks << " ranks with this rank in it");
      auto key = std::make_pair(group, seen[group]++);
      auto it = instances.find(key);
      if (it == instances.end()) {
        it = instances.emplace(key, std::make_pair(static_cast<int>(events.size()), std::vector<int64_t>{})).first;
        events.push_back({s.time_s, {}, 0});
      }
      Event& e = events[static_cast<size_t>(it->second.first)];
      e.duration = std::max(e.duration, s.time_s);
      it->second.second.push_back(r);
      event_of[static_cast<size_t>(r)].push_back(it->second.first);
    }
  }
  for (const auto& [key, inst] : instances)
    if (inst.second.size() != key.first.size())
      TESSERA_THROW(ErrorKind::kInvalidGraph, "collective #" << key.second + 1 << " over group " << group_str(key.first)
                                                             << " is reached by " << inst.second.size() << " of its "
                                                             << key.first.size() << " ranks");
  // Predecessors: data dependencies and the previous step on the same stream.
  for (int64_t r = 0; r < num_ranks; ++r) {
    const auto& steps = ranks[static_cast<size_t>(r)].steps;
    const auto& ev = event_of[static_cast<size_t>(r)];
    int last[2] = {-1, -1};  // per stream: compute, communication
    for (size_t i = 0; i < steps.size(); ++i) {
      int stream = options.overlap && steps[i].collective ? 1 : 0;
      std::vector<int>& preds = events[static_cast<size_t>(ev[i])].preds;
      if (last[stream] >= 0) preds.push_back(ev[static_cast<size_t>(last[stream])]);
      for (int d : steps[i].deps) {
        if (d < 0 || static_cast<size_t>(d) >= i)
          TESSERA_THROW(ErrorKind::kInvalidGraph, "rank " << r << ": step '" << steps[i].name
                                                          << "' depends on step " << d << ", which is not before it");
        preds.push_back(ev[static_cast<size_t>(d)]);
      }
      last[stream] = static_cast<int>(i);
    }
  }
  // Longest path in topological order; a cycle means the ranks wait on each
  // other's collectives in different orders.
  std::vector<int> indegree(events.size(), 0);
  std::vector<std::vector<int>> succ(events.size());
  for (size_t e = 0; e < events.size(); ++e)
    for (int p : events[e].preds)
      if (p != static_cast<int>(e)) {
        succ[static_cast<size_t>(p)].push_back(static_cast<int>(e));
        ++indegree[e];
      }
  std::vector<int> ready;
  for (size_t e = 0; e < events.size(); ++e)
    if (indegree[e] == 0) ready.push_back(static_cast<int>(e));
  std::vector<double> start(events.size(), 0.0);
  size_t done = 0;
  while (!ready.empty()) {
    int e = ready.back();
    ready.pop_back();
    ++done;
    Event& ev = events[static_cast<size_t>(e)];
    ev.finish = start[static_cast<size_t>(e)] + ev.duration;
    for (int s : succ[static_cast<size_t>(e)]) {
      start[static_cast<size_t>(s)] = std::max(start[static_cast<size_t>(s)], ev.finish);
      if (--indegree[static_cast<size_t>(s)] == 0) ready.push_back(s);
    }
  }
  if (done != events.size())
    TESSERA_THROW(ErrorKind::kInvalidGraph, "the ranks reach their collectives in orders that deadlock");
  PlanCost c;
  for (int64_t r = 0; r < num_ranks; ++r) {
    const auto& steps = ranks[static_cast<size_t>(r)].steps;
    std::vector<double> finish;
    double compute = 0, comm = 0, end = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      double f = events[static_cast<size_t>(event_of[static_cast<size_t>(r)][i])].finish;
      finish.push_back(f);
      end = std::max(end, f);
      (steps[i].collective ? comm : compute) += steps[i].time_s;
    }
    c.step_finish_s.push_back(std::move(finish));
    c.finish_s.push_back(end);
    c.compute_s.push_back(compute);
    c.comm_s.push_back(comm);
    if (end > c.time_s) {
      c.time_s = end;
      c.critical_rank = r;
    }
  }
  return c;
}

namespace {

// Each HaloExchange step whose only reader is the root of a window op's
// step along its dim: the exchange moves into that step (CostOptions::
// halo_overlap), the exchange's own step keeps the meeting of the ranks.
void price_halo_overlap(const Graph& g, const GraphCost& gc, RankProgram& prog) {
  std::vector<std::vector<NodeId>> users = g.users();
  std::vector<int> step_of_root(static_cast<size_t>(g.num_nodes()), -1);
  for (size_t k = 0; k < gc.groups.size(); ++k) step_of_root[static_cast<size_t>(gc.groups[k][0])] = static_cast<int>(k);
  for (size_t k = 0; k < gc.groups.size(); ++k) {
    const Node& h = g.node(gc.groups[k][0]);
    if (h.kind != OpKind::kHaloExchange || gc.groups[k].size() != 1) continue;
    const std::vector<NodeId>& u = users[static_cast<size_t>(h.outputs[0])];
    if (u.size() != 1 || step_of_root[static_cast<size_t>(u[0])] < 0) continue;
    int64_t dim = 0;
    HaloBand band = halo_band_of(g, h, &dim);
    std::optional<WindowRows> w = window_rows_of(g.node(u[0]), dim);
    if (!w || g.node(u[0]).inputs[0] != h.outputs[0]) continue;
    // The runtime overlaps f32 only (runtime/cpu/halo_overlap.h, halo_overlappable).
    if (g.type(h.outputs[0]).dtype != DType::kF32 || g.type(g.node(u[0]).outputs[0]).dtype != DType::kF32) continue;
    PlanStep& op = prog.steps[static_cast<size_t>(step_of_root[static_cast<size_t>(u[0])])];
    op.time_s = halo_overlap_time(prog.steps[k].time_s, op.time_s, *w, band).time_s;
    prog.steps[k].time_s = 0;
  }
}

// The steps of graph g for each of `ranks`; a collective gets the rank's
// group on `mesh` for the axis it runs over.
std::vector<RankProgram> programs_of(const Graph& g, const std::vector<int64_t>& ranks, const DeviceMesh& mesh,
                                     const DeviceProfile& device, const CostOptions& options) {
  CostOptions opts = options;
  opts.mesh = &mesh;
  GraphCost gc = graph_cost(g, device, opts, kernel_groups(g));
  std::vector<int> step_of_value(static_cast<size_t>(g.num_values()), -1);
  RankProgram prog;
  std::vector<int> axis;  // per step: the mesh axis of a collective, -1 otherwise
  for (size_t k = 0; k < gc.groups.size(); ++k) {
    const auto& group = gc.groups[k];
    const Node& root = g.node(group[0]);
    PlanStep s;
    s.name = root.name;
    s.time_s = gc.kernels[k].time_s;
    s.collective = op_def(root.kind).is_collective();
    axis.push_back(s.collective ? mesh.axis_index(CollectiveAttrs::of(root).mesh_axis) : -1);
    for (NodeId id : group)
      for (ValueId v : g.node(id).inputs)
        if (v != kNoValue && step_of_value[static_cast<size_t>(v)] >= 0) s.deps.push_back(step_of_value[static_cast<size_t>(v)]);
    std::sort(s.deps.begin(), s.deps.end());
    s.deps.erase(std::unique(s.deps.begin(), s.deps.end()), s.deps.end());
    for (NodeId id : group)
      for (ValueId v : g.node(id).outputs) step_of_value[static_cast<size_t>(v)] = static_cast<int>(prog.steps.size());
    prog.steps.push_back(std::move(s));
  }
  if (options.halo_overlap) price_halo_overlap(g, gc, prog);
  std::vector<RankProgram> out;
  for (int64_t r : ranks) {
    RankProgram p = prog;
    for (size_t k = 0; k < p.steps.size(); ++k)
      if (axis[k] >= 0) p.steps[k].group = mesh.group(r, axis[k]);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::vector<RankProgram> rank_programs(const std::vector<Graph>& rank_graphs, const DeviceMesh& mesh,
                                       const DeviceProfile& device, const CostOptions& options) {
  if (static_cast<int64_t>(rank_graphs.size()) != mesh.num_devices())
    TESSERA_THROW(ErrorKind::kUsage, rank_graphs.size() << " rank programs for mesh " << mesh.str() << " of "
                                                        << mesh.num_devices() << " devices");
  std::vector<RankProgram> programs;
  for (size_t r = 0; r < rank_graphs.size(); ++r)
    programs.push_back(std::move(programs_of(rank_graphs[r], {static_cast<int64_t>(r)}, mesh, device, options)[0]));
  return programs;
}

std::vector<RankProgram> spmd_rank_programs(const Graph& rank0, const DeviceMesh& mesh, const DeviceProfile& device,
                                            const CostOptions& options) {
  std::vector<int64_t> ranks(static_cast<size_t>(mesh.num_devices()));
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<int64_t>(r);
  return programs_of(rank0, ranks, mesh, device, options);
}

CostOptions runtime_cost_options(const DeviceProfile& device) {
  CostOptions o;
  o.halo_overlap = device.kind == DeviceKind::kCpu;
  return o;
}

}  // namespace tessera::cost
