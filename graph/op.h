// Op kinds and their definitions. ops.def lists every kind once; op_def(kind)
// gives the one record that holds everything about a kind: family, attribute
// schema, arity, shape inference, reference kernels, linearity, its dimension
// map (dim_map.h) and what its sharding strategies need beyond the map
// (strategy.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/attrs.h"
#include "graph/dim_map.h"
#include "graph/tensor.h"
#include "graph/zp.h"

namespace tessera {

enum class OpKind : uint16_t {
#define TESSERA_OP(name, family) k##name,
#include "graph/ops.def"
#undef TESSERA_OP
};
// The family column of ops.def. Code reads it: element-wise ops evaluate
// position by position, collectives need a mesh, and the search bounds its
// subprograms by family.
enum class OpFamily : uint8_t { kElementwise, kReduce, kNn, kMovement, kCollective };
const char* op_family_name(OpFamily f);

inline constexpr int kNumOpKinds = 0
#define TESSERA_OP(name, family) +1
#include "graph/ops.def"
#undef TESSERA_OP
    ;

// The op's name as in ONNX ("Conv"); collectives use their IR names.
const char* op_name(OpKind kind);

// Ops that only reinterpret the shape of a row-major buffer.
inline bool is_reshape_like(OpKind k) { return k == OpKind::kReshape || k == OpKind::kFlatten; }

std::optional<OpKind> op_from_name(std::string_view name);

struct Node;
class Graph;

struct AttrSpec {
  std::string name;
  AttrType type;
  std::optional<AttrValue> default_value;  // nullopt: required
};

// What shape inference sees: the node, its input types, and the data of the
// inputs that are constants (nullptr otherwise), for the few ops whose output
// shape depends on values (Range, ConstantOfShape).
struct InferContext {
  const Node& node;
  std::vector<TensorType> inputs;  // omitted optional inputs have rank -1 (see has_input)
  std::vector<const Tensor*> constants;
  std::vector<bool> present;

  bool has_input(size_t i) const { return i < present.size() && present[i]; }
};
using InferFn = std::vector<TensorType> (*)(const InferContext&);

// A tensor as the reference interpreter holds it: floating dtypes in the
// number type T, integer and bool dtypes as int64 (indices, masks, shapes).
template <class T>
struct RefTensor {
  TensorType type;
  std::vector<T> num;
  std::vector<int64_t> ints;

  bool is_num() const { return is_float(type.dtype); }
  int64_t numel() const { return type.numel(); }
};

// Device-mesh context for collectives: all ranks' copies of the inputs.
struct MeshEvalContext;

template <class T>
struct EvalArgs {
  const Node& node;
  std::vector<const RefTensor<T>*> inputs;  // nullptr for omitted optional inputs
  std::vector<RefTensor<T>>* outputs;       // pre-sized; types already set by shape inference
  const MeshEvalContext* mesh = nullptr;    // set only when evaluating on a mesh
};
template <class T>
using EvalFn = void (*)(const EvalArgs<T>&);

// Which inputs the op is linear in, and how. `separately`: linear in each
// listed input with the others fixed (MatMul, Conv without bias, Mul);
// otherwise linear in the listed inputs jointly (Add, Concat, Transpose).
struct Linearity {
  uint32_t inputs_mask = 0;
  bool separately = false;

  bool linear_in(int i) const { return (inputs_mask >> i) & 1u; }
  bool any() const { return inputs_mask != 0; }
};

struct AxisStrategy;  // strategy.h

// What a straightforward kernel does per output element of an element-wise
// op: `ops` basic vector operations (each one FMA slot: an add, a compare, a
// multiply-add; a divide or square root counts 4, its reciprocal throughput
// against an FMA's on AVX-512 and on GPUs' SFU-less paths) and
// `transcendentals` calls of exp/log/tanh/erf/sin/cos. The one table of
// element arithmetic: FLOP counts (cost/flops.cc: ops + transcendentals) and
// the kernel model (cost/kernel_model.cc: ops + transcendentals x the
// profile's transcendental_ops) both read it.
struct Arithmetic {
  double ops = 1;
  double transcendentals = 0;
};
// For the few kinds whose arithmetic depends on their operands (Pow by a
// constant exponent).
using ArithmeticFn = Arithmetic (*)(const Graph& g, const Node& node);
// FLOPs of a node whose shapes or attributes decide them (MatMul, Conv,
// Resize).
using FlopsFn = int64_t (*)(const Graph& g, const Node& node);

// Rewrites the attributes that hold sizes (Reshape's shape, a Conv's group
// count) for a rank's local shapes.
using LocalizeFn = void (*)(const DimMapContext& global, Attrs& local_attrs, const std::vector<Shape>& local_in,
                            const std::vector<Shape>& local_out);
// Strategies on one mesh axis of `axis_size` ranks that the dim map does not
// give (Gather's vocab-parallel split).
using ExplicitStrategiesFn = std::vector<AxisStrategy> (*)(const Graph& g, const Node& node, int64_t axis_size);

struct OpDef {
  OpKind kind;
  OpFamily family = OpFamily::kElementwise;
  int min_inputs = 1;
  int max_inputs = 1;   // -1: variadic
  int min_outputs = 1;
  int max_outputs = 1;  // -1: variadic (Split)
  std::vector<AttrSpec> attrs;
  InferFn infer = nullptr;
  EvalFn<float> eval_f32 = nullptr;
  EvalFn<double> eval_f64 = nullptr;
  EvalFn<Zp> eval_zp = nullptr;
  // Linearity given the node (Pad is linear only with value 0, Conv only
  // without bias): a function so that attributes can decide.
  Linearity (*linearity)(const Node&) = nullptr;
  DimMapFn dim_map = nullptr;
  // The output is the input's data under another shape (the reshape family
  // and Identity): runtimes alias its buffer instead of copying.
  bool is_view = false;
  LocalizeFn localize = nullptr;                      // nullptr: the attributes hold no sizes
  ExplicitStrategiesFn explicit_strategies = nullptr;
  // Element-wise kinds: arithmetic per output element (Arithmetic), or the
  // function that gives it where operands decide.
  Arithmetic arithmetic;
  ArithmeticFn arithmetic_of = nullptr;
  // Value-range transfer (verifier/input_ranges.cc): every output value is a
  // value read from one of the inputs in `copies_inputs` (bit i: input i),
  // where `copies_if` (nullptr: always) holds for the node (a scatter without
  // a reduction; a cast into an integer dtype).
  uint32_t copies_inputs = 0;
  bool (*copies_if)(const Graph& g, const Node& node) = nullptr;
  // Input 1's values select entries along this axis of input 0 (Gather,
  // GatherElements, ScatterElements; normalized by the caller); nullptr:
  // input 1 is no index.
  int64_t (*indexed_axis)(const Node& node) = nullptr;
  // The op compares or orders its operands' values (Max, Less, ArgMax,
  // MaxPool, Clip): over Z_p residues its result is no polynomial
  // (verifier/degree.cc).
  bool orders_values = false;
  // Arithmetic per element of input 0 for the kinds that reduce or
  // normalize what they read (a reduction 1 or 2 operations, Softmax 4 and
  // a transcendental, LayerNorm 8, a summing collective 1): the one row the
  // FLOP count and the kernel model read; zero elsewhere.
  Arithmetic input_arithmetic{0, 0};
  // FLOPs (op_flops): `flops` where shapes or attributes decide, else
  // input_arithmetic's ops + transcendentals x the elements of input 0,
  // else the element-wise row's per output element; data movement 0.
  FlopsFn flops = nullptr;

  // output[i] depends only on the inputs at i (after broadcast).
  bool elementwise() const { return family == OpFamily::kElementwise; }
  // Runs over a device mesh: needs every rank's input (AllReduce, ...).
  bool is_collective() const { return family == OpFamily::kCollective; }
};

const OpDef& op_def(OpKind kind);

// Arithmetic per output element of an element-wise node (OpDef::arithmetic,
// or arithmetic_of where operands decide).
Arithmetic op_arithmetic(const Graph& g, const Node& node);

// FLOPs of a node, from its kind's rows (OpDef::flops and the rows after
// it): the one count the cost model, propagation and the report read.
int64_t op_flops(const Graph& g, const Node& node);

// Checks `attrs` against the kind's schema: unknown names and wrong types are
// errors, missing optional attributes get their defaults.
void validate_attrs(OpKind kind, Attrs& attrs);

}  // namespace tessera
