// How the position-wise evaluator (point_eval.h) computes one node's
// elements, read off the node's dim map once: where each output position's
// factors are, which flat input elements each read takes, and which rule
// applies. Internal to the verifier.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/zp.h"

namespace tessera::verifier {

// A pass factor's value at an output position:
// ((idx[dim] - offset) / div) % mod, without the modulo when mod is 0 (the
// dim's major term).
struct Digit {
  int factor = 0;
  size_t dim = 0;
  int64_t offset = 0, div = 1, mod = 0;
};

// base + Σ coef · value of factor, over the pass factors.
struct Affine {
  int64_t base = 0;
  std::vector<std::pair<int, int64_t>> terms;  // (factor, coef)
  int64_t at(const std::vector<int64_t>& values) const {
    int64_t x = base;
    for (const auto& [f, c] : terms) x += c * values[static_cast<size_t>(f)];
    return x;
  }
};

// An input dim that reads the fill outside [0, size): its index is `index`
// plus, in a product-sum, Σ outer[k] · the k-th outer contracted factor.
struct Guard {
  Affine index;
  int64_t size = 0;
  std::vector<int64_t> outer;
};

// One read as a flat element offset into its input.
struct FlatRead {
  size_t input = 0;  // the node's input slot
  Affine flat;
};

// A copy op's piece: positions [lo, hi) read one element (or the fill).
struct CopyPiece {
  std::vector<int64_t> lo, hi;
  std::vector<Digit> digits;
  FlatRead read;
  std::vector<Guard> guards;
};

struct CopyPlan {
  std::vector<std::vector<CopyPiece>> outputs;  // per output, its pieces
  // Several pieces lie side by side along one dim (Concat): their starts
  // along it, for a binary search; -1 to scan.
  std::vector<int> piece_axis;
  std::vector<std::vector<int64_t>> piece_starts;
  uint64_t fill = 0;
};

// alpha · Σ over the contracted factors of a · b, plus beta · each bias read
// (MatMul, Gemm, Conv). The contracted factor that no guard involves runs
// innermost, the others (a Conv's taps) outside it, checked against the guards.
struct ProductSumPlan {
  // The evaluator keeps per-element state for these on its stack: contracted
  // factors outside the inner one (a 3-D Conv has 3 taps), guards, bias reads.
  static constexpr size_t kMaxOuter = 6, kMaxGuards = 6, kMaxBias = 4;
  std::vector<Digit> digits;
  FlatRead a, b;
  std::vector<FlatRead> bias;
  int64_t inner = 1, a_inner = 0, b_inner = 0;  // size and strides of the inner factor
  std::vector<int64_t> outer, a_outer, b_outer;  // sizes and strides of the others
  std::vector<Guard> guards;
  int64_t work = 0;  // products per element
  Zp alpha = Zp::from_u64(1), beta = Zp::from_u64(1);
  bool scaled = false;  // alpha or beta is not 1
};

// An op that computes each output from a slab of its inputs (Softmax's row,
// a reduction's reduced dims, LayerNorm's normalized dims): the kernel runs
// on the slab alone, keeping the rank so that its axes still apply. A slab
// dim is fixed at a pass factor's value, spans the dim, or is a constant index.
struct SlabDim {
  int factor = -1;  // fixed at this factor's value; -1: `full` or `index`
  bool full = false;
  int64_t index = 0;
};

struct RowPlan {
  struct Slab {
    size_t slot = 0;  // input slot or output index
    std::vector<SlabDim> dims;
    Shape shape;
  };
  std::vector<Slab> inputs, outputs;
  std::vector<std::vector<Digit>> digits;    // per output: its position's fixed factors
  std::vector<std::vector<size_t>> writes;   // per requested output: the outputs its slab run fills
  int64_t work = 0;                          // input elements per slab
};

struct PointPlan {
  enum class Mode { kWhole, kElementwise, kView, kCopy, kProductSum, kRow };
  Mode mode = Mode::kWhole;
  bool moves_data = false;  // a copy or a view: movement_of_held may make it whole
  size_t factors = 0;
  CopyPlan copy;
  ProductSumPlan product;
  RowPlan row;
};

// The plan of node `id` of `g` (its dim map read once).
PointPlan make_point_plan(const Graph& g, NodeId id);

// Products per element of MatMul, Gemm and Conv from their maps; 0 for other ops.
int64_t product_sum_work(const Graph& g, const Node& n);

}  // namespace tessera::verifier
