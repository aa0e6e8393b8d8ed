// The dimension map of an op: how each element of each output reads the
// inputs, per dimension. It is the one record of an op's index geometry; the
// verifier's box analysis, the runtimes' strided copies and the sharding
// strategies are all read from it (see DESIGN.md, "Sharding").
//
// Notation: an einsum over *factors*, as in Shardy's sharding rules, with
// affine terms added. An op instance has a list of factors, each a size and
// a kind: a pass factor indexes the output (element-wise dims, batch, M and
// N, output channels, spatial positions), a contracted factor is summed or
// reduced over (MatMul's K, a Conv's input channels and window taps, a
// reduction's axes). Every dim of every output and of every input read is an
// expression over the factors:
//
//   MatMul [B,M,K] x [K,N]:  factors b, m, n (pass), k (sum)
//                             out [b, m, n] = Σ_k  A[b, m, k] · B[k, n]
//   Reshape [8,4] -> [2,16]: factors i(2), j(4), l(4)
//                             out [i, 4j+l] = x[4i+j, l]
//   Conv, stride s, pad p:   out [n, m, o] = Σ_{c,t} x[n, c, s·o + t - p] · w[m, c, t]
//   Concat axis 1:           out [a, f0] = x0[a, f0];  out [a, 3 + f1] = x1[a, f1]
//
// Why factors rather than one index function per output dim (Halide/TVM
// style): a factor is the unit that carries a shard. A dim sharded on its
// major factor passes the shard to every tensor that holds the same factor
// as a major term, which is how Reshape's splits and merges carry a head
// shard; a contracted factor sharded gives Partial. Index functions would
// have to rediscover that structure from expressions. The affine terms keep
// what the verifier needs from index functions: within a box where no
// output dim crosses a period of its minor factor, every read is
// X[L·i + c], with L read off the coefficients.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace tessera {

class Graph;
struct Node;

enum class FactorKind : uint8_t {
  kPass,    // indexes the outputs, read one-to-one
  kSum,     // contracted by a sum of per-element terms: sharding it gives Partial(sum)
  kMean,    // contracted by a mean: Partial(sum) once each rank scales by 1/n
  kReduce,  // contracted otherwise (max, product, a softmax row, norm statistics, a scan)
};
const char* factor_kind_name(FactorKind k);

struct Factor {
  int64_t size = 1;
  FactorKind kind = FactorKind::kPass;
};

struct DimTerm {
  int factor = 0;
  int64_t coef = 1;
  bool operator==(const DimTerm&) const = default;
};

enum class DimForm : uint8_t {
  kAffine,      // offset + Σ coef·factor
  kGathered,    // the index comes from data (Gather's axis, the dims ScatterND writes)
  kPositional,  // a non-affine function of its factors (Resize taps, Trilu's mask, Range)
};

// One dim of a tensor as a function of the factors. For kGathered and
// kPositional dims the terms name the factors the index depends on (their
// coefficients mean nothing); such a dim blocks those factors from sharding.
struct DimExpr {
  DimForm form = DimForm::kAffine;
  std::vector<DimTerm> terms;  // major to minor
  int64_t offset = 0;
  bool guarded = false;  // an index outside [0, size) reads the op's fill (zero padding, Pad's value)
  // Other indices where the op's rule for an element changes as the read
  // crosses them (an AveragePool that counts its padding divides by the taps
  // inside [-pad_begin, size + pad_end)): a read on either side is the same
  // index function but another formula.
  std::vector<int64_t> edges;
  bool operator==(const DimExpr&) const = default;
};

// One read of an input. An op may read an input more than once (Softmax
// reads x at the element and along its row).
struct Read {
  int input = 0;               // the node's input slot
  std::vector<DimExpr> dims;   // one per input dim
  bool bias = false;           // added after the op's sum, not inside it (Gemm's C, Conv's B)
};

// The part of one output that a set of reads computes: the whole output,
// except for Concat (one piece per input). Output dims are affine merges of
// pass factors, major to minor, with an offset for a Concat piece.
struct Piece {
  std::vector<DimExpr> dims;
  std::vector<Read> reads;
};

struct DimMap {
  std::vector<Factor> factors;
  std::vector<std::vector<Piece>> outputs;  // per output, its pieces
  // Each output element is the input element its single read selects, or
  // `fill` where a guarded dim falls outside (the movement ops).
  bool copies = false;
  double fill = 0;
  // Each output element is product_scale · Σ over the contracted (sum)
  // factors of the product of the non-bias reads, plus bias_scale · the bias
  // reads (MatMul, Gemm, Conv): the arithmetic, besides the geometry.
  bool products = false;
  double product_scale = 1, bias_scale = 1;
};

// What an op's dim-map function sees: the node and its inputs' and outputs'
// shapes (omitted optional inputs have present[i] false).
struct DimMapContext {
  const Node& node;
  std::vector<Shape> in;
  std::vector<Shape> out;
  std::vector<bool> present;
  bool has_input(size_t i) const { return i < present.size() && present[i]; }
};
using DimMapFn = DimMap (*)(const DimMapContext&);

// The dim map of a node of `g` (from op_def(kind).dim_map).
DimMap dim_map(const Graph& g, const Node& n);
DimMap dim_map(const Node& n, const std::vector<Shape>& in, const std::vector<Shape>& out,
               const std::vector<bool>& present);

// A mixed-radix merge of affine terms: terms major to minor where each
// coefficient is the product of the sizes of the terms after it, the last
// coefficient 1, no offset and no guard. Its index is the row-major flat
// index of its factors.
bool is_merge(const DimMap& m, const DimExpr& e);
// A merge that covers a dim of `size` exactly: the dim *is* its factors
// (what lets a shard of the dim be a shard of its major factor).
bool is_plain(const DimMap& m, const DimExpr& e, int64_t size);
// The factor values at output position `pos` of a merge dim (with Concat's
// offset removed); false if pos is outside the piece.
bool decompose(const DimMap& m, const DimExpr& e, int64_t pos, std::vector<int64_t>& factor_values);
// The index an affine dim reads at the given factor values.
int64_t evaluate(const DimExpr& e, const std::vector<int64_t>& factor_values);
// Where a piece lies along its output dims: [lo, hi) per dim.
void piece_range(const DimMap& m, const Piece& p, const Shape& out, std::vector<int64_t>& lo,
                 std::vector<int64_t>& hi);

// A copy op's read as strides: output element i (row-major over `out`)
// reads input element offset + Σ_d i_d · stride[d]. Exists when the map
// copies, has one piece per output and no guard, and every output dim is a
// single factor (or constant): Transpose, Slice, Expand, a Split output,
// one Concat input placed at `dst_offset` of the output. nullopt otherwise.
struct StridedRead {
  int input = 0;
  int64_t src_offset = 0;
  std::vector<int64_t> src_strides;  // per output dim, in input elements
  std::vector<int64_t> dst_lo;       // where the piece starts in the output
  Shape extent;                      // the piece's shape
};
std::vector<StridedRead> strided_reads(const DimMap& m, size_t output, const Shape& out,
                                       const std::vector<Shape>& in);

std::string dim_map_str(const DimMap& m);  // for tests and --dump

// Builders for the family files.
namespace dims {

// One factor per dim of `out`; each input broadcast (numpy, right-aligned)
// onto it: element-wise ops.
DimMap elementwise(const DimMapContext& c);
DimExpr factor(int f);
std::vector<DimExpr> factors(const std::vector<int>& fs);  // one single-factor dim each
DimExpr merge(const DimMap& m, const std::vector<int>& factors, int64_t offset = 0);
DimExpr affine(std::vector<DimTerm> terms, int64_t offset, bool guarded);
DimExpr constant_zero();
DimExpr positional(std::vector<int> factors, DimForm form = DimForm::kPositional);
// Input dims right-aligned onto output dims whose factors are `out_factors`
// (-1 for a constant dim): equal sizes read the factor, size 1 reads 0.
std::vector<DimExpr> broadcast(const Shape& in, const Shape& out, const std::vector<int>& out_factors);
// Reshape's factors: each run of dims with equal products splits into the
// factors between the suffix products of both sides when those divide each
// other; a run where they do not is one positional factor.
DimMap reshape(const Shape& in, const Shape& out);
int add_factor(DimMap& m, int64_t size, FactorKind kind = FactorKind::kPass);

}  // namespace dims

}  // namespace tessera
