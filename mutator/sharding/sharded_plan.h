// A plan for a device mesh from annotations: canonicalize the model, resolve
// the --shard annotations, propagate shardings to every tensor, partition
// into one program per rank, and check the ranks' programs (run in lockstep
// on the reference interpreter) against the single-device graph before the
// plan is returned. What tools/ writes as rank<i>.onnx, plan.json and the
// reports.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mutator/canonicalize.h"
#include "mutator/plan_files.h"
#include "mutator/sharding/partition.h"
#include "mutator/sharding/shard_search.h"
#include "verifier/plan_check.h"

namespace tessera::mutator {

struct ShardOptions {
  std::string device = "cpu";
  DeviceMesh mesh;
  std::vector<std::string> specs;  // --shard, then the --shard-file's
  uint64_t seed = 0;
  int check_trials = 3;  // seeded random input sets the ranks' programs are checked on
  // The model's own input sets (one tensor per graph input), checked too.
  std::vector<std::vector<Tensor>> check_inputs;
  // The sharding search (shard_search.h) decides what the annotations
  // leave open, and with no annotations the degree too. false: the
  // annotations and propagation alone.
  bool search = true;
  int64_t device_memory = 0;  // bytes per device; 0: the device profile's
  std::string rewrite;        // ShardSearchOptions::rewrite
  double budget_s = 60;
  int threads = 0;
};

struct CollectiveRecord {
  std::string name, kind, mesh_axis;
  int64_t bytes = 0;      // the input tensor of one rank
  double predicted_s = 0;
};

struct RankRecord {
  int64_t rank = 0;
  std::vector<int64_t> coords;
  int64_t nodes = 0;
  int64_t weight_bytes = 0;           // its constants
  int64_t peak_activation_bytes = 0;  // live values at the worst step, in the program's order
  double compute_s = 0, comm_s = 0;   // predicted
};

struct ShardedPlan {
  static constexpr int kFormatVersion = kPlanFormatVersion;
  Graph original;
  Graph global;  // canonicalized: the graph that was sharded
  std::string device;
  std::vector<PassRecord> canonical;
  std::vector<ShardConstraint> constraints;
  ShardedGraph sharding;
  bool searched = false;
  ShardSearchResult search;  // when searched
  RankPrograms ranks;
  std::vector<CollectiveRecord> collectives;  // rank 0's, in program order
  std::vector<RankRecord> rank_records;
  double single_s = 0;  // predicted, the canonical graph on one device
  double mesh_s = 0;    // predicted, the ranks' critical path
  // Predicted seconds by kernel class (kernel_class_times): the canonical
  // graph on one device, and rank 0's program with its collectives.
  std::map<std::string, double> classes_single_s, classes_rank0_s;
  verifier::EndToEndReport check;
  uint64_t seed = 0;
};

// Throws what resolve_annotations and propagate throw for bad annotations,
// and Error(kInternal) when the ranks' programs fail the end-to-end check (a
// plan that fails is never returned, so never written).
ShardedPlan shard(const Graph& g, const ShardOptions& options);

// The rank files' digests are added when the files are written
// (with_plan_files, plan_files.h).
std::string sharded_plan_json(const ShardedPlan& p);
std::string sharded_report_json(const ShardedPlan& p);
std::string sharded_report_text(const ShardedPlan& p);

// The name of rank r's file in a plan folder.
std::string rank_file(int64_t rank);

}  // namespace tessera::mutator
