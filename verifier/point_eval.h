// Position-wise evaluation of a graph over Z_p: computes single output
// elements by following each op's index dependencies back to the inputs,
// memoized per value and position, so a handful of output positions cost
// only the elements they depend on. The multilinear test uses it to check a
// box of the output at its corners instead of evaluating the whole tensor.
//
// Ops with a per-position rule here: elementwise ops (any, through their
// kernel on scalars), Transpose, the reshape family, Slice, constant Pad,
// Concat, Split, MatMul, Conv, Softmax/LogSoftmax (one row at a time). Any
// other op is evaluated whole by its reference kernel when first needed.
// Results are exactly those of interpret<Zp> (same kernels, exact arithmetic).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph/graph.h"
#include "graph/zp.h"

namespace tessera::verifier {

// Thrown when an evaluation exceeds its work budget.
struct WorkBudgetExceeded {};

class PointEvaluator {
 public:
  // `inputs`: one per graph input, types as the graph's. `work` counts
  // multiply-adds (and element copies) across evaluators sharing it; past
  // `budget` any call throws WorkBudgetExceeded.
  PointEvaluator(const Graph& g, const std::vector<RefTensor<Zp>>& inputs, int64_t* work, int64_t budget);
  ~PointEvaluator();

  // The value of graph output j at multi-index idx: the residue for float
  // dtypes, the integer's bits otherwise.
  uint64_t output_at(size_t j, const std::vector<int64_t>& idx);

 private:
  struct Slot;
  struct Plan;  // a node's index geometry, read from its attributes once
  const Plan& plan(NodeId id);
  uint64_t get(ValueId v, int64_t flat);
  void compute(ValueId v, int64_t flat);
  void materialize(NodeId n);
  void charge(int64_t w);
  // Operands of a reduction op that are a chain of movement ops over data
  // already held are made whole first, so the reduction reads them directly.
  bool movement_of_held(ValueId v) const;
  const uint64_t* dense_if_cheap(ValueId v);

  void elementwise(const Node& n, ValueId v, int64_t flat);
  void matmul(NodeId id, ValueId v, int64_t flat);
  void conv(NodeId id, ValueId v, int64_t flat);
  void softmax_row(const Node& n, ValueId v, int64_t flat);
  void movement(NodeId id, ValueId v, int64_t flat);

  const Graph& g_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::unique_ptr<Plan>> plans_;
  int64_t* work_;
  int64_t budget_;
  std::vector<int64_t> scratch_;
};

// Multiply-adds the reference kernels spend on `g` (an estimate that counts
// MatMul, Gemm and Conv by their reductions and other ops by their outputs).
int64_t full_evaluation_work(const Graph& g);

}  // namespace tessera::verifier
