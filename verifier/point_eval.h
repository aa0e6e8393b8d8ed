// Position-wise evaluation of a graph over Z_p: computes single output
// elements by following each op's index dependencies back to the inputs,
// memoized per value and position, so a handful of output positions cost
// only the elements they depend on. The multilinear test uses it to check a
// box of the output at its corners instead of evaluating the whole tensor.
//
// The rule for each op is read off its dim map (point_plan.h): elementwise
// ops run their kernel on scalars; views keep the flat position; copy ops
// (map.copies with affine reads: Transpose, Slice, constant Pad, Concat,
// Split, Expand, Tile) read the one element their map selects, or the fill;
// MatMul, Gemm and Conv sum the products of their reads over the contracted
// factors; ops whose reads are whole factors (Softmax, LogSoftmax, CumSum,
// the reductions, LayerNorm, BatchNorm, global pooling) run their kernel on
// the slab an output reads. Any other op is evaluated whole by its reference
// kernel when first needed. Results are exactly those of interpret<Zp> (same
// kernels, exact arithmetic).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph/graph.h"
#include "graph/zp.h"

namespace tessera::verifier {

struct PointPlan;

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
  const PointPlan& plan(NodeId id);  // read off the node's dim map once
  uint64_t get(ValueId v, int64_t flat);
  void compute(ValueId v, int64_t flat);
  void materialize(NodeId n);
  void charge(int64_t w);
  Slot& slot(ValueId v);  // allocated for position-wise writes
  // Operands of a reduction op that are a chain of movement ops over data
  // already held are made whole first, so the reduction reads them directly.
  bool movement_of_held(ValueId v);
  const uint64_t* dense_if_cheap(ValueId v);

  void elementwise(const Node& n, ValueId v, int64_t flat);
  void copy(const Node& n, const PointPlan& p, ValueId v, int64_t flat);
  void product_sum(const Node& n, const PointPlan& p, ValueId v, int64_t flat);
  void row(const Node& n, const PointPlan& p, ValueId v, int64_t flat);

  const Graph& g_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::unique_ptr<PointPlan>> plans_;
  int64_t* work_;
  int64_t budget_;
  std::vector<int64_t> idx_, values_;  // scratch: free again before each recursive get
};

// Multiply-adds the reference kernels spend on `g` (an estimate that counts
// MatMul, Gemm and Conv by their outputs times their contracted factors, and
// other ops by their outputs).
int64_t full_evaluation_work(const Graph& g);

}  // namespace tessera::verifier
