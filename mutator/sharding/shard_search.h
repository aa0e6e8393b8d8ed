// The sharding search: Tessera decides how to split a model over a mesh
// (Alpa's intra-op pass, Unity's joint search), instead of being told.
//
// A candidate is a set of moves over the canonical graph:
//   - pin a weight role (structure.h: a weight of every repeated block at
//     once) to one of the placements its reader's strategies take it in:
//     the column split of fc1, the row split of fc2;
//   - reduce a Partial at a role of values: AllReduce it there (R), or
//     ReduceScatter it along a dim (S(d): sequence parallelism over the
//     LayerNorm and element-wise region that follows, ended by the
//     AllGather the next column-parallel product asks for);
//   - carry state (--carry) across the boundary as blocks: both ends of
//     each pair of one type at once (every layer's key cache), in a
//     sharding a reader of the input takes, so the cache stays on the
//     ranks between steps instead of being gathered and cut again;
//   - a rewrite of the graph that sharding can use (split-merged-projection:
//     GPT-2's merged QKV projection as three, so that each is split by
//     heads), compared with the graph as it is under the same cost.
// Propagation (propagate.h) turns the pins into a sharding of every tensor,
// and ShardedCostModel prices it: one rank's kernels at their local shapes
// plus every reshard on the collective model of the mesh axis it crosses,
// subject to per-device memory (weights + peak activations). The search is
// best-improvement descent from the replicated plan: each step evaluates
// every single move from the current set (in parallel, deterministically:
// ties go to the first move in a fixed order) and takes the best, until no
// move gains. Pins of Partial values are offered once the weights have
// settled, for the values that are still Partial.
//
// Degree: every sub-mesh (each axis at each divisor of its size) is searched
// and the fastest plan that fits wins (fewer devices unless more are faster
// by kDegreeSlack), one device included, so a mesh of 8 may be served by 4
// ranks or by one; the curve goes into the plan. A
// sub-mesh is assumed placed on the fewest nodes. Annotations fix the mesh
// (they name its axes and sizes) and are constraints no move overrides; the
// graph rewrites are tried under them too (so Megatron's column split of a
// merged QKV weight, permuted, gives each rank whole heads).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "cost/plan_cost.h"
#include "mutator/carry.h"
#include "mutator/sharding/partition.h"
#include "mutator/sharding/propagate.h"

namespace tessera::mutator {

// A mesh of more devices is chosen only when it is predicted faster than
// every smaller one by more than this share.
inline constexpr double kDegreeSlack = 0.02;
// Points of the curve whose descent estimate is within this share of the
// best are priced again as the plan will be written (partitioned), and the
// choice is made on those prices; the rest keep their estimate. One device
// is always priced as written.
inline constexpr double kRepriceSlack = 0.25;

struct ShardSearchOptions {
  DeviceMesh mesh;                           // what is offered
  std::vector<ShardConstraint> constraints;  // resolved annotations (on the graph given)
  // The annotations as given (annotations.h): resolved again on each
  // rewritten graph, so that a rewrite is tried under them where they still
  // name what they named (a permuted merged projection keeps its node). A
  // rewrite they do not fit is not tried. Empty: `constraints` only, and
  // the graph as given.
  std::vector<std::string> specs;
  int64_t device_memory = 0;                 // bytes per device; 0: the profile's main memory
  double budget_s = 60;
  int threads = 0;  // 0: one per core
  bool degrees = true;  // try sub-meshes (off when annotations fix the mesh)
  bool rewrites = true;
  // "": every mesh rule of the registry (rules/rule.h, Rule::mesh_only) and
  // the graph as given, compared; "none": as given only; a mesh rule's name
  // (split-merged-projection, permute-merged-projection): that one only.
  // Throws Error(kUsage) for another name, for a disabled one, and for a
  // rewrite that applies nowhere in the graph.
  std::string rewrite;
  // Rules the user turned off (--disable-rule): mesh rules among them are
  // not tried.
  std::set<std::string> disabled_rules;
  // Carried state (--carry): outputs that feed inputs at the next step. A
  // pair no constraint places is a decision of the search: how both ends
  // cross the boundary (whole, or split as a reader of the input takes it),
  // priced with the state staying on the ranks.
  std::vector<CarryPair> carry;
};

// One point of the degree curve.
struct DegreePoint {
  DeviceMesh mesh;           // no axes: one device
  std::string graph;         // "as given" or the mesh rule that rewrote it
  // The partitioned plan's predicted time (cost/plan_cost.h on the ranks'
  // programs, as plan.json gives it), its kernels and collectives on rank 0;
  // search_s: the descent's own estimate (ShardedCostModel), which ranks
  // moves but does not see fusion broken by a collective or reshards of
  // constants folded at export.
  double predicted_s = 0;
  double compute_s = 0, comm_s = 0;
  double search_s = 0;
  // Whether predicted_s is the partitioned plan's (points within
  // kRepriceSlack of the best estimate) or the descent's estimate.
  bool priced_as_plan = false;
  int64_t memory_bytes = 0;  // per device
  bool fits = true;
  std::vector<std::string> moves;
  int64_t evaluations = 0;
};

struct ShardSearchResult {
  DeviceMesh offered;
  Graph graph;      // the graph the plan shards (the input, or rewritten)
  DeviceMesh mesh;  // the chosen mesh; no axes: one device is fastest
  std::vector<ShardConstraint> constraints;  // annotations, then the search's pins
  std::vector<std::string> rewrites;         // applied to `graph`
  std::vector<DegreePoint> curve;            // every mesh and graph tried, in order
  size_t chosen = 0;                         // index into curve
  std::string why;                           // one paragraph for the report
  int roles = 0;                             // weight roles (decisions)
  int64_t weights_in_roles = 0;
  int64_t evaluations = 0;
  double seconds = 0;
  bool budget_exhausted = false;
  int64_t device_memory = 0;
  // The chosen plan as the search built it to price it, on a mesh of two
  // or more devices: the sharding of every tensor of `graph`, one program
  // per rank, and their predicted times on each rank's share of the host
  // (plan_cost.h). Empty when one device is chosen: the plan is `graph`.
  ShardedGraph sharding;
  std::vector<Graph> ranks;
  cost::PlanCost plan_cost;
};

// Throws Error(kResource) when no plan fits the device memory, naming the
// smallest per-device footprint found.
ShardSearchResult search_shardings(const Graph& g, const cost::DeviceProfile& device,
                                   const ShardSearchOptions& options);

// The point of the curve a search chooses: of the points that fit, the
// fastest, or one on the fewest devices within kDegreeSlack of it (the
// fastest of those); curve.size() when none fits.
size_t pick_degree_point(const std::vector<DegreePoint>& curve);

// Every sub-mesh of `mesh`: each axis at each divisor of its size, axes of
// size 1 dropped; ordered by device count, then lexicographically. The
// single device (no axes) first.
std::vector<DeviceMesh> sub_meshes(const DeviceMesh& mesh);

}  // namespace tessera::mutator
