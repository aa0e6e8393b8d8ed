// Times Tessera's runtime on one model of the suite and prints one JSON line:
// median latency, memory report, process peak RSS, and the largest relative
// error against the suite's reference outputs (output_<i>.pb, when present).
//
// Usage: bench_runtime MODEL_DIR [--backend cpu|reference] [--threads N]
//                     [--repeat N] [--warmup N] [--profile] [--serve] [--expect DIR]
// --expect DIR: compare with DIR/output_<i>.pb instead of MODEL_DIR's.
// --default-thread-line: the runtime's default one-thread line instead of this
// host's (cost::one_thread_line of its cached or detected profile), for A/B.
// --no-pin: the run's threads where the scheduler puts them
// (RunOptions::pin_threads off), for A/B.
// --serve: after the warm-up, time one run per "run" line read from stdin
// (printing its ms), and print the JSON line at end of input.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "calibrate/prepare_device.h"
#include "cost/kernel_model.h"
#include "graph/error.h"
#include "onnx_import/onnx_import.h"
#include "onnx_import/tensor_proto.h"
#include "runtime/runtime.h"

namespace fs = std::filesystem;
using namespace tessera;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: bench_runtime MODEL_DIR [--backend B] [--threads N] [--repeat N] [--warmup N] [--profile]\n"
                 "                     [--default-thread-line] [--no-pin]\n";
    return 2;
  }
  std::string dir = argv[1];
  runtime::RunOptions opt;
  int repeat = 20, warmup = 3;
  bool serve = false;
  bool default_line = false;  // A/B: the default one-thread line, not this host's
  std::string expect_dir;  // output_<i>.pb to compare with; default MODEL_DIR's
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--threads") opt.threads = std::stoi(next());
    else if (a == "--repeat") repeat = std::stoi(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--backend") opt.backend = runtime::backend_from_name(next());
    else if (a == "--profile") opt.profile = true;
    else if (a == "--no-fuse") opt.fuse = false;
    else if (a == "--no-pin") opt.pin_threads = false;
    else if (a == "--serve") serve = true;
    else if (a == "--default-thread-line") default_line = true;
    else if (a == "--expect") expect_dir = next();
    else {
      std::cerr << "unknown flag " << a << "\n";
      return 2;
    }
  }
  try {
    if (opt.backend == runtime::Backend::kCpu && !default_line) {
      // As the API does (tools/api, run_options): the host's cached or
      // detected profile prices which kernels run on one thread.
      calibrate::PrepareOptions prepare;
      prepare.calibrate = false;
      prepare.threads = opt.threads;
      opt.one_thread_line = cost::one_thread_line(calibrate::prepare_device("cpu", prepare));
    }
    std::vector<Tensor> inputs;
    double compile_ms = 0;
    // The plan takes the graph, as in a serving process: it frees each
    // constant once prepacked and keeps only the ones its kernels read.
    runtime::ExecutablePlan plan = [&] {
      Graph g = import_onnx_file(dir + "/model.onnx");
      for (size_t i = 0; i < g.inputs().size(); ++i)
        inputs.push_back(read_tensor_file(dir + "/input_" + std::to_string(i) + ".pb"));
      auto t0 = std::chrono::steady_clock::now();
      runtime::ExecutablePlan p = runtime::ExecutablePlan::compile(std::move(g), opt);
      compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      return p;
    }();
    std::vector<Tensor> outs;
    for (int i = 0; i < warmup; ++i) outs = plan.run(inputs);
    std::vector<double> ms;
    auto timed_run = [&] {
      auto s = std::chrono::steady_clock::now();
      outs = plan.run(inputs);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
      return ms.back();
    };
    if (serve) {
      // One timed run per "run" line on stdin, so that a driver can alternate
      // runs of two runtimes under the same machine load.
      std::printf("ready\n");
      std::fflush(stdout);
      std::string line;
      while (std::getline(std::cin, line) && line == "run") {
        std::printf("%.4f\n", timed_run());
        std::fflush(stdout);
      }
      if (ms.empty()) timed_run();
    } else {
      for (int i = 0; i < repeat; ++i) timed_run();
    }
    std::sort(ms.begin(), ms.end());
    double max_rel = 0;
    for (size_t j = 0; j < outs.size(); ++j) {
      std::string p = (expect_dir.empty() ? dir : expect_dir) + "/output_" + std::to_string(j) + ".pb";
      if (!fs::exists(p)) break;
      Tensor want = read_tensor_file(p);
      double scale = 0;
      for (int64_t k = 0; k < want.numel(); ++k) scale = std::max(scale, std::fabs(want.get_double(k)));
      for (int64_t k = 0; k < want.numel() && k < outs[j].numel(); ++k)
        max_rel = std::max(max_rel, std::fabs(outs[j].get_double(k) - want.get_double(k)) / std::max(scale, 1e-30));
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    runtime::MemoryReport m = plan.memory();
    std::printf(
        "{\"median_ms\": %.4f, \"compile_ms\": %.1f, \"arena_bytes\": %lld, \"intermediate_bytes\": %lld, "
        "\"weight_bytes\": %lld, \"peak_bytes\": %lld, \"max_rss_bytes\": %lld, \"kernels\": %lld, "
        "\"max_rel_err\": %.3g, \"min_ms\": %.4f}\n",
        ms[ms.size() / 2], compile_ms, static_cast<long long>(m.arena_bytes),
        static_cast<long long>(m.intermediate_bytes), static_cast<long long>(m.weight_bytes),
        static_cast<long long>(m.peak_bytes), static_cast<long long>(ru.ru_maxrss) * 1024,
        static_cast<long long>(plan.num_kernels()), max_rel, ms.front());
    if (opt.profile) std::cerr << plan.profile().table();
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
