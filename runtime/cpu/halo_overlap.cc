#include "runtime/cpu/halo_overlap.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/halo_rows.h"
#include "graph/ops/op_util.h"
#include "runtime/cpu/onednn_ops.h"

namespace tessera::runtime::cpu {
namespace {

int64_t aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

// The halo's dim and this rank's band.
struct HaloOf {
  int64_t dim = 0;
  HaloBand band;
};
HaloOf halo_of(const Graph& g, const Node& h) {
  HaloOf o;
  o.band = halo_band_of(g, h, &o.dim);
  return o;
}

// One edge of the band: output rows `out`, computed by `kernel` (built over
// a graph of its own whose input is the slice of X' the piece reads) and
// reordered into those rows of Y.
struct EdgePiece {
  RowRange out;
  RowRange slice;  // rows of X'
  Graph graph;     // the piece's group: input 0 the slice
  std::unique_ptr<OnednnKernel> kernel;
  ValueId in = kNoValue, out_value = kNoValue;
  int64_t in_at = 0, out_at = 0, scratch_at = 0;
  dnnl::reorder place;  // the piece's output into its rows of Y
  dnnl::memory from, to;
  std::vector<std::pair<ValueId, const uint8_t*>> constants;  // read at run time
};

class HaloOverlapKernel : public Kernel {
 public:
  std::unique_ptr<Kernel> halo;
  std::unique_ptr<OnednnKernel> main;
  std::vector<EdgePiece> pieces;
  std::shared_ptr<Onednn> dnn;
  ValueId xp = kNoValue, y = kNoValue;  // the halo's output (in scratch) and the op's
  int64_t outer = 1, xp_rows = 0, inner_bytes = 0;  // X' as [outer, rows, inner]
  int64_t halo_at = 0, main_at = 0, xp_at = 0, total = 0;

  int64_t scratch_bytes() const override { return total; }
  int64_t weight_bytes() const override { return main->weight_bytes(); }
  std::string impl() const override { return main->impl() + " (halo overlapped)"; }
  bool splits() const override { return true; }
  double wait_ms() const override { return wait_ms_; }

  void run(ExecContext& ctx) override {
    start(ctx);
    finish(ctx);
  }
  void start(ExecContext& ctx) override {
    Bind bind(ctx, xp, xp_at);
    ctx.scratch = bind.base + halo_at;
    halo->start(ctx);
    ctx.scratch = bind.base + main_at;
    main->run(ctx);
  }
  void finish(ExecContext& ctx) override {
    Bind bind(ctx, xp, xp_at);
    ctx.scratch = bind.base + halo_at;
    auto t0 = std::chrono::steady_clock::now();
    halo->finish(ctx);
    wait_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (EdgePiece& p : pieces) run_piece(p, ctx, bind.base);
  }

 private:
  // Points X' at its scratch for the call; restores the context after.
  struct Bind {
    Bind(ExecContext& c, ValueId v, int64_t at) : ctx(c), value(v), base(c.scratch), saved(c.ptr[v]) {
      ctx.ptr[v] = base + at;
    }
    ~Bind() {
      ctx.ptr[value] = saved;
      ctx.scratch = base;
    }
    ExecContext& ctx;
    ValueId value;
    uint8_t* base;
    uint8_t* saved;
  };

  void run_piece(EdgePiece& p, ExecContext& ctx, uint8_t* base) const {
    const uint8_t* src = base + xp_at;
    uint8_t* in = base + p.in_at;
    int64_t rows = p.slice.size();
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(in + o * rows * inner_bytes, src + (o * xp_rows + p.slice.lo) * inner_bytes,
                  static_cast<size_t>(rows * inner_bytes));
    ExecContext pc;
    pc.ptr.assign(static_cast<size_t>(p.graph.num_values()), nullptr);
    pc.ptr[p.in] = in;
    pc.ptr[p.out_value] = base + p.out_at;
    for (const auto& [v, data] : p.constants) pc.ptr[v] = const_cast<uint8_t*>(data);
    pc.scratch = base + p.scratch_at;
    pc.one_thread = ctx.one_thread;
    p.kernel->run(pc);
    p.from.set_data_handle(base + p.out_at);
    p.to.set_data_handle(ctx.ptr[y]);
    p.place.execute(dnn->stream, {{DNNL_ARG_FROM, p.from}, {DNNL_ARG_TO, p.to}});
    dnn->stream.wait();
  }

  double wait_ms_ = 0;
};

// The consumer group over a slice of X' of `rows` rows, run with the
// window's padding along dim set to the piece's: a graph of its own.
Graph piece_graph(const Graph& g, const FusedGroup& grp, int64_t dim, int64_t rows, const WindowPiece& piece) {
  const Node& root = g.node(grp.root);
  TensorType t = g.type(root.inputs[0]);
  t.shape[static_cast<size_t>(dim)] = rows;
  Graph pg;
  ValueId chain = pg.add_input("slice", t);
  auto operand = [&](ValueId v) {
    if (v == kNoValue) return kNoValue;
    return pg.add_constant(g.value(v).name, *g.value(v).constant);
  };
  std::vector<ValueId> ins = {chain};
  for (size_t i = 1; i < root.inputs.size(); ++i) ins.push_back(operand(root.inputs[i]));
  Attrs a = root.attrs;
  std::vector<int64_t> pads = WindowAttrs::of(root).pads;
  size_t spatial = pads.size() / 2, j = static_cast<size_t>(dim - 2);
  pads[j] = piece.pad_begin;
  pads[j + spatial] = piece.pad_end;
  a.set("pads", pads);
  chain = pg.add(root.kind, ins, a, root.name);
  ValueId was = root.outputs[0];  // the chain's value in g
  for (const PostOp& p : grp.post) {
    const Node& n = g.node(p.node);
    std::vector<ValueId> pins;
    for (ValueId v : n.inputs) pins.push_back(v == was ? chain : operand(v));
    chain = pg.add(n.kind, pins, n.attrs, n.name);
    was = n.outputs[0];
  }
  pg.set_outputs({chain});
  return pg;
}

}  // namespace

bool halo_overlappable(const Graph& g, NodeId halo, const FusedGroup& consumer) {
  const Node& h = g.node(halo);
  const Node& root = g.node(consumer.root);
  if (h.kind != OpKind::kHaloExchange || root.inputs.empty() || root.inputs[0] != h.outputs[0]) return false;
  for (size_t i = 1; i < root.inputs.size(); ++i)
    if (root.inputs[i] == h.outputs[0] || (root.inputs[i] != kNoValue && !g.value(root.inputs[i]).constant))
      return false;
  if (g.type(h.outputs[0]).dtype != DType::kF32 || g.type(consumer.output(g)).dtype != DType::kF32) return false;
  const int64_t axis = ops::normalize_axis(HaloExchangeAttrs::of(h).axis, g.type(h.inputs[0]).rank());
  if (!window_rows_of(root, axis)) return false;
  ValueId chain = root.outputs[0];
  for (const PostOp& p : consumer.post) {
    if (p.other != kNoValue || !p.members.empty()) return false;
    for (ValueId v : g.node(p.node).inputs)
      if (v != kNoValue && v != chain && !g.value(v).constant) return false;
    chain = g.node(p.node).outputs[0];
  }
  return true;
}

std::unique_ptr<Kernel> make_halo_overlap_kernel(const Graph& g, NodeId halo, const FusedGroup& consumer,
                                                 std::unique_ptr<Kernel>& halo_kernel,
                                                 std::unique_ptr<OnednnKernel>& consumer_kernel, const Md& out_md,
                                                 const std::shared_ptr<Onednn>& dnn) {
  const Node& h = g.node(halo);
  const Node& root = g.node(consumer.root);
  HaloOf ho = halo_of(g, h);
  WindowRows w = *window_rows_of(root, ho.dim);
  HaloSplit split = split_halo_rows(w, ho.band);
  const TensorType& xt = g.type(h.outputs[0]);
  ValueId y = consumer.output(g);

  auto k = std::make_unique<HaloOverlapKernel>();
  k->dnn = dnn;
  k->xp = h.outputs[0];
  k->y = y;
  int64_t inner = 1;
  for (int64_t d = 0; d < xt.rank(); ++d) {
    if (d < ho.dim) k->outer *= xt.shape[static_cast<size_t>(d)];
    if (d > ho.dim) inner *= xt.shape[static_cast<size_t>(d)];
  }
  k->xp_rows = ho.band.total();
  k->inner_bytes = inner * static_cast<int64_t>(dtype_size(xt.dtype));
  k->halo_at = k->total;
  k->total += aligned(halo_kernel->scratch_bytes());
  k->main_at = k->total;
  k->total += aligned(consumer_kernel->scratch_bytes());
  k->xp_at = k->total;
  k->total += aligned(xt.nbytes());

  Shape y_shape = g.type(y).shape;
  RowRange all{0, ho.band.total()};
  for (RowRange out : {split.top, split.bottom}) {
    if (out.empty()) continue;
    WindowPiece wp = window_piece(w, out, all);
    EdgePiece p;
    p.out = out;
    p.slice = wp.slice;
    p.graph = piece_graph(g, consumer, ho.dim, wp.slice.size(), wp);
    std::vector<FusedGroup> groups = form_groups(p.graph, p.graph.topo_order(), true, true);
    if (groups.size() != 1) return nullptr;
    p.in = p.graph.inputs()[0];
    p.out_value = p.graph.outputs()[0];
    BuildContext c{p.graph, dnn, [&p](ValueId v) { return plain_md(p.graph.type(v).shape); }, false};
    c.weights_from = consumer_kernel.get();
    Built built;
    try {
      built = make_onednn_kernel(c, groups[0]);
      if (!built.kernel) return nullptr;
      Shape piece_shape = y_shape;
      piece_shape[static_cast<size_t>(ho.dim)] = out.size();
      dnnl::memory::dims offsets(y_shape.size(), 0);
      offsets[static_cast<size_t>(ho.dim)] = out.lo;
      Md into = out_md.submemory_desc(to_dims(piece_shape), offsets);
      dnnl::reorder::primitive_desc rpd(dnn->engine, built.out_md, dnn->engine, into);
      p.place = dnnl::reorder(rpd);
      p.from = dnnl::memory(built.out_md, dnn->engine, DNNL_MEMORY_NONE);
      // The reorder writes through `into`'s offset from Y's start.
      p.to = dnnl::memory(into, dnn->engine, DNNL_MEMORY_NONE);
    } catch (const dnnl::error&) {
      return nullptr;
    }
    p.kernel = std::move(built.kernel);
    for (ValueId v = 0; v < p.graph.num_values(); ++v)
      if (p.graph.value(v).constant && p.kernel->reads(v)) p.constants.emplace_back(v, p.graph.value(v).constant->data());
    p.in_at = k->total;
    k->total += aligned(p.graph.type(p.in).nbytes());
    p.out_at = k->total;
    k->total += aligned(static_cast<int64_t>(built.out_md.get_size()));
    p.scratch_at = k->total;
    k->total += aligned(p.kernel->scratch_bytes());
    k->pieces.push_back(std::move(p));
  }

  for (ValueId v : halo_kernel->inputs) k->inputs.push_back(v);
  for (ValueId v : consumer_kernel->inputs)
    if (v != k->xp) k->inputs.push_back(v);
  k->outputs = consumer_kernel->outputs;
  k->max_threads = consumer_kernel->max_threads;
  k->node = consumer_kernel->node;
  k->op = "HaloExchange+" + consumer_kernel->op;
  k->halo = std::move(halo_kernel);
  k->main = std::move(consumer_kernel);
  return k;
}

}  // namespace tessera::runtime::cpu
