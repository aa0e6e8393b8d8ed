// A program the verifier can compare against an original graph: either one
// graph, or a per-rank program on a device mesh with the shardings that say
// how global inputs are split among ranks and how rank outputs form the
// global outputs. Both run over any interpreter number type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/interpreter.h"
#include "graph/sharding.h"

namespace tessera::verifier {

struct ShardedProgram {
  Graph local;  // the same program on every rank (when per_rank is empty)
  // One program per rank instead, run in lockstep (interpret_ranks): what
  // partitioning makes, where ranks differ in their blocks of the weights.
  std::vector<Graph> per_rank;
  DeviceMesh mesh;
  std::vector<Sharding> input_shardings;   // one per graph input of `local`
  std::vector<Sharding> output_shardings;  // one per graph output of `local`
};

// Global values of a program's outputs, and where ranks that should hold the
// same (replicated) data disagree.
template <class T>
struct GlobalOutputs {
  std::vector<RefTensor<T>> values;
  // Per output, row-major over the global shape: 1 where replicas disagree.
  std::vector<std::vector<uint8_t>> replica_mismatch;
};

class Program {
 public:
  explicit Program(const Graph& g);
  explicit Program(const ShardedProgram& p);

  // Global input and output types (the local program's, scaled up by the shardings).
  const std::vector<TensorType>& input_types() const { return input_types_; }
  const std::vector<TensorType>& output_types() const { return output_types_; }
  // The graph whose ops the program runs (for analysis).
  const Graph& graph() const {
    return sharded_ ? (sharded_->per_rank.empty() ? sharded_->local : sharded_->per_rank[0]) : *graph_;
  }
  bool sharded() const { return sharded_ != nullptr; }

  template <class T>
  GlobalOutputs<T> run(const std::vector<RefTensor<T>>& global_inputs) const;
  // run on several input sets at once (outputs[s] for sets[s]): each step
  // runs for every set before the next, so a weight is converted once for
  // all of them (graph/interpreter.h interpret_ranks_sets).
  template <class T>
  std::vector<GlobalOutputs<T>> run_sets(const std::vector<std::vector<RefTensor<T>>>& sets,
                                         const StepFn& steps = {}) const;

 private:
  void init_types();

  const Graph* graph_ = nullptr;
  const ShardedProgram* sharded_ = nullptr;
  std::vector<TensorType> input_types_, output_types_;
};

// Global type of a tensor whose per-rank type is `local` under `sharding`.
TensorType global_type(const DeviceMesh& mesh, const Sharding& sharding, const TensorType& local);

}  // namespace tessera::verifier
