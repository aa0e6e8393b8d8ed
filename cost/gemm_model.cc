#include "cost/gemm_model.h"

#include <algorithm>
#include <cmath>

#include "graph/error.h"

namespace tessera::cost {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The K panel a CPU micro-kernel accumulates before C goes back to memory
// (GotoBLAS kc; oneDNN's brgemm uses the same order of magnitude). GPU
// kernels keep C in registers for the whole K.
constexpr int64_t kCpuKPanel = 256;

}  // namespace

std::vector<double> gemm_level_bytes(const GemmProblem& p, const std::vector<Tile>& tiles) {
  TESSERA_CHECK(p.m > 0 && p.n > 0 && p.k > 0 && p.batch > 0, "empty GEMM problem");
  std::vector<double> bytes;
  double a_im2col = static_cast<double>(p.m) * p.k * p.a_bytes_per_elem;
  double a_unique = static_cast<double>(p.a_elems()) * p.a_bytes_per_elem;
  double b = static_cast<double>(p.k) * p.n * p.b_bytes_per_elem;
  double c = static_cast<double>(p.m) * p.n * p.c_bytes_per_elem;
  for (size_t i = 0; i < tiles.size(); ++i) {
    const Tile& t = tiles[i];
    TESSERA_CHECK(t.m > 0 && t.n > 0 && t.k >= 0, "bad tile");
    double a = i == 0 ? a_im2col : a_unique;
    double a_passes = static_cast<double>(ceil_div(p.n, t.n));
    double b_passes = static_cast<double>(ceil_div(p.m, t.m));
    double k_panels = t.k == 0 ? 1.0 : static_cast<double>(ceil_div(p.k, t.k));
    double c_passes = 2 * k_panels - 1;  // written once, read back for every panel after the first
    double per_gemm = a * a_passes + b * b_passes + c * c_passes;
    bytes.push_back(per_gemm * static_cast<double>(p.batch));
  }
  return bytes;
}

Tile tile_for_capacity(const GemmProblem& p, int64_t capacity_bytes, const Tile& min_tile) {
  double budget = static_cast<double>(capacity_bytes) / 2.0 / static_cast<double>(p.c_bytes_per_elem);
  int64_t side = std::max<int64_t>(1, static_cast<int64_t>(std::sqrt(budget)));
  Tile t;
  t.m = std::min(p.m, side);
  t.n = std::min(p.n, std::max(side, static_cast<int64_t>(budget / static_cast<double>(t.m))));
  t.m = std::min(p.m, std::max(t.m, static_cast<int64_t>(budget / static_cast<double>(t.n))));
  t.m = std::max(t.m, std::min(p.m, min_tile.m));
  t.n = std::max(t.n, std::min(p.n, min_tile.n));
  t.k = 0;
  return t;
}

std::vector<Tile> gemm_tiles(const GemmProblem& p, const DeviceProfile& device) {
  std::vector<Tile> tiles;
  Tile reg{device.register_tile[0], device.register_tile[1], device.kind == DeviceKind::kCpu ? kCpuKPanel : 0};
  tiles.push_back(reg);
  for (size_t i = 1; i < device.memory.size(); ++i) {
    Tile t = tile_for_capacity(p, device.memory[i - 1].capacity_bytes, reg);
    // A tile never shrinks going outwards: the outer level holds at least
    // what the inner one does.
    t.m = std::max(t.m, tiles.back().m);
    t.n = std::max(t.n, tiles.back().n);
    tiles.push_back(t);
  }
  return tiles;
}

double gemm_utilization(const GemmProblem& p, const DeviceProfile& device, const Tile& work_tile, int64_t on_units) {
  auto pad = [](int64_t x, int64_t t) { return static_cast<double>(x) / static_cast<double>(ceil_div(x, t) * t); };
  // The register block that wastes least on padding: with few columns the
  // micro-kernel narrows its column block and lengthens its row block.
  double padding = 0;
  int64_t rows = device.register_tile[0], cols = device.register_tile[1];
  for (;;) {
    padding = std::max(padding, pad(p.m, rows) * pad(p.n, cols));
    if (device.register_vector <= 0 || cols % 2 != 0 || cols / 2 < device.register_vector) break;
    cols /= 2;
    rows *= 2;
  }
  double items = static_cast<double>(p.batch * ceil_div(p.m, work_tile.m) * ceil_div(p.n, work_tile.n));
  double units = static_cast<double>(on_units > 0 ? on_units : device.units);
  double waves = std::ceil(items / units);
  return padding * (items / (waves * units));
}

}  // namespace tessera::cost
