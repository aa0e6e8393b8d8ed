// The GEMM model's tiles, bytes per memory level and register-block utilization.
#include "cost/gemm_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "cost/kernel_model.h"
#include "graph/graph.h"

namespace tessera::cost {
namespace {

TEST(GemmModel, DramBytesAtLeastInputsPlusOutputs) {
  for (const char* dev : {"cpu", "h100"}) {
    DeviceProfile d = builtin_profile(dev);
    CostOptions cold;
    cold.warm_cache = false;
    for (auto [m, k, n] : {std::tuple{1, 4096, 4096}, {512, 512, 512}, {3000, 70, 5000}, {64, 100000, 64}}) {
      Graph g;
      ValueId a = g.add_input("a", {DType::kF32, {m, k}});
      ValueId b = g.add_input("b", {DType::kF32, {k, n}});
      g.set_outputs({g.add(OpKind::kMatMul, {a, b}, {}, "mm")});
      KernelCost c = node_cost(g, 0, d, cold);
      double io = 4.0 * (m * k + k * n + m * n);
      EXPECT_GE(c.level_bytes.back(), io) << dev << " " << m << "x" << k << "x" << n;
      // Every level moves at least the compulsory traffic.
      for (double b : c.level_bytes) EXPECT_GE(b, io);
    }
  }
}

TEST(GemmModel, BiggerTilesNeverMoveMoreBytes) {
  GemmProblem p;
  p.m = 1000, p.n = 777, p.k = 513, p.batch = 3;
  for (int64_t tk : {0, 64, 256}) {
    double previous = INFINITY;
    for (int64_t t = 1; t <= 1024; t = t * 3 / 2 + 1) {
      for (int64_t tn : {t, 2 * t}) {
        std::vector<double> bytes = gemm_level_bytes(p, {{t, t, tk}, {t, tn, tk}});
        double larger = gemm_level_bytes(p, {{t, t, tk}, {t + 7, tn + 5, tk}})[1];
        EXPECT_LE(larger, bytes[1]) << t << " " << tn;
      }
      double b = gemm_level_bytes(p, {{t, t, tk}})[0];
      EXPECT_LE(b, previous) << "tile " << t;
      previous = b;
    }
  }
}

TEST(GemmModel, TilesGrowOutwardAndFit) {
  DeviceProfile d = builtin_profile("cpu");
  GemmProblem p;
  p.m = p.n = p.k = 4096;
  std::vector<Tile> tiles = gemm_tiles(p, d);
  ASSERT_EQ(tiles.size(), d.memory.size());
  for (size_t i = 1; i < tiles.size(); ++i) {
    EXPECT_GE(tiles[i].m, tiles[i - 1].m);
    EXPECT_GE(tiles[i].n, tiles[i - 1].n);
    // The C block fits in half of the level that holds it.
    EXPECT_LE(tiles[i].m * tiles[i].n * 4, d.memory[i - 1].capacity_bytes / 2 + 4 * (tiles[i].m + tiles[i].n));
  }
  std::vector<double> bytes = gemm_level_bytes(p, tiles);
  // Reuse grows outward: the fastest level moves the most.
  for (size_t i = 1; i < bytes.size(); ++i) EXPECT_LE(bytes[i], bytes[i - 1]);
}

// A GEMM of 16 columns (Winograd's tiles of a 14-px map) on the 6x64
// register block would pad its columns four times over; the micro-kernel
// narrows to one vector of 16 and lengthens its rows to 24 instead. A fixed
// tile (register_vector 0) keeps the padding.
TEST(GemmModel, FewColumnsNarrowTheRegisterBlock) {
  DeviceProfile d = builtin_profile("cpu");
  ASSERT_EQ(d.register_tile[1], 64);
  ASSERT_EQ(d.register_vector, 16);
  GemmProblem p;
  p.m = 240;
  p.n = 16;
  p.k = 256;
  // Work items of half the rows: one per core of the reference's two.
  ASSERT_EQ(d.units, 2);
  auto half = [&p] { return Tile{p.m / 2, p.n, 0}; };
  EXPECT_NEAR(gemm_utilization(p, d, half()), 1.0, 1e-9);  // 24 x 16 blocks: 10 rows of blocks, no padding
  p.n = 48;  // 12 x 32 or 24 x 16: 48 columns pad to 64 on the full block
  EXPECT_NEAR(gemm_utilization(p, d, half()), 1.0, 1e-9);
  d.register_vector = 0;
  EXPECT_NEAR(gemm_utilization(p, d, half()), 48.0 / 64.0, 1e-9);
  p.n = 16;
  EXPECT_NEAR(gemm_utilization(p, d, half()), 0.25, 1e-9);
  // A vector wider than a halved tile stops the narrowing at the vector.
  d.register_vector = 32;
  EXPECT_NEAR(gemm_utilization(p, d, half()), 0.5, 1e-9);
}

}  // namespace
}  // namespace tessera::cost
