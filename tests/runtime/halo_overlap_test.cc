// The overlapped lowering of HaloExchange + window op
// (runtime/cpu/halo_overlap.h): rank programs of a spatially split window
// op, run as threads of an InProcessWorld with overlap on and off, give the
// same bits on every rank, the overlapped kernel is really formed, and the
// ranks' bands put together equal the unsplit op run on one device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "graph/halo_rows.h"
#include "runtime/communicator.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using testing::attrs;

struct WindowCase {
  const char* name;
  OpKind kind;
  int64_t k, s, d, p;
  bool relu = false;           // a fused post-op
  int64_t count_include_pad = 0;  // AveragePool
};

Attrs window_attrs(const WindowCase& c, int64_t pad_top, int64_t pad_bottom) {
  Attrs a = attrs({{"kernel_shape", Ints{c.k, c.k}},
                   {"strides", Ints{c.s, c.s}},
                   {"dilations", Ints{c.d, c.d}},
                   {"pads", Ints{pad_top, c.p, pad_bottom, c.p}}});
  if (c.kind == OpKind::kConv) a.set("group", int64_t{1});
  else a.set("ceil_mode", int64_t{0});
  if (c.kind == OpKind::kAveragePool) a.set("count_include_pad", c.count_include_pad);
  return a;
}

// The op (with its post-op) over x, in g.
ValueId add_window(Graph& g, const WindowCase& c, ValueId x, const Tensor& w, const Tensor& b, int64_t pt, int64_t pb) {
  std::vector<ValueId> ins = {x};
  if (c.kind == OpKind::kConv) {
    ins.push_back(g.add_constant("w", w));
    ins.push_back(g.add_constant("b", b));
  }
  ValueId y = g.add(c.kind, ins, window_attrs(c, pt, pb), "window");
  return c.relu ? g.add(OpKind::kRelu, {y}, {}, "relu") : y;
}

// One rank's rows: its own input rows, the halo and padding its output band reads.
struct RankRows {
  RowRange own, out;
  int64_t before = 0, after = 0, pad_top = 0, pad_bottom = 0;
};

// Rank r's output rows are those whose centre tap lies in its own (uneven)
// band of the input; their windows reach `before` rows into the previous
// band and `after` into the next, or the image's padding.
std::vector<RankRows> split_rows(const WindowCase& c, int64_t h, int64_t n) {
  WindowRows w{c.k, c.s, c.d, c.p, c.p};
  int64_t out = w.out_rows(h);
  std::vector<RankRows> rs(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) rs[static_cast<size_t>(r)].own = {h * r / n, h * (r + 1) / n};
  for (int64_t o = 0; o < out; ++o) {
    int64_t centre = std::clamp<int64_t>(c.s * o - c.p + c.d * (c.k - 1) / 2, 0, h - 1);
    int64_t r = 0;
    while (centre >= rs[static_cast<size_t>(r)].own.hi) ++r;
    RowRange& band = rs[static_cast<size_t>(r)].out;
    if (band.empty()) band = {o, o + 1};
    else band.hi = o + 1;
  }
  for (int64_t r = 0; r < n; ++r) {
    RankRows& q = rs[static_cast<size_t>(r)];
    RowRange reach = w.reached(q.out);
    // The window op reads X' from its first row: a band whose windows start
    // past its own rows (a stride skipping them) would need a cut first.
    EXPECT_LE(reach.lo, r == 0 ? 0 : q.own.lo) << c.name;
    EXPECT_GE(reach.hi, r + 1 == n ? h : q.own.hi) << c.name;
    q.before = r == 0 ? 0 : q.own.lo - reach.lo;
    q.after = r + 1 == n ? 0 : reach.hi - q.own.hi;
    q.pad_top = r == 0 ? -reach.lo : 0;
    q.pad_bottom = r + 1 == n ? std::max<int64_t>(0, reach.hi - h) : 0;
  }
  return rs;
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.type(), b.type()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<size_t>(a.nbytes())), 0) << what;
}

void check_case(const WindowCase& c, int64_t h, int64_t n, int64_t channels, uint32_t seed) {
  const int64_t width = 9;
  std::mt19937 rng(seed);
  Tensor image = testing::random_tensor(DType::kF32, {1, channels, h, width}, rng);
  int64_t oc = c.kind == OpKind::kConv ? 32 : channels;
  Tensor w = testing::random_tensor(DType::kF32, {oc, channels, c.k, c.k}, rng);
  Tensor b = testing::random_tensor(DType::kF32, {oc}, rng);
  std::vector<RankRows> rows = split_rows(c, h, n);
  DeviceMesh mesh = DeviceMesh::parse("tp=" + std::to_string(n));
  Ints before, after;
  for (const RankRows& q : rows) {
    before.push_back(q.before);
    after.push_back(q.after);
  }
  std::vector<Graph> programs;
  std::vector<Tensor> bands;
  for (int64_t r = 0; r < n; ++r) {
    const RankRows& q = rows[static_cast<size_t>(r)];
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, channels, q.own.size(), width}});
    Attrs ha = testing::collective_attrs(mesh, 0, {{"axis", 2}, {"coordinate", r}});
    ha.set("before", before);
    ha.set("after", after);
    ValueId xp = g.add(OpKind::kHaloExchange, {x}, ha, "halo");
    g.set_outputs({add_window(g, c, xp, w, b, q.pad_top, q.pad_bottom)});
    programs.push_back(std::move(g));
    Tensor band(DType::kF32, {1, channels, q.own.size(), width});
    for (int64_t ch = 0; ch < channels; ++ch)
      std::memcpy(band.mutable_data() + ch * q.own.size() * width * 4,
                  image.data() + (ch * h + q.own.lo) * width * 4, static_cast<size_t>(q.own.size() * width * 4));
    bands.push_back(band);
  }
  auto run = [&](bool overlap, std::vector<bool>* fused) {
    InProcessWorld world(mesh);
    std::vector<Tensor> got(static_cast<size_t>(n));
    if (fused) fused->assign(static_cast<size_t>(n), false);
    world.run([&](int64_t r) {
      RunOptions o;
      o.threads = 1;
      o.overlap = overlap;
      o.profile = true;
      o.communicator = world.communicator(r);
      ExecutablePlan plan = ExecutablePlan::compile(programs[static_cast<size_t>(r)], o);
      got[static_cast<size_t>(r)] = plan.run({bands[static_cast<size_t>(r)]})[0];
      got[static_cast<size_t>(r)] = plan.run({bands[static_cast<size_t>(r)]})[0];  // again, over the same arena
      if (fused)
        for (const KernelProfile& k : plan.profile().kernels)
          if (k.op.rfind("HaloExchange+", 0) == 0) (*fused)[static_cast<size_t>(r)] = true;
    });
    return got;
  };
  std::vector<bool> fused;
  std::vector<Tensor> on = run(true, &fused), off = run(false, nullptr);
  std::string what = std::string(c.name) + " h=" + std::to_string(h) + " ranks=" + std::to_string(n);
  for (int64_t r = 0; r < n; ++r) {
    EXPECT_TRUE(fused[static_cast<size_t>(r)]) << what << " rank " << r << ": not lowered overlapped";
    expect_same_bits(on[static_cast<size_t>(r)], off[static_cast<size_t>(r)], what + " rank " + std::to_string(r));
  }
  // The bands, put together, are the unsplit op's output.
  Graph whole;
  ValueId x = whole.add_input("x", {DType::kF32, {1, channels, h, width}});
  WindowCase global = c;
  whole.set_outputs({add_window(whole, global, x, w, b, c.p, c.p)});
  RunOptions one;
  one.threads = 1;
  Tensor want = ExecutablePlan::compile(whole, one).run({image})[0];
  int64_t out_h = want.shape()[2], out_w = want.shape()[3];
  int64_t bad = 0;
  for (int64_t r = 0; r < n; ++r) {
    const RankRows& q = rows[static_cast<size_t>(r)];
    const Tensor& t = on[static_cast<size_t>(r)];
    ASSERT_EQ(t.shape()[2], q.out.size()) << what << " rank " << r;
    for (int64_t ch = 0; ch < t.shape()[1]; ++ch)
      for (int64_t i = 0; i < q.out.size(); ++i)
        for (int64_t j = 0; j < out_w; ++j) {
          double a = t.get_double((ch * q.out.size() + i) * out_w + j);
          double e = want.get_double((ch * out_h + q.out.lo + i) * out_w + j);
          if (std::fabs(a - e) > 1e-4 * (std::fabs(e) + 1) && bad++ == 0)
            ADD_FAILURE() << what << " rank " << r << " channel " << ch << " row " << q.out.lo + i << ": " << a
                          << " vs " << e;
        }
  }
  EXPECT_EQ(bad, 0) << what;
}

const WindowCase kCases[] = {
    {"conv3x3+relu", OpKind::kConv, 3, 1, 1, 1, true},
    {"conv3x3 stride 2", OpKind::kConv, 3, 2, 1, 1},
    {"conv3x3 dilation 2", OpKind::kConv, 3, 1, 2, 2, true},
    {"conv5x5", OpKind::kConv, 5, 1, 1, 2, true},
    {"conv1x1", OpKind::kConv, 1, 1, 1, 0},
    {"maxpool3x3 stride 2", OpKind::kMaxPool, 3, 2, 1, 1},
    {"avgpool3x3 excluding pad", OpKind::kAveragePool, 3, 1, 1, 1, false, 0},
    {"avgpool3x3 including pad", OpKind::kAveragePool, 3, 1, 1, 1, false, 1},
};

TEST(HaloOverlap, RankProgramsMatchTheUnoverlappedLoweringBitForBit) {
  uint32_t seed = 1;
  for (const WindowCase& c : kCases)
    for (int64_t n : {2, 3})
      for (int64_t h : {17, 24})  // odd heights: uneven bands
        check_case(c, h, n, 16, seed++);
}

TEST(HaloOverlap, FewChannelsReadPlainRows) {
  check_case(kCases[0], 19, 2, 3, 7);  // CSRNet's first layer: 3 channels, a plain source
}

}  // namespace
}  // namespace tessera::runtime
