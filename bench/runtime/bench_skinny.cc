// Decode-step products against this host's DRAM read bandwidth. A decode
// step's MatMuls (a few rows by a constant weight) read each weight once: at
// best they take the weight's bytes over the bandwidth.
//
// For each dtype, row count, thread count and weight shape: a plan of
// `copies` such products of one input by distinct weights, together at
// least 4 times the last-level cache (a step's layers read each weight once
// a step, so none is in cache when its product runs). Each round measures,
// in this process and one after the other, a pass of runtime::cpu::
// DramReader (threads summing a buffer 8x the last-level cache with 64-byte
// loads, which also evicts the weights) and one run of the plan (time per
// product: the run's time over `copies`). Per shape: the median bandwidth,
// the median product time and its weight bytes over that time (GB/s), and
// the median over rounds of the product's GB/s over the bandwidth of the
// pass just before it (of_dram: on shared cores both move from round to
// round, together). One JSON line per shape, or with --markdown a table.
//
// Usage: bench_skinny [--threads 1,2] [--rows 1,8] [--dtype f32,bf16]
//                     [--shapes 1024x1024,...] [--repeat N] [--markdown]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "runtime/cpu/skinny_matmul.h"
#include "runtime/runtime.h"

using namespace tessera;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

struct Result {
  std::string dtype, impl;
  int64_t rows, k, n;
  int threads, copies;
  double us, gbs, dram_gbs, of_dram;
};

Result measure(DType dt, int64_t rows, int64_t k, int64_t n, int threads, int repeat,
               const runtime::cpu::DramReader& reader) {
  int64_t weight_bytes = k * n * static_cast<int64_t>(dtype_size(dt));
  int copies = static_cast<int>(
      std::max<int64_t>(2, (4 * runtime::cpu::last_level_cache_bytes() + weight_bytes - 1) / weight_bytes));
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(-1, 1);
  Graph g;
  ValueId x = g.add_input("x", {dt, {rows, k}});
  std::vector<ValueId> outs;
  std::vector<double> w(static_cast<size_t>(k * n));
  for (double& e : w) e = u(rng) * 0.05;
  for (int c = 0; c < copies; ++c) {
    w[0] = 0.001 * c;  // distinct constants: nothing may share a copy's packing
    outs.push_back(
        g.add(OpKind::kMatMul, {x, g.add_constant("w" + std::to_string(c), Tensor::from_doubles(dt, {k, n}, w))}));
  }
  g.set_outputs(outs);
  w = {};
  runtime::RunOptions options;
  options.threads = threads;
  options.profile = true;
  runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(std::move(g), options);
  std::vector<double> xs(static_cast<size_t>(rows * k));
  for (double& e : xs) e = u(rng);
  std::vector<Tensor> in = {Tensor::from_doubles(dt, {rows, k}, xs)};
  plan.run(in);
  std::vector<double> per, bw, ratio;
  for (int r = 0; r < repeat; ++r) {
    bw.push_back(reader.pass());
    auto t0 = std::chrono::steady_clock::now();
    plan.run(in);
    per.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / copies);
    ratio.push_back(static_cast<double>(weight_bytes) / per.back() / 1e9 / bw.back());
  }
  Result res{dtype_name(dt), "", rows, k, n, threads, copies, 0, 0, 0, median(ratio)};
  if (!plan.profile().kernels.empty()) res.impl = plan.profile().kernels[0].impl;
  double t = median(per);
  res.us = t * 1e6;
  res.gbs = static_cast<double>(weight_bytes) / t / 1e9;
  res.dram_gbs = median(bw);
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> thread_list = {"1", "2"}, row_list = {"1", "8"}, dtype_list = {"f32", "bf16"};
  // Llama-style decode shapes: hidden 1024, 2048 and 4096 with their
  // projections and MLPs, a 32000-token head, a narrow KV projection.
  std::vector<std::string> shape_list = {"1024x1024", "1024x2816", "2816x1024", "2048x256",  "2048x2048",
                                         "2048x5632", "5632x2048", "4096x4096", "1024x32000"};
  int repeat = 11;
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "--markdown") {
      markdown = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_skinny: %s needs a value\n", f.c_str());
      return 2;
    }
    std::string v = argv[++i];
    if (f == "--threads") thread_list = split(v);
    else if (f == "--rows") row_list = split(v);
    else if (f == "--dtype") dtype_list = split(v);
    else if (f == "--shapes") shape_list = split(v);
    else if (f == "--repeat") repeat = std::max(1, std::stoi(v));
    else {
      std::fprintf(stderr, "bench_skinny: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (markdown)
    std::printf("| dtype | M | K x N | MB | threads | us | GB/s | DRAM GB/s | of DRAM |\n"
                "|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& threads_s : thread_list) {
    int threads = std::stoi(threads_s);
    runtime::cpu::DramReader reader(threads);
    reader.pass();  // maps its pages
    for (const std::string& d : dtype_list) {
      DType dt = d == "bf16" ? DType::kBF16 : DType::kF32;
      if (!runtime::cpu::skinny_supported(dt))
        std::fprintf(stderr, "bench_skinny: no skinny kernel for %s here\n", d.c_str());
      for (const std::string& rows_s : row_list)
        for (const std::string& shape : shape_list) {
          size_t xpos = shape.find('x');
          int64_t k = std::stoll(shape.substr(0, xpos)), n = std::stoll(shape.substr(xpos + 1));
          Result r = measure(dt, std::stoll(rows_s), k, n, threads, repeat, reader);
          double mb = static_cast<double>(k * n * static_cast<int64_t>(dtype_size(dt))) / 1e6;
          if (markdown)
            std::printf("| %s | %ld | %ldx%ld | %.1f | %d | %.1f | %.1f | %.1f | %.2f |\n", r.dtype.c_str(),
                        static_cast<long>(r.rows), static_cast<long>(k), static_cast<long>(n), mb, threads, r.us, r.gbs,
                        r.dram_gbs, r.of_dram);
          else
            std::printf("{\"dtype\": \"%s\", \"rows\": %ld, \"k\": %ld, \"n\": %ld, \"threads\": %d, \"copies\": %d, "
                        "\"impl\": \"%s\", \"us\": %.1f, \"gbs\": %.2f, \"dram_gbs\": %.2f, \"of_dram\": %.3f}\n",
                        r.dtype.c_str(), static_cast<long>(r.rows), static_cast<long>(k), static_cast<long>(n), threads,
                        r.copies, r.impl.c_str(), r.us, r.gbs, r.dram_gbs, r.of_dram);
          std::fflush(stdout);
        }
    }
  }
  return 0;
}
