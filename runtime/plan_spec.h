// What a backend's compiler hands to the generic plan: kernels in execution
// order and the storage class of every value they touch. The generic part
// (plan.cc) does liveness, in-place reuse, arena placement, and the run loop;
// the backends decide kernels and layouts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "graph/graph.h"
#include "runtime/kernel.h"
#include "runtime/runtime.h"

namespace tessera::runtime {

struct PlanValue {
  enum class Kind : uint8_t { kUnused, kIntermediate, kInput, kConstant, kAlias };
  Kind kind = Kind::kUnused;
  int64_t bytes = 0;               // storage size (a blocked layout may pad)
  int64_t input_index = -1;        // kInput: position among the graph inputs
  const uint8_t* constant = nullptr;  // kConstant: the data (owned by the graph or a kernel)
  ValueId alias_of = kNoValue;     // kAlias: the value whose buffer it shares
};

struct PlanSpec {
  std::vector<PlanValue> values;  // graph values first, then values the backend added
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::vector<ValueId> outputs;   // per graph output: the value (plain layout) holding it
  std::vector<TensorType> input_types;
  std::vector<TensorType> output_types;
  // The constants kernels read at run time (sharing the graph's storage), so
  // that the plan outlives the graph and a caller that drops the graph after
  // compile frees the constants the kernels hold prepacked copies of.
  // Filled by compile from the kernels' inputs: a kernel that prepacked a
  // constant lists kNoValue in its place.
  std::vector<Tensor> constants;
};

// The CPU backend compiler; compile_cpu with Backend::kReference gives a plan whose
// kernels are all the reference interpreter's.
// With `release`, a constant's data is handed to it (to free) once every node
// that reads it is compiled and no kernel reads it at run time.
void compile_cpu(const Graph& g, const RunOptions& options, PlanSpec& spec,
                 const std::function<void(ValueId)>& release = {});

// Adds the graph's inputs and constants to spec.values (sized to the graph).
void bind_graph_values(const Graph& g, PlanSpec& spec);

}  // namespace tessera::runtime
