#include "cost/kernel_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cost/collective_model.h"
#include "cost/flops.h"
#include "cost/gemm_model.h"
#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/fusion_groups.h"
#include "graph/permute.h"
#include "graph/ops/op_util.h"

namespace tessera::cost {

namespace {

int64_t product(const Shape& s, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  auto end = s.begin() + static_cast<std::ptrdiff_t>(std::min(to, s.size()));
  for (auto it = s.begin() + static_cast<std::ptrdiff_t>(std::min(from, s.size())); it < end; ++it) p *= *it;
  return p;
}

// As the device stores it (DeviceProfile::widened).
double bytes_of(const Graph& g, const DeviceProfile& d, ValueId v) { return v == kNoValue ? 0.0 : d.stored_bytes(g.type(v)); }

// Total capacity of a level across the device.
double level_capacity(const DeviceProfile& d, size_t i) {
  const MemoryLevel& m = d.memory[i];
  return static_cast<double>(m.capacity_bytes) * static_cast<double>(m.per_unit ? d.units : 1);
}

// Vector operations per output element for element-wise kinds (the op
// table's arithmetic row, graph/op.h); a transcendental costs the profile's
// transcendental_ops.
double vector_ops(const Graph& g, const Node& n, const DeviceProfile& d) {
  Arithmetic a = op_arithmetic(g, n);
  return a.ops + a.transcendentals * d.transcendental_ops;
}

// The same per element of input 0 for the kinds that reduce or normalize
// what they read (OpDef::input_arithmetic: the row op_flops reads too).
double input_ops(const Node& n, const DeviceProfile& d) {
  const Arithmetic& a = op_def(n.kind).input_arithmetic;
  return a.ops + a.transcendentals * d.transcendental_ops;
}

// What one kernel does, before it becomes time.
struct Work {
  std::map<DType, int64_t> flops;
  std::map<DType, double> matrix_flops;  // run on the matrix units at `utilization`
  double utilization = 1.0;
  double utilization_one_core = 1.0;  // the same GEMM run on one core
  bool conv = false;  // matrix work of a convolution (conv_efficiency)
  double conv_k = 0;  // its reduction length per group (conv_efficiency_at)
  double conv_calls = 0;  // micro-kernel calls (DeviceProfile::conv_call_s)
  double cold_bytes = 0;  // GEMM weights read from main memory
  std::map<DType, double> vector_ops;    // each occupies one FMA slot (2 FLOP of peak)
  std::vector<double> level_bytes;
  double comm_s = 0;
  std::string comm_tier;
  bool launches = true;
  // A copy loop (Transpose, and the strided copies of Slice, Concat, Split
  // and Pad): its per-element and per-run work is the loop that moves the
  // bytes, so it adds to their time rather than hiding behind it (as the
  // calibration fits permute_ops and permute_run_ops: the time on top of
  // the bytes').
  bool copy_loop = false;
};

// Everything a streaming kernel touches: inputs (once) plus outputs.
struct Footprint {
  double warm = 0;  // activations
  double cold = 0;  // weights when they do not all fit in the last cache
  std::vector<ValueId> reads;  // the activations read (CostOptions::reuse_distance)
};

Footprint footprint(const Graph& g, const DeviceProfile& d, const std::vector<ValueId>& reads,
                    const std::vector<ValueId>& writes, bool weights_cold) {
  Footprint f;
  for (ValueId v : reads) {
    if (v == kNoValue) continue;
    (weights_cold && g.value(v).is_constant() ? f.cold : f.warm) += bytes_of(g, d, v);
    if (!g.value(v).is_constant()) f.reads.push_back(v);
  }
  for (ValueId v : writes) f.warm += bytes_of(g, d, v);
  return f;
}

// The level a value sits in when a kernel reads it, by its reuse distance
// (CostOptions::reuse_distance): the smallest cache that holds it and the
// bytes touched since; `none` where nothing is known of it.
size_t resident_level(const Graph& g, const DeviceProfile& d, const CostOptions& o, ValueId v, size_t none) {
  if (!o.warm_cache || !o.reuse_distance || static_cast<size_t>(v) >= o.reuse_distance->size()) return none;
  double distance = (*o.reuse_distance)[static_cast<size_t>(v)];
  if (distance < 0) return none;
  for (size_t i = 0; i + 1 < d.memory.size(); ++i)
    if (distance + bytes_of(g, d, v) <= level_capacity(d, i)) return i;
  return d.memory.size() - 1;
}

// Fills per-level bytes from the model's traffic `modelled` (what a cold
// kernel moves at each level): with warm caches, levels outside the one that
// holds the whole working set see only the cold bytes, and the activations
// read that sit further out than it (resident_level) once.
void place_bytes(const Graph& g, const DeviceProfile& d, const CostOptions& o, const Footprint& f,
                 const std::vector<double>& modelled, Work& w) {
  w.level_bytes.assign(d.memory.size(), 0.0);
  double working_set = f.warm + f.cold;
  size_t holds = d.memory.size() - 1;
  if (o.warm_cache) {
    for (size_t i = 0; i + 1 < d.memory.size(); ++i)
      if (working_set <= level_capacity(d, i)) {
        holds = i;
        break;
      }
  }
  for (size_t i = 0; i < d.memory.size(); ++i) w.level_bytes[i] = i <= holds ? modelled[i] : f.cold;
  for (ValueId v : f.reads)
    for (size_t i = holds + 1; i <= resident_level(g, d, o, v, 0) && i < d.memory.size(); ++i)
      w.level_bytes[i] += bytes_of(g, d, v);
}

void stream(const Graph& g, const DeviceProfile& d, const CostOptions& o, const Footprint& f, Work& w,
            double inner_passes = 1.0, size_t passes_up_to = 0) {
  // A kernel that makes several passes over its input re-reads it from the
  // levels that hold a slice (e.g. one row of a softmax) and reads it once
  // from those further out.
  std::vector<double> modelled(d.memory.size(), f.warm + f.cold);
  for (size_t i = 0; i <= passes_up_to && i < d.memory.size(); ++i) modelled[i] *= inner_passes;
  place_bytes(g, d, o, f, modelled, w);
}

void add_vector(Work& w, DType t, double ops) { w.vector_ops[t] += ops; }

void gemm_work(const Graph& g, const DeviceProfile& d, const CostOptions& o, const GemmProblem& p, DType t,
               int64_t flops, const Footprint& f, Work& w) {
  std::vector<Tile> tiles = gemm_tiles(p, d);
  std::vector<double> modelled = gemm_level_bytes(p, tiles);
  // The compulsory traffic of constants and activations as they are stored
  // (a convolution's input is read once even if A is implicit).
  for (double& b : modelled) b = std::max(b, f.warm + f.cold);
  place_bytes(g, d, o, f, modelled, w);
  w.matrix_flops[t] += static_cast<double>(flops);
  w.cold_bytes += f.cold;
  w.utilization = gemm_utilization(p, d, tiles.size() > 1 ? tiles[1] : tiles[0]);
  w.utilization_one_core = gemm_utilization(p, d, tiles.size() > 1 ? tiles[1] : tiles[0], 1);
}

// MatMul: numpy matmul. A B without batch dims is shared by every batch
// entry, so the batch folds into M (one large GEMM).
void matmul_work(const Graph& g, const Node& n, const DeviceProfile& d, const CostOptions& o, bool cold, Work& w) {
  const TensorType& a = g.type(n.inputs[0]);
  const TensorType& b = g.type(n.inputs[1]);
  const TensorType& y = g.type(n.outputs[0]);
  GemmProblem p;
  int64_t ra = a.rank(), rb = b.rank();
  p.k = a.shape.back();
  p.m = ra >= 2 ? a.shape[static_cast<size_t>(ra - 2)] : 1;
  p.n = rb >= 2 ? b.shape.back() : 1;
  int64_t batch = std::max<int64_t>(1, y.numel() / std::max<int64_t>(1, p.m * p.n));
  if (rb <= 2) p.m *= batch;
  else p.batch = batch;
  p.a_bytes_per_elem = static_cast<int64_t>(d.stored_size(a.dtype));
  p.b_bytes_per_elem = static_cast<int64_t>(d.stored_size(b.dtype));
  p.c_bytes_per_elem = static_cast<int64_t>(d.stored_size(y.dtype));
  gemm_work(g, d, o, p, a.dtype, node_flops(g, n), footprint(g, d, n.inputs, n.outputs, cold), w);
}

void gemm_node_work(const Graph& g, const Node& n, const DeviceProfile& d, const CostOptions& o, bool cold, Work& w) {
  const TensorType& a = g.type(n.inputs[0]);
  const TensorType& b = g.type(n.inputs[1]);
  const TensorType& y = g.type(n.outputs[0]);
  GemmProblem p;
  p.m = y.shape[0];
  p.n = y.shape[1];
  p.k = GemmAttrs::of(n).transA ? a.shape[0] : a.shape[1];
  p.a_bytes_per_elem = static_cast<int64_t>(d.stored_size(a.dtype));
  p.b_bytes_per_elem = static_cast<int64_t>(d.stored_size(b.dtype));
  p.c_bytes_per_elem = static_cast<int64_t>(d.stored_size(y.dtype));
  int64_t f = node_flops(g, n);
  bool bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  gemm_work(g, d, o, p, a.dtype, bias ? f - y.numel() : f, footprint(g, d, n.inputs, n.outputs, cold), w);
  if (bias) add_vector(w, y.dtype, static_cast<double>(y.numel()));
}

// Convolution as an implicit GEMM per group: M = output pixels, N = output
// channels per group, K = input channels per group x kernel window. With a
// channel or two per group (depthwise) there is no GEMM to block: the
// kernel vectorizes over channels and streams its operands.
// The fraction of a Conv's window taps that read the input rather than its
// padding: oneDNN skips the others (DeepLab's ASPP, dilation 36 on a 28-px
// map, reads padding in most taps and runs 7x under its full count).
double conv_valid_fraction(const Graph& g, const Node& n) {
  const Shape& xs = g.type(n.inputs[0]).shape;
  const Shape& ys = g.type(n.outputs[0]).shape;
  const WindowAttrs window = WindowAttrs::of(n);
  const auto& k = window.kernel_shape;
  const auto& s = window.strides;
  const auto& dil = window.dilations;
  const auto& p = window.pads;
  size_t r = k.size();
  if (xs.size() != r + 2 || ys.size() != r + 2 || s.size() != r || dil.size() != r || p.size() != 2 * r) return 1.0;
  double frac = 1.0;
  for (size_t a = 0; a < r; ++a) {
    int64_t in = xs[a + 2], out = ys[a + 2], valid = 0;
    if (out <= 0 || k[a] <= 0) return 1.0;
    for (int64_t t = 0; t < k[a]; ++t) {
      // Outputs o with 0 <= o * s - p + t * dil < in.
      int64_t off = t * dil[a] - p[a];
      int64_t lo = off >= 0 ? 0 : (-off + s[a] - 1) / s[a];
      int64_t hi = in - 1 - off < 0 ? -1 : std::min(out - 1, (in - 1 - off) / s[a]);
      valid += std::max<int64_t>(0, hi - lo + 1);
    }
    frac *= static_cast<double>(valid) / static_cast<double>(out * k[a]);
  }
  return frac;
}

void conv_work(const Graph& g, const Node& n, const DeviceProfile& d, const CostOptions& o, bool cold, Work& w) {
  const TensorType& x = g.type(n.inputs[0]);
  const TensorType& wt = g.type(n.inputs[1]);
  const TensorType& y = g.type(n.outputs[0]);
  int64_t groups = n.kind == OpKind::kConv ? ConvAttrs::of(n).group : ConvTransposeAttrs::of(n).group;
  bool bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  int64_t flops = node_flops(g, n) - (bias ? y.numel() : 0);
  // Only mostly-padding windows get the correction: ordinary padding (a 3x3
  // pad-1 convolution's border taps, 1-4% of its count) is within the
  // calibrated convolution efficiency, which was measured with it.
  if (n.kind == OpKind::kConv) {
    double valid = conv_valid_fraction(g, n);
    if (valid < 0.75) flops = static_cast<int64_t>(static_cast<double>(flops) * valid);
  }
  Footprint f = footprint(g, d, n.inputs, n.outputs, cold);
  int64_t cout_per_group = wt.shape[0] / groups;
  if (n.kind == OpKind::kConv && cout_per_group * 4 < d.register_tile[1] && groups > 1) {
    std::vector<double> modelled(d.memory.size(), f.warm + f.cold);
    // Level 0 feeds every window position's load.
    modelled[0] = std::max(modelled[0], static_cast<double>(y.numel()) * product(wt.shape, 1) *
                                            static_cast<double>(d.stored_size(x.dtype)));
    place_bytes(g, d, o, f, modelled, w);
    // FMA on the vector units: 2 FLOP of peak per multiply-add.
    add_vector(w, x.dtype, static_cast<double>(flops) / 2.0);
  } else {
    GemmProblem p;
    p.batch = groups;
    if (n.kind == OpKind::kConv) {
      p.m = y.shape[0] * product(y.shape, 2);
      p.n = cout_per_group;
      p.k = product(wt.shape, 1);
      p.a_unique_elems = std::min(p.m * p.k, x.numel() / groups);
    } else {  // ConvTranspose: GEMM to columns, then scatter (col2im)
      p.m = x.shape[0] * product(x.shape, 2);
      p.n = wt.shape[1] * product(wt.shape, 2);
      p.k = wt.shape[0] / groups;
    }
    p.a_bytes_per_elem = p.b_bytes_per_elem = static_cast<int64_t>(d.stored_size(x.dtype));
    p.c_bytes_per_elem = static_cast<int64_t>(d.stored_size(y.dtype));
    gemm_work(g, d, o, p, x.dtype, flops, f, w);
    w.conv = true;
    w.conv_k = static_cast<double>(p.k);
    if (n.kind == OpKind::kConv) w.conv_calls = static_cast<double>(y.shape[0] * product(y.shape, 2) / y.shape.back() *
                                                                    product(wt.shape, 2));
  }
  if (bias) add_vector(w, y.dtype, static_cast<double>(y.numel()));
}

// Reductions: passes over the input, re-read from the level that holds one
// reduced slice (a row), read once from further out.
void reduce_work(const Graph& g, const Node& n, const DeviceProfile& d, const CostOptions& o, bool cold, Work& w) {
  const TensorType& x = g.type(n.inputs[0]);
  DType t = x.dtype;
  double elems = static_cast<double>(x.numel());
  double passes = 1, ops_per_elem = input_ops(n, d);
  int64_t slice = x.numel();
  switch (n.kind) {
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax: {
      passes = 3;  // max, sum of exp, normalize
      int64_t axis = SoftmaxAttrs::of(n).axis;
      if (axis < 0) axis += x.rank();
      slice = product(x.shape, static_cast<size_t>(axis));
      break;
    }
    case OpKind::kLayerNormalization: {
      passes = 2;  // statistics, then normalize
      int64_t axis = LayerNormAttrs::of(n).axis;
      if (axis < 0) axis += x.rank();
      slice = product(x.shape, static_cast<size_t>(axis));
      break;
    }
    default: break;
  }
  if ((n.kind == OpKind::kSoftmax || n.kind == OpKind::kLogSoftmax) && d.kind == DeviceKind::kCpu) {
    if (d.softmax_ops > 0) ops_per_elem = d.softmax_ops;
    if (slice > 0) add_vector(w, t, elems / static_cast<double>(slice) * d.softmax_row_ops);
  }
  size_t holds_slice = 0;
  double slice_bytes = static_cast<double>(slice) * static_cast<double>(d.stored_size(t));
  while (holds_slice + 1 < d.memory.size() &&
         slice_bytes > static_cast<double>(d.memory[holds_slice].capacity_bytes) / 2)
    ++holds_slice;
  stream(g, d, o, footprint(g, d, n.inputs, n.outputs, cold), w, passes, holds_slice);
  add_vector(w, t, elems * ops_per_elem);
}

// Pooling: every window position is a load from the fastest level; the
// input is read once from further out.
void pool_work(const Graph& g, const Node& n, const DeviceProfile& d, const CostOptions& o, bool cold, Work& w) {
  const TensorType& x = g.type(n.inputs[0]);
  const TensorType& y = g.type(n.outputs[0]);
  Footprint f = footprint(g, d, n.inputs, n.outputs, cold);
  std::vector<double> modelled(d.memory.size(), f.warm + f.cold);
  double window = static_cast<double>(product(WindowAttrs::of(n).kernel_shape));
  modelled[0] = std::max(modelled[0], static_cast<double>(y.numel()) * window * static_cast<double>(d.stored_size(x.dtype)));
  place_bytes(g, d, o, f, modelled, w);
  add_vector(w, x.dtype, static_cast<double>(y.numel()) * window);
}

// Resize: the input is read once from further out; every tap of every
// one-axis pass is a load from the fastest level (as a pooling window), and
// a multiply-add on the vector units for linear and cubic (nearest: one
// copy per output element).
void resize_work(const Graph& g, const Node& n, const DeviceProfile& d, const CostOptions& o, bool cold, Work& w) {
  const TensorType& x = g.type(n.inputs[0]);
  double out = static_cast<double>(g.type(n.outputs[0]).numel());
  Footprint f = footprint(g, d, n.inputs, n.outputs, cold);
  std::vector<double> modelled(d.memory.size(), f.warm + f.cold);
  double taps = std::max(out, static_cast<double>(node_flops(g, n)) / 2.0);
  modelled[0] = std::max(modelled[0], taps * static_cast<double>(d.stored_size(x.dtype)));
  place_bytes(g, d, o, f, modelled, w);
  add_vector(w, x.dtype, taps);
}

// The contiguous runs a Slice, Concat, Split or Pad copies, as the
// runtime's strided copy merges dims (runtime/cpu/strided_copy.h): the
// elements after the innermost dim the op cuts are one run with it; 0 for
// other ops and for a copy that is one run per tensor.
double copy_runs(const Graph& g, const Node& n) {
  // Elements over the length of the contiguous run of `inner` (the dims the
  // op leaves whole after `axis`) times the kept extent along `axis`.
  auto runs = [](const Shape& s, size_t axis, int64_t kept) {
    double run = static_cast<double>(kept);
    for (size_t d = axis + 1; d < s.size(); ++d) run *= static_cast<double>(s[d]);
    double numel = static_cast<double>(shape_numel(s));
    return run > 0 && numel > run ? numel / run : 0.0;
  };
  switch (n.kind) {
    case OpKind::kSlice: {
      const Shape& x = g.type(n.inputs[0]).shape;
      const Shape& y = g.type(n.outputs[0]).shape;
      const SliceAttrs slice = SliceAttrs::of(n);
      const auto& steps = slice.steps;
      std::vector<int64_t> axes = ops::normalize_axes(slice.axes, static_cast<int64_t>(x.size()));
      for (size_t a = x.size(); a-- > 0;) {
        bool strided = false;
        for (size_t i = 0; i < axes.size(); ++i) strided |= axes[i] == static_cast<int64_t>(a) && steps[i] != 1;
        if (strided) return runs(y, a, 1);
        if (y[a] != x[a]) return runs(y, a, y[a]);
      }
      return 0;
    }
    case OpKind::kConcat:
    case OpKind::kSplit: {
      const std::vector<ValueId>& parts = n.kind == OpKind::kConcat ? n.inputs : n.outputs;
      const Shape& whole = g.type(n.kind == OpKind::kConcat ? n.outputs[0] : n.inputs[0]).shape;
      int64_t a = n.kind == OpKind::kConcat ? ConcatAttrs::of(n).axis : SplitAttrs::of(n).axis;
      auto axis = static_cast<size_t>(ops::normalize_axis(a, static_cast<int64_t>(whole.size())));
      double total = 0;
      for (ValueId v : parts) {
        const Shape& s = g.type(v).shape;
        total += runs(s, axis, s[axis]);
      }
      return total;
    }
    case OpKind::kPad: {
      const Shape& x = g.type(n.inputs[0]).shape;
      const Shape& y = g.type(n.outputs[0]).shape;
      for (size_t a = x.size(); a-- > 0;)
        if (y[a] != x[a]) return runs(x, a, x[a]);
      return 0;
    }
    default: return 0;
  }
}

// Data movement reads what it writes (Slice, Gather read only the
// elements they keep), except kinds that read their whole input. A scatter
// copies its data (read, written), then reads its indices and updates and
// writes the updates again at their positions: a KV cache written at one
// position moves the whole cache twice and the new entries twice.
void movement_work(const Graph& g, const Node& n, const DeviceProfile& d, const CostOptions& o, bool cold, Work& w) {
  std::vector<ValueId> reads = n.inputs;
  Footprint f;
  switch (n.kind) {
    case OpKind::kSlice:
    case OpKind::kGather:
    case OpKind::kGatherElements: {
      f = footprint(g, d, {}, n.outputs, cold);
      f.warm *= 2;  // the kept elements are read, then written
      for (size_t i = 1; i < n.inputs.size(); ++i) f.warm += bytes_of(g, d, n.inputs[i]);
      break;
    }
    case OpKind::kScatterND:
    case OpKind::kScatterElements:
      f = footprint(g, d, reads, n.outputs, cold);
      f.warm += bytes_of(g, d, n.inputs[2]);
      break;
    default:
      f = footprint(g, d, reads, n.outputs, cold);
      break;
  }
  stream(g, d, o, f, w);
  if (double runs = copy_runs(g, n); runs > 0) {
    // Slice, Concat, Split and Pad copy contiguous runs (the runtime's
    // strided copy): a cost per run, as a Transpose that keeps its last axes
    // pays (llama's rotary Slice of [1, 8, 128, 64] to 32 columns: 1024 runs
    // of 128 bytes, 5.5 us on a Zen 5 core against 1.4 us of bytes).
    add_vector(w, g.type(n.outputs[0]).dtype, runs * d.permute_run_ops);
    w.copy_loop = true;
  }
  if (n.kind == OpKind::kTranspose) {
    // As the runtime copies it (runtime/cpu/strided_copy.cc): axes of size
    // 1 dropped and neighbours that stay neighbours merged; trailing axes
    // kept in place are copied as contiguous runs (a cost per run), any
    // other permutation element by element (a cost per element) in steps of
    // the loop over the outer dims, each step a cost as a run's: a tile of
    // source rows by the innermost dim, or one innermost row (Winograd
    // F(2,3)'s output transform at 14 px moves tiles of 7 x 2 elements, F(4,3)'s
    // at 16 px rows of 16 (4 x 4: a row shorter than a line takes in the next
    // source dim) by 4).
    const std::vector<int64_t> perm = TransposeAttrs::of(n).perm;
    const Shape& in = g.type(n.inputs[0]).shape;
    std::vector<int64_t> strides = shape_strides(in);
    std::vector<std::pair<int64_t, int64_t>> dims;  // merged output dims: extent, source stride
    for (int64_t p : perm) {
      int64_t extent = in[static_cast<size_t>(p)], stride = strides[static_cast<size_t>(p)];
      if (extent == 1) continue;
      if (!dims.empty() && dims.back().second == stride * extent) dims.back() = {dims.back().first * extent, stride};
      else dims.push_back({extent, stride});
    }
    double numel = static_cast<double>(g.type(n.outputs[0]).numel());
    double ops = 0;
    if (dims.empty() || dims.back().second == 1) {
      // Contiguous runs of the innermost (merged) dim.
      ops = (dims.empty() ? 1 : numel / static_cast<double>(dims.back().first)) * d.permute_run_ops;
    } else {
      // A step is a tile of source rows (graph/permute.h, copy_row) by the
      // innermost dim.
      std::vector<int64_t> extents, src_strides;
      size_t t = 0;
      for (size_t i = 0; i + 1 < dims.size(); ++i) {
        extents.push_back(dims[i].first);
        src_strides.push_back(dims[i].second);
        if (dims[i].second == 1) t = i;
      }
      int64_t row =
          copy_row(extents, src_strides, t, static_cast<int64_t>(d.stored_size(g.type(n.outputs[0]).dtype))).elements;
      double per_step = static_cast<double>(dims.back().first) * static_cast<double>(row);
      ops = numel * d.permute_ops + numel / per_step * d.permute_run_ops;
    }
    add_vector(w, g.type(n.outputs[0]).dtype, ops);
    w.copy_loop = ops > 0;
  }
}

void root_work(const Graph& g, const Node& n, const DeviceProfile& d, const CostOptions& o, bool cold, Work& w) {
  const OpDef& def = op_def(n.kind);
  if (is_view_node(g, n)) {
    // The runtime makes these views of their input (a Cast to the type it
    // has is one too): no kernel runs.
    w.level_bytes.assign(d.memory.size(), 0.0);
    w.launches = false;
    return;
  }
  if (def.is_collective()) {
    CollectiveCost c = collective_node_cost(g, n, d, o.mesh);
    w.level_bytes.assign(d.memory.size(), 0.0);
    w.comm_s = c.time_s;
    w.comm_tier = c.tier;
    if (double ops = input_ops(n, d); ops > 0)  // a summing collective's adds
      add_vector(w, g.type(n.inputs[0]).dtype, static_cast<double>(g.type(n.inputs[0]).numel()) * ops);
    return;
  }
  switch (n.kind) {
    case OpKind::kMatMul: return matmul_work(g, n, d, o, cold, w);
    case OpKind::kGemm: return gemm_node_work(g, n, d, o, cold, w);
    case OpKind::kConv:
    case OpKind::kConvTranspose: return conv_work(g, n, d, o, cold, w);
    case OpKind::kMaxPool:
    case OpKind::kAveragePool: return pool_work(g, n, d, o, cold, w);
    case OpKind::kResize: return resize_work(g, n, d, o, cold, w);
    default: break;
  }
  if (def.elementwise()) {
    stream(g, d, o, footprint(g, d, n.inputs, n.outputs, cold), w);
    const TensorType& y = g.type(n.outputs[0]);
    add_vector(w, g.type(n.inputs[0]).dtype, static_cast<double>(y.numel()) * vector_ops(g, n, d));
    return;
  }
  // The reduce family of ops.def, and the global pools, which reduce their
  // spatial dims.
  if (def.family == OpFamily::kReduce || n.kind == OpKind::kGlobalAveragePool || n.kind == OpKind::kGlobalMaxPool)
    return reduce_work(g, n, d, o, cold, w);
  movement_work(g, n, d, o, cold, w);
}

// A fused post-op adds its arithmetic and reads its other operand once at
// every level out to the one it sits in (a residual or bias; every level
// without reuse distances); the chain's intermediates never reach
// memory, including earlier links a multi-node link (Gelu's erf form) reads
// again. In a product's epilogue (`epilogue`: a CPU MatMul or Gemm) the
// arithmetic costs DeviceProfile::epilogue_ops_scale times as much, and
// each operand of more than one element epilogue_operand_ops per element
// more; a per-column bias right after the product (`bias`) is the
// primitive's bias argument and costs neither.
void post_op_work(const Graph& g, const Node& n, const std::vector<ValueId>& internal, const DeviceProfile& d,
                  const CostOptions& o, bool epilogue, bool bias, Work& w) {
  const TensorType& y = g.type(n.outputs[0]);
  bool priced = epilogue && !bias;
  double ops = vector_ops(g, n, d) * (priced ? d.epilogue_ops_scale : 1.0);
  for (ValueId v : n.inputs) {
    if (v == kNoValue || std::find(internal.begin(), internal.end(), v) != internal.end()) continue;
    size_t sits = g.value(v).is_constant() ? d.memory.size() - 1 : resident_level(g, d, o, v, d.memory.size() - 1);
    for (size_t i = 0; i <= sits && i < w.level_bytes.size(); ++i) w.level_bytes[i] += bytes_of(g, d, v);
    if (priced && g.type(v).numel() > 1) ops += d.epilogue_operand_ops;
  }
  add_vector(w, y.dtype, static_cast<double>(y.numel()) * ops);
}

}  // namespace

int64_t KernelCost::total_flops() const {
  int64_t t = 0;
  for (const auto& [dtype, f] : flops) t += f;
  return t;
}

bool is_view_node(const Graph& g, const Node& n) {
  return op_def(n.kind).is_view ||
         (n.kind == OpKind::kCast && g.type(n.inputs[0]).dtype == g.type(n.outputs[0]).dtype);
}

OneThreadLine one_thread_line(const DeviceProfile& device) {
  OneThreadLine line;
  if (device.kind != DeviceKind::kCpu || device.units < 2 || device.parallel_overhead_s <= 0) return line;
  double cores = static_cast<double>(device.units);
  double break_even_s = device.parallel_overhead_s * cores / (cores - 1);
  double core_macs_per_s = device.peak_flops(DType::kF32, true) * device.gemm_efficiency / cores / 2;
  line.macs = std::max<int64_t>(1, std::llround(break_even_s * core_macs_per_s));
  return line;
}

bool weights_fit_in_cache(const Graph& g, const DeviceProfile& device, const CostOptions& o) {
  if (device.memory.size() < 2) return false;
  return static_cast<double>(g.parameter_bytes() + o.other_parameter_bytes) <=
         level_capacity(device, device.memory.size() - 2) / 2;
}

KernelCost kernel_cost(const Graph& g, const std::vector<NodeId>& nodes, const DeviceProfile& d,
                       const CostOptions& o) {
  TESSERA_CHECK(!nodes.empty(), "kernel without nodes");
  bool cold = !o.warm_cache || !weights_fit_in_cache(g, d, o);
  Work w;
  const Node& root = g.node(nodes[0]);
  root_work(g, root, d, o, cold, w);
  KernelCost k;
  k.label = op_name(root.kind);
  ValueId chain = root.outputs[0];
  std::vector<ValueId> internal = {chain};
  bool product = root.kind == OpKind::kMatMul || root.kind == OpKind::kGemm;
  bool epilogue = d.kind == DeviceKind::kCpu && product;
  // A first-link Add may be the product's bias (is_column_bias); a Gemm
  // with C or an alpha keeps C as its bias or post-op, and the Add a post-op.
  bool takes_bias = root.kind == OpKind::kMatMul ||
                    (root.kind == OpKind::kGemm && (root.inputs.size() < 3 || root.inputs[2] == kNoValue) &&
                     GemmAttrs::of(root).alpha == 1.0);
  for (size_t i = 1; i < nodes.size(); ++i) {
    const Node& post = g.node(nodes[i]);
    if (std::find(post.inputs.begin(), post.inputs.end(), chain) == post.inputs.end() || post.outputs.size() != 1)
      TESSERA_THROW(ErrorKind::kInvalidGraph, "node '" << post.name << "' does not read '" << g.value(chain).name
                                                       << "', so it cannot be fused after it");
    bool bias = i == 1 && takes_bias && post.kind == OpKind::kAdd && post.inputs.size() == 2 &&
                is_column_bias(g, chain, post.inputs[post.inputs[0] == chain ? 1 : 0]);
    post_op_work(g, post, internal, d, o, epilogue, bias, w);
    k.label += std::string("+") + op_name(post.kind);
    chain = post.outputs[0];
    internal.push_back(chain);
  }
  for (NodeId id : nodes) {
    const Node& n = g.node(id);
    DType t = n.inputs.empty() || n.inputs[0] == kNoValue ? g.type(n.outputs[0]).dtype : g.type(n.inputs[0]).dtype;
    int64_t f = node_flops(g, n);
    if (f > 0) k.flops[t] += f;
  }
  // A CPU kernel with little work runs on one core: a share 1/units of the
  // compute peak and of the private levels' bandwidth, and what one core
  // alone streams from the shared ones (DeviceProfile::core_bandwidth: an
  // even share where not measured). Its GEMM's work items all go to that
  // core: no partial wave over the others (tiny_cnn's 1.19 MFLOP
  // convolutions were priced at 20.7 us for both, 11 us measured at 2
  // threads and 11.7 us predicted at 1).
  bool cpu = d.kind == DeviceKind::kCpu && d.units > 1 && w.launches && w.comm_tier.empty();
  bool one_thread = cpu && runs_on_one_thread(g, root, chain, one_thread_line(d));
  bool parallel = cpu && !one_thread;
  for (const auto& [t, f] : w.matrix_flops) {
    // A GEMM too thin to fill the matrix units' tiles (a matrix-vector
    // product) runs as a vector kernel instead, as libraries dispatch it.
    double efficiency = w.conv ? d.conv_efficiency_at(w.conv_k) : d.gemm_efficiency;
    double utilization = one_thread ? w.utilization_one_core : w.utilization;
    double matrix = f / (d.peak_flops(t, true) * efficiency * std::max(utilization, 1e-6));
    double vector = f / (d.peak_flops(t, false) * d.vector_efficiency);
    k.compute_s += std::min(matrix, vector);
  }
  for (const auto& [t, ops] : w.vector_ops) k.compute_s += 2.0 * ops / (d.peak_flops(t, false) * d.vector_efficiency);
  k.level_bytes = w.level_bytes;
  double share = one_thread ? static_cast<double>(d.units) : 1.0;
  k.compute_s *= share;
  // A CPU GEMM whose (prepacked) weights come from main memory does not
  // hide that read behind its arithmetic: the micro-kernel waits for each
  // weight panel as it starts it (bert's 768x768 MatMul: 0.63 ms alone with
  // its weights cached, 0.73 ms inside the model).
  // The sum is bound by whichever part is larger.
  double arithmetic_s = k.compute_s, weights_s = 0;
  if (d.kind == DeviceKind::kCpu && w.cold_bytes > 0) {
    weights_s = w.cold_bytes / (one_thread ? d.core_bandwidth(d.memory.size() - 1) : d.main_memory().effective_bandwidth());
    k.compute_s += weights_s;
  }
  // Micro-kernel calls at one core's cost each (the calibration fits it on
  // one thread), split over the cores by a parallel convolution: the
  // Winograd F(4,3) input transform at 64ch 56px, 32256 calls, took 268-282
  // us on one thread and 142-145 on two (2-vCPU Zen 5 guest, the vCPUs on
  // cores sharing a last cache).
  if (d.kind == DeviceKind::kCpu)
    k.compute_s += w.conv_calls * d.conv_call_s / (parallel ? static_cast<double>(d.units) : 1.0);
  double worst = k.compute_s;
  k.bound = k.compute_s > 0 ? "compute" : "none";
  double slowest_level = 0;
  for (size_t i = 0; i < d.memory.size(); ++i) {
    // One core alone streams a shared level at its own rate (core_bandwidth).
    k.level_s.push_back(k.level_bytes[i] / (one_thread ? d.core_bandwidth(i) : d.memory[i].effective_bandwidth()));
    slowest_level = std::max(slowest_level, k.level_s[i]);
    if (k.level_s[i] > worst) {
      worst = k.level_s[i];
      k.bound = d.memory[i].name;
    }
  }
  if (w.copy_loop) worst = k.compute_s + slowest_level;
  if (k.bound == "compute" && weights_s > arithmetic_s) k.bound = d.main_memory().name;
  k.comm_s = w.comm_s;
  if (k.comm_s > worst) {
    worst = k.comm_s;
    k.bound = w.comm_tier;
  }
  bool gemm = root.kind == OpKind::kConv || root.kind == OpKind::kConvTranspose || root.kind == OpKind::kMatMul ||
              root.kind == OpKind::kGemm;
  k.launch_s = w.launches ? d.launch_overhead_s + (parallel ? d.parallel_overhead_s : 0.0) +
                                (gemm ? d.gemm_overhead_s : 0.0)
                          : 0.0;
  if (k.launch_s > worst) k.bound = "launch";
  k.time_s = worst + k.launch_s;
  k.parallel = parallel;
  return k;
}

}  // namespace tessera::cost
