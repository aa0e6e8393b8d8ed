// Decode-step products against this host's DRAM read bandwidth. A decode
// step's MatMuls (a few rows by a constant weight) read each weight once: at
// best they take the weight's bytes over the bandwidth. Measures
//  - the DRAM read bandwidth: threads sum disjoint parts of a 1 GiB buffer
//    with 512-bit loads (the best of `--repeat` passes, and the median);
//  - for each weight shape, a plan of `copies` such products of one input
//    by different weights, together well past the last-level cache (as a
//    step's layers are), so each weight comes from DRAM: the time per
//    product and its weight bytes over that time, as a share of the
//    median bandwidth.
// One JSON line per measurement.
//
// Usage: bench_skinny [--threads N] [--repeat N] [--rows M] [--dtype f32|bf16]
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/graph.h"
#include "runtime/runtime.h"

using namespace tessera;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

__attribute__((target("avx512f"))) float sum_part(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// Median and best GB/s of reading 1 GiB with `threads` threads.
std::pair<double, double> dram_read_bandwidth(int threads, int repeat) {
  const int64_t bytes = int64_t{1} << 30, n = bytes / 4;
  auto* a = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(bytes)));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = 1.0f;
  std::vector<double> gbs;
  float sink = 0;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    float s = 0;
#pragma omp parallel num_threads(threads) reduction(+ : s)
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t per = n / nt / 64 * 64;
      s += sum_part(a + t * per, t == nt - 1 ? n - t * per : per);
    }
    sink += s;
    gbs.push_back(static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  std::free(a);
  if (sink == 42) std::printf(" ");  // keeps the sums
  return {median(gbs), *std::max_element(gbs.begin(), gbs.end())};
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_num_procs(), repeat = 15;
  int64_t rows = 1;
  DType dt = DType::kF32;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--threads") threads = std::stoi(v);
    else if (f == "--repeat") repeat = std::stoi(v);
    else if (f == "--rows") rows = std::stoll(v);
    else if (f == "--dtype") dt = v == "bf16" ? DType::kBF16 : DType::kF32;
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  auto [bw, bw_best] = dram_read_bandwidth(threads, repeat);
  std::printf("{\"what\": \"dram_read\", \"threads\": %d, \"median_gbs\": %.2f, \"best_gbs\": %.2f}\n", threads, bw,
              bw_best);
  // Llama-style decode shapes (hidden 1024 and 2048, their MLPs, a 32000-token head).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1024, 1024}, {1024, 2816}, {2816, 1024},
                                                           {2048, 2048}, {2048, 5632}, {1024, 32000}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto [k, n] : shapes) {
    int64_t weight_bytes = k * n * static_cast<int64_t>(dtype_size(dt));
    int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{384} << 20) / weight_bytes));
    Graph g;
    ValueId x = g.add_input("x", {dt, {rows, k}});
    std::vector<ValueId> outs;
    std::vector<double> w(static_cast<size_t>(k * n));
    for (int c = 0; c < copies; ++c) {
      for (double& e : w) e = u(rng) * 0.05;
      outs.push_back(g.add(OpKind::kMatMul, {x, g.add_constant("w" + std::to_string(c), Tensor::from_doubles(dt, {k, n}, w))}));
    }
    g.set_outputs(outs);
    runtime::RunOptions options;
    options.threads = threads;
    options.profile = true;
    runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(g, options);
    std::vector<double> xs(static_cast<size_t>(rows * k));
    for (double& e : xs) e = u(rng);
    std::vector<Tensor> in = {Tensor::from_doubles(dt, {rows, k}, xs)};
    plan.run(in);
    std::vector<double> per;
    for (int r = 0; r < repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      plan.run(in);
      per.push_back(seconds_since(t0) / copies);
    }
    std::string impl = plan.profile().kernels.empty() ? "" : plan.profile().kernels[0].impl;
    double t = median(per), gbs = static_cast<double>(weight_bytes) / t / 1e9;
    std::printf("{\"what\": \"product\", \"dtype\": \"%s\", \"rows\": %ld, \"k\": %ld, \"n\": %ld, \"copies\": %d, "
                "\"impl\": \"%s\", \"us\": %.1f, \"gbs\": %.2f, \"of_dram\": %.2f}\n",
                dtype_name(dt), static_cast<long>(rows), static_cast<long>(k), static_cast<long>(n), copies,
                impl.c_str(), t * 1e6, gbs, gbs / bw);
  }
  return 0;
}
