// Spatial sharding: the halo formula read from the dim map against a brute
// force over the windows, and against the halo the verifier finds at the
// seams of bands run as whole images (mutator/sharding/{spatial,halo_seams}.h).
#include "mutator/sharding/spatial.h"

#include <gtest/gtest.h>

#include <random>

#include "graph/error.h"
#include "mutator/sharding/halo_seams.h"
#include "mutator/sharding/spatial_partition.h"
#include "runtime/communicator.h"
#include "runtime/runtime.h"
#include "tests/mutator/mutator_test_util.h"

namespace tessera::mutator {
namespace {

using Ints = std::vector<int64_t>;

struct Window {
  int64_t kernel, stride, dilation, pad_begin, pad_end;
};

Attrs window_attrs(Window w, bool conv) {
  Attrs a;
  a.set("kernel_shape", Ints{w.kernel, 1});
  a.set("strides", Ints{w.stride, 1});
  a.set("pads", Ints{w.pad_begin, 0, w.pad_end, 0});
  a.set("dilations", Ints{w.dilation, 1});
  if (conv) a.set("group", int64_t{1});
  return a;
}

// x [1, C, H, 5] -> Conv (window w along H) -> out.
NodeId add_conv(Graph& g, ValueId x, Window w, int64_t m, std::mt19937_64& rng) {
  int64_t c = g.type(x).shape[1];
  ValueId wt = testing::weight(g, "w" + std::to_string(g.num_nodes()), {m, c, w.kernel, 1}, rng);
  return g.add_node(OpKind::kConv, {x, wt}, window_attrs(w, true));
}

// The input rows output rows [a, b) of the window read, by enumerating taps.
Band brute_force(Window w, int64_t H, Band out) {
  int64_t lo = H, hi = -1;
  for (int64_t o = out.lo; o < out.hi; ++o)
    for (int64_t t = 0; t < w.kernel; ++t) {
      int64_t pos = w.stride * o - w.pad_begin + w.dilation * t;
      if (pos < 0 || pos >= H) continue;
      lo = std::min(lo, pos);
      hi = std::max(hi, pos);
    }
  return {lo, hi + 1};
}

const Window kWindows[] = {{3, 1, 1, 1, 1}, {3, 2, 1, 1, 1}, {3, 1, 2, 2, 2}, {7, 2, 1, 3, 3},
                           {2, 2, 1, 0, 0}, {5, 3, 2, 1, 4}, {3, 1, 3, 0, 2}, {1, 1, 1, 0, 0}};

TEST(Spatial, BandsAreUnevenWhereRowsDoNotDivide) {
  EXPECT_EQ(row_bands(10, 4), (std::vector<Band>{{0, 3}, {3, 6}, {6, 8}, {8, 10}}));
  EXPECT_EQ(row_bands(8, 2), (std::vector<Band>{{0, 4}, {4, 8}}));
  EXPECT_THROW(row_bands(3, 4), Error);
}

// For any stride, dilation and padding, and every rank of uneven bands,
// the rows read (from the dim map) are the taps' rows.
TEST(Spatial, HaloFormulaMatchesTheWindowsTaps) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (Window w : kWindows)
    for (int64_t H : {11, 16, 23}) {
      Graph g;
      ValueId x = g.add_input("x", {DType::kF32, {1, 2, H, 5}});
      NodeId conv = add_conv(g, x, w, 3, rng);
      g.set_outputs({g.node(conv).outputs[0]});
      int64_t out_rows = g.type(g.node(conv).outputs[0]).shape[2];
      for (int64_t n : {2, 3, 4}) {
        if (out_rows < n) continue;
        std::optional<SpatialHalo> h = spatial_halo(g, {conv}, 2, n);
        ASSERT_TRUE(h);
        EXPECT_EQ(h->in_dim, 2);
        EXPECT_EQ(h->bytes_per_row, 2 * 5 * 4);
        std::vector<Band> own = row_bands(H, n);
        for (int64_t r = 0; r < n; ++r) {
          const RankHalo& rank = h->ranks[static_cast<size_t>(r)];
          // The formula is the hull of the taps' rows: it holds every row a
          // tap reads and, where a dilation skips rows at the image's edge,
          // at most d - 1 rows more.
          Band taps = brute_force(w, H, rank.out);
          std::string what = "k" + std::to_string(w.kernel) + " s" + std::to_string(w.stride) + " d" +
                             std::to_string(w.dilation) + " H" + std::to_string(H) + " n" + std::to_string(n) +
                             " rank " + std::to_string(r);
          EXPECT_LE(rank.needed.lo, taps.lo) << what;
          EXPECT_GE(rank.needed.hi, taps.hi) << what;
          EXPECT_LE(taps.lo - rank.needed.lo, w.dilation - 1) << what;
          EXPECT_LE(rank.needed.hi - taps.hi, w.dilation - 1) << what;
          if (taps.lo >= w.dilation) EXPECT_EQ(rank.needed.lo, taps.lo) << what;  // away from the top edge: exact
          if (taps.hi + w.dilation <= H) EXPECT_EQ(rank.needed.hi, taps.hi) << what;
          EXPECT_EQ(rank.from_prev, std::max<int64_t>(0, own[r].lo - rank.needed.lo));
          EXPECT_EQ(rank.from_next, std::max<int64_t>(0, rank.needed.hi - own[r].hi));
          ++checked;
        }
      }
    }
  EXPECT_GT(checked, 150);
}

// Pooling and element-wise ops read their rows through the same map; a
// weight is not indexed by the rows.
TEST(Spatial, PoolAndElementwiseRows) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 2, 16, 5}});
  NodeId pool = g.add_node(OpKind::kMaxPool, {x}, window_attrs({3, 2, 1, 1, 1}, false));
  NodeId relu = g.add_node(OpKind::kRelu, {g.node(pool).outputs[0]});
  int64_t d = -1;
  EXPECT_EQ(rows_read(g, relu, 2, {2, 5}, 0, &d), (Band{2, 5}));
  EXPECT_EQ(d, 2);
  EXPECT_EQ(rows_read(g, pool, 2, {2, 5}, 0, &d), (Band{3, 10}));
  std::mt19937_64 rng(1);
  NodeId conv = add_conv(g, g.node(relu).outputs[0], {3, 1, 1, 1, 1}, 2, rng);
  ASSERT_TRUE(rows_read(g, conv, 2, {2, 5}, 1, &d));
  EXPECT_EQ(d, -1);  // the weight
  ASSERT_TRUE(rows_read(g, conv, 1, {0, 1}, 0, &d));
  EXPECT_EQ(d, -1);  // no dim of the input follows the output channels: no spatial split there
}

// Two 3x3 convolutions with a ReLU between: one exchange of 2 rows for
// both (each neighbour recomputes one row of the middle tensor) or two
// exchanges of 1 row each.
TEST(Spatial, DeeperHaloOverAChain) {
  std::mt19937_64 rng(3);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 2, 12, 5}});
  NodeId c1 = add_conv(g, x, {3, 1, 1, 1, 1}, 2, rng);
  NodeId relu = g.add_node(OpKind::kRelu, {g.node(c1).outputs[0]});
  NodeId c2 = add_conv(g, g.node(relu).outputs[0], {3, 1, 1, 1, 1}, 2, rng);
  std::vector<NodeId> chain{c1, relu, c2};
  std::optional<SpatialHalo> once = spatial_halo(g, chain, 2, 3);
  ASSERT_TRUE(once);
  EXPECT_TRUE(once->neighbours_only);
  EXPECT_EQ(once->str(), "rank 0 rows [0,4) +0/+2, rank 1 rows [4,8) +2/+2, rank 2 rows [8,12) +2/+0");
  EXPECT_EQ(once->ranks[1].recomputed_rows, 4);  // one row of c1's and one of relu's output each side
  EXPECT_EQ(once->halo_rows(), 8);
  auto every = spatial_halos_every(g, chain, 2, 3, 1);
  ASSERT_TRUE(every);
  ASSERT_EQ(every->size(), 3u);
  EXPECT_EQ((*every)[0].halo_rows() + (*every)[1].halo_rows() + (*every)[2].halo_rows(), 8);
  EXPECT_EQ((*every)[1].halo_rows(), 0);  // the ReLU needs none
  EXPECT_EQ((*every)[0].ranks[1].recomputed_rows, 0);
  // A halo deeper than a band needs the rank beyond the neighbour.
  std::optional<SpatialHalo> thin_bands = spatial_halo(g, chain, 2, 12);
  ASSERT_TRUE(thin_bands);
  EXPECT_FALSE(thin_bands->neighbours_only);
}

// The verifier's seams give the same halo as the formula, the corrected
// split is equivalent, and a halo one row too thin is not.
TEST(Spatial, VerifierFindsTheHaloAtTheSeams) {
  for (Window w : {Window{3, 1, 1, 1, 1}, Window{3, 2, 1, 1, 1}, Window{3, 1, 2, 2, 2}, Window{7, 2, 1, 3, 3}}) {
    std::mt19937_64 rng(11);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 2, 14, 3}});
    NodeId conv = add_conv(g, x, w, 2, rng);
    g.set_outputs({g.node(conv).outputs[0]});
    for (int64_t n : {2, 3}) {
      std::string what = "k" + std::to_string(w.kernel) + " s" + std::to_string(w.stride) + " d" +
                         std::to_string(w.dilation) + " n" + std::to_string(n);
      std::optional<SeamHalo> s = halo_from_seams(g, {conv}, 2, n);
      ASSERT_TRUE(s) << what;
      EXPECT_EQ(s->split.kind, verifier::Verdict::kDiffers) << what << ": " << s->split.summary();
      std::optional<SpatialHalo> formula = spatial_halo(g, {conv}, 2, n);
      ASSERT_TRUE(formula);
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_EQ(s->ranks[r].from_prev, formula->ranks[r].from_prev) << what << " rank " << r;
        EXPECT_EQ(s->ranks[r].from_next, formula->ranks[r].from_next) << what << " rank " << r;
      }
      for (int64_t r = 0; r < n; ++r)  // seams where a halo is needed (a strided band may need none)
        EXPECT_EQ(!s->seams[r].empty(), formula->ranks[r].from_prev > 0 || formula->ranks[r].from_next > 0)
            << what << " rank " << r;
      EXPECT_TRUE(s->corrected.equivalent()) << what << ": " << s->corrected.summary();
      std::optional<SeamHalo> thin = halo_from_seams(g, {conv}, 2, n, 1);
      ASSERT_TRUE(thin);
      EXPECT_EQ(thin->corrected.kind, verifier::Verdict::kDiffers) << what << ": " << thin->corrected.summary();
    }
  }
}

// Over a chain (Conv, ReLU, Conv) the seams of the last output give the
// deeper halo.
TEST(Spatial, VerifierFindsTheDeeperHaloOfAChain) {
  std::mt19937_64 rng(5);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 2, 13, 3}});
  NodeId c1 = add_conv(g, x, {3, 1, 1, 1, 1}, 2, rng);
  NodeId relu = g.add_node(OpKind::kRelu, {g.node(c1).outputs[0]});
  NodeId c2 = add_conv(g, g.node(relu).outputs[0], {3, 1, 1, 1, 1}, 2, rng);
  g.set_outputs({g.node(c2).outputs[0]});
  std::optional<SeamHalo> s = halo_from_seams(g, {c1, relu, c2}, 2, 3);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->split.kind, verifier::Verdict::kDiffers) << s->split.summary();
  EXPECT_EQ(s->ranks[1].from_prev, 2);
  EXPECT_EQ(s->ranks[1].from_next, 2);
  EXPECT_TRUE(s->corrected.equivalent()) << s->corrected.summary();
  std::optional<SeamHalo> thin = halo_from_seams(g, {c1, relu, c2}, 2, 3, 1);
  ASSERT_TRUE(thin);
  EXPECT_NE(thin->corrected.kind, verifier::Verdict::kEquivalent) << thin->corrected.summary();
}

// CSRNet's pattern at a small size: 3x3 convs, a ReLU, a 2x2 max pool,
// a dilated conv; H = 23 so that bands are uneven.
struct Chain {
  Graph g;
  std::vector<NodeId> nodes;
};
Chain csrnet_like(int64_t H) {
  std::mt19937_64 rng(17);
  Chain c;
  ValueId x = c.g.add_input("x", {DType::kF32, {1, 2, H, 4}});
  NodeId c1 = add_conv(c.g, x, {3, 1, 1, 1, 1}, 3, rng);
  NodeId r1 = c.g.add_node(OpKind::kRelu, {c.g.node(c1).outputs[0]});
  NodeId p1 = c.g.add_node(OpKind::kMaxPool, {c.g.node(r1).outputs[0]}, window_attrs({2, 2, 1, 0, 0}, false));
  NodeId c2 = add_conv(c.g, c.g.node(p1).outputs[0], {3, 1, 2, 2, 2}, 3, rng);
  NodeId r2 = c.g.add_node(OpKind::kRelu, {c.g.node(c2).outputs[0]});
  NodeId c3 = add_conv(c.g, c.g.node(r2).outputs[0], {3, 2, 1, 1, 1}, 2, rng);
  c.nodes = {c1, r1, p1, c2, r2, c3};
  c.g.set_outputs({c.g.node(c3).outputs[0]});
  return c;
}

int count_halos(const Graph& g) {
  int k = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) k += g.node(n).kind == OpKind::kHaloExchange;
  return k;
}

// The ranks' programs, one exchange for the chain or one every k layers,
// equal the chain on one device in lockstep (f64 reference), and the bytes
// they exchange are the halo formula's.
TEST(Spatial, RankProgramsEqualTheChain) {
  Chain c = csrnet_like(23);
  for (int64_t n : {2, 3, 4})
    for (int64_t k : {0, 1, 2, 3}) {
      std::optional<SpatialPlan> plan = spatial_plan(c.g, c.nodes, 2, DeviceMesh::parse("tp=" + std::to_string(n)), k);
      if (!plan) {  // only where a halo is deeper than a neighbour's band
        auto segments = spatial_halos_every(c.g, c.nodes, 2, n, k == 0 ? static_cast<int64_t>(c.nodes.size()) : k);
        ASSERT_TRUE(segments) << "n " << n << " k " << k;
        bool fits = true;
        for (const SpatialHalo& h : *segments) fits = fits && h.neighbours_only;
        EXPECT_FALSE(fits) << "n " << n << " k " << k;
        continue;
      }
      EXPECT_LT(spatial_plan_error(c.g, c.nodes, *plan, 5), 1e-9) << "n " << n << " k " << k;
      int want_exchanges = k == 0 ? 1 : k == 1 ? 4 : k == 2 ? 3 : 2;  // the ReLUs and the pool alone need none
      if (k == 1) want_exchanges = 4;  // c1, p1 (odd bands), c2, c3
      EXPECT_GE(count_halos(plan->ranks[0]), k == 0 ? 1 : 2) << "n " << n << " k " << k;
      EXPECT_LE(count_halos(plan->ranks[0]), want_exchanges) << "n " << n << " k " << k;
      int64_t bytes = 0;
      for (const SpatialHalo& h : plan->exchanges) bytes += h.halo_bytes();
      EXPECT_EQ(plan->halo_bytes(), bytes);
      EXPECT_GT(bytes, 0);
    }
  // Once for the chain moves fewer messages and more rows than every layer.
  auto once = spatial_plan(c.g, c.nodes, 2, DeviceMesh::parse("tp=2"), 0);
  auto each = spatial_plan(c.g, c.nodes, 2, DeviceMesh::parse("tp=2"), 1);
  ASSERT_TRUE(once && each);
  EXPECT_GT(once->exchanges[0].halo_rows() * once->exchanges[0].bytes_per_row, 0);
  EXPECT_LT(once->exchanges.size(), each->exchanges.size());
}

// The ranks' programs compiled for the CPU runtime as threads of one
// process (the HaloExchange kernel over the in-process communicator), each
// band equal to the chain's within f32 tolerance.
TEST(Spatial, RankProgramsRunOnTheCpuRuntime) {
  Chain c = csrnet_like(23);
  Graph whole = chain_program(c.g, c.nodes);
  std::mt19937_64 rng(9);
  Tensor x = testing::random_tensor(DType::kF32, {1, 2, 23, 4}, rng);
  Tensor want = evaluate(whole, {x})[0];
  for (int64_t n : {2, 3})
    for (int64_t k : {0, 1}) {
      DeviceMesh mesh = DeviceMesh::parse("tp=" + std::to_string(n));
      std::optional<SpatialPlan> plan = spatial_plan(c.g, c.nodes, 2, mesh, k);
      ASSERT_TRUE(plan);
      runtime::InProcessWorld world(mesh);
      std::vector<Tensor> got(static_cast<size_t>(n));
      world.run([&](int64_t r) {
        runtime::RunOptions o;
        o.threads = 1;
        o.communicator = world.communicator(r);
        runtime::ExecutablePlan p = runtime::ExecutablePlan::compile(plan->ranks[static_cast<size_t>(r)], o);
        Band in = plan->in_bands[static_cast<size_t>(r)];
        Graph cut;
        ValueId xi = cut.add_input("x", x.type());
        Attrs s;
        s.set("starts", Ints{in.lo});
        s.set("ends", Ints{in.hi});
        s.set("axes", Ints{2});
        s.set("steps", Ints{1});
        cut.set_outputs({cut.add(OpKind::kSlice, {xi}, s)});
        got[static_cast<size_t>(r)] = p.run({evaluate(cut, {x})[0]})[0];
      });
      for (int64_t r = 0; r < n; ++r) {
        Band out = plan->out_bands[static_cast<size_t>(r)];
        const Tensor& mine = got[static_cast<size_t>(r)];
        ASSERT_EQ(mine.type().shape[2], out.size());
        int64_t W = want.type().shape[3], C = want.type().shape[1], H = want.type().shape[2];
        double worst = 0;
        for (int64_t ch = 0; ch < C; ++ch)
          for (int64_t h = 0; h < out.size(); ++h)
            for (int64_t w = 0; w < W; ++w)
              worst = std::max(worst, std::fabs(mine.get_double((ch * out.size() + h) * W + w) -
                                                want.get_double((ch * H + out.lo + h) * W + w)));
        EXPECT_LT(worst, 1e-4) << "n " << n << " k " << k << " rank " << r;
      }
    }
}

}  // namespace
}  // namespace tessera::mutator
